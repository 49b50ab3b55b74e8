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
    /// Records up to `limit` expiries that are due at `now`, of any budget, each tenant's with
    /// every expiry and boundary of its budgets in time order ([`WriterState::catch_up_budget`]).
    ///
    /// Each tenant is caught up in a savepoint of its own: one that fails (a row that cannot
    /// be read, a budget that breaks the invariant) is logged and left due, and the others are
    /// recorded; the writer then tries again after a pause rather than at once.
    pub(crate) fn sweep(&mut self, now: Timestamp, limit: usize) -> Result<Swept, StoreError> {
        let due = queries::due::due(self.db(), now, limit)?;
        let mut swept = Swept {
            found: due.len(),
            failed: 0,
        };
        // Catching one budget up catches its whole tenant up when a hold is due.
        let mut caught_up = std::collections::BTreeSet::new();
        for reservation in due {
            if !caught_up.insert(reservation.tenant_id.clone()) {
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
                None => w.stored_budget(tenant, Some(budget))?,
            };
            if !budget.is_open() {
                return Ok(0);
            }
            let recorded = w.catch_up_budget_by(&mut budget, now, limit)?;
            w.keep_budget(budget);
            Ok(recorded)
        });
        // What the catch-up changed of the tenant's budgets and holds may have been read
        // ahead; the other tenants' copies stay good for the batch's commands.
        self.forget_ahead(Some(tenant));
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
            None => self.stored_budget_to_write(tenant, id)?,
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

    /// Records, in the order they fell due, every expiry and boundary up to `now` that moves
    /// `budget`: the holds that ran out by a boundary return before it, so each boundary
    /// sees what was available at its instant. A hold under the budget returns on it too, so
    /// when any hold is due the whole tenant is caught up in time order
    /// ([`WriterState::catch_up_tenant`]); when none is, only the budget's own boundaries are
    /// due, and they move nothing else. Cheap when nothing is due: the writer knows the
    /// soonest expiry, and the budget its next boundary. How many boundaries it recorded.
    pub(crate) fn catch_up_budget(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        self.catch_up_budget_by(budget, now, usize::MAX)
    }

    /// [`WriterState::catch_up_budget`], stopping after `limit` boundaries; what is left due
    /// then has nothing recorded after it. Nothing is recorded while a tenant is being caught
    /// up: the budget is then as of the instant being recorded.
    fn catch_up_budget_by(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        if self.recording_due() {
            return Ok(0);
        }
        if self.next_expiry() <= now
            && let Some(boundaries) = self.catch_up_tenant(budget, now, limit)?
        {
            return Ok(boundaries);
        }
        let mut boundaries = 0;
        while let Some(ends_at) = budget.current.as_ref().map(|c| c.ends_at)
            && ends_at <= now
        {
            if boundaries == limit {
                return Ok(boundaries);
            }
            self.boundary(budget, ends_at, now)?;
            boundaries += 1;
        }
        Ok(boundaries)
    }

    /// When a hold of `budget`'s tenant is due: records every expiry and boundary of the
    /// tenant's budgets up to `now` (at most `limit` boundaries) in the order they fell due,
    /// an expiry before a boundary at the same instant, and reads `budget` again as they
    /// left it. An expiry returns its hold on the budget and on each ancestor as they are at
    /// its instant, so an ancestor's boundary after it counts it returned, and one before it
    /// counts it held. How many boundaries it recorded; `None` when no hold of the tenant was
    /// due, and nothing was recorded.
    fn catch_up_tenant(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
        limit: usize,
    ) -> Result<Option<usize>, StoreError> {
        let tenant = budget.tenant_id.clone();
        let expiries = queries::due::due_in_tenant(self.db(), &tenant, now)?;
        if expiries.is_empty() {
            return Ok(None);
        }
        let boundaries = queries::due::boundaries_in_tenant(self.db(), &tenant, now)?;
        self.set_recording_due(true);
        let recorded = self.record_in_time(&tenant, expiries, boundaries, now, limit);
        self.set_recording_due(false);
        let recorded = recorded?;
        // What was read ahead of it, if anything, is older than what was recorded.
        self.take_budget_ahead(&tenant, Some(&budget.id));
        *budget = self.stored_budget(&tenant, Some(&budget.id))?;
        Ok(Some(recorded))
    }

    /// Records `expiries` and the `boundaries` due (each budget's first, with the end of its
    /// period) in time order, each boundary followed by the budget's next one if that is due
    /// too, stopping before the boundary past `limit`. How many boundaries it recorded.
    fn record_in_time(
        &mut self,
        tenant: &TenantId,
        expiries: Vec<Reservation>,
        boundaries: Vec<(Timestamp, BudgetId)>,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut expiries = expiries.into_iter().peekable();
        let mut boundaries: std::collections::BTreeSet<_> = boundaries.into_iter().collect();
        let mut recorded = 0;
        loop {
            let boundary = boundaries.first().map(|(at, _)| *at);
            match expiries.peek().map(|r| r.expires_at) {
                Some(expires_at) if boundary.is_none_or(|at| expires_at <= at) => {
                    let reservation = expiries.next().expect("peeked");
                    let mut budget = self.budget_to_move(tenant, &reservation.budget_id)?;
                    self.expire(&mut budget, reservation, now)?;
                    self.keep_budget(budget);
                }
                _ if recorded == limit => return Ok(recorded),
                _ => {
                    let Some((at, id)) = boundaries.pop_first() else {
                        return Ok(recorded);
                    };
                    let mut budget = self.budget_to_move(tenant, &id)?;
                    if budget.current.as_ref().map(|c| c.ends_at) != Some(at) {
                        continue;
                    }
                    self.boundary(&mut budget, at, now)?;
                    recorded += 1;
                    if let Some(next) = budget.current.as_ref().map(|c| c.ends_at)
                        && next <= now
                    {
                        boundaries.insert((next, id));
                    }
                    self.keep_budget(budget);
                }
            }
        }
    }

    /// Budget `id` of `tenant` as a write reads it: from what the batch read ahead, or from
    /// the database.
    pub(crate) fn budget_to_move(
        &mut self,
        tenant: &TenantId,
        id: &BudgetId,
    ) -> Result<Budget, StoreError> {
        match self.take_budget_ahead(tenant, Some(id)) {
            Some((budget, _)) => Ok(budget),
            None => self
                .stored_budget_to_write(tenant, Some(id))
                .map(|(b, _)| b),
        }
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
