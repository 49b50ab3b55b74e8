//! Checkpoints off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that crosses its threshold: it
//! copies the WAL into the database file and fsyncs it while every queued write waits. Here
//! the writer's WAL hook only signals, and this thread runs a PASSIVE checkpoint on its own
//! connection, which never blocks the writer or the readers. After an erasure the WAL is also
//! emptied (TRUNCATE), which holds the write lock for a moment: only once a passive pass has
//! copied every frame, and with a short wait for the lock.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

/// WAL pages (of 4 KiB, so 32 MiB) after a commit that wake the checkpointer. A passive
/// checkpoint copies each page once, its latest version, however many frames the WAL holds of
/// it: past SQLite's own 1,000, a page that every batch changes (a budget, the end of an
/// index) is copied once for many batches. At 1,000 the checkpointer took 13 % of the
/// machine under charges on budgets in a tree; at 8,000 SQLite's writes went 0 to 14 %
/// faster, 5 % on most rows (`BENCHMARKS.md`, 2026-11-30). Below [`WAL_RESTART_PAGES`],
/// where the WAL starts over.
pub(super) const CHECKPOINT_PAGES: i32 = 8192;

/// WAL pages beyond which the writer checkpoints by itself, should this thread fall behind:
/// the bound on the WAL's size (256 MiB).
pub(super) const WAL_PAGES_MAX: i32 = 65_536;

/// How long the checkpointer waits for a lock: short, so that it gives way to the writer.
pub(super) const CHECKPOINT_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

/// How often the thread checkpoints even without a signal, so a quiet database does not keep
/// a WAL behind.
const IDLE_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Signal {
    pending: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
    /// The next checkpoint must empty the WAL file: something was erased whose old versions
    /// the WAL still holds.
    truncate: AtomicBool,
}

/// WAL pages beyond which the writer, before its next batch, checkpoints the few frames the
/// checkpointer has not copied yet, so that the batch starts the WAL over from its beginning
/// (48 MiB: below `journal_size_limit`, so a WAL that starts over is never cut back).
///
/// Under a steady stream of batches, once past [`CHECKPOINT_PAGES`], the checkpointer copies
/// each batch soon after its commit, but the next batch has begun by then; SQLite starts the log over only for a transaction
/// that begins when every frame is copied, so without this the WAL grows until the writer
/// pauses (or the [`WAL_PAGES_MAX`] backstop runs inside a commit), and each time it starts
/// over beyond `journal_size_limit` it is cut back, its blocks freed and allocated again.
pub(super) const WAL_RESTART_PAGES: i32 = 12_288;

// The checkpointer wakes before the WAL is long enough to start over, which comes before
// the writer's backstop.
const _: () = assert!(CHECKPOINT_PAGES < WAL_RESTART_PAGES && WAL_RESTART_PAGES < WAL_PAGES_MAX);

/// The checkpointer thread and the signal that wakes it.
pub(super) struct Checkpointer {
    signal: Arc<Signal>,
    handle: Option<JoinHandle<()>>,
    /// The WAL's length in pages after the last commit, as the hook saw it.
    wal_pages: Arc<AtomicI32>,
}

impl Checkpointer {
    /// Starts the thread on its own connection.
    pub(super) fn start(conn: Connection) -> std::io::Result<Self> {
        conn.busy_timeout(CHECKPOINT_BUSY_TIMEOUT)
            .map_err(std::io::Error::other)?;
        let signal = Arc::new(Signal::default());
        let thread_signal = Arc::clone(&signal);
        let handle = std::thread::Builder::new()
            .name("tenantd-checkpoint".into())
            .spawn(move || run(&conn, &thread_signal))?;
        Ok(Self {
            signal,
            handle: Some(handle),
            wal_pages: Arc::new(AtomicI32::new(0)),
        })
    }

    /// The WAL's length in pages after the writer's last commit.
    pub(super) fn wal_pages(&self) -> i32 {
        self.wal_pages.load(Ordering::Relaxed)
    }

    /// Installs the hook on the writer's connection. The hook runs after a commit has
    /// happened, so it must never report an error (that would turn a committed write into a
    /// failed one); a failed backstop checkpoint is only logged.
    ///
    /// The hook also counts the WAL frames each commit writes into `frames`: the pages it
    /// added to the log, or all of them when the log started over.
    pub(super) fn watch(
        &self,
        writer: &mut Connection,
        frames: Arc<AtomicU64>,
    ) -> rusqlite::Result<()> {
        let signal = Arc::clone(&self.signal);
        let last = Arc::clone(&self.wal_pages);
        last.store(0, Ordering::Relaxed);
        writer.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
            let before = last.swap(pages, Ordering::Relaxed);
            let written = if pages >= before {
                pages - before
            } else {
                pages
            };
            frames.fetch_add(u64::try_from(written).unwrap_or(0), Ordering::Relaxed);
            if pages >= WAL_PAGES_MAX {
                if let Err(e) = wal.checkpoint_v2(CheckpointMode::PASSIVE) {
                    log::warn!("backstop checkpoint of a {pages}-page WAL failed: {e}");
                }
            } else if pages >= CHECKPOINT_PAGES {
                signal.notify();
            }
            Ok(())
        }))
    }

    /// Asks for a checkpoint that empties the WAL, so that deleted content (with
    /// `secure_delete`, already zeroed in the current page versions) survives in no older
    /// frame. It is retried until it succeeds.
    pub(super) fn request_truncate(&self) {
        self.signal.truncate.store(true, Ordering::Release);
        self.signal.notify();
    }

    /// Stops the thread and waits for it, so that a final checkpoint does not race it.
    pub(super) fn stop(&mut self) {
        self.signal.stop.store(true, Ordering::Release);
        self.signal.notify();
        if let Some(handle) = self.handle.take()
            && handle.join().is_err()
        {
            log::error!("the checkpoint thread panicked");
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Signal {
    fn notify(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *pending = true;
        self.wake.notify_one();
    }
}

fn run(conn: &Connection, signal: &Signal) {
    loop {
        {
            let pending = signal.pending.lock().unwrap_or_else(|e| e.into_inner());
            let (mut pending, _) = signal
                .wake
                .wait_timeout_while(pending, IDLE_CHECKPOINT_INTERVAL, |p| {
                    !*p && !signal.stop.load(Ordering::Acquire)
                })
                .unwrap_or_else(|e| e.into_inner());
            *pending = false;
        }
        if signal.stop.load(Ordering::Acquire) {
            return;
        }
        let truncate = signal.truncate.swap(false, Ordering::AcqRel);
        let passive = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE);
        match &passive {
            Ok((frames, done)) => log::debug!("checkpointed {done} of {frames} WAL frames"),
            Err(e) => log::warn!("checkpoint failed: {e}"),
        }
        if !truncate {
            continue;
        }
        // Emptying the WAL takes the write lock. Once a passive pass has copied every frame
        // there is little left to do under it, and the lock is waited for only briefly
        // (CHECKPOINT_BUSY_TIMEOUT), so the writer's own wait never runs out.
        let copied_all = matches!(passive, Ok((frames, done)) if frames == done);
        let emptied = copied_all
            && conn
                .wal_checkpoint_v2(None::<&str>, CheckpointMode::TRUNCATE)
                .is_ok();
        if !emptied {
            // Readers or the writer were in the way: again at the next wake-up.
            signal.truncate.store(true, Ordering::Release);
        }
    }
}
