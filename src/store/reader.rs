//! The readers: threads that each own a read-only connection and answer `GET`s, so a read
//! never waits behind a write batch. WAL gives each read a snapshot of what is committed; a
//! reader never sees a write before its commit.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::{Reply, Stats, StoreError, queries, run_guarded};
use crate::domain::TenantId;
use crate::views::Tenant;

pub(super) enum ReadCommand {
    Get(TenantId, Reply<Tenant>),
    /// Whether this tenant is active and its token has this SHA-256.
    TokenMatches(TenantId, [u8; 32], Reply<bool>),
    /// Ends the reader that takes it.
    Shutdown,
}

/// Answers read commands until it takes a `Shutdown` or every sender is gone.
pub(super) fn run(conn: Connection, queue: Arc<Mutex<Receiver<ReadCommand>>>, stats: Arc<Stats>) {
    loop {
        // One reader waits on the queue at a time; the others wait for the lock. Either way a
        // command goes to the first free reader.
        let next = queue.lock().map(|rx| rx.recv());
        let Ok(Ok(command)) = next else {
            return;
        };
        if !matches!(command, ReadCommand::Shutdown) {
            // Shutdown markers are sent past the counter; only reads were counted.
            stats.reads_queued.fetch_sub(1, Ordering::Relaxed);
        }
        match command {
            ReadCommand::Get(id, reply) => {
                let result =
                    run_guarded(|| queries::tenant(&conn, &id)?.ok_or(StoreError::NotFound));
                let _ = reply.send(result);
            }
            ReadCommand::TokenMatches(id, hash, reply) => {
                let result = run_guarded(|| queries::token_matches(&conn, &id, &hash));
                let _ = reply.send(result);
            }
            ReadCommand::Shutdown => return,
        }
    }
}
