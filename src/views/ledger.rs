//! A budget's ledger entries, and reservations.

use serde::Serialize;

use super::{page_json, to_json};
use crate::domain::{
    Atomic, BudgetId, EntryId, LedgerEntry, Memo, Page, PeriodId, Reservation, ReservationId,
    TenantId, Timestamp,
};

/// A ledger entry.
#[derive(Serialize)]
pub(super) struct EntryView<'a> {
    id: &'a EntryId,
    budget_id: &'a BudgetId,
    kind: &'static str,
    amount_atomic: Atomic,
    reservation_id: Option<&'a ReservationId>,
    memo: Option<&'a Memo>,
    occurred_at: Timestamp,
    balance_atomic: Atomic,
    available_atomic: Atomic,
    period_id: Option<&'a PeriodId>,
    via_budget_id: Option<&'a BudgetId>,
}

impl<'a> From<&'a LedgerEntry> for EntryView<'a> {
    fn from(e: &'a LedgerEntry) -> Self {
        Self {
            id: &e.id,
            budget_id: &e.budget_id,
            kind: e.kind.name(),
            amount_atomic: e.amount,
            reservation_id: e.reservation_id.as_ref(),
            memo: e.memo.as_ref(),
            occurred_at: e.occurred_at,
            balance_atomic: e.balance,
            available_atomic: e.available,
            period_id: e.period_id.as_ref(),
            via_budget_id: e.via_budget_id.as_ref(),
        }
    }
}

/// A reservation, in its recorded state.
#[derive(Serialize)]
pub(super) struct ReservationView<'a> {
    id: &'a ReservationId,
    tenant_id: &'a TenantId,
    budget_id: &'a BudgetId,
    state: &'static str,
    amount_atomic: Atomic,
    committed_atomic: Option<Atomic>,
    memo: Option<&'a Memo>,
    created_at: Timestamp,
    expires_at: Timestamp,
    settled_at: Option<Timestamp>,
}

impl<'a> From<&'a Reservation> for ReservationView<'a> {
    fn from(r: &'a Reservation) -> Self {
        Self {
            id: &r.id,
            tenant_id: &r.tenant_id,
            budget_id: &r.budget_id,
            state: r.state.name(),
            amount_atomic: r.amount,
            committed_atomic: r.state.committed(),
            memo: r.memo.as_ref(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            settled_at: r.state.settled_at(),
        }
    }
}

/// A ledger entry.
pub(crate) fn entry_json(entry: &LedgerEntry) -> String {
    to_json(&EntryView::from(entry))
}

/// A page of ledger entries.
pub(crate) fn entries_json(page: &Page<LedgerEntry>) -> String {
    page_json::<_, EntryView<'_>, _>(page, |e| &e.id)
}

/// A reservation.
pub(crate) fn reservation_json(reservation: &Reservation) -> String {
    to_json(&ReservationView::from(reservation))
}

/// A page of reservations.
pub(crate) fn reservations_json(page: &Page<Reservation>) -> String {
    page_json::<_, ReservationView<'_>, _>(page, |r| &r.id)
}
