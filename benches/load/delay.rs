//! A network delay in front of PostgreSQL (`--pg-delay-ms`): a TCP proxy on 127.0.0.1 that
//! holds every chunk it forwards, in each direction, for the delay before writing it on, in
//! order. A database on this machine then answers as one across a network link would: this
//! kernel has no `netem`, so the delay is made here.
//!
//! Threads and `std::thread::sleep` keep the delay within about 0.1 ms; an async timer would
//! round it up to whole milliseconds. Each connection has two threads a direction (one reads
//! and stamps, one waits and writes), so reading never waits for the delay.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Connections the proxy carries at once, at most; more are closed at once (tenantd's
/// instances open a few each).
const CONNECTIONS_MAX: usize = 256;
/// The most bytes read in one chunk.
const CHUNK_BYTES: usize = 64 * 1024;
/// How often the accepting thread looks whether the proxy is stopping.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// The proxy: it stops accepting when dropped; connections end with either side.
pub(crate) struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
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
        thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) if open.load(Ordering::Relaxed) < CONNECTIONS_MAX => {
                        let open = Arc::clone(&open);
                        open.fetch_add(1, Ordering::Relaxed);
                        thread::spawn(move || {
                            carry(client, target, delay);
                            open.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                    Ok((client, _)) => drop(client),
                    Err(_) => thread::sleep(ACCEPT_POLL),
                }
            }
        });
        Ok(Self { addr, stop })
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Carries one connection both ways until either side closes.
fn carry(client: TcpStream, target: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(target) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = thread::spawn(move || pipe(client, server, delay));
    pipe(server2, client2, delay);
    let _ = up.join();
}

/// Copies `from` to `to`, each chunk written `delay` after it was read; at the end of
/// `from`, shuts `to`'s writing side.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (send, receive) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = thread::spawn(move || {
        for (read_at, chunk) in receive {
            let due = read_at + delay;
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
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
