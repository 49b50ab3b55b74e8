//! The store's threads, alike for every backend: one writer that group-commits typed
//! commands, reader threads that answer reads beside it, and a credential thread with a
//! queue of its own for tenant-token checks, so that no flood of reads can starve
//! authentication. Every command is answered on its own oneshot channel, and no database call
//! runs on the async runtime.
//!
//! A backend supplies the writers' loops (SQLite one; PostgreSQL several, whose writes of
//! one tenant all go to one of them: [`Writes`]) and one connection for each reader
//! ([`Reads`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

use super::durability::Durability;
use super::queries::reads::{Reads, answer_credentials};
use super::queries::webhooks::{Due, Sending};
use super::write::stats::Stats;
use super::write::{Reply, WriteCommand, WriteOp};
use super::{
    CREDENTIAL_WAIT_MAX, Command, Credential, ListQuery, OpenError, Page, SETTLE_WAIT_MAX,
    StoreConfig, StoreError, StoreGauges, run_guarded,
};
use crate::domain::{
    Budget, BudgetId, Delivery, Endpoint, EndpointId, EntryId, Event, EventId, LedgerEntry,
    Reservation, ReservationId, Statement, Tenant, TenantId, Timestamp,
};

/// The first pause before a write that found its rows busy is sent again.
const BUSY_PAUSE_MIN: Duration = Duration::from_millis(2);

/// The longest pause between two tries of a busy write.
const BUSY_PAUSE_MAX: Duration = Duration::from_millis(100);

/// How long a write whose rows stay busy is tried before it is answered `503`: a row held by
/// another writer of the database is held for one batch, but a session outside the service
/// may hold it longer.
const BUSY_WAIT_MAX: Duration = Duration::from_secs(10);

/// A cheap, cloneable handle to the store: typed commands to its threads, answered on
/// oneshot channels.
#[derive(Clone)]
pub(crate) struct Store {
    writes: Writes,
    reads: flume::Sender<ReadCommand>,
    credentials: flume::Sender<ReadCommand>,
    stats: Arc<Stats>,
    /// Where commits become visible before they are durable: what a read waits for.
    durability: Option<Arc<Durability>>,
    /// Whether a write may find its rows busy ([`StoreError::Busy`]) and be sent again:
    /// where writers share the database. Elsewhere a write is sent as it is, never cloned.
    retries_busy: bool,
}

/// Owns the store's threads; [`StoreThreads::shutdown`] drains and joins them.
pub(crate) struct StoreThreads {
    writers: Vec<JoinHandle<()>>,
    writes: Writes,
    readers: Vec<JoinHandle<()>>,
    reads: flume::Sender<ReadCommand>,
    /// The credential threads, on a queue of their own.
    checkers: Vec<JoinHandle<()>>,
    credentials: flume::Sender<ReadCommand>,
}

/// A writer's loop, run on a thread of its own and fed by its write queue.
pub(crate) type WriterLoop = Box<dyn FnOnce(&flume::Receiver<Command>) + Send>;

/// The write queues, one a writer: a tenant's writes go to the queue its id hashes to, so an
/// instance's writes of one tenant never contend with one another; the rest are spread in
/// turn.
#[derive(Clone)]
struct Writes {
    queues: Arc<[flume::Sender<Command>]>,
    turn: Arc<std::sync::atomic::AtomicUsize>,
}

impl Writes {
    /// The queue for a write under `tenant` (any, in turn, for none).
    fn queue(&self, tenant: Option<&TenantId>) -> &flume::Sender<Command> {
        let n = self.queues.len();
        let i = match tenant {
            _ if n == 1 => 0,
            Some(tenant) => {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                tenant.as_str().hash(&mut hasher);
                (hasher.finish() % n as u64) as usize
            }
            None => self.turn.fetch_add(1, Ordering::Relaxed) % n,
        };
        &self.queues[i]
    }

    /// Commands waiting in every queue.
    fn len(&self) -> usize {
        self.queues.iter().map(flume::Sender::len).sum()
    }
}

/// Starts each of `writers` on a thread of its own, fed by a write queue of its own, a reader
/// thread on each of `readers`, and a credential thread on each of `credentials`, which share
/// a queue of their own. With `durability`, a read is answered once every commit it may have
/// seen is durable.
pub(crate) fn start(
    config: &StoreConfig,
    stats: Arc<Stats>,
    writers: Vec<WriterLoop>,
    readers: Vec<Box<dyn Reads>>,
    credentials: Vec<Box<dyn Reads>>,
    durability: Option<Arc<Durability>>,
    retries_busy: bool,
) -> Result<(Store, StoreThreads), OpenError> {
    assert!(
        config.queue_depth > 0
            && config.credential_queue_depth > 0
            && config.commit_batch_max > 0
            && !readers.is_empty()
            && !credentials.is_empty()
            && !writers.is_empty(),
        "store bounds must be positive: {config:?}"
    );
    let spawn_error = |e: std::io::Error| OpenError(format!("cannot start a thread: {e}"));

    let (read_tx, read_rx) = flume::bounded(config.queue_depth);
    let (credential_tx, credential_rx) = flume::bounded(config.credential_queue_depth);
    let spawn_readers = |conns: Vec<Box<dyn Reads>>,
                         queue: &flume::Receiver<ReadCommand>,
                         name: fn(usize) -> String| {
        conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                let queue = queue.clone();
                std::thread::Builder::new()
                    .name(name(i))
                    .spawn(move || read(conn.as_mut(), &queue))
                    .map_err(spawn_error)
            })
            .collect::<Result<Vec<_>, OpenError>>()
    };
    let threads = spawn_readers(readers, &read_rx, |i| format!("tenantd-read-{i}"))?;
    let checkers = spawn_readers(credentials, &credential_rx, |i| match i {
        0 => "tenantd-credentials".to_owned(),
        i => format!("tenantd-credentials-{i}"),
    })?;

    let mut queues = Vec::with_capacity(writers.len());
    let mut handles = Vec::with_capacity(writers.len());
    for (i, writer) in writers.into_iter().enumerate() {
        let (write_tx, write_rx) = flume::bounded(config.queue_depth);
        let name = if i == 0 {
            "tenantd-write".to_owned()
        } else {
            format!("tenantd-write-{i}")
        };
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || writer(&write_rx))
            .map_err(spawn_error)?;
        queues.push(write_tx);
        handles.push(handle);
    }
    let write_tx = Writes {
        queues: queues.into(),
        turn: Arc::default(),
    };
    let threads = StoreThreads {
        writers: handles,
        writes: write_tx.clone(),
        readers: threads,
        reads: read_tx.clone(),
        checkers,
        credentials: credential_tx.clone(),
    };
    let handle = Store {
        writes: write_tx,
        reads: read_tx,
        credentials: credential_tx,
        stats,
        durability,
        retries_busy,
    };
    Ok((handle, threads))
}

impl Store {
    /// Figures for `/metrics`.
    pub(crate) fn gauges(&self) -> StoreGauges {
        let stats = &self.stats;
        let queued = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        StoreGauges {
            tenants: stats.tenants.each_ref().map(|c| c.load(Ordering::Relaxed)),
            budgets: stats.budgets.each_ref().map(|c| c.load(Ordering::Relaxed)),
            reservations: stats
                .reservations
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
            entries: stats.entries.each_ref().map(|c| c.load(Ordering::Relaxed)),
            events_written: stats
                .events_written
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
            deliveries: stats
                .deliveries
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
            audit_events: stats.audit_events.load(Ordering::Relaxed),
            chain_delays: stats
                .chain_delays
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
            chain_delay_sum_ms: stats.chain_delay_sum_ms.load(Ordering::Relaxed),
            chain_delay_max_ms: stats.chain_delay_max_ms.load(Ordering::Relaxed),
            chain_lag_ms: stats.chain_lag_ms.load(Ordering::Relaxed),
            batches: stats.batches.load(Ordering::Relaxed),
            commands: stats.commands.load(Ordering::Relaxed),
            batches_guarded: stats.batches_guarded.load(Ordering::Relaxed),
            wal_frames: stats.wal_frames.load(Ordering::Relaxed),
            writes_queued: queued(self.writes.len()),
            reads_queued: queued(self.reads.len()),
            credentials_queued: queued(self.credentials.len()),
        }
    }

    /// Runs a write operation in the writer's next batch and waits for its answer, which
    /// comes once the batch is committed (and durable).
    ///
    /// An operation that found a row it needs held by another writer ([`StoreError::Busy`]:
    /// nothing of it was done) is sent again after a pause that doubles from
    /// [`BUSY_PAUSE_MIN`] to [`BUSY_PAUSE_MAX`], for [`BUSY_WAIT_MAX`] in all; then it is
    /// answered [`StoreError::Unavailable`] (a `503`).
    pub(crate) async fn write<O: WriteOp>(&self, op: O) -> Result<O::Output, StoreError> {
        let queue = self.writes.queue(op.tenant());
        if !self.retries_busy {
            return ask(queue, |reply| WriteCommand::op(op, reply)).await;
        }
        let started = tokio::time::Instant::now();
        let mut pause = BUSY_PAUSE_MIN;
        loop {
            let again = op.clone();
            match ask(queue, |reply| WriteCommand::op(again, reply)).await {
                Err(StoreError::Busy(cause)) => {
                    if started.elapsed() + pause > BUSY_WAIT_MAX {
                        return Err(StoreError::Unavailable(format!(
                            "still busy after {BUSY_WAIT_MAX:?}: {cause}"
                        )));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(BUSY_PAUSE_MAX);
                }
                answer => return answer,
            }
        }
    }

    /// Whether a tenant token may be checked by the write it comes with ([`Store::write_checked`]):
    /// where writers share the database, and a check alone is a round trip of its own.
    pub(crate) fn checks_tokens_with_writes(&self) -> bool {
        self.retries_busy
    }

    async fn read<T>(
        &self,
        command: impl FnOnce(Reply<T>) -> ReadCommand,
    ) -> Result<T, StoreError> {
        let answer = ask(&self.reads, command).await;
        if let Some(durability) = &self.durability
            && !durability.settled(SETTLE_WAIT_MAX).await
        {
            return Err(StoreError::Unavailable(
                "a write this read may show is not durable yet".into(),
            ));
        }
        answer
    }

    /// Succeeds when a write could begin now: the readiness probe.
    pub(crate) async fn check_writable(&self) -> Result<(), StoreError> {
        // The first writer's: it sweeps what fell due first, so ready means swept.
        ask(&self.writes.queues[0], WriteCommand::CheckWritable).await
    }

    /// Runs `query` on a reader and waits for its answer.
    async fn query<T: Send + 'static>(
        &self,
        query: impl FnOnce(&mut dyn Reads) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.read(|reply: Reply<T>| {
            ReadCommand::Query(Box::new(move |conn| {
                let _ = reply.send(run_guarded(|| query(conn)));
            }))
        })
        .await
    }

    /// Reads a budget of a tenant.
    pub(crate) async fn budget(
        &self,
        tenant: TenantId,
        id: Option<BudgetId>,
    ) -> Result<Budget, StoreError> {
        self.query(move |conn| conn.budget(&tenant, id.as_ref()))
            .await
    }

    /// Reads a reservation of a tenant.
    pub(crate) async fn reservation(
        &self,
        tenant: TenantId,
        id: Option<ReservationId>,
    ) -> Result<Reservation, StoreError> {
        self.query(move |conn| conn.reservation(&tenant, id.as_ref()))
            .await
    }

    /// A page of tenants.
    pub(crate) async fn list_tenants(&self, query: ListQuery) -> Result<Page<Tenant>, StoreError> {
        self.query(move |conn| conn.list_tenants(&query)).await
    }

    /// A page of a tenant's budgets.
    pub(crate) async fn list_budgets(
        &self,
        tenant: TenantId,
        query: ListQuery,
    ) -> Result<Page<Budget>, StoreError> {
        self.query(move |conn| conn.list_budgets(&tenant, &query))
            .await
    }

    /// A page of a budget's ledger entries.
    pub(crate) async fn list_entries(
        &self,
        tenant: TenantId,
        budget: Option<BudgetId>,
        query: ListQuery,
    ) -> Result<Page<LedgerEntry>, StoreError> {
        self.query(move |conn| conn.list_entries(&tenant, budget.as_ref(), &query))
            .await
    }

    /// One ledger entry of a budget.
    pub(crate) async fn entry(
        &self,
        tenant: TenantId,
        budget: Option<BudgetId>,
        id: Option<EntryId>,
    ) -> Result<LedgerEntry, StoreError> {
        self.query(move |conn| conn.entry(&tenant, budget.as_ref(), id.as_ref()))
            .await
    }

    /// A page of events (of every tenant, or the query's).
    pub(crate) async fn list_events(&self, query: ListQuery) -> Result<Page<Event>, StoreError> {
        self.query(move |conn| conn.list_events(&query)).await
    }

    /// A page of a tenant's events.
    pub(crate) async fn list_tenant_events(
        &self,
        tenant: TenantId,
        query: ListQuery,
    ) -> Result<Page<Event>, StoreError> {
        self.query(move |conn| conn.list_tenant_events(&tenant, &query))
            .await
    }

    /// One event.
    pub(crate) async fn event(&self, id: Option<EventId>) -> Result<Event, StoreError> {
        self.query(move |conn| conn.event(id.as_ref())).await
    }

    /// One webhook endpoint (not a deleted one).
    pub(crate) async fn endpoint(&self, id: Option<EndpointId>) -> Result<Endpoint, StoreError> {
        self.query(move |conn| conn.endpoint(id.as_ref())).await
    }

    /// The endpoints `owner` sends to, and whether one is held by no one.
    pub(crate) async fn sending(
        &self,
        owner: std::sync::Arc<str>,
        now: Timestamp,
    ) -> Result<(Vec<Sending>, bool), StoreError> {
        self.query(move |conn| conn.sending(&owner, now)).await
    }

    /// Up to `limit` deliveries of `endpoint` due at `now`, with their events.
    pub(crate) async fn due_deliveries(
        &self,
        endpoint: EndpointId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        self.query(move |conn| conn.due_deliveries(&endpoint, now, limit))
            .await
    }

    /// How long the oldest pending delivery has waited at `now`.
    pub(crate) async fn oldest_pending(
        &self,
        now: Timestamp,
    ) -> Result<Option<std::time::Duration>, StoreError> {
        self.query(move |conn| conn.oldest_pending(now)).await
    }

    /// A page of webhook endpoints.
    pub(crate) async fn list_endpoints(
        &self,
        query: ListQuery,
    ) -> Result<Page<Endpoint>, StoreError> {
        self.query(move |conn| conn.list_endpoints(&query)).await
    }

    /// A page of an endpoint's deliveries.
    pub(crate) async fn list_deliveries(
        &self,
        endpoint: Option<EndpointId>,
        query: ListQuery,
    ) -> Result<Page<Delivery>, StoreError> {
        self.query(move |conn| conn.list_deliveries(endpoint.as_ref(), &query))
            .await
    }

    /// A page of a budget's period statements, with the budget.
    pub(crate) async fn list_periods(
        &self,
        tenant: TenantId,
        budget: Option<BudgetId>,
        query: ListQuery,
    ) -> Result<(Budget, Page<Statement>), StoreError> {
        self.query(move |conn| conn.list_periods(&tenant, budget.as_ref(), &query))
            .await
    }

    /// A page of a tenant's reservations.
    pub(crate) async fn list_reservations(
        &self,
        tenant: TenantId,
        query: ListQuery,
    ) -> Result<Page<Reservation>, StoreError> {
        self.query(move |conn| conn.list_reservations(&tenant, &query))
            .await
    }

    /// Reads a tenant.
    pub(crate) async fn tenant(&self, id: TenantId) -> Result<Tenant, StoreError> {
        self.read(|reply| ReadCommand::Tenant(id, reply)).await
    }

    /// What a token of tenant `id` must match, on the credential path; `None` for no such
    /// tenant. Nothing is cached: a tombstone through any instance revokes at once.
    pub(crate) async fn credential(&self, id: TenantId) -> Result<Option<Credential>, StoreError> {
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

impl StoreThreads {
    /// Stops the readers and the credential thread, then lets the writer finish every queued
    /// command, checkpoint the WAL (with no reader in its way) and exit.
    pub(crate) async fn shutdown(self) -> Result<(), String> {
        let StoreThreads {
            writers,
            writes,
            readers,
            reads,
            checkers,
            credentials,
        } = self;
        let readers_stopped = tokio::task::spawn_blocking(move || {
            // Each thread ends at the first marker it takes, after the commands queued before
            // it; the credential threads have a queue of their own.
            for _ in &readers {
                let _ = reads.send(ReadCommand::Shutdown);
            }
            for _ in &checkers {
                let _ = credentials.send(ReadCommand::Shutdown);
            }
            // Join every thread, even after one that failed: `count` consumes them all.
            let failed = readers
                .into_iter()
                .chain(checkers)
                .map(JoinHandle::join)
                .filter(Result::is_err)
                .count();
            failed == 0
        });
        let readers_ok = readers_stopped.await.unwrap_or(false);
        // `send_async` waits for room, so the marker queues behind every accepted command.
        let mut writer_reached = true;
        for queue in writes.queues.iter() {
            writer_reached &= queue.send_async(WriteCommand::Shutdown).await.is_ok();
        }
        let writer_ok = matches!(
            tokio::task::spawn_blocking(move || {
                writers
                    .into_iter()
                    .map(JoinHandle::join)
                    .filter(Result::is_err)
                    .count()
            })
            .await,
            Ok(0)
        );
        if readers_ok && writer_reached && writer_ok {
            Ok(())
        } else {
            Err("a store thread had stopped abnormally".into())
        }
    }
}

/// A read to run on a reader's connection; it sends its own answer.
pub(crate) type Query = Box<dyn FnOnce(&mut dyn Reads) + Send>;

/// The commands a reader answers.
pub(crate) enum ReadCommand {
    /// A tenant by id.
    Tenant(TenantId, Reply<Tenant>),
    /// Any other read.
    Query(Query),
    /// What a token of this tenant must match.
    Credential(TenantId, Reply<Option<Credential>>),
    /// Ends the thread that takes it.
    Shutdown,
}

/// Token checks one credential thread answers together, at most: those already queued when
/// it takes one, in one statement and one round trip on PostgreSQL (on SQLite, whose checks
/// are reads in the process, each is answered as it comes).
const CREDENTIAL_BATCH_MAX: usize = 64;

/// Answers read commands until it takes a `Shutdown` or every sender is gone. The channel
/// hands each command to the first free thread; a thread that takes a token check takes the
/// checks queued behind it too ([`CREDENTIAL_BATCH_MAX`]).
fn read(conn: &mut dyn Reads, queue: &flume::Receiver<ReadCommand>) {
    let mut next = None;
    let together = if conn.checks_together() {
        CREDENTIAL_BATCH_MAX
    } else {
        1
    };
    while let Some(command) = next.take().or_else(|| queue.recv().ok()) {
        match command {
            ReadCommand::Tenant(id, reply) => {
                let result = run_guarded(|| conn.tenant(&id));
                let _ = reply.send(result);
            }
            ReadCommand::Query(query) => query(conn),
            ReadCommand::Credential(id, reply) => {
                let mut checks = vec![(id, reply)];
                while checks.len() < together && next.is_none() {
                    match queue.try_recv() {
                        Ok(ReadCommand::Credential(id, reply)) => checks.push((id, reply)),
                        Ok(other) => next = Some(other),
                        Err(_) => break,
                    }
                }
                answer_credentials(conn, checks);
            }
            ReadCommand::Shutdown => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::audit::Actor;
    use crate::domain::{Atomic, Name, NewTenant};
    use crate::store::Written;
    use crate::store::ops::CreateTenant;

    fn create(name: &str) -> CreateTenant {
        CreateTenant {
            tenant: NewTenant {
                name: Name::parse(name).expect("a name"),
                opening_deposit: Atomic::new(1),
                policy: None,
                thresholds: crate::domain::Thresholds::default(),
            },
            actor: Actor::Admin,
            keyed: None,
        }
    }

    /// While a commit waits for its sync, neither its own answer nor a read made meanwhile
    /// (which may see it) leaves; both do once the sync has run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_is_answered_before_the_commit_it_may_show_is_durable() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (store, threads) =
            Store::open(StoreConfig::for_tests(dir.path().join("t.db"))).expect("the store opens");
        let Ok(Written::Fresh(first)) = store.write(create("first")).await else {
            panic!("the first create");
        };
        let durability = Arc::clone(store.durability.as_ref().expect("SQLite syncs apart"));
        durability.hold.store(true, Ordering::SeqCst);
        // Batches so far: the first create's, and a sweep's at start-up if it came apart.
        let batches = store.gauges().batches;

        let second = tokio::spawn({
            let store = store.clone();
            async move { store.write(create("second")).await }
        });
        // The second create commits, then waits for its sync.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.gauges().batches <= batches {
            assert!(
                std::time::Instant::now() < deadline,
                "the second batch commits"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let read = tokio::spawn({
            let store = store.clone();
            let id = first.tenant.id.clone();
            async move { store.tenant(id).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !second.is_finished(),
            "a write is answered only once durable"
        );
        assert!(
            !read.is_finished(),
            "a read waits for the commits it may show"
        );

        durability.hold.store(false, Ordering::SeqCst);
        let wait = Duration::from_secs(10);
        let second = tokio::time::timeout(wait, second).await.expect("answered");
        assert!(matches!(second, Ok(Ok(Written::Fresh(_)))), "{second:?}");
        let read = tokio::time::timeout(wait, read).await.expect("answered");
        assert_eq!(
            read.expect("the task").expect("the tenant").id,
            first.tenant.id
        );
        threads.shutdown().await.expect("a clean shutdown");
    }
}
