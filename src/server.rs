//! The accept loop: a bound on open connections, a header timeout, and graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::{App, router};

/// Default for [`Limits::max_connections`]. Beyond it, new connections wait in the kernel's
/// accept backlog instead of costing memory here.
pub const MAX_CONNECTIONS_DEFAULT: usize = 1024;

/// Default for [`Limits::header_read_timeout`].
pub const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Default for [`Limits::body_read_timeout`].
pub const BODY_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Default for [`Limits::shutdown_grace`].
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(10);

/// The most bytes of request line and headers buffered for one request; a longer head is
/// refused by hyper (`431`/`414`) before it reaches a handler.
pub const HEAD_BYTES_MAX: usize = 64 * 1024;

/// How long to pause after a failed `accept` (such as running out of file descriptors),
/// so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time a client has to send a request's head; it also closes idle keep-alive
    /// connections, as hyper starts the timer whenever it waits for a head.
    pub header_read_timeout: Duration,
    /// Time a client has, once its head is in, to send the whole body (`408` after it).
    pub body_read_timeout: Duration,
    /// Time in-flight requests get to finish after a shutdown signal.
    pub shutdown_grace: Duration,
}

/// File descriptors the process needs besides its connections: the database, its WAL and
/// shared memory (once per connection to SQLite), the listener, stdio.
const FDS_BESIDES_CONNECTIONS: u64 = 64;

/// Raises the soft limit on open files to what `max_connections` needs (up to the hard
/// limit), so that a default soft limit of 1024 does not quietly cap the connections.
pub fn ensure_fd_limit(max_connections: usize) {
    let needed = max_connections as u64 + FDS_BESIDES_CONNECTIONS;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; setrlimit reads it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        log::warn!(
            "cannot read the open-file limit: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    if limit.rlim_cur >= needed {
        return;
    }
    let raised = needed.min(limit.rlim_max);
    let wanted = libc::rlimit {
        rlim_cur: raised,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } != 0 {
        log::warn!(
            "cannot raise the open-file limit: {}",
            std::io::Error::last_os_error()
        );
    } else if raised < needed {
        log::warn!(
            "the open-file limit is {raised}, below the {needed} that --max-connections {max_connections} needs; \
             raise it (LimitNOFILE= in systemd) or lower --max-connections"
        );
    } else {
        log::info!(
            "raised the open-file limit from {} to {raised}",
            limit.rlim_cur
        );
    }
}

/// Serves until `shutdown` resolves, then stops accepting and lets open connections finish
/// within the grace period.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(HEAD_BYTES_MAX)
        .max_header_size(HEAD_BYTES_MAX)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
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
        let service_app = Arc::clone(&app);
        let service = service_fn(move |request| router::handle(Arc::clone(&service_app), request));
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let app = Arc::clone(&app);
        app.metrics.connections_open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                log::debug!("connection from {peer} ended: {e}");
            }
            app.metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    drop(listener);
    let open = app.metrics.connections_open.load(Ordering::Relaxed);
    log::info!(
        "shutting down: no new connections; {open} open, {} ms to finish",
        limits.shutdown_grace.as_millis()
    );
    tokio::select! {
        () = graceful.shutdown() => log::info!("every connection is closed"),
        () = tokio::time::sleep(limits.shutdown_grace) => {
            let open = app.metrics.connections_open.load(Ordering::Relaxed);
            log::warn!("the grace period is over; {open} connections are cut off");
        }
    }
}
