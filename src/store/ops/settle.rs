//! `POST …/reservations/<rid>/commit`, `…/release` and `…/extend`: an active reservation
//! spent (within or above its hold), returned, or held longer.

use crate::audit::Actor;
use crate::domain::rules::{self, Settlement};
use crate::domain::{Reservation, ReservationId, Settle, TenantId};
use crate::store::sql::Sql;
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{Keyed, StoreError, Written};

/// A commit, release or extend of a reservation.
#[derive(Debug, Clone)]
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

    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Keeps;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn reservation(&self) -> Option<&ReservationId> {
        self.reservation.as_ref()
    }

    fn publishes(&self) -> bool {
        false
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let SettleReservation {
            tenant,
            reservation: id,
            settle: action,
            actor,
            keyed,
        } = self;
        w.lock_tenant(&tenant)?;
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
    let (mut reservation, active, mut budget) = w.stored_reservation_to_settle(tenant, id)?;
    // Read here with its reservation: what was read ahead of it is left behind.
    w.take_budget_ahead(tenant, Some(&budget.id));
    if !active {
        return Err(StoreError::TenantTombstoned);
    }
    if budget.is_open() {
        w.catch_up_budget(&mut budget, now)?;
    }
    // An active reservation's budget is open: closing releases every reservation.
    let settlement = match settle {
        Settle::Commit(spent) => Settlement::Commit(spent),
        Settle::Release => Settlement::Release,
        Settle::Extend(ttl) => Settlement::Extend(now.plus_seconds(ttl.seconds())),
    };
    let settled = rules::settle(budget.figures, &reservation.hold(), settlement, now)
        .map_err(|refusal| StoreError::from(refusal).short_on(&budget.id))?;
    // Every level takes a commit above the hold, or the refusal comes before anything is
    // written.
    w.apply(&mut budget, settled.change, actor, now)?;
    reservation.state = settled.state;
    if reservation.expires_at != settled.expires_at {
        // An extend: a shorter TTL than the hold had brings the soonest expiry forward.
        reservation.expires_at = settled.expires_at;
        w.lower_next_expiry(reservation.expires_at);
    }
    w.write_reservation(&reservation)?;
    w.keep_budget(budget);
    Ok(reservation)
}
