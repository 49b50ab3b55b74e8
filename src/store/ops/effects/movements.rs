//! What moves a budget's money, as every operation writes it: what a rule decided applied
//! (figures, entry, audit event, events) on the budget and on each of its ancestors, a
//! reservation's new state, the ledger's entries, and a budget closed with its holds released
//! at every level.

use crate::audit::Actor;
use crate::domain::rules::{self, Change, Draft, Spread};
use crate::domain::{
    ANCESTORS_MAX, Atomic, Budget, BudgetId, BudgetState, EntryId, Figures, LedgerEntry, Memo,
    PeriodId, Reservation, ReservationId, TenantId, Timestamp,
};
use crate::store::StoreError;
use crate::store::queries;
use crate::store::sql::{Param, Sql};
use crate::store::write::chain;
use crate::store::write::many::{ManyRows, SHARED_ROWS};
use crate::store::write::state::WriterState;
use crate::store::write::unwritten::Kept;

impl<D: Sql> WriterState<D> {
    /// Writes what a rule decided for `budget`: its figures and its entry, if it moved money
    /// (a rule that writes no entry leaves the figures as they were: an extend), its audit
    /// event by `actor`, the event of a credit or a debit, and a `budget.available_low` for
    /// each threshold it crossed; then, for a spend or a hold's end, the same move on each
    /// ancestor, nearest first, with its entry and its thresholds' events. Nothing is written
    /// when an ancestor cannot take it: the refusal names the nearest that cannot. The entry,
    /// if any.
    pub(crate) fn apply(
        &mut self,
        budget: &mut Budget,
        change: Change,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        let above = match (change.spread, &change.entry) {
            (Some(spread), Some(_)) => self.lift(budget, spread, now)?,
            _ => Vec::new(),
        };
        let before = budget.figures;
        let entry = match change.entry {
            Some(draft) => {
                budget.figures = change.figures;
                self.write_figures(budget)?;
                Some(self.append_entry(budget, draft, None, now)?)
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
            for (mut ancestor, figures) in above {
                let before = std::mem::replace(&mut ancestor.figures, figures);
                self.write_figures(&ancestor)?;
                let draft = Draft {
                    kind: entry.kind,
                    amount: entry.amount,
                    reservation: entry.reservation_id.clone(),
                    memo: entry.memo.clone(),
                };
                let level_entry = self.entry(&ancestor, draft, Some(&budget.id), now)?;
                self.insert_entry(level_entry)?;
                self.alert(&ancestor, &before, now)?;
                self.keep_budget(ancestor);
            }
        }
        Ok(entry)
    }

    /// The ancestors of `budget`, nearest first, each read as a write reads its budget and
    /// caught up to `now`, with its figures after `spread`; or, when one of them cannot take
    /// it, the refusal of the nearest that cannot, naming it.
    fn lift(
        &mut self,
        budget: &Budget,
        spread: Spread,
        now: Timestamp,
    ) -> Result<Vec<(Budget, Figures)>, StoreError> {
        if budget.parent_id.is_none() {
            return Ok(Vec::new());
        }
        let ancestors = self.ancestors(budget, now)?;
        let after = rules::spread_up(spread, ancestors.iter().map(|a| a.figures))
            .map_err(|(level, refusal)| StoreError::from(refusal).short_on(&ancestors[level].id))?;
        Ok(ancestors.into_iter().zip(after).collect())
    }

    /// The ancestors of `budget`, nearest first, each read (from what the batch read ahead,
    /// or from the database) and caught up to `now`. The budget was caught up first: when a
    /// hold was due, with its whole tenant, so what is left due on an ancestor is its own
    /// boundaries, which move nothing else.
    pub(crate) fn ancestors(
        &mut self,
        budget: &Budget,
        now: Timestamp,
    ) -> Result<Vec<Budget>, StoreError> {
        let tenant = &budget.tenant_id;
        let mut ancestors: Vec<Budget> = Vec::new();
        let mut parent = budget.parent_id.clone();
        while let Some(id) = parent {
            let below = ancestors.last().map_or(&budget.id, |b| &b.id);
            if ancestors.len() == ANCESTORS_MAX {
                return Err(StoreError::Internal(format!(
                    "budget {below} is under more than {ANCESTORS_MAX} levels"
                )));
            }
            let mut up = self.budget_to_move(tenant, &id).map_err(|e| match e {
                StoreError::BudgetNotFound => StoreError::Internal(format!(
                    "budget {below}'s parent {id} is not its tenant's"
                )),
                e => e,
            })?;
            if !up.is_open() {
                return Err(StoreError::Internal(format!(
                    "open budget {below} is under closed budget {id}"
                )));
            }
            self.catch_up_budget(&mut up, now)?;
            parent = up.parent_id.clone();
            ancestors.push(up);
        }
        Ok(ancestors)
    }

    /// Closes `budget` (a close or a tombstone): every active hold returns, on the budget and
    /// on each of its ancestors, a `release` entry each and no event of their own; the figures
    /// are written and the budget is marked closed at `now`.
    pub(crate) fn close(&mut self, budget: &mut Budget, now: Timestamp) -> Result<(), StoreError> {
        let mut active = queries::reservations::active_in_budget(self.db(), &budget.id)?;
        let holds: Vec<_> = active.iter().map(Reservation::hold).collect();
        let (figures, released) = rules::release_all(budget.figures, &holds, now)?;
        let mut ancestors = if active.is_empty() {
            Vec::new()
        } else {
            self.ancestors(budget, now)?
        };
        for (reservation, (draft, state, after)) in active.iter_mut().zip(released) {
            budget.figures = after;
            reservation.state = state;
            self.write_reservation(reservation)?;
            for ancestor in &mut ancestors {
                ancestor.figures = Spread::Return(draft.amount.get()).apply(ancestor.figures)?;
            }
            self.append_entry(budget, draft.clone(), None, now)?;
            for ancestor in &ancestors {
                self.append_entry(ancestor, draft.clone(), Some(&budget.id), now)?;
            }
        }
        for ancestor in ancestors {
            self.write_figures(&ancestor)?;
            self.keep_budget(ancestor);
        }
        budget.figures = figures;
        self.write_figures(budget)?;
        self.end_period(budget, now)?;
        budget.state = BudgetState::Closed { at: now };
        self.db().send(
            "UPDATE budgets SET state = ?2, closed_at = ?3 WHERE id = ?1 AND tenant_id = ?4",
            &[
                budget.id.as_str().into(),
                budget.state.name().into(),
                Param::Text(&now.to_string()),
                budget.tenant_id.as_str().into(),
            ],
        )?;
        self.counts().budget_moved(&budget.state);
        Ok(())
    }

    /// Writes the budget's figures: now, or when the running batch of operations ends
    /// ([`WriterState::defer_figures`]).
    pub(crate) fn write_figures(&mut self, budget: &Budget) -> Result<(), StoreError> {
        if self.defer_figures(budget) {
            return Ok(());
        }
        self.send_figures(&budget.id, &budget.tenant_id, &budget.figures)
    }

    /// Writes what the running batch of operations kept ([`WriterState::take_unwritten`]):
    /// each budget's figures once (on PostgreSQL many to a statement), the entries, then the
    /// audit rows (on PostgreSQL those waiting for the chain).
    pub(crate) fn write_unwritten(&mut self) -> Result<(), StoreError> {
        let Kept {
            figures,
            entries,
            audit,
            pending,
        } = self.take_unwritten();
        if D::SHARED {
            FIGURE_ROWS.insert(self.db(), &figures, |(id, _, figures)| {
                let [credited, debited, spent, reserved] = queries::budgets::figure_params(figures);
                [id.as_str().into(), credited, debited, spent, reserved]
            })?;
        } else {
            for (id, tenant, figures) in figures {
                self.send_figures(&id, &tenant, &figures)?;
            }
        }
        insert_entries(self.db(), &entries)?;
        chain::append_rows(self.db(), &audit)?;
        chain::append_pending_rows(self.db(), &pending)
    }

    /// Writes the figures of budget `id` of `tenant` now. The tenant finds the row by its
    /// key on SQLite, whose table is kept in the order of (tenant, id).
    fn send_figures(
        &mut self,
        id: &BudgetId,
        tenant: &TenantId,
        figures: &Figures,
    ) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::budgets::figure_params(figures);
        self.db().send(
            "UPDATE budgets SET credited_atomic = ?2, debited_atomic = ?3, \
             spent_atomic = ?4, reserved_atomic = ?5 WHERE id = ?1 AND tenant_id = ?6",
            &[
                id.as_str().into(),
                credited,
                debited,
                spent,
                reserved,
                tenant.as_str().into(),
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
        self.forget_reservation_ahead(&reservation.id);
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
    /// figures: its own, or (`via`) one of a spend on a budget under it. The entry.
    pub(super) fn append_entry(
        &mut self,
        budget: &Budget,
        draft: Draft,
        via: Option<&BudgetId>,
        now: Timestamp,
    ) -> Result<LedgerEntry, StoreError> {
        let entry = self.entry(budget, draft, via, now)?;
        self.insert_entry(entry.clone())?;
        Ok(entry)
    }

    /// The entry a rule drafted, as [`WriterState::append_entry`] appends it.
    fn entry(
        &mut self,
        budget: &Budget,
        draft: Draft,
        via: Option<&BudgetId>,
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
            via_budget_id: via.cloned(),
        };
        Ok(entry)
    }

    /// Inserts `entry`: now, or when the running batch ends ([`WriterState::defer_entry`]).
    pub(super) fn insert_entry(&mut self, entry: LedgerEntry) -> Result<(), StoreError> {
        self.counts().entry(entry.kind);
        match self.defer_entry(entry) {
            Some(entry) => insert_entries(self.db(), std::slice::from_ref(&entry)),
            None => Ok(()),
        }
    }
}

/// The start of a statement that inserts ledger entries.
const ENTRY_HEAD: &str = "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, \
                          reservation_id, memo, occurred_at, balance_atomic, available_atomic, \
                          period_id, via_budget_id) VALUES ";

/// The statements that insert ledger entries.
static ENTRY_ROWS: std::sync::LazyLock<ManyRows> =
    std::sync::LazyLock::new(|| ManyRows::new(ENTRY_HEAD, 11));

/// The statements that insert ledger entries where writers share the database: a batch's in
/// one statement, up to 64.
static SHARED_ENTRY_ROWS: std::sync::LazyLock<ManyRows> =
    std::sync::LazyLock::new(|| ManyRows::shaped(ENTRY_HEAD, &["{}"; 11], "", SHARED_ROWS));

/// The statements that write budgets' figures on PostgreSQL, a batch's in one statement up to
/// 64. Each row is found by its key in a `LATERAL` subquery and updated where it lies (a
/// TID scan): an `UPDATE` joined to the list by id was free to scan the whole table
/// (`queries::listed_ids`). The budgets are the batch's, their tenants locked since it began.
static FIGURE_ROWS: std::sync::LazyLock<ManyRows> = std::sync::LazyLock::new(|| {
    ManyRows::shaped(
        "UPDATE budgets AS b SET credited_atomic = v.c, debited_atomic = v.d, \
         spent_atomic = v.s, reserved_atomic = v.r \
         FROM (SELECT x.t, v.c, v.d, v.s, v.r FROM (VALUES ",
        &[
            "CAST({} AS TEXT)",
            "CAST({} AS NUMERIC)",
            "CAST({} AS NUMERIC)",
            "CAST({} AS NUMERIC)",
            "CAST({} AS NUMERIC)",
        ],
        ") AS v(id, c, d, s, r) CROSS JOIN LATERAL \
         (SELECT ctid AS t FROM budgets WHERE id = v.id LIMIT 1) x) AS v WHERE b.ctid = v.t",
        SHARED_ROWS,
    )
});

/// Inserts `entries`, in order, many to a statement.
fn insert_entries<D: Sql>(db: &mut D, entries: &[LedgerEntry]) -> Result<(), StoreError> {
    let times: Vec<String> = entries.iter().map(|e| e.occurred_at.to_string()).collect();
    let rows: Vec<(&LedgerEntry, &str)> = entries
        .iter()
        .zip(&times)
        .map(|(entry, at)| (entry, at.as_str()))
        .collect();
    let statements = if D::SHARED {
        &SHARED_ENTRY_ROWS
    } else {
        &ENTRY_ROWS
    };
    statements.insert(db, &rows, |&(entry, occurred_at)| {
        [
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
            occurred_at.into(),
            entry.balance.into(),
            entry.available.into(),
            entry.period_id.as_ref().map(PeriodId::as_str).into(),
            entry.via_budget_id.as_ref().map(BudgetId::as_str).into(),
        ]
    })
}
