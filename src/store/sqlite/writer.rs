//! The writer: the one thread that changes the database, in group-committed batches.
//!
//! It blocks for one command, then takes whatever else is already queued, up to
//! `commit_batch_max`, and runs the lot in ONE transaction, each write inside its own
//! `SAVEPOINT` so that a failing command (a name clash, a panic) rolls back alone. It commits
//! once and only then answers every command in the batch: no answer leaves before the commit
//! that holds it, and no time is spent waiting for a batch to fill.
//!
//! A transaction that cannot be ended cleanly (a `ROLLBACK` that fails) is never trusted: the
//! connection is closed, which rolls it back, and a new one is opened before anything else is
//! read or written.

mod ops;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::checkpoint::{Checkpointer, WAL_RESTART_PAGES};
use super::{Reply, Stats, audit, open, queries, run_guarded};
use crate::audit::{Actor, AuditEvent, Head};
use crate::domain::{
    Budget, BudgetId, EntryKind, LedgerEntry, Reservation, Tenant, TenantId, Timestamp,
};
use crate::ids::{self, IdGenerator};
use crate::store::{
    CreateBudget, CreateTenant, Created, EXPIRE_SWEEP_MAX, Keyed, MoveBudget, Reserve,
    SettleReservation, StoreConfig, StoreError, StoredResponse, Written,
};

/// The commands the writer runs.
pub(super) enum WriteCommand {
    /// Creates a tenant, bound to its key if it has one.
    CreateTenant(CreateTenant, Reply<Written<Created>>),
    /// Tombstones a tenant.
    TombstoneTenant(TenantId, Actor, Reply<Tenant>),
    /// Creates a budget.
    CreateBudget(CreateBudget, Reply<Written<Budget>>),
    /// Closes a budget.
    CloseBudget(TenantId, Option<BudgetId>, Actor, Reply<Budget>),
    /// Credits or debits a budget.
    MoveBudget(MoveBudget, Reply<Written<LedgerEntry>>),
    /// Takes a hold.
    Reserve(Reserve, Reply<Written<Reservation>>),
    /// Commits, releases or extends a reservation.
    Settle(SettleReservation, Reply<Written<Reservation>>),
    /// Records every expiry due now (the tests' clock does not move by itself).
    #[cfg(test)]
    ExpireDue(Reply<usize>),
    /// Answers once a write transaction could begin: the readiness probe.
    CheckWritable(Reply<()>),
    /// Erases idempotency records older than the replay window.
    PurgeExpired(Reply<usize>),
    /// Refuses new commands, finishes the queued ones, checkpoints and ends the thread.
    Shutdown,
}

impl WriteCommand {
    fn writes(&self) -> bool {
        !matches!(self, Self::CheckWritable(..) | Self::Shutdown)
    }
}

/// The longest the writer sleeps before it looks at the clock again for due expiries.
const WAKE_INTERVAL_MAX: Duration = Duration::from_millis(500);

/// How long the writer waits before it tries again to record expiries after a failure.
const SWEEP_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What one batch changed, applied to [`Stats`] once it is committed.
#[derive(Debug, Default, Clone)]
struct Delta {
    created: u64,
    tombstoned: u64,
    audit_events: u64,
    /// Budgets by state (open, closed); a close moves one from the first to the second.
    budgets: [i64; 2],
    /// Reservations by state (active, committed, released, expired).
    reservations: [i64; 4],
    /// Ledger entries by kind.
    entries: [u64; 7],
    /// Idempotency records erased; their tokens must leave the WAL too.
    purged: usize,
}

/// A finished command, waiting for its batch's commit to decide its answer.
type Finish = Box<dyn FnOnce(Option<&StoreError>) + Send>;

fn finish<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Finish {
    Box::new(move |commit_error| {
        let answer = match commit_error {
            Some(e) => Err(e.clone()),
            None => result,
        };
        // The requester may have gone away; the outcome stands either way.
        let _ = reply.send(answer);
    })
}

/// The state of the store thread.
pub(super) struct Writer {
    conn: Connection,
    config: StoreConfig,
    stats: Arc<Stats>,
    head: Head,
    ids: IdGenerator,
    delta: Delta,
    /// The latest time this writer used: time never runs backwards for it.
    last_now: Timestamp,
    /// No active reservation expires before this instant ([`Timestamp::MAX`]: none is
    /// active). A lower bound: lowered by every new hold and every extend (which may
    /// shorten a hold), raised only by a sweep that read the true soonest expiry.
    next_expiry: Timestamp,
    /// After a sweep failed, the next is not tried before this instant, so a database that
    /// refuses writes is not asked again in a busy loop.
    sweep_retry_at: Option<Instant>,
    /// Set when a command left the transaction in a state the batch must not commit.
    poisoned: Option<StoreError>,
    /// Set when the head could not be read back after a failed batch: it is read again at
    /// the start of the next transaction, before anything is appended.
    head_stale: bool,
    /// Set when a transaction could not be ended and the connection could not be replaced:
    /// a new connection is opened before the next batch.
    reopen_pending: bool,
    /// Whether a write could begin, once a probe of this batch has found out.
    writable: Option<Result<(), StoreError>>,
    checkpointer: Checkpointer,
    /// The fault hook of the tests: the next `ROLLBACK` fails without rolling back.
    #[cfg(test)]
    fail_next_rollback: bool,
}

impl Writer {
    /// Takes over the read-write connection: starts the checkpointer, reads the head, the counts and the latest id.
    pub(super) fn new(mut conn: Connection, config: StoreConfig) -> Result<Self, open::OpenError> {
        let checkpointer = Checkpointer::start(open::open_checkpointer(&config.path)?)
            .map_err(|e| open::OpenError::Io(format!("cannot start the checkpoint thread: {e}")))?;
        let stats = Stats::default();
        checkpointer.watch(&mut conn, Arc::clone(&stats.wal_frames))?;
        let head = audit::load_head(&conn)?;
        let latest = queries::latest_ulid(&conn)?;
        // Unknown until read: the first batch reads it.
        let next_expiry = Timestamp::from_unix_ms(0);
        load_counts(&conn, &stats)?;
        stats
            .audit_events
            .store(u64::try_from(head.seq).unwrap_or(0), Ordering::Relaxed);
        Ok(Self {
            conn,
            config,
            stats: Arc::new(stats),
            head,
            ids: IdGenerator::after(latest),
            delta: Delta::default(),
            last_now: Timestamp::from_unix_ms(0),
            next_expiry,
            sweep_retry_at: None,
            poisoned: None,
            head_stale: false,
            reopen_pending: false,
            writable: None,
            checkpointer,
            #[cfg(test)]
            fail_next_rollback: false,
        })
    }

    /// The counters the handle reads for `/metrics`.
    pub(super) fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// Runs batches until a `Shutdown` has been taken and the queue is empty, or every sender
    /// is gone; then checkpoints and closes.
    pub(super) fn run(mut self, queue: &flume::Receiver<WriteCommand>) {
        let mut batch = Vec::with_capacity(self.config.commit_batch_max);
        let mut stopping = false;
        loop {
            if !stopping {
                match self.wait(queue) {
                    Ok(Some(first)) => batch.push(first),
                    // An expiry is due: the batch below records it.
                    Ok(None) => {}
                    Err(()) => break,
                }
            }
            while batch.len() < self.config.commit_batch_max {
                match queue.try_recv() {
                    Ok(command) => batch.push(command),
                    Err(_) => break,
                }
            }
            if batch.is_empty() && (stopping || !self.expiry_due()) {
                if stopping {
                    break;
                }
                continue;
            }
            // After the marker, what is still queued runs, and then the thread ends.
            stopping |= batch.iter().any(|c| matches!(c, WriteCommand::Shutdown));
            self.run_batch(&mut batch);
        }
        self.close();
    }

    /// Waits for a command, or (with the system clock) until the soonest reservation expires,
    /// whichever comes first. `Err` when every sender is gone.
    /// A wait lasts at most [`WAKE_INTERVAL_MAX`] and is then computed again, since the
    /// monotonic clock it sleeps on does not follow a step of the system clock (or a pause of
    /// the machine).
    fn wait(&self, queue: &flume::Receiver<WriteCommand>) -> Result<Option<WriteCommand>, ()> {
        if !self.config.clock.wakes() || self.next_expiry == Timestamp::MAX {
            return queue.recv().map(Some).map_err(|_| ());
        }
        let wait_ms = self
            .next_expiry
            .unix_ms()
            .saturating_sub(self.clock_now().unix_ms());
        let wait = Duration::from_millis(wait_ms).min(WAKE_INTERVAL_MAX);
        let mut deadline = Instant::now() + wait;
        if let Some(retry_at) = self.sweep_retry_at {
            deadline = deadline.max(retry_at);
        }
        match queue.recv_deadline(deadline) {
            Ok(command) => Ok(Some(command)),
            Err(flume::RecvTimeoutError::Timeout) => Ok(None),
            Err(flume::RecvTimeoutError::Disconnected) => Err(()),
        }
    }

    /// Whether a reservation may have expired without its expiry recorded, and a sweep may
    /// run now.
    fn expiry_due(&self) -> bool {
        self.next_expiry <= self.clock_now()
            && self.sweep_retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// The time as the writes will see it (see [`Writer::now`]), without recording it.
    fn clock_now(&self) -> Timestamp {
        self.last_now.max(self.config.clock.now())
    }

    /// Runs a batch in one transaction and answers every command once it is settled. When
    /// the transaction cannot begin, is rolled back by SQLite itself (disk full, I/O error), or
    /// a savepoint cannot be closed cleanly, no further command of the batch runs and every
    /// command is answered with the error: nothing runs outside the transaction.
    fn run_batch(&mut self, batch: &mut Vec<WriteCommand>) {
        // Expiries that are due are recorded first, in the batch's transaction; a sweep that
        // leaves more due leaves `next_expiry` due, so the next batch sweeps again at once.
        let sweep = self.expiry_due();
        let writes = batch.iter().filter(|c| c.writes()).count() + usize::from(sweep);
        self.writable = None;
        let mut failed = self.reopen_if_pending().err();
        if failed.is_none() && writes > 0 {
            self.restart_wal_if_long();
        }
        if failed.is_none() && writes > 0 {
            failed = self
                .sql("BEGIN IMMEDIATE")
                .and_then(|()| self.reload_stale_head())
                .err();
        }
        // Taken once the head is known for sure: a reopen leaves it to be read again.
        let head_before = self.head.clone();
        let mut finished: Vec<Finish> = Vec::with_capacity(batch.len());
        if sweep && failed.is_none() {
            let now = self.now();
            match self.guarded(true, |w| w.sweep(now, EXPIRE_SWEEP_MAX)) {
                Ok(swept) if swept.failed == 0 => self.sweep_retry_at = None,
                Ok(_) => self.sweep_retry_at = Some(Instant::now() + SWEEP_RETRY_AFTER),
                Err(e) => {
                    log::warn!("expiries could not be recorded now: {e:?}");
                    self.sweep_retry_at = Some(Instant::now() + SWEEP_RETRY_AFTER);
                }
            }
            failed = self.poisoned.take();
        }
        for command in batch.drain(..) {
            if failed.is_some() {
                finished.push(unanswered(command));
                continue;
            }
            finished.push(self.execute(command, writes > 0));
            if let Some(error) = self.poisoned.take() {
                failed = Some(error);
            } else if writes > 0 && self.conn.is_autocommit() {
                failed = Some(StoreError::Unavailable(
                    "SQLite rolled the transaction back".into(),
                ));
            }
        }
        let outcome = match failed {
            Some(error) => {
                self.end_failed_transaction();
                Err(error)
            }
            None if writes > 0 => self.commit(&head_before),
            None => Ok(()),
        };
        let delta = std::mem::take(&mut self.delta);
        match &outcome {
            Ok(()) if writes > 0 => self.apply(delta, writes),
            Ok(()) => {}
            Err(e) => {
                // A sweep alone that fails (a read-only or full database) is retried after
                // a pause, not in a busy loop, and logged with it.
                if sweep {
                    self.sweep_retry_at = Some(Instant::now() + SWEEP_RETRY_AFTER);
                }
                if !finished.is_empty() || sweep {
                    log::warn!(
                        "a batch of {} commands{} did not commit: {e:?}",
                        finished.len(),
                        if sweep { " and the expiry sweep" } else { "" }
                    );
                }
                self.head = head_before;
                // What the batch did to the soonest expiry is unknown: read it again.
                self.next_expiry = Timestamp::from_unix_ms(0);
                self.resync();
            }
        }
        for done in finished {
            done(outcome.as_ref().err());
        }
    }

    /// When the WAL is longer than [`WAL_RESTART_PAGES`], copies what the checkpointer has
    /// not copied yet (the last batch or two), so that the coming batch starts the WAL over.
    /// A checkpoint that cannot finish (a reader holds old frames) is no error: the WAL
    /// starts over at a later batch.
    fn restart_wal_if_long(&mut self) {
        if self.checkpointer.wal_pages() < WAL_RESTART_PAGES {
            return;
        }
        match self
            .conn
            .wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE)
        {
            // The checkpointer is at it: the next batch looks again.
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {}
            Err(e) => log::warn!("the writer's checkpoint before a batch failed: {e}"),
            Ok(_) => {}
        }
    }

    fn sql(&self, statement: &str) -> Result<(), StoreError> {
        self.conn.prepare_cached(statement)?.execute([])?;
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_rollback) {
            return Err(StoreError::Internal("an injected ROLLBACK failure".into()));
        }
        self.sql("ROLLBACK")
    }

    /// Ends a transaction that must not commit. When `ROLLBACK` fails, or leaves a
    /// transaction open, the connection is replaced: closing it rolls the transaction back,
    /// and nothing is read through it again.
    fn end_failed_transaction(&mut self) {
        if self.conn.is_autocommit() {
            return;
        }
        match self.rollback() {
            Ok(()) if self.conn.is_autocommit() => return,
            Ok(()) => log::error!("ROLLBACK left a transaction open; reopening the database"),
            Err(e) => log::error!("ROLLBACK failed ({e:?}); reopening the database"),
        }
        self.reopen_pending = true;
        if let Err(e) = self.reopen_if_pending() {
            log::error!("cannot reopen the database ({e:?}); trying again before the next batch");
        }
    }

    /// Replaces the connection if an earlier failure asked for it. The old one is closed
    /// first, which makes SQLite roll back what it left open; a close that fails keeps the
    /// old connection and the request to reopen, and the batch fails.
    fn reopen_if_pending(&mut self) -> Result<(), StoreError> {
        if !self.reopen_pending {
            return Ok(());
        }
        let unavailable = |e: String| StoreError::Unavailable(format!("cannot reopen: {e}"));
        let mut conn =
            open::reopen_writer(&self.config.path).map_err(|e| unavailable(e.to_string()))?;
        self.checkpointer
            .watch(&mut conn, Arc::clone(&self.stats.wal_frames))?;
        let old = std::mem::replace(&mut self.conn, conn);
        if let Err((old, e)) = old.close() {
            self.conn = old;
            return Err(unavailable(format!(
                "the old connection does not close: {e}"
            )));
        }
        self.reopen_pending = false;
        self.head_stale = true;
        Ok(())
    }

    /// Commits the batch. A `COMMIT` that reports an error may still have made the batch
    /// durable; when the chain in the database ends where the batch left it (and the batch
    /// appended to it), the batch did commit, and its commands get their own answers.
    fn commit(&mut self, head_before: &Head) -> Result<(), StoreError> {
        let Err(error) = self.sql("COMMIT") else {
            return Ok(());
        };
        self.end_failed_transaction();
        if !self.conn.is_autocommit() || self.reopen_pending {
            return Err(error);
        }
        let appended = self.head != *head_before;
        match audit::load_head(&self.conn) {
            Ok(stored) if appended && stored == self.head => {
                log::warn!("COMMIT reported {error:?}, but the batch is in the database");
                Ok(())
            }
            _ => Err(error),
        }
    }

    /// Reads the head again if a failed batch left it unknown.
    fn reload_stale_head(&mut self) -> Result<(), StoreError> {
        if self.head_stale {
            self.head = audit::load_head(&self.conn)?;
            self.head_stale = false;
        }
        Ok(())
    }

    /// After a failed batch, takes the audit head from the database again rather than
    /// trusting what was in memory. Only outside a transaction: one left open could show what
    /// never committed. The counts need no reload: a batch that did not commit changed
    /// nothing, and one whose `COMMIT` reported an error but is in the database is answered
    /// and counted as committed (see [`Writer::commit`]).
    fn resync(&mut self) {
        if !self.conn.is_autocommit() || self.reopen_pending {
            self.head_stale = true;
            return;
        }
        match audit::load_head(&self.conn) {
            Ok(head) => {
                self.head = head;
                self.head_stale = false;
            }
            Err(e) => {
                log::error!(
                    "cannot reload the audit head ({e}); it is read again before the next write"
                );
                self.head_stale = true;
            }
        }
    }

    fn apply(&self, delta: Delta, commands: usize) {
        let stats = &self.stats;
        stats.active.fetch_add(delta.created, Ordering::Relaxed);
        stats.active.fetch_sub(delta.tombstoned, Ordering::Relaxed);
        stats
            .tombstoned
            .fetch_add(delta.tombstoned, Ordering::Relaxed);
        stats
            .audit_events
            .fetch_add(delta.audit_events, Ordering::Relaxed);
        // A negative change is added as its two's complement: the sum wraps to the count.
        let add = |counts: &[AtomicU64], changes: &[i64]| {
            for (count, change) in counts.iter().zip(changes) {
                count.fetch_add(*change as u64, Ordering::Relaxed);
            }
        };
        add(&stats.budgets, &delta.budgets);
        add(&stats.reservations, &delta.reservations);
        for (count, change) in stats.entries.iter().zip(delta.entries) {
            count.fetch_add(change, Ordering::Relaxed);
        }
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.commands.fetch_add(commands as u64, Ordering::Relaxed);
        if delta.purged > 0 {
            self.checkpointer.request_truncate();
        }
    }

    fn execute(&mut self, command: WriteCommand, in_transaction: bool) -> Finish {
        match command {
            WriteCommand::CreateTenant(create, reply) => {
                let result = self.guarded(in_transaction, |w| {
                    let CreateTenant {
                        tenant,
                        actor,
                        keyed,
                    } = create;
                    w.keyed(keyed, |w| w.create_tenant(&tenant, &actor))
                });
                finish(reply, result)
            }
            WriteCommand::TombstoneTenant(id, actor, reply) => {
                let result = self.guarded(in_transaction, |w| w.tombstone_tenant(&id, &actor));
                finish(reply, result)
            }
            WriteCommand::CreateBudget(c, reply) => {
                let result = self.guarded(in_transaction, |w| {
                    w.keyed(c.keyed, |w| w.create_budget(&c.tenant, &c.budget, &c.actor))
                });
                finish(reply, result)
            }
            WriteCommand::CloseBudget(tenant, id, actor, reply) => {
                let result = self.guarded(in_transaction, |w| {
                    w.close_budget(&tenant, id.as_ref(), &actor)
                });
                finish(reply, result)
            }
            WriteCommand::MoveBudget(c, reply) => {
                let result = self.guarded(in_transaction, |w| {
                    w.keyed(c.keyed, |w| {
                        w.move_budget(&c.tenant, c.budget.as_ref(), &c.movement, &c.actor)
                    })
                });
                finish(reply, result)
            }
            WriteCommand::Reserve(c, reply) => {
                let result = self.guarded(in_transaction, |w| {
                    w.keyed(c.keyed, |w| w.reserve(&c.tenant, &c.reservation, &c.actor))
                });
                finish(reply, result)
            }
            WriteCommand::Settle(c, reply) => {
                let result = self.guarded(in_transaction, |w| {
                    w.keyed(c.keyed, |w| {
                        w.settle(&c.tenant, c.reservation.as_ref(), c.settle, &c.actor)
                    })
                });
                finish(reply, result)
            }
            #[cfg(test)]
            WriteCommand::ExpireDue(reply) => {
                let result = self.guarded(in_transaction, |w| {
                    let now = w.now();
                    let mut swept = 0;
                    loop {
                        let round = w.sweep(now, EXPIRE_SWEEP_MAX)?;
                        swept += round.found - round.failed;
                        if round.found < EXPIRE_SWEEP_MAX || round.failed > 0 {
                            return Ok(swept);
                        }
                    }
                });
                finish(reply, result)
            }
            WriteCommand::CheckWritable(reply) => {
                // A prober that has given up needs no lock taken for it.
                if reply.is_closed() {
                    return Box::new(|_| {});
                }
                let result = self.guarded(false, |w| w.check_writable(in_transaction));
                finish(reply, result)
            }
            WriteCommand::PurgeExpired(reply) => {
                let result = self.guarded(in_transaction, Writer::purge_expired);
                finish(reply, result)
            }
            WriteCommand::Shutdown => Box::new(|_| {}),
        }
    }

    /// Runs `op` inside a savepoint (for writes in a transaction), rolling it back alone when
    /// it fails or panics. A panic becomes [`StoreError::Internal`]; the thread lives on.
    fn guarded<T>(
        &mut self,
        savepoint: bool,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if savepoint {
            self.sql("SAVEPOINT command")?;
        }
        let (head, delta, next_expiry) = (self.head.clone(), self.delta.clone(), self.next_expiry);
        let result = run_guarded(|| op(self));
        if result.is_err() {
            // What the command appended, counted or expired is rolled back with it.
            self.head = head.clone();
            self.delta = delta.clone();
            self.next_expiry = next_expiry;
        }
        if savepoint {
            let ended = if result.is_ok() {
                self.sql("RELEASE command")
            } else {
                self.sql("ROLLBACK TO command")
                    .and_then(|()| self.sql("RELEASE command"))
            };
            if let Err(error) = ended {
                // The command's changes cannot be told apart from the batch's any more: the
                // whole batch must fail rather than commit them behind an error answer.
                self.poisoned = Some(error.clone());
                if result.is_ok() {
                    self.head = head;
                    self.delta = delta;
                    self.next_expiry = next_expiry;
                    return Err(error);
                }
            }
        }
        result
    }

    /// The one idempotency wrapper: with a key, the stored response if the key is bound (or
    /// `IdempotencyMismatch` if it is bound to another request); else runs `op` and keeps its
    /// rendered response beside its effect, in the same transaction.
    fn keyed<T>(
        &mut self,
        keyed: Option<Keyed<T>>,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<Written<T>, StoreError> {
        let Some(keyed) = keyed else {
            return op(self).map(Written::Fresh);
        };
        let now_ms = ids::now_unix_ms();
        if let Some(stored) = self.replay(&keyed, now_ms)? {
            return Ok(Written::Replayed(stored));
        }
        let value = op(self)?;
        let Keyed {
            principal,
            key,
            method,
            path,
            fingerprint,
            render,
        } = keyed;
        let response = render(&value);
        // REPLACE: an expired record of the same key may still be waiting for the purge.
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO idempotency_keys (principal, key, method, path, \
                 fingerprint, status, location, response_body, created_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                principal,
                key.as_str(),
                method,
                path,
                &fingerprint.as_bytes()[..],
                response.status,
                response.location,
                response.body,
                i64::try_from(now_ms).unwrap_or(i64::MAX),
            ])?;
        Ok(Written::Fresh(value))
    }

    /// The stored response for `keyed` if its key is bound and unexpired.
    fn replay<T>(
        &self,
        keyed: &Keyed<T>,
        now_ms: u64,
    ) -> Result<Option<StoredResponse>, StoreError> {
        type Row = (String, String, Vec<u8>, u16, Option<String>, String);
        let found: Option<Row> = self
            .conn
            .prepare_cached(
                "SELECT method, path, fingerprint, status, location, response_body \
                 FROM idempotency_keys WHERE principal = ?1 AND key = ?2 AND created_ms > ?3",
            )?
            .query_row(
                params![
                    keyed.principal,
                    keyed.key.as_str(),
                    self.expiry_cutoff_ms(now_ms)
                ],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                },
            )
            .optional()?;
        let Some((method, path, fingerprint, status, location, body)) = found else {
            return Ok(None);
        };
        let same = method == keyed.method
            && path == keyed.path
            && fingerprint.as_slice() == keyed.fingerprint.as_bytes();
        if !same {
            return Err(StoreError::IdempotencyMismatch);
        }
        Ok(Some(StoredResponse {
            status,
            location,
            body,
        }))
    }

    fn expiry_cutoff_ms(&self, now_ms: u64) -> i64 {
        let ttl_ms = u64::try_from(self.config.idempotency_ttl.as_millis()).unwrap_or(u64::MAX);
        i64::try_from(now_ms.saturating_sub(ttl_ms)).unwrap_or(i64::MAX)
    }

    fn purge_expired(&mut self) -> Result<usize, StoreError> {
        let cutoff = self.expiry_cutoff_ms(ids::now_unix_ms());
        let purged = self
            .conn
            .prepare_cached("DELETE FROM idempotency_keys WHERE created_ms <= ?1")?
            .execute([cutoff])?;
        self.delta.purged += purged;
        Ok(purged)
    }

    /// Proves a write could begin: inside a write batch the lock is held already; otherwise
    /// `BEGIN IMMEDIATE` takes it (waiting out the busy timeout) and lets it go.
    /// Every probe of one batch shares one attempt.
    fn check_writable(&mut self, in_transaction: bool) -> Result<(), StoreError> {
        if in_transaction {
            return Ok(());
        }
        if let Some(known) = &self.writable {
            return known.clone();
        }
        let began = self.sql("BEGIN IMMEDIATE");
        if began.is_ok() && (self.rollback().is_err() || !self.conn.is_autocommit()) {
            self.end_failed_transaction();
        }
        self.writable = Some(began.clone());
        began
    }

    /// Appends `event` to the chain, inside the caller's transaction.
    fn record(
        &mut self,
        occurred_at: &str,
        actor: &Actor,
        event: &AuditEvent,
    ) -> Result<(), StoreError> {
        let row = self.head.link(occurred_at, actor, event);
        audit::append(&self.conn, &row)?;
        self.head = row.into_head();
        self.delta.audit_events += 1;
        Ok(())
    }

    /// The test builds' fault hooks, keyed by the name of a tenant being created, run once
    /// its row and its event are written: a panic (the savepoint must take both back), or a
    /// failure of the batch whose `ROLLBACK` then fails too.
    #[cfg(test)]
    fn inject_faults(&mut self, name: &str) {
        if name == crate::store::FAULT_PANIC_NAME {
            panic!("an injected fault");
        }
        if name == crate::store::FAULT_ROLLBACK_NAME {
            self.fail_next_rollback = true;
            self.poisoned = Some(StoreError::Unavailable("an injected failure".into()));
        }
    }

    /// Checkpoints the WAL into the main file so the database is one self-contained file
    /// after a clean stop.
    fn close(mut self) {
        self.checkpointer.stop();
        let checkpoint = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        match checkpoint {
            Ok(0) => log::info!("store closed; the WAL is checkpointed"),
            Ok(_) => log::warn!("store closed; the checkpoint was blocked by a reader"),
            Err(e) => log::warn!("store closed without a checkpoint: {e}"),
        }
    }
}

/// Counts tenants by state into `stats`.
fn load_counts(conn: &Connection, stats: &Stats) -> rusqlite::Result<()> {
    // Counts of `sql`'s rows (key, count) for each of `names`, in order.
    let count = |sql: &str, names: &[&str]| -> rusqlite::Result<Vec<u64>> {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query([])?;
        let mut found = vec![0; names.len()];
        while let Some(row) = rows.next()? {
            let key = row.get_ref(0)?.as_str()?;
            if let Some(i) = names.iter().position(|n| *n == key) {
                found[i] = row.get::<_, i64>(1)?.unsigned_abs();
            }
        }
        Ok(found)
    };
    let store = |into: &[AtomicU64], counts: Vec<u64>| {
        for (slot, n) in into.iter().zip(counts) {
            slot.store(n, Ordering::Relaxed);
        }
    };
    let tenants = count(
        "SELECT state, count(*) FROM tenants GROUP BY state",
        &["active", "tombstoned"],
    )?;
    stats.active.store(tenants[0], Ordering::Relaxed);
    stats.tombstoned.store(tenants[1], Ordering::Relaxed);
    store(
        &stats.budgets,
        count(
            "SELECT state, count(*) FROM budgets GROUP BY state",
            &["open", "closed"],
        )?,
    );
    store(
        &stats.reservations,
        count(
            "SELECT state, count(*) FROM reservations GROUP BY state",
            &["active", "committed", "released", "expired"],
        )?,
    );
    let kinds = EntryKind::ALL.map(EntryKind::name);
    store(
        &stats.entries,
        count(
            "SELECT kind, count(*) FROM ledger_entries GROUP BY kind",
            &kinds,
        )?,
    );
    Ok(())
}

/// An answer for a command that was not run because its batch had already failed; the
/// batch's error is what it receives.
fn unanswered(command: WriteCommand) -> Finish {
    let not_run = || StoreError::Internal("not run".into());
    match command {
        WriteCommand::CreateTenant(_, reply) => finish(reply, Err(not_run())),
        WriteCommand::TombstoneTenant(_, _, reply) => finish(reply, Err(not_run())),
        WriteCommand::CreateBudget(_, reply) => finish(reply, Err(not_run())),
        WriteCommand::CloseBudget(_, _, _, reply) => finish(reply, Err(not_run())),
        WriteCommand::MoveBudget(_, reply) => finish(reply, Err(not_run())),
        WriteCommand::Reserve(_, reply) | WriteCommand::Settle(_, reply) => {
            finish(reply, Err(not_run()))
        }
        #[cfg(test)]
        WriteCommand::ExpireDue(reply) => finish(reply, Err(not_run())),
        WriteCommand::CheckWritable(reply) => finish(reply, Err(not_run())),
        WriteCommand::PurgeExpired(reply) => finish(reply, Err(not_run())),
        WriteCommand::Shutdown => Box::new(|_| {}),
    }
}

/// True when `e` is a unique index whose first column is `column` (as `table.column`)
/// refusing a second holder: an active tenant's name, an open budget's name.
fn is_unique_clash(e: &rusqlite::Error, column: &str) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(err, Some(message)) => {
            err.code == ErrorCode::ConstraintViolation
                && message.starts_with("UNIQUE")
                && message.contains(column)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::domain::{Atomic, BodyFingerprint, IdempotencyKey, Name, NewTenant};
    use crate::store::{FAULT_ROLLBACK_NAME, IDEMPOTENCY_TTL_MAX};

    /// A writer on a fresh database in `dir`.
    fn writer(dir: &tempfile::TempDir) -> Writer {
        let config = StoreConfig {
            path: dir.path().join("t.db"),
            queue_depth: 8,
            credential_queue_depth: 8,
            commit_batch_max: 8,
            readers: 1,
            idempotency_ttl: IDEMPOTENCY_TTL_MAX,
            clock: crate::store::Clock::System,
        };
        let conn = open::open_writer(&config.path).expect("the database opens");
        Writer::new(conn, config).expect("the writer starts")
    }

    fn new_tenant(name: &str) -> NewTenant {
        NewTenant {
            name: Name::parse(name).expect("a name"),
            opening_deposit: Atomic::parse("5").expect("an amount"),
        }
    }

    /// A create command and the receiver of its answer.
    fn create(
        name: &str,
        keyed: Option<Keyed<Created>>,
    ) -> (
        WriteCommand,
        oneshot::Receiver<Result<Written<Created>, StoreError>>,
    ) {
        let (reply, answer) = oneshot::channel();
        let command = CreateTenant {
            tenant: new_tenant(name),
            actor: Actor::Admin,
            keyed,
        };
        (WriteCommand::CreateTenant(command, reply), answer)
    }

    /// Runs `commands` as one batch.
    fn run(writer: &mut Writer, commands: Vec<WriteCommand>) {
        let mut batch = commands;
        writer.run_batch(&mut batch);
    }

    fn tenant_names(writer: &Writer) -> Vec<String> {
        let mut stmt = writer
            .conn
            .prepare("SELECT name FROM tenants ORDER BY id")
            .expect("a query");
        stmt.query_map([], |row| row.get(0))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("names")
    }

    fn keyed(principal: &str, key: &str, path: &str, body: &[u8]) -> Option<Keyed<Created>> {
        Some(Keyed {
            principal: principal.into(),
            key: IdempotencyKey::parse(key.as_bytes()).expect("a key"),
            method: "POST",
            path: path.into(),
            fingerprint: BodyFingerprint::of(body),
            render: Box::new(|created: &Created| StoredResponse {
                status: 201,
                location: None,
                body: created.tenant.id.to_string(),
            }),
        })
    }

    /// A `ROLLBACK` that fails leaves a transaction open, holding the failed batch's rows. The
    /// connection is replaced (which rolls them back), nothing of the batch survives, the
    /// very next write commits, and the chain is whole.
    #[test]
    fn a_failed_rollback_reopens_the_connection() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let (first, first_answer) = create("first", None);
        let (faulty, faulty_answer) = create(FAULT_ROLLBACK_NAME, None);
        run(&mut writer, vec![first, faulty]);
        assert!(first_answer.blocking_recv().expect("an answer").is_err());
        assert!(faulty_answer.blocking_recv().expect("an answer").is_err());
        assert!(writer.conn.is_autocommit(), "no transaction is left open");

        let (next, next_answer) = create("next", None);
        run(&mut writer, vec![next]);
        let created = next_answer
            .blocking_recv()
            .expect("an answer")
            .expect("the next write commits");
        assert!(matches!(created, Written::Fresh(_)));
        assert_eq!(
            tenant_names(&writer),
            ["next"],
            "nothing of the failed batch"
        );
        let head = audit::verify(&writer.conn).expect("the chain verifies");
        assert_eq!(head.seq, 1);
        assert_eq!(head, writer.head, "the writer's head is the stored one");
    }

    /// The connection is reopened only on the file that was open: one removed meanwhile is
    /// not created anew (which would answer writes that no reader sees).
    #[test]
    fn a_reopen_never_creates_a_new_database() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let path = dir.path().join("t.db");
        std::fs::remove_file(&path).expect("removing the file under the writer");
        let (faulty, faulty_answer) = create(FAULT_ROLLBACK_NAME, None);
        run(&mut writer, vec![faulty]);
        assert!(faulty_answer.blocking_recv().expect("an answer").is_err());
        let (next, next_answer) = create("next", None);
        run(&mut writer, vec![next]);
        assert!(
            matches!(
                next_answer.blocking_recv().expect("an answer"),
                Err(StoreError::Unavailable(_))
            ),
            "no write is taken while the file cannot be reopened"
        );
        assert!(!path.exists(), "the database file was not created anew");
    }

    /// A command that fails after it counted (here its rendering panics) takes its counts
    /// back with it: the batch's other command commits, and the counters match the database.
    #[test]
    fn a_failed_command_counts_nothing() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let mut panicking = keyed("admin", "k", "/v1/tenants", b"x");
        if let Some(keyed) = panicking.as_mut() {
            keyed.render = Box::new(|_: &Created| panic!("a rendering that fails"));
        }
        let (failing, failing_answer) = create("failing", panicking);
        let (plain, plain_answer) = create("plain", None);
        run(&mut writer, vec![failing, plain]);
        assert!(matches!(
            failing_answer.blocking_recv().expect("an answer"),
            Err(StoreError::Internal(_))
        ));
        assert!(plain_answer.blocking_recv().expect("an answer").is_ok());
        assert_eq!(tenant_names(&writer), ["plain"]);
        let stats = writer.stats();
        assert_eq!(stats.active.load(Ordering::Relaxed), 1, "one active tenant");
        assert_eq!(stats.audit_events.load(Ordering::Relaxed), 1, "one event");
        assert_eq!(audit::verify(&writer.conn).map(|h| h.seq), Ok(1));
    }

    /// `audit verify` compares the replayed chain with the stored rows: an edited balance, a
    /// renamed tenant or a column of the wrong type is found although the chain is intact.
    #[test]
    fn verify_finds_rows_edited_behind_the_service() {
        let tampering = [
            (
                "an edited balance",
                "DROP TRIGGER budgets_identity_immutable; UPDATE budgets SET spent_atomic = '1'",
            ),
            ("an edited name", "UPDATE tenants SET name = 'other'"),
            (
                "an edited tenant deposit",
                "UPDATE tenants SET opening_deposit_atomic = '6'",
            ),
            (
                "a name of the wrong type",
                "UPDATE tenants SET name = x'ff00'",
            ),
            (
                "an edited creation time",
                "UPDATE tenants SET created_at = '2000-01-01T00:00:00.000Z'",
            ),
        ];
        for (what, sql) in tampering {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let mut writer = writer(&dir);
            let (command, answer) = create("kept", None);
            run(&mut writer, vec![command]);
            assert!(answer.blocking_recv().expect("an answer").is_ok());
            assert_eq!(
                audit::verify(&writer.conn).map(|h| h.seq),
                Ok(1),
                "{what}: before"
            );
            writer
                .conn
                .execute_batch(&format!("DROP TRIGGER tenants_identity_immutable; {sql};"))
                .expect("tampering");
            assert!(
                matches!(
                    audit::verify(&writer.conn),
                    Err(crate::audit::VerifyError::Unaccounted { .. })
                ),
                "{what} is found: {:?}",
                audit::verify(&writer.conn)
            );
        }
    }

    #[test]
    fn a_created_tenant_never_shows_its_token() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let (command, answer) = create("secret", None);
        run(&mut writer, vec![command]);
        let Ok(Written::Fresh(created)) = answer.blocking_recv().expect("an answer") else {
            panic!("a fresh create");
        };
        let shown = format!("{created:?}");
        assert!(!shown.contains(created.token.plaintext()), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    /// Keys belong to their principal and bind method, path and body.
    #[test]
    fn keys_are_scoped_to_their_principal_and_request() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let answer = |writer: &mut Writer, name: &str, keyed| {
            let (command, answer) = create(name, keyed);
            run(writer, vec![command]);
            answer.blocking_recv().expect("an answer")
        };
        let first = answer(&mut writer, "a", keyed("admin", "k", "/v1/tenants", b"x"));
        let Ok(Written::Fresh(first)) = first else {
            panic!("a fresh create: {first:?}");
        };
        match answer(&mut writer, "b", keyed("admin", "k", "/v1/tenants", b"x")) {
            Ok(Written::Replayed(stored)) => {
                assert_eq!(stored.body, first.tenant.id.to_string());
                assert_eq!(stored.status, 201);
            }
            other => panic!("a replay: {other:?}"),
        }
        for (what, keyed) in [
            ("another body", keyed("admin", "k", "/v1/tenants", b"y")),
            ("another path", keyed("admin", "k", "/v1/other", b"x")),
        ] {
            assert!(
                matches!(
                    answer(&mut writer, "c", keyed),
                    Err(StoreError::IdempotencyMismatch)
                ),
                "{what}"
            );
        }
        let other = answer(
            &mut writer,
            "d",
            keyed("tenant:ten_x", "k", "/v1/tenants", b"x"),
        );
        assert!(
            matches!(other, Ok(Written::Fresh(_))),
            "another principal's key of the same name is its own: {other:?}"
        );
        assert_eq!(tenant_names(&writer), ["a", "d"]);
    }

    /// Readiness proves a write could begin: a write lock held by another connection makes
    /// it fail once the busy timeout is over.
    #[test]
    fn writability_needs_the_write_lock() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let check = |writer: &mut Writer| {
            let (reply, answer) = oneshot::channel();
            run(writer, vec![WriteCommand::CheckWritable(reply)]);
            answer.blocking_recv().expect("an answer")
        };
        assert_eq!(check(&mut writer), Ok(()));
        let other = Connection::open(dir.path().join("t.db")).expect("a second connection");
        other
            .execute_batch("BEGIN IMMEDIATE")
            .expect("the other takes the lock");
        assert!(
            matches!(check(&mut writer), Err(StoreError::Unavailable(_))),
            "a locked database is not ready"
        );
        assert!(writer.conn.is_autocommit());
        other.execute_batch("ROLLBACK").expect("the lock is let go");
        assert_eq!(check(&mut writer), Ok(()));
    }

    /// Under batches that never pause, the WAL starts over once it is longer than
    /// [`WAL_RESTART_PAGES`], even with no checkpointer copying anything: the writer copies
    /// what is left before its next batch. (The checkpointer is stopped here, the hardest
    /// case: without the writer's checkpoint the WAL would only grow.)
    #[test]
    fn the_wal_starts_over_under_batches_that_never_pause() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        writer.checkpointer.stop();
        let mut longest = 0;
        let mut n = 0;
        while longest < WAL_RESTART_PAGES {
            let batch: Vec<_> = (0..256)
                .map(|_| {
                    n += 1;
                    create(&format!("tenant {n}"), None).0
                })
                .collect();
            run(&mut writer, batch);
            longest = longest.max(writer.checkpointer.wal_pages());
            assert!(
                n < 100_000,
                "the WAL never reached {WAL_RESTART_PAGES} pages"
            );
        }
        let (next, answer) = create("the next one", None);
        run(&mut writer, vec![next]);
        assert!(answer.blocking_recv().expect("an answer").is_ok());
        let pages = writer.checkpointer.wal_pages();
        assert!(
            pages < 100,
            "the WAL went on from {longest} pages to {pages} instead of starting over"
        );
    }
}
