//! What the writer keeps between commands: its connection, the chain's head, the id
//! generator, the clock's last reading, the soonest expiry, and what the open batch changed.
//!
//! The fields are private: operations reach them through the methods below, and a command
//! that fails is undone by one [`Snapshot`] taken before it ran.

use std::time::{Duration, Instant};

use super::ahead::{self, Ahead, Wanted, last_id};
use super::delta::Delta;
use super::guard::Guard;
use super::known::Known;
use super::subscribers::Subscriber;
use super::unwritten::Unwritten;
use super::{WAKE_INTERVAL_MAX, WriteCommand};
use crate::audit::Head;
use crate::domain::{Budget, BudgetId, Reservation, ReservationId, TenantId, Timestamp};
use crate::ids::IdGenerator;
use crate::store::sql::Sql;
use crate::store::{Clock, StoreConfig, StoreError};

/// An id generator that several writers share.
pub(crate) type SharedIds = std::sync::Arc<std::sync::Mutex<IdGenerator>>;

/// A generator whose ids sort after `latest`, the greatest id stored, to be shared by an
/// instance's writers.
pub(crate) fn shared_ids(latest: Option<ulid::Ulid>) -> SharedIds {
    std::sync::Arc::new(std::sync::Mutex::new(IdGenerator::after(latest)))
}

/// A writer's connection and what it keeps between commands.
pub(crate) struct WriterState<D> {
    /// The connection that writes.
    pub(super) db: D,
    clock: Clock,
    idempotency_ttl: Duration,
    /// The chain's head as the open batch leaves it.
    head: Head,
    /// Where ids come from: shared by an instance's writers, so that its ids sort in the
    /// order they were made, whichever writer made them.
    ids: SharedIds,
    /// What the open batch changed, for the counters once it commits.
    delta: Delta,
    /// The latest time this writer used: time never runs backwards for it.
    last_now: Timestamp,
    /// No active reservation expires before this instant ([`Timestamp::MAX`]: none is
    /// active). A lower bound: lowered by every new hold and every extend (which may
    /// shorten a hold), raised only by a sweep that read the true soonest expiry.
    next_expiry: Timestamp,
    /// No open budget's period ends before this instant ([`Timestamp::MAX`]: none has a
    /// period). A lower bound, as `next_expiry` is: lowered by every period begun, raised only
    /// by a sweep that read the true soonest boundary.
    next_boundary: Timestamp,
    /// While what fell due on a tenant's budgets is recorded in time order: each budget is
    /// then as of the instant being recorded, and is not caught up further
    /// (`WriterState::catch_up_budget`).
    recording_due: bool,
    /// Set when a command left the transaction in a state the batch must not commit.
    pub(super) poisoned: Option<StoreError>,
    /// After a sweep failed, the next is not tried before this instant, so a database that
    /// refuses writes is not asked again in a busy loop.
    sweep_retry_at: Option<Instant>,
    /// The tenants whose row locks the open batch holds, where writers share the database
    /// ([`WriterState::lock_tenant`]).
    locked: Vec<TenantId>,
    /// The enabled webhook endpoints, read when an event is first written after they may
    /// have changed (`None`: to be read). Forgotten by every change of an endpoint, by every
    /// command that fails, and, where writers share the database, at every batch.
    subscribers: Option<Vec<Subscriber>>,
    /// What the open batch read ahead, where writers share the database, and the budgets its
    /// commands wrote and left for the next, on every backend.
    pub(super) ahead: Ahead,
    /// What the writer knows of the tenants it wrote last, where writers share the database.
    known: Known,
    /// The digest of the webhook endpoints ([`super::guard::ENDPOINTS_DIGEST`]) where the open batch read the enabled ones ahead
    /// (or took them from what the writer knows).
    endpoints_digest: Option<String>,
    /// While a batch of operations runs (`ops::batch`): its operations' writes are kept until
    /// it ends, whatever its operations are.
    pub(super) keeping: bool,
    /// While a batch of operations runs: the figures, entries and audit rows it wrote, written
    /// once it ends.
    pub(super) unwritten: Unwritten,
    /// The fault hook of the tests: the next `ROLLBACK` fails without rolling back.
    #[cfg(test)]
    fail_next_rollback: bool,
}

/// What a command (or a batch) may change in memory beside the database, taken before it
/// runs and put back if it does not commit.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    head: Head,
    delta: Delta,
    locked: usize,
    next_expiry: Timestamp,
    next_boundary: Timestamp,
    unwritten: usize,
}

impl Snapshot {
    /// The chain's head when the snapshot was taken.
    pub(crate) fn head(&self) -> &Head {
        &self.head
    }
}

impl<D: Sql> WriterState<D> {
    /// Takes over `db`, whose chain ends at `head`, making ids with `ids` (see
    /// [`shared_ids`]).
    pub(crate) fn new(db: D, config: &StoreConfig, head: Head, ids: SharedIds) -> Self {
        Self {
            db,
            clock: config.clock.clone(),
            idempotency_ttl: config.idempotency_ttl,
            head,
            ids,
            delta: Delta::default(),
            last_now: Timestamp::from_unix_ms(0),
            // Unknown until read: the first batch reads it.
            next_expiry: Timestamp::from_unix_ms(0),
            next_boundary: Timestamp::from_unix_ms(0),
            recording_due: false,
            poisoned: None,
            sweep_retry_at: None,
            locked: Vec::new(),
            subscribers: None,
            ahead: Ahead::default(),
            known: Known::default(),
            endpoints_digest: None,
            keeping: false,
            unwritten: Unwritten::default(),
            #[cfg(test)]
            fail_next_rollback: false,
        }
    }

    /// The id generator, for one id or one skip.
    fn ids(&self) -> std::sync::MutexGuard<'_, IdGenerator> {
        // A panic while the lock was held cannot leave the generator half-changed: its one
        // field is written whole.
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection that writes.
    pub(crate) fn db(&mut self) -> &mut D {
        &mut self.db
    }

    /// The connection, to look at.
    pub(crate) fn db_ref(&self) -> &D {
        &self.db
    }

    /// The chain's head as the open batch leaves it.
    pub(crate) fn head(&self) -> &Head {
        &self.head
    }

    /// The chain's head, read again from the database or moved on by an append.
    pub(crate) fn set_head(&mut self, head: Head) {
        self.head = head;
    }

    /// What the open batch changed so far, to count more.
    pub(crate) fn counts(&mut self) -> &mut Delta {
        &mut self.delta
    }

    /// How long an idempotent write's response is kept for replay.
    pub(crate) fn idempotency_ttl(&self) -> Duration {
        self.idempotency_ttl
    }

    /// The time now: never earlier than a time this writer already used, so that events,
    /// entries, expiries and idempotency records stay in order when the clock steps back.
    pub(crate) fn now(&mut self) -> Timestamp {
        self.last_now = self.last_now.max(self.clock.now());
        self.last_now
    }

    /// The time as the writes will see it (see [`WriterState::now`]), without recording it.
    pub(crate) fn clock_now(&self) -> Timestamp {
        self.last_now.max(self.clock.now())
    }

    /// A new ULID for an id of any kind.
    pub(crate) fn next_ulid(&mut self, now: Timestamp) -> ulid::Ulid {
        self.ids().next(now.unix_ms())
    }

    /// Takes `tenant`'s row lock for the rest of the batch where writers share the database
    /// ([`Sql::SHARED`]), without waiting: a lock another writer holds fails the command
    /// [`StoreError::Busy`] (its savepoint is rolled back, and it is sent again). Every write
    /// under a tenant takes it before it reads, so a tenant's writes run one after the other
    /// whatever the instance, while other tenants' go on. The ids made after it sort after
    /// the last id the tenant's writes made, and the clock does not go back before that id's
    /// instant, so a budget's entries sort, and are dated, in the order they were made;
    /// [`WriterState::take_locked`] gives the tenants whose last id is to be stored.
    /// SQLite's one writer orders everything: there it does nothing.
    pub(crate) fn lock_tenant(&mut self, tenant: &TenantId) -> Result<(), StoreError> {
        if !D::SHARED || self.locked.contains(tenant) {
            return Ok(());
        }
        if self.ahead.busy(tenant) {
            return Err(StoreError::Busy(
                "the tenant's row is another writer's".into(),
            ));
        }
        let last = self.db.query_opt(
            "SELECT last_id FROM tenants WHERE id = ?1 FOR NO KEY UPDATE NOWAIT",
            &[tenant.as_str().into()],
            |row| last_id(row, 0),
        )?;
        // A tenant that does not exist takes no lock; the command finds it missing.
        if let Some(last) = last {
            self.hold_locked(tenant, last);
        }
        Ok(())
    }

    /// `tenant`'s row lock is the batch's, and `last` the last id its writes made.
    pub(crate) fn hold_locked(&mut self, tenant: &TenantId, last: Option<ulid::Ulid>) {
        if self.locked.contains(tenant) {
            return;
        }
        self.locked.push(tenant.clone());
        if let Some(last) = last {
            self.ids().skip_past(Some(last));
            self.last_now = self
                .last_now
                .max(Timestamp::from_unix_ms(last.timestamp_ms()));
        }
    }

    /// Begins the open batch on what the writer knows in place of a read ahead, where it
    /// knows all that `wanted` reads first ([`Known::guard`]) and no sweep is due: the
    /// guard's tenants are held as locked, and their budgets and credentials are the batch's.
    /// The guard is the caller's to send.
    pub(crate) fn guard_known(&mut self, wanted: &[Wanted<'_>]) -> Option<Guard> {
        if !(D::SHARED && self.ahead.deferred()) || self.sweep_due() {
            return None;
        }
        let guard = self.known.guard(wanted, Instant::now())?;
        for (tenant, _, last) in &guard.tenants {
            self.hold_locked(tenant, *last);
        }
        if let Some((enabled, versions)) = &guard.endpoints {
            self.subscribers = Some(enabled.clone());
            self.endpoints_digest = Some(versions.clone());
        }
        self.ahead.keep_known(&guard);
        Some(guard)
    }

    /// After the open batch committed as transaction `xid`, having locked `locked` and stored
    /// `last` as their last id: what it wrote is known ([`Known::remember`]).
    pub(crate) fn remember(&mut self, xid: i64, locked: &[TenantId], last: Option<ulid::Ulid>) {
        self.known.stored(locked, last);
        match self.ahead.written() {
            Some(written) => self.known.remember(xid, locked, last, written),
            None => self.known.forget(locked),
        }
        // The endpoints read ahead, if no command of the batch changed them since (one that
        // does forgets them).
        match (&self.subscribers, self.endpoints_digest.take()) {
            (Some(enabled), Some(versions)) => {
                self.known.remember_endpoints(enabled.clone(), versions);
            }
            (None, Some(_)) => self.known.forget_endpoints(),
            _ => {}
        }
    }

    /// Forgets `tenants`, and guards none of them for a while: a guard of theirs failed
    /// ([`Known::doubt`]).
    pub(crate) fn doubt(&mut self, tenants: &[TenantId]) {
        self.known.doubt(tenants, Instant::now());
        // The guard that failed may have been the endpoints'.
        self.known.forget_endpoints();
    }

    /// Forgets what is known of `tenants`: a batch of theirs did not commit.
    pub(crate) fn forget_known(&mut self, tenants: &[TenantId]) {
        self.known.forget(tenants);
    }

    /// Begins a batch's reading ahead ([`Ahead::begin`]).
    pub(crate) fn begin_ahead(&mut self) {
        // A batch begins holding no lock: the one before committed or rolled back.
        self.locked.clear();
        self.ahead.begin(D::SHARED);
        // Nothing a batch that failed kept outlives it.
        self.unwritten.stop();
    }

    /// Runs `first` and reads `wanted` ahead in one round trip ([`ahead::read`]); the first
    /// column of `first`'s rows.
    pub(crate) fn read_ahead(
        &mut self,
        first: &str,
        wanted: &[Wanted<'_>],
    ) -> Result<Vec<String>, StoreError> {
        let mut read = ahead::read(&mut self.db, D::SHARED, first, wanted)?;
        let now = Instant::now();
        for (tenant, last) in &read.locked {
            self.hold_locked(tenant, *last);
            self.known.observe(tenant, *last, now);
        }
        let firsts = std::mem::take(&mut read.firsts);
        if let Some(subscribers) = read.subscribers.take() {
            self.subscribers = Some(subscribers);
            self.endpoints_digest = read.endpoints_digest.take();
        }
        self.ahead.keep_read(read);
        Ok(firsts)
    }

    /// The budget `id` of `tenant` as read ahead ([`Ahead::take`]).
    pub(crate) fn take_budget_ahead(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
    ) -> Option<(Budget, bool)> {
        self.ahead.take(tenant, id)
    }

    /// Reservation `id` of `tenant` as read ahead ([`Ahead::take_reservation`]).
    pub(crate) fn take_reservation_ahead(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Option<Reservation> {
        self.ahead.take_reservation(tenant, id)
    }

    /// Forgets reservation `id` as read ahead: it is being written.
    pub(crate) fn forget_reservation_ahead(&mut self, id: &ReservationId) {
        self.ahead.forget_reservation(id);
    }

    /// Forgets the budgets and reservations read ahead of `tenant` (of every tenant for
    /// `None`): a command or a sweep may change them otherwise than the read-ahead knows.
    pub(crate) fn forget_ahead(&mut self, tenant: Option<&TenantId>) {
        self.ahead.forget(tenant);
    }

    /// Forgets what `tenant`'s token was read ahead to be checked against
    /// ([`Ahead::forget_credential`]).
    pub(crate) fn forget_credential(&mut self, tenant: &TenantId) {
        self.ahead.forget_credential(tenant);
    }

    /// The batch committed on SQLite: the next begins with the budgets it left
    /// ([`Ahead::carry`]).
    pub(crate) fn carry_ahead(&mut self) {
        self.ahead.carry();
    }

    /// Whether the batch begins with budgets carried from the one before
    /// ([`Ahead::carry`]).
    pub(crate) fn carries_budgets(&self) -> bool {
        self.ahead.holds_budgets()
    }

    /// What a command leaves of `budget` for the next of its batch ([`Ahead::keep`]).
    pub(crate) fn keep_budget(&mut self, budget: Budget) {
        self.ahead.keep(budget);
    }

    /// The error that fails a batch whose deferred writes failed ([`Ahead::failure`]).
    pub(crate) fn deferred_failure(&mut self, error: Option<&StoreError>) -> Option<StoreError> {
        let sent_failed = self.db.take_send_failure();
        self.ahead.failure(sent_failed, error)
    }

    /// A tenant the open batch created: its row is the batch's own, as if locked, and its
    /// last id is stored with the others' ([`WriterState::take_locked`]).
    pub(crate) fn hold_new_tenant(&mut self, tenant: &TenantId) {
        if D::SHARED {
            self.locked.push(tenant.clone());
        }
    }

    /// The tenants whose locks the batch took, and the last id made: what the batch stores as
    /// each one's `last_id` before it commits. The list starts again empty.
    pub(crate) fn take_locked(&mut self) -> (Vec<TenantId>, Option<ulid::Ulid>) {
        let last = self.ids().last();
        (std::mem::take(&mut self.locked), last)
    }

    /// Forgets the enabled endpoints: another writer may have changed them.
    pub(crate) fn forget_subscribers(&mut self) {
        self.subscribers = None;
        self.endpoints_digest = None;
    }

    /// The enabled endpoints as last read, if they may not have changed since.
    pub(crate) fn subscribers(&mut self) -> &mut Option<Vec<Subscriber>> {
        &mut self.subscribers
    }

    /// No active reservation expires before this instant, as far as this writer knows.
    pub(crate) fn next_expiry(&self) -> Timestamp {
        self.next_expiry
    }

    /// A hold that expires at `at` exists now (a new one, an extend, or another instance's).
    pub(crate) fn lower_next_expiry(&mut self, at: Timestamp) {
        self.next_expiry = self.next_expiry.min(at);
    }

    /// The soonest expiry as read from the database ([`Timestamp::MAX`]: none).
    pub(crate) fn set_next_expiry(&mut self, at: Timestamp) {
        self.next_expiry = at;
    }

    /// No open budget's period ends before this instant, as far as this writer knows.
    pub(crate) fn next_boundary(&self) -> Timestamp {
        self.next_boundary
    }

    /// A period that ends at `at` exists now (a new one, or another instance's).
    pub(crate) fn lower_next_boundary(&mut self, at: Timestamp) {
        self.next_boundary = self.next_boundary.min(at);
    }

    /// The soonest boundary as read from the database ([`Timestamp::MAX`]: none).
    pub(crate) fn set_next_boundary(&mut self, at: Timestamp) {
        self.next_boundary = at;
    }

    /// Whether what fell due on a tenant's budgets is being recorded in time order.
    pub(crate) fn recording_due(&self) -> bool {
        self.recording_due
    }

    /// Begins (`true`) or ends recording in time order what fell due on a tenant's budgets.
    pub(crate) fn set_recording_due(&mut self, recording: bool) {
        self.recording_due = recording;
    }

    /// A sweep could not record every expiry: the next is tried after a pause.
    pub(crate) fn retry_sweep_later(&mut self, after: Duration) {
        self.sweep_retry_at = Some(Instant::now() + after);
    }

    /// A sweep recorded every expiry it found.
    pub(crate) fn sweep_succeeded(&mut self) {
        self.sweep_retry_at = None;
    }

    /// Whether a reservation may have expired, or a period ended, without it being
    /// recorded, and a sweep may run now.
    pub(crate) fn sweep_due(&self) -> bool {
        self.next_due() <= self.clock_now()
            && self.sweep_retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// The soonest instant something may fall due: an expiry or a boundary.
    fn next_due(&self) -> Timestamp {
        self.next_expiry.min(self.next_boundary)
    }

    /// Marks the open transaction as one the batch must not commit (the tests' fault hook).
    #[cfg(test)]
    pub(crate) fn poison(&mut self, error: StoreError) {
        self.poisoned = Some(error);
    }

    /// An operation run without [`WriterState::guarded`] ended (well or not): what it kept of
    /// the budgets it wrote is kept for the next, or dropped.
    pub(crate) fn command_ended(&mut self, well: bool) {
        self.ahead.command_ended(well);
    }

    /// The error that poisoned the open transaction, if any.
    pub(crate) fn poisoned(&self) -> Option<&StoreError> {
        self.poisoned.as_ref()
    }

    /// The error that poisoned the open transaction, if any; cleared.
    pub(crate) fn take_poisoned(&mut self) -> Option<StoreError> {
        self.poisoned.take()
    }

    /// What the batch changed; the count starts again from nothing.
    pub(crate) fn take_counts(&mut self) -> Delta {
        std::mem::take(&mut self.delta)
    }

    /// What a failed command or batch must put back.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            head: self.head.clone(),
            delta: self.delta.clone(),
            locked: self.locked.len(),
            next_expiry: self.next_expiry,
            next_boundary: self.next_boundary,
            unwritten: self.unwritten.mark(),
        }
    }

    /// Puts back what `snapshot` holds: what a command appended, counted or expired is
    /// rolled back with it.
    pub(crate) fn restore(&mut self, snapshot: Snapshot) {
        let Snapshot {
            head,
            delta,
            locked,
            next_expiry,
            next_boundary,
            unwritten,
        } = snapshot;
        self.head = head;
        self.delta = delta;
        // A savepoint rolled back releases the row locks taken after it.
        self.locked.truncate(locked);
        self.next_expiry = next_expiry;
        self.next_boundary = next_boundary;
        self.unwritten.undo_to(unwritten);
        // What the command read of the endpoints may have been rolled back with it.
        self.subscribers = None;
        // A command that failed, or panicked, while it recorded what fell due has stopped
        // recording: the budgets after it are caught up again.
        self.recording_due = false;
    }

    /// After a batch that did not commit: the head and counts as they were, and the soonest
    /// expiry unknown (what the batch did to it is not), so the next batch reads it again.
    pub(crate) fn restore_after_failed_batch(&mut self, snapshot: Snapshot) {
        self.restore(snapshot);
        // The transaction is over: no lock of the batch is held any more, those taken as it
        // began included. A tenant left on the list would let the next batch write it
        // without its lock ([`WriterState::lock_tenant`]).
        self.locked.clear();
        self.next_expiry = Timestamp::from_unix_ms(0);
        self.next_boundary = Timestamp::from_unix_ms(0);
    }

    /// Waits for a command, or (with the system clock) until the soonest reservation expires,
    /// whichever comes first. `Err` when every sender is gone.
    /// A wait lasts at most [`WAKE_INTERVAL_MAX`] and is then computed again, since the
    /// monotonic clock it sleeps on does not follow a step of the system clock (or a pause of
    /// the machine).
    pub(crate) fn wait<J: ?Sized>(
        &self,
        queue: &flume::Receiver<WriteCommand<J>>,
    ) -> Result<Option<WriteCommand<J>>, ()> {
        if !self.clock.wakes() || self.next_due() == Timestamp::MAX {
            return queue.recv().map(Some).map_err(|_| ());
        }
        let wait_ms = self
            .next_due()
            .unix_ms()
            .saturating_sub(self.clock_now().unix_ms());
        let wait = Duration::from_millis(wait_ms).min(WAKE_INTERVAL_MAX);
        let mut deadline = Instant::now() + wait;
        if let Some(retry_at) = self.sweep_retry_at {
            deadline = deadline.max(retry_at);
        }
        match queue.recv_deadline(deadline) {
            Ok(command) => Ok(Some(command)),
            Err(flume::RecvTimeoutError::Timeout) => Ok(None),
            Err(flume::RecvTimeoutError::Disconnected) => Err(()),
        }
    }

    /// The fault hook of the tests: the next `ROLLBACK` fails without rolling back.
    #[cfg(test)]
    pub(crate) fn fail_next_rollback(&mut self) {
        self.fail_next_rollback = true;
    }

    /// Whether the next `ROLLBACK` is to fail; cleared.
    #[cfg(test)]
    pub(crate) fn take_fail_next_rollback(&mut self) -> bool {
        std::mem::take(&mut self.fail_next_rollback)
    }
}
