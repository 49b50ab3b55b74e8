//! The readers: threads that each own a read-only connection and answer reads, so a read
//! never waits behind a write batch. WAL gives each read a snapshot of what is committed; a
//! reader never sees a write before its commit. The credential thread runs the same loop on a
//! queue of its own.

use rusqlite::Connection;

use crate::domain::{Tenant, TenantId};
use crate::store::commands::Reply;
use crate::store::{Credential, StoreError};
use crate::store::{queries, run_guarded};

/// A read to run on a reader's connection; it sends its own answer.
pub(super) type Query = Box<dyn FnOnce(&mut Connection) + Send>;

/// The commands a reader answers.
pub(super) enum ReadCommand {
    /// A tenant by id.
    Tenant(TenantId, Reply<Tenant>),
    /// Any other read.
    Query(Query),
    /// What a token of this tenant must match.
    Credential(TenantId, Reply<Option<Credential>>),
    /// Ends the thread that takes it.
    Shutdown,
}

/// Answers read commands until it takes a `Shutdown` or every sender is gone. The channel
/// hands each command to the first free thread.
pub(super) fn run(conn: &mut Connection, queue: &flume::Receiver<ReadCommand>) {
    while let Ok(command) = queue.recv() {
        match command {
            ReadCommand::Tenant(id, reply) => {
                let result =
                    run_guarded(|| queries::tenant(conn, &id)?.ok_or(StoreError::TenantNotFound));
                let _ = reply.send(result);
            }
            ReadCommand::Query(query) => query(conn),
            ReadCommand::Credential(id, reply) => {
                let _ = reply.send(run_guarded(|| queries::credential(conn, &id)));
            }
            ReadCommand::Shutdown => return,
        }
    }
}
