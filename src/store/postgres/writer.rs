//! The PostgreSQL writer: one thread of each instance, running the store's commands in
//! batches, one transaction a batch, as the SQLite writer does.
//!
//! Any number of instances may write to one database, and no lock is taken by every batch:
//! a command takes its tenant's row lock first, without waiting
//! ([`WriterState::lock_tenant`]), and holds it to the batch's `COMMIT`. So a tenant's writes
//! run one after the other, through whichever instance, and each statement (`READ
//! COMMITTED`) sees all that the earlier ones committed: a key bound through another instance
//! is replayed, a budget's figures are the latest, an expiry is recorded once. Writes of
//! other tenants go on beside them. A command whose tenant another writer holds fails
//! `Busy` alone (its savepoint rolled back) and is sent again; the rest of its batch goes on.
//! Audit rows wait in `audit_pending` for the chainer ([`super::chainer`]), which the writer
//! wakes after each commit.
//!
//! A `COMMIT` whose connection broke has an unknown outcome. The writer connects again and
//! asks the server for its transaction's status (`txid_status`): committed, the batch is
//! answered; not (or no connection to be had), every command is answered `Unavailable` (a
//! `503`), and a keyed retry settles it.

use std::sync::Arc;

use super::blocking::Blocking;
use super::chainer::Chainer;
use crate::audit::Head;
use crate::domain::TenantId;
use crate::store::queries::listed_ids;
use crate::store::sql::{Param, Sql, text};
use crate::store::write::ahead::Wanted;
use crate::store::write::batch::Batches;
use crate::store::write::delta::Delta;
use crate::store::write::guard::{GUARD_BUDGETS, GUARD_ENDPOINTS, GUARD_TENANTS, Guard};
use crate::store::write::state::{SharedIds, WriterState, shared_ids};
use crate::store::write::stats::Stats;
use crate::store::{StoreConfig, StoreError, queries};

/// How long the oldest audit row waiting for the chain may have waited before writers slow
/// down: the contract chains a change's row within a second of it.
const CHAIN_LAG_EASY_MS: u64 = 100;

/// The longest a writer waits for the chain before one batch.
const CHAIN_WAIT_MAX_MS: u64 = 500;

/// How long a batch whose first commands are in may wait for the clients the batch before
/// answered (`batch::fill_wanted`). Measured one after another (quick runs, charges over
/// 1,000 budgets): see `docs/decisions.md`.
const FILL_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// A writer that waits for the chain says so at most this often.
const PACING_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Stores the last id (`?2`) of each tenant `?1` lists. Each row is found by its key in a
/// `LATERAL` subquery and updated where it lies (`ctid`, a TID scan): an `UPDATE` joined to
/// the list by id was free to scan the whole table (`queries::listed_ids`). The rows are the
/// batch's, locked since it began, so no other writer moves them meanwhile.
pub(super) const STORE_LAST_IDS: &str = concat!(
    "UPDATE tenants AS t SET last_id = ?2 FROM (SELECT x.c FROM ",
    listed_ids!("?1"),
    " CROSS JOIN LATERAL (SELECT ctid AS c FROM tenants WHERE id = w.id LIMIT 1) x) l \
     WHERE t.ctid = l.c"
);

/// How often (in seconds) a writer looks for reservations due to expire and periods due to
/// end, since another instance (one that stopped, say) may have made them.
const DUE_POLL_SECONDS: u32 = 1;

/// The state of the writer thread.
pub(super) struct Writer {
    /// The connection, and what the writer keeps between batches.
    state: WriterState<Blocking>,
    /// Where to connect again.
    url: String,
    config: StoreConfig,
    stats: Arc<Stats>,
    /// Set when the connection cannot be trusted (closed, or a transaction left open): a new
    /// one is made before the next batch.
    broken: bool,
    /// The open write transaction's id, whose status tells whether a `COMMIT` whose answer
    /// was lost committed.
    xid: Option<i64>,
    /// The instance's chainer, woken after each commit; it makes its last pass and ends when
    /// the last writer is gone.
    chainer: Arc<Chainer>,
    /// Set once the instance's first writer has run its first batch, which records every
    /// expiry and boundary that fell due while no instance ran: the other writers wait for
    /// it before their first, so that no write is answered from a state that has not caught
    /// up (as with one writer). After it, every writer sweeps what falls due, as the one
    /// writer of SQLite does before each batch: where two find the same budget due, one
    /// records it and the other finds its tenant busy and tries again a second later.
    first_swept: Arc<FirstSwept>,
    /// Whether this writer has seen `first_swept` set (or set it).
    caught_up: bool,
    /// When the writer last said that it waits for the chain ([`Writer::pace_to_the_chain`]).
    pacing_said_at: Option<std::time::Instant>,
    /// The tenants of the open batch, where it began on what the writer knows
    /// ([`Writer::begin_guarded`]).
    guarded: Option<Vec<TenantId>>,
    /// When the last write batch began: a connection idle for longer may have been closed
    /// by the server unnoticed, and a batch on it begins the usual way (`IDLE_GUARDED_MAX`).
    began_at: Option<std::time::Instant>,
}

/// The longest a writer's connection may have been idle for a batch to begin on what the
/// writer knows. A connection the server closed is found out by the usual first round trip,
/// which is sent again on a new one; a batch sent whole learns it only from its `COMMIT`,
/// whose outcome it may not learn at all.
const IDLE_GUARDED_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the instance's first writer has run its first batch, and where to wait for it.
#[derive(Default)]
pub(super) struct FirstSwept {
    done: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

/// How long a writer waits for the first writer's first batch before it goes on anyway.
const FIRST_SWEEP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl FirstSwept {
    fn set(&self) {
        *self
            .done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    fn wait(&self) {
        let done = self
            .done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_done, waited) = self
            .changed
            .wait_timeout_while(done, FIRST_SWEEP_WAIT, |done| !*done)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if waited.timed_out() {
            log::warn!("the first writer has not swept yet; this writer goes on");
        }
    }
}

impl Batches for Writer {
    type Db = Blocking;

    fn state(&mut self) -> &mut WriterState<Blocking> {
        &mut self.state
    }

    fn batch_max(&self) -> usize {
        self.config.commit_batch_max
    }

    fn fill_wait(&self) -> Option<std::time::Duration> {
        Some(FILL_WAIT)
    }

    /// Replaces a connection that is closed or was left in doubt; for writes, begins the
    /// transaction.
    fn begin(&mut self, writes: bool, wanted: &[Wanted<'_>]) -> Result<(), StoreError> {
        if !self.caught_up {
            self.first_swept.wait();
            self.caught_up = true;
        }
        if self.broken || self.state.db_ref().is_closed() {
            self.state.db().reconnect(&self.url)?;
            self.broken = false;
        }
        if writes {
            self.pace_to_the_chain();
            self.begin_write(wanted)?;
        }
        Ok(())
    }

    /// A statement that fails inside a savepoint is rolled back to it; a connection lost
    /// mid-batch fails the savepoint's end, which poisons the batch.
    fn lost_transaction(&mut self) -> Option<StoreError> {
        None
    }

    /// Inside a write batch a write transaction has begun already; otherwise the server must
    /// be one that takes writes (not a standby, not read-only).
    fn check_writable(&mut self, in_transaction: bool) -> Result<(), StoreError> {
        if in_transaction {
            return Ok(());
        }
        let read_only = self.state.db().query_opt(
            "SELECT current_setting('transaction_read_only')",
            &[],
            |row| Ok(text(row, 0)? == "on"),
        )?;
        if read_only == Some(false) {
            Ok(())
        } else {
            Err(StoreError::Unavailable(
                "the database takes no writes (a standby, or read-only)".into(),
            ))
        }
    }

    /// Rolls the batch back; a connection on which that fails is replaced before the next.
    fn rollback(&mut self) {
        if self.state.db_ref().is_closed() {
            self.broken = true;
            return;
        }
        if let Err(e) = self.state.db().run("ROLLBACK") {
            log::error!("ROLLBACK failed ({e:?}); connecting again before the next batch");
            self.broken = true;
        }
    }

    /// Stores each locked tenant's last id, then commits. A `COMMIT` whose connection broke
    /// may have committed: the writer connects again and asks for its transaction's status.
    fn commit(&mut self, _head_before: &Head) -> Result<(), StoreError> {
        let (locked, last) = self.state.take_locked();
        let guarded = self.guarded.take();
        // One statement for every tenant, with the `COMMIT`, in its round trip.
        let stored = match last.map(|last| last.to_string()) {
            Some(last) if !locked.is_empty() => {
                let list = locked.iter().map(TenantId::as_str).collect::<Vec<_>>();
                self.state.db().send(
                    STORE_LAST_IDS,
                    &[list.join(",").as_str().into(), last.as_str().into()],
                )
            }
            _ => Ok(()),
        };
        let committed = stored.and_then(|()| self.state.db().run("COMMIT"));
        if guarded.is_some() {
            self.xid = self.kept_xid();
        }
        let Err(error) = committed else {
            if let Some(xid) = self.xid.take() {
                self.state.remember(xid, &locked, last);
            }
            if guarded.is_some() {
                self.stats
                    .batches_guarded
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.chainer.wake();
            return Ok(());
        };
        if !self.state.db_ref().is_closed() {
            // The server answered, and a failed COMMIT rolls back.
            self.rollback();
            if let Some(tenants) = guarded.filter(|_| matches!(error, StoreError::Busy(_))) {
                // A guard that failed (or a lock it could not take): nothing of the batch
                // took effect; it is sent again, read ahead the usual way.
                self.state.db().take_send_failure();
                self.state.doubt(&tenants);
                return Err(error);
            }
            // A write sent with it that failed fails the batch alone
            // ([`WriterState::deferred_failure`]).
            self.state.forget_known(&locked);
            return Err(self.state.deferred_failure(Some(&error)).unwrap_or(error));
        }
        self.broken = true;
        self.state.forget_known(&locked);
        let outcome = match (self.xid.take(), guarded.is_some()) {
            (Some(xid), _) => self
                .begin(false, &[])
                .and_then(|()| self.committed_xid(xid)),
            // A batch begun on what the writer knew, whose transaction's id never came back:
            // its last id, where it still stands, shows that it committed.
            (None, true) => match (locked.first(), last) {
                (Some(tenant), Some(last)) => self
                    .begin(false, &[])
                    .and_then(|()| self.stored_last_id(tenant, last))
                    .and_then(|found| {
                        found.then_some(true).ok_or_else(|| {
                            StoreError::Unavailable("its last id is not stored".into())
                        })
                    }),
                _ => return Err(error),
            },
            (None, false) => return Err(error),
        };
        match outcome {
            Ok(true) => {
                self.chainer.wake();
                log::warn!("COMMIT reported {error:?}, but the batch is in the database");
                Ok(())
            }
            Ok(false) => Err(StoreError::Unavailable(format!(
                "the batch did not commit: {error:?}"
            ))),
            Err(e) => Err(StoreError::Unavailable(format!(
                "the outcome of COMMIT is unknown ({error:?}); it cannot be looked up: {e:?}"
            ))),
        }
    }

    fn committed(&mut self, delta: &Delta, commands: usize) {
        self.stats.apply(delta, commands);
        self.poll_due();
        self.first_swept.set();
    }

    fn failed(&mut self) {
        if let Some(tenants) = self.guarded.take() {
            self.state.doubt(&tenants);
        }
        self.poll_due();
        self.first_swept.set();
    }

    fn close(self) {
        log::info!("a writer closed");
    }
}

impl Writer {
    /// Connects. The first of an instance's writers (no `ids` yet) reads the counts into
    /// `stats` and the latest id, and makes the generator the others share; each returns
    /// it.
    pub(super) fn new(
        url: &str,
        config: StoreConfig,
        stats: Arc<Stats>,
        chainer: Arc<Chainer>,
        first_swept: Arc<FirstSwept>,
        ids: Option<SharedIds>,
    ) -> Result<(Self, SharedIds), String> {
        let mut db = Blocking::connect(url)?;
        let failed = |e: StoreError| format!("cannot read the database: {e:?}");
        let first = ids.is_none();
        let ids = match ids {
            Some(ids) => ids,
            None => {
                stats.load(&mut db).map_err(failed)?;
                shared_ids(queries::due::latest_ulid(&mut db).map_err(failed)?)
            }
        };
        let state = WriterState::new(db, &config, Head::genesis(), Arc::clone(&ids));
        let writer = Self {
            // Writers here never link the chain: the head stays the genesis, unused.
            state,
            url: url.to_owned(),
            config,
            stats,
            broken: false,
            xid: None,
            chainer,
            first_swept,
            // The first writer is the one waited for.
            caught_up: first,
            pacing_said_at: None,
            guarded: None,
            began_at: None,
        };
        Ok((writer, ids))
    }

    /// Another instance may make holds and periods this one never hears of: the soonest
    /// expiry and boundary are looked for again within [`DUE_POLL_SECONDS`].
    fn poll_due(&mut self) {
        let poll = self.state.clock_now().plus_seconds(DUE_POLL_SECONDS);
        self.state.lower_next_expiry(poll);
        self.state.lower_next_boundary(poll);
    }

    /// Waits before a write batch while the chain falls behind: the oldest row waiting for
    /// it had waited more than [`CHAIN_LAG_EASY_MS`] when the chainer last looked, so writes
    /// come faster than the chainer links them (on a machine whose cores the writers and the
    /// database share, say). As long as the excess, up to [`CHAIN_WAIT_MAX_MS`]: the writers
    /// leave the chainer room, and the lag stays near the bound rather than growing with the
    /// load.
    fn pace_to_the_chain(&mut self) {
        let lag_ms = self
            .stats
            .chain_lag_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        let Some(excess) = lag_ms.checked_sub(CHAIN_LAG_EASY_MS) else {
            return;
        };
        let now = std::time::Instant::now();
        if self
            .pacing_said_at
            .is_none_or(|since| now.duration_since(since) >= PACING_LOG_INTERVAL)
        {
            log::info!(
                "the audit chain is {lag_ms} ms behind its writes: writes wait for it until it \
                 is within {CHAIN_LAG_EASY_MS} ms"
            );
            self.pacing_said_at = Some(now);
        }
        let wait = excess.clamp(1, CHAIN_WAIT_MAX_MS);
        std::thread::sleep(std::time::Duration::from_millis(wait));
    }

    /// Begins the batch's transaction, reads its id, and reads `wanted` ahead. The endpoints
    /// are read again for each batch that writes an event (with what it reads ahead, where a
    /// command may): another instance may have changed them.
    fn begin_write(&mut self, wanted: &[Wanted<'_>]) -> Result<(), StoreError> {
        self.state.forget_subscribers();
        self.guarded = None;
        let now = std::time::Instant::now();
        let busy = self
            .began_at
            .replace(now)
            .is_some_and(|at| now.duration_since(at) < IDLE_GUARDED_MAX);
        if busy
            && !self.state.db().closed_now()
            && let Some(guard) = self.state.guard_known(wanted)
        {
            return self.begin_guarded(&guard);
        }
        // `BEGIN`, the id and what is read ahead in one round trip. A connection the server
        // closed while it was idle is found out here, before the batch has done anything: it
        // is replaced, and the batch goes on.
        let begin = |state: &mut WriterState<Blocking>| {
            state.db().send("BEGIN", &[])?;
            let xid = state.read_ahead("SELECT CAST(txid_current() AS TEXT)", wanted)?;
            xid.first()
                .map(|xid| {
                    xid.parse()
                        .map_err(|_| StoreError::Internal(format!("a bad transaction id {xid:?}")))
                })
                .transpose()
        };
        let xid = match begin(&mut self.state) {
            Err(StoreError::Unavailable(_)) if self.state.db_ref().is_closed() => self
                .state
                .db()
                .reconnect(&self.url)
                .and_then(|()| begin(&mut self.state)),
            began => began,
        };
        match xid {
            Ok(xid) => {
                self.xid = xid;
                Ok(())
            }
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }

    /// Begins a batch on what the writer knows (`write::known`): `BEGIN`, the transaction's
    /// id and the guard are sent with the batch's writes and `COMMIT`, in one round trip.
    fn begin_guarded(&mut self, guard: &Guard) -> Result<(), StoreError> {
        self.xid = None;
        self.guarded = Some(guard.tenants.iter().map(|(t, ..)| t.clone()).collect());
        let db = self.state.db();
        // An id kept by a batch that failed before its `COMMIT` is not this one's.
        db.take_kept();
        let sent = db
            .send("BEGIN", &[])
            .and_then(|()| db.send_kept("SELECT CAST(txid_current() AS TEXT)", &[]))
            .and_then(|()| {
                let tenants = guard.tenants.iter();
                send_listed(db, GUARD_TENANTS, tenants.map(|(t, v, _)| (t.as_str(), *v)))
            })
            .and_then(|()| match &guard.endpoints {
                Some((_, versions)) => db.send(GUARD_ENDPOINTS, &[versions.as_str().into()]),
                None => Ok(()),
            })
            .and_then(|()| {
                let budgets = guard.budgets.iter();
                send_listed(
                    db,
                    GUARD_BUDGETS,
                    budgets.map(|(b, _, v)| (b.id.as_str(), *v)),
                )
            });
        if let Err(e) = sent {
            self.rollback();
            return Err(e);
        }
        Ok(())
    }

    /// The id of the transaction of a batch begun on what the writer knows, if its answer
    /// came.
    fn kept_xid(&mut self) -> Option<i64> {
        self.state
            .db()
            .take_kept()
            .first()
            .and_then(|xid| xid.parse().ok())
    }

    /// Whether `tenant`'s last id is `last`, which only the batch that made it stores: that
    /// batch committed. (Not the converse: another writer may have stored its own since.)
    fn stored_last_id(&mut self, tenant: &TenantId, last: ulid::Ulid) -> Result<bool, StoreError> {
        let stored = self.state.db().query_opt(
            "SELECT last_id FROM tenants WHERE id = ?1",
            &[tenant.as_str().into()],
            |row| Ok(row.column(0)?.map(|s| s.into_owned())),
        )?;
        Ok(stored.flatten() == Some(last.to_string()))
    }

    /// Whether the transaction `xid` committed, as the server says.
    fn committed_xid(&mut self, xid: i64) -> Result<bool, StoreError> {
        let status =
            self.state
                .db()
                .query_opt("SELECT txid_status(?1)", &[Param::Int(xid)], |row| {
                    Ok(row.column(0)?.map(|s| s.into_owned()))
                })?;
        Ok(status.flatten().as_deref() == Some("committed"))
    }
}

/// Sends guard `sql` for `rows`, each an id and its row's version, listed as the guard takes
/// them; nothing where there are none.
fn send_listed<'a>(
    db: &mut Blocking,
    sql: &str,
    rows: impl Iterator<Item = (&'a str, u32)>,
) -> Result<(), StoreError> {
    let (ids, versions, n) = Guard::lists(rows);
    if n == 0 {
        return Ok(());
    }
    db.send(
        sql,
        &[ids.as_str().into(), versions.as_str().into(), Param::Int(n)],
    )
}
