//! The counters `/metrics` shows: what the database holds by state and kind, and how the
//! writer batches. A batch counts what it changed in a [`Delta`] ([`super::delta`]);
//! [`Stats`] takes it only once the batch is committed, so the counters never show what was
//! rolled back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::{BudgetState, DeliveryState, EntryKind, ReservationState, TenantState};
use crate::store::StoreError;
use crate::store::sql::{Sql, text};
use crate::store::write::chain;
use crate::store::write::delta::{
    BUDGET_STATES, DELIVERY_STATES, Delta, ENTRY_KINDS, EVENT_TYPES, RESERVATION_STATES,
    TENANT_STATES,
};

/// The upper bounds (milliseconds) of the chaining delays' buckets; the last bucket takes
/// the rest.
pub(crate) const CHAIN_DELAY_BOUNDS_MS: [u64; 9] = [5, 10, 25, 50, 100, 250, 500, 1000, 5000];

/// The buckets: one per bound, and one above the last.
pub(crate) const CHAIN_DELAY_BUCKETS: usize = CHAIN_DELAY_BOUNDS_MS.len() + 1;

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
    /// Audit events recorded, chained or waiting for their place in the chain, as far as this
    /// process knows (another instance's show once chained).
    pub(crate) audit_events: AtomicU64,
    /// How long audit rows waited for their place in the chain, from their change to the
    /// chainer's commit (PostgreSQL): counts by upper bound, [`CHAIN_DELAY_BOUNDS_MS`].
    pub(crate) chain_delays: [AtomicU64; CHAIN_DELAY_BUCKETS],
    /// The sum of those waits, in milliseconds.
    pub(crate) chain_delay_sum_ms: AtomicU64,
    /// The longest of those waits, in milliseconds.
    pub(crate) chain_delay_max_ms: AtomicU64,
    /// How long the oldest audit row waiting for its place in the chain had waited when the
    /// chainer last looked, in milliseconds (0: none waited). Writers slow down while it grows
    /// (PostgreSQL: `store::postgres::writer`).
    pub(crate) chain_lag_ms: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) commands: AtomicU64,
    /// Of the batches, those begun on what their writer knew, in one round trip (PostgreSQL:
    /// `write::known`).
    pub(crate) batches_guarded: AtomicU64,
    /// WAL frames (pages) the writer's commits wrote: what a write costs in I/O (SQLite).
    pub(crate) wal_frames: Arc<AtomicU64>,
}

impl Stats {
    /// Counts what the database holds: tenants, budgets and reservations by state, entries
    /// by kind, the chain's length.
    pub(crate) fn load<D: Sql>(&self, db: &mut D) -> Result<(), StoreError> {
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
        let pending = chain::settle_pending(db, std::time::Duration::ZERO)?;
        self.audit_events.store(
            u64::try_from(head.seq).unwrap_or(0) + pending as u64,
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// An audit row took its place in the chain `delay_ms` after its change.
    pub(crate) fn chained(&self, delay_ms: u64) {
        let bucket = CHAIN_DELAY_BOUNDS_MS
            .iter()
            .position(|bound| delay_ms <= *bound)
            .unwrap_or(CHAIN_DELAY_BOUNDS_MS.len());
        self.chain_delays[bucket].fetch_add(1, Ordering::Relaxed);
        self.chain_delay_sum_ms
            .fetch_add(delay_ms, Ordering::Relaxed);
        self.chain_delay_max_ms
            .fetch_max(delay_ms, Ordering::Relaxed);
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
