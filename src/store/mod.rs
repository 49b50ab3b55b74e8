//! The store: SQLite behind channels. One writer thread owns the read-write connection and
//! group-commits typed commands; reader threads, each with a read-only connection, answer
//! reads beside it. Every command is answered on its own oneshot channel, and no SQLite call
//! runs on the async runtime.
//!
//! # Bounds
//!
//! The writer's and the readers' queues each hold at most `queue_depth` commands; a full
//! queue is refused at once ([`StoreError::QueueFull`], a `503` with `Retry-After`), never
//! buffered without limit.

mod checkpoint;
mod queries;
mod reader;
mod writer;

use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use crate::db;
use crate::domain::{IdempotencyKey, NewTenant, TenantId};
use crate::views::Tenant;
use reader::ReadCommand;
use writer::{WriteCommand, Writer};

/// Default for [`StoreConfig::queue_depth`].
pub const QUEUE_DEPTH_DEFAULT: usize = 1024;

/// Default for [`StoreConfig::commit_batch_max`].
pub const COMMIT_BATCH_MAX_DEFAULT: usize = 256;

/// The most reader threads by default; more do not help on a small machine.
pub const READERS_DEFAULT_MAX: usize = 4;

/// A create with this name panics inside the writer: the fault hook of the tests, compiled
/// into test builds only.
#[cfg(test)]
pub const FAULT_PANIC_NAME: &str = "fault: panic in the writer";

/// How long an idempotent create's response is kept for replay, at most (the contract's 24 h).
pub const IDEMPOTENCY_TTL_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Reader threads to start when none is configured: one per core, up to
/// [`READERS_DEFAULT_MAX`].
pub fn readers_default() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(1, READERS_DEFAULT_MAX)
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub path: PathBuf,
    /// Commands that may wait in each queue before new ones are refused.
    pub queue_depth: usize,
    /// Commands run in one transaction, at most.
    pub commit_batch_max: usize,
    /// Reader threads, each with its own read-only connection.
    pub readers: usize,
    /// How long an idempotent create's response is kept for replay.
    pub idempotency_ttl: Duration,
    /// The public URL handed to sidecars as `TENANTD_URL`.
    pub public_url: String,
}

/// Why a command did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    NotFound,
    NameTaken,
    IdempotencyMismatch,
    /// The queue is full: the caller should retry shortly.
    QueueFull,
    /// The database cannot take the command now (full, read-only, locked, closed).
    Unavailable(String),
    /// A bug: a panic in a command or data that breaks an invariant.
    Internal(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(
                ErrorCode::DiskFull
                | ErrorCode::ReadOnly
                | ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::OutOfMemory,
            ) => Self::Unavailable(e.to_string()),
            _ => Self::Internal(e.to_string()),
        }
    }
}

/// What a create returned: the body to send, and whether it is a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub id: TenantId,
    pub body: String,
    pub replayed: bool,
}

/// A create as the store receives it.
#[derive(Debug)]
pub struct CreateRequest {
    pub tenant: NewTenant,
    pub idempotency_key: Option<IdempotencyKey>,
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// Counters the store keeps for `/metrics`; the tenant and audit counts change only after a
/// commit.
#[derive(Debug, Default)]
pub struct Stats {
    pub active: AtomicU64,
    pub tombstoned: AtomicU64,
    pub audit_events: AtomicU64,
    pub batches: AtomicU64,
    pub commands: AtomicU64,
    /// Read commands waiting for a reader.
    pub reads_queued: AtomicU64,
}

/// A cheap, cloneable handle to the store's threads.
#[derive(Clone)]
pub struct Store {
    writes: mpsc::Sender<WriteCommand>,
    reads: SyncSender<ReadCommand>,
    stats: Arc<Stats>,
}

/// Owns the store's threads; [`StoreThreads::shutdown`] drains and joins them.
pub struct StoreThreads {
    writer: JoinHandle<()>,
    writes: mpsc::Sender<WriteCommand>,
    readers: Vec<JoinHandle<()>>,
    reads: SyncSender<ReadCommand>,
}

impl Store {
    /// Opens the database on the calling thread, so that start-up fails early and loudly, then
    /// starts the writer and the readers.
    pub fn open(config: StoreConfig) -> Result<(Store, StoreThreads), db::OpenError> {
        assert!(config.queue_depth > 0 && config.commit_batch_max > 0 && config.readers > 0);
        let conn = db::open_writer(&config.path)?;
        let writer = Writer::new(conn, config.clone())?;
        let stats = writer.stats();
        let spawn_error =
            |e: std::io::Error| db::OpenError::Io(format!("cannot start a thread: {e}"));

        let (read_tx, read_rx) = std::sync::mpsc::sync_channel(config.queue_depth);
        let read_rx = Arc::new(Mutex::new(read_rx));
        let mut readers = Vec::with_capacity(config.readers);
        for i in 0..config.readers {
            let conn = db::open_reader(&config.path)?;
            let (queue, stats) = (Arc::clone(&read_rx), Arc::clone(&stats));
            let handle = std::thread::Builder::new()
                .name(format!("tenantd-read-{i}"))
                .spawn(move || reader::run(conn, queue, stats))
                .map_err(spawn_error)?;
            readers.push(handle);
        }

        let (write_tx, write_rx) = mpsc::channel(config.queue_depth);
        let handle = std::thread::Builder::new()
            .name("tenantd-write".into())
            .spawn(move || writer.run(write_rx))
            .map_err(spawn_error)?;
        let threads = StoreThreads {
            writer: handle,
            writes: write_tx.clone(),
            readers,
            reads: read_tx.clone(),
        };
        let store = Store {
            writes: write_tx,
            reads: read_tx,
            stats,
        };
        Ok((store, threads))
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Commands waiting for the writer and for the readers now.
    pub fn queue_depth(&self) -> (usize, usize) {
        let writes = self.writes.max_capacity() - self.writes.capacity();
        let reads = self.stats.reads_queued.load(Ordering::Relaxed) as usize;
        (writes, reads)
    }

    async fn write<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> WriteCommand,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writes.try_send(command(reply)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => StoreError::QueueFull,
            mpsc::error::TrySendError::Closed(_) => closed(),
        })?;
        answer.await.map_err(|_| dropped())?
    }

    async fn read<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> ReadCommand,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.stats.reads_queued.fetch_add(1, Ordering::Relaxed);
        self.reads.try_send(command(reply)).map_err(|e| {
            self.stats.reads_queued.fetch_sub(1, Ordering::Relaxed);
            match e {
                TrySendError::Full(_) => StoreError::QueueFull,
                TrySendError::Disconnected(_) => closed(),
            }
        })?;
        answer.await.map_err(|_| dropped())?
    }

    pub async fn create(&self, request: CreateRequest) -> Result<Created, StoreError> {
        self.write(|reply| WriteCommand::Create(request, reply))
            .await
    }

    pub async fn tombstone(&self, id: TenantId) -> Result<Tenant, StoreError> {
        self.write(|reply| WriteCommand::Tombstone(id, reply)).await
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.write(WriteCommand::Ping).await
    }

    pub async fn purge_expired(&self) -> Result<usize, StoreError> {
        self.write(WriteCommand::PurgeExpired).await
    }

    pub async fn get(&self, id: TenantId) -> Result<Tenant, StoreError> {
        self.read(|reply| ReadCommand::Get(id, reply)).await
    }

    /// Whether `id` is an active tenant whose token has the SHA-256 `token_hash`.
    pub async fn token_matches(
        &self,
        id: TenantId,
        token_hash: [u8; 32],
    ) -> Result<bool, StoreError> {
        self.read(|reply| ReadCommand::TokenMatches(id, token_hash, reply))
            .await
    }
}

fn closed() -> StoreError {
    StoreError::Unavailable("the store is shut down".into())
}

/// A command queued behind the store's shutdown is dropped unanswered.
fn dropped() -> StoreError {
    StoreError::Unavailable("the store stopped before answering".into())
}

impl StoreThreads {
    /// Stops the readers, then lets the writer finish every queued command, checkpoint the
    /// WAL (with no reader in its way) and exit. Fails if a thread had died.
    pub async fn shutdown(self) -> Result<(), String> {
        let (reads, readers) = (self.reads, self.readers);
        let readers_stopped = tokio::task::spawn_blocking(move || {
            // Each reader ends at the first marker it takes, after the reads queued before it.
            for _ in 0..readers.len() {
                let _ = reads.send(ReadCommand::Shutdown);
            }
            // Join every reader, even after one that failed: `count` consumes them all.
            let failed = readers
                .into_iter()
                .map(|reader| reader.join())
                .filter(Result::is_err)
                .count();
            failed == 0
        });
        let readers_ok = readers_stopped.await.unwrap_or(false);
        // `send` waits for room, so the marker queues behind every accepted command.
        let writer_reached = self.writes.send(WriteCommand::Shutdown).await.is_ok();
        let writer = self.writer;
        let writer_ok = matches!(
            tokio::task::spawn_blocking(move || writer.join()).await,
            Ok(Ok(()))
        );
        if readers_ok && writer_reached && writer_ok {
            Ok(())
        } else {
            Err("a store thread had stopped abnormally".into())
        }
    }
}

/// Runs `op`, turning a panic into [`StoreError::Internal`] so the thread lives on.
fn run_guarded<T>(op: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    panic::catch_unwind(AssertUnwindSafe(op)).unwrap_or_else(|panic| {
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
