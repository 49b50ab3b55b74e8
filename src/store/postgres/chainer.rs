//! The chainer: links the audit rows that wait in `audit_pending` into the chain once their
//! changes have committed (see [`chain::chain_pending`] for the order it keeps).
//!
//! Every instance runs one, on a connection of its own. One at a time chains: a pass takes
//! the lock of `chain_head`'s one row without waiting, and an instance that finds it held
//! leaves the rows to the one that holds it. No writer takes that lock, so chaining never
//! holds up a write. Its own writer wakes it after each commit, but a pass that chained
//! follows the one before by [`CHAIN_PACE`] at least, and one that found another instance
//! chaining waits [`ELSEWHERE_WAIT`]; it also looks every [`POLL_INTERVAL`] for rows that
//! other instances wrote, or that an instance left behind when it died (a row is durable
//! with its change: a crash delays its chaining, never loses it).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::blocking::Blocking;
use crate::domain::Timestamp;
use crate::store::sql::{Sql, text};
use crate::store::write::chain;
use crate::store::write::stats::Stats;
use crate::store::{Clock, StoreError};

/// How often the chainer looks for pending rows when nothing woke it.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Rows chained in one transaction, at most; a pass that chained as many goes on at once.
const CHAIN_MAX: i64 = 1000;

/// The least time from the start of a pass that chained to the start of the next, unless the
/// pass chained [`CHAIN_MAX`] rows. A pass is a transaction and a commit of its own, and at
/// every writer's commit it cost PostgreSQL about as much as the batch it chained; paced,
/// it takes the rows of every batch committed meanwhile. Far short of the chaining delay at
/// which the writers slow down (100 ms, [`Stats::chain_lag_ms`]).
const CHAIN_PACE: Duration = Duration::from_millis(20);

/// How long the chainer leaves the rows to another instance that it found chaining. Short of
/// the chaining delay at which the writers slow down (100 ms, [`Stats::chain_lag_ms`]), for
/// the case where that instance then goes quiet.
const ELSEWHERE_WAIT: Duration = Duration::from_millis(50);

/// How long the chainer waits after a pass that failed (the database away, say).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How often, at most, the chainer vacuums `audit_pending`. Every row passes through it and
/// leaves a dead row behind once chained; autovacuum visits a database about once a minute,
/// and by then a busy instance has left hundreds of thousands that each pass walks past.
const VACUUM_INTERVAL: Duration = Duration::from_secs(1);

/// Rows chained since the last vacuum below which the chainer does not vacuum.
const VACUUM_AFTER_ROWS: usize = 1000;

/// The chainer's thread, and what wakes it.
pub(super) struct Chainer {
    /// Wakes the thread; dropped, it tells the thread to make a last pass and end.
    wake: Option<flume::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Chainer {
    /// Connects to `url` and starts the thread; `clock` is the writers' (what a row's
    /// `occurred_at` was read from).
    pub(super) fn start(url: &str, stats: Arc<Stats>, clock: Clock) -> Result<Self, String> {
        let mut db = Blocking::connect(url)?;
        keyed_only(&mut db).map_err(|e| format!("the chainer's session: {e}"))?;
        let (wake, woken) = flume::bounded(1);
        let url = url.to_owned();
        let thread = std::thread::Builder::new()
            .name("tenantd-chainer".into())
            .spawn(move || run(db, &url, &woken, &stats, &clock))
            .map_err(|e| format!("cannot start the chainer's thread: {e}"))?;
        Ok(Self {
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// Rows were committed: chain them now rather than at the next look.
    pub(super) fn wake(&self) {
        if let Some(wake) = &self.wake {
            // One wake-up waiting is enough.
            let _ = wake.try_send(());
        }
    }
}

impl Drop for Chainer {
    /// Makes a last pass, then ends the thread: the instance's writers are gone.
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::error!("the chainer's thread panicked");
        }
    }
}

/// What a pass found.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// It chained this many rows, at least one.
    Chained(usize),
    /// No row waited.
    Idle,
    /// Rows waited, but another instance held the chain's lock, or took them first.
    Elsewhere,
}

/// Chains until `woken` is closed, then once more.
fn run(mut db: Blocking, url: &str, woken: &flume::Receiver<()>, stats: &Stats, clock: &Clock) {
    let mut vacuum = Vacuum::new();
    loop {
        let started = Instant::now();
        let awake = match pass(&mut db, stats, clock) {
            Ok(Pass::Chained(n)) => {
                vacuum.after(&mut db, n);
                // A full pass: more may be waiting.
                n == CHAIN_MAX as usize
                    || match woken_by(woken, started + CHAIN_PACE) {
                        Some(true) => true,
                        Some(false) => woken_or_after(woken, POLL_INTERVAL),
                        None => false,
                    }
            }
            Ok(Pass::Idle) => woken_or_after(woken, POLL_INTERVAL),
            // The instance that chains takes this one's rows with its own, woken by its own
            // writer's commits. Answered at once, this one's wake-ups would each cost the
            // database a transaction that finds the lock taken.
            Ok(Pass::Elsewhere) => woken_by(woken, Instant::now() + ELSEWHERE_WAIT).is_some(),
            Err(e) => {
                log::warn!("audit rows could not be chained now (trying again): {e}");
                if db.is_closed()
                    && let Err(e) = db.reconnect(url).and_then(|()| keyed_only(&mut db))
                {
                    log::warn!("the chainer cannot connect: {e}");
                }
                woken_or_after(woken, RETRY_AFTER)
            }
        };
        if !awake {
            break;
        }
    }
    // The writer has stopped: what it committed is chained before the instance ends, unless
    // another instance holds the lock (it chains them then).
    while let Ok(Pass::Chained(n)) = pass(&mut db, stats, clock) {
        if n < CHAIN_MAX as usize {
            break;
        }
    }
}

/// Waits for a wake-up or for `wait`; false once the writers are gone.
fn woken_or_after(woken: &flume::Receiver<()>, wait: Duration) -> bool {
    !matches!(
        woken.recv_timeout(wait),
        Err(flume::RecvTimeoutError::Disconnected)
    )
}

/// Waits until `deadline` whatever wakes it meanwhile; whether anything did, or `None` at
/// once when the writers are gone.
fn woken_by(woken: &flume::Receiver<()>, deadline: Instant) -> Option<bool> {
    let mut woke = false;
    loop {
        match woken.recv_deadline(deadline) {
            Ok(()) => woke = true,
            Err(flume::RecvTimeoutError::Timeout) => return Some(woke),
            Err(flume::RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Sets the chainer's session to find every row by a key. Each of its statements does, but
/// the one plan a statement keeps is made on the statistics of its first runs: on a table
/// still small (an instance's first rows), a scan is the cheaper plan on paper, and a table
/// that every audit row passes through soon holds thousands of dead rows that a scan reads.
fn keyed_only(db: &mut Blocking) -> Result<(), StoreError> {
    db.batch("SET enable_seqscan = off")
}

/// When the chainer last vacuumed `audit_pending`, and how many rows it has chained since.
struct Vacuum {
    at: std::time::Instant,
    chained: usize,
}

impl Vacuum {
    fn new() -> Self {
        Self {
            at: std::time::Instant::now(),
            chained: 0,
        }
    }

    /// Counts `chained` rows, and vacuums the table once enough rows and time have passed.
    /// It skips a table that autovacuum holds (`SKIP_LOCKED`) rather than wait for it, and
    /// a role that does not own the table is told so by the server and skipped. It leaves
    /// the emptied pages at the table's end where they are (`TRUNCATE false`): cutting them
    /// off takes a lock that every writer's insert holds against it, and the server tried
    /// for up to 5 s while the chain waited (a chaining delay of 1 s under creates).
    fn after(&mut self, db: &mut Blocking, chained: usize) {
        self.chained += chained;
        if self.chained < VACUUM_AFTER_ROWS || self.at.elapsed() < VACUUM_INTERVAL {
            return;
        }
        if let Err(e) = db.run("VACUUM (SKIP_LOCKED, TRUNCATE false) audit_pending") {
            log::warn!("the pending audit rows' table could not be vacuumed now: {e}");
        }
        *self = Self::new();
    }
}

/// When the oldest row waiting for the chain occurred.
const OLDEST: &str = "SELECT occurred_at FROM audit_pending ORDER BY id LIMIT 1";

/// Chains up to [`CHAIN_MAX`] rows in one transaction, if any wait and no other instance is
/// chaining; what it found. Whichever instance chains, each one's chainer first looks at the
/// oldest row waiting, and keeps how long it has waited for the instance's writers
/// ([`Stats::chain_lag_ms`]).
fn pass(db: &mut Blocking, stats: &Stats, clock: &Clock) -> Result<Pass, StoreError> {
    // Looked for without a lock: an idle database costs a read, not a transaction.
    let oldest = db.query_opt(OLDEST, &[], |row| Ok(text(row, 0)?.into_owned()))?;
    let lag_ms = oldest
        .as_deref()
        .and_then(Timestamp::parse)
        .map_or(0, |at| clock.now().unix_ms().saturating_sub(at.unix_ms()));
    stats.chain_lag_ms.store(lag_ms, Ordering::Relaxed);
    if oldest.is_none() {
        return Ok(Pass::Idle);
    }
    // Two round trips, wherever the database is: the lock, the rows and the head in one; the
    // rows appended and the `COMMIT` in the other.
    let chained = db
        .send("BEGIN", &[])
        .and_then(|()| db.send(chain::LOCK_CHAIN, &[]))
        .and_then(|()| chain::chain_pending(db, CHAIN_MAX));
    let chained = match chained {
        Ok(chained) if !chained.is_empty() => chained,
        // Another instance is chaining, or took the rows first.
        Ok(_) => {
            db.run("ROLLBACK")?;
            return Ok(Pass::Elsewhere);
        }
        Err(e) => {
            let _ = db.run("ROLLBACK");
            return Err(e);
        }
    };
    if let Err(e) = db.run("COMMIT") {
        let _ = db.run("ROLLBACK");
        return Err(e);
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    for occurred_at in &chained {
        if let Some(at) = Timestamp::parse(occurred_at) {
            stats.chained(now_ms.saturating_sub(at.unix_ms()));
        }
    }
    Ok(Pass::Chained(chained.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::scratch::Scratch;
    use crate::store::sql::{Sql, text};

    const SCHEMA: &str = include_str!("../../../schema-postgres.sql");

    /// Audit rows waiting, as writers leave them: one of each tenant `ten_<first>` to
    /// `ten_<last>`, in that order.
    fn pending(db: &mut Blocking, first: u32, last: u32) {
        db.batch(&format!(
            "INSERT INTO audit_pending (occurred_at, actor, action, tenant_id, payload) \
             SELECT '2026-11-30T00:00:00.000Z', 'admin', 'budget.credited', 'ten_' || g, '{{}}' \
             FROM generate_series({first}, {last}) AS g ORDER BY g"
        ))
        .expect("pending rows are written");
    }

    /// What `n` passes in a row found.
    fn passes(db: &mut Blocking, n: usize) -> Vec<Pass> {
        let (stats, clock) = (Stats::default(), Clock::System);
        (0..n)
            .map(|_| pass(db, &stats, &clock).expect("a pass"))
            .collect()
    }

    /// How often `audit_pending` has been vacuumed by hand.
    fn vacuums(db: &mut Blocking) -> i64 {
        let counts = db
            .query(
                "SELECT CAST(vacuum_count AS TEXT) FROM pg_stat_user_tables \
                 WHERE relname = 'audit_pending'",
                &[],
                |row| Ok(text(row, 0)?.into_owned()),
            )
            .expect("the table's statistics are read");
        counts[0].parse().expect("a count")
    }

    /// Waits until the server counts `n` vacuums of `audit_pending` (it counts a vacuum once
    /// it has ended, and its statistics may lag a little), for at most 10 s; the count.
    fn vacuums_counted(db: &mut Blocking, n: i64) -> i64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while vacuums(db) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        vacuums(db)
    }

    /// A scratch database named for `tag` with the schema, and a session of it set as the
    /// chainer sets its own.
    fn chainer_session(tag: &str) -> (Scratch, Blocking) {
        let scratch = Scratch::from_env(tag);
        let mut db = Blocking::connect(&scratch.url).expect("the role tenantd connects");
        db.batch(SCHEMA).expect("the schema is created");
        keyed_only(&mut db).expect("the chainer's session");
        (scratch, db)
    }

    #[test]
    fn pending_rows_are_taken_by_key_and_the_dead_ones_vacuumed() {
        let (scratch, mut db) = chainer_session("chainer");

        // The plans the chainer's session keeps, made as an instance's first passes make
        // them (one generic plan a statement, on small tables never analysed), find their
        // rows by key, never by reading a whole table.
        pending(&mut db, 1, 2);
        for (name, sql, args, by_key) in [
            ("take", chain::TAKE_PENDING, "(1000)", "Tid Scan"),
            ("oldest", OLDEST, "", "Index Scan"),
        ] {
            db.batch(&format!("PREPARE {name} AS {}", sql.replace("?1", "$1")))
                .expect("the statement is prepared");
            let plan = db
                .query(&format!("EXPLAIN EXECUTE {name}{args}"), &[], |row| {
                    Ok(text(row, 0)?.into_owned())
                })
                .expect("the plan is explained")
                .join("\n");
            assert!(
                !plan.contains("Seq Scan") && plan.contains(by_key),
                "{name}: the rows are not found by key:\n{plan}"
            );
        }
        pending(&mut db, 3, 2000);
        let stats = Stats::default();
        let clock = Clock::System;

        // While another session holds the chain's lock, a pass moves nothing.
        let mut other = Blocking::connect(&scratch.url).expect("a second session");
        other
            .batch(&format!("BEGIN; {}", chain::LOCK_CHAIN))
            .expect("the lock is taken");
        assert_eq!(
            pass(&mut db, &stats, &clock).expect("a pass"),
            Pass::Elsewhere
        );
        other.batch("ROLLBACK").expect("the lock is let go");

        // Then two passes chain them all, lowest ids first.
        assert_eq!(
            passes(&mut db, 3),
            [Pass::Chained(1000), Pass::Chained(1000), Pass::Idle]
        );
        let tenants = db
            .query(
                "SELECT tenant_id FROM audit_events WHERE seq IN (1, 1000, 2000) ORDER BY seq",
                &[],
                |row| Ok(text(row, 0)?.into_owned()),
            )
            .expect("the chain is read");
        assert_eq!(tenants, ["ten_1", "ten_1000", "ten_2000"]);

        // Too few rows, or too soon: no vacuum. Enough of both: the table is vacuumed.
        let long_ago = std::time::Instant::now() - VACUUM_INTERVAL;
        let mut vacuum = Vacuum::new();
        vacuum.after(&mut db, 2000);
        let mut vacuum_few = Vacuum {
            at: long_ago,
            chained: 0,
        };
        vacuum_few.after(&mut db, VACUUM_AFTER_ROWS - 1);
        assert_eq!(vacuums(&mut db), 0, "vacuumed too soon");
        vacuum_few.after(&mut db, 1);
        assert_eq!(vacuum_few.chained, 0, "the count starts again");
        assert_eq!(vacuums_counted(&mut db, 1), 1);
    }

    /// A chainer's waits (its pace after a pass that chained, its wait after finding another
    /// instance chaining) end at their deadline whatever wakes them meanwhile, but keep
    /// whether anything did, so that a batch committed during the pace is chained right after
    /// it; they end at once when the writers are gone.
    #[test]
    fn a_chainer_waits_out_its_wake_ups_and_keeps_them() {
        let (wake, woken) = flume::bounded(1);
        // A commit during the pass before.
        wake.try_send(()).expect("a wake-up is queued");
        // The test keeps a sender of its own until the waits are over, so that the waker's
        // end (it may finish its wake-ups before the deadline on a slow machine) is not the
        // writers going away.
        let writers = wake.clone();
        let waker = std::thread::spawn(move || {
            for _ in 0..5 {
                let _ = wake.try_send(());
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        for wait in [CHAIN_PACE, ELSEWHERE_WAIT] {
            let started = Instant::now();
            assert_eq!(woken_by(&woken, started + wait), Some(true));
            assert!(started.elapsed() >= wait, "a wake-up ended the wait");
            let _ = writers.try_send(());
        }
        waker.join().expect("the waker ends");

        // Nothing woke it: the wait says so.
        while woken.try_recv().is_ok() {}
        assert_eq!(woken_by(&woken, Instant::now() + CHAIN_PACE), Some(false));

        // The writers gone (every sender dropped): the wait ends at once.
        drop(writers);
        let started = Instant::now();
        assert_eq!(woken_by(&woken, started + Duration::from_secs(10)), None);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!woken_or_after(&woken, Duration::from_secs(10)));
    }

    /// A vacuum leaves the table's emptied pages where they are: cutting them off would take
    /// a lock that every writer's insert conflicts with, and the server waits up to 5 s for it
    /// while the chain waits behind the vacuum.
    #[test]
    fn a_vacuum_never_waits_for_the_writers_to_cut_the_table_short() {
        let (scratch, mut db) = chainer_session("chainer_vacuum");
        pending(&mut db, 1, 2000);
        assert_eq!(
            passes(&mut db, 2),
            [Pass::Chained(1000), Pass::Chained(1000)]
        );

        // A writer in the middle of its batch: the lock its insert takes.
        let mut writer = Blocking::connect(&scratch.url).expect("a writer's session");
        writer
            .batch("BEGIN; LOCK TABLE audit_pending IN ROW EXCLUSIVE MODE")
            .expect("the writer's lock is taken");
        let mut vacuum = Vacuum {
            at: std::time::Instant::now() - VACUUM_INTERVAL,
            chained: 0,
        };
        let started = std::time::Instant::now();
        vacuum.after(&mut db, VACUUM_AFTER_ROWS);
        let took = started.elapsed();
        writer
            .batch("ROLLBACK")
            .expect("the writer's lock is let go");
        assert!(
            took < Duration::from_secs(2),
            "the vacuum waited {took:?} beside a writer"
        );
        assert_eq!(
            vacuums_counted(&mut db, 1),
            1,
            "the table was vacuumed, not skipped"
        );
    }
}
