//! The mass boundary: `--boundary-budgets` monthly budgets in one time zone pass their
//! boundary at the same instant while charges go on over other budgets. The server runs under
//! libfaketime, whose clock the row moves: it starts an hour before midnight of 1 December in
//! Berlin, the budgets are made, then the clock jumps to two seconds before it. The row is the
//! charges' latency meanwhile; the note says how long after the boundary the last budget's
//! reset was recorded, and every budget is read at the end.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::client::Stop;
use crate::report::Row;
use crate::server::Server;
use crate::spend::{Plan, plans, spend_rows};
use crate::wire;
use crate::workloads::{Kind, seed, seed_kind};

/// The boundary every budget passes: 2026-12-01T00:00 in Europe/Berlin.
const BOUNDARY: &str = "2026-11-30T23:00:00.000Z";

/// The month after it: the budgets' next boundary.
const NEXT_BOUNDARY: &str = "2026-12-31T23:00:00.000Z";

/// The server's clock while the budgets are made, and just before the boundary
/// (libfaketime's "@" form: a start that then runs at the real rate).
const CLOCK_BEFORE: &str = "@2026-11-30 22:00:00";
const CLOCK_JUMP: &str = "@2026-11-30 22:59:58";

/// How often libfaketime reads its time file again, in seconds.
const FAKETIME_CACHE_S: &str = "1";

/// Budgets charged meanwhile (each its tenant's default budget, without a period).
const CHARGED_BUDGETS: u64 = 1_000;

/// How often the boundaries recorded so far are counted.
const POLL: Duration = Duration::from_millis(200);

/// The longest the charges go on waiting for every boundary to be recorded.
const WAIT_MAX: Duration = Duration::from_secs(120);

/// The charges' row during the boundary, and the note on it.
pub(crate) async fn measure(args: &Args) -> Result<(Vec<Row>, String), String> {
    if args.postgres.is_some() {
        return Err("the boundary row runs on SQLite: drop --postgres, or --only another".into());
    }
    if !args.faketime.is_file() {
        return Err(format!(
            "the boundary row needs libfaketime at {} (Debian's package faketime; make bench \
             installs it), or --faketime PATH",
            args.faketime.display()
        ));
    }
    let clock = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    set_clock(clock.path(), CLOCK_BEFORE)?;
    let preload = args.faketime.to_string_lossy().into_owned();
    let clock_file = clock.path().to_string_lossy().into_owned();
    let env = [
        ("LD_PRELOAD", preload.as_str()),
        ("FAKETIME_TIMESTAMP_FILE", clock_file.as_str()),
        ("FAKETIME_CACHE_DURATION", FAKETIME_CACHE_S),
        // Timers and timeouts keep the real monotonic clock.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("TZ", "UTC"),
    ];
    let n = args.boundary_budgets;
    eprintln!("server: {n} monthly budgets pass {BOUNDARY} while {CHARGED_BUDGETS} are charged");
    let server = Server::start_with(args, &[], &env)?;
    seed_kind(&server, args, 0, n, Kind::CreateMonthly).await?;
    let charged = Arc::new(seed(&server, args, 0, CHARGED_BUDGETS).await?);

    set_clock(clock.path(), CLOCK_JUMP)?;
    // libfaketime reads the file again within its cache time.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let left = Arc::new(AtomicU64::new(u64::MAX));
    let watcher = {
        let (addr, left) = (server.addr(0).to_string(), Arc::clone(&left));
        std::thread::spawn(move || watch(&addr, n, &left))
    };
    let stop = Stop::After(Arc::clone(&left));
    let name = format!("during {n} boundaries");
    let charges = plans(args.connections, || Plan::Charge, None);
    let (_, rows) = spend_rows(&server, &charged, charges, stop, &name).await?;
    let recorded = watcher.join().map_err(|_| "the watcher panicked")??;
    let db = server.db_path().ok_or("a SQLite server")?;
    let note = check(&db, n, recorded)?;
    server.stop();
    Ok((rows, note))
}

/// Writes libfaketime's time file.
fn set_clock(path: &Path, at: &str) -> Result<(), String> {
    std::fs::write(path, format!("{at}\n")).map_err(|e| e.to_string())
}

/// Counts the refills and forfeits in `/metrics` until there are `n` (or [`WAIT_MAX`] has
/// passed), then stops the charges; how long the count took after it first moved.
fn watch(addr: &str, n: u64, left: &AtomicU64) -> Result<Duration, String> {
    let started = Instant::now();
    let mut first = None;
    let outcome = loop {
        let resp = wire::request(addr, "GET", "/metrics", &[], None);
        let body = String::from_utf8_lossy(&resp.body);
        let count = |kind: &str| -> u64 {
            let name = format!("tenantd_ledger_entries{{kind=\"{kind}\"}} ");
            body.lines()
                .find_map(|l| l.strip_prefix(&name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let done = count("refill") + count("forfeit");
        if done > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if done >= n {
            break Ok(first.map_or(Duration::ZERO, |t| t.elapsed()));
        }
        if started.elapsed() > WAIT_MAX {
            break Err(format!(
                "{done} of {n} boundaries recorded after {WAIT_MAX:?}"
            ));
        }
        std::thread::sleep(POLL);
    };
    left.store(0, Ordering::Relaxed);
    outcome
}

/// Reads every budget and the chain's resets from the file: each monthly budget is in its new
/// period, every budget keeps the invariant, and the last reset was recorded so long after
/// the boundary.
fn check(db: &Path, n: u64, counted: Duration) -> Result<String, String> {
    let db = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| e.to_string())?;
    let (resets, last): (i64, String) = db
        .query_row(
            "SELECT count(*), max(occurred_at) FROM audit_events \
             WHERE action = 'budget.period_reset'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(|e| e.to_string())?;
    if u64::try_from(resets) != Ok(n) {
        return Err(format!("{resets} boundaries in the chain, {n} budgets"));
    }
    let mut stmt = db
        .prepare(
            "SELECT b.id, b.credited_atomic, b.debited_atomic, b.spent_atomic, \
             b.reserved_atomic, r.period_interval, r.period_started_at, r.period_ends_at \
             FROM budgets b LEFT JOIN budget_renewals r ON r.budget_id = b.id",
        )
        .map_err(|e| e.to_string())?;
    let mut rows = stmt.query([]).map_err(|e| e.to_string())?;
    let (mut read, mut monthly) = (0u64, 0u64);
    while let Some(row) = rows.next().map_err(|e| e.to_string())? {
        let text = |i: usize| -> Result<Option<String>, String> {
            row.get::<_, Option<String>>(i).map_err(|e| e.to_string())
        };
        let id = text(0)?.unwrap_or_default();
        let figure = |i: usize| -> Result<u128, String> {
            text(i)?
                .and_then(|v| v.parse().ok())
                .ok_or(format!("budget {id}: a bad figure"))
        };
        let (credited, debited, spent, reserved) = (figure(1)?, figure(2)?, figure(3)?, figure(4)?);
        if credited < debited + spent + reserved {
            return Err(format!("budget {id} is overspent"));
        }
        if text(5)?.as_deref() == Some("month") {
            monthly += 1;
            let period = (text(6)?, text(7)?);
            if period != (Some(BOUNDARY.into()), Some(NEXT_BOUNDARY.into())) {
                return Err(format!("budget {id} is not in its new period: {period:?}"));
            }
        }
        read += 1;
    }
    if monthly != n {
        return Err(format!("{monthly} monthly budgets read, {n} made"));
    }
    let lag = timestamp_ms(&last)? - timestamp_ms(BOUNDARY)?;
    Ok(format!(
        "mass boundary: {n} monthly budgets (Europe/Berlin) passed {BOUNDARY} together; the \
         last reset was recorded {:.1} s after the boundary ({:.1} s from the first to the \
         last counted); {read} budgets read at the end, each monthly one in its new period, \
         none overspent",
        lag as f64 / 1000.0,
        counted.as_secs_f64()
    ))
}

/// Milliseconds since the epoch of an RFC 3339 instant.
fn timestamp_ms(text: &str) -> Result<i64, String> {
    let t: jiff::Timestamp = text.parse().map_err(|e| format!("{text:?}: {e}"))?;
    Ok(t.as_millisecond())
}
