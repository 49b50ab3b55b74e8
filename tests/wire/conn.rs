//! A blocking connection over `std::net::TcpStream`, and one-shot exchanges on it.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::request::{HTTP_11, request_bytes};
use super::response::{Response, parse_response, split_response};

/// How long one read or write on a test connection may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests longer than this are written from a second thread, so that an answer the server
/// sends before it has read them all (a `413`, a `401`) is still received.
const FOREGROUND_WRITE_BYTES_MAX: usize = 16 * 1024;

/// How many bytes a background writer hands the kernel at a time, and a read takes.
const PIECE_BYTES: usize = 64 * 1024;

/// A request written from a second thread, counting the bytes the kernel took.
pub struct Writer {
    written: Arc<AtomicUsize>,
    total: usize,
    handle: JoinHandle<bool>,
}

impl Writer {
    /// How many bytes the kernel has taken so far.
    pub fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// How many bytes there are to write in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Waits for the writer; whether every byte was written (`false`: the server closed
    /// first).
    pub fn join(self) -> bool {
        self.handle.join().expect("the writer thread")
    }
}

/// One client connection read by hand: every byte the server sends, split into responses as
/// they complete, and the server's close.
pub struct Conn {
    stream: TcpStream,
    /// Received bytes not yet taken as a response.
    buf: Vec<u8>,
    /// The server closed the connection (end of stream or reset).
    closed: bool,
    /// The error that ended the stream, when it was a reset rather than a clean close.
    reset: Option<io::Error>,
}

impl Conn {
    /// Connects to `addr`, with [`IO_TIMEOUT`] on every write.
    pub fn connect(addr: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            closed: false,
            reset: None,
        })
    }

    /// Connects to `addr`, panicking if it cannot.
    pub fn open(addr: &str) -> Conn {
        Conn::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
    }

    /// Writes all of `bytes`.
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Writes all of `bytes`, panicking if it cannot.
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes)
            .unwrap_or_else(|e| panic!("writing {} bytes: {e}", bytes.len()));
    }

    /// Writes `bytes` from a second thread in pieces, so that an answer the server sends
    /// before it has read them all can be read meanwhile.
    pub fn send_in_background(&self, bytes: Vec<u8>) -> Writer {
        let mut stream = self.stream.try_clone().expect("cloning the stream");
        let written = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&written);
        let total = bytes.len();
        let handle = thread::spawn(move || {
            for piece in bytes.chunks(PIECE_BYTES) {
                if stream.write_all(piece).is_err() {
                    return false;
                }
                counter.fetch_add(piece.len(), Ordering::SeqCst);
            }
            true
        });
        Writer {
            written,
            total,
            handle,
        }
    }

    /// Reads once more; `false` when `deadline` passed with nothing to read.
    pub fn fill(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        self.stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("a read timeout");
        let mut chunk = [0u8; PIECE_BYTES];
        match self.stream.read(&mut chunk) {
            Ok(0) => self.closed = true,
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A reset: the server closed with unread request bytes.
            Err(e) => {
                self.closed = true;
                self.reset = Some(e);
            }
        }
        true
    }

    fn next_response(&mut self, head_request: bool, timeout: Duration) -> Option<Response> {
        let deadline = Instant::now() + timeout;
        loop {
            let parsed = split_response(&self.buf, head_request, self.closed);
            match parsed {
                Ok(Some((response, used))) => {
                    self.buf.drain(..used);
                    return Some(response);
                }
                Ok(None) => {}
                // Cut short by the close: no answer.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return None,
                Err(e) => panic!("a malformed response ({e})"),
            }
            if self.closed || !self.fill(deadline) {
                return None;
            }
        }
    }

    /// The next whole response to a request other than `HEAD`; `None` if the server closed
    /// or `timeout` passed first. A malformed response fails the test.
    pub fn response(&mut self, timeout: Duration) -> Option<Response> {
        self.next_response(false, timeout)
    }

    /// The next response to a `HEAD`: its head alone, since no body follows it.
    pub fn head_response(&mut self, timeout: Duration) -> Option<Response> {
        self.next_response(true, timeout)
    }

    /// Waits up to `timeout` for the server to close the connection.
    pub fn closes_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.closed {
            if !self.fill(deadline) {
                return false;
            }
        }
        true
    }

    /// Whether the server has closed the connection.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Bytes received and not yet taken as a response.
    pub fn unread(&self) -> &[u8] {
        &self.buf
    }

    /// Reads until the server closes the connection, allowing `idle` between two reads, and
    /// returns every byte not yet taken. A timeout or a reset after some bytes still returns
    /// them; with nothing received, it is the error.
    pub fn read_to_close(&mut self, idle: Duration) -> io::Result<Vec<u8>> {
        while !self.closed {
            if !self.fill(Instant::now() + idle) {
                if self.buf.is_empty() {
                    return Err(io::Error::new(
                        ErrorKind::TimedOut,
                        format!("nothing received within {idle:?}"),
                    ));
                }
                break;
            }
        }
        match self.reset.take() {
            Some(e) if self.buf.is_empty() => Err(e),
            _ => Ok(std::mem::take(&mut self.buf)),
        }
    }

    /// Shuts both directions down, which also unblocks a background writer.
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Sends raw bytes on a fresh connection and returns everything that came back until the
/// server closed it. Long requests are written from a second thread, so a response sent
/// before the server read the whole request (a `413`, a `401`) is still received.
pub fn try_raw(addr: &str, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut conn = Conn::connect(addr)?;
    let writer = if bytes.len() > FOREGROUND_WRITE_BYTES_MAX {
        Some(conn.send_in_background(bytes.to_vec()))
    } else {
        conn.try_send(bytes)?;
        None
    };
    let received = conn.read_to_close(IO_TIMEOUT);
    if let Some(writer) = writer {
        // Unblock a writer stuck on a full socket before joining it; the server may have
        // closed early on purpose, so a failed write is expected.
        conn.shutdown();
        let _ = writer.join();
    }
    received
}

/// Like [`try_raw`], panicking on a transport error.
pub fn raw(addr: &str, bytes: &[u8]) -> Vec<u8> {
    try_raw(addr, bytes).unwrap_or_else(|e| panic!("raw exchange with {addr} failed: {e}"))
}

/// One request on a fresh connection, with `Host` and `Connection: close` before `headers`,
/// and a `Content-Length` for `body` unless the headers frame it; the response is read to the
/// close. A transport error or a response cut short is `Err`.
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<Response> {
    let mut all = Vec::with_capacity(headers.len() + 2);
    all.extend([("Host", addr), ("Connection", "close")]);
    all.extend_from_slice(headers);
    let bytes = request_bytes(method, path, HTTP_11, &all, body);
    let received = try_raw(addr, &bytes)?;
    parse_response(&received, method.eq_ignore_ascii_case("HEAD"))
}

/// One request on a fresh connection, as [`try_request`], panicking on a transport error.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Response {
    try_request(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr} failed: {e}"))
}
