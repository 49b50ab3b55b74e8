//! What one batch changed, counted as it runs: [`super::stats::Stats`] takes it only once
//! the batch is committed, so the counters never show what was rolled back.

use crate::domain::{
    BudgetState, DeliveryState, EntryKind, EventType, ReservationState, TenantState,
};

/// Tenant states, as [`TenantState::NAMES`] lists them.
pub(crate) const TENANT_STATES: usize = TenantState::NAMES.len();
/// Budget states, as [`BudgetState::NAMES`] lists them.
pub(crate) const BUDGET_STATES: usize = BudgetState::NAMES.len();
/// Reservation states, as [`ReservationState::NAMES`] lists them.
pub(crate) const RESERVATION_STATES: usize = ReservationState::NAMES.len();
/// Entry kinds, as [`EntryKind::ALL`] lists them.
pub(crate) const ENTRY_KINDS: usize = EntryKind::ALL.len();
/// Event types, as [`EventType::ALL`] lists them.
pub(crate) const EVENT_TYPES: usize = EventType::ALL.len();
/// Delivery states, as [`DeliveryState::NAMES`] lists them.
pub(crate) const DELIVERY_STATES: usize = DeliveryState::NAMES.len();

/// What one batch changed, applied to [`Stats`](super::stats::Stats) once it is committed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Delta {
    /// Tenants by state; a tombstone moves one from the first to the second.
    pub(super) tenants: [i64; TENANT_STATES],
    /// Audit events appended.
    pub(super) audit_events: u64,
    /// Budgets by state; a close moves one from the first to the second.
    pub(super) budgets: [i64; BUDGET_STATES],
    /// Reservations by state; a settlement moves one out of `active`.
    pub(super) reservations: [i64; RESERVATION_STATES],
    /// Ledger entries by kind.
    pub(super) entries: [u64; ENTRY_KINDS],
    /// Events written, by type.
    pub(super) events: [u64; EVENT_TYPES],
    /// Webhook deliveries by state; a delivery moves between them.
    pub(super) deliveries: [i64; DELIVERY_STATES],
    /// Idempotency records erased; their tokens must leave the WAL too.
    pub(super) purged: usize,
}

impl Delta {
    /// A new active tenant.
    pub(crate) fn tenant_created(&mut self) {
        self.tenants[TenantState::Active.slot()] += 1;
    }

    /// A tenant moved from `active` to `to`.
    pub(crate) fn tenant_moved(&mut self, to: &TenantState) {
        self.tenants[TenantState::Active.slot()] -= 1;
        self.tenants[to.slot()] += 1;
    }

    /// A new open budget.
    pub(crate) fn budget_created(&mut self) {
        self.budgets[BudgetState::Open.slot()] += 1;
    }

    /// A budget moved from `open` to `to`.
    pub(crate) fn budget_moved(&mut self, to: &BudgetState) {
        self.budgets[BudgetState::Open.slot()] -= 1;
        self.budgets[to.slot()] += 1;
    }

    /// A new active reservation.
    pub(crate) fn reservation_created(&mut self) {
        self.reservations[ReservationState::Active.slot()] += 1;
    }

    /// A reservation moved from `active` to `to` (nothing if it stays active).
    pub(crate) fn reservation_moved(&mut self, to: &ReservationState) {
        if *to != ReservationState::Active {
            self.reservations[ReservationState::Active.slot()] -= 1;
            self.reservations[to.slot()] += 1;
        }
    }

    /// A new ledger entry of `kind`.
    pub(crate) fn entry(&mut self, kind: EntryKind) {
        let slot = EntryKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is listed");
        self.entries[slot] += 1;
    }

    /// A new event of `kind`.
    pub(crate) fn event(&mut self, kind: EventType) {
        self.events[kind.slot()] += 1;
    }

    /// A new webhook delivery, pending.
    pub(crate) fn delivery_created(&mut self) {
        self.deliveries[DeliveryState::Pending.slot()] += 1;
    }

    /// A delivery in `state` erased (with its endpoint or its event).
    pub(crate) fn delivery_erased(&mut self, state: DeliveryState) {
        self.deliveries[state.slot()] -= 1;
    }

    /// A delivery moved from `from` to `to`.
    pub(crate) fn delivery_moved(&mut self, from: DeliveryState, to: DeliveryState) {
        self.deliveries[from.slot()] -= 1;
        self.deliveries[to.slot()] += 1;
    }

    /// A new audit event.
    pub(crate) fn audit_event(&mut self) {
        self.audit_events += 1;
    }

    /// `n` idempotency records erased.
    pub(crate) fn purged(&mut self, n: usize) {
        self.purged += n;
    }

    /// The ledger entries the batch wrote, of every kind.
    pub(crate) fn entries_written(&self) -> u64 {
        self.entries.iter().sum()
    }

    /// Whether the batch erased idempotency records.
    pub(crate) fn any_purged(&self) -> bool {
        self.purged > 0
    }
}
