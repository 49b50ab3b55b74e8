//! The writer: the one thread that changes the database, in group-committed batches.
//!
//! It blocks for one command, then takes whatever else is already queued, up to
//! `commit_batch_max`, and runs the lot in ONE transaction, each write inside its own
//! `SAVEPOINT` so that a failing command (a name clash, a panic) rolls back alone. It commits
//! once, hands the batch to the syncer ([`super::syncer`]), which answers every command once
//! the commit is durable, and goes on with the next batch: no answer leaves before the
//! durable commit that holds it, and no time is spent waiting for a batch to fill.
//!
//! A transaction that cannot be ended cleanly (a `ROLLBACK` that fails) is never trusted: the
//! connection is closed, which rolls it back, and a new one is opened before anything else is
//! read or written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};

use super::checkpoint::{Checkpointer, WAL_RESTART_PAGES};
use super::open;
use super::syncer::{Committed, Syncer};
use crate::audit::Head;
use crate::store::durability::Durability;
use crate::store::sql::Sql;
use crate::store::write::Finish;
use crate::store::write::ahead::Wanted;
use crate::store::write::batch::{self, Batches};
use crate::store::write::chain;
use crate::store::write::delta::Delta;
use crate::store::write::state::{WriterState, shared_ids};
use crate::store::write::stats::Stats;
use crate::store::{StoreConfig, StoreError, queries};

/// The state of the store thread.
pub(super) struct Writer {
    /// The connection, and what the writer keeps between batches.
    state: WriterState<Connection>,
    config: StoreConfig,
    stats: Arc<Stats>,
    /// Set when the head could not be read back after a failed batch: it is read again at
    /// the start of the next transaction, before anything is appended.
    head_stale: bool,
    /// Set when a transaction could not be ended and the connection could not be replaced:
    /// a new connection is opened before the next batch.
    reopen_pending: bool,
    /// Whether a write could begin, once a probe of this batch has found out.
    writable: Option<Result<(), StoreError>>,
    checkpointer: Checkpointer,
    /// Makes each committed batch durable and answers it.
    syncer: Syncer,
    durability: Arc<Durability>,
    /// The number of the batch's commit, once its `COMMIT` has begun.
    committing: Option<u64>,
    /// `PRAGMA data_version` as the last write batch found it: what another connection's
    /// commit moves ([`Writer::forget_if_written_elsewhere`]).
    data_version: Option<i64>,
    /// The entries committed since the last sweep of the levels' entries
    /// ([`queries::levels`]).
    unswept: u64,
    /// Whether the running batch began with a sweep.
    swept: bool,
}

impl Batches for Writer {
    type Db = Connection;

    fn state(&mut self) -> &mut WriterState<Connection> {
        &mut self.state
    }

    fn batch_max(&self) -> usize {
        self.config.commit_batch_max
    }

    /// Replaces a connection an earlier failure left in doubt; for writes, lets the WAL
    /// start over if it is long, takes the write lock (`BEGIN IMMEDIATE`) and reads the
    /// head again if a failure left it unknown.
    fn begin(&mut self, writes: bool, _wanted: &[Wanted<'_>]) -> Result<(), StoreError> {
        self.writable = None;
        self.reopen_if_pending()?;
        if writes {
            self.restart_wal_if_long();
            self.sql("BEGIN IMMEDIATE")?;
            self.reload_stale_head()?;
            self.forget_if_written_elsewhere()?;
            self.sweep_if_due()?;
        }
        Ok(())
    }

    /// SQLite rolls a transaction back by itself after some errors (a full disk, an I/O
    /// error): nothing more may run in the batch then.
    fn lost_transaction(&mut self) -> Option<StoreError> {
        self.state
            .db_ref()
            .is_autocommit()
            .then(|| StoreError::Unavailable("SQLite rolled the transaction back".into()))
    }

    /// Inside a write batch the lock is held already; otherwise `BEGIN IMMEDIATE` takes it
    /// (waiting out the busy timeout) and lets it go. Every probe of one batch shares one
    /// attempt.
    fn check_writable(&mut self, in_transaction: bool) -> Result<(), StoreError> {
        if in_transaction {
            return Ok(());
        }
        if let Some(known) = &self.writable {
            return known.clone();
        }
        let began = self.sql("BEGIN IMMEDIATE");
        if began.is_ok() && (self.sql_rollback().is_err() || !self.state.db_ref().is_autocommit()) {
            self.end_failed_transaction();
        }
        self.writable = Some(began.clone());
        began
    }

    fn rollback(&mut self) {
        self.end_failed_transaction();
    }

    /// A `COMMIT` that reports an error may still have made the batch durable; when the chain
    /// in the database ends where the batch left it (and the batch appended to it), the batch
    /// did commit, and its commands get their own answers.
    fn commit(&mut self, head_before: &Head) -> Result<(), StoreError> {
        self.committing = Some(self.durability.begin_commit());
        let Err(error) = self.sql("COMMIT") else {
            return Ok(());
        };
        self.end_failed_transaction();
        if !self.state.db_ref().is_autocommit() || self.reopen_pending {
            return Err(error);
        }
        let appended = self.state.head() != head_before;
        match chain::load_head(self.state.db()) {
            Ok(stored) if appended && stored == *self.state.head() => {
                log::warn!("COMMIT reported {error:?}, but the batch is in the database");
                Ok(())
            }
            _ => Err(error),
        }
    }

    /// Counts what the batch changed; erased idempotency records must leave the WAL too.
    fn committed(&mut self, delta: &Delta, commands: usize) {
        self.stats.apply(delta, commands);
        let written = delta.entries_written();
        self.unswept = if std::mem::take(&mut self.swept) {
            written
        } else {
            self.unswept.saturating_add(written)
        };
        if delta.any_purged() {
            self.checkpointer.request_truncate();
        }
    }

    fn failed(&mut self) {
        self.swept = false;
        self.resync();
    }

    /// A batch whose `COMMIT` ran is answered by the syncer, once the WAL is durable (and
    /// after every batch committed before it); one that never reached `COMMIT` at once.
    fn answer(&mut self, answers: Vec<Finish>, outcome: Result<(), StoreError>) {
        match self.committing.take() {
            Some(number) => self.syncer.send(Committed {
                number,
                answers,
                outcome,
            }),
            None => batch::answer_all(answers, &outcome),
        }
    }

    /// Checkpoints the WAL into the main file so the database is one self-contained file
    /// after a clean stop.
    fn close(mut self) {
        self.syncer.stop();
        self.checkpointer.stop();
        let checkpoint = self
            .state
            .db()
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

impl Writer {
    /// Takes over the read-write connection: starts the checkpointer, reads the head, the
    /// counts and the latest id.
    pub(super) fn new(
        mut conn: Connection,
        config: StoreConfig,
        durability: Arc<Durability>,
    ) -> Result<Self, open::OpenError> {
        let checkpointer = Checkpointer::start(open::open_checkpointer(&config.path)?)
            .map_err(|e| open::OpenError::Io(format!("cannot start the checkpoint thread: {e}")))?;
        let stats = Stats::default();
        checkpointer.watch(&mut conn, Arc::clone(&stats.wal_frames))?;
        let unreadable = |e: StoreError| open::OpenError::Io(format!("{e:?}"));
        let head = chain::load_head(&mut conn).map_err(unreadable)?;
        let latest = queries::due::latest_ulid(&mut conn).map_err(unreadable)?;
        stats.load(&mut conn).map_err(unreadable)?;
        let unswept = queries::levels::unswept(&mut conn).map_err(unreadable)?;
        leave_syncs_to_the_syncer(&conn)?;
        let syncer = Syncer::start(&config.path, Arc::clone(&durability))
            .map_err(|e| open::OpenError::Io(format!("cannot start the sync thread: {e}")))?;
        Ok(Self {
            state: WriterState::new(conn, &config, head, shared_ids(latest)),
            config,
            stats: Arc::new(stats),
            head_stale: false,
            reopen_pending: false,
            writable: None,
            checkpointer,
            syncer,
            durability,
            committing: None,
            data_version: None,
            unswept,
            swept: false,
        })
    }

    /// The counters the handle reads for `/metrics`.
    pub(super) fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// When the WAL is longer than [`WAL_RESTART_PAGES`], copies what the checkpointer has
    /// not copied yet (the last batch or two), so that the coming batch starts the WAL over.
    /// While the checkpointer is copying, the writer waits for it (for at most
    /// [`WAL_RESTART_WAIT_MAX`]): under full load it nearly always is, and a writer that gave
    /// up at once let the WAL grow past `journal_size_limit`, to be cut back with a stall of
    /// 100 ms and more when it did start over. A checkpoint that cannot finish (a reader
    /// holds old frames) is no error: the WAL starts over at a later batch.
    fn restart_wal_if_long(&mut self) {
        if self.checkpointer.wal_pages() < WAL_RESTART_PAGES {
            return;
        }
        let deadline = Instant::now() + WAL_RESTART_WAIT_MAX;
        loop {
            match self
                .state
                .db()
                .wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE)
            {
                // The checkpointer is at it (a PASSIVE checkpoint does not wait): again soon.
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {
                    if Instant::now() >= deadline {
                        return;
                    }
                    std::thread::sleep(WAL_RESTART_RETRY);
                }
                Err(e) => return log::warn!("the writer's checkpoint before a batch failed: {e}"),
                Ok(_) => return,
            }
        }
    }

    /// Begins the batch with a sweep of the levels' entries ([`queries::levels`]) once
    /// [`queries::levels::SWEEP_ENTRIES`] have been committed since the last: in the batch's
    /// transaction, so that it is as durable as the batch and lost only with it. A sweep that
    /// fails is rolled back alone and tried again as many entries later; the batch goes on,
    /// and pages stay right with a longer tail.
    fn sweep_if_due(&mut self) -> Result<(), StoreError> {
        if self.unswept < queries::levels::SWEEP_ENTRIES {
            return Ok(());
        }
        let began = Instant::now();
        self.sql("SAVEPOINT levels_sweep")?;
        match queries::levels::sweep(self.state.db()) {
            Ok(()) => {
                self.sql("RELEASE levels_sweep")?;
                self.swept = true;
                log::debug!(
                    "swept the levels' entries of the last {} entries in {} ms",
                    self.unswept,
                    began.elapsed().as_millis()
                );
            }
            Err(e) => {
                self.sql("ROLLBACK TO levels_sweep")?;
                self.sql("RELEASE levels_sweep")?;
                log::warn!(
                    "the sweep of the levels' entries failed ({e}); it is tried again after \
                     {} more entries",
                    queries::levels::SWEEP_ENTRIES
                );
                self.unswept = 0;
            }
        }
        Ok(())
    }

    /// Forgets the budgets the batch before left ([`WriterState::carry_ahead`]) when another
    /// connection committed since the writer last looked, or the connection is new: `PRAGMA
    /// data_version` moves at least with every other connection's commit, and never with
    /// this one's. Run under the write lock, so nothing else commits until the batch ends.
    /// With nothing carried there is nothing to forget, and the writer does not look: a
    /// change it did not see then is seen the next time, when it forgets once more than it
    /// had to.
    fn forget_if_written_elsewhere(&mut self) -> Result<(), StoreError> {
        if !self.state.carries_budgets() {
            return Ok(());
        }
        let version: i64 = self
            .state
            .db_ref()
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        if self.data_version.replace(version) != Some(version) {
            self.state.forget_ahead(None);
        }
        Ok(())
    }

    fn sql(&mut self, statement: &str) -> Result<(), StoreError> {
        self.state.db().run(statement)
    }

    fn sql_rollback(&mut self) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.state.take_fail_next_rollback() {
            return Err(StoreError::Internal("an injected ROLLBACK failure".into()));
        }
        self.sql("ROLLBACK")
    }

    /// Ends a transaction that must not commit. When `ROLLBACK` fails, or leaves a
    /// transaction open, the connection is replaced: closing it rolls the transaction back,
    /// and nothing is read through it again.
    fn end_failed_transaction(&mut self) {
        if self.state.db_ref().is_autocommit() {
            return;
        }
        match self.sql_rollback() {
            Ok(()) if self.state.db_ref().is_autocommit() => return,
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
        leave_syncs_to_the_syncer(&conn).map_err(|e| unavailable(e.to_string()))?;
        let old = std::mem::replace(self.state.db(), conn);
        if let Err((old, e)) = old.close() {
            *self.state.db() = old;
            return Err(unavailable(format!(
                "the old connection does not close: {e}"
            )));
        }
        self.reopen_pending = false;
        self.head_stale = true;
        // The new connection's `data_version` is its own count.
        self.data_version = None;
        Ok(())
    }

    /// Reads the head again if a failed batch left it unknown.
    fn reload_stale_head(&mut self) -> Result<(), StoreError> {
        if self.head_stale {
            let head = chain::load_head(self.state.db())?;
            self.state.set_head(head);
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
        if !self.state.db_ref().is_autocommit() || self.reopen_pending {
            self.head_stale = true;
            return;
        }
        match chain::load_head(self.state.db()) {
            Ok(head) => {
                self.state.set_head(head);
                self.head_stale = false;
            }
            Err(e) => {
                log::error!(
                    "cannot reload the audit head ({e:?}); it is read again before the next write"
                );
                self.head_stale = true;
            }
        }
    }
}

/// How long the writer waits for the checkpointer's pass before it starts the WAL over.
const WAL_RESTART_WAIT_MAX: Duration = Duration::from_millis(20);

/// How often, meanwhile, it tries again.
const WAL_RESTART_RETRY: Duration = Duration::from_micros(200);

/// The writer's connection commits without waiting for the disk (`synchronous = NORMAL`):
/// the syncer syncs the WAL before any command of the batch is answered.
fn leave_syncs_to_the_syncer(conn: &Connection) -> Result<(), open::OpenError> {
    conn.execute_batch("PRAGMA synchronous = NORMAL")
        .map_err(|e| open::OpenError::Io(format!("cannot set the writer's sync mode: {e}")))
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use std::sync::atomic::Ordering;

    use super::*;
    use crate::audit::Actor;
    use crate::domain::{Atomic, BodyFingerprint, IdempotencyKey, Name, NewTenant};
    use crate::store::Command as WriteCommand;
    use crate::store::ops::{CreateTenant, Created};
    use crate::store::verify;
    use crate::store::{FAULT_ROLLBACK_NAME, Keyed, StoredResponse, Written};

    /// A writer on a fresh database in `dir`.
    fn writer(dir: &tempfile::TempDir) -> Writer {
        let config = StoreConfig::for_tests(dir.path().join("t.db"));
        let conn = open::open_writer(&config.path).expect("the database opens");
        Writer::new(conn, config, Arc::new(Durability::new())).expect("the writer starts")
    }

    /// Recording what fell due is ended by a failure as well as by its own end: a command
    /// that panicked in the middle of it leaves the writer catching budgets up as before.
    #[test]
    fn a_command_rolled_back_while_recording_what_fell_due_ends_the_recording() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut writer = writer(&dir);
        let state = writer.state();
        let before = state.snapshot();
        state.set_recording_due(true);
        state.restore(before);
        assert!(
            !state.recording_due(),
            "the recording ends with the command"
        );
    }

    fn new_tenant(name: &str) -> NewTenant {
        NewTenant {
            name: Name::parse(name).expect("a name"),
            opening_deposit: Atomic::parse("5").expect("an amount"),
            policy: None,
            thresholds: crate::domain::Thresholds::default(),
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
        (WriteCommand::op(command, reply), answer)
    }

    /// Runs `commands` as one batch.
    fn run(writer: &mut Writer, commands: Vec<WriteCommand>) {
        let mut batch = commands;
        batch::run_batch(writer, &mut batch);
    }

    fn tenant_names(writer: &Writer) -> Vec<String> {
        let mut stmt = writer
            .state
            .db_ref()
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
            render: std::sync::Arc::new(|created: &Created| StoredResponse {
                status: 201,
                location: None,
                body: created.tenant.id.to_string(),
            }),
        })
    }

    /// A tenant whose lock a batch took as it began, left on the list after the batch
    /// failed, let the next batch's commands write it without asking for the lock (where
    /// writers share a PostgreSQL database): with another instance writing it meanwhile, a
    /// write was lost. The list is the batch engine's, whatever the backend.
    #[test]
    fn a_batch_holds_no_tenant_of_a_batch_before_that_failed() {
        use crate::domain::TenantId;
        use crate::store::write::state::{WriterState, shared_ids};
        let conn = rusqlite::Connection::open_in_memory().expect("a database");
        let config = StoreConfig::for_tests(std::path::PathBuf::from(":memory:"));
        let mut state = WriterState::new(conn, &config, Head::genesis(), shared_ids(None));
        let tenant = TenantId::from_ulid(ulid::Ulid::from_parts(1, 1));

        state.begin_ahead();
        state.hold_locked(&tenant, None);
        let began = state.snapshot();
        state.restore_after_failed_batch(began);
        assert_eq!(state.take_locked().0, Vec::<TenantId>::new());

        state.hold_locked(&tenant, None);
        state.begin_ahead();
        assert_eq!(state.take_locked().0, Vec::<TenantId>::new());
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
        assert!(
            writer.state.db_ref().is_autocommit(),
            "no transaction is left open"
        );

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
        let head = verify::verify(writer.state.db()).expect("the chain verifies");
        assert_eq!(head.seq, 1);
        assert_eq!(
            head,
            *writer.state.head(),
            "the writer's head is the stored one"
        );
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
            keyed.render = std::sync::Arc::new(|_: &Created| panic!("a rendering that fails"));
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
        assert_eq!(
            stats.tenants[0].load(Ordering::Relaxed),
            1,
            "one active tenant"
        );
        assert_eq!(stats.audit_events.load(Ordering::Relaxed), 1, "one event");
        assert_eq!(verify::verify(writer.state.db()).map(|h| h.seq), Ok(1));
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
                verify::verify(writer.state.db()).map(|h| h.seq),
                Ok(1),
                "{what}: before"
            );
            writer
                .state
                .db()
                .execute_batch(&format!("DROP TRIGGER tenants_identity_immutable; {sql};"))
                .expect("tampering");
            assert!(
                matches!(
                    verify::verify(writer.state.db()),
                    Err(crate::audit::VerifyError::Unaccounted { .. })
                ),
                "{what} is found: {:?}",
                verify::verify(writer.state.db())
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
        assert!(writer.state.db_ref().is_autocommit());
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

    /// SQLite's writer begins each batch with the budgets the one before left (`Ahead::carry`):
    /// a budget that another process changed in between must be read again, not written over
    /// with what the writer carried.
    #[test]
    fn a_budget_changed_by_another_process_between_batches_is_read_again() {
        use crate::domain::{Direction, Movement};
        use crate::store::ops::MoveBudget;
        use crate::store::test_stores::{create_tenant, fresh, runtime};
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("carried.db");
        runtime().block_on(async {
            let (store, threads) = crate::store::Store::open(StoreConfig::for_tests(path.clone()))
                .expect("the store opens");
            let (tenant, budget) = create_tenant(&store, "carried", 1_000).await;
            let charge = || MoveBudget {
                tenant: tenant.clone(),
                budget: Some(budget.clone()),
                movement: Movement {
                    direction: Direction::Charge,
                    amount: Atomic::new(10),
                    memo: None,
                },
                actor: Actor::Admin,
                keyed: None,
            };
            // Two charges: the first carries the budget, the second finds it carried and
            // reads `data_version`, so the outside write below is seen by comparing versions,
            // not because the writer had never looked.
            fresh(store.write(charge()).await);
            fresh(store.write(charge()).await);
            // Another process credits the budget behind the writer's back.
            let other = rusqlite::Connection::open(&path).expect("another connection");
            other
                .busy_timeout(std::time::Duration::from_secs(5))
                .expect("a busy timeout");
            let changed = other
                .execute(
                    "UPDATE budgets SET credited_atomic = '2000' WHERE id = ?1",
                    [budget.as_str()],
                )
                .expect("the other process writes");
            assert_eq!(changed, 1);
            drop(other);
            fresh(store.write(charge()).await);
            let read = store
                .budget(tenant.clone(), Some(budget.clone()))
                .await
                .expect("the budget is read");
            assert_eq!(
                read.figures.credited, 2_000,
                "the other process's credit stays"
            );
            assert_eq!(read.figures.spent, 30, "every charge");
            threads.shutdown().await.expect("the store stops");
        });
    }
}
