//! The store: what every backend implements, in domain terms.
//!
//! Handlers send typed commands and get domain values back ([`Tenant`], [`Created`]); the
//! store knows no URL. It renders JSON in one place only, `write/outbox.rs`: an event's `data`
//! is the JSON the API showed of the objects it names at the instant of the change, and it is
//! written in the change's own transaction, so the outbox renders it there with the views'
//! rendering (`crate::views::EventData`). The operations hand the outbox domain values; no
//! other file of the store names `crate::views`. A keyed write ([`Keyed`]) is the one
//! idempotency wrapper: the backend looks the key up, runs the write and records the response
//! the handler rendered (its own closure, run in the write's transaction), so exactly one
//! effect happens per key.
//!
//! Two backends implement it: SQLite ([`sqlite`], one file: a writer thread that
//! group-commits, reader threads, a sync thread and a checkpoint thread) and PostgreSQL
//! ([`postgres`], any number of instances on one database). Both run the same write
//! operations ([`ops`], through the batch engine in [`write`]), the same queries ([`queries`])
//! and the same `audit verify` ([`verify`]) over one seam ([`sql`]); nothing outside their
//! folders names `rusqlite` or `tokio_postgres`, and the backend-neutral code (`write/`,
//! `ops/`, `queries/`, `threads.rs`, `verify.rs`) names no backend: the backends depend on it,
//! and only this file lists them ([`AnyJob`], [`Store::open`]).
//!
//! # Adding a write operation
//!
//! - `ops/<name>.rs`: the type, its [`write::WriteOp`] impl (what it reads, the rule it runs
//!   from `domain::rules`, what it writes, its audit event through `WriterState::record`);
//! - `ops/mod.rs`: its `mod` line and its `pub(crate) use`;
//! - and, only when it needs them: a query in the `queries/` file of what it reads, a step
//!   shared with other operations in the `ops/effects/` file of its job, and a `publish_…`
//!   method in `write/outbox.rs` for an event of a new kind.
//!
//! The batch engine, the queue and the threads never change for one.
//!
//! # Adding a backend
//!
//! - a folder of its own (`<backend>/`) with its connection type, which implements the seam
//!   [`sql::Sql`] (statements, parameters, rows, snapshots, streamed reads: that alone runs
//!   every operation and query), its writer, which implements [`write::batch::Batches`] (how a
//!   batch begins, commits and fails) and is run by [`write::batch::run`], and its `open`,
//!   which hands that loop and a connection for each reader ([`queries::reads::Reads`], which
//!   any `Sql + Send` is) to [`threads::start`];
//! - this file: its connection type in [`AnyJob`]'s bounds, and its arm in [`Store::open`]
//!   (and in [`verify_audit`], [`describe`] and [`copy()`] when it serves those).
//!
//! # Bounds
//!
//! Each queue (writes, reads, credential checks) holds at most its configured depth; a full
//! write or read queue is refused at once ([`StoreError::QueueFull`], a `503` with
//! `Retry-After`), never buffered without limit. A credential check waits for room instead,
//! for at most [`CREDENTIAL_WAIT_MAX`], so that a flood of reads cannot turn a `401` into a
//! `503`. On SQLite, at most two committed batches queue for their fsync; the writer waits
//! for the sync thread beyond that, and a read waits at most [`SETTLE_WAIT_MAX`] for the
//! sync of a commit it may show.

#[cfg(test)]
mod batch_tests;
mod copy;
mod durability;
mod error;
pub(crate) mod flags;
#[cfg(test)]
mod keeping_tests;
#[cfg(test)]
mod levels_tests;
#[cfg(test)]
mod model_tests;
pub(crate) mod ops;
pub(crate) mod postgres;
mod queries;
mod rows;
#[cfg(test)]
mod settle_ahead_tests;
mod sql;
mod sqlite;
#[cfg(test)]
pub(crate) mod test_stores;
mod threads;
mod verify;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use error::StoreError;
use std::time::Duration;
pub(crate) use write::stats::{CHAIN_DELAY_BOUNDS_MS, CHAIN_DELAY_BUCKETS};

use crate::audit::Head;
pub(crate) use crate::domain::Page;
use crate::domain::{BodyFingerprint, IdempotencyKey, Timestamp};

/// Default for [`StoreConfig::queue_depth`] and [`StoreConfig::credential_queue_depth`].
pub(crate) const QUEUE_DEPTH_DEFAULT: usize = 1024;

/// Default for [`StoreConfig::commit_batch_max`].
pub(crate) const COMMIT_BATCH_MAX_DEFAULT: usize = 256;

/// Expiries the writer records in one sweep, at most; a sweep that leaves more due runs
/// again at once.
pub(crate) const EXPIRE_SWEEP_MAX: usize = 1000;

/// Period boundaries the writer records in one sweep, at most: when many budgets share one
/// boundary (every monthly budget of a zone), they are worked off this many at a time, each
/// sweep in the transaction of one batch before its requests, so a request waits behind at
/// most this many. A sweep that leaves more due runs again at once. (100,000 monthly budgets:
/// all recorded in 7.7 s, charges meanwhile at a p99 of 12 ms; see docs/decisions.md.)
pub(crate) const BOUNDARY_SWEEP_MAX: usize = 50;

/// The most reader threads by default; more do not help on a small machine.
pub(crate) const READERS_DEFAULT_MAX: usize = 4;

/// Writer connections of an instance on PostgreSQL when none is configured (`--pg-writers`).
/// A tenant's writes go to one of them, so they never contend with one another within the
/// instance; other tenants' batches run on the other beside them, so one batch's round trips
/// and `COMMIT` overlap another's work. Two, not more: each writer's batches are what its
/// queue holds when it begins, so more writers make smaller batches, and every batch pays its
/// own statements and `COMMIT`. Measured one after another (quick runs, charges over 1,000
/// budgets, one instance): 4,370 a second with four writers, 5,738 with two, 6,698 with one
/// on loopback; 2,063, 2,246 and 2,058 with PostgreSQL 1 ms away, where one writer alone
/// waits out every round trip. Several instances on one database make the batches smaller
/// still, so there one each is better (`docs/decisions.md`). Each instance holds this many
/// connections, its readers' (`--readers`), the credential threads' and the chainer's.
pub(crate) const PG_WRITERS_DEFAULT: usize = 2;

/// Writer connections of an instance on PostgreSQL, at most.
pub(crate) const PG_WRITERS_MAX: usize = 16;

/// How long an idempotent write's response is kept for replay, at most (the contract's 24 h).
pub(crate) const IDEMPOTENCY_TTL_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// How many days events are kept by default, and at most (`--event-retention`).
pub(crate) const EVENT_RETENTION_DAYS_DEFAULT: u64 = 30;
pub(crate) const EVENT_RETENTION_DAYS_MAX: u64 = 3650;

/// The most events one purge erases in its transaction; the purge goes on in further
/// transactions while more are due, so a long backlog never holds the writer for long.
pub(crate) const EVENT_PURGE_BATCH: usize = 5_000;

/// How long a tenant-token check waits for room in the credential queue before it is
/// answered `503`: as long as a write waits for a lock held by another process.
pub(crate) const CREDENTIAL_WAIT_MAX: Duration = Duration::from_secs(1);

/// The longest a read waits for the sync of a commit it may show (one sync takes a
/// millisecond or two); beyond, it is answered `503`.
pub(crate) const SETTLE_WAIT_MAX: Duration = Duration::from_secs(10);

/// A create with this name panics inside the writer: the fault hook of the tests, compiled
/// into test builds only.
#[cfg(test)]
pub(crate) const FAULT_PANIC_NAME: &str = "fault: panic in the writer";

/// A create with this name fails inside the writer, and the `ROLLBACK` of its batch then
/// fails too, leaving the transaction open: the fault hook for a failed rollback, compiled
/// into test builds only.
#[cfg(test)]
pub(crate) const FAULT_ROLLBACK_NAME: &str = "fault: the rollback fails";

/// Reader threads to start when none is configured: one per core, up to
/// [`READERS_DEFAULT_MAX`].
pub(crate) fn readers_default() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(1, READERS_DEFAULT_MAX)
}

/// How to open the store.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    /// The database file.
    pub(crate) path: PathBuf,
    /// Writes, and reads, that may wait in their queues before new ones are refused.
    pub(crate) queue_depth: usize,
    /// Credential checks that may wait; beyond, a check waits up to
    /// [`CREDENTIAL_WAIT_MAX`] for room.
    pub(crate) credential_queue_depth: usize,
    /// Writes run in one transaction, at most.
    pub(crate) commit_batch_max: usize,
    /// Reader threads, each with its own read-only connection.
    pub(crate) readers: usize,
    /// Writer threads on PostgreSQL, each with a connection of its own (SQLite has one).
    pub(crate) pg_writers: usize,
    /// How long an idempotent write's response is kept for replay.
    pub(crate) idempotency_ttl: Duration,
    /// Where the writer reads the time.
    pub(crate) clock: Clock,
}

#[cfg(test)]
impl StoreConfig {
    /// Small bounds on the file at `path`, as the tests use them.
    pub(crate) fn for_tests(path: PathBuf) -> Self {
        Self {
            path,
            queue_depth: 8,
            credential_queue_depth: 8,
            commit_batch_max: 8,
            readers: 1,
            pg_writers: PG_WRITERS_DEFAULT,
            idempotency_ttl: IDEMPOTENCY_TTL_MAX,
            clock: Clock::System,
        }
    }
}

/// Where the store reads the time: the system clock, or (in the tests) a hand that moves it.
#[derive(Debug, Clone, Default)]
pub(crate) enum Clock {
    /// The system clock.
    #[default]
    System,
    /// Milliseconds since the epoch, moved by the test that holds the other end; the writer
    /// never wakes by itself to record expiries, so the test decides when time passes.
    #[cfg(test)]
    Manual(std::sync::Arc<std::sync::atomic::AtomicU64>),
}

impl Clock {
    /// The time now.
    pub(crate) fn now(&self) -> Timestamp {
        match self {
            Self::System => Timestamp::from_unix_ms(crate::ids::now_unix_ms()),
            #[cfg(test)]
            Self::Manual(ms) => {
                Timestamp::from_unix_ms(ms.load(std::sync::atomic::Ordering::SeqCst))
            }
        }
    }

    /// Whether the writer should wake by itself when a reservation's time runs out.
    pub(crate) fn wakes(&self) -> bool {
        matches!(self, Self::System)
    }
}

/// A response as the handler rendered it, kept to replay a keyed write. `Debug` never shows
/// the body, which may hold a tenant token.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct StoredResponse {
    /// The status code.
    pub(crate) status: u16,
    /// The `Location` header, for a `201`.
    pub(crate) location: Option<String>,
    /// The JSON body. For a tenant create it holds the tenant token: the one plaintext copy
    /// the contract allows, erased with the record.
    pub(crate) body: String,
}

impl std::fmt::Debug for StoredResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredResponse")
            .field("status", &self.status)
            .field("location", &self.location)
            .field(
                "body",
                &format_args!("<{} bytes, redacted>", self.body.len()),
            )
            .finish()
    }
}

/// Turns a write's result into the response a replay will send (shared: a write sent again
/// after [`StoreError::Busy`] renders with the same).
pub(crate) type Render<T> = Arc<dyn Fn(&T) -> StoredResponse + Send + Sync>;

/// What binds an `Idempotency-Key`: the principal it belongs to, the request it was sent with,
/// and how to render the answer to keep.
pub(crate) struct Keyed<T> {
    /// Whose key it is: principals' keys never meet.
    pub(crate) principal: String,
    /// The key.
    pub(crate) key: IdempotencyKey,
    /// The request's method.
    pub(crate) method: &'static str,
    /// The request's path.
    pub(crate) path: String,
    /// The request's parsed body.
    pub(crate) fingerprint: BodyFingerprint,
    /// The handler's rendering of a fresh result, run inside the write's transaction.
    pub(crate) render: Render<T>,
}

impl<T> Clone for Keyed<T> {
    fn clone(&self) -> Self {
        Self {
            principal: self.principal.clone(),
            key: self.key.clone(),
            method: self.method,
            path: self.path.clone(),
            fingerprint: self.fingerprint,
            render: Arc::clone(&self.render),
        }
    }
}

impl<T> std::fmt::Debug for Keyed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyed")
            .field("principal", &self.principal)
            .field("key", &self.key)
            .field("method", &self.method)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What a keyed (or unkeyed) write answered.
#[derive(Debug)]
pub(crate) enum Written<T> {
    /// The write happened now.
    Fresh(T),
    /// The key was bound before: this is the response then given, and nothing changed.
    Replayed(StoredResponse),
}

impl<T> Written<T> {
    /// A fresh result turned into another; a replay as it is.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Written<U> {
        match self {
            Self::Fresh(value) => Written::Fresh(f(value)),
            Self::Replayed(stored) => Written::Replayed(stored),
        }
    }
}

/// Which page of a list to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListQuery {
    /// Items on the page, at most.
    pub(crate) limit: usize,
    /// The page starts after this id (of the listed kind), whether or not it names an item.
    pub(crate) after: Option<String>,
    /// Only items in this state.
    pub(crate) state: Option<&'static str>,
    /// Only reservations of this budget.
    pub(crate) budget_id: Option<String>,
    /// Only budgets whose parent is this budget.
    pub(crate) parent_id: Option<String>,
    /// Only events of this tenant (`GET /v1/events`).
    pub(crate) tenant_id: Option<String>,
    /// Only events written after this instant.
    pub(crate) created_after: Option<Timestamp>,
    /// Only deliveries of this event.
    pub(crate) event_id: Option<String>,
    /// Only tenants whose name holds this text, ASCII letters in either case (the text is
    /// kept in lower case).
    pub(crate) name_contains: Option<String>,
}

impl ListQuery {
    /// The first page of at most `limit` items, unfiltered.
    pub(crate) fn first(limit: usize) -> Self {
        Self {
            limit,
            after: None,
            state: None,
            budget_id: None,
            parent_id: None,
            tenant_id: None,
            created_after: None,
            event_id: None,
            name_contains: None,
        }
    }
}

/// What a tenant token is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Credential {
    /// The SHA-256 of the tenant's token.
    pub(crate) token_hash: [u8; 32],
    /// False once the tenant is tombstoned: its token is revoked.
    pub(crate) active: bool,
}

/// Figures for `/metrics`, read at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StoreGauges {
    /// Tenants by state, in [`crate::domain::TenantState::NAMES`] order.
    pub(crate) tenants: [u64; 2],
    /// Budgets by state, in [`crate::domain::BudgetState::NAMES`] order.
    pub(crate) budgets: [u64; 2],
    /// Reservations by recorded state, in [`crate::domain::ReservationState::NAMES`] order.
    pub(crate) reservations: [u64; 4],
    /// Ledger entries by kind, in [`crate::domain::EntryKind::ALL`] order.
    pub(crate) entries: [u64; crate::domain::EntryKind::ALL.len()],
    /// Events this process wrote, by type, in [`crate::domain::EventType::ALL`] order.
    pub(crate) events_written: [u64; crate::domain::EventType::ALL.len()],
    /// Webhook deliveries by state, in [`crate::domain::DeliveryState::NAMES`] order.
    pub(crate) deliveries: [u64; crate::domain::DeliveryState::NAMES.len()],
    /// Audit events recorded (chained, or waiting for their place in the chain).
    pub(crate) audit_events: u64,
    /// How long audit rows waited for their place in the chain (PostgreSQL), by bucket of
    /// [`CHAIN_DELAY_BOUNDS_MS`], the last bucket above them.
    pub(crate) chain_delays: [u64; CHAIN_DELAY_BUCKETS],
    /// The sum of those waits, in milliseconds.
    pub(crate) chain_delay_sum_ms: u64,
    /// The longest of those waits, in milliseconds.
    pub(crate) chain_delay_max_ms: u64,
    /// How long the oldest row waiting for the chain had waited, when last looked at.
    pub(crate) chain_lag_ms: u64,
    /// Write transactions committed.
    pub(crate) batches: u64,
    /// Write commands in committed batches.
    pub(crate) commands: u64,
    /// Committed batches begun on what their writer knew, in one round trip (PostgreSQL).
    pub(crate) batches_guarded: u64,
    /// WAL frames (database pages) the commits wrote.
    pub(crate) wal_frames: u64,
    /// Commands waiting for the writer.
    pub(crate) writes_queued: u64,
    /// Commands waiting for a reader.
    pub(crate) reads_queued: u64,
    /// Credential checks waiting.
    pub(crate) credentials_queued: u64,
}

/// Runs `op`, turning a panic into [`StoreError::Internal`] so the thread lives on.
fn run_guarded<T>(op: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(op)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with no message".into());
        Err(StoreError::Internal(format!(
            "store command panicked: {message}"
        )))
    })
}

pub(crate) use queries::webhooks::{Due, Sending};

/// A queued write either backend's writer can run: the one handle ([`Store`]) serves every
/// backend, so its queue holds jobs built for all of them (each operation compiled once per
/// backend, no dispatch inside it). The write path itself is generic over the job object
/// ([`write::Queueable`]); this is the one list of the backends' write connections.
pub(crate) trait AnyJob:
    write::Job<sqlite::WriteConnection> + write::Job<postgres::blocking::Blocking>
{
}

impl<T> AnyJob for T where
    T: write::Job<sqlite::WriteConnection> + write::Job<postgres::blocking::Blocking>
{
}

impl write::Queueable for dyn AnyJob {
    fn queue<O: write::WriteOp>(op: O, reply: write::Reply<O::Output>) -> Box<Self> {
        Box::new(write::Queued { op, reply })
    }
}

/// A database in memory at this build's schema (SQLite), seen through the seam alone: for the
/// tests of what is written once for every backend ([`verify`], [`mod@copy`]).
#[cfg(test)]
pub(crate) fn in_memory_for_tests() -> impl sql::Sql {
    sqlite::in_memory()
}

/// What the store's write queue holds.
pub(crate) type Command = write::WriteCommand<dyn AnyJob>;
pub(crate) use threads::{Store, StoreThreads};
pub(crate) use write::checked::{TokenCheck, admits};

impl Store {
    /// Writes `op` ([`Store::write`]), checking the tenant token it came with first, in its
    /// batch, when the check was left to it ([`write::checked::Checked`]).
    pub(crate) async fn write_checked<O: write::WriteOp>(
        &self,
        op: O,
        check: Option<std::sync::Arc<TokenCheck>>,
    ) -> Result<O::Output, StoreError> {
        match check {
            Some(check) => self.write(write::checked::Checked { op, check }).await,
            None => self.write(op).await,
        }
    }
}

/// Why the store could not be opened.
#[derive(Debug)]
pub(crate) struct OpenError(pub(crate) String);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Store {
    /// Opens the database (a SQLite file, or a PostgreSQL URL) on the calling thread, so that
    /// start-up fails early and loudly, then starts the store's threads.
    pub(crate) fn open(config: StoreConfig) -> Result<(Store, StoreThreads), OpenError> {
        match postgres_url(&config.path) {
            Some(url) => postgres::open(url, config.clone()),
            None => sqlite::open(config),
        }
    }
}

/// `tenantd audit verify`: replays the chain of the database at `db` (a SQLite file or a
/// PostgreSQL URL) and compares it with the stored rows ([`verify`], the same for both); the
/// head on success.
pub(crate) fn verify_audit(db: &Path) -> Result<(Head, usize), String> {
    let verdict = match postgres_url(db) {
        None => verify::verify_live(&mut sqlite::reader(db)?),
        Some(url) => {
            let mut database = postgres::blocking::Blocking::connect_for_tool(url)?;
            database
                .expect_schema()
                .map_err(|e| crate::audit::VerifyError::Read(e).to_string())?;
            verify::verify_live(&mut database)
        }
    };
    verdict.map_err(|e| e.to_string())
}

/// `db` as a log line or an error may show it: a file's path, or a URL without its password.
pub(crate) fn describe(db: &Path) -> String {
    match postgres_url(db) {
        Some(url) => postgres::describe(url),
        None => db.display().to_string(),
    }
}

/// The PostgreSQL URL `db` is, if it is one.
pub(crate) fn postgres_url(db: &Path) -> Option<&str> {
    db.to_str().filter(|text| postgres::is_url(text))
}

/// What a finished copy holds.
pub(crate) use copy::Copied;

/// `tenantd copy`: the whole database `from` into the empty `to`, either a SQLite file or a
/// PostgreSQL URL; `progress` hears what is being done. The copy is written once, over the
/// seam ([`mod@copy`]); each backend opens its side, and commits a target.
pub(crate) fn copy(from: &Path, to: &Path, progress: impl FnMut(&str)) -> Result<Copied, String> {
    let name = describe(from);
    match postgres_url(from) {
        Some(url) => {
            let db = postgres::copy::source(url)?;
            copy_into(copy::Side { db, name }, to, progress)
        }
        None => {
            let db = sqlite::copy::source(from)?;
            copy_into(copy::Side { db, name }, to, progress)
        }
    }
}

/// [`copy()`] from its source, open, into `to`.
fn copy_into(
    source: copy::Side<impl sql::Sql>,
    to: &Path,
    progress: impl FnMut(&str),
) -> Result<Copied, String> {
    let name = describe(to);
    match postgres_url(to) {
        Some(url) => {
            let db = postgres::copy::target(url)?;
            let target = copy::Side {
                db,
                name: name.clone(),
            };
            let commit = |db: &mut _| postgres::copy::commit(db, &name);
            copy::run(source, target, commit, progress)
        }
        None => {
            let (db, file) = sqlite::copy::File::create(to)?;
            let target = copy::Side { db, name };
            copy::run(source, target, |db| file.commit(db), progress)
        }
    }
}

/// What a finished backup holds.
#[derive(Debug)]
pub(crate) struct BackupSummary {
    /// Tenants in the copy.
    pub(crate) tenants: u64,
    /// The copy's audit head.
    pub(crate) head: Head,
}

/// `tenantd backup`: a consistent, verified copy of the database at `path` in a new file.
pub(crate) fn backup(path: &Path, to: &Path) -> Result<BackupSummary, String> {
    sqlite::backup(path, to)
}
