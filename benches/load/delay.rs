//! A network delay in front of PostgreSQL (`--pg-delay-ms`): a TCP proxy on 127.0.0.1 that
//! holds every chunk it forwards, in each direction, for the delay before writing it on, in
//! order. A database on this machine then answers as one across a network link would: this
//! kernel has no `netem`, so the delay is made here.
//!
//! Threads and `std::thread::sleep` keep the delay within about 0.1 ms on an idle machine;
//! an async timer would round it up to whole milliseconds. Each connection has two threads a
//! direction (one reads and stamps, one waits and writes), so reading never waits for the
//! delay. How long each chunk was in fact held, from its read to the end of its write, is
//! kept ([`Held`]) and reported: on a machine whose cores are all busy, a thread woken for
//! its chunk may wait for one, and the delay is then longer than asked.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Connections the proxy carries at once, at most; more are closed at once (tenantd's
/// instances open a few each).
const CONNECTIONS_MAX: usize = 256;
/// The most bytes read in one chunk.
const CHUNK_BYTES: usize = 64 * 1024;
/// How often the accepting thread looks whether the proxy is stopping.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// The longest hold [`Held`] tells apart, in microseconds; longer ones count as this.
const HELD_US_MAX: u64 = 10_000_000;

/// The proxy: it stops accepting when dropped; connections end with either side.
pub(crate) struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    delay: Duration,
    held: Arc<Held>,
}

/// How long the proxy held each chunk, both directions together, in microseconds.
pub(crate) struct Held(Mutex<Histogram<u64>>);

impl Held {
    fn new() -> Self {
        let histogram = Histogram::new_with_bounds(1, HELD_US_MAX, 3).expect("valid bounds");
        Self(Mutex::new(histogram))
    }

    fn record(&self, held: Duration) {
        let us = u64::try_from(held.as_micros()).unwrap_or(HELD_US_MAX);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .saturating_record(us.clamp(1, HELD_US_MAX));
    }
}

impl DelayProxy {
    /// Starts a proxy on 127.0.0.1 in front of `target`, delaying each direction by `delay`.
    pub(crate) fn start(target: SocketAddr, delay: Duration) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let open = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(Held::new());
        let holding = Arc::clone(&held);
        spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) if open.load(Ordering::Relaxed) < CONNECTIONS_MAX => {
                        let open = Arc::clone(&open);
                        let held = Arc::clone(&holding);
                        open.fetch_add(1, Ordering::Relaxed);
                        spawn(move || {
                            carry(client, target, delay, held);
                            open.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                    Ok((client, _)) => drop(client),
                    Err(_) => thread::sleep(ACCEPT_POLL),
                }
            }
        });
        Ok(Self {
            addr,
            stop,
            delay,
            held,
        })
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long the chunks carried so far were held, as a note of the report: `None`
    /// before any.
    pub(crate) fn held_note(&self, what: &str) -> Option<String> {
        let held = self.held.0.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(format!(
            "{what}: the delaying proxy held its {} chunks, read to written: \
             p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms (asked: {:.2} ms)",
            held.len(),
            ms(held.value_at_quantile(0.5)),
            ms(held.value_at_quantile(0.99)),
            ms(held.max()),
            self.delay.as_secs_f64() * 1000.0,
        ))
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts a thread of the proxy, named so that a profile tells its CPU from the clients'.
fn spawn<F: FnOnce() + Send + 'static>(f: F) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("delay-proxy".into())
        .spawn(f)
        .expect("a thread for the delaying proxy")
}

/// Carries one connection both ways until either side closes.
fn carry(client: TcpStream, target: SocketAddr, delay: Duration, held: Arc<Held>) {
    let Ok(server) = TcpStream::connect(target) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let held_up = Arc::clone(&held);
    let up = spawn(move || pipe(client, server, delay, held_up));
    pipe(server2, client2, delay, held);
    let _ = up.join();
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, and how long it was
/// held kept in `held`; at the end of `from`, shuts `to`'s writing side.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration, held: Arc<Held>) {
    let (send, receive) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = spawn(move || {
        for (read_at, chunk) in receive {
            let due = read_at + delay;
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
            held.record(read_at.elapsed());
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if send.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(send);
    let _ = writer.join();
}

/// A proxy in front of the host and port of a `postgres://` URL, and the URL through it. An
/// error for a form this cannot rewrite (several hosts, a socket directory, no port), which
/// names the form without repeating the URL: it may hold a password.
pub(crate) fn proxied(url: &str, delay: Duration) -> Result<(String, DelayProxy), String> {
    const FORM: &str = "--pg-delay-ms needs a --postgres-url of one host and port (postgres://USER:PASS@HOST:PORT/DB)";
    let authority_at = url.find("://").ok_or(FORM)? + 3;
    let rest = &url[authority_at..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_at = authority.rfind('@').map_or(0, |at| at + 1);
    let host_port = &authority[host_at..];
    if host_port.contains(',') || host_port.is_empty() {
        return Err(FORM.into());
    }
    let target = host_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or(FORM)?;
    let proxy = DelayProxy::start(target, delay)?;
    let through = format!(
        "{}{}{}{}",
        &url[..authority_at],
        &authority[..host_at],
        proxy.addr(),
        &rest[end..]
    );
    Ok((through, proxy))
}
