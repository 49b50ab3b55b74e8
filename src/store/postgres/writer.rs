//! The PostgreSQL writer: one thread of each instance, running the store's commands in
//! batches, one transaction a batch, as the SQLite writer does.
//!
//! Any number of instances may write to one database. A batch begins by locking the chain's
//! one-row lock (`chain_head`), so batches of all instances run one at a time, and every
//! statement of a batch (`READ COMMITTED`) sees all that the batches before it committed:
//! a key bound through another instance is replayed, a budget's figures are the latest, an
//! expiry is recorded once. Under the lock the writer reads the chain's last event; when
//! another instance appended since this writer's last batch, its head, clock and ids catch up
//! with what is stored (so events, entries and ids stay in order along the chain), and the
//! soonest expiry is read again.
//!
//! A `COMMIT` whose connection broke has an unknown outcome. The writer connects again and
//! looks for the batch's last event: found, the batch committed and is answered; not found
//! (or no connection to be had), every command is answered `Unavailable` (a `503`), and a
//! keyed retry settles it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::blocking::Blocking;
use crate::audit::Head;
use crate::domain::Timestamp;
use crate::store::sql::{Param, Sql, text};
use crate::store::write::batch::Batches;
use crate::store::write::chain;
use crate::store::write::delta::Delta;
use crate::store::write::state::WriterState;
use crate::store::write::stats::Stats;
use crate::store::{StoreConfig, StoreError, queries};

/// How often (in seconds) an idle writer looks for reservations due to expire, since another
/// instance (one that stopped, say) may have taken them.
const EXPIRY_POLL_SECONDS: u32 = 1;

/// The state of the writer thread.
pub(super) struct Writer {
    /// The connection, and what the writer keeps between batches.
    state: WriterState<Blocking>,
    /// Where to connect again.
    url: String,
    config: StoreConfig,
    stats: Arc<Stats>,
    /// Set when the connection cannot be trusted (closed, or a transaction left open): a new
    /// one is made before the next batch.
    broken: bool,
}

impl Batches for Writer {
    type Db = Blocking;

    fn state(&mut self) -> &mut WriterState<Blocking> {
        &mut self.state
    }

    fn batch_max(&self) -> usize {
        self.config.commit_batch_max
    }

    /// Replaces a connection that is closed or was left in doubt; for writes, begins the
    /// transaction under the chain's lock and catches up with other instances.
    fn begin(&mut self, writes: bool) -> Result<(), StoreError> {
        if self.broken || self.state.db_ref().is_closed() {
            self.state.db().reconnect(&self.url)?;
            self.broken = false;
        }
        if writes {
            self.begin_locked()?;
        }
        Ok(())
    }

    /// A statement that fails inside a savepoint is rolled back to it; a connection lost
    /// mid-batch fails the savepoint's end, which poisons the batch.
    fn lost_transaction(&mut self) -> Option<StoreError> {
        None
    }

    /// Inside a write batch the chain's lock is held already; otherwise the server must be
    /// one that takes writes (not a standby, not read-only).
    fn check_writable(&mut self, in_transaction: bool) -> Result<(), StoreError> {
        if in_transaction {
            return Ok(());
        }
        let read_only = self.state.db().query_opt(
            "SELECT current_setting('transaction_read_only')",
            &[],
            |row| Ok(text(row, 0)? == "on"),
        )?;
        if read_only == Some(false) {
            Ok(())
        } else {
            Err(StoreError::Unavailable(
                "the database takes no writes (a standby, or read-only)".into(),
            ))
        }
    }

    /// Rolls the batch back; a connection on which that fails is replaced before the next.
    fn rollback(&mut self) {
        if self.state.db_ref().is_closed() {
            self.broken = true;
            return;
        }
        if let Err(e) = self.state.db().run("ROLLBACK") {
            log::error!("ROLLBACK failed ({e:?}); connecting again before the next batch");
            self.broken = true;
        }
    }

    /// A `COMMIT` whose connection broke may have committed: the writer connects again and
    /// looks for the batch's last event.
    fn commit(&mut self, head_before: &Head) -> Result<(), StoreError> {
        let Err(error) = self.state.db().run("COMMIT") else {
            return Ok(());
        };
        if !self.state.db_ref().is_closed() {
            // The server answered, and a failed COMMIT rolls back.
            self.rollback();
            return Err(error);
        }
        self.broken = true;
        let head = self.state.head().clone();
        if head == *head_before {
            return Err(error);
        }
        match self.begin(false).and_then(|()| self.stored(&head)) {
            Ok(true) => {
                log::warn!("COMMIT reported {error:?}, but the batch is in the database");
                Ok(())
            }
            Ok(false) => Err(StoreError::Unavailable(format!(
                "the batch did not commit: {error:?}"
            ))),
            Err(e) => Err(StoreError::Unavailable(format!(
                "the outcome of COMMIT is unknown ({error:?}); it cannot be looked up: {e:?}"
            ))),
        }
    }

    fn committed(&mut self, delta: &Delta, commands: usize) {
        self.stats.apply(delta, commands);
        self.poll_expiries();
    }

    fn failed(&mut self) {
        self.poll_expiries();
    }

    fn close(self) {
        log::info!("store closed");
    }
}

impl Writer {
    /// Connects, and reads the head, the counts and the latest id.
    pub(super) fn new(url: &str, config: StoreConfig) -> Result<Self, String> {
        let mut db = Blocking::connect(url)?;
        let failed = |e: StoreError| format!("cannot read the database: {e:?}");
        let stats = Stats::default();
        stats.load(&mut db).map_err(failed)?;
        let head = chain::load_head(&mut db).map_err(failed)?;
        let latest = queries::due::latest_ulid(&mut db).map_err(failed)?;
        Ok(Self {
            state: WriterState::new(db, &config, head, latest),
            url: url.to_owned(),
            config,
            stats: Arc::new(stats),
            broken: false,
        })
    }

    /// The counters the handle reads for `/metrics`.
    pub(super) fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// Another instance may take holds this one never hears of: the soonest expiry is
    /// looked for again within [`EXPIRY_POLL_SECONDS`].
    fn poll_expiries(&mut self) {
        let poll = self.state.clock_now().plus_seconds(EXPIRY_POLL_SECONDS);
        self.state.lower_next_expiry(poll);
    }

    /// Begins the batch's transaction under the chain's lock, and catches up with what other
    /// instances appended since this writer's last batch.
    fn begin_locked(&mut self) -> Result<(), StoreError> {
        // A connection the server closed while it was idle is found out here, before the
        // batch has done anything: it is replaced, and the batch goes on.
        const BEGIN: &str = "BEGIN; SELECT id FROM chain_head WHERE id = 1 FOR UPDATE";
        let began = match self.state.db().run(BEGIN) {
            Err(StoreError::Unavailable(_)) if self.state.db_ref().is_closed() => self
                .state
                .db()
                .reconnect(&self.url)
                .and_then(|()| self.state.db().run(BEGIN)),
            began => began,
        };
        let begun = began.and_then(|()| {
            let (head, at) = chain::last_event(self.state.db())?;
            if head != *self.state.head() {
                let latest = queries::due::latest_and_soonest(self.state.db())?;
                self.state.catch_up(at, latest.ulid);
                let events = u64::try_from(head.seq).unwrap_or(0);
                self.stats.audit_events.store(events, Ordering::Relaxed);
                self.state.set_head(head);
                // Another instance may have taken or settled holds, or begun periods: the
                // soonest expiry and boundary as stored now, under the lock, are exact.
                self.state
                    .set_next_expiry(latest.expiry.unwrap_or(Timestamp::MAX));
                self.state
                    .set_next_boundary(latest.boundary.unwrap_or(Timestamp::MAX));
            }
            Ok(())
        });
        if begun.is_err() {
            self.rollback();
        }
        begun
    }

    /// Whether the chain holds `head`'s event.
    fn stored(&mut self, head: &Head) -> Result<bool, StoreError> {
        let hash = self.state.db().query_opt(
            "SELECT hash FROM audit_events WHERE seq = ?1",
            &[Param::Int(head.seq)],
            |row| Ok(text(row, 0)?.into_owned()),
        )?;
        Ok(hash.as_deref() == Some(head.hash.as_str()))
    }
}
