//! The report: one line of the table per row, and the table with the comparisons under it,
//! in markdown.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::args::{Args, Route};
use crate::client::Tally;
use crate::scratch::psql;
use crate::server::Sample;

/// One line of the table.
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) requests_per_s: f64,
    pub(crate) hist: Histogram<u64>,
    pub(crate) tally: Tally,
    /// What the server's counters moved by over the phase, and the requests charged for it.
    pub(crate) cost: Sample,
    pub(crate) charged: u64,
    pub(crate) peak_rss_kib: u64,
}

impl Row {
    /// `value` per request charged.
    fn per_request(&self, value: u64) -> f64 {
        value as f64 / self.charged.max(1) as f64
    }
}

/// The machine the table was measured on: cores, CPU model and kernel.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), Linux {}", kernel.trim())
}

/// The table of `rows`, under a line on the machine and the run, and the comparisons the
/// rows allow under it.
pub(crate) fn render(args: &Args, rows: &[Row], db_bytes: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{}; {} connections, {:.1} s per row after {:.1} s warm-up; client and server share the machine.\n",
        machine(),
        args.connections,
        args.duration.as_secs_f64(),
        args.warmup.as_secs_f64()
    );
    if let Some(postgres) = &args.postgres {
        let version = psql(&postgres.admin, "SHOW server_version").unwrap_or_default();
        let _ = writeln!(
            out,
            "tenantd on PostgreSQL {version}: {} instance{} on one database{}, the \
             connections dealt out to them round-robin{}; server CPU and RSS are summed over \
             the instances, PostgreSQL CPU is the cluster's (every process of it).\n",
            args.instances,
            if args.instances == 1 { "" } else { "s" },
            match (args.pg_writers, args.workers) {
                (Some(n), Some(w)) => format!(" (--pg-writers {n} --workers {w})"),
                (Some(n), None) => format!(" (--pg-writers {n})"),
                (None, Some(w)) => format!(" (--workers {w})"),
                (None, None) => String::new(),
            },
            if args.route == Route::Tenant && args.instances > 1 {
                ", each spending only on its instance's tenants (--route tenant)"
            } else {
                ""
            }
        );
        out.push_str("| workload | requests/s | p50 | p99 | p99.9 | errors | server CPU µs/req | PostgreSQL CPU µs/req | commands/batch | peak server RSS |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        out.push_str("| workload | requests/s | p50 | p99 | p99.9 | errors | server CPU µs/req | WAL frames/req | peak server RSS |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    for row in rows {
        let errors = if row.tally.statuses.is_empty() {
            "0".to_owned()
        } else {
            let detail: Vec<String> = row
                .tally
                .statuses
                .iter()
                .map(|(s, n)| format!("{n}×{s}"))
                .collect();
            format!("{} ({})", row.tally.errors, detail.join(", "))
        };
        // On PostgreSQL: the cluster's CPU, and how many commands a write transaction held.
        let costs = if args.postgres.is_some() {
            let db_cpu = row
                .cost
                .db_cpu_us
                .map_or("–".to_owned(), |us| format!("{:.1}", row.per_request(us)));
            let per_batch = match row.cost.batches {
                0 => "–".to_owned(),
                batches => format!("{:.2}", row.cost.commands as f64 / batches as f64),
            };
            format!("{db_cpu} | {per_batch}")
        } else {
            format!("{:.2}", row.per_request(row.cost.wal_frames))
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {:.1} | {costs} | {:.1} MiB |",
            row.name,
            row.requests_per_s,
            ms(row.hist.value_at_quantile(0.50)),
            ms(row.hist.value_at_quantile(0.99)),
            ms(row.hist.value_at_quantile(0.999)),
            errors,
            row.per_request(row.cost.cpu_us),
            row.peak_rss_kib as f64 / 1024.0,
        );
    }
    let find = |prefix: &str| rows.iter().find(|r| r.name.starts_with(prefix));
    let (health, read, create, batch1, scaled) = (
        find("GET /healthz"),
        find(&format!("GET tenant ({} ", args.base)),
        find("POST create (group"),
        find("POST create (--commit"),
        find(&format!("GET tenant ({} ", args.scale)),
    );
    out.push('\n');
    if let (Some(c), Some(b)) = (create, batch1) {
        let _ = writeln!(
            out,
            "- group commit ÷ batch-1 creates: {:.2}×",
            c.requests_per_s / b.requests_per_s
        );
    }
    if let (Some(r), Some(h)) = (read, health) {
        let _ = writeln!(
            out,
            "- reads ÷ /healthz: {:.0} %",
            100.0 * r.requests_per_s / h.requests_per_s
        );
    }
    if let (Some(r), Some(s)) = (read, scaled) {
        let p99 = |row: &Row| row.hist.value_at_quantile(0.99) as f64;
        let _ = writeln!(
            out,
            "- read latency at {} vs {} tenants: p50 {} → {}, p99 {} → {} ({:+.0} %)",
            args.base,
            args.scale,
            ms(r.hist.value_at_quantile(0.5)),
            ms(s.hist.value_at_quantile(0.5)),
            ms(r.hist.value_at_quantile(0.99)),
            ms(s.hist.value_at_quantile(0.99)),
            100.0 * (p99(s) - p99(r)) / p99(r).max(1.0),
        );
    }
    let spread_reserve = find("POST reserve (1000");
    let spread_commit = find("POST commit (1000");
    let hot_reserve = find("POST reserve (one hot");
    let hot_commit = find("POST commit (one hot");
    let alone = (
        find("POST reserve (1000 budgets, each"),
        find("POST commit (1000 budgets, each"),
    );
    for (what, pair) in [
        ("in cycles", (spread_reserve, spread_commit)),
        ("each kind alone", alone),
    ] {
        if let (Some(c), (Some(r), Some(m))) = (create, pair) {
            let _ = writeln!(
                out,
                "- over 1,000 budgets, {what}: reserves ÷ creates {:.0} %, commits ÷ creates \
                 {:.0} %",
                100.0 * r.requests_per_s / c.requests_per_s,
                100.0 * m.requests_per_s / c.requests_per_s
            );
        }
    }
    if let (Some(r), Some(m), Some(hr), Some(hm)) =
        (spread_reserve, spread_commit, hot_reserve, hot_commit)
    {
        let _ = writeln!(
            out,
            "- one hot budget ÷ 1,000 budgets: reserves {:.0} %, commits {:.0} %",
            100.0 * hr.requests_per_s / r.requests_per_s,
            100.0 * hm.requests_per_s / m.requests_per_s
        );
    }
    if let (Some(b), Some(r)) = (find("GET budget ("), read) {
        let _ = writeln!(
            out,
            "- GET budget ÷ GET tenant: {:.0} %",
            100.0 * b.requests_per_s / r.requests_per_s
        );
    }
    if db_bytes > 0 {
        let _ = writeln!(
            out,
            "- database at {} tenants: {:.1} MiB, {:.0} bytes per tenant (tenant row, indexes, audit event)",
            args.scale,
            db_bytes as f64 / (1024.0 * 1024.0),
            db_bytes as f64 / args.scale.max(1) as f64
        );
    }
    out
}
