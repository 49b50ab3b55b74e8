//! What moves a budget's money, as every operation writes it: what a rule decided applied
//! (figures, entry, audit event, events), a reservation's new state, the ledger's entries, and
//! a budget closed with its holds released.

use crate::audit::Actor;
use crate::domain::rules::{self, Change, Draft};
use crate::domain::{
    Atomic, Budget, BudgetState, EntryId, LedgerEntry, Memo, PeriodId, Reservation, ReservationId,
    Timestamp,
};
use crate::store::StoreError;
use crate::store::queries;
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;

impl<D: Sql> WriterState<D> {
    /// Writes what a rule decided for `budget`: its figures and its entry, if it moved money
    /// (a rule that writes no entry leaves the figures as they were: an extend), its audit
    /// event by `actor`, the event of a credit or a debit, and a `budget.available_low` for
    /// each threshold it crossed. The entry, if any.
    pub(crate) fn apply(
        &mut self,
        budget: &mut Budget,
        change: Change,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        let before = budget.figures;
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
        if let Some(entry) = &entry {
            self.publish_budget_moved(now, budget, entry)?;
            self.alert(budget, &before, now)?;
        }
        Ok(entry)
    }

    /// Closes `budget` (a close or a tombstone): every active hold returns, a `release` entry
    /// each and no event of their own; the figures are written and the budget is marked
    /// closed at `now`.
    pub(crate) fn close(&mut self, budget: &mut Budget, now: Timestamp) -> Result<(), StoreError> {
        let mut active = queries::reservations::active_in_budget(self.db(), &budget.id)?;
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
        self.end_period(budget, now)?;
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

    /// Writes the budget's figures.
    pub(crate) fn write_figures(&mut self, budget: &Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::budgets::figure_params(&budget.figures);
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
    pub(super) fn append_entry(
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
            period_id: budget.current.as_ref().map(|c| c.id.clone()),
        };
        self.insert_entry(&entry)?;
        Ok(entry)
    }

    pub(super) fn insert_entry(&mut self, entry: &LedgerEntry) -> Result<(), StoreError> {
        self.db().send(
            "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, reservation_id, \
             memo, occurred_at, balance_atomic, available_atomic, period_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
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
                entry.period_id.as_ref().map(PeriodId::as_str).into(),
            ],
        )?;
        self.counts().entry(entry.kind);
        Ok(())
    }
}
