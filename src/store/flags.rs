//! The store's flags (its queues, threads and how long it keeps what it keeps), flattened
//! into `serve`'s command line, and the [`StoreSettings`] they make.

use std::time::Duration;

use clap::Args;
use clap::builder::RangedU64ValueParser;

use super::{
    COMMIT_BATCH_MAX_DEFAULT, EVENT_RETENTION_DAYS_DEFAULT, EVENT_RETENTION_DAYS_MAX,
    IDEMPOTENCY_TTL_MAX, PG_WRITERS_DEFAULT, PG_WRITERS_MAX, QUEUE_DEPTH_DEFAULT, readers_default,
};

/// The seconds in a day, for `--event-retention`, which counts days.
const DAY_SECS: u64 = 86_400;

/// The store's settings as its flags give them, checked and in the store's units: what
/// `serve` opens the store with, and how long its events are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreSettings {
    /// Writes committed in one transaction, at most.
    pub(crate) commit_batch_max: usize,
    /// Store commands that may wait, per queue.
    pub(crate) queue_depth: usize,
    /// Threads answering reads.
    pub(crate) readers: usize,
    /// Writer connections on PostgreSQL.
    pub(crate) pg_writers: usize,
    /// Tenant-token checks that may wait for the credential lookup.
    pub(crate) credential_queue_depth: usize,
    /// How long an `Idempotency-Key` replays its first answer.
    pub(crate) idempotency_ttl: Duration,
    /// How long an event is kept before it is erased.
    pub(crate) event_retention: Duration,
}

/// The store's flags as clap reads them; the fields' names are clap's ids.
#[derive(Args, Debug)]
pub(crate) struct StoreArgs {
    /// Writes committed in one transaction, at most (1 to 4096)
    ///
    /// More spread one fsync over more writes; fewer bound the wait of the first write in a
    /// batch.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = COMMIT_BATCH_MAX_DEFAULT,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096)
    )]
    commit_batch_max: usize,

    /// Store commands that may wait, per queue (1 to 1000000)
    ///
    /// Beyond it, a request is answered 503 instead of memory growing.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = QUEUE_DEPTH_DEFAULT,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000)
    )]
    store_queue_depth: usize,

    /// Threads answering reads (1 to 64; by default one per core, at most 4)
    ///
    /// Each has its own read-only connection, so reads do not wait behind writes.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = readers_default(),
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=64)
    )]
    readers: usize,

    /// Writer connections of this instance on PostgreSQL (1 to 16; SQLite has one writer)
    ///
    /// A tenant's writes all go to one of them. More let one batch's round trips overlap
    /// another's, which hides a database across a network; fewer make larger batches, each
    /// cheaper for the database. Where several instances share one database, 1 each.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = PG_WRITERS_DEFAULT,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=PG_WRITERS_MAX as u64)
    )]
    pg_writers: usize,

    /// Tenant-token checks that may wait for the credential lookup (1 to 1000000)
    ///
    /// Beyond it, a check waits up to its timeout instead of being refused.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = QUEUE_DEPTH_DEFAULT,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000)
    )]
    auth_queue_depth: usize,

    /// Seconds an Idempotency-Key replays its first answer (1 to 86400)
    ///
    /// The most, 86400, is the 24 hours the API promises.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = IDEMPOTENCY_TTL_MAX.as_secs(),
        value_parser = RangedU64ValueParser::<u64>::new().range(1..=IDEMPOTENCY_TTL_MAX.as_secs())
    )]
    idempotency_ttl_s: u64,

    /// Days an event is kept before it is erased (1 to 3650)
    ///
    /// Events are erased within a minute of passing this age, with their webhook deliveries.
    #[arg(
        long,
        next_line_help = true,
        value_name = "DAYS",
        env = "TENANTD_EVENT_RETENTION",
        hide_env_values = true,
        default_value_t = EVENT_RETENTION_DAYS_DEFAULT,
        value_parser = RangedU64ValueParser::<u64>::new().range(1..=EVENT_RETENTION_DAYS_MAX)
    )]
    event_retention: u64,
}

impl StoreArgs {
    /// The store's settings; every flag was checked against its range as clap read it.
    pub(crate) fn settings(self) -> StoreSettings {
        StoreSettings {
            commit_batch_max: self.commit_batch_max,
            queue_depth: self.store_queue_depth,
            readers: self.readers,
            pg_writers: self.pg_writers,
            credential_queue_depth: self.auth_queue_depth,
            idempotency_ttl: Duration::from_secs(self.idempotency_ttl_s),
            event_retention: Duration::from_secs(self.event_retention * DAY_SECS),
        }
    }
}
