//! Ledger entries: one per movement of a budget, never changed.

use super::{Atomic, Budget, BudgetId, EntryId, Memo, PeriodId, ReservationId, Timestamp};

/// What moved a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum EntryKind {
    /// The budget's first entry.
    OpeningDeposit,
    /// A top-up.
    Credit,
    /// A withdrawal.
    Debit,
    /// A hold taken.
    Reserve,
    /// A hold settled by spending.
    Commit,
    /// A hold returned.
    Release,
    /// A hold that ran out.
    Expire,
    /// A spend without a hold.
    Charge,
    /// A period's boundary that raised what is available to the new period's start.
    Refill,
    /// A period's boundary that lowered what is available to the new period's start.
    Forfeit,
}

impl EntryKind {
    /// Every kind, in the contract's order.
    pub(crate) const ALL: [Self; 10] = [
        Self::OpeningDeposit,
        Self::Credit,
        Self::Debit,
        Self::Reserve,
        Self::Commit,
        Self::Release,
        Self::Expire,
        Self::Charge,
        Self::Refill,
        Self::Forfeit,
    ];

    /// The kind's name, as the API and the database write it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::OpeningDeposit => "opening_deposit",
            Self::Credit => "credit",
            Self::Debit => "debit",
            Self::Reserve => "reserve",
            Self::Commit => "commit",
            Self::Release => "release",
            Self::Expire => "expire",
            Self::Charge => "charge",
            Self::Refill => "refill",
            Self::Forfeit => "forfeit",
        }
    }

    /// The kind named `name`.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A ledger entry as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerEntry {
    /// Its id; entries of a budget sort in the order they happened.
    pub(crate) id: EntryId,
    /// The budget it moved.
    pub(crate) budget_id: BudgetId,
    /// What moved it.
    pub(crate) kind: EntryKind,
    /// How much: what was credited, debited, held, spent or returned.
    pub(crate) amount: Atomic,
    /// The reservation, for the kinds that have one.
    pub(crate) reservation_id: Option<ReservationId>,
    /// A credit's or debit's note.
    pub(crate) memo: Option<Memo>,
    /// When.
    pub(crate) occurred_at: Timestamp,
    /// The budget's balance right after.
    pub(crate) balance: Atomic,
    /// The budget's available amount right after.
    pub(crate) available: Atomic,
    /// The period it fell in, for a budget with one.
    pub(crate) period_id: Option<PeriodId>,
    /// The budget a spend was made on, for an entry a spend on a budget under this one left
    /// here (`None`: a movement of this budget itself).
    pub(crate) via_budget_id: Option<BudgetId>,
}

impl LedgerEntry {
    /// A new budget's first entry: its opening deposit, under the budget's own ULID.
    pub(crate) fn opening(budget: &Budget) -> Self {
        Self {
            id: budget.id.opening_entry(),
            budget_id: budget.id.clone(),
            kind: EntryKind::OpeningDeposit,
            amount: budget.opening_deposit,
            reservation_id: None,
            memo: None,
            occurred_at: budget.created_at,
            balance: budget.opening_deposit,
            available: budget.opening_deposit,
            period_id: budget.current.as_ref().map(|p| p.id.clone()),
            via_budget_id: None,
        }
    }
}
