//! The store's write commands, written once for every backend.
//!
//! A backend's writer runs commands in batches, one transaction a batch; [`Commands`] runs
//! each command of a batch on the backend's connection ([`Sql`]): inside a savepoint of its own
//! ([`Commands::guarded`]), bound to its `Idempotency-Key` if it has one
//! ([`Commands::keyed`]), with its ledger entries and its audit event ([`Commands::record`]).
//! The writer commits, then answers: a command's [`Finish`] waits for the batch's outcome.
//!
//! The commands themselves are in [`ops`].

mod ops;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::sql::{Param, Sql, text};
use super::{
    Clock, CreateBudget, CreateTenant, Created, Keyed, MoveBudget, Reserve, SettleReservation,
    StoreConfig, StoreError, StoredResponse, Written, run_guarded,
};
use crate::audit::{Actor, AuditEvent, Head, Linked};
use crate::domain::{
    Budget, BudgetId, EntryKind, LedgerEntry, Reservation, Tenant, TenantId, Timestamp,
};
use crate::ids::{self, IdGenerator};

/// The longest a writer sleeps before it looks at the clock again for due expiries.
pub(crate) const WAKE_INTERVAL_MAX: Duration = Duration::from_millis(500);

/// How long a writer waits before it tries again to record expiries after a failure.
pub(crate) const SWEEP_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where a command's answer goes.
pub(crate) type Reply<T> = tokio::sync::oneshot::Sender<Result<T, StoreError>>;

/// The commands the writer runs.
pub(crate) enum WriteCommand {
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
    /// Whether the command writes (and so needs a write transaction).
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, Self::CheckWritable(..) | Self::Shutdown)
    }
}

/// What one batch changed, applied to [`Stats`] once it is committed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Delta {
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
    pub(crate) purged: usize,
}

/// A finished command, waiting for its batch's commit to decide its answer.
pub(crate) type Finish = Box<dyn FnOnce(Option<&StoreError>) + Send>;

pub(crate) fn finish<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Finish {
    Box::new(move |commit_error| {
        let answer = match commit_error {
            Some(e) => Err(e.clone()),
            None => result,
        };
        // The requester may have gone away; the outcome stands either way.
        let _ = reply.send(answer);
    })
}

/// Counters the writer keeps; they change only after a commit.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) active: AtomicU64,
    pub(crate) tombstoned: AtomicU64,
    /// Budgets by state: open, closed.
    pub(crate) budgets: [AtomicU64; 2],
    /// Reservations by recorded state: active, committed, released, expired.
    pub(crate) reservations: [AtomicU64; 4],
    /// Ledger entries by kind, in `EntryKind::ALL` order.
    pub(crate) entries: [AtomicU64; 7],
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
        // Counts of `sql`'s rows (key, count) for each of `names`, in order.
        let mut count = |sql: &str, names: &[&str]| -> Result<Vec<u64>, StoreError> {
            let mut found = vec![0; names.len()];
            let rows = db.query(sql, &[], |row| {
                let n = text(row, 1)?;
                let n = n
                    .parse::<u64>()
                    .map_err(|_| row.corrupt(1, format!("a bad count {n:?}")))?;
                Ok((text(row, 0)?.into_owned(), n))
            })?;
            for (key, n) in rows {
                if let Some(i) = names.iter().position(|name| *name == key) {
                    found[i] = n;
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
            "SELECT state, CAST(count(*) AS TEXT) FROM tenants GROUP BY state",
            &["active", "tombstoned"],
        )?;
        self.active.store(tenants[0], Ordering::Relaxed);
        self.tombstoned.store(tenants[1], Ordering::Relaxed);
        store(
            &self.budgets,
            count(
                "SELECT state, CAST(count(*) AS TEXT) FROM budgets GROUP BY state",
                &["open", "closed"],
            )?,
        );
        store(
            &self.reservations,
            count(
                "SELECT state, CAST(count(*) AS TEXT) FROM reservations GROUP BY state",
                &["active", "committed", "released", "expired"],
            )?,
        );
        let kinds = EntryKind::ALL.map(EntryKind::name);
        store(
            &self.entries,
            count(
                "SELECT kind, CAST(count(*) AS TEXT) FROM ledger_entries GROUP BY kind",
                &kinds,
            )?,
        );
        let head = load_head(db)?;
        self.audit_events
            .store(u64::try_from(head.seq).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    /// Adds what a committed batch of `commands` changed.
    pub(crate) fn apply(&self, delta: &Delta, commands: usize) {
        self.active.fetch_add(delta.created, Ordering::Relaxed);
        self.active.fetch_sub(delta.tombstoned, Ordering::Relaxed);
        self.tombstoned
            .fetch_add(delta.tombstoned, Ordering::Relaxed);
        self.audit_events
            .fetch_add(delta.audit_events, Ordering::Relaxed);
        // A negative change is added as its two's complement: the sum wraps to the count.
        let add = |counts: &[AtomicU64], changes: &[i64]| {
            for (count, change) in counts.iter().zip(changes) {
                count.fetch_add(*change as u64, Ordering::Relaxed);
            }
        };
        add(&self.budgets, &delta.budgets);
        add(&self.reservations, &delta.reservations);
        for (count, change) in self.entries.iter().zip(delta.entries) {
            count.fetch_add(change, Ordering::Relaxed);
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(commands as u64, Ordering::Relaxed);
    }
}

/// A backend's writer, as the batch loop ([`run`]) and [`run_batch`] drive it: what differs
/// between the backends is how a transaction begins, commits and fails.
pub(crate) trait Batches {
    /// The writer's connection.
    type Db: Sql;
    /// The commands' state.
    fn commands(&mut self) -> &mut Commands<Self::Db>;
    /// Commands in one batch, at most.
    fn batch_max(&self) -> usize;
    /// Readies the connection for a batch, and begins its write transaction if `writes`,
    /// with the chain's head known for sure.
    fn begin(&mut self, writes: bool) -> Result<(), StoreError>;
    /// After a command of a write transaction: the error, if the database itself ended the
    /// transaction meanwhile.
    fn lost_transaction(&mut self) -> Option<StoreError>;
    /// Proves a write could begin (the readiness probe); `in_transaction` when one has.
    fn check_writable(&mut self, in_transaction: bool) -> Result<(), StoreError>;
    /// Ends a transaction that must not commit.
    fn rollback(&mut self);
    /// Commits the batch whose chain began at `head_before`; `Ok` when it is in the
    /// database, whatever `COMMIT` itself reported.
    fn commit(&mut self, head_before: &Head) -> Result<(), StoreError>;
    /// After a batch that committed `commands` writes, which changed `delta`.
    fn committed(&mut self, delta: &Delta, commands: usize);
    /// After a batch that did not commit (its head and soonest expiry already reset).
    fn failed(&mut self);
    /// Ends the writer once the last batch has run.
    fn close(self);

    /// Answers a batch's commands once `outcome` is settled. By default at once: the commit
    /// was durable when it returned.
    fn answer(&mut self, answers: Vec<Finish>, outcome: Result<(), StoreError>) {
        answer_all(answers, &outcome);
    }
}

/// Answers every command of a batch whose outcome is `outcome`.
pub(crate) fn answer_all(answers: Vec<Finish>, outcome: &Result<(), StoreError>) {
    for done in answers {
        done(outcome.as_ref().err());
    }
}

/// Runs a batch in one transaction and answers every command once it is settled. When the
/// transaction cannot begin, is ended by the database itself, or a savepoint cannot be closed
/// cleanly, no further command of the batch runs and every command is answered with the
/// error: nothing runs outside the transaction.
pub(crate) fn run_batch<W: Batches>(writer: &mut W, batch: &mut Vec<WriteCommand>) {
    // Expiries that are due are recorded first, in the batch's transaction; a sweep that
    // leaves more due leaves `next_expiry` due, so the next batch sweeps again at once.
    let sweep = writer.commands().expiry_due();
    let writes = batch.iter().filter(|c| c.writes()).count() + usize::from(sweep);
    let mut failed = writer.begin(writes > 0).err();
    // Taken once the head is known for sure: `begin` may have read it again.
    let head_before = writer.commands().head.clone();
    let mut finished: Vec<Finish> = Vec::with_capacity(batch.len());
    if sweep && failed.is_none() {
        failed = writer.commands().sweep_in_batch();
    }
    for command in batch.drain(..) {
        if failed.is_some() {
            finished.push(unanswered(command));
            continue;
        }
        let done: Finish = match command {
            WriteCommand::CheckWritable(reply) if reply.is_closed() => {
                // A prober that has given up needs no lock taken for it.
                Box::new(|_| {})
            }
            WriteCommand::CheckWritable(reply) => {
                finish(reply, run_guarded(|| writer.check_writable(writes > 0)))
            }
            command => writer.commands().execute(command, writes > 0),
        };
        finished.push(done);
        if let Some(error) = writer.commands().poisoned.take() {
            failed = Some(error);
        } else if writes > 0 {
            failed = writer.lost_transaction();
        }
    }
    let outcome = match failed {
        Some(error) => {
            writer.rollback();
            Err(error)
        }
        None if writes > 0 => writer.commit(&head_before),
        None => Ok(()),
    };
    let delta = std::mem::take(&mut writer.commands().delta);
    match &outcome {
        Ok(()) if writes > 0 => writer.committed(&delta, writes),
        Ok(()) => {}
        Err(e) => {
            let cmds = writer.commands();
            // A sweep alone that fails (a read-only or full database) is retried after a
            // pause, not in a busy loop, and logged with it.
            if sweep {
                cmds.sweep_retry_at = Some(Instant::now() + SWEEP_RETRY_AFTER);
            }
            if !finished.is_empty() || sweep {
                log::warn!(
                    "a batch of {} commands{} did not commit: {e:?}",
                    finished.len(),
                    if sweep { " and the expiry sweep" } else { "" }
                );
            }
            cmds.head = head_before;
            // What the batch did to the soonest expiry is unknown: read it again.
            cmds.next_expiry = Timestamp::from_unix_ms(0);
            writer.failed();
        }
    }
    writer.answer(finished, outcome);
}

/// Runs batches until a `Shutdown` has been taken and the queue is empty, or every sender
/// is gone; then closes the writer.
///
/// It blocks for one command, then takes whatever else is already queued, up to the batch's
/// bound, and runs the lot as one batch: no time is spent waiting for a batch to fill.
pub(crate) fn run<W: Batches>(mut writer: W, queue: &flume::Receiver<WriteCommand>) {
    let mut batch = Vec::with_capacity(writer.batch_max());
    let mut stopping = false;
    loop {
        if !stopping {
            match writer.commands().wait(queue) {
                Ok(Some(first)) => batch.push(first),
                // An expiry is due: the batch below records it.
                Ok(None) => {}
                Err(()) => break,
            }
        }
        while batch.len() < writer.batch_max() {
            match queue.try_recv() {
                Ok(command) => batch.push(command),
                Err(_) => break,
            }
        }
        if batch.is_empty() && (stopping || !writer.commands().expiry_due()) {
            if stopping {
                break;
            }
            continue;
        }
        // After the marker, what is still queued runs, and then the thread ends.
        stopping |= batch.iter().any(|c| matches!(c, WriteCommand::Shutdown));
        run_batch(&mut writer, &mut batch);
    }
    writer.close();
}

/// A writer's connection and what it keeps between commands: the chain's head, the id
/// generator, the clock's last reading, the soonest expiry, and what the open batch changed.
pub(crate) struct Commands<D> {
    /// The connection that writes.
    pub(crate) db: D,
    clock: Clock,
    idempotency_ttl: Duration,
    /// The chain's head as the open batch leaves it.
    pub(crate) head: Head,
    ids: IdGenerator,
    /// What the open batch changed, for the counters once it commits.
    pub(crate) delta: Delta,
    /// The latest time this writer used: time never runs backwards for it.
    last_now: Timestamp,
    /// No active reservation expires before this instant ([`Timestamp::MAX`]: none is
    /// active). A lower bound: lowered by every new hold and every extend (which may
    /// shorten a hold), raised only by a sweep that read the true soonest expiry.
    pub(crate) next_expiry: Timestamp,
    /// Set when a command left the transaction in a state the batch must not commit.
    pub(crate) poisoned: Option<StoreError>,
    /// After a sweep failed, the next is not tried before this instant, so a database that
    /// refuses writes is not asked again in a busy loop.
    pub(crate) sweep_retry_at: Option<Instant>,
    /// The fault hook of the tests: the next `ROLLBACK` fails without rolling back.
    #[cfg(test)]
    pub(crate) fail_next_rollback: bool,
}

impl<D: Sql> Commands<D> {
    /// Takes over `db`, whose chain ends at `head` and whose greatest id is `latest`.
    pub(crate) fn new(db: D, config: &StoreConfig, head: Head, latest: Option<ulid::Ulid>) -> Self {
        Self {
            db,
            clock: config.clock.clone(),
            idempotency_ttl: config.idempotency_ttl,
            head,
            ids: IdGenerator::after(latest),
            delta: Delta::default(),
            last_now: Timestamp::from_unix_ms(0),
            // Unknown until read: the first batch reads it.
            next_expiry: Timestamp::from_unix_ms(0),
            poisoned: None,
            sweep_retry_at: None,
            #[cfg(test)]
            fail_next_rollback: false,
        }
    }

    /// The time as the writes will see it (see [`Commands::now`]), without recording it.
    pub(crate) fn clock_now(&self) -> Timestamp {
        self.last_now.max(self.clock.now())
    }

    /// Waits for a command, or (with the system clock) until the soonest reservation expires,
    /// whichever comes first. `Err` when every sender is gone.
    /// A wait lasts at most [`WAKE_INTERVAL_MAX`] and is then computed again, since the
    /// monotonic clock it sleeps on does not follow a step of the system clock (or a pause of
    /// the machine).
    fn wait(&self, queue: &flume::Receiver<WriteCommand>) -> Result<Option<WriteCommand>, ()> {
        if !self.clock.wakes() || self.next_expiry == Timestamp::MAX {
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

    /// Records the due expiries inside the batch's transaction, in a savepoint; a sweep that
    /// fails (or leaves some failed) is tried again after [`SWEEP_RETRY_AFTER`]. The error
    /// that poisons the batch, if any.
    fn sweep_in_batch(&mut self) -> Option<StoreError> {
        let now = self.now();
        match self.guarded(true, |w| w.sweep(now, super::EXPIRE_SWEEP_MAX)) {
            Ok(swept) if swept.failed == 0 => self.sweep_retry_at = None,
            Ok(_) => self.sweep_retry_at = Some(Instant::now() + SWEEP_RETRY_AFTER),
            Err(e) => {
                log::warn!("expiries could not be recorded now: {e:?}");
                self.sweep_retry_at = Some(Instant::now() + SWEEP_RETRY_AFTER);
            }
        }
        self.poisoned.take()
    }

    /// Whether a reservation may have expired without its expiry recorded, and a sweep may
    /// run now.
    pub(crate) fn expiry_due(&self) -> bool {
        self.next_expiry <= self.clock_now()
            && self.sweep_retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// Makes every time and id this writer uses from now on come after `at` and `latest`:
    /// another writer on the same database went that far.
    pub(crate) fn catch_up(&mut self, at: Timestamp, latest: Option<ulid::Ulid>) {
        self.last_now = self.last_now.max(at);
        self.ids.skip_past(latest);
    }

    /// Runs one command of a batch (inside its transaction when `in_transaction`), and
    /// returns what answers it once the batch is settled. The writability probe and the
    /// shutdown marker are the writer's own.
    pub(crate) fn execute(&mut self, command: WriteCommand, in_transaction: bool) -> Finish {
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
                        let round = w.sweep(now, super::EXPIRE_SWEEP_MAX)?;
                        swept += round.found - round.failed;
                        if round.found < super::EXPIRE_SWEEP_MAX || round.failed > 0 {
                            return Ok(swept);
                        }
                    }
                });
                finish(reply, result)
            }
            WriteCommand::CheckWritable(reply) => finish(
                reply,
                Err(StoreError::Internal(
                    "the writer answers probes itself".into(),
                )),
            ),
            WriteCommand::PurgeExpired(reply) => {
                let result = self.guarded(in_transaction, Commands::purge_expired);
                finish(reply, result)
            }
            WriteCommand::Shutdown => Box::new(|_| {}),
        }
    }

    /// Runs `op` inside a savepoint (for writes in a transaction), rolling it back alone when
    /// it fails or panics. A panic becomes [`StoreError::Internal`]; the thread lives on.
    pub(crate) fn guarded<T>(
        &mut self,
        savepoint: bool,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if savepoint {
            // Sent with the command's first statements, where the backend can.
            self.db.send("SAVEPOINT command", &[])?;
        }
        let (head, delta, next_expiry) = (self.head.clone(), self.delta.clone(), self.next_expiry);
        // The command's writes may still be on their way: their errors are its own.
        let result =
            super::run_guarded(|| op(self).and_then(|value| self.db.flush().map(|()| value)));
        if result.is_err() {
            // A command that failed before it waited for its writes: they run now, and are
            // rolled back with it below (their errors are the command's, already failed).
            let _ = self.db.flush();
            // What the command appended, counted or expired is rolled back with it.
            self.head = head.clone();
            self.delta = delta.clone();
            self.next_expiry = next_expiry;
        }
        if savepoint {
            let ended = if result.is_ok() {
                self.db.run("RELEASE command")
            } else {
                self.db
                    .run("ROLLBACK TO command")
                    .and_then(|()| self.db.run("RELEASE command"))
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
        // An expired record of the same key may still be waiting for the purge: replaced.
        let location = response.location.as_deref();
        self.db.send(
            "INSERT INTO idempotency_keys (principal, key, method, path, fingerprint, status, \
             location, response_body, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (principal, key) DO UPDATE SET method = excluded.method, \
             path = excluded.path, fingerprint = excluded.fingerprint, \
             status = excluded.status, location = excluded.location, \
             response_body = excluded.response_body, created_ms = excluded.created_ms",
            &[
                principal.as_str().into(),
                key.as_str().into(),
                method.into(),
                path.as_str().into(),
                Param::Bytes(fingerprint.as_bytes()),
                Param::Int(i64::from(response.status)),
                location.into(),
                response.body.as_str().into(),
                Param::Int(i64::try_from(now_ms).unwrap_or(i64::MAX)),
            ],
        )?;
        Ok(Written::Fresh(value))
    }

    /// The stored response for `keyed` if its key is bound and unexpired.
    fn replay<T>(
        &mut self,
        keyed: &Keyed<T>,
        now_ms: u64,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let found = self.db.query_opt(
            "SELECT method, path, fingerprint, CAST(status AS TEXT), location, response_body \
             FROM idempotency_keys WHERE principal = ?1 AND key = ?2 AND created_ms > ?3",
            &[
                keyed.principal.as_str().into(),
                keyed.key.as_str().into(),
                Param::Int(self.expiry_cutoff_ms(now_ms)),
            ],
            |row| {
                let status = text(row, 3)?;
                Ok((
                    text(row, 0)?.into_owned(),
                    text(row, 1)?.into_owned(),
                    row.blob(2)?.unwrap_or_default().into_owned(),
                    status
                        .parse::<u16>()
                        .map_err(|_| row.corrupt(3, format!("a bad status {status:?}")))?,
                    row.column(4)?.map(|l| l.into_owned()),
                    text(row, 5)?.into_owned(),
                ))
            },
        )?;
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
        let ttl_ms = u64::try_from(self.idempotency_ttl.as_millis()).unwrap_or(u64::MAX);
        i64::try_from(now_ms.saturating_sub(ttl_ms)).unwrap_or(i64::MAX)
    }

    fn purge_expired(&mut self) -> Result<usize, StoreError> {
        let cutoff = self.expiry_cutoff_ms(ids::now_unix_ms());
        let purged = self.db.execute(
            "DELETE FROM idempotency_keys WHERE created_ms <= ?1",
            &[Param::Int(cutoff)],
        )?;
        self.delta.purged += purged;
        Ok(purged)
    }

    /// Appends `event` to the chain, inside the caller's transaction.
    fn record(
        &mut self,
        occurred_at: &str,
        actor: &Actor,
        event: &AuditEvent,
    ) -> Result<(), StoreError> {
        let row = self.head.link(occurred_at, actor, event);
        append(&mut self.db, &row)?;
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
}

/// Reads the chain's head from the database (the genesis head for an empty chain).
pub(crate) fn load_head(db: &mut impl Sql) -> Result<Head, StoreError> {
    last_event(db).map(|(head, _)| head)
}

/// The chain's head and when its last event occurred (the genesis head and the epoch for an
/// empty chain). The `ORDER BY` names the table's column: PostgreSQL would take a bare `seq`
/// for the output column of that name, the text, and sort `9` after `10`.
pub(crate) fn last_event(db: &mut impl Sql) -> Result<(Head, Timestamp), StoreError> {
    let last = db.query_opt(
        "SELECT CAST(seq AS TEXT), hash, occurred_at FROM audit_events \
         ORDER BY audit_events.seq DESC LIMIT 1",
        &[],
        |row| {
            let seq = text(row, 0)?;
            let head = Head {
                seq: seq
                    .parse()
                    .map_err(|_| row.corrupt(0, format!("a bad seq {seq:?}")))?,
                hash: text(row, 1)?.into_owned(),
            };
            let at = text(row, 2)?;
            let at = Timestamp::parse(&at)
                .ok_or_else(|| row.corrupt(2, format!("a bad occurred_at {at:?}")))?;
            Ok((head, at))
        },
    )?;
    Ok(last.unwrap_or_else(|| (Head::genesis(), Timestamp::from_unix_ms(0))))
}

/// Appends one row inside the caller's transaction. The schema's insert trigger refuses a row
/// that does not continue the chain.
fn append(db: &mut impl Sql, row: &Linked) -> Result<(), StoreError> {
    let e = &row.entry;
    db.send(
        "INSERT INTO audit_events \
         (seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        &[
            Param::Int(e.seq),
            e.occurred_at.as_str().into(),
            e.actor.as_ref().into(),
            e.action.as_ref().into(),
            e.tenant_id.as_str().into(),
            e.payload.as_str().into(),
            row.prev_hash.as_str().into(),
            row.hash.as_str().into(),
        ],
    )?;
    Ok(())
}

/// An answer for a command that was not run because its batch had already failed; the
/// batch's error is what it receives.
pub(crate) fn unanswered(command: WriteCommand) -> Finish {
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
