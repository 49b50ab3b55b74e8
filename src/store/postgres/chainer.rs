//! The chainer: links the audit rows that wait in `audit_pending` into the chain once their
//! changes have committed (see [`chain::chain_pending`] for the order it keeps).
//!
//! Every instance runs one, on a connection of its own. One at a time chains: a pass takes
//! the lock of `chain_head`'s one row without waiting, and an instance that finds it held
//! leaves the rows to the one that holds it. No writer takes that lock, so chaining never
//! holds up a write. Its own writer wakes it after each commit; it also looks every
//! [`POLL_INTERVAL`] for rows that other instances wrote, or that an instance left behind when
//! it died (a row is durable with its change: a crash delays its chaining, never loses it).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

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

/// How long the chainer waits after a pass that failed (the database away, say).
const RETRY_AFTER: Duration = Duration::from_secs(1);

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
        let db = Blocking::connect(url)?;
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

/// Chains until `woken` is closed, then once more.
fn run(mut db: Blocking, url: &str, woken: &flume::Receiver<()>, stats: &Stats, clock: &Clock) {
    loop {
        let wait = match pass(&mut db, stats, clock) {
            // More may be waiting.
            Ok(n) if n == CHAIN_MAX as usize => Duration::ZERO,
            Ok(_) => POLL_INTERVAL,
            Err(e) => {
                log::warn!("audit rows could not be chained now (trying again): {e}");
                if db.is_closed()
                    && let Err(e) = db.reconnect(url)
                {
                    log::warn!("the chainer cannot connect: {e}");
                }
                RETRY_AFTER
            }
        };
        match woken.recv_timeout(wait) {
            Ok(()) | Err(flume::RecvTimeoutError::Timeout) => {}
            Err(flume::RecvTimeoutError::Disconnected) => break,
        }
    }
    // The writer has stopped: what it committed is chained before the instance ends, unless
    // another instance holds the lock (it chains them then).
    while let Ok(n) = pass(&mut db, stats, clock) {
        if n < CHAIN_MAX as usize {
            break;
        }
    }
}

/// Chains up to [`CHAIN_MAX`] rows in one transaction, if any wait and no other instance is
/// chaining; how many. Whichever instance chains, each one's chainer first looks at the
/// oldest row waiting, and keeps how long it has waited for the instance's writers
/// ([`Stats::chain_lag_ms`]).
fn pass(db: &mut Blocking, stats: &Stats, clock: &Clock) -> Result<usize, StoreError> {
    // Looked for without a lock: an idle database costs a read, not a transaction.
    let oldest = db.query_opt(
        "SELECT occurred_at FROM audit_pending ORDER BY id LIMIT 1",
        &[],
        |row| Ok(text(row, 0)?.into_owned()),
    )?;
    let lag_ms = oldest
        .as_deref()
        .and_then(Timestamp::parse)
        .map_or(0, |at| clock.now().unix_ms().saturating_sub(at.unix_ms()));
    stats.chain_lag_ms.store(lag_ms, Ordering::Relaxed);
    if oldest.is_none() {
        return Ok(0);
    }
    db.run("BEGIN")?;
    let chained = db
        .query_opt(
            "SELECT id FROM chain_head WHERE id = 1 FOR UPDATE SKIP LOCKED",
            &[],
            |_| Ok(()),
        )
        .and_then(|locked| match locked {
            Some(()) => chain::chain_pending(db, CHAIN_MAX).map(Some),
            None => Ok(None),
        });
    let chained = match chained {
        Ok(Some(chained)) => chained,
        Ok(None) => {
            db.run("ROLLBACK")?;
            return Ok(0);
        }
        Err(e) => {
            let _ = db.run("ROLLBACK");
            return Err(e);
        }
    };
    db.run("COMMIT")?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    for occurred_at in &chained {
        if let Some(at) = Timestamp::parse(occurred_at) {
            stats.chained(now_ms.saturating_sub(at.unix_ms()));
        }
    }
    Ok(chained.len())
}
