//! Hostile HTTP: what a malicious or broken client can throw at the socket. Every answer must
//! be a clean problem document (with `X-Request-Id`) from tenantd, or a bare refusal from the
//! HTTP layer and a closed connection; never a crash, a hang or a write for a refused request.
//! After each attack the same server still answers `GET /healthz` and a create.
//!
//! Each test prints one `hostile: …` line (run with `--nocapture`) with the figures that
//! ROBUSTNESS.md quotes.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::helpers::*;

// ---------------------------------------------------------------------------------------
// Machinery.
// ---------------------------------------------------------------------------------------

/// The tests that load the machine (10 MB bodies, 1,000 connections) or measure latency run
/// one at a time, so that one does not spoil the other's figures.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const TEN_MB: usize = 10 * 1024 * 1024;

/// How long a refused connection may stay open after its answer.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

fn find_bytes(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A header name and its raw value bytes.
type Header<'a> = (&'a str, &'a [u8]);

/// The bytes of one request. `line` is the request line without its CRLF. A `Host` header is
/// added for HTTP/1.1 and a `Content-Length` for a body unless the caller framed it; nothing
/// else (no `Connection: close`), so the caller decides about keep-alive.
fn request_bytes(line: &str, headers: &[(&str, &[u8])], body: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\r\n");
    if line.ends_with("HTTP/1.1") {
        out.extend_from_slice(b"Host: tenantd.test\r\n");
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    let framed = headers.iter().any(|(n, _)| {
        n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
    });
    if let Some(body) = body
        && !framed
    {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
    out
}

/// `body` in chunked framing, `size` bytes a chunk, with the last chunk.
fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / size * 12 + 16);
    for piece in body.chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// One complete response at the front of `buf`, and how many bytes it took. Without a
/// `Content-Length`, the body runs to the close (`eof`).
fn split_response(buf: &[u8], eof: bool) -> Option<(Response, usize)> {
    let head_end = find_bytes(buf, b"\r\n\r\n")? + 4;
    let head = parse_response(&buf[..head_end], true).ok()?;
    assert!(
        head.header("transfer-encoding").is_none(),
        "tenantd sends whole bodies with a Content-Length: {}",
        head.describe()
    );
    let len = match head.header("content-length") {
        Some(v) => v
            .parse::<usize>()
            .unwrap_or_else(|_| panic!("a bad Content-Length: {}", head.describe())),
        None if eof => buf.len() - head_end,
        None => return None,
    };
    if buf.len() < head_end + len {
        return None;
    }
    let body = buf[head_end..head_end + len].to_vec();
    Some((Response { body, ..head }, head_end + len))
}

/// A request written from a second thread, counting the bytes the kernel took.
struct Writer {
    written: Arc<AtomicUsize>,
    total: usize,
    handle: JoinHandle<bool>,
}

impl Writer {
    fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// Whether every byte was written (`false`: the server closed first).
    fn join(self) -> bool {
        self.handle.join().expect("the writer thread")
    }
}

/// One client connection read by hand: every byte the server sends, and its close.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The server closed the connection (end of stream or reset).
    closed: bool,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let stream =
            TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        stream
            .set_write_timeout(Some(IO_TIMEOUT))
            .expect("a write timeout");
        Conn {
            stream,
            buf: Vec::new(),
            closed: false,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("writing {} bytes: {e}", bytes.len()));
    }

    /// Writes `bytes` from a second thread in 64 KiB pieces, so that an answer the server
    /// sends before it has read them all can be read meanwhile.
    fn send_in_background(&self, bytes: Vec<u8>) -> Writer {
        let mut stream = self.stream.try_clone().expect("cloning the stream");
        let written = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&written);
        let total = bytes.len();
        let handle = thread::spawn(move || {
            for piece in bytes.chunks(64 * 1024) {
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
    fn fill(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        self.stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("a read timeout");
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => self.closed = true,
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A reset: the server closed with unread request bytes.
            Err(_) => self.closed = true,
        }
        true
    }

    /// The next whole response; `None` if the server closed or `timeout` passed first.
    fn response(&mut self, timeout: Duration) -> Option<Response> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((resp, used)) = split_response(&self.buf, self.closed) {
                self.buf.drain(..used);
                return Some(resp);
            }
            if self.closed || !self.fill(deadline) {
                return None;
            }
        }
    }

    /// Waits up to `timeout` for the server to close the connection.
    fn closes_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.closed {
            if !self.fill(deadline) {
                return false;
            }
        }
        true
    }

    /// Asserts the server closes the connection soon, having sent nothing more.
    fn assert_closed(&mut self, ctx: &str) {
        assert!(
            self.closes_within(CLOSE_WAIT),
            "{ctx}: the server keeps the connection open after its answer"
        );
        assert!(
            self.buf.is_empty(),
            "{ctx}: nothing may follow the answer, got {:?}",
            String::from_utf8_lossy(&self.buf)
        );
    }
}

/// Sends `bytes` on a fresh connection and returns the one answer, asserting the server then
/// closes the connection.
fn answer_then_close(addr: &str, bytes: &[u8], ctx: &str) -> Response {
    let mut conn = Conn::open(addr);
    let writer = conn.send_in_background(bytes.to_vec());
    let resp = conn
        .response(IO_TIMEOUT)
        .unwrap_or_else(|| panic!("{ctx}: no answer; got {:?}", lossy_head(&conn.buf)));
    conn.assert_closed(ctx);
    let _ = writer.join();
    resp
}

fn lossy_head(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(600)]).into_owned()
}

/// An answer of the HTTP layer itself, sent before a request reaches tenantd: one of
/// `statuses`, no body, `Connection: close`.
fn assert_bare(resp: &Response, statuses: &[u16], ctx: &str) {
    assert!(
        statuses.contains(&resp.status),
        "{ctx}: expected a bare {statuses:?} from the HTTP layer, got {}",
        resp.describe()
    );
    assert!(
        resp.body.is_empty(),
        "{ctx}: the HTTP layer's refusal has no body: {}",
        resp.describe()
    );
    assert_close_header(resp, ctx);
}

fn assert_close_header(resp: &Response, ctx: &str) {
    assert!(
        resp.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close")),
        "{ctx}: the answer announces Connection: close: {}",
        resp.describe()
    );
}

/// Tenant rows and audit events, to prove a refused request wrote nothing.
fn written(app: &TestApp) -> (i64, i64) {
    (app.tenant_count(), app.audit_count())
}

fn assert_nothing_written(app: &TestApp, before: (i64, i64), ctx: &str) {
    assert_eq!(
        written(app),
        before,
        "{ctx}: a refused request wrote nothing (tenants, audit events)"
    );
}

/// The server survived: liveness and a write both still work.
fn assert_still_serves(app: &TestApp, ctx: &str) {
    let health = app.get_path("/healthz");
    assert_eq!(
        health.status,
        200,
        "{ctx}: GET /healthz afterwards: {}",
        health.describe()
    );
    let created = app.create(&unique("still-serves"), "1");
    assert_eq!(
        created.status,
        201,
        "{ctx}: a create afterwards: {}",
        created.describe()
    );
}

/// `Authorization` and `Content-Type` of an admin create.
fn admin_json(auth: &str) -> [(&'static str, &[u8]); 2] {
    [
        ("Authorization", auth.as_bytes()),
        ("Content-Type", b"application/json"),
    ]
}

fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------
// 1. Ten-megabyte bodies.
// ---------------------------------------------------------------------------------------

/// Sends `bytes` from a second thread and expects a `413` with the connection closed while
/// the client is still sending, nothing written, and the server still serving. Returns a
/// summary of the answer.
fn refused_while_sending(app: &TestApp, bytes: Vec<u8>, before: (i64, i64), ctx: &str) -> String {
    let mut conn = Conn::open(&app.addr);
    let t = Instant::now();
    let writer = conn.send_in_background(bytes);
    let resp = conn
        .response(IO_TIMEOUT)
        .unwrap_or_else(|| panic!("{ctx}: no answer to the body"));
    let (took, sent) = (t.elapsed(), writer.written());
    assert_problem(&resp, 413, "payload_too_large", ctx);
    assert_close_header(&resp, ctx);
    assert!(
        sent < writer.total,
        "{ctx}: the 413 came while the client was still sending ({sent} of {} bytes written)",
        writer.total
    );
    conn.assert_closed(ctx);
    assert!(
        !writer.join(),
        "{ctx}: the server closed before taking the whole body"
    );
    assert_nothing_written(app, before, ctx);
    assert_still_serves(app, ctx);
    format!(
        "413+close in {} after {} KiB sent",
        millis(took),
        sent / 1024
    )
}

#[test]
fn ten_megabyte_bodies_are_refused_unread() {
    let _serial = serial();
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let mut answers = Vec::new();

    // With Content-Length: 413 from the head alone, while the client is still sending.
    let ctx = "10 MB with Content-Length";
    let before = written(&app);
    let mut body = tenant_body(&unique("big-cl"), "1").into_bytes();
    body.resize(TEN_MB, b' ');
    let bytes = request_bytes("POST /v1/tenants HTTP/1.1", &admin_json(&auth), Some(&body));
    answers.push(refused_while_sending(&app, bytes, before, ctx));

    // Chunked: 413 as soon as the body passes 65,536 bytes.
    let ctx = "10 MB chunked";
    let before = written(&app);
    let mut body = tenant_body(&unique("big-chunked"), "1").into_bytes();
    body.resize(TEN_MB, b' ');
    let headers = [
        ("Authorization", auth.as_bytes()),
        ("Content-Type", b"application/json".as_slice()),
        ("Transfer-Encoding", b"chunked".as_slice()),
    ];
    let bytes = request_bytes(
        "POST /v1/tenants HTTP/1.1",
        &headers,
        Some(&chunked(&body, 16 * 1024)),
    );
    answers.push(refused_while_sending(&app, bytes, before, ctx));

    // Neither Content-Length nor Transfer-Encoding, on a keep-alive connection: in HTTP/1.1
    // the request has no body, so it is an empty body (400 malformed_json), and the 10 MB
    // that follow are read as the next request, whose first byte (`{`) cannot start a
    // method: the HTTP layer answers a bare 400 and closes.
    let ctx = "10 MB without Content-Length or Transfer-Encoding, keep-alive";
    let before = written(&app);
    let mut garbage = tenant_body(&unique("big-unframed"), "1").into_bytes();
    garbage.resize(TEN_MB, b' ');
    let mut bytes = request_bytes("POST /v1/tenants HTTP/1.1", &admin_json(&auth), None);
    bytes.extend_from_slice(&garbage);
    let mut conn = Conn::open(&app.addr);
    let t = Instant::now();
    let writer = conn.send_in_background(bytes);
    let first = conn
        .response(IO_TIMEOUT)
        .expect("an answer to the unframed POST");
    assert_problem(&first, 400, "malformed_json", ctx);
    let second = conn
        .response(IO_TIMEOUT)
        .expect("the HTTP layer's answer to the bytes that follow");
    let (took, sent) = (t.elapsed(), writer.written());
    assert_bare(&second, &[400], ctx);
    assert!(
        second.header("x-request-id").is_none(),
        "{ctx}: the second answer is the HTTP layer's, not tenantd's: {}",
        second.describe()
    );
    assert!(
        sent < writer.total,
        "{ctx}: refused while the client was still sending ({sent} of {} bytes written)",
        writer.total
    );
    conn.assert_closed(ctx);
    let _ = writer.join();
    assert_nothing_written(&app, before, ctx);
    assert_still_serves(&app, ctx);
    answers.push(format!(
        "400 malformed_json then bare 400+close in {}",
        millis(took)
    ));

    // The same with Connection: close: the one answer, and the bytes after the head are
    // never parsed.
    let ctx = "10 MB without Content-Length or Transfer-Encoding, Connection: close";
    let before = written(&app);
    let headers = [
        ("Authorization", auth.as_bytes()),
        ("Content-Type", b"application/json".as_slice()),
        ("Connection", b"close".as_slice()),
    ];
    let mut bytes = request_bytes("POST /v1/tenants HTTP/1.1", &headers, None);
    bytes.extend_from_slice(&garbage);
    let resp = answer_then_close(&app.addr, &bytes, ctx);
    assert_problem(&resp, 400, "malformed_json", ctx);
    assert_nothing_written(&app, before, ctx);
    assert_still_serves(&app, ctx);
    answers.push("400 malformed_json+close".to_owned());

    println!(
        "hostile: 10 MB bodies: {} cases, {} ({} total)",
        answers.len(),
        answers.join(" / "),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 2. Invalid UTF-8.
// ---------------------------------------------------------------------------------------

#[test]
fn invalid_utf8_in_bodies_and_headers_is_refused_or_replaced() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let body_cases: &[(&str, &[u8])] = &[
        (
            "lone continuation byte",
            b"{\"name\":\"a\x80b\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "overlong 2-byte '/'",
            b"{\"name\":\"a\xc0\xafb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "overlong 3-byte '/'",
            b"{\"name\":\"a\xe0\x80\xafb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "overlong NUL (modified UTF-8)",
            b"{\"name\":\"a\xc0\x80b\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "surrogate U+D800 in UTF-8",
            b"{\"name\":\"a\xed\xa0\x80b\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "surrogate pair U+DBFF U+DFFF in UTF-8 (CESU-8)",
            b"{\"name\":\"a\xed\xaf\xbf\xed\xbf\xbfb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "0xFF",
            b"{\"name\":\"a\xffb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "0xFE 0xFF",
            b"{\"name\":\"\xfe\xff\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "truncated 3-byte sequence",
            b"{\"name\":\"a\xe2\x82\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "above U+10FFFF",
            b"{\"name\":\"a\xf4\x90\x80\x80\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "5-byte form",
            b"{\"name\":\"a\xf8\x88\x80\x80\x80\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "0xFF in the deposit",
            b"{\"name\":\"utf8-deposit\",\"opening_deposit_atomic\":\"1\xff\"}",
        ),
        (
            "0xFF in a member name",
            b"{\"name\":\"utf8-member\",\"opening_deposit_atomic\":\"1\",\"x\xff\":1}",
        ),
        (
            "0xFF between tokens",
            b"{\"name\":\"utf8-between\",\xff\"opening_deposit_atomic\":\"1\"}",
        ),
    ];
    let mut answers = Vec::new();
    for (label, body) in body_cases {
        let ctx = format!("invalid UTF-8 in the body: {label}");
        let before = written(&app);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        let resp = app.request("POST", "/v1/tenants", &headers, Some(body));
        assert_problem(&resp, 400, "malformed_json", &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push(resp.status.to_string());
    }

    // Header values with bytes that are not ASCII (or not UTF-8) on the wire.
    let good_body = tenant_body(&unique("utf8-header"), "1");
    let header_cases: &[(&str, &[u8])] = &[
        ("0xFF 0xFE", b"key-\xff\xfe"),
        ("lone continuation byte", b"key-\x80"),
        ("valid UTF-8 but not ASCII", "clé-été".as_bytes()),
    ];
    for (label, value) in header_cases {
        let ctx = format!("Idempotency-Key with {label}");
        let before = written(&app);
        let headers = [
            ("Authorization", auth.as_bytes()),
            ("Content-Type", b"application/json".as_slice()),
            ("Idempotency-Key", value),
            ("Connection", b"close".as_slice()),
        ];
        let bytes = request_bytes(
            "POST /v1/tenants HTTP/1.1",
            &headers,
            Some(good_body.as_bytes()),
        );
        let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
        assert_problem(&resp, 400, "invalid_header", &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push(format!("{} (Idempotency-Key)", resp.status));
    }

    // An invalid X-Request-Id is replaced by one of the server's, never an error.
    let invalid_ids: &[(&str, &[u8])] = &[
        ("0xFF 0xFE", b"\xff\xfe"),
        ("a surrogate in UTF-8", b"req-\xed\xa0\x80"),
        ("valid UTF-8 but not ASCII", "réq-1".as_bytes()),
    ];
    for (label, value) in invalid_ids {
        let ctx = format!("X-Request-Id with {label}");
        let check_replaced = |resp: &Response, what: &str| {
            let id = resp.header("x-request-id").unwrap_or_default();
            assert!(
                !id.is_empty()
                    && id.len() <= 128
                    && id.bytes().all(|b| b.is_ascii_graphic())
                    && id.as_bytes() != *value,
                "{ctx}, {what}: a fresh X-Request-Id replaces the invalid one: {}",
                resp.describe()
            );
        };
        let bytes = request_bytes(
            "GET /healthz HTTP/1.1",
            &[("X-Request-Id", value), ("Connection", b"close")],
            None,
        );
        let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
        assert_eq!(resp.status, 200, "{ctx}: GET /healthz: {}", resp.describe());
        check_replaced(&resp, "GET /healthz");

        let before = written(&app);
        let body = tenant_body(&unique("utf8-request-id"), "1");
        let headers = [
            ("Authorization", auth.as_bytes()),
            ("Content-Type", b"application/json".as_slice()),
            ("X-Request-Id", value),
            ("Connection", b"close".as_slice()),
        ];
        let bytes = request_bytes("POST /v1/tenants HTTP/1.1", &headers, Some(body.as_bytes()));
        let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
        assert_eq!(resp.status, 201, "{ctx}: a create: {}", resp.describe());
        check_replaced(&resp, "a create");
        assert_eq!(
            written(&app),
            (before.0 + 1, before.1 + 1),
            "{ctx}: the create is written once"
        );

        let bytes = request_bytes(
            "GET /v1/tenants/ten_00000000000000000000000000 HTTP/1.1",
            &[
                ("Authorization", auth.as_bytes()),
                ("X-Request-Id", value),
                ("Connection", b"close"),
            ],
            None,
        );
        let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
        assert_problem(&resp, 404, "tenant_not_found", &ctx);
        check_replaced(&resp, "a 404");
        answers.push("200/201/404 (X-Request-Id replaced)".to_owned());
    }

    // The other headers tenantd reads, with bytes that are not ASCII.
    let before = written(&app);
    let body = tenant_body(&unique("utf8-other"), "1");
    let bytes = request_bytes(
        "POST /v1/tenants HTTP/1.1",
        &[
            ("Authorization", b"Bearer \xff\xfe\xfd"),
            ("Content-Type", b"application/json"),
            ("Connection", b"close"),
        ],
        Some(body.as_bytes()),
    );
    let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
    assert_problem(&resp, 401, "unauthorized", "Authorization with 0xFF");
    let bytes = request_bytes(
        "POST /v1/tenants HTTP/1.1",
        &[
            ("Authorization", auth.as_bytes()),
            ("Content-Type", b"application/json; charset=\xff"),
            ("Connection", b"close"),
        ],
        Some(body.as_bytes()),
    );
    let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
    assert_problem(
        &resp,
        415,
        "unsupported_media_type",
        "Content-Type with 0xFF",
    );
    assert_nothing_written(&app, before, "Authorization or Content-Type with 0xFF");
    answers.push("401 (Authorization)".to_owned());
    answers.push("415 (Content-Type)".to_owned());

    assert_still_serves(&app, "invalid UTF-8");
    println!(
        "hostile: invalid UTF-8: {} cases, {} ({} total)",
        answers.len(),
        summarise(&answers),
        millis(started.elapsed())
    );
}

/// `a, a, b` → `2×a, 1×b`, in first-seen order.
fn summarise(answers: &[String]) -> String {
    let mut counted: Vec<(String, usize)> = Vec::new();
    for a in answers {
        match counted.iter_mut().find(|(k, _)| k == a) {
            Some((_, n)) => *n += 1,
            None => counted.push((a.clone(), 1)),
        }
    }
    counted
        .iter()
        .map(|(k, n)| format!("{n}×{k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------
// 3. Deep nesting.
// ---------------------------------------------------------------------------------------

#[test]
fn json_nested_ten_thousand_deep_is_malformed_and_fast() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    const DEPTH: usize = 10_000;
    let arrays = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    let objects = format!("{}1{}", "{\"a\":".repeat(DEPTH), "}".repeat(DEPTH));
    let member = |value: &str| format!("{{\"name\":{value},\"opening_deposit_atomic\":\"1\"}}");
    let cases: Vec<(&str, String)> = vec![
        ("arrays as the name", member(&arrays)),
        ("objects as the name", member(&objects)),
        (
            "arrays as the deposit",
            format!("{{\"name\":\"deep\",\"opening_deposit_atomic\":{arrays}}}"),
        ),
        (
            "objects as an unknown member",
            format!("{{\"name\":\"deep\",\"opening_deposit_atomic\":\"1\",\"x\":{objects}}}"),
        ),
        ("arrays at the top level", arrays.clone()),
        ("objects at the top level", objects.clone()),
        ("arrays never closed", member(&"[".repeat(DEPTH))),
        ("objects never closed", "{\"a\":".repeat(DEPTH).to_string()),
        (
            "arrays and objects alternating",
            member(&format!(
                "{}1{}",
                "[{\"a\":".repeat(DEPTH / 2),
                "}]".repeat(DEPTH / 2)
            )),
        ),
    ];
    let mut slowest = Duration::ZERO;
    for (label, body) in &cases {
        let ctx = format!("JSON nested {DEPTH} deep: {label}");
        assert!(
            body.len() <= BODY_BYTES_MAX,
            "{ctx}: the body fits the limit"
        );
        let before = written(&app);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        let t = Instant::now();
        let resp = app.request("POST", "/v1/tenants", &headers, Some(body.as_bytes()));
        let took = t.elapsed();
        assert_problem(&resp, 400, "malformed_json", &ctx);
        assert!(
            took < Duration::from_secs(1),
            "{ctx}: refused fast, not after {took:?}"
        );
        slowest = slowest.max(took);
        assert_nothing_written(&app, before, &ctx);
    }
    assert_still_serves(&app, "deep JSON");
    println!(
        "hostile: JSON nested {DEPTH} deep: {} cases, {}×400 malformed_json, slowest {} ({} total)",
        cases.len(),
        cases.len(),
        millis(slowest),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 4. Duplicate members.
// ---------------------------------------------------------------------------------------

#[test]
fn duplicate_members_are_422_once_per_member() {
    let started = Instant::now();
    let app = spawn_app();
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "name twice, same value",
            r#"{"name":"dup","name":"dup","opening_deposit_atomic":"1"}"#,
            &["name"],
        ),
        (
            "name twice, different values",
            r#"{"name":"dup-a","name":"dup-b","opening_deposit_atomic":"1"}"#,
            &["name"],
        ),
        (
            "name three times",
            r#"{"name":"a","name":"b","opening_deposit_atomic":"1","name":"c"}"#,
            &["name"],
        ),
        (
            "deposit twice",
            r#"{"name":"dup-dep","opening_deposit_atomic":"1","opening_deposit_atomic":"2"}"#,
            &["opening_deposit_atomic"],
        ),
        (
            "both twice",
            r#"{"name":"a","opening_deposit_atomic":"1","name":"a","opening_deposit_atomic":"1"}"#,
            &["name", "opening_deposit_atomic"],
        ),
        (
            "both three times, mixed valid and invalid",
            r#"{"name":"","opening_deposit_atomic":"01","name":"ok","opening_deposit_atomic":"1","name":" x","opening_deposit_atomic":1}"#,
            &["name", "opening_deposit_atomic"],
        ),
        (
            "name twice, one spelled with an escape",
            r#"{"name":"dup-esc","n\u0061me":"dup-esc","opening_deposit_atomic":"1"}"#,
            &["name"],
        ),
        (
            "an unknown member twice",
            r#"{"name":"dup-unknown","opening_deposit_atomic":"1","plan":"a","plan":"b"}"#,
            &["plan"],
        ),
    ];
    for (label, body, want) in cases {
        let ctx = format!("duplicate members: {label}");
        let before = written(&app);
        let resp = app.post_tenants(body, &[]);
        let problem = assert_problem(&resp, 422, "validation_failed", &ctx);
        let fields = error_fields(&problem, &ctx);
        assert_eq!(
            fields, *want,
            "{ctx}: one entry per duplicated member; {problem}"
        );
        assert_nothing_written(&app, before, &ctx);
    }
    assert_still_serves(&app, "duplicate members");
    println!(
        "hostile: duplicate members: {} cases, {}×422 validation_failed, one entry per member ({} total)",
        cases.len(),
        cases.len(),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 5. NUL, CR and LF.
// ---------------------------------------------------------------------------------------

#[test]
fn nul_cr_and_lf_in_json_strings_are_refused() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    // Escaped: valid JSON, invalid fields.
    let escaped: &[(&str, &str, &str)] = &[
        (
            "\\u0000 in the name",
            r#"{"name":"a\u0000b","opening_deposit_atomic":"1"}"#,
            "name",
        ),
        (
            "the name is \\u0000",
            r#"{"name":"\u0000","opening_deposit_atomic":"1"}"#,
            "name",
        ),
        (
            "\\r\\n in the name",
            r#"{"name":"a\r\nb","opening_deposit_atomic":"1"}"#,
            "name",
        ),
        (
            "a header injection in the name",
            r#"{"name":"acme\r\nSet-Cookie: a=b","opening_deposit_atomic":"1"}"#,
            "name",
        ),
        (
            "\\u0085 (NEL, C1) in the name",
            r#"{"name":"a\u0085b","opening_deposit_atomic":"1"}"#,
            "name",
        ),
        (
            "\\u0000 in the deposit",
            r#"{"name":"nul-deposit","opening_deposit_atomic":"1\u0000"}"#,
            "opening_deposit_atomic",
        ),
        (
            "\\r\\n in the deposit",
            r#"{"name":"crlf-deposit","opening_deposit_atomic":"1\r\n"}"#,
            "opening_deposit_atomic",
        ),
        (
            "\\u0000 in an unknown member name",
            r#"{"name":"nul-member","opening_deposit_atomic":"1","x\u0000y":1}"#,
            "x\u{0}y",
        ),
        (
            "\\r\\n in an unknown member name",
            r#"{"name":"crlf-member","opening_deposit_atomic":"1","\r\nSet-Cookie: a=b":1}"#,
            "\r\nSet-Cookie: a=b",
        ),
    ];
    let mut answers = Vec::new();
    for (label, body, field) in escaped {
        let ctx = format!("escaped control character: {label}");
        let before = written(&app);
        let resp = app.post_tenants(body, &[]);
        let problem = assert_problem(&resp, 422, "validation_failed", &ctx);
        assert_eq!(error_fields(&problem, &ctx), [*field], "{ctx}; {problem}");
        assert!(
            resp.header("set-cookie").is_none(),
            "{ctx}: nothing of the body reaches the response headers: {}",
            resp.describe()
        );
        assert_nothing_written(&app, before, &ctx);
        answers.push("422".to_owned());
    }

    // Raw control bytes inside strings: JSON forbids them.
    let raw: &[(&str, &[u8])] = &[
        (
            "raw NUL in the name",
            b"{\"name\":\"a\x00b\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "raw CR LF in the name",
            b"{\"name\":\"a\r\nb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "raw LF in the name",
            b"{\"name\":\"a\nb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "raw TAB in the name",
            b"{\"name\":\"a\tb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "raw 0x1F in the name",
            b"{\"name\":\"a\x1fb\",\"opening_deposit_atomic\":\"1\"}",
        ),
        (
            "raw NUL in the deposit",
            b"{\"name\":\"raw-deposit\",\"opening_deposit_atomic\":\"1\x00\"}",
        ),
        (
            "raw CR LF in the deposit",
            b"{\"name\":\"raw-deposit\",\"opening_deposit_atomic\":\"1\r\n\"}",
        ),
        (
            "raw NUL in a member name",
            b"{\"name\":\"raw-member\",\"opening_deposit_atomic\":\"1\",\"x\x00\":1}",
        ),
        (
            "raw LF in a member name",
            b"{\"name\":\"raw-member\",\"opening_deposit_atomic\":\"1\",\"x\ny\":1}",
        ),
        (
            "raw NUL between tokens",
            b"{\"name\":\"raw-between\",\x00\"opening_deposit_atomic\":\"1\"}",
        ),
    ];
    for (label, body) in raw {
        let ctx = format!("raw control byte: {label}");
        let before = written(&app);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        let resp = app.request("POST", "/v1/tenants", &headers, Some(body));
        assert_problem(&resp, 400, "malformed_json", &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push("400".to_owned());
    }
    assert_still_serves(&app, "control characters in JSON");
    println!(
        "hostile: NUL/CR/LF in JSON: {} cases, {} ({} total)",
        answers.len(),
        summarise(&answers),
        millis(started.elapsed())
    );
}

#[test]
fn nul_cr_and_lf_on_the_wire_are_refused_by_the_http_layer() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = format!("Authorization: {}\r\n", app.admin());
    let body = tenant_body(&unique("wire"), "1");
    // A create that would succeed but for the bytes spliced into it.
    let create = |line: &str, extra: &[u8]| -> Vec<u8> {
        let mut out =
            format!("{line}\r\nHost: tenantd.test\r\nConnection: close\r\n{auth}").into_bytes();
        out.extend_from_slice(extra);
        out.extend_from_slice(
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        out
    };
    let line = "POST /v1/tenants HTTP/1.1";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "NUL in a header value",
            create(line, b"X-Request-Id: abc\x00def\r\n"),
        ),
        (
            "bare CR in a header value",
            create(line, b"Idempotency-Key: abc\rdef\r\n"),
        ),
        (
            "CR LF then a line without a colon",
            create(line, b"X-Request-Id: abc\r\ndef\r\n"),
        ),
        (
            "obsolete line folding (CR LF SP)",
            create(line, b"X-Request-Id: abc\r\n def\r\n"),
        ),
        (
            "NUL in a header name",
            create(line, b"X-Bad\x00Name: 1\r\n"),
        ),
        (
            "NUL in Authorization",
            create(line, b"X-Token: Bearer \x00\r\n"),
        ),
        (
            "a header line of a bare CR",
            create(line, b"\rX-Request-Id: abc\r\n"),
        ),
        (
            "NUL in the URL",
            create("POST /v1/tenants\x00 HTTP/1.1", b""),
        ),
        ("CR in the URL", create("POST /v1/ten\rants HTTP/1.1", b"")),
        ("LF in the URL", create("POST /v1/ten\nants HTTP/1.1", b"")),
        (
            "CR LF header injection in the URL",
            create("POST /v1/tenants\r\nX-Injected: 1 HTTP/1.1", b""),
        ),
        (
            "NUL in the method",
            create("PO\x00ST /v1/tenants HTTP/1.1", b""),
        ),
        (
            "NUL in the version",
            create("POST /v1/tenants HTTP/1.\x001", b""),
        ),
    ];
    let mut answers = Vec::new();
    for (label, bytes) in &cases {
        let ctx = format!("on the wire: {label}");
        let before = written(&app);
        let resp = answer_then_close(&app.addr, bytes, &ctx);
        assert_bare(&resp, &[400], &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push("bare 400+close".to_owned());
    }

    // A bare LF ends a header line (RFC 9112 §2.2 lets a recipient accept it), so it can split
    // a value in two, but never puts an LF into one: either a bare 400, or two headers.
    let ctx = "on the wire: bare LF in a header value";
    let bytes = b"GET /healthz HTTP/1.1\r\nHost: tenantd.test\r\nX-Request-Id: abc\nX-Injected: 1\r\nConnection: close\r\n\r\n";
    let resp = answer_then_close(&app.addr, bytes, ctx);
    if resp.status == 400 {
        assert_bare(&resp, &[400], ctx);
        answers.push("bare 400+close".to_owned());
    } else {
        assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
        assert_eq!(
            resp.header("x-request-id"),
            Some("abc"),
            "{ctx}: the LF ended the X-Request-Id line: {}",
            resp.describe()
        );
        assert!(resp.header("x-injected").is_none(), "{ctx}");
        answers.push("LF as a line end (200, X-Request-Id abc)".to_owned());
    }

    assert_still_serves(&app, "control bytes on the wire");
    println!(
        "hostile: NUL/CR/LF on the wire: {} cases, {} ({} total)",
        cases.len() + 1,
        summarise(&answers),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 6. Oversized heads.
// ---------------------------------------------------------------------------------------

#[test]
fn oversized_heads_are_refused_by_the_http_layer_and_closed() {
    let _serial = serial();
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let big = "a".repeat(100 * 1024);
    let many = |n: usize| -> Vec<u8> {
        let mut out = b"GET /healthz HTTP/1.1\r\nHost: tenantd.test\r\n".to_vec();
        for i in 0..n - 1 {
            out.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    };
    let body = tenant_body(&unique("big-head"), "1");
    let refused: Vec<(&str, Vec<u8>)> = vec![
        (
            "100 KB URL (query)",
            format!("GET /healthz?pad={big} HTTP/1.1\r\nHost: tenantd.test\r\n\r\n").into_bytes(),
        ),
        (
            "100 KB URL (path) on a create",
            request_bytes(
                &format!("POST /v1/tenants/{big} HTTP/1.1"),
                &admin_json(&auth),
                Some(body.as_bytes()),
            ),
        ),
        (
            "100 KB header on a create",
            request_bytes(
                "POST /v1/tenants HTTP/1.1",
                &[
                    ("Authorization", auth.as_bytes()),
                    ("Content-Type", b"application/json"),
                    ("X-Big", big.as_bytes()),
                ],
                Some(body.as_bytes()),
            ),
        ),
        (
            "100 KB Authorization",
            request_bytes(
                "GET /healthz HTTP/1.1",
                &[("Authorization", format!("Bearer {big}").as_bytes())],
                None,
            ),
        ),
        ("101 headers", many(101)),
        ("1,000 headers", many(1000)),
        (
            "90 headers of 1 KB (90 KB in all)",
            request_bytes(
                "GET /healthz HTTP/1.1",
                &(0..90)
                    .map(|_| ("X-Kilo", &big.as_bytes()[..1024]))
                    .collect::<Vec<_>>(),
                None,
            ),
        ),
    ];
    let mut answers = Vec::new();
    for (label, bytes) in &refused {
        let ctx = format!("oversized head: {label}");
        let before = written(&app);
        let t = Instant::now();
        let resp = answer_then_close(&app.addr, bytes, &ctx);
        assert_bare(&resp, &[400, 414, 431], &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push(format!("{}+close", resp.status));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{ctx}: refused without waiting"
        );
    }

    // Within the bounds: served.
    let sixty = "b".repeat(60 * 1024);
    let accepted: Vec<(&str, Vec<u8>)> = vec![
        (
            "a 60 KB header",
            request_bytes(
                "GET /healthz HTTP/1.1",
                &[("X-Pad", sixty.as_bytes()), ("Connection", b"close")],
                None,
            ),
        ),
        (
            "a 60 KB URL",
            format!(
                "GET /healthz?pad={sixty} HTTP/1.1\r\nHost: tenantd.test\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
        ),
        ("exactly 100 headers", {
            let mut bytes = many(99);
            bytes.truncate(bytes.len() - 2);
            bytes.extend_from_slice(b"Connection: close\r\n\r\n");
            bytes
        }),
    ];
    for (label, bytes) in &accepted {
        let ctx = format!("a head within the bounds: {label}");
        let resp = answer_then_close(&app.addr, bytes, &ctx);
        assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
        assert!(resp.header("x-request-id").is_some(), "{ctx}");
        answers.push("200".to_owned());
    }
    assert_still_serves(&app, "oversized heads");
    println!(
        "hostile: oversized heads: {} cases, {} ({} total)",
        refused.len() + accepted.len(),
        refused
            .iter()
            .map(|(l, _)| *l)
            .chain(accepted.iter().map(|(l, _)| *l))
            .zip(&answers)
            .map(|(l, a)| format!("{l} {a}"))
            .collect::<Vec<_>>()
            .join(", "),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 7. Path traversal and other spellings of an id.
// ---------------------------------------------------------------------------------------

#[test]
fn other_spellings_of_an_id_never_reach_the_tenant() {
    let started = Instant::now();
    let app = spawn_app();
    let created = app.create_ok(&unique("spelled"), "1");
    let id = tenant_id(&created);
    let ulid = id.strip_prefix("ten_").expect("a tenant id");
    let pct_all: String = id.bytes().map(|b| format!("%{b:02X}")).collect();
    let pct_first = format!("ten_%{:02X}{}", ulid.as_bytes()[0], &ulid[1..]);
    let zero_as_o = id.replacen("ten_0", "ten_O", 1);
    assert_ne!(zero_as_o, id, "ids of this century start with 0");
    let cases: Vec<(String, &str)> = vec![
        ("/v1/tenants/../../etc/passwd".to_owned(), "not_found"),
        (
            "/v1/tenants/..%2F..%2Fetc%2Fpasswd".to_owned(),
            "tenant_not_found",
        ),
        ("/v1/tenants/%2e%2e".to_owned(), "tenant_not_found"),
        ("/v1/tenants/..".to_owned(), "tenant_not_found"),
        ("/v1/tenants/.".to_owned(), "tenant_not_found"),
        (format!("/v1/tenants/{pct_first}"), "tenant_not_found"),
        (format!("/v1/tenants/{pct_all}"), "tenant_not_found"),
        (format!("/v1/tenants/ten%5F{ulid}"), "tenant_not_found"),
        (format!("/v1/tenants/{id}%00"), "tenant_not_found"),
        (format!("/v1/tenants/{id}%20"), "tenant_not_found"),
        (format!("/v1/tenants/{id}%2F"), "tenant_not_found"),
        (format!("/v1/tenants/{id};x=1"), "tenant_not_found"),
        (
            format!("/v1/tenants/{}", id.to_ascii_lowercase()),
            "tenant_not_found",
        ),
        (format!("/v1/tenants/{zero_as_o}"), "tenant_not_found"),
        (format!("/v1/tenants/{id}/"), "not_found"),
        (format!("/v1/tenants/{id}/."), "not_found"),
        (format!("/v1/tenants/./{id}"), "not_found"),
        (format!("/v1/tenants/x/../{id}"), "not_found"),
        (format!("/v1/./tenants/{id}"), "not_found"),
        (format!("/v1/tenants//{id}"), "not_found"),
        (format!("//v1/tenants/{id}"), "not_found"),
        (format!("/V1/tenants/{id}"), "not_found"),
        (format!("/v1/TENANTS/{id}"), "not_found"),
    ];
    let auth = app.admin();
    let before = written(&app);
    let mut answers = Vec::new();
    for (path, code) in &cases {
        for method in ["GET", "DELETE"] {
            let ctx = format!("{method} {path}");
            let resp = app.request(method, path, &[("Authorization", auth.as_str())], None);
            assert_problem(&resp, 404, code, &ctx);
            assert!(
                !resp.text().contains(&id),
                "{ctx}: the answer never holds the tenant: {}",
                resp.describe()
            );
            answers.push(format!("404 {code}"));
        }
    }
    assert_nothing_written(&app, before, "other spellings of an id");
    let read = app.get_admin(&id);
    assert_eq!(read.status, 200, "the tenant itself: {}", read.describe());
    assert_eq!(
        read.json()["state"],
        "active",
        "no spelling tombstoned the tenant"
    );
    let tombstoned: i64 = count(
        &app.db(),
        "SELECT count(*) FROM tenants WHERE state <> 'active'",
    );
    assert_eq!(tombstoned, 0, "no tenant tombstoned");
    assert_still_serves(&app, "other spellings of an id");
    println!(
        "hostile: path traversal and id spellings: {} paths × GET/DELETE = {} cases, {}; nothing tombstoned ({} total)",
        cases.len(),
        answers.len(),
        summarise(&answers),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 8. HTTP/1.0.
// ---------------------------------------------------------------------------------------

#[test]
fn http_1_0_requests_are_answered_and_closed() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let created = app.create_ok(&unique("http10"), "1");
    let id = tenant_id(&created);
    let mut answers = Vec::new();
    // The server, not the idle timeout (10 s), closes the connection.
    let close_wait = Duration::from_secs(2);

    let ctx = "HTTP/1.0 GET of a tenant";
    let bytes = request_bytes(
        &format!("GET /v1/tenants/{id} HTTP/1.0"),
        &[("Authorization", auth.as_bytes())],
        None,
    );
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = conn.response(IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    assert_eq!(resp.json()["id"], id.as_str(), "{ctx}");
    assert!(resp.header("x-request-id").is_some(), "{ctx}");
    assert!(
        conn.closes_within(close_wait) && conn.buf.is_empty(),
        "{ctx}: closed after the answer"
    );
    answers.push("GET 200+close");

    let ctx = "HTTP/1.0 POST with Content-Length";
    let before = written(&app);
    let name = unique("http10-create");
    let body = tenant_body(&name, "10");
    let bytes = request_bytes(
        "POST /v1/tenants HTTP/1.0",
        &admin_json(&auth),
        Some(body.as_bytes()),
    );
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = conn.response(IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 201, "{ctx}: {}", resp.describe());
    assert_eq!(resp.json()["name"], name.as_str(), "{ctx}");
    assert!(
        conn.closes_within(close_wait) && conn.buf.is_empty(),
        "{ctx}: closed after the answer"
    );
    assert_eq!(
        written(&app),
        (before.0 + 1, before.1 + 1),
        "{ctx}: created once"
    );
    let read = app.get_admin(&tenant_id(&resp.json()));
    assert_eq!(read.status, 200, "{ctx}: readable: {}", read.describe());
    answers.push("POST 201+close");

    let ctx = "HTTP/1.0 GET of an unknown tenant";
    let bytes = request_bytes(
        "GET /v1/tenants/ten_00000000000000000000000000 HTTP/1.0",
        &[("Authorization", auth.as_bytes())],
        None,
    );
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = conn.response(IO_TIMEOUT).expect("an answer");
    assert_problem(&resp, 404, "tenant_not_found", ctx);
    assert!(
        conn.closes_within(close_wait) && conn.buf.is_empty(),
        "{ctx}: closed after the answer"
    );
    answers.push("404+close");

    let ctx = "HTTP/1.0 POST with Transfer-Encoding: chunked";
    let before = written(&app);
    let headers = [
        ("Authorization", auth.as_bytes()),
        ("Content-Type", b"application/json".as_slice()),
        ("Transfer-Encoding", b"chunked".as_slice()),
    ];
    let body = tenant_body(&unique("http10-chunked"), "1");
    let bytes = request_bytes(
        "POST /v1/tenants HTTP/1.0",
        &headers,
        Some(&chunked(body.as_bytes(), 16)),
    );
    let resp = answer_then_close(&app.addr, &bytes, ctx);
    assert_bare(&resp, &[400], ctx);
    assert_nothing_written(&app, before, ctx);
    answers.push("chunked: bare 400+close");

    // Keep-alive only when asked for.
    let ctx = "HTTP/1.0 with Connection: keep-alive";
    let mut conn = Conn::open(&app.addr);
    conn.send(&request_bytes(
        "GET /healthz HTTP/1.0",
        &[("Connection", b"keep-alive")],
        None,
    ));
    let resp = conn.response(IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    assert!(
        resp.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("keep-alive")),
        "{ctx}: the answer confirms keep-alive: {}",
        resp.describe()
    );
    conn.send(&request_bytes(
        &format!("GET /v1/tenants/{id} HTTP/1.0"),
        &[("Authorization", auth.as_bytes())],
        None,
    ));
    let resp = conn
        .response(IO_TIMEOUT)
        .expect("a second answer on the kept connection");
    assert_eq!(
        resp.status,
        200,
        "{ctx}: second request: {}",
        resp.describe()
    );
    assert_eq!(resp.json()["id"], id.as_str(), "{ctx}");
    assert!(
        conn.closes_within(close_wait) && conn.buf.is_empty(),
        "{ctx}: closed after the second answer, which did not ask to keep it"
    );
    answers.push("keep-alive asked: 200, 200+close");

    assert_still_serves(&app, "HTTP/1.0");
    println!(
        "hostile: HTTP/1.0: {} cases, {} ({} total)",
        answers.len(),
        answers.join(" / "),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 9. Pipelining.
// ---------------------------------------------------------------------------------------

#[test]
fn pipelined_requests_are_answered_in_order() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let existing = tenant_id(&app.create_ok(&unique("pipe-existing"), "1"));
    let name = unique("pipe");
    let body = tenant_body(&name, "5");
    let get_existing = format!("GET /v1/tenants/{existing} HTTP/1.1");
    let with_id = |rid: &'static str, close: bool| -> Vec<(&'static str, &[u8])> {
        let mut h: Vec<(&'static str, &[u8])> = vec![("X-Request-Id", rid.as_bytes())];
        if close {
            h.push(("Connection", b"close"));
        }
        h
    };
    let create_headers = |rid: &'static str| -> Vec<(&'static str, &[u8])> {
        let mut h = with_id(rid, false);
        h.extend_from_slice(&admin_json(&auth));
        h
    };
    let auth_headers = |rid: &'static str, close: bool| -> Vec<(&'static str, &[u8])> {
        let mut h = with_id(rid, close);
        h.push(("Authorization", auth.as_bytes()));
        h
    };

    // Five mixed requests in one write; the fourth repeats the second's name, so it is a 409
    // only if the second ran first.
    let before = written(&app);
    let mut bytes = Vec::new();
    bytes.extend(request_bytes(
        "GET /healthz HTTP/1.1",
        &with_id("pipe-1", false),
        None,
    ));
    bytes.extend(request_bytes(
        "POST /v1/tenants HTTP/1.1",
        &create_headers("pipe-2"),
        Some(body.as_bytes()),
    ));
    bytes.extend(request_bytes(
        &get_existing,
        &auth_headers("pipe-3", false),
        None,
    ));
    bytes.extend(request_bytes(
        "POST /v1/tenants HTTP/1.1",
        &create_headers("pipe-4"),
        Some(body.as_bytes()),
    ));
    bytes.extend(request_bytes(
        "DELETE /v1/tenants/ten_00000000000000000000000000 HTTP/1.1",
        &auth_headers("pipe-5", true),
        None,
    ));
    let mut conn = Conn::open(&app.addr);
    let t = Instant::now();
    conn.send(&bytes);
    let mut got = Vec::new();
    for i in 1..=5 {
        let resp = conn
            .response(IO_TIMEOUT)
            .unwrap_or_else(|| panic!("pipelined answer {i} of 5; got {got:?}"));
        got.push(resp.status);
        assert_eq!(
            resp.header("x-request-id"),
            Some(format!("pipe-{i}").as_str()),
            "pipelined answer {i} carries its own request's id: {}",
            resp.describe()
        );
        let ctx = format!("pipelined answer {i}");
        match i {
            1 => assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe()),
            2 => {
                assert_eq!(resp.status, 201, "{ctx}: {}", resp.describe());
                assert_eq!(resp.json()["name"], name.as_str(), "{ctx}");
            }
            3 => {
                assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
                assert_eq!(resp.json()["id"], existing.as_str(), "{ctx}");
            }
            4 => {
                assert_problem(&resp, 409, "tenant_name_taken", &ctx);
            }
            _ => {
                assert_problem(&resp, 404, "tenant_not_found", &ctx);
            }
        }
    }
    let took = t.elapsed();
    conn.assert_closed("after the fifth pipelined answer (Connection: close)");
    assert_eq!(
        written(&app),
        (before.0 + 1, before.1 + 1),
        "exactly the one create of the pipeline is written"
    );

    // A pipeline with bad requests inside: each answered in turn; the 413 ends the
    // connection (its body is not read), so the fifth request is never answered.
    let before = written(&app);
    let mut bytes = Vec::new();
    bytes.extend(request_bytes(
        "GET /healthz HTTP/1.1",
        &with_id("bad-1", false),
        None,
    ));
    bytes.extend(request_bytes(
        "POST /v1/tenants HTTP/1.1",
        &create_headers("bad-2"),
        Some(b"{\"name\":"),
    ));
    bytes.extend(request_bytes(
        &get_existing,
        &auth_headers("bad-3", false),
        None,
    ));
    let mut oversized = create_headers("bad-4");
    oversized.push(("Content-Length", b"70000"));
    bytes.extend(request_bytes("POST /v1/tenants HTTP/1.1", &oversized, None));
    bytes.extend(request_bytes(
        "GET /healthz HTTP/1.1",
        &with_id("bad-5", true),
        None,
    ));
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let want: [(u16, &str); 4] = [
        (200, ""),
        (400, "malformed_json"),
        (200, ""),
        (413, "payload_too_large"),
    ];
    let mut second = Vec::new();
    for (i, (status, code)) in want.iter().enumerate() {
        let ctx = format!("pipeline with bad requests, answer {}", i + 1);
        let resp = conn
            .response(IO_TIMEOUT)
            .unwrap_or_else(|| panic!("{ctx}: missing"));
        assert_eq!(
            resp.header("x-request-id"),
            Some(format!("bad-{}", i + 1).as_str()),
            "{ctx}: its own request id: {}",
            resp.describe()
        );
        if code.is_empty() {
            assert_eq!(resp.status, *status, "{ctx}: {}", resp.describe());
        } else {
            assert_problem(&resp, *status, code, &ctx);
        }
        second.push(resp.status);
    }
    conn.assert_closed("after the 413 in a pipeline");
    assert_nothing_written(&app, before, "a pipeline of refused requests");

    assert_still_serves(&app, "pipelining");
    println!(
        "hostile: pipelining: 2 pipelines of 5, {} in order in {}; {} then close (5th unanswered after the 413) ({} total)",
        got.iter().map(u16::to_string).collect::<Vec<_>>().join("/"),
        millis(took),
        second
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join("/"),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 10. Slowloris.
// ---------------------------------------------------------------------------------------

/// What became of a client that sent its head one byte at a time.
#[derive(Debug)]
struct Slowloris {
    /// From connect to the server's close; `None` if it never closed.
    cut_after: Option<Duration>,
    bytes_sent: usize,
    answer: Vec<u8>,
}

fn slowloris(addr: &str, gap: Duration, give_up: Duration) -> Slowloris {
    let mut reader =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    let started = Instant::now();
    let mut writer = reader.try_clone().expect("cloning the stream");
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    let head = format!(
        "GET /healthz HTTP/1.1\r\nHost: tenantd.test\r\nX-Slow: {}\r\n\r\n",
        "s".repeat(200)
    );
    let sender = thread::spawn(move || {
        let mut sent = 0;
        for byte in head.as_bytes() {
            if stop.load(Ordering::SeqCst) || writer.write_all(&[*byte]).is_err() {
                break;
            }
            sent += 1;
            thread::sleep(gap);
        }
        sent
    });
    reader
        .set_read_timeout(Some(give_up))
        .expect("a read timeout");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let cut_after = loop {
        match reader.read(&mut chunk) {
            Ok(0) => break Some(started.elapsed()),
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break None;
            }
            Err(_) => break Some(started.elapsed()),
        }
    };
    done.store(true, Ordering::SeqCst);
    let bytes_sent = sender.join().expect("the slow sender");
    Slowloris {
        cut_after,
        bytes_sent,
        answer,
    }
}

#[test]
fn a_slowloris_head_is_cut_off_while_others_are_served() {
    let _serial = serial();
    let started = Instant::now();
    let app = AppBuilder::new()
        .arg("--header-read-timeout-ms")
        .arg("1000")
        .spawn();
    let existing = tenant_id(&app.create_ok(&unique("slow-existing"), "1"));
    const SLOW_CLIENTS: usize = 10;
    let slow: Vec<_> = (0..SLOW_CLIENTS)
        .map(|_| {
            let addr = app.addr.clone();
            thread::spawn(move || {
                slowloris(&addr, Duration::from_millis(300), Duration::from_secs(5))
            })
        })
        .collect();

    // Meanwhile another client is served as usual.
    let mut latencies: Vec<(&str, Duration)> = Vec::new();
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        let t = Instant::now();
        let resp = app.get_path("/healthz");
        latencies.push(("GET /healthz", t.elapsed()));
        assert_eq!(resp.status, 200, "healthz during the slowloris");
        let t = Instant::now();
        let resp = app.get_admin(&existing);
        latencies.push(("GET tenant", t.elapsed()));
        assert_eq!(resp.status, 200, "a read during the slowloris");
        let t = Instant::now();
        let resp = app.create(&unique("during-slowloris"), "1");
        latencies.push(("create", t.elapsed()));
        assert_eq!(
            resp.status,
            201,
            "a create during the slowloris: {}",
            resp.describe()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let results: Vec<Slowloris> = slow
        .into_iter()
        .map(|h| h.join().expect("a slow client"))
        .collect();
    for (i, r) in results.iter().enumerate() {
        let ctx = format!("slow client {i}");
        let cut = r
            .cut_after
            .unwrap_or_else(|| panic!("{ctx}: never cut off ({} bytes sent)", r.bytes_sent));
        assert!(
            (Duration::from_millis(900)..=Duration::from_millis(2000)).contains(&cut),
            "{ctx}: cut off after {cut:?}, expected about 1 s; {r:?}"
        );
        if !r.answer.is_empty() {
            let resp = parse_response(&r.answer, false).expect("a complete answer");
            assert_bare(&resp, &[408], &ctx);
        }
    }
    let (worst_label, worst) = latencies
        .iter()
        .copied()
        .max_by_key(|(_, d)| *d)
        .expect("some requests");
    // Half the slow clients' 1 s cut-off: a request that waited for them would take longer;
    // the margin is for a busy 2-core machine running other tests beside this one.
    assert!(
        worst < Duration::from_millis(500),
        "every request of the other client completes in < 500 ms while slow clients hang on; \
         the slowest was {worst_label} in {worst:?}"
    );

    // An idle keep-alive connection and a silent one are closed by the same timer.
    let mut idle = Conn::open(&app.addr);
    idle.send(b"GET /healthz HTTP/1.1\r\nHost: tenantd.test\r\n\r\n");
    let resp = idle.response(IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 200);
    let t = Instant::now();
    assert!(
        idle.closes_within(Duration::from_secs(3)) && idle.buf.is_empty(),
        "an idle keep-alive connection is closed"
    );
    let idle_cut = t.elapsed();
    let t = Instant::now();
    let mut silent = Conn::open(&app.addr);
    assert!(
        silent.closes_within(Duration::from_secs(3)),
        "a connection that never sends a byte is closed"
    );
    let silent_cut = t.elapsed();
    let silent_answer = String::from_utf8_lossy(&silent.buf).into_owned();
    for (what, cut) in [("idle keep-alive", idle_cut), ("silent", silent_cut)] {
        assert!(
            (Duration::from_millis(900)..=Duration::from_millis(2000)).contains(&cut),
            "{what} connection closed after {cut:?}, expected about 1 s"
        );
    }
    assert!(
        silent_answer.is_empty() || silent_answer.starts_with("HTTP/1.1 408"),
        "a silent connection gets nothing or a bare 408: {silent_answer:?}"
    );

    assert_still_serves(&app, "slowloris");
    let cuts: Vec<Duration> = results.iter().filter_map(|r| r.cut_after).collect();
    let answered_408 = results.iter().filter(|r| !r.answer.is_empty()).count();
    println!(
        "hostile: slowloris (1 byte / 300 ms, --header-read-timeout-ms 1000): {SLOW_CLIENTS} slow clients cut off after {}–{} ({} with a bare 408, the rest closed silently, {}–{} bytes sent); meanwhile {} requests of another client, slowest {} ({worst_label}); idle keep-alive closed after {}, silent connection after {} ({} total)",
        millis(*cuts.iter().min().expect("cuts")),
        millis(*cuts.iter().max().expect("cuts")),
        answered_408,
        results.iter().map(|r| r.bytes_sent).min().unwrap_or(0),
        results.iter().map(|r| r.bytes_sent).max().unwrap_or(0),
        latencies.len(),
        millis(worst),
        millis(idle_cut),
        millis(silent_cut),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 11. A thousand idle connections.
// ---------------------------------------------------------------------------------------

/// Opens `n` connections that send nothing; returns them with the slowest connect and how
/// many connects took over 500 ms (a SYN dropped from a full accept backlog costs 1 s).
fn open_idle_connections(addr: &str, n: usize) -> (Vec<TcpStream>, Duration, usize) {
    let mut slowest = Duration::ZERO;
    let mut stalled = 0;
    let streams = (0..n)
        .map(|i| {
            let t = Instant::now();
            let stream = TcpStream::connect(addr)
                .unwrap_or_else(|e| panic!("opening idle connection {i} of {n}: {e}"));
            let took = t.elapsed();
            slowest = slowest.max(took);
            if took > Duration::from_millis(500) {
                stalled += 1;
            }
            stream
        })
        .collect();
    (streams, slowest, stalled)
}

/// The server's resident memory, from `/proc/<pid>/status`.
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// `tenantd_http_connections_open`, the scrape's own connection included.
fn connections_open(app: &TestApp) -> u64 {
    let text = app.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix("tenantd_http_connections_open "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no tenantd_http_connections_open in:\n{text}"))
}

fn wait_for_connections(app: &TestApp, timeout: Duration, pred: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + timeout;
    loop {
        let open = connections_open(app);
        if pred(open) || Instant::now() >= deadline {
            return open;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_thousand_idle_connections_do_not_starve_new_clients() {
    let _serial = serial();
    let started = Instant::now();
    const IDLE: u64 = 1000;
    // Idle connections outlive the test's measurements (the default is 10 s).
    let app = AppBuilder::new()
        .arg("--header-read-timeout-ms")
        .arg("60000")
        .spawn();
    let rss_before = vm_rss_kib(app.pid());
    let baseline = connections_open(&app);
    assert_eq!(baseline, 1, "only the scrape's own connection at first");

    let t = Instant::now();
    let (idle, slowest_connect, stalled_connects) = open_idle_connections(&app.addr, IDLE as usize);
    let opened_in = t.elapsed();
    let open = wait_for_connections(&app, Duration::from_secs(10), |n| n > IDLE);
    assert_eq!(
        open,
        IDLE + 1,
        "the gauge counts the {IDLE} idle connections and the scrape's own"
    );

    let t = Instant::now();
    let health = app.get_path("/healthz");
    let health_took = t.elapsed();
    assert_eq!(health.status, 200, "healthz among {IDLE} idle connections");
    let t = Instant::now();
    let created = app.create(&unique("among-idle"), "1");
    let create_took = t.elapsed();
    assert_eq!(
        created.status,
        201,
        "a create among {IDLE} idle connections: {}",
        created.describe()
    );
    for (what, took) in [("GET /healthz", health_took), ("a create", create_took)] {
        assert!(
            took < Duration::from_millis(500),
            "{what} among {IDLE} idle connections took {took:?}"
        );
    }
    let rss = vm_rss_kib(app.pid());
    assert!(
        rss < 128 * 1024,
        "the server's memory stays bounded with {IDLE} idle connections: VmRSS {rss} KiB"
    );
    // The idle connections were not dropped meanwhile.
    let still_open = idle
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).expect("non-blocking");
            let mut byte = [0u8; 1];
            let open =
                matches!((&**s).read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock);
            s.set_nonblocking(false).expect("blocking");
            open
        })
        .count();
    assert_eq!(still_open, IDLE as usize, "every idle connection is held");

    drop(idle);
    let t = Instant::now();
    let after = wait_for_connections(&app, Duration::from_secs(10), |n| n <= 1);
    let fell_in = t.elapsed();
    assert_eq!(
        after, 1,
        "the gauge falls back once the idle connections go"
    );
    assert_still_serves(&app, "1,000 idle connections");
    println!(
        "hostile: {IDLE} idle connections: opened in {} (slowest connect {}, {stalled_connects} over 500 ms), gauge {open} (+1 = the scrape), GET /healthz {}, create {}, VmRSS {} KiB → {} KiB (+{} KiB, {:.1} KiB per connection); gauge back to {after} {} after closing ({} total)",
        millis(opened_in),
        millis(slowest_connect),
        millis(health_took),
        millis(create_took),
        rss_before,
        rss,
        rss.saturating_sub(rss_before),
        rss.saturating_sub(rss_before) as f64 / IDLE as f64,
        millis(fell_in),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// 12. Bodies where none belong, and conflicting framing.
// ---------------------------------------------------------------------------------------

/// A new tenant, and a request that would tombstone it, to hide inside another request.
fn smuggling_victim(app: &TestApp, auth: &str, prefix: &str) -> (String, Vec<u8>) {
    let victim = tenant_id(&app.create_ok(&unique(prefix), "1"));
    let smuggled = request_bytes(
        &format!("DELETE /v1/tenants/{victim} HTTP/1.1"),
        &[
            ("Authorization", auth.as_bytes()),
            ("X-Request-Id", b"smuggled"),
        ],
        None,
    );
    (victim, smuggled)
}

#[test]
fn bodies_on_get_and_delete_are_never_run_as_requests() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    // A body that is itself a request: if it were ever parsed as one, the victim would go.
    let (victim, smuggled) = smuggling_victim(&app, &auth, "victim");
    let follow_up = request_bytes(
        "GET /healthz HTTP/1.1",
        &[("X-Request-Id", b"follow-up"), ("Connection", b"close")],
        None,
    );
    let mut answers = Vec::new();
    let framings: [(&str, &[u8], Vec<u8>); 2] = [
        ("Content-Length", b"", smuggled.clone()),
        (
            "Transfer-Encoding: chunked",
            b"chunked",
            chunked(&smuggled, 7),
        ),
    ];
    for (framing, te, body) in &framings {
        let ctx = format!("GET with a {framing} body holding a request");
        let before = written(&app);
        let mut headers: Vec<(&str, &[u8])> = vec![
            ("Authorization", auth.as_bytes()),
            ("X-Request-Id", b"carrier"),
        ];
        if !te.is_empty() {
            headers.push(("Transfer-Encoding", te));
        }
        let mut bytes = request_bytes(
            &format!("GET /v1/tenants/{victim} HTTP/1.1"),
            &headers,
            Some(body),
        );
        bytes.extend_from_slice(&follow_up);
        let mut conn = Conn::open(&app.addr);
        conn.send(&bytes);
        let resp = conn.response(IO_TIMEOUT).expect("an answer to the GET");
        assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
        assert_eq!(resp.header("x-request-id"), Some("carrier"), "{ctx}");
        assert_eq!(resp.json()["id"], victim.as_str(), "{ctx}");
        // The body is skipped: the next answer is the follow-up's, or the connection closes.
        let next = match conn.response(IO_TIMEOUT) {
            Some(next) => {
                assert_eq!(
                    next.header("x-request-id"),
                    Some("follow-up"),
                    "{ctx}: the answer after the GET is the follow-up's, never the body's: {}",
                    next.describe()
                );
                assert_eq!(next.status, 200, "{ctx}: {}", next.describe());
                "then the next request 200"
            }
            None => "then close",
        };
        conn.assert_closed(&ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push(format!("GET+{framing} body: 200 {next}"));
    }

    // DELETE with a body: the body is ignored, the tombstone is the only write.
    let target = tenant_id(&app.create_ok(&unique("delete-with-body"), "1"));
    let before = written(&app);
    let mut bytes = request_bytes(
        &format!("DELETE /v1/tenants/{target} HTTP/1.1"),
        &[
            ("Authorization", auth.as_bytes()),
            ("Content-Type", b"application/json"),
            ("X-Request-Id", b"carrier"),
        ],
        Some(&smuggled),
    );
    bytes.extend_from_slice(&follow_up);
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = conn.response(IO_TIMEOUT).expect("an answer to the DELETE");
    let ctx = "DELETE with a body holding a request";
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    assert_eq!(resp.json()["state"], "tombstoned", "{ctx}");
    if let Some(next) = conn.response(IO_TIMEOUT) {
        assert_eq!(next.header("x-request-id"), Some("follow-up"), "{ctx}");
    }
    conn.assert_closed(ctx);
    assert_eq!(
        written(&app),
        (before.0, before.1 + 1),
        "{ctx}: the one tombstone event, nothing of the body"
    );
    answers.push("DELETE+body: 200 tombstoned, body ignored".to_owned());

    let read = app.get_admin(&victim);
    assert_eq!(
        read.json()["state"],
        "active",
        "no smuggled DELETE ran: {}",
        read.describe()
    );
    assert_still_serves(&app, "bodies on GET and DELETE");
    println!(
        "hostile: bodies on GET/DELETE: {} cases, {}; the smuggled DELETE never ran ({} total)",
        answers.len(),
        answers.join(" / "),
        millis(started.elapsed())
    );
}

#[test]
fn conflicting_or_invalid_framing_is_refused_or_closed() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let (victim, smuggled) = smuggling_victim(&app, &auth, "framing-victim");
    let mut answers = Vec::new();

    // Transfer-Encoding and Content-Length together (either order): the chunked body wins
    // and the connection is closed after the answer (RFC 9112 §6.3), so what follows the
    // chunked body is never run; or the HTTP layer refuses the request outright.
    for te_first in [false, true] {
        let ctx = format!(
            "Transfer-Encoding: chunked and Content-Length: 4 ({} first)",
            if te_first {
                "Transfer-Encoding"
            } else {
                "Content-Length"
            }
        );
        let name = unique("te-cl");
        let body = tenant_body(&name, "1");
        let mut headers: Vec<(&str, &[u8])> = admin_json(&auth).to_vec();
        let te: (&str, &[u8]) = ("Transfer-Encoding", b"chunked");
        let cl: (&str, &[u8]) = ("Content-Length", b"4");
        if te_first {
            headers.extend([te, cl]);
        } else {
            headers.extend([cl, te]);
        }
        let mut payload = chunked(body.as_bytes(), 1024);
        payload.extend_from_slice(&smuggled);
        let bytes = request_bytes("POST /v1/tenants HTTP/1.1", &headers, Some(&payload));
        let before = written(&app);
        let resp = answer_then_close(&app.addr, &bytes, &ctx);
        if resp.status == 201 {
            assert_close_header(&resp, &ctx);
            assert_eq!(resp.json()["name"], name.as_str(), "{ctx}");
            assert_eq!(
                written(&app),
                (before.0 + 1, before.1 + 1),
                "{ctx}: the chunked create only"
            );
            answers.push("201 (chunked wins)+close".to_owned());
        } else {
            assert_bare(&resp, &[400], &ctx);
            assert_nothing_written(&app, before, &ctx);
            answers.push("bare 400+close".to_owned());
        }
    }

    // Framing the HTTP layer cannot trust: a bare 400 and the connection closed.
    let body = tenant_body(&unique("bad-framing"), "1");
    let cases: &[(&str, &[Header<'_>], Vec<u8>)] = &[
        (
            "Transfer-Encoding: gzip (not chunked)",
            &[("Transfer-Encoding", b"gzip")],
            body.clone().into_bytes(),
        ),
        (
            "Transfer-Encoding: chunked, gzip (chunked not last)",
            &[("Transfer-Encoding", b"chunked, gzip")],
            chunked(body.as_bytes(), 1024),
        ),
        (
            "Transfer-Encoding: identity",
            &[("Transfer-Encoding", b"identity")],
            body.clone().into_bytes(),
        ),
        (
            "Transfer-Encoding: xchunked",
            &[("Transfer-Encoding", b"xchunked")],
            chunked(body.as_bytes(), 1024),
        ),
        (
            "two Content-Length with different values",
            &[("Content-Length", b"10"), ("Content-Length", b"11")],
            body.clone().into_bytes(),
        ),
        (
            "Content-Length: 10, 11",
            &[("Content-Length", b"10, 11")],
            body.clone().into_bytes(),
        ),
        (
            "Content-Length: -1",
            &[("Content-Length", b"-1")],
            body.clone().into_bytes(),
        ),
        (
            "Content-Length: +47",
            &[("Content-Length", b"+47")],
            body.clone().into_bytes(),
        ),
        (
            "Content-Length: 0x2f",
            &[("Content-Length", b"0x2f")],
            body.clone().into_bytes(),
        ),
        (
            "Content-Length beyond u64",
            &[("Content-Length", b"99999999999999999999999")],
            body.clone().into_bytes(),
        ),
    ];
    for (label, framing, payload) in cases {
        let ctx = format!("framing: {label}");
        let mut headers: Vec<(&str, &[u8])> = admin_json(&auth).to_vec();
        headers.extend_from_slice(framing);
        let bytes = request_bytes("POST /v1/tenants HTTP/1.1", &headers, Some(payload));
        let before = written(&app);
        let resp = answer_then_close(&app.addr, &bytes, &ctx);
        assert_bare(&resp, &[400], &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push("bare 400+close".to_owned());
    }

    let read = app.get_admin(&victim);
    assert_eq!(
        read.json()["state"],
        "active",
        "no smuggled DELETE ran: {}",
        read.describe()
    );
    assert_still_serves(&app, "conflicting framing");
    println!(
        "hostile: conflicting framing: {} cases, {}; the smuggled DELETE never ran ({} total)",
        answers.len(),
        summarise(&answers),
        millis(started.elapsed())
    );
}

/// A transfer coding tenantd does not implement in front of `chunked` must not be ignored:
/// the body would be read as if it were not encoded. RFC 9112 §6.1: `501`, or a `400`, and
/// the connection closed.
#[test]
fn unknown_transfer_codings_before_chunked_are_refused() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let mut answers = Vec::new();
    for coding in ["gzip, chunked", "deflate, chunked", "x-custom, chunked"] {
        let ctx = format!("Transfer-Encoding: {coding}, body not actually encoded");
        let body = tenant_body(&unique("coded"), "1");
        let mut headers: Vec<(&str, &[u8])> = admin_json(&auth).to_vec();
        headers.push(("Transfer-Encoding", coding.as_bytes()));
        let bytes = request_bytes(
            "POST /v1/tenants HTTP/1.1",
            &headers,
            Some(&chunked(body.as_bytes(), 1024)),
        );
        let before = written(&app);
        let mut conn = Conn::open(&app.addr);
        conn.send(&bytes);
        let resp = conn.response(IO_TIMEOUT);
        let status = resp.as_ref().map(|r| r.status);
        answers.push(format!("{status:?}"));
        assert!(
            matches!(status, Some(400 | 501) | None),
            "{ctx}: expected 400 or 501 (or a plain close), got {}",
            resp.as_ref()
                .map_or("nothing".to_owned(), Response::describe)
        );
        assert!(
            conn.closes_within(CLOSE_WAIT),
            "{ctx}: the connection is closed after the refusal"
        );
        assert_nothing_written(&app, before, &ctx);
    }
    assert_still_serves(&app, "unknown transfer codings");
    println!(
        "hostile: unknown transfer codings: {} cases, {} ({} total)",
        answers.len(),
        answers.join(" / "),
        millis(started.elapsed())
    );
}
