//! What several operations write alike: a budget's figures, its ledger entries, a
//! reservation's new state, a budget closed, and the expiries recorded before anything else
//! touches a budget.

use crate::audit::Actor;
use crate::domain::rules::{self, Change, Draft};
use crate::domain::{
    Atomic, Budget, BudgetId, BudgetState, EntryId, LedgerEntry, Memo, Refusal, Reservation,
    ReservationId, TenantId, Timestamp,
};
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::{StoreError, queries};

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::InsufficientFunds { available } => Self::InsufficientFunds(available),
            Refusal::Overflow => Self::AmountOverflow,
            Refusal::Corrupt => Self::Internal("a stored budget breaks the invariant".into()),
            Refusal::NotActive { state } => Self::ReservationNotActive(state),
            Refusal::NotDue => Self::Internal("an expiry before the hold's time".into()),
        }
    }
}

/// What a sweep found due, and how many of those it could not record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Expiries found due.
    pub(crate) found: usize,
    /// Of those, expiries that failed and stay due.
    pub(crate) failed: usize,
}

impl<D: Sql> WriterState<D> {
    /// Records up to `limit` expiries that are due at `now`, of any budget.
    ///
    /// Each expiry runs in a savepoint of its own: one that fails (a row that cannot be read,
    /// a budget that breaks the invariant) is logged and left due, and the others are
    /// recorded; the writer then tries again after a pause rather than at once.
    pub(crate) fn sweep(&mut self, now: Timestamp, limit: usize) -> Result<Swept, StoreError> {
        let due = queries::due(self.db(), now, limit)?;
        let mut swept = Swept {
            found: due.len(),
            failed: 0,
        };
        for reservation in due {
            let id = reservation.id.clone();
            let expired = self.guarded(true, |w| {
                let mut budget =
                    queries::budget(w.db(), &reservation.tenant_id, Some(&reservation.budget_id))?;
                w.expire(&mut budget, reservation, now)
            });
            // A savepoint that could not be closed poisons the whole batch: stop here and
            // leave the error for the batch to see.
            if let Some(poisoned) = self.poisoned() {
                return Err(poisoned.clone());
            }
            if let Err(e) = expired {
                log::error!("the expiry of reservation {id} cannot be recorded: {e:?}");
                swept.failed += 1;
            }
        }
        if swept.failed == 0 && swept.found < limit {
            let soonest = queries::next_expiry(self.db())?.unwrap_or(Timestamp::MAX);
            self.set_next_expiry(soonest);
        }
        Ok(swept)
    }

    /// The tenant, if it exists and is active: `404`, then `409 tenant_tombstoned`.
    pub(crate) fn active_tenant(&mut self, tenant: &TenantId) -> Result<(), StoreError> {
        match queries::tenant_active(self.db(), tenant)? {
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
        let (mut budget, active) = queries::budget_to_write(self.db(), tenant, id)?;
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if !budget.is_open() {
            return Err(StoreError::BudgetClosed);
        }
        self.expire_due_in(&mut budget, now)?;
        Ok(budget)
    }

    /// Records the expiry of every reservation of `budget` whose time is up at `now`. Cheap
    /// when nothing anywhere is due: the writer knows the soonest expiry.
    pub(crate) fn expire_due_in(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        if self.next_expiry() > now {
            return Ok(());
        }
        for reservation in queries::due_in_budget(self.db(), &budget.id, now)? {
            self.expire(budget, reservation, now)?;
        }
        Ok(())
    }

    /// Records one expiry: the hold returns, an `expire` entry, a `reservation.expired` event
    /// by the system.
    fn expire(
        &mut self,
        budget: &mut Budget,
        mut reservation: Reservation,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let expired = rules::expire(budget.figures, &reservation.hold(), now)?;
        reservation.state = expired.state;
        self.write_reservation(&reservation)?;
        self.apply(budget, expired.change, &Actor::System, now)?;
        Ok(())
    }

    /// Writes what a rule decided for `budget`: its figures and its entry, if it moved money
    /// (a rule that writes no entry leaves the figures as they were: an extend), and its
    /// event, by `actor`. The entry, if any.
    pub(crate) fn apply(
        &mut self,
        budget: &mut Budget,
        change: Change,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        let entry = match change.entry {
            Some(draft) => {
                budget.figures = change.figures;
                self.write_figures(budget)?;
                Some(self.append_entry(budget, draft, now)?)
            }
            None => {
                debug_assert_eq!(
                    change.figures, budget.figures,
                    "a rule that writes no entry moves no figure"
                );
                None
            }
        };
        self.record(now, actor, &change.event)?;
        Ok(entry)
    }

    /// Closes `budget` (a close or a tombstone): every active hold returns, a `release` entry
    /// each and no event of their own; the figures are written and the budget is marked
    /// closed at `now`.
    pub(crate) fn close(&mut self, budget: &mut Budget, now: Timestamp) -> Result<(), StoreError> {
        let mut active = queries::active_in_budget(self.db(), &budget.id)?;
        let holds: Vec<_> = active.iter().map(Reservation::hold).collect();
        let (figures, released) = rules::release_all(budget.figures, &holds, now)?;
        for (reservation, (draft, state, after)) in active.iter_mut().zip(released) {
            budget.figures = after;
            reservation.state = state;
            self.write_reservation(reservation)?;
            self.append_entry(budget, draft, now)?;
        }
        budget.figures = figures;
        self.write_figures(budget)?;
        budget.state = BudgetState::Closed { at: now };
        self.db().send(
            "UPDATE budgets SET state = ?2, closed_at = ?3 WHERE id = ?1",
            &[
                budget.id.as_str().into(),
                budget.state.name().into(),
                Param::Text(&now.to_string()),
            ],
        )?;
        self.counts().budget_moved(&budget.state);
        Ok(())
    }

    /// Inserts a new open budget and its opening-deposit entry.
    pub(crate) fn insert_budget(&mut self, budget: &Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::figure_params(&budget.figures);
        // A clash on an open budget's name comes back as `BudgetNameTaken`.
        self.db().send(
            "INSERT INTO budgets (id, tenant_id, name, unit, state, created_at, closed_at, \
             opening_deposit_atomic, credited_atomic, debited_atomic, spent_atomic, \
             reserved_atomic) \
             VALUES (?1, ?2, ?3, ?4, 'open', ?5, NULL, ?6, ?7, ?8, ?9, ?10)",
            &[
                budget.id.as_str().into(),
                budget.tenant_id.as_str().into(),
                budget.name.as_str().into(),
                budget.unit.as_str().into(),
                Param::Text(&budget.created_at.to_string()),
                budget.opening_deposit.into(),
                credited,
                debited,
                spent,
                reserved,
            ],
        )?;
        self.counts().budget_created();
        self.insert_entry(&LedgerEntry::opening(budget))
    }

    /// Writes the budget's figures.
    pub(crate) fn write_figures(&mut self, budget: &Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::figure_params(&budget.figures);
        self.db().send(
            "UPDATE budgets SET credited_atomic = ?2, debited_atomic = ?3, \
             spent_atomic = ?4, reserved_atomic = ?5 WHERE id = ?1",
            &[
                budget.id.as_str().into(),
                credited,
                debited,
                spent,
                reserved,
            ],
        )?;
        Ok(())
    }

    /// Writes the reservation's state and expiry (only an active reservation is written), and
    /// counts a settlement.
    pub(crate) fn write_reservation(
        &mut self,
        reservation: &Reservation,
    ) -> Result<(), StoreError> {
        self.db().send(
            "UPDATE reservations SET state = ?2, committed_atomic = ?3, expires_at = ?4, \
             settled_at = ?5 WHERE id = ?1",
            &[
                reservation.id.as_str().into(),
                reservation.state.name().into(),
                reservation.state.committed().into(),
                Param::Text(&reservation.expires_at.to_string()),
                reservation
                    .state
                    .settled_at()
                    .map(|t| t.to_string())
                    .as_ref()
                    .into(),
            ],
        )?;
        self.counts().reservation_moved(&reservation.state);
        Ok(())
    }

    /// Appends the entry a rule drafted, of a movement that left `budget` with its current
    /// figures.
    fn append_entry(
        &mut self,
        budget: &Budget,
        draft: Draft,
        now: Timestamp,
    ) -> Result<LedgerEntry, StoreError> {
        let figure = |value: Option<u128>| {
            value
                .map(Atomic::new)
                .ok_or_else(|| StoreError::Internal("a movement broke the invariant".into()))
        };
        let entry = LedgerEntry {
            id: EntryId::from_ulid(self.next_ulid(now)),
            budget_id: budget.id.clone(),
            kind: draft.kind,
            amount: draft.amount,
            reservation_id: draft.reservation,
            memo: draft.memo,
            occurred_at: now,
            balance: figure(budget.figures.balance())?,
            available: figure(budget.figures.available())?,
        };
        self.insert_entry(&entry)?;
        Ok(entry)
    }

    fn insert_entry(&mut self, entry: &LedgerEntry) -> Result<(), StoreError> {
        self.db().send(
            "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, reservation_id, \
             memo, occurred_at, balance_atomic, available_atomic) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            &[
                entry.id.as_str().into(),
                entry.budget_id.as_str().into(),
                entry.kind.name().into(),
                entry.amount.into(),
                entry
                    .reservation_id
                    .as_ref()
                    .map(ReservationId::as_str)
                    .into(),
                entry.memo.as_ref().map(Memo::as_str).into(),
                Param::Text(&entry.occurred_at.to_string()),
                entry.balance.into(),
                entry.available.into(),
            ],
        )?;
        self.counts().entry(entry.kind);
        Ok(())
    }
}
