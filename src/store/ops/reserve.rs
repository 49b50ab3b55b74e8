//! `POST /v1/tenants/<id>/reservations`: a hold on what a budget has available, until it
//! is committed, released or expires.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{Memo, NewReservation, Reservation, ReservationId, ReservationState, TenantId};
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{Keyed, StoreError, Written};

/// A reservation request.
#[derive(Debug, Clone)]
pub(crate) struct Reserve {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// What to hold.
    pub(crate) reservation: NewReservation,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Reservation>>,
}

impl WriteOp for Reserve {
    type Output = Written<Reservation>;

    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Keeps;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn budget(&self) -> Option<&str> {
        Some(&self.reservation.budget_text)
    }

    fn publishes(&self) -> bool {
        false
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let Reserve {
            tenant,
            reservation: new,
            actor,
            keyed,
        } = self;
        w.lock_tenant(&tenant)?;
        w.keyed(keyed, |w| reserve(w, &tenant, &new, &actor))
    }
}

fn reserve<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    new: &NewReservation,
    actor: &Actor,
) -> Result<Reservation, StoreError> {
    let now = w.now();
    let mut budget = w.open_budget(tenant, new.budget_id().as_ref(), now)?;
    let id = ReservationId::from_ulid(w.next_ulid(now));
    let expires_at = now.plus_seconds(new.ttl.seconds());
    let change = rules::reserve(
        tenant,
        &budget.id,
        budget.figures,
        &id,
        new.amount,
        expires_at,
    )
    .map_err(|refusal| StoreError::from(refusal).short_on(&budget.id))?;
    // Every level takes the hold, or the refusal comes before anything is written.
    w.apply(&mut budget, change, actor, now)?;
    let reservation = Reservation {
        id,
        tenant_id: tenant.clone(),
        budget_id: budget.id.clone(),
        state: ReservationState::Active,
        amount: new.amount,
        memo: new.memo.clone(),
        created_at: now,
        expires_at,
    };
    w.db().send(
        "INSERT INTO reservations (id, tenant_id, budget_id, state, amount_atomic, \
         committed_atomic, memo, created_at, expires_at, settled_at) \
         VALUES (?1, ?2, ?3, 'active', ?4, NULL, ?5, ?6, ?7, NULL)",
        &[
            reservation.id.as_str().into(),
            tenant.as_str().into(),
            budget.id.as_str().into(),
            reservation.amount.into(),
            reservation.memo.as_ref().map(Memo::as_str).into(),
            Param::Text(&now.to_string()),
            Param::Text(&reservation.expires_at.to_string()),
        ],
    )?;
    w.keep_budget(budget);
    w.counts().reservation_created();
    w.lower_next_expiry(reservation.expires_at);
    Ok(reservation)
}
