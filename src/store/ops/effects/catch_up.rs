//! Before a budget moves: the checks that it may (its tenant active, the budget open) and
//! every expiry and period boundary that fell due on it recorded first, in the order they fell
//! due; and the sweeps that record them, in each batch, for the budgets no request touches.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{Budget, BudgetId, Reservation, TenantId, Timestamp};
use crate::store::StoreError;
use crate::store::queries;
use crate::store::sql::Sql;
use crate::store::write::state::WriterState;

/// What a sweep found due, and how many of those it could not record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Expiries found due.
    pub(crate) found: usize,
    /// Of those, expiries that failed and stay due.
    pub(crate) failed: usize,
}

impl<D: Sql> WriterState<D> {
    /// Records up to `limit` expiries that are due at `now`, of any budget, each with every
    /// boundary of its budget that fell due before it ([`WriterState::catch_up_budget`]).
    ///
    /// Each budget is caught up in a savepoint of its own: one that fails (a row that cannot
    /// be read, a budget that breaks the invariant) is logged and left due, and the others are
    /// recorded; the writer then tries again after a pause rather than at once.
    pub(crate) fn sweep(&mut self, now: Timestamp, limit: usize) -> Result<Swept, StoreError> {
        let due = queries::due::due(self.db(), now, limit)?;
        let mut swept = Swept {
            found: due.len(),
            failed: 0,
        };
        let mut caught_up = std::collections::BTreeSet::new();
        for reservation in due {
            if !caught_up.insert(reservation.budget_id.clone()) {
                continue;
            }
            let (tenant, budget) = (reservation.tenant_id, reservation.budget_id);
            if self
                .catch_up_guarded(&tenant, &budget, now, usize::MAX)?
                .is_none()
            {
                swept.failed += 1;
            }
        }
        if swept.failed == 0 && swept.found < limit {
            let soonest = queries::due::next_expiry(self.db())?.unwrap_or(Timestamp::MAX);
            self.set_next_expiry(soonest);
        }
        Ok(swept)
    }

    /// Records up to about `limit` period boundaries due at `now`, soonest first, each budget
    /// with its expiries in between ([`WriterState::catch_up_budget`]), in savepoints of their
    /// own as [`WriterState::sweep`] does.
    pub(crate) fn sweep_boundaries(
        &mut self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Swept, StoreError> {
        let due = queries::due::due_boundaries(self.db(), now, limit)?;
        let mut swept = Swept {
            found: 0,
            failed: 0,
        };
        let mut left = limit;
        for (tenant, budget) in due {
            if left == 0 {
                break;
            }
            let recorded = match self.catch_up_guarded(&tenant, &budget, now, left)? {
                Some(boundaries) => boundaries,
                None => {
                    swept.failed += 1;
                    0
                }
            };
            swept.found += recorded;
            left = left.saturating_sub(recorded.max(1));
        }
        if swept.failed == 0 && left > 0 {
            let soonest = queries::due::next_boundary(self.db())?.unwrap_or(Timestamp::MAX);
            self.set_next_boundary(soonest);
        }
        Ok(swept)
    }

    /// Catches budget `budget` up to `now` (at most `limit` boundaries) in a savepoint of its
    /// own: how many boundaries it recorded, or `None` when it failed (logged) and stays due.
    /// An error only when the savepoint could not be closed, which poisons the batch.
    fn catch_up_guarded(
        &mut self,
        tenant: &TenantId,
        budget: &BudgetId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Option<usize>, StoreError> {
        let caught_up = self.guarded(true, |w| {
            w.lock_tenant(tenant)?;
            // As the batch read it ahead, or as stored; a copy read ahead is taken either way,
            // so a return from a budget under it (an ancestor's move takes what was read
            // ahead) finds it as this catch-up leaves it.
            let mut budget = match w.take_budget_ahead(tenant, Some(budget)) {
                Some((budget, _)) => budget,
                None => queries::budgets::budget(w.db(), tenant, Some(budget))?,
            };
            if !budget.is_open() {
                return Ok(0);
            }
            let recorded = w.catch_up_budget_by(&mut budget, now, limit)?;
            w.keep_budget(&budget);
            Ok(recorded)
        });
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned.clone());
        }
        Ok(caught_up
            .inspect_err(|e| match e {
                // Another instance is writing the tenant, and catches the budget up first.
                StoreError::Busy(_) => log::debug!("budget {budget} is busy; swept later"),
                e => log::error!(
                    "the expiries and boundaries of budget {budget} cannot be recorded: {e:?}"
                ),
            })
            .ok())
    }

    /// The tenant, if it exists and is active: `404`, then `409 tenant_tombstoned`.
    pub(crate) fn active_tenant(&mut self, tenant: &TenantId) -> Result<(), StoreError> {
        match queries::tenants::tenant_active(self.db(), tenant)? {
            None => Err(StoreError::TenantNotFound),
            Some(false) => Err(StoreError::TenantTombstoned),
            Some(true) => Ok(()),
        }
    }

    /// A budget that may move now, with its due expiries recorded: `404` (tenant, budget),
    /// then `409` (`tenant_tombstoned`, `budget_closed`).
    pub(crate) fn open_budget(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
        now: Timestamp,
    ) -> Result<Budget, StoreError> {
        let (mut budget, active) = match self.take_budget_ahead(tenant, id) {
            Some(read) => read,
            None => queries::budgets::budget_to_write(self.db(), tenant, id)?,
        };
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if !budget.is_open() {
            return Err(StoreError::BudgetClosed);
        }
        self.catch_up_budget(&mut budget, now)?;
        Ok(budget)
    }

    /// Records, in the order they fell due, every expiry of a reservation of `budget` and
    /// every boundary of its period up to `now`: the holds that ran out by a boundary return
    /// before it, so each boundary sees what was available at its instant. Cheap when nothing
    /// is due: the writer knows the soonest expiry, and the budget its next boundary. How
    /// many boundaries it recorded.
    pub(crate) fn catch_up_budget(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        self.catch_up_budget_by(budget, now, usize::MAX)
    }

    /// [`WriterState::catch_up_budget`], stopping after `limit` boundaries; a budget left
    /// with a boundary due has no expiry after it recorded either.
    fn catch_up_budget_by(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut boundaries = 0;
        while let Some(ends_at) = budget.current.as_ref().map(|c| c.ends_at)
            && ends_at <= now
        {
            if boundaries == limit {
                return Ok(boundaries);
            }
            self.expire_due_by(budget, ends_at)?;
            self.boundary(budget, ends_at, now)?;
            boundaries += 1;
        }
        self.expire_due_by(budget, now)?;
        Ok(boundaries)
    }

    /// Records the expiry of every reservation of `budget` whose time is up at `by`.
    fn expire_due_by(&mut self, budget: &mut Budget, by: Timestamp) -> Result<(), StoreError> {
        if self.next_expiry() > by {
            return Ok(());
        }
        let now = self.now();
        for reservation in queries::reservations::due_in_budget(self.db(), &budget.id, by)? {
            self.expire(budget, reservation, now)?;
        }
        Ok(())
    }

    /// Records one expiry: the hold returns, an `expire` entry, a `reservation.expired` audit
    /// event by the system, and its event.
    fn expire(
        &mut self,
        budget: &mut Budget,
        mut reservation: Reservation,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let expired = rules::expire(budget.figures, &reservation.hold(), now)?;
        self.apply(budget, expired.change, &Actor::System, now)?;
        reservation.state = expired.state;
        self.write_reservation(&reservation)?;
        self.publish_reservation_expired(now, &reservation, budget)
    }
}
