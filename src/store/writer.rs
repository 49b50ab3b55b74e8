//! The writer: the one thread that changes the database, in group-committed batches.
//!
//! It blocks for one command, then takes whatever else is already queued, up to
//! `commit_batch_max`, and runs the lot in ONE transaction, each write inside its own
//! `SAVEPOINT` so that a failing command (a name clash, a panic) rolls back alone. It commits
//! once and only then answers every command in the batch: no answer leaves before the commit
//! that holds it, and no time is spent waiting for a batch to fill.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use serde::Serialize;
use tokio::sync::mpsc;

use super::checkpoint::Checkpointer;
use super::{CreateRequest, Created, Reply, Stats, StoreConfig, StoreError, queries, run_guarded};
use crate::audit::{self, Head};
use crate::db;
use crate::domain::{Atomic, IdempotencyKey, TenantId};
use crate::ids::{self, IdGenerator, TenantToken};
use crate::views::{self, Budget, Tenant, TenantState};

/// The commands the writer runs.
pub(super) enum WriteCommand {
    Create(CreateRequest, Reply<Created>),
    Tombstone(TenantId, Reply<Tenant>),
    /// Answers once the writer has run a query: the readiness probe.
    Ping(Reply<()>),
    /// Erases idempotency records older than the replay window.
    PurgeExpired(Reply<usize>),
    /// Refuses new commands, finishes the queued ones, checkpoints and ends the thread.
    Shutdown,
}

impl WriteCommand {
    fn writes(&self) -> bool {
        matches!(
            self,
            Self::Create(..) | Self::Tombstone(..) | Self::PurgeExpired(..)
        )
    }
}

/// What one batch changed, applied to [`Stats`] once it is committed.
#[derive(Debug, Default)]
struct Delta {
    created: u64,
    tombstoned: u64,
    audit_events: u64,
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
    /// Set when a command left the transaction in a state the batch must not commit.
    poisoned: Option<StoreError>,
    /// Set when the head could not be read back after a failed batch: it is read again at
    /// the start of the next transaction, before anything is appended.
    head_stale: bool,
    checkpointer: Checkpointer,
}

impl Writer {
    pub(super) fn new(mut conn: Connection, config: StoreConfig) -> Result<Self, db::OpenError> {
        let checkpointer = Checkpointer::start(db::open_checkpointer(&config.path)?)
            .map_err(|e| db::OpenError::Io(format!("cannot start the checkpoint thread: {e}")))?;
        checkpointer.watch(&mut conn)?;
        let head = Head::load(&conn)?;
        let latest: Option<String> =
            conn.query_row("SELECT max(id) FROM tenants", [], |r| r.get(0))?;
        let latest = latest.as_deref().and_then(TenantId::parse);
        let stats = Stats::default();
        load_counts(&conn, &stats)?;
        stats
            .audit_events
            .store(u64::try_from(head.seq).unwrap_or(0), Ordering::Relaxed);
        Ok(Self {
            conn,
            config,
            stats: Arc::new(stats),
            head,
            ids: IdGenerator::after(latest.as_ref()),
            delta: Delta::default(),
            poisoned: None,
            head_stale: false,
            checkpointer,
        })
    }

    pub(super) fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    pub(super) fn run(mut self, mut rx: mpsc::Receiver<WriteCommand>) {
        let mut batch = Vec::with_capacity(self.config.commit_batch_max);
        while let Some(first) = rx.blocking_recv() {
            batch.push(first);
            while batch.len() < self.config.commit_batch_max {
                match rx.try_recv() {
                    Ok(command) => batch.push(command),
                    Err(_) => break,
                }
            }
            if batch.iter().any(|c| matches!(c, WriteCommand::Shutdown)) {
                // No new commands from here on; those already queued are still run.
                rx.close();
            }
            self.run_batch(&mut batch);
        }
        self.close();
    }

    /// Runs a batch in one transaction and answers every command once it is settled. When
    /// the transaction cannot begin, is rolled back by SQLite itself (disk full, I/O error), or
    /// a savepoint cannot be closed cleanly, no further command of the batch runs and every
    /// command is answered with the error: nothing runs outside the transaction.
    fn run_batch(&mut self, batch: &mut Vec<WriteCommand>) {
        let writes = batch.iter().filter(|c| c.writes()).count();
        let head_before = self.head.clone();
        let mut failed = if writes > 0 {
            self.sql("BEGIN IMMEDIATE")
                .and_then(|()| self.reload_stale_head())
                .err()
        } else {
            None
        };
        let mut finished: Vec<Finish> = Vec::with_capacity(batch.len());
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
                if !self.conn.is_autocommit() {
                    let _ = self.sql("ROLLBACK");
                }
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
                log::warn!(
                    "a batch of {} commands did not commit: {e:?}",
                    finished.len()
                );
                self.head = head_before;
                self.resync();
            }
        }
        for done in finished {
            done(outcome.as_ref().err());
        }
    }

    fn sql(&self, statement: &str) -> Result<(), StoreError> {
        self.conn.prepare_cached(statement)?.execute([])?;
        Ok(())
    }

    /// Commits the batch. A `COMMIT` that reports an error may still have made the batch
    /// durable; when the chain in the database ends where the batch left it (and the batch
    /// appended to it), the batch did commit, and its commands get their own answers.
    fn commit(&mut self, head_before: &Head) -> Result<(), StoreError> {
        let Err(error) = self.sql("COMMIT") else {
            return Ok(());
        };
        if !self.conn.is_autocommit() {
            let _ = self.sql("ROLLBACK");
        }
        let appended = self.head != *head_before;
        match Head::load(&self.conn) {
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
            self.head = Head::load(&self.conn)?;
            self.head_stale = false;
        }
        Ok(())
    }

    /// After a failed batch, takes the audit head and the counts from the database again
    /// rather than trusting what was in memory: a failed `COMMIT` may still have made its
    /// data durable.
    fn resync(&mut self) {
        match Head::load(&self.conn) {
            Ok(head) => self.head = head,
            Err(e) => {
                log::error!(
                    "cannot reload the audit head ({e}); it is read again before the next write"
                );
                self.head_stale = true;
            }
        }
        if let Err(e) = load_counts(&self.conn, &self.stats) {
            log::warn!("cannot reload the tenant counts: {e}");
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
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.commands.fetch_add(commands as u64, Ordering::Relaxed);
        if delta.purged > 0 {
            self.checkpointer.request_truncate();
        }
    }

    /// Runs one command and returns what will answer it once the batch is settled.
    fn execute(&mut self, command: WriteCommand, in_transaction: bool) -> Finish {
        match command {
            WriteCommand::Create(request, reply) => {
                let result = self.guarded(in_transaction, |w| w.create(&request));
                finish(reply, result)
            }
            WriteCommand::Tombstone(id, reply) => {
                let result = self.guarded(in_transaction, |w| w.tombstone(&id));
                finish(reply, result)
            }
            WriteCommand::Ping(reply) => {
                let result = self.guarded(false, |w| {
                    w.conn.query_row("SELECT 1", [], |_| Ok(()))?;
                    Ok(())
                });
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
        let head = self.head.clone();
        let result = run_guarded(|| op(self));
        if result.is_err() {
            self.head = head.clone();
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
                    return Err(error);
                }
            }
        }
        result
    }

    fn create(&mut self, request: &CreateRequest) -> Result<Created, StoreError> {
        #[cfg(test)]
        if request.tenant.name.as_str() == super::FAULT_PANIC_NAME {
            panic!("an injected fault");
        }
        let now_ms = ids::now_unix_ms();
        let fingerprint = request.tenant.fingerprint();
        if let Some(key) = &request.idempotency_key
            && let Some(replay) = self.replay(key, &fingerprint, now_ms)?
        {
            return Ok(replay);
        }
        let id = self.ids.next_id(now_ms);
        let token = TenantToken::mint(&id);
        let created_at = queries::now(&self.conn)?;
        let deposit = request.tenant.opening_deposit;
        let name = request.tenant.name.as_str();
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO tenants (id, name, state, opening_deposit_atomic, balance_atomic, \
                 token_hash, created_at, tombstoned_at) \
                 VALUES (?1, ?2, 'active', ?3, ?3, ?4, ?5, NULL)",
            )?
            .execute(params![
                id.as_str(),
                name,
                deposit.to_string(),
                &token.hash[..],
                created_at,
            ]);
        if let Err(e) = inserted {
            return Err(if is_name_clash(&e) {
                StoreError::NameTaken
            } else {
                e.into()
            });
        }
        #[derive(Serialize)]
        struct Payload<'a> {
            id: &'a str,
            name: &'a str,
            opening_deposit_atomic: Atomic,
        }
        let payload = serde_json::to_string(&Payload {
            id: id.as_str(),
            name,
            opening_deposit_atomic: deposit,
        })
        .expect("an audit payload always serializes");
        self.head = audit::append(
            &self.conn,
            &self.head,
            &created_at,
            audit::ACTION_TENANT_CREATED,
            id.as_str(),
            &payload,
        )?;
        let tenant = Tenant {
            id: id.clone(),
            name: name.to_owned(),
            state: TenantState::Active,
            created_at,
            tombstoned_at: None,
            budget: Budget {
                opening_deposit_atomic: deposit,
                balance_atomic: deposit,
            },
        };
        let body = views::created_json(&tenant, &self.config.public_url, &token.plaintext);
        if let Some(key) = &request.idempotency_key {
            // REPLACE: an expired record of the same key may still be waiting for the purge.
            self.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO idempotency_keys \
                     (key, fingerprint, tenant_id, response_body, created_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    key.as_str(),
                    &fingerprint[..],
                    id.as_str(),
                    body,
                    now_ms as i64,
                ])?;
        }
        self.delta.created += 1;
        self.delta.audit_events += 1;
        Ok(Created {
            id,
            body,
            replayed: false,
        })
    }

    /// The stored answer for `key` if it is bound and unexpired.
    fn replay(
        &self,
        key: &IdempotencyKey,
        fingerprint: &[u8; 32],
        now_ms: u64,
    ) -> Result<Option<Created>, StoreError> {
        let found: Option<(Vec<u8>, String, String)> = self
            .conn
            .prepare_cached(
                "SELECT fingerprint, tenant_id, response_body FROM idempotency_keys \
                 WHERE key = ?1 AND created_ms > ?2",
            )?
            .query_row(
                params![key.as_str(), self.expiry_cutoff_ms(now_ms)],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?;
        let Some((stored, tenant_id, body)) = found else {
            return Ok(None);
        };
        if stored.as_slice() != fingerprint {
            return Err(StoreError::IdempotencyMismatch);
        }
        let id = TenantId::parse(&tenant_id).ok_or_else(|| {
            StoreError::Internal(format!("idempotency record holds a bad id {tenant_id:?}"))
        })?;
        Ok(Some(Created {
            id,
            body,
            replayed: true,
        }))
    }

    fn expiry_cutoff_ms(&self, now_ms: u64) -> i64 {
        let ttl_ms = u64::try_from(self.config.idempotency_ttl.as_millis()).unwrap_or(u64::MAX);
        now_ms.saturating_sub(ttl_ms) as i64
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

    fn tombstone(&mut self, id: &TenantId) -> Result<Tenant, StoreError> {
        let mut tenant = queries::tenant(&self.conn, id)?.ok_or(StoreError::NotFound)?;
        if tenant.state == TenantState::Tombstoned {
            return Ok(tenant);
        }
        let now = queries::now(&self.conn)?;
        self.conn
            .prepare_cached(
                "UPDATE tenants SET state = 'tombstoned', tombstoned_at = ?2 WHERE id = ?1",
            )?
            .execute(params![id.as_str(), now])?;
        #[derive(Serialize)]
        struct Payload<'a> {
            id: &'a str,
        }
        let payload = serde_json::to_string(&Payload { id: id.as_str() })
            .expect("an audit payload always serializes");
        self.head = audit::append(
            &self.conn,
            &self.head,
            &now,
            audit::ACTION_TENANT_TOMBSTONED,
            id.as_str(),
            &payload,
        )?;
        tenant.state = TenantState::Tombstoned;
        tenant.tombstoned_at = Some(now);
        self.delta.tombstoned += 1;
        self.delta.audit_events += 1;
        Ok(tenant)
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
    let mut stmt = conn.prepare_cached("SELECT state, count(*) FROM tenants GROUP BY state")?;
    let mut rows = stmt.query([])?;
    let (mut active, mut tombstoned) = (0, 0);
    while let Some(row) = rows.next()? {
        let count = row.get::<_, i64>(1)?.unsigned_abs();
        match TenantState::parse(&row.get::<_, String>(0)?) {
            Some(TenantState::Active) => active = count,
            Some(TenantState::Tombstoned) => tombstoned = count,
            None => {}
        }
    }
    stats.active.store(active, Ordering::Relaxed);
    stats.tombstoned.store(tombstoned, Ordering::Relaxed);
    Ok(())
}

/// An answer for a command that was not run because its batch had already failed; the
/// batch's error is what it receives.
fn unanswered(command: WriteCommand) -> Finish {
    let not_run = || StoreError::Internal("not run".into());
    match command {
        WriteCommand::Create(_, reply) => finish(reply, Err(not_run())),
        WriteCommand::Tombstone(_, reply) => finish(reply, Err(not_run())),
        WriteCommand::Ping(reply) => finish(reply, Err(not_run())),
        WriteCommand::PurgeExpired(reply) => finish(reply, Err(not_run())),
        WriteCommand::Shutdown => Box::new(|_| {}),
    }
}

/// True when `e` is the unique index on active names refusing a second holder.
fn is_name_clash(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(err, Some(message)) => {
            err.code == ErrorCode::ConstraintViolation && message.contains("tenants.name")
        }
        _ => false,
    }
}
