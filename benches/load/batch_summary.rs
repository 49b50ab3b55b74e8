//! The batch group's comparisons ([`crate::batch`]): each batched row against the single
//! charges of the same run.

use std::fmt::Write as _;

use crate::admin::grouped;
use crate::args::Args;
use crate::report::Row;
use crate::server::Server;

/// The comparisons of the batched rows with the single charges: operations per second,
/// latency per request, and the server's cost per charge, over `budgets` budgets. `measured`
/// holds each row with its batch's size (1 for single charges) and the charges it made.
pub(crate) fn summary(
    server: &Server,
    args: &Args,
    measured: &[(Row, usize, u64)],
    budgets: usize,
) -> Vec<String> {
    let Some((single, _, single_ops)) = measured.first() else {
        return Vec::new();
    };
    let seconds = args.duration.as_secs_f64();
    let ops_per_s = |ops: u64| ops as f64 / seconds;
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    let p = |row: &Row, q: f64| row.hist.value_at_quantile(q);
    let mut rates = format!(
        "batch: charges/s over {} budgets: one a request {:.0}",
        grouped(budgets as u64),
        ops_per_s(*single_ops)
    );
    let mut latency = format!(
        "batch: latency per request, p50 / p99: a charge {} / {}",
        ms(p(single, 0.5)),
        ms(p(single, 0.99))
    );
    let per_charge = |ops: u64, value: u64| value as f64 / ops.max(1) as f64;
    let mut cpu = format!(
        "batch: server CPU per charge: one a request {:.1} µs",
        per_charge(*single_ops, single.cost.cpu_us)
    );
    let mut frames = format!(
        "batch: WAL frames per charge: one a request {:.2}",
        per_charge(*single_ops, single.cost.wal_frames)
    );
    let db_cpu = |row: &Row, ops: u64| row.cost.db_cpu_us.map(|us| per_charge(ops, us));
    let mut postgres = db_cpu(single, *single_ops)
        .map(|us| format!("batch: PostgreSQL CPU per charge: one a request {us:.1} µs"));
    for (row, size, ops) in &measured[1..] {
        let n = grouped(*size as u64);
        let ratio = ops_per_s(*ops) / ops_per_s(*single_ops).max(f64::MIN_POSITIVE);
        let p99_ratio = p(row, 0.99) as f64 / p(single, 0.99).max(1) as f64;
        let _ = write!(
            rates,
            "; in batches of {n} {:.0} ({ratio:.1}× single{})",
            ops_per_s(*ops),
            if *size == 100 { ", target ≥ 5×" } else { "" }
        );
        let _ = write!(
            latency,
            "; a batch of {n} {} / {} (p99 {p99_ratio:.1}× a charge's{})",
            ms(p(row, 0.5)),
            ms(p(row, 0.99)),
            if *size == 100 {
                ", target ≤ 10×"
            } else {
                ""
            }
        );
        let _ = write!(
            cpu,
            ", in batches of {n} {:.1} µs",
            per_charge(*ops, row.cost.cpu_us)
        );
        let _ = write!(
            frames,
            ", in batches of {n} {:.2}",
            per_charge(*ops, row.cost.wal_frames)
        );
        if let (Some(line), Some(us)) = (&mut postgres, db_cpu(row, *ops)) {
            let _ = write!(line, ", in batches of {n} {us:.1} µs");
        }
    }
    let mut lines = vec![rates, latency, cpu];
    // PostgreSQL has no WAL frames to count; its own CPU, when it runs on this machine.
    if server.database.is_none() {
        lines.push(frames);
    }
    lines.extend(postgres);
    lines
}
