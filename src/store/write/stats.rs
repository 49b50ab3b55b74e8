//! The counters `/metrics` shows: what the database holds by state and kind, and how the
//! writer batches. A batch counts what it changed in a [`Delta`]; [`Stats`] takes it only
//! once the batch is committed, so the counters never show what was rolled back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::{
    BudgetState, DeliveryState, EntryKind, EventType, ReservationState, TenantState,
};
use crate::store::StoreError;
use crate::store::sql::{Sql, text};
use crate::store::write::chain;

/// Tenant states, as [`TenantState::NAMES`] lists them.
const TENANT_STATES: usize = TenantState::NAMES.len();
/// Budget states, as [`BudgetState::NAMES`] lists them.
const BUDGET_STATES: usize = BudgetState::NAMES.len();
/// Reservation states, as [`ReservationState::NAMES`] lists them.
const RESERVATION_STATES: usize = ReservationState::NAMES.len();
/// Entry kinds, as [`EntryKind::ALL`] lists them.
const ENTRY_KINDS: usize = EntryKind::ALL.len();
/// Event types, as [`EventType::ALL`] lists them.
const EVENT_TYPES: usize = EventType::ALL.len();
/// Delivery states, as [`DeliveryState::NAMES`] lists them.
const DELIVERY_STATES: usize = DeliveryState::NAMES.len();

/// What one batch changed, applied to [`Stats`] once it is committed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Delta {
    /// Tenants by state; a tombstone moves one from the first to the second.
    tenants: [i64; TENANT_STATES],
    audit_events: u64,
    /// Budgets by state; a close moves one from the first to the second.
    budgets: [i64; BUDGET_STATES],
    /// Reservations by state; a settlement moves one out of `active`.
    reservations: [i64; RESERVATION_STATES],
    /// Ledger entries by kind.
    entries: [u64; ENTRY_KINDS],
    /// Events written, by type.
    events: [u64; EVENT_TYPES],
    /// Webhook deliveries by state; a delivery moves between them.
    deliveries: [i64; DELIVERY_STATES],
    /// Idempotency records erased; their tokens must leave the WAL too.
    purged: usize,
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

    /// Whether the batch erased idempotency records.
    pub(crate) fn any_purged(&self) -> bool {
        self.purged > 0
    }
}

/// Counters the writer keeps; they change only after a commit.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Tenants by state, in [`TenantState::NAMES`] order.
    pub(crate) tenants: [AtomicU64; TENANT_STATES],
    /// Budgets by state, in [`BudgetState::NAMES`] order.
    pub(crate) budgets: [AtomicU64; BUDGET_STATES],
    /// Reservations by recorded state, in [`ReservationState::NAMES`] order.
    pub(crate) reservations: [AtomicU64; RESERVATION_STATES],
    /// Ledger entries by kind, in [`EntryKind::ALL`] order.
    pub(crate) entries: [AtomicU64; ENTRY_KINDS],
    /// Events this process wrote, by type, in [`EventType::ALL`] order.
    pub(crate) events_written: [AtomicU64; EVENT_TYPES],
    /// Webhook deliveries by state, in [`DeliveryState::NAMES`] order.
    pub(crate) deliveries: [AtomicU64; DELIVERY_STATES],
    pub(crate) audit_events: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) commands: AtomicU64,
    /// WAL frames (pages) the writer's commits wrote: what a write costs in I/O (SQLite).
    pub(crate) wal_frames: Arc<AtomicU64>,
}

impl Stats {
    /// Counts what the database holds: tenants, budgets and reservations by state, entries
    /// by kind, the chain's length.
    pub(crate) fn load(&self, db: &mut impl Sql) -> Result<(), StoreError> {
        // Stores the counts of `sql`'s rows (key, count) into the slot of each key's name.
        let mut count = |sql: &str, names: &[&str], into: &[AtomicU64]| {
            let rows = db.query(sql, &[], |row| {
                let n = text(row, 1)?;
                let n = n
                    .parse::<u64>()
                    .map_err(|_| row.corrupt(1, format!("a bad count {n:?}")))?;
                Ok((text(row, 0)?.into_owned(), n))
            })?;
            for slot in into {
                slot.store(0, Ordering::Relaxed);
            }
            for (key, n) in rows {
                if let Some(i) = names.iter().position(|name| *name == key) {
                    into[i].store(n, Ordering::Relaxed);
                }
            }
            Ok::<(), StoreError>(())
        };
        count(
            "SELECT state, CAST(count(*) AS TEXT) FROM tenants GROUP BY state",
            &TenantState::NAMES,
            &self.tenants,
        )?;
        count(
            "SELECT state, CAST(count(*) AS TEXT) FROM budgets GROUP BY state",
            &BudgetState::NAMES,
            &self.budgets,
        )?;
        count(
            "SELECT state, CAST(count(*) AS TEXT) FROM reservations GROUP BY state",
            &ReservationState::NAMES,
            &self.reservations,
        )?;
        count(
            "SELECT kind, CAST(count(*) AS TEXT) FROM ledger_entries GROUP BY kind",
            &EntryKind::ALL.map(EntryKind::name),
            &self.entries,
        )?;
        count(
            "SELECT state, CAST(count(*) AS TEXT) FROM webhook_deliveries GROUP BY state",
            &DeliveryState::NAMES,
            &self.deliveries,
        )?;
        let head = chain::load_head(db)?;
        self.audit_events
            .store(u64::try_from(head.seq).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    /// Adds what a committed batch of `commands` changed.
    pub(crate) fn apply(&self, delta: &Delta, commands: usize) {
        // A negative change is added as its two's complement: the sum wraps to the count.
        let add = |counts: &[AtomicU64], changes: &[i64]| {
            for (count, change) in counts.iter().zip(changes) {
                count.fetch_add(*change as u64, Ordering::Relaxed);
            }
        };
        add(&self.tenants, &delta.tenants);
        add(&self.budgets, &delta.budgets);
        add(&self.reservations, &delta.reservations);
        add(&self.deliveries, &delta.deliveries);
        for (count, change) in self.entries.iter().zip(delta.entries) {
            count.fetch_add(change, Ordering::Relaxed);
        }
        for (count, change) in self.events_written.iter().zip(delta.events) {
            count.fetch_add(change, Ordering::Relaxed);
        }
        self.audit_events
            .fetch_add(delta.audit_events, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(commands as u64, Ordering::Relaxed);
    }
}
