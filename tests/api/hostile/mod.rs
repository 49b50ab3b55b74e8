//! Hostile HTTP: what a malicious or broken client can throw at the socket. Every answer must
//! be a clean problem document (with `X-Request-Id`) from tenantd, or a bare refusal from the
//! HTTP layer and a closed connection; never a crash, a hang or a write for a refused request.
//! After each attack the same server still answers `GET /healthz` and a create.
//!
//! One file per family of attacks:
//!
//! - `bodies`: 10 MB bodies, invalid UTF-8, deep nesting, duplicate members, NUL/CR/LF in
//!   JSON strings;
//! - `framing`: NUL/CR/LF on the wire, oversized heads, HTTP/1.0, pipelining, bodies where
//!   none belong, conflicting framing, unknown transfer codings;
//! - `paths`: other spellings of a tenant's id;
//! - `connections`: slowloris, a thousand idle connections, answers decided before the body
//!   arrived.
//!
//! Each test prints one `hostile: …` line (run with `--nocapture`) with the figures that
//! ROBUSTNESS.md quotes.

mod bodies;
mod connections;
mod framing;
mod paths;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::helpers::*;
use crate::wire::{Conn, HTTP_11, IO_TIMEOUT, Response, write_request};

/// The tests that load the machine (10 MB bodies, 1,000 connections) or measure latency run
/// one at a time, so that one does not spoil the other's figures.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long a refused connection may stay open after its answer.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The `Host` of every HTTP/1.1 request of these tests.
const HOST: &[u8] = b"tenantd.test";

/// The bytes of one request: a `Host` header first for HTTP/1.1, then `headers`, and a
/// `Content-Length` for a body unless the caller framed it; nothing else (no
/// `Connection: close`), so the caller decides about keep-alive.
fn request_with_host(
    method: &str,
    target: &str,
    version: &str,
    headers: &[(&str, &[u8])],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut all: Vec<(&str, &[u8])> = Vec::with_capacity(headers.len() + 1);
    if version == HTTP_11 {
        all.push(("Host", HOST));
    }
    all.extend_from_slice(headers);
    let mut out = Vec::new();
    write_request(&mut out, method, target, version, &all, body);
    out
}

/// The next whole response on `conn`; `None` if the server closed or `timeout` passed first.
/// tenantd sends every body whole, with a `Content-Length`.
fn answer(conn: &mut Conn, timeout: Duration) -> Option<Response> {
    let resp = conn.response(timeout)?;
    assert!(
        resp.header("transfer-encoding").is_none(),
        "tenantd sends whole bodies with a Content-Length: {}",
        resp.describe()
    );
    Some(resp)
}

/// Asserts the server closes the connection soon, having sent nothing more.
fn assert_closed(conn: &mut Conn, ctx: &str) {
    assert!(
        conn.closes_within(CLOSE_WAIT),
        "{ctx}: the server keeps the connection open after its answer"
    );
    assert!(
        conn.unread().is_empty(),
        "{ctx}: nothing may follow the answer, got {:?}",
        String::from_utf8_lossy(conn.unread())
    );
}

/// Sends `bytes` on a fresh connection and returns the one answer, asserting the server then
/// closes the connection.
fn answer_then_close(addr: &str, bytes: &[u8], ctx: &str) -> Response {
    let mut conn = Conn::open(addr);
    let writer = conn.send_in_background(bytes.to_vec());
    let resp = answer(&mut conn, IO_TIMEOUT)
        .unwrap_or_else(|| panic!("{ctx}: no answer; got {:?}", lossy_head(conn.unread())));
    assert_closed(&mut conn, ctx);
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
