//! The SQLite backend: one writer thread owns the read-write connection and group-commits
//! typed commands; reader threads, each with a read-only connection, answer reads beside it;
//! a credential thread with a connection of its own answers tenant-token checks, so that no
//! flood of reads can starve authentication. Every command is answered on its own oneshot
//! channel, and no SQLite call runs on the async runtime.

mod audit;
mod backup;
mod checkpoint;
pub(super) mod copy;
mod open;
mod reader;
mod scan;
mod sql;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use rusqlite::ErrorCode;
use tokio::sync::oneshot;

use super::commands::{Reply, Stats, WriteCommand};
use super::{
    BackupSummary, CREDENTIAL_WAIT_MAX, CreateBudget, CreateTenant, Created, Credential, ListQuery,
    MoveBudget, OpenError, Page, Reserve, SettleReservation, StoreConfig, StoreError, StoreGauges,
    Written,
};
use super::{queries, run_guarded};
use crate::audit::{Actor, Head};
use crate::domain::{Budget, BudgetId, LedgerEntry, Reservation, ReservationId, Tenant, TenantId};
use reader::ReadCommand;
use writer::Writer;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        if is_unique_clash(&e, "tenants.name") {
            return Self::TenantNameTaken;
        }
        if is_unique_clash(&e, "budgets.tenant_id") {
            return Self::BudgetNameTaken;
        }
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

impl From<open::OpenError> for OpenError {
    fn from(e: open::OpenError) -> Self {
        Self(e.to_string())
    }
}

/// A cheap, cloneable handle to the threads.
#[derive(Clone)]
pub(super) struct Handle {
    writes: flume::Sender<WriteCommand>,
    reads: flume::Sender<ReadCommand>,
    credentials: flume::Sender<ReadCommand>,
    stats: Arc<Stats>,
}

/// Owns the threads.
pub(super) struct Threads {
    writer: JoinHandle<()>,
    writes: flume::Sender<WriteCommand>,
    readers: Vec<JoinHandle<()>>,
    reads: flume::Sender<ReadCommand>,
    credentials: flume::Sender<ReadCommand>,
}

/// Opens the file, migrates it, and starts the writer, the readers and the credential thread.
pub(super) fn open(config: StoreConfig) -> Result<(Handle, Threads), OpenError> {
    assert!(
        config.queue_depth > 0
            && config.credential_queue_depth > 0
            && config.commit_batch_max > 0
            && config.readers > 0,
        "store bounds must be positive: {config:?}"
    );
    let conn = open::open_writer(&config.path)?;
    let writer = Writer::new(conn, config.clone())?;
    let stats = writer.stats();
    let spawn_error = |e: std::io::Error| OpenError(format!("cannot start a thread: {e}"));

    let (read_tx, read_rx) = flume::bounded(config.queue_depth);
    let (credential_tx, credential_rx) = flume::bounded(config.credential_queue_depth);
    let mut readers = Vec::with_capacity(config.readers + 1);
    let queues = (0..config.readers)
        .map(|i| (format!("tenantd-read-{i}"), read_rx.clone()))
        .chain([("tenantd-credentials".to_owned(), credential_rx)]);
    for (name, queue) in queues {
        let mut conn = open::open_reader(&config.path)?;
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || reader::run(&mut conn, &queue))
            .map_err(spawn_error)?;
        readers.push(handle);
    }

    let (write_tx, write_rx) = flume::bounded(config.queue_depth);
    let handle = std::thread::Builder::new()
        .name("tenantd-write".into())
        .spawn(move || writer.run(&write_rx))
        .map_err(spawn_error)?;
    let threads = Threads {
        writer: handle,
        writes: write_tx.clone(),
        readers,
        reads: read_tx.clone(),
        credentials: credential_tx.clone(),
    };
    let handle = Handle {
        writes: write_tx,
        reads: read_tx,
        credentials: credential_tx,
        stats,
    };
    Ok((handle, threads))
}

impl Handle {
    /// Figures for `/metrics`, read now.
    pub(super) fn gauges(&self) -> StoreGauges {
        let stats = &self.stats;
        let queued = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        StoreGauges {
            tenants_active: stats.active.load(Ordering::Relaxed),
            tenants_tombstoned: stats.tombstoned.load(Ordering::Relaxed),
            budgets: stats.budgets.each_ref().map(|c| c.load(Ordering::Relaxed)),
            reservations: stats
                .reservations
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
            entries: stats.entries.each_ref().map(|c| c.load(Ordering::Relaxed)),
            audit_events: stats.audit_events.load(Ordering::Relaxed),
            batches: stats.batches.load(Ordering::Relaxed),
            commands: stats.commands.load(Ordering::Relaxed),
            wal_frames: stats.wal_frames.load(Ordering::Relaxed),
            writes_queued: queued(self.writes.len()),
            reads_queued: queued(self.reads.len()),
            credentials_queued: queued(self.credentials.len()),
        }
    }

    async fn write<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> WriteCommand,
    ) -> Result<T, StoreError> {
        ask(&self.writes, command).await
    }

    async fn read<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> ReadCommand,
    ) -> Result<T, StoreError> {
        ask(&self.reads, command).await
    }

    /// See [`crate::store::Store::create_tenant`].
    pub(super) async fn create_tenant(
        &self,
        create: CreateTenant,
    ) -> Result<Written<Created>, StoreError> {
        self.write(|reply| WriteCommand::CreateTenant(create, reply))
            .await
    }

    /// See [`crate::store::Store::tombstone_tenant`].
    pub(super) async fn tombstone_tenant(
        &self,
        id: TenantId,
        actor: Actor,
    ) -> Result<Tenant, StoreError> {
        self.write(|reply| WriteCommand::TombstoneTenant(id, actor, reply))
            .await
    }

    /// See [`crate::store::Store::check_writable`].
    pub(super) async fn check_writable(&self) -> Result<(), StoreError> {
        self.write(WriteCommand::CheckWritable).await
    }

    /// See [`crate::store::Store::purge_expired`].
    pub(super) async fn purge_expired(&self) -> Result<usize, StoreError> {
        self.write(WriteCommand::PurgeExpired).await
    }

    /// Runs `query` on a reader and waits for its answer.
    async fn query<T: Send + 'static>(
        &self,
        query: impl FnOnce(&mut rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.read(|reply: Reply<T>| {
            ReadCommand::Query(Box::new(move |conn| {
                let _ = reply.send(run_guarded(|| query(conn)));
            }))
        })
        .await
    }

    /// See [`crate::store::Store::create_budget`].
    pub(super) async fn create_budget(
        &self,
        create: CreateBudget,
    ) -> Result<Written<Budget>, StoreError> {
        self.write(|reply| WriteCommand::CreateBudget(create, reply))
            .await
    }

    /// See [`crate::store::Store::close_budget`].
    pub(super) async fn close_budget(
        &self,
        tenant: TenantId,
        budget: Option<BudgetId>,
        actor: Actor,
    ) -> Result<Budget, StoreError> {
        self.write(|reply| WriteCommand::CloseBudget(tenant, budget, actor, reply))
            .await
    }

    /// See [`crate::store::Store::move_budget`].
    pub(super) async fn move_budget(
        &self,
        command: MoveBudget,
    ) -> Result<Written<LedgerEntry>, StoreError> {
        self.write(|reply| WriteCommand::MoveBudget(command, reply))
            .await
    }

    /// See [`crate::store::Store::reserve`].
    pub(super) async fn reserve(
        &self,
        command: Reserve,
    ) -> Result<Written<Reservation>, StoreError> {
        self.write(|reply| WriteCommand::Reserve(command, reply))
            .await
    }

    /// See [`crate::store::Store::settle`].
    pub(super) async fn settle(
        &self,
        command: SettleReservation,
    ) -> Result<Written<Reservation>, StoreError> {
        self.write(|reply| WriteCommand::Settle(command, reply))
            .await
    }

    /// See [`crate::store::Store::expire_due`].
    #[cfg(test)]
    pub(super) async fn expire_due(&self) -> Result<usize, StoreError> {
        self.write(WriteCommand::ExpireDue).await
    }

    /// See [`crate::store::Store::budget`].
    pub(super) async fn budget(
        &self,
        tenant: TenantId,
        id: Option<BudgetId>,
    ) -> Result<Budget, StoreError> {
        self.query(move |conn| queries::budget(conn, &tenant, id.as_ref()))
            .await
    }

    /// See [`crate::store::Store::reservation`].
    pub(super) async fn reservation(
        &self,
        tenant: TenantId,
        id: Option<ReservationId>,
    ) -> Result<Reservation, StoreError> {
        self.query(move |conn| queries::reservation(conn, &tenant, id.as_ref()))
            .await
    }

    /// See [`crate::store::Store::list_tenants`].
    pub(super) async fn list_tenants(&self, query: ListQuery) -> Result<Page<Tenant>, StoreError> {
        self.query(move |conn| queries::list_tenants(conn, &query))
            .await
    }

    /// See [`crate::store::Store::list_budgets`].
    pub(super) async fn list_budgets(
        &self,
        tenant: TenantId,
        query: ListQuery,
    ) -> Result<Page<Budget>, StoreError> {
        self.query(move |conn| queries::list_budgets(conn, &tenant, &query))
            .await
    }

    /// See [`crate::store::Store::list_entries`].
    pub(super) async fn list_entries(
        &self,
        tenant: TenantId,
        budget: Option<BudgetId>,
        query: ListQuery,
    ) -> Result<Page<LedgerEntry>, StoreError> {
        self.query(move |conn| queries::list_entries(conn, &tenant, budget.as_ref(), &query))
            .await
    }

    /// See [`crate::store::Store::list_reservations`].
    pub(super) async fn list_reservations(
        &self,
        tenant: TenantId,
        query: ListQuery,
    ) -> Result<Page<Reservation>, StoreError> {
        self.query(move |conn| queries::list_reservations(conn, &tenant, &query))
            .await
    }

    /// See [`crate::store::Store::tenant`].
    pub(super) async fn tenant(&self, id: TenantId) -> Result<Tenant, StoreError> {
        self.read(|reply| ReadCommand::Tenant(id, reply)).await
    }

    /// Waits for room rather than refusing, up to [`CREDENTIAL_WAIT_MAX`]: the queue is the
    /// credential thread's alone, so only a flood of token checks can fill it.
    pub(super) async fn credential(&self, id: TenantId) -> Result<Option<Credential>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let command = ReadCommand::Credential(id, reply);
        match tokio::time::timeout(CREDENTIAL_WAIT_MAX, self.credentials.send_async(command)).await
        {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(closed()),
            Err(_) => return Err(StoreError::QueueFull),
        }
        answer.await.map_err(|_| dropped())?
    }
}

/// Queues a command if there is room (a full queue is refused at once, never waited on) and
/// waits for its answer.
async fn ask<C, T>(
    queue: &flume::Sender<C>,
    command: impl FnOnce(Reply<T>) -> C,
) -> Result<T, StoreError> {
    let (reply, answer) = oneshot::channel();
    queue.try_send(command(reply)).map_err(|e| match e {
        flume::TrySendError::Full(_) => StoreError::QueueFull,
        flume::TrySendError::Disconnected(_) => closed(),
    })?;
    answer.await.map_err(|_| dropped())?
}

fn closed() -> StoreError {
    StoreError::Unavailable("the store is shut down".into())
}

/// A command queued behind the store's shutdown is dropped unanswered.
fn dropped() -> StoreError {
    StoreError::Unavailable("the store stopped before answering".into())
}

impl Threads {
    /// Stops the readers and the credential thread, then lets the writer finish every queued
    /// command, checkpoint the WAL (with no reader in its way) and exit.
    pub(super) async fn shutdown(self) -> Result<(), String> {
        let Threads {
            writer,
            writes,
            readers,
            reads,
            credentials,
        } = self;
        let readers_stopped = tokio::task::spawn_blocking(move || {
            // Each thread ends at the first marker it takes, after the commands queued before
            // it; the credential thread has a queue of its own.
            for _ in 1..readers.len() {
                let _ = reads.send(ReadCommand::Shutdown);
            }
            let _ = credentials.send(ReadCommand::Shutdown);
            // Join every thread, even after one that failed: `count` consumes them all.
            let failed = readers
                .into_iter()
                .map(JoinHandle::join)
                .filter(Result::is_err)
                .count();
            failed == 0
        });
        let readers_ok = readers_stopped.await.unwrap_or(false);
        // `send_async` waits for room, so the marker queues behind every accepted command.
        let writer_reached = writes.send_async(WriteCommand::Shutdown).await.is_ok();
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

/// Replays the chain of the file at `path` against its rows.
pub(super) fn verify_audit(path: &Path) -> Result<Head, String> {
    let conn = open::open_reader(path).map_err(|e| format!("{}: {e}", path.display()))?;
    audit::verify(&conn).map_err(|e| e.to_string())
}

/// Writes a verified copy of the file at `path` to the new file `to`.
pub(super) fn backup(path: &Path, to: &Path) -> Result<BackupSummary, String> {
    backup::run(path, to)
}
