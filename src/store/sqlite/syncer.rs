//! The syncer: makes committed batches durable and answers their commands, while the writer
//! runs the next batch.
//!
//! The writer's connection commits with `synchronous = NORMAL`: a `COMMIT` appends the
//! batch's frames to the WAL and makes them visible, without waiting for the disk. The batch
//! then comes here, in commit order, with its answers. This thread syncs the WAL file
//! (`fdatasync`), which makes every frame written before the call durable, and only then
//! answers the batch's commands and tells [`Durability`] so that reads waiting on it go on.
//! Batches that queue up while a sync runs share the next one. The writer's CPU work and the
//! disk's flush overlap instead of taking turns.
//!
//! What SQLite still syncs itself under `NORMAL` (the WAL before a checkpoint copies it, the
//! database file after, the WAL header when the log starts over) keeps every checkpoint safe:
//! a frame reaches the database file only once it is durable in the WAL.
//!
//! A sync that fails ends the process. After a failed `fsync` the kernel may have dropped
//! the dirty pages and cleared the error, so no later sync could tell whether the batch is on
//! disk; the batch's commands are never answered, and a restart recovers what reached the
//! disk.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::open::wal_path;
use crate::store::StoreError;
use crate::store::durability::Durability;
use crate::store::write::Finish;
use crate::store::write::batch::answer_all;

/// Committed batches that may queue for their sync. With the one being synced and the one
/// the writer holds while it waits for room, at most 4 committed batches are not yet
/// durable.
pub(super) const SYNC_QUEUE_DEPTH: usize = 2;

/// A committed (or failed) batch: its commit's number and its commands' answers.
pub(super) struct Committed {
    pub(super) number: u64,
    pub(super) answers: Vec<Finish>,
    pub(super) outcome: Result<(), StoreError>,
}

/// The syncer thread and the queue that feeds it.
pub(super) struct Syncer {
    wal: PathBuf,
    durability: Arc<Durability>,
    queue: Option<flume::Sender<Committed>>,
    handle: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the thread for the database at `db`, whose WAL must exist. Syncs the WAL once
    /// first: after a crash, frames a commit wrote but no sync covered may still sit in the
    /// page cache, visible to every reader. Then syncs the database's directory, so that the
    /// WAL's own name is durable.
    pub(super) fn start(db: &Path, durability: Arc<Durability>) -> io::Result<Self> {
        let path = wal_path(db);
        let wal = Wal::open(path.clone())?;
        wal.file.sync_data()?;
        let dir = db.parent().filter(|d| !d.as_os_str().is_empty());
        File::open(dir.unwrap_or(Path::new(".")))?.sync_all()?;
        let (queue, batches) = flume::bounded(SYNC_QUEUE_DEPTH);
        let thread_durability = Arc::clone(&durability);
        let handle = std::thread::Builder::new()
            .name("tenantd-sync".into())
            .spawn(move || run(wal, &thread_durability, &batches))?;
        Ok(Self {
            wal: path,
            durability,
            queue: Some(queue),
            handle: Some(handle),
        })
    }

    /// Hands a batch over, waiting while [`SYNC_QUEUE_DEPTH`] others wait for their sync.
    /// Once the thread is stopped (or gone, which only a panic could do), the sync runs here.
    pub(super) fn send(&self, batch: Committed) {
        let batch = match &self.queue {
            Some(queue) => match queue.send(batch) {
                Ok(()) => return,
                Err(flume::SendError(batch)) => {
                    log::error!("the sync thread has stopped; the writer syncs by itself");
                    batch
                }
            },
            None => batch,
        };
        match Wal::open(self.wal.clone()) {
            Ok(mut wal) => wal.sync_or_abort(),
            Err(e) => abort_unsynced(&e),
        }
        self.durability.synced(batch.number);
        answer_all(batch.answers, &batch.outcome);
    }

    /// Lets the thread sync and answer what is queued, then joins it.
    pub(super) fn stop(&mut self) {
        self.queue = None;
        if let Some(handle) = self.handle.take()
            && handle.join().is_err()
        {
            log::error!("the sync thread panicked");
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(mut wal: Wal, durability: &Durability, batches: &flume::Receiver<Committed>) {
    while let Ok(first) = batches.recv() {
        // Every batch queued now was committed before this sync begins: one sync covers all.
        let mut group = vec![first];
        group.extend(batches.try_iter());
        #[cfg(test)]
        while durability.hold.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        wal.sync_or_abort();
        let last = group.last().map_or(0, |batch| batch.number);
        durability.synced(last);
        for batch in group {
            answer_all(batch.answers, &batch.outcome);
        }
    }
}

/// The WAL file, held open for the thread's life. A descriptor opened afresh for each sync
/// would not be told of a write-back error that another descriptor (SQLite's own, in a
/// checkpoint) had already been told of; one held open since before the write is.
struct Wal {
    path: PathBuf,
    file: File,
}

impl Wal {
    fn open(path: PathBuf) -> io::Result<Self> {
        let file = File::open(&path)?;
        Ok(Self { path, file })
    }

    /// Makes every frame written to the WAL so far durable, or ends the process. Should the
    /// WAL at the path ever be another file than the one held (SQLite recreates it only
    /// when every connection has closed), the held one is synced and the new one opened and
    /// synced too.
    fn sync_or_abort(&mut self) {
        if let Err(e) = self.file.sync_data() {
            abort_unsynced(&e);
        }
        if !self.is_current() {
            match Self::open(self.path.clone()) {
                Ok(wal) => *self = wal,
                Err(e) => abort_unsynced(&e),
            }
            if let Err(e) = self.file.sync_data() {
                abort_unsynced(&e);
            }
        }
    }

    /// Whether the file at the path is the one held.
    fn is_current(&self) -> bool {
        match (std::fs::metadata(&self.path), self.file.metadata()) {
            (Ok(at_path), Ok(held)) => at_path.dev() == held.dev() && at_path.ino() == held.ino(),
            _ => false,
        }
    }
}

fn abort_unsynced(e: &io::Error) -> ! {
    log::error!(
        "cannot sync the WAL ({e}); stopping: after a failed sync nothing says whether the last \
         commits are on disk, and none of them may be answered"
    );
    std::process::abort();
}
