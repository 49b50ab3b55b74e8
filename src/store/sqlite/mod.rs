//! The SQLite backend: one writer thread owns the read-write connection and group-commits
//! typed commands ([`writer`]); the readers and the credential thread each have a read-only
//! connection of their own (see [`super::threads`]). WAL gives each read a snapshot of what is
//! committed; a reader never sees a write before its commit, and its answer waits until that
//! commit is durable ([`syncer`], [`super::durability`]).

mod backup;
mod checkpoint;
pub(super) mod copy;
mod open;
mod sql;
mod syncer;
mod writer;

use std::path::Path;
use std::sync::Arc;

use rusqlite::ErrorCode;

use super::durability::Durability;
use super::queries::reads::Reads;
use super::threads::{self, Store, StoreThreads};
use super::write::batch;
use super::{BackupSummary, OpenError, StoreConfig, StoreError};
use writer::Writer;

/// The writer's connection, as the write path names it (the queue's jobs run on it).
pub(super) type WriteConnection = rusqlite::Connection;

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

/// Opens the file, migrates it, and starts the writer, the readers and the credential thread.
pub(super) fn open(config: StoreConfig) -> Result<(Store, StoreThreads), OpenError> {
    let conn = open::open_writer(&config.path)?;
    let durability = Arc::new(Durability::new());
    let writer = Writer::new(conn, config.clone(), Arc::clone(&durability))?;
    let stats = writer.stats();
    // One connection a reader, and one for the credential thread: a check takes microseconds.
    let reader = || Ok(Box::new(open::open_reader(&config.path)?) as Box<dyn Reads>);
    let readers = (0..config.readers)
        .map(|_| reader())
        .collect::<Result<Vec<_>, open::OpenError>>()?;
    threads::start(
        &config,
        stats,
        vec![Box::new(move |queue: &_| batch::run(writer, queue))],
        readers,
        vec![reader()?],
        Some(durability),
        // One writer: no write ever finds its rows busy.
        false,
    )
}

/// The file at `path`, for reading only (`audit verify`); never created.
pub(super) fn reader(path: &Path) -> Result<rusqlite::Connection, String> {
    open::open_reader(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A database in memory at this build's schema, for the tests of what is written once for
/// both backends.
#[cfg(test)]
pub(super) fn in_memory() -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_in_memory().expect("an in-memory database opens");
    for migration in open::MIGRATIONS.iter() {
        conn.execute_batch(migration).expect("the schema applies");
    }
    conn
}

/// The existing file at `path`, writable, for tests that change it behind the service.
#[cfg(test)]
pub(super) fn editor(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .expect("the file opens for writing")
}

/// Writes a verified copy of the file at `path` to the new file `to`.
pub(super) fn backup(path: &Path, to: &Path) -> Result<BackupSummary, String> {
    backup::run(path, to)
}
