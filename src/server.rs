//! The accept loop: a bound on open connections, a header timeout, and graceful shutdown;
//! and the flags that set those bounds ([`LimitArgs`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::builder::RangedU64ValueParser;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::metrics::Metrics;

/// Default for [`Limits::max_connections`]. Beyond it, new connections wait in the kernel's
/// accept backlog instead of costing memory here.
pub(crate) const MAX_CONNECTIONS_DEFAULT: usize = 1024;

/// The most threads [`Limits::workers`] takes.
pub(crate) const WORKERS_MAX: usize = 256;

/// Default for [`Limits::workers`]: one thread per core, as the machine reports its cores
/// (one where it cannot tell).
pub(crate) fn workers_default() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Default for [`Limits::header_read_timeout`].
pub(crate) const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Default for [`Limits::body_read_timeout`].
pub(crate) const BODY_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Default for [`Limits::shutdown_grace`].
pub(crate) const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(10);

/// The most bytes of request line and headers buffered for one request; a longer head is
/// refused by hyper (`431`/`414`) before it reaches a handler.
pub(crate) const HEAD_BYTES_MAX: usize = 64 * 1024;

/// How long to pause after a failed `accept` (such as running out of file descriptors),
/// so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The bounds of the HTTP layer.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Threads serving the connections and running the handlers (the runtime's workers).
    pub workers: usize,
    /// Time a client has to send a request's head; it also closes idle keep-alive
    /// connections, as hyper starts the timer whenever it waits for a head.
    pub header_read_timeout: Duration,
    /// Time a client has, once its head is in, to send the whole body (`408` after it).
    pub body_read_timeout: Duration,
    /// Time in-flight requests get to finish after a shutdown signal.
    pub shutdown_grace: Duration,
}

/// The HTTP layer's flags as clap reads them, flattened into `serve`'s command line; the
/// fields' names are clap's ids.
#[derive(clap::Args, Debug)]
pub(crate) struct LimitArgs {
    /// Connections served at once (1 to 65536)
    ///
    /// More wait in the kernel's accept backlog instead of costing memory here.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = MAX_CONNECTIONS_DEFAULT,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=65_536)
    )]
    max_connections: usize,

    /// Threads serving the connections (1 to 256; by default one per core)
    ///
    /// Several instances on one machine share its cores: give each its share, so that their
    /// threads do not outnumber the cores.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = workers_default(),
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=WORKERS_MAX as u64)
    )]
    workers: usize,

    /// Milliseconds to send a request head (100 to 600000)
    ///
    /// The same limit closes idle keep-alive connections.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = millis(HEADER_READ_TIMEOUT_DEFAULT),
        value_parser = RangedU64ValueParser::<u64>::new().range(100..=600_000)
    )]
    header_read_timeout_ms: u64,

    /// Milliseconds to send a request body once the head is in (100 to 600000)
    ///
    /// A slower client is answered 408.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = millis(BODY_READ_TIMEOUT_DEFAULT),
        value_parser = RangedU64ValueParser::<u64>::new().range(100..=600_000)
    )]
    body_read_timeout_ms: u64,

    /// Milliseconds in-flight requests get after SIGTERM or SIGINT (0 to 600000)
    ///
    /// Connections still open after it are cut off.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        default_value_t = millis(SHUTDOWN_GRACE_DEFAULT),
        value_parser = RangedU64ValueParser::<u64>::new().range(0..=600_000)
    )]
    shutdown_grace_ms: u64,
}

impl LimitArgs {
    /// The bounds the flags give; clap has checked each range.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            workers: self.workers,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
        }
    }
}

/// A default duration as the whole milliseconds its flag takes.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("a default timeout fits in u64 milliseconds")
}

/// File descriptors the process needs besides its connections: the database, its WAL and
/// shared memory (once per connection to SQLite), the listener, stdio.
const FDS_BESIDES_CONNECTIONS: u64 = 64;

/// Raises the soft limit on open files to what `max_connections` needs (up to the hard
/// limit), so that a default soft limit of 1024 does not quietly cap the connections.
pub(crate) fn ensure_fd_limit(max_connections: usize) {
    let needed = max_connections as u64 + FDS_BESIDES_CONNECTIONS;
    let (soft, hard) = match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            log::warn!("cannot read the open-file limit: {e}");
            return;
        }
    };
    if soft >= needed {
        return;
    }
    let raised = needed.min(hard);
    if let Err(e) = rlimit::setrlimit(rlimit::Resource::NOFILE, raised, hard) {
        log::warn!("cannot raise the open-file limit: {e}");
    } else if raised < needed {
        log::warn!(
            "the open-file limit is {raised}, below the {needed} that --max-connections {max_connections} needs; \
             raise it (LimitNOFILE= in systemd) or lower --max-connections"
        );
    } else {
        log::info!("raised the open-file limit from {soft} to {raised}");
    }
}

/// Counts a connection as open for as long as it lives, also when its task is aborted.
struct OpenConnection {
    metrics: Arc<Metrics>,
}

impl OpenConnection {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.connection_opened();
        Self { metrics }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics.connection_closed();
    }
}

/// Serves until `shutdown` resolves, then stops accepting and lets open connections finish
/// within the grace period; those still open after it are cut off, and the log says how many.
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    limits: Limits,
    metrics: Arc<Metrics>,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(HEAD_BYTES_MAX)
        .max_header_size(HEAD_BYTES_MAX)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // Finished connections leave the set here, so it holds only open ones.
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    log::warn!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Responses are written whole; waiting to coalesce them only adds latency.
        let _ = stream.set_nodelay(true);
        let connection = graceful
            .watch(builder.serve_connection(TokioIo::new(stream), service_fn(handler.clone())));
        let open = OpenConnection::new(Arc::clone(&metrics));
        connections.spawn(async move {
            if let Err(e) = connection.await {
                log::debug!("connection from {peer} ended: {e}");
            }
            drop((open, permit));
        });
    }
    drop(listener);
    while connections.try_join_next().is_some() {}
    log::info!(
        "shutting down: no new connections; {} open, {} ms to finish",
        connections.len(),
        limits.shutdown_grace.as_millis()
    );
    tokio::select! {
        () = graceful.shutdown() => log::info!("every connection is closed"),
        () = tokio::time::sleep(limits.shutdown_grace) => {
            connections.abort_all();
            let mut cut_off = 0;
            while let Some(ended) = connections.join_next().await {
                cut_off += usize::from(ended.is_err_and(|e| e.is_cancelled()));
            }
            let noun = if cut_off == 1 { "connection" } else { "connections" };
            log::warn!("the grace period is over; cut off {cut_off} {noun}");
        }
    }
}
