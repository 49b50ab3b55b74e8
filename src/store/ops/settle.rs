//! `POST …/reservations/<rid>/commit`, `…/release` and `…/extend`: an active reservation
//! spent (within or above its hold), returned, or held longer.

use crate::audit::{Actor, AuditEvent};
use crate::domain::{EntryKind, Reservation, ReservationId, ReservationState, Settle, TenantId};
use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{Keyed, StoreError, Written, queries};

/// A commit, release or extend of a reservation.
#[derive(Debug)]
pub(crate) struct SettleReservation {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// Which reservation (`None`: the path named none that could exist).
    pub(crate) reservation: Option<ReservationId>,
    /// What to do.
    pub(crate) settle: Settle,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Reservation>>,
}

impl WriteOp for SettleReservation {
    type Output = Written<Reservation>;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let SettleReservation {
            tenant,
            reservation: id,
            settle: action,
            actor,
            keyed,
        } = self;
        w.keyed(keyed, |w| settle(w, &tenant, id.as_ref(), action, &actor))
    }
}

fn settle<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    id: Option<&ReservationId>,
    settle: Settle,
    actor: &Actor,
) -> Result<Reservation, StoreError> {
    let now = w.now();
    let (mut reservation, active, mut budget) = queries::reservation_to_settle(w.db(), tenant, id)?;
    if !active {
        return Err(StoreError::TenantTombstoned);
    }
    if budget.is_open() {
        w.expire_due_in(&mut budget, now)?;
    }
    let state = reservation.effective_state(now);
    if state != ReservationState::Active {
        return Err(StoreError::ReservationNotActive(state.name()));
    }
    // An active reservation's budget is open: closing releases every reservation.
    let held = reservation.amount;
    let (event, kind, entry_amount) = match settle {
        Settle::Commit(spent) => {
            budget.figures = budget.figures.commit(held.get(), spent.get())?;
            reservation.state = ReservationState::Committed {
                amount: spent,
                at: now,
            };
            let event = AuditEvent::ReservationCommitted {
                tenant: tenant.clone(),
                id: reservation.id.clone(),
                amount: spent,
            };
            (event, Some(EntryKind::Commit), spent)
        }
        Settle::Release => {
            budget.figures = budget.figures.release(held.get())?;
            reservation.state = ReservationState::Released { at: now };
            let event = AuditEvent::ReservationReleased {
                tenant: tenant.clone(),
                id: reservation.id.clone(),
            };
            (event, Some(EntryKind::Release), held)
        }
        Settle::Extend(ttl) => {
            // A shorter TTL than the hold had brings its expiry forward.
            reservation.expires_at = now.plus_seconds(ttl.seconds());
            w.expiry_at(reservation.expires_at);
            let event = AuditEvent::ReservationExtended {
                tenant: tenant.clone(),
                id: reservation.id.clone(),
                expires_at: reservation.expires_at,
            };
            (event, None, held)
        }
    };
    w.write_reservation(&reservation)?;
    if let Some(kind) = kind {
        w.write_figures(&budget)?;
        w.append_entry(
            &budget,
            kind,
            entry_amount,
            Some(&reservation.id),
            None,
            now,
        )?;
    }
    w.record(now, actor, &event)?;
    Ok(reservation)
}
