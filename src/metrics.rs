//! Counters for `/metrics`, in the Prometheus text exposition format (version 0.0.4).
//!
//! Every label set is fixed at compile time (routes from the route table, statuses from the
//! error table), so recording is a few atomic adds with no lock and no allocation, and no
//! client can grow the number of series.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::domain::{
    BudgetState, DeliveryState, EntryKind, EventType, ReservationState, TenantState,
};
use crate::ratelimit::PRINCIPAL_LABELS;
use crate::store::{CHAIN_DELAY_BOUNDS_MS, StoreGauges};

/// The statuses this service answers with; anything else is counted as `other`.
const STATUSES: [u16; 17] = [
    200, 201, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 429, 500, 501, 503, 0,
];

/// Upper bounds of the request-duration histogram, in seconds.
pub(crate) const DURATION_BUCKETS_S: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
struct RouteCounters {
    by_status: [AtomicU64; STATUSES.len()],
    /// Non-cumulative: `buckets[i]` counts durations in `(bound[i-1], bound[i]]`; the last
    /// slot counts those above every bound.
    buckets: [AtomicU64; DURATION_BUCKETS_S.len() + 1],
    duration_sum_ns: AtomicU64,
}

/// The service's own counters. Route slots are fixed when it is made: one per routed path,
/// and the last for requests that matched none.
pub(crate) struct Metrics {
    labels: Vec<&'static str>,
    routes: Vec<RouteCounters>,
    /// Connections open now.
    connections_open: AtomicU64,
    /// Webhook attempts by outcome, in [`ATTEMPT_OUTCOMES`] order.
    attempts: [AtomicU64; ATTEMPT_OUTCOMES.len()],
    /// The age in seconds of the oldest pending delivery, as the sender last read it.
    oldest_pending_s: AtomicU64,
    /// Requests refused over a rate limit, by principal, in [`PRINCIPAL_LABELS`] order.
    rate_limited: [AtomicU64; PRINCIPAL_LABELS.len()],
}

/// The outcomes of a webhook attempt, as `/metrics` labels them.
pub(crate) const ATTEMPT_OUTCOMES: [&str; 5] = [
    "success",
    "http_error",
    "timeout",
    "connect_error",
    "refused_address",
];

impl Metrics {
    /// Counters for routes labelled `labels`, the last for requests that matched no route.
    pub(crate) fn new(labels: Vec<&'static str>) -> Self {
        assert!(!labels.is_empty(), "a slot for unmatched requests");
        let routes = labels.iter().map(|_| RouteCounters::default()).collect();
        Self {
            labels,
            routes,
            connections_open: AtomicU64::new(0),
            attempts: Default::default(),
            oldest_pending_s: AtomicU64::new(0),
            rate_limited: Default::default(),
        }
    }

    /// A request of the principal at `principal` in [`PRINCIPAL_LABELS`] was over its limit.
    pub(crate) fn rate_limited(&self, principal: usize) {
        if let Some(count) = self.rate_limited.get(principal) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A webhook attempt ended with `outcome`, one of [`ATTEMPT_OUTCOMES`].
    pub(crate) fn attempt(&self, outcome: &str) {
        if let Some(i) = ATTEMPT_OUTCOMES.iter().position(|o| *o == outcome) {
            self.attempts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The oldest pending delivery has waited `age`.
    pub(crate) fn oldest_pending(&self, age: Duration) {
        self.oldest_pending_s
            .store(age.as_secs(), Ordering::Relaxed);
    }

    /// A connection was accepted.
    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection ended.
    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Connections open now.
    pub(crate) fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// Records one answered request. `route` is an index into the labels, `None` for an
    /// unmatched path.
    pub(crate) fn observe(&self, route: Option<usize>, status: u16, elapsed: Duration) {
        let unmatched = self.routes.len() - 1;
        let counters = &self.routes[route.map_or(unmatched, |i| i.min(unmatched))];
        let status_slot = STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(STATUSES.len() - 1);
        counters.by_status[status_slot].fetch_add(1, Ordering::Relaxed);
        let seconds = elapsed.as_secs_f64();
        let bucket = DURATION_BUCKETS_S
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(DURATION_BUCKETS_S.len());
        counters.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        counters.duration_sum_ns.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The exposition text: this process's counters and the store's `gauges`.
    pub(crate) fn render(&self, gauges: &StoreGauges) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let label = |slot: usize| self.labels[slot];

        out.push_str(
            "# HELP tenantd_http_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE tenantd_http_requests_total counter\n");
        for (slot, counters) in self.routes.iter().enumerate() {
            for (i, count) in counters.by_status.iter().enumerate() {
                let count = count.load(Ordering::Relaxed);
                if count == 0 {
                    continue;
                }
                let status = match STATUSES[i] {
                    0 => "other".to_owned(),
                    s => s.to_string(),
                };
                let _ = writeln!(
                    out,
                    "tenantd_http_requests_total{{route=\"{}\",status=\"{status}\"}} {count}",
                    label(slot)
                );
            }
        }

        out.push_str("# HELP tenantd_http_request_duration_seconds Time from request head to response, by route.\n");
        out.push_str("# TYPE tenantd_http_request_duration_seconds histogram\n");
        for (slot, counters) in self.routes.iter().enumerate() {
            let route = label(slot);
            let mut cumulative = 0;
            for (i, bound) in DURATION_BUCKETS_S.iter().enumerate() {
                cumulative += counters.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "tenantd_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            cumulative += counters.buckets[DURATION_BUCKETS_S.len()].load(Ordering::Relaxed);
            let sum = counters.duration_sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "tenantd_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {cumulative}\n\
                 tenantd_http_request_duration_seconds_sum{{route=\"{route}\"}} {sum}\n\
                 tenantd_http_request_duration_seconds_count{{route=\"{route}\"}} {cumulative}"
            );
        }

        out.push_str(
            "# HELP tenantd_audit_chaining_seconds Time from a change to its audit row's place \
             in the chain, for the rows this instance chained (PostgreSQL).\n\
             # TYPE tenantd_audit_chaining_seconds histogram\n",
        );
        let mut cumulative = 0;
        for (i, bound) in CHAIN_DELAY_BOUNDS_MS.iter().enumerate() {
            cumulative += gauges.chain_delays[i];
            let _ = writeln!(
                out,
                "tenantd_audit_chaining_seconds_bucket{{le=\"{}\"}} {cumulative}",
                *bound as f64 / 1e3
            );
        }
        cumulative += gauges.chain_delays[CHAIN_DELAY_BOUNDS_MS.len()];
        let _ = writeln!(
            out,
            "tenantd_audit_chaining_seconds_bucket{{le=\"+Inf\"}} {cumulative}\n\
             tenantd_audit_chaining_seconds_sum {}\n\
             tenantd_audit_chaining_seconds_count {cumulative}\n\
             # HELP tenantd_audit_chaining_max_seconds The longest of those times.\n\
             # TYPE tenantd_audit_chaining_max_seconds gauge\n\
             tenantd_audit_chaining_max_seconds {}\n\
             # HELP tenantd_audit_chain_lag_seconds How long the oldest audit row waiting for \
             its place in the chain had waited when last looked at (PostgreSQL); writes slow \
             down while it is above 0.1.\n\
             # TYPE tenantd_audit_chain_lag_seconds gauge\n\
             tenantd_audit_chain_lag_seconds {}",
            gauges.chain_delay_sum_ms as f64 / 1e3,
            gauges.chain_delay_max_ms as f64 / 1e3,
            gauges.chain_lag_ms as f64 / 1e3
        );

        let _ = writeln!(
            out,
            "# HELP tenantd_store_queue_depth Commands waiting for the store, by queue.\n\
             # TYPE tenantd_store_queue_depth gauge\n\
             tenantd_store_queue_depth{{queue=\"write\"}} {}\n\
             tenantd_store_queue_depth{{queue=\"read\"}} {}\n\
             tenantd_store_queue_depth{{queue=\"credential\"}} {}",
            gauges.writes_queued, gauges.reads_queued, gauges.credentials_queued
        );
        let series: [(&str, &str, &str, u64); 6] = [
            (
                "tenantd_http_connections_open",
                "gauge",
                "HTTP connections open now.",
                self.connections_open(),
            ),
            (
                "tenantd_audit_events",
                "gauge",
                "Audit events recorded: chained, or waiting for their place in the chain.",
                gauges.audit_events,
            ),
            (
                "tenantd_store_batches_total",
                "counter",
                "Write transactions committed (each a batch of commands).",
                gauges.batches,
            ),
            (
                "tenantd_store_commands_total",
                "counter",
                "Write commands in committed batches.",
                gauges.commands,
            ),
            (
                "tenantd_store_batches_one_round_trip_total",
                "counter",
                "Of the committed write transactions, those on PostgreSQL begun on what their \
                 writer knew of the rows it wrote last, in one round trip.",
                gauges.batches_guarded,
            ),
            (
                "tenantd_store_wal_frames_total",
                "counter",
                "WAL frames (database pages) written by committed batches.",
                gauges.wal_frames,
            ),
        ];
        for (name, kind, help, value) in series {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        // Name, help, label, the label's values, and a count for each.
        type Labelled<'a> = (&'a str, &'a str, &'a str, &'a [&'a str], &'a [u64]);
        let labelled: [Labelled<'_>; 4] = [
            (
                "tenantd_tenants",
                "Tenants by state.",
                "state",
                &TenantState::NAMES,
                &gauges.tenants,
            ),
            (
                "tenantd_budgets",
                "Budgets by state.",
                "state",
                &BudgetState::NAMES,
                &gauges.budgets,
            ),
            (
                "tenantd_reservations",
                "Reservations by recorded state.",
                "state",
                &ReservationState::NAMES,
                &gauges.reservations,
            ),
            (
                "tenantd_ledger_entries",
                "Ledger entries by kind.",
                "kind",
                &EntryKind::ALL.map(EntryKind::name),
                &gauges.entries,
            ),
        ];
        for (name, help, label, values, counts) in labelled {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (value, count) in values.iter().zip(counts) {
                let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {count}");
            }
        }
        let name = "tenantd_webhook_deliveries";
        let _ = writeln!(
            out,
            "# HELP {name} Webhook deliveries by state.\n# TYPE {name} gauge"
        );
        for (state, count) in DeliveryState::NAMES.iter().zip(&gauges.deliveries) {
            let _ = writeln!(out, "{name}{{state=\"{state}\"}} {count}");
        }
        let name = "tenantd_webhook_attempts_total";
        let _ = writeln!(
            out,
            "# HELP {name} Webhook attempts this process made, by outcome.\n# TYPE {name} counter"
        );
        for (outcome, count) in ATTEMPT_OUTCOMES.iter().zip(&self.attempts) {
            let count = count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {count}");
        }
        let name = "tenantd_rate_limited_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests refused with 429 over their principal's rate limit.\n\
             # TYPE {name} counter"
        );
        for (principal, count) in PRINCIPAL_LABELS.iter().zip(&self.rate_limited) {
            let count = count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{principal=\"{principal}\"}} {count}");
        }
        let name = "tenantd_webhook_oldest_pending_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Age of the oldest pending webhook delivery (0 for none).\n\
             # TYPE {name} gauge\n{name} {}",
            self.oldest_pending_s.load(Ordering::Relaxed)
        );
        let name = "tenantd_events_written_total";
        let _ = writeln!(
            out,
            "# HELP {name} Events this process wrote, by type.\n# TYPE {name} counter"
        );
        for (kind, count) in EventType::NAMES.iter().zip(&gauges.events_written) {
            let _ = writeln!(out, "{name}{{type=\"{kind}\"}} {count}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_into_the_right_bucket() {
        let metrics = Metrics::new(vec!["/a", "unmatched"]);
        metrics.observe(Some(0), 200, Duration::from_micros(50));
        metrics.observe(Some(0), 200, Duration::from_millis(3));
        metrics.observe(Some(0), 599, Duration::from_secs(10));
        let counters = &metrics.routes[0];
        assert_eq!(counters.buckets[0].load(Ordering::Relaxed), 1);
        assert_eq!(counters.buckets[5].load(Ordering::Relaxed), 1);
        assert_eq!(
            counters.buckets[DURATION_BUCKETS_S.len()].load(Ordering::Relaxed),
            1
        );
        assert_eq!(counters.by_status[0].load(Ordering::Relaxed), 2);
        assert_eq!(
            counters.by_status[STATUSES.len() - 1].load(Ordering::Relaxed),
            1
        );
    }
}
