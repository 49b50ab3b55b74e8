//! A batch of operations (`ops::batch`) as the writer runs it: its operations leave the
//! budgets they wrote for the next, and its figures, entries and audit rows are kept
//! ([`super::unwritten`]) and written when it ends well; every read of a budget on the writer
//! puts what is kept over what is stored. A batch of commands keeps them so too, while its
//! commands are spends ([`WriterState::before_command`]): on SQLite always, on PostgreSQL
//! where its writes go with its `COMMIT`.

use super::state::WriterState;
use super::unwritten::Kept;
use crate::audit::{Entry, Linked};
use crate::domain::{Budget, BudgetId, LedgerEntry, Reservation, ReservationId, TenantId};
use crate::store::queries;
use crate::store::sql::Sql;
use crate::store::{StoreError, run_guarded};

impl<D: Sql> WriterState<D> {
    /// Runs `op`, a batch of operations of `tenant` (`ops::batch`), with each of its
    /// operations leaving the budgets it wrote for the next, and what they wrote kept and
    /// written when it ends well ([`super::unwritten`]): each budget's figures once, the
    /// entries and audit rows many to a statement. What they left is forgotten after it,
    /// however it ends; a panic in it is its failure.
    pub(crate) fn keeping_budgets<T>(
        &mut self,
        tenant: &TenantId,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.keeping = true;
        self.unwritten.start();
        let result = run_guarded(|| op(self)).and_then(|value| {
            self.write_unwritten()?;
            Ok(value)
        });
        // A batch that failed is rolled back whole: what it kept goes with it.
        self.unwritten.stop();
        self.ahead.forget(Some(tenant));
        self.keeping = false;
        result
    }

    /// Before a command of a batch of commands (on PostgreSQL, one whose writes go with its
    /// `COMMIT`): a command that keeps the budgets it writes (`keeps`: a spend,
    /// [`super::BudgetsAhead::Keeps`]) keeps its figures, entries and audit rows with those of
    /// the spends before it; any other first writes what they kept
    /// ([`WriterState::end_kept`]), outside its own changes, since it may read or change
    /// those rows otherwise than through the readers below. On PostgreSQL a batch that waits
    /// for each command's writes has each write as it goes.
    ///
    /// On SQLite a spend then writes nothing inside its savepoint, so the savepoint saves no
    /// page, and a batch of charges on one budget sends one `UPDATE` of it, not one a charge.
    pub(crate) fn before_command(&mut self, keeps: bool) -> Result<(), StoreError> {
        if self.keeping {
            return Ok(());
        }
        if keeps && (!D::SHARED || self.ahead.deferred()) {
            self.unwritten.resume();
            return Ok(());
        }
        let written = self.end_kept();
        if let Err(error) = &written {
            // The writes were the earlier commands': the batch fails with them.
            self.poisoned = Some(error.clone());
        }
        written
    }

    /// Writes what the spends of the batch kept, if they kept anything; nothing more is kept
    /// until the next spend ([`WriterState::before_command`]). A batch does so before its
    /// `COMMIT`, and fails if it cannot.
    pub(crate) fn end_kept(&mut self) -> Result<(), StoreError> {
        if !self.unwritten.is_on() || self.keeping {
            return Ok(());
        }
        self.write_unwritten()
    }

    /// Keeps audit row `entry` to wait for the chain with the rest of its batch (PostgreSQL),
    /// if the batch keeps its writes; gives it back to be inserted now if not.
    pub(crate) fn defer_pending(&mut self, entry: Entry) -> Option<Entry> {
        self.unwritten.defer_pending(entry)
    }

    /// Keeps `budget`'s figures to be written when its batch of operations ends, if one is
    /// running; whether they were kept (and so are not to be written now).
    pub(crate) fn defer_figures(&mut self, budget: &Budget) -> bool {
        self.unwritten.defer(budget)
    }

    /// Keeps `entry` to be inserted when its batch ends, if the batch keeps its writes now;
    /// gives it back to be inserted now if not.
    pub(crate) fn defer_entry(&mut self, entry: LedgerEntry) -> Option<LedgerEntry> {
        self.unwritten.defer_entry(entry)
    }

    /// Keeps audit row `row` to be inserted when its batch of operations ends, if one is
    /// running on SQLite; gives it back to be inserted now if not.
    pub(crate) fn defer_audit(&mut self, row: Linked) -> Option<Linked> {
        if D::SHARED {
            return Some(row);
        }
        self.unwritten.defer_audit(row)
    }

    /// What the running batch of operations kept, to be written now
    /// (`WriterState::write_unwritten`); none is kept after.
    pub(crate) fn take_unwritten(&mut self) -> Kept {
        self.unwritten.take()
    }

    /// Budget `id` of `tenant` as stored ([`queries::budgets::budget`]), with the figures the
    /// running batch of operations left it with.
    pub(crate) fn stored_budget(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
    ) -> Result<Budget, StoreError> {
        let mut budget = queries::budgets::budget(&mut self.db, tenant, id)?;
        self.unwritten.overlay(&mut budget);
        Ok(budget)
    }

    /// Budget `id` of `tenant` as a write reads it ([`queries::budgets::budget_to_write`]),
    /// with the figures the running batch of operations left it with.
    pub(crate) fn stored_budget_to_write(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
    ) -> Result<(Budget, bool), StoreError> {
        let (mut budget, active) = queries::budgets::budget_to_write(&mut self.db, tenant, id)?;
        self.unwritten.overlay(&mut budget);
        Ok((budget, active))
    }

    /// Reservation `id` of `tenant` as a settlement reads it
    /// ([`queries::reservations::reservation_to_settle`]), its budget with the figures the
    /// running batch of operations left it with.
    pub(crate) fn stored_reservation_to_settle(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Result<(Reservation, bool, Budget), StoreError> {
        // As read ahead with the batch, when the budget is still as the batch left it.
        if let Some(reservation) = self.take_reservation_ahead(tenant, id)
            && let Some((mut budget, active)) =
                self.take_budget_ahead(tenant, Some(&reservation.budget_id))
        {
            self.unwritten.overlay(&mut budget);
            return Ok((reservation, active, budget));
        }
        let (reservation, active, mut budget) =
            queries::reservations::reservation_to_settle(&mut self.db, tenant, id)?;
        self.unwritten.overlay(&mut budget);
        Ok((reservation, active, budget))
    }
}
