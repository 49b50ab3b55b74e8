//! A webhook receiver: a real HTTP/1.1 server on the loopback (`127.0.0.1`, and `[::1]` on
//! the same port where the machine has it) that records every request it is sent (arrival
//! instant, method, path, every header, the raw body) and answers each as the test says at
//! that moment: a status (with a `Location` and a body of its choosing), after a delay if
//! asked; a stall (the request is read and never answered until the behaviour changes or the
//! client hangs up); or a drop (the connection is closed right after the request is read).
//! It counts the connections it accepted and the requests open at once (read, not yet
//! answered, client still there), and also the requests waiting at once for the first byte of
//! their answer: a count no race between this side's threads can raise above what the client
//! had in flight.
//!
//! Plain threads and blocking sockets: one thread per listener, one per connection. Every
//! answer carries `Connection: close`, so one connection carries one request and a client's
//! connection pool never meets a connection this side is closing.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The path of [`Receiver::url`].
pub const HOOK_PATH: &str = "/hook";

/// How long a connection may take to send its whole request.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a stalled connection looks whether its client left or the behaviour changed.
const STALL_POLL: Duration = Duration::from_millis(10);

/// How often an idle listener looks for a connection (and whether the receiver is dropped).
const ACCEPT_POLL: Duration = Duration::from_millis(2);

/// How long, after its answer, a connection waits for the client to close first.
const LINGER: Duration = Duration::from_secs(2);

/// The largest request head and body a receiver reads.
const REQUEST_BYTES_MAX: usize = 1 << 20;

/// How a receiver treats one request, decided when the request has been read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers `status` with `body` (and `Location: location` when set), after `delay`.
    Answer {
        /// The status code.
        status: u16,
        /// A `Location` header's value.
        location: Option<String>,
        /// The body, sent as `text/plain`.
        body: String,
        /// How long to wait before answering.
        delay: Duration,
    },
    /// Never answers while this is the receiver's behaviour: the connection stays open until
    /// the client closes it (its timeout), or the behaviour changes and the request is then
    /// answered as the new one says.
    Stall,
    /// Closes the connection right after reading the request, without a byte of answer.
    Drop,
}

impl Behaviour {
    /// Answers `status` at once, with a short body.
    pub fn status(status: u16) -> Self {
        Self::Answer {
            status,
            location: None,
            body: format!("status {status} from the test receiver\n"),
            delay: Duration::ZERO,
        }
    }

    /// Answers `status` at once, with `body`.
    pub fn status_with_body(status: u16, body: &str) -> Self {
        Self::Answer {
            status,
            location: None,
            body: body.to_owned(),
            delay: Duration::ZERO,
        }
    }

    /// Answers `302 Found` with `Location: location`.
    pub fn redirect(location: &str) -> Self {
        Self::Answer {
            status: 302,
            location: Some(location.to_owned()),
            body: String::new(),
            delay: Duration::ZERO,
        }
    }

    /// The same answer, sent after `delay`. Only for [`Behaviour::Answer`].
    pub fn after(self, delay: Duration) -> Self {
        match self {
            Self::Answer {
                status,
                location,
                body,
                ..
            } => Self::Answer {
                status,
                location,
                body,
                delay,
            },
            other => panic!("only an answer can be delayed, not {other:?}"),
        }
    }
}

/// One request a receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// When its last byte was read.
    pub at: Instant,
    /// The wall clock then, in milliseconds since the epoch.
    pub unix_ms: i64,
    /// When its connection ended (answered, dropped, or closed by the client); `None` while
    /// it is open.
    pub ended: Option<Instant>,
    /// The method, as sent.
    pub method: String,
    /// The request target, as sent.
    pub path: String,
    /// Every header field in the order received: the name as sent, the value trimmed.
    pub headers: Vec<(String, String)>,
    /// The body's bytes, chunk framing removed.
    pub body: Vec<u8>,
    /// The address of this receiver it arrived at.
    pub local: SocketAddr,
}

impl Received {
    /// The value of the first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// How many header fields of that name (case-insensitive) the request had.
    pub fn header_count(&self, name: &str) -> usize {
        let named = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name));
        named.count()
    }

    /// The body as text; a body that is not UTF-8 fails the test.
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone())
            .unwrap_or_else(|e| panic!("a webhook body is UTF-8 ({e}): {:?}", self.body))
    }
}

/// What every thread of a receiver shares.
struct State {
    received: Vec<Received>,
    behaviour: Behaviour,
    plan: VecDeque<Behaviour>,
    connections: usize,
    open: usize,
    max_open: usize,
    unanswered: usize,
    max_unanswered: usize,
    dropped: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A receiver serving until it is dropped.
pub struct Receiver {
    shared: Arc<Shared>,
    port: u16,
    ipv6: bool,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shared.lock().dropped = true;
        self.shared.changed.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Receiver {
    /// Starts a receiver answering `200` to everything, on `127.0.0.1` and, where the
    /// machine can bind it, `[::1]` on the same port.
    pub fn start() -> Self {
        let mut last_error = None;
        for _ in 0..20 {
            let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding 127.0.0.1:0");
            let port = v4.local_addr().expect("a bound address").port();
            match TcpListener::bind((Ipv6Addr::LOCALHOST, port)) {
                Ok(v6) => return Self::serve(port, vec![v4, v6]),
                // Taken on ::1 by someone else: another port.
                Err(e) if e.kind() == ErrorKind::AddrInUse => last_error = Some(e),
                // No IPv6 loopback on this machine.
                Err(_) => return Self::serve(port, vec![v4]),
            }
        }
        panic!("no port free on both 127.0.0.1 and ::1: {last_error:?}");
    }

    fn serve(port: u16, listeners: Vec<TcpListener>) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                received: Vec::new(),
                behaviour: Behaviour::status(200),
                plan: VecDeque::new(),
                connections: 0,
                open: 0,
                max_open: 0,
                unanswered: 0,
                max_unanswered: 0,
                dropped: false,
            }),
            changed: Condvar::new(),
        });
        let ipv6 = listeners.len() > 1;
        let threads = listeners
            .into_iter()
            .map(|listener| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || accept_loop(&shared, &listener))
            })
            .collect();
        Self {
            shared,
            port,
            ipv6,
            threads,
        }
    }

    /// The port, the same on both addresses.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the receiver also listens on `[::1]`.
    pub fn has_ipv6(&self) -> bool {
        self.ipv6
    }

    /// `http://127.0.0.1:<port>/hook`.
    pub fn url(&self) -> String {
        self.url_at(HOOK_PATH)
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url_at(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `http://localhost:<port>/hook`.
    pub fn localhost_url(&self) -> String {
        format!("http://localhost:{}{HOOK_PATH}", self.port)
    }

    /// `http://[::1]:<port>/hook`: served only where [`Receiver::has_ipv6`]; elsewhere nothing
    /// listens there.
    pub fn ipv6_url(&self) -> String {
        format!("http://[::1]:{}{HOOK_PATH}", self.port)
    }

    /// From now on, answers every request as `behaviour` says (after any planned ones). A
    /// stalled request is answered as the new behaviour says, unless it is a stall too.
    pub fn set(&self, behaviour: Behaviour) {
        self.shared.lock().behaviour = behaviour;
        self.shared.changed.notify_all();
    }

    /// The next requests get these behaviours, one each in order, before the one of
    /// [`Receiver::set`] applies again.
    pub fn plan(&self, behaviours: &[Behaviour]) {
        self.shared.lock().plan.extend(behaviours.iter().cloned());
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.lock().received.clone()
    }

    /// The requests received so far whose target is `path`.
    pub fn requests_to(&self, path: &str) -> Vec<Received> {
        let all = self.requests();
        all.into_iter().filter(|r| r.path == path).collect()
    }

    /// How many requests arrived so far.
    pub fn count(&self) -> usize {
        self.shared.lock().received.len()
    }

    /// How many connections were accepted so far, on either address.
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// The most requests that were open (read, not answered, client still connected) at once.
    pub fn max_open(&self) -> usize {
        self.shared.lock().max_open
    }

    /// The most requests that were waiting at once for their answer: each counted from its
    /// last byte read to the first byte of its answer (or the end of its connection, for a
    /// stall or a drop). Unlike [`Receiver::max_open`], which a connection's thread ends a
    /// moment after its answer is sent (when the client may have sent its next request
    /// already), this never exceeds the requests the client had in flight at once, unless it
    /// gave up on one (its timeout) before the answer.
    pub fn max_unanswered(&self) -> usize {
        self.shared.lock().max_unanswered
    }

    /// The requests received after the first `from` ones, in arrival order: what a test
    /// polling a busy receiver reads without copying everything again.
    pub fn requests_since(&self, from: usize) -> Vec<Received> {
        let state = self.shared.lock();
        state.received.get(from..).unwrap_or_default().to_vec()
    }

    /// Waits (bounded) until at least `n` requests arrived; every request then. Fails the
    /// test, naming `ctx`, if they do not come in time.
    pub fn wait_for(&self, n: usize, timeout: Duration, ctx: &str) -> Vec<Received> {
        self.wait_until(timeout, |all| all.len() >= n)
            .unwrap_or_else(|| {
                panic!(
                    "{ctx}: the receiver got {} of {n} requests within {timeout:?}",
                    self.count()
                )
            })
    }

    /// Waits (bounded) until `pred` holds for the requests received; `None` if it never
    /// does in time. Wakes at each arrival and each end of a connection.
    pub fn wait_until(
        &self,
        timeout: Duration,
        pred: impl Fn(&[Received]) -> bool,
    ) -> Option<Vec<Received>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if pred(&state.received) {
                return Some(state.received.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let local = listener.local_addr().expect("a bound address");
    // A connection's thread is not joined: it ends by itself (a stall at once once the
    // receiver is dropped, a request being read within its timeout).
    while !shared.lock().dropped {
        match listener.accept() {
            Ok((stream, _)) => {
                shared.lock().connections += 1;
                shared.changed.notify_all();
                let shared = Arc::clone(shared);
                thread::spawn(move || handle(&shared, stream, local));
            }
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Decrements the requests waiting for their answer, once: when the answer's first byte is
/// about to be written, or when the connection is done with unanswered.
struct Unanswered<'a> {
    shared: &'a Shared,
    done: bool,
}

impl Unanswered<'_> {
    fn end(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            self.shared.lock().unanswered -= 1;
        }
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

/// Decrements the open requests and stamps the request's end when the connection is done
/// with (however the handler leaves).
struct OpenRequest<'a> {
    shared: &'a Shared,
    index: usize,
}

impl Drop for OpenRequest<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.open -= 1;
        state.received[self.index].ended = Some(Instant::now());
        drop(state);
        self.shared.changed.notify_all();
    }
}

fn handle(shared: &Shared, mut stream: TcpStream, local: SocketAddr) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(REQUEST_READ_TIMEOUT));
    let Ok(request) = read_request(&mut stream) else {
        return;
    };
    let (index, behaviour) = {
        let mut state = shared.lock();
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        state.received.push(Received {
            at: Instant::now(),
            unix_ms,
            ended: None,
            method: request.method,
            path: request.path,
            headers: request.headers,
            body: request.body,
            local,
        });
        state.open += 1;
        state.max_open = state.max_open.max(state.open);
        state.unanswered += 1;
        state.max_unanswered = state.max_unanswered.max(state.unanswered);
        let behaviour = state.plan.pop_front();
        let behaviour = behaviour.unwrap_or_else(|| state.behaviour.clone());
        (state.received.len() - 1, behaviour)
    };
    shared.changed.notify_all();
    let open = OpenRequest { shared, index };
    let mut unanswered = Unanswered {
        shared,
        done: false,
    };
    let behaviour = match behaviour {
        Behaviour::Stall => match stall(shared, &mut stream) {
            Some(b) => b,
            None => return,
        },
        other => other,
    };
    match behaviour {
        Behaviour::Answer {
            status,
            location,
            body,
            delay,
        } => {
            thread::sleep(delay);
            unanswered.end();
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n",
                reason(status),
                body.len()
            );
            if let Some(location) = location {
                head.push_str(&format!("Location: {location}\r\n"));
            }
            head.push_str("\r\n");
            let sent = stream
                .write_all(head.as_bytes())
                .and_then(|()| stream.write_all(body.as_bytes()))
                .and_then(|()| stream.flush());
            drop(open);
            if sent.is_ok() {
                linger(&mut stream);
            }
        }
        Behaviour::Drop | Behaviour::Stall => {
            unanswered.end();
            let _ = stream.shutdown(Shutdown::Both);
            drop(open);
        }
    }
}

/// Holds a request unanswered while the behaviour is a stall. `None` when the client closed
/// the connection or the receiver is dropped; else the behaviour to answer with now.
fn stall(shared: &Shared, stream: &mut TcpStream) -> Option<Behaviour> {
    let _ = stream.set_read_timeout(Some(STALL_POLL));
    let mut buf = [0u8; 1024];
    loop {
        {
            let state = shared.lock();
            if state.dropped {
                return None;
            }
            if state.behaviour != Behaviour::Stall {
                return Some(state.behaviour.clone());
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// After an answer: half-closes, then reads (bounded) until the client closes, so the answer
/// is never cut by a reset.
fn linger(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(LINGER));
    let mut buf = [0u8; 1024];
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}

/// The RFC 9110 reason phrase of the statuses the tests answer.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        404 => "Not Found",
        410 => "Gone",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// A request as read off the wire.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Reads bytes until `buf` holds at least `want` of them.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, want: usize) -> io::Result<()> {
    let mut chunk = [0u8; 8192];
    while buf.len() < want {
        if buf.len() > REQUEST_BYTES_MAX {
            return Err(io::Error::new(ErrorKind::InvalidData, "request too large"));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// The position of the first `needle` in `buf` at or after `from`.
fn find(buf: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let hay = buf.get(from..)?;
    hay.windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Reads from `buf` (refilled from `stream`) the line starting at `*pos`, without its CRLF.
fn line(stream: &mut TcpStream, buf: &mut Vec<u8>, pos: &mut usize) -> io::Result<String> {
    loop {
        if let Some(end) = find(buf, b"\r\n", *pos) {
            let text = String::from_utf8_lossy(&buf[*pos..end]).into_owned();
            *pos = end + 2;
            return Ok(text);
        }
        let want = buf.len() + 1;
        fill(stream, buf, want)?;
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, what.to_owned())
}

/// Reads one HTTP/1.1 request: head, then a body framed by `Content-Length` or chunked.
fn read_request(stream: &mut TcpStream) -> io::Result<Request> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(end) = find(&buf, b"\r\n\r\n", 0) {
            break end;
        }
        let want = buf.len() + 1;
        fill(stream, &mut buf, want)?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap_or_default();
    let mut parts = start.split(' ');
    let (Some(method), Some(path), Some(_version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("a malformed request line"));
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let value = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    if value("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let mut pos = head_end + 4;
    let chunked =
        value("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let size_line = line(stream, &mut buf, &mut pos)?;
            let size_text = size_line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| bad("a chunk size"))?;
            if size == 0 {
                while !line(stream, &mut buf, &mut pos)?.is_empty() {}
                break body;
            }
            if body.len() + size > REQUEST_BYTES_MAX {
                return Err(bad("request too large"));
            }
            fill(stream, &mut buf, pos + size + 2)?;
            body.extend_from_slice(&buf[pos..pos + size]);
            pos += size + 2;
        }
    } else {
        let length = match value("content-length") {
            Some(v) => v.parse::<usize>().map_err(|_| bad("a Content-Length"))?,
            None => 0,
        };
        if length > REQUEST_BYTES_MAX {
            return Err(bad("request too large"));
        }
        fill(stream, &mut buf, pos + length)?;
        buf[pos..pos + length].to_vec()
    };
    // A target in absolute form (`http://host:port/path`), legal to any server, is recorded
    // as its path, the form a client sends to a server it is not using as a proxy.
    let absolute = path.split_once("://").filter(|_| !path.starts_with('/'));
    let path = match absolute {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => path,
    };
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body,
    })
}
