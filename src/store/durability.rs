//! What a read waits for when commits become visible before they are durable.
//!
//! The SQLite writer commits a batch (its rows are then visible to every reader) and hands the
//! batch to a syncer thread, which makes the WAL durable and only then answers the batch's
//! commands, while the writer already runs the next batch. A read in that window may see a
//! commit that a crash would still take back, so before a read is answered it waits for the
//! sync of every commit that had begun when the read finished: no answer, of a write or of a
//! read, shows anything that is not durable. The wait lasts until the syncs queued ahead are
//! done (a sync takes a millisecond or two), and is none when no commit is in flight.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// The writer's commits, counted as they begin, and the last one made durable.
pub(crate) struct Durability {
    /// Commits begun; a commit's number is taken before its `COMMIT` runs.
    begun: AtomicU64,
    /// The highest commit number made durable, with every one before it.
    synced: watch::Sender<u64>,
    /// Test builds: no sync begins while this is set.
    #[cfg(test)]
    pub(crate) hold: std::sync::atomic::AtomicBool,
}

impl Durability {
    pub(crate) fn new() -> Self {
        Self {
            begun: AtomicU64::new(0),
            synced: watch::Sender::new(0),
            #[cfg(test)]
            hold: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The number of a commit about to begin (the writer, before `COMMIT`).
    pub(crate) fn begin_commit(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Every commit up to `number` is durable (the syncer, after the sync).
    pub(crate) fn synced(&self, number: u64) {
        self.synced.send_if_modified(|last| {
            let moved = number > *last;
            *last = (*last).max(number);
            moved
        });
    }

    /// Waits, for at most `wait`, until every commit begun by now is durable; false if that
    /// took longer. Called after a read has finished, so that it covers every commit the read
    /// could have seen.
    pub(crate) async fn settled(&self, wait: Duration) -> bool {
        let begun = self.begun.load(Ordering::SeqCst);
        if *self.synced.borrow() >= begun {
            return true;
        }
        let mut synced = self.synced.subscribe();
        matches!(
            tokio::time::timeout(wait, synced.wait_for(|&number| number >= begun)).await,
            Ok(Ok(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_read_waits_for_the_sync_of_every_commit_begun_before_it_ended() {
        let durability = Arc::new(Durability::new());
        // Nothing begun: no wait.
        assert!(durability.settled(Duration::ZERO).await);
        let first = durability.begin_commit();
        let second = durability.begin_commit();
        let waiting = tokio::spawn({
            let durability = Arc::clone(&durability);
            async move { durability.settled(WAIT).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "no commit is durable yet");
        durability.synced(first);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the second commit is not durable yet"
        );
        durability.synced(second);
        assert!(
            waiting.await.expect("the task"),
            "settled once both are durable"
        );
        // A number lower than one already synced never moves the mark back.
        durability.synced(first);
        assert!(durability.settled(Duration::ZERO).await);
        // A commit that is never synced: the wait ends at its bound.
        durability.begin_commit();
        assert!(!durability.settled(Duration::from_millis(20)).await);
    }
}
