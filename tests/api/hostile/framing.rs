//! Hostile framing: NUL, CR and LF on the wire, oversized heads, HTTP/1.0, pipelining, bodies
//! where none belong, conflicting framing and unknown transfer codings.

use std::time::{Duration, Instant};

use super::*;
use crate::wire::{HTTP_10, HTTP_11, IO_TIMEOUT, chunked};

/// A header name and its raw value bytes.
type Header<'a> = (&'a str, &'a [u8]);

/// The most header fields the HTTP layer takes in one head.
const HEADERS_MAX: usize = 100;

/// How soon an oversized head must be refused: at once, not after a timeout.
const REFUSAL_WITHIN: Duration = Duration::from_secs(5);

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
// Oversized heads.
// ---------------------------------------------------------------------------------------

#[test]
fn oversized_heads_are_refused_by_the_http_layer_and_closed() {
    let _serial = serial();
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let big = "a".repeat(100 * 1024);
    // A GET of `n` header fields in all: `Host`, then `X-H0`, `X-H1`, … and, if `close`,
    // `Connection: close` last.
    let many = |n: usize, close: bool| -> Vec<u8> {
        let names: Vec<String> = (0..n - 1 - usize::from(close))
            .map(|i| format!("X-H{i}"))
            .collect();
        let mut headers: Vec<(&str, &[u8])> = names
            .iter()
            .map(|name| (name.as_str(), &b"v"[..]))
            .collect();
        if close {
            headers.push(("Connection", b"close"));
        }
        request_with_host("GET", "/healthz", HTTP_11, &headers, None)
    };
    let too_many = format!("{} headers", HEADERS_MAX + 1);
    let as_many = format!("exactly {HEADERS_MAX} headers");
    let body = tenant_body(&unique("big-head"), "1");
    let refused: Vec<(&str, Vec<u8>)> = vec![
        (
            "100 KB URL (query)",
            request_with_host("GET", &format!("/healthz?pad={big}"), HTTP_11, &[], None),
        ),
        (
            "100 KB URL (path) on a create",
            request_with_host(
                "POST",
                &format!("/v1/tenants/{big}"),
                HTTP_11,
                &admin_json(&auth),
                Some(body.as_bytes()),
            ),
        ),
        (
            "100 KB header on a create",
            request_with_host(
                "POST",
                "/v1/tenants",
                HTTP_11,
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
            request_with_host(
                "GET",
                "/healthz",
                HTTP_11,
                &[("Authorization", format!("Bearer {big}").as_bytes())],
                None,
            ),
        ),
        (too_many.as_str(), many(HEADERS_MAX + 1, false)),
        ("1,000 headers", many(1000, false)),
        (
            "90 headers of 1 KB (90 KB in all)",
            request_with_host(
                "GET",
                "/healthz",
                HTTP_11,
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
            t.elapsed() < REFUSAL_WITHIN,
            "{ctx}: refused without waiting, within {REFUSAL_WITHIN:?}"
        );
    }

    // Within the bounds: served.
    let sixty = "b".repeat(60 * 1024);
    let accepted: Vec<(&str, Vec<u8>)> = vec![
        (
            "a 60 KB header",
            request_with_host(
                "GET",
                "/healthz",
                HTTP_11,
                &[("X-Pad", sixty.as_bytes()), ("Connection", b"close")],
                None,
            ),
        ),
        (
            "a 60 KB URL",
            request_with_host(
                "GET",
                &format!("/healthz?pad={sixty}"),
                HTTP_11,
                &[("Connection", b"close")],
                None,
            ),
        ),
        (as_many.as_str(), many(HEADERS_MAX, true)),
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
// HTTP/1.0.
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
    let bytes = request_with_host(
        "GET",
        &format!("/v1/tenants/{id}"),
        HTTP_10,
        &[("Authorization", auth.as_bytes())],
        None,
    );
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = answer(&mut conn, IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    assert_eq!(resp.json()["id"], id.as_str(), "{ctx}");
    assert!(resp.header("x-request-id").is_some(), "{ctx}");
    assert!(
        conn.closes_within(close_wait) && conn.unread().is_empty(),
        "{ctx}: closed after the answer"
    );
    answers.push("GET 200+close");

    let ctx = "HTTP/1.0 POST with Content-Length";
    let before = written(&app);
    let name = unique("http10-create");
    let body = tenant_body(&name, "10");
    let bytes = request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_10,
        &admin_json(&auth),
        Some(body.as_bytes()),
    );
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = answer(&mut conn, IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 201, "{ctx}: {}", resp.describe());
    assert_eq!(resp.json()["name"], name.as_str(), "{ctx}");
    assert!(
        conn.closes_within(close_wait) && conn.unread().is_empty(),
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
    let bytes = request_with_host(
        "GET",
        "/v1/tenants/ten_00000000000000000000000000",
        HTTP_10,
        &[("Authorization", auth.as_bytes())],
        None,
    );
    let mut conn = Conn::open(&app.addr);
    conn.send(&bytes);
    let resp = answer(&mut conn, IO_TIMEOUT).expect("an answer");
    assert_problem(&resp, 404, "tenant_not_found", ctx);
    assert!(
        conn.closes_within(close_wait) && conn.unread().is_empty(),
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
    let bytes = request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_10,
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
    conn.send(&request_with_host(
        "GET",
        "/healthz",
        HTTP_10,
        &[("Connection", b"keep-alive")],
        None,
    ));
    let resp = answer(&mut conn, IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    assert!(
        resp.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("keep-alive")),
        "{ctx}: the answer confirms keep-alive: {}",
        resp.describe()
    );
    conn.send(&request_with_host(
        "GET",
        &format!("/v1/tenants/{id}"),
        HTTP_10,
        &[("Authorization", auth.as_bytes())],
        None,
    ));
    let resp = answer(&mut conn, IO_TIMEOUT).expect("a second answer on the kept connection");
    assert_eq!(
        resp.status,
        200,
        "{ctx}: second request: {}",
        resp.describe()
    );
    assert_eq!(resp.json()["id"], id.as_str(), "{ctx}");
    assert!(
        conn.closes_within(close_wait) && conn.unread().is_empty(),
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
// Pipelining.
// ---------------------------------------------------------------------------------------

#[test]
fn pipelined_requests_are_answered_in_order() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let existing = tenant_id(&app.create_ok(&unique("pipe-existing"), "1"));
    let name = unique("pipe");
    let body = tenant_body(&name, "5");
    let existing_path = format!("/v1/tenants/{existing}");
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
    bytes.extend(request_with_host(
        "GET",
        "/healthz",
        HTTP_11,
        &with_id("pipe-1", false),
        None,
    ));
    bytes.extend(request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &create_headers("pipe-2"),
        Some(body.as_bytes()),
    ));
    bytes.extend(request_with_host(
        "GET",
        &existing_path,
        HTTP_11,
        &auth_headers("pipe-3", false),
        None,
    ));
    bytes.extend(request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &create_headers("pipe-4"),
        Some(body.as_bytes()),
    ));
    bytes.extend(request_with_host(
        "DELETE",
        "/v1/tenants/ten_00000000000000000000000000",
        HTTP_11,
        &auth_headers("pipe-5", true),
        None,
    ));
    let mut conn = Conn::open(&app.addr);
    let t = Instant::now();
    conn.send(&bytes);
    let mut got = Vec::new();
    for i in 1..=5 {
        let resp = answer(&mut conn, IO_TIMEOUT)
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
    assert_closed(
        &mut conn,
        "after the fifth pipelined answer (Connection: close)",
    );
    assert_eq!(
        written(&app),
        (before.0 + 1, before.1 + 1),
        "exactly the one create of the pipeline is written"
    );

    // A pipeline with bad requests inside: each answered in turn; the 413 ends the
    // connection (its body is not read), so the fifth request is never answered.
    let before = written(&app);
    let mut bytes = Vec::new();
    bytes.extend(request_with_host(
        "GET",
        "/healthz",
        HTTP_11,
        &with_id("bad-1", false),
        None,
    ));
    bytes.extend(request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &create_headers("bad-2"),
        Some(b"{\"name\":"),
    ));
    bytes.extend(request_with_host(
        "GET",
        &existing_path,
        HTTP_11,
        &auth_headers("bad-3", false),
        None,
    ));
    let mut oversized = create_headers("bad-4");
    oversized.push(("Content-Length", b"70000"));
    bytes.extend(request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &oversized,
        None,
    ));
    bytes.extend(request_with_host(
        "GET",
        "/healthz",
        HTTP_11,
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
        let resp = answer(&mut conn, IO_TIMEOUT).unwrap_or_else(|| panic!("{ctx}: missing"));
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
    assert_closed(&mut conn, "after the 413 in a pipeline");
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
// Bodies where none belong, and conflicting framing.
// ---------------------------------------------------------------------------------------

/// A new tenant, and a request that would tombstone it, to hide inside another request.
fn smuggling_victim(app: &TestApp, auth: &str, prefix: &str) -> (String, Vec<u8>) {
    let victim = tenant_id(&app.create_ok(&unique(prefix), "1"));
    let smuggled = request_with_host(
        "DELETE",
        &format!("/v1/tenants/{victim}"),
        HTTP_11,
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
    let follow_up = request_with_host(
        "GET",
        "/healthz",
        HTTP_11,
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
        let mut bytes = request_with_host(
            "GET",
            &format!("/v1/tenants/{victim}"),
            HTTP_11,
            &headers,
            Some(body),
        );
        bytes.extend_from_slice(&follow_up);
        let mut conn = Conn::open(&app.addr);
        conn.send(&bytes);
        let resp = answer(&mut conn, IO_TIMEOUT).expect("an answer to the GET");
        assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
        assert_eq!(resp.header("x-request-id"), Some("carrier"), "{ctx}");
        assert_eq!(resp.json()["id"], victim.as_str(), "{ctx}");
        // The body is skipped: the next answer is the follow-up's, or the connection closes.
        let next = match answer(&mut conn, IO_TIMEOUT) {
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
        assert_closed(&mut conn, &ctx);
        assert_nothing_written(&app, before, &ctx);
        answers.push(format!("GET+{framing} body: 200 {next}"));
    }

    // DELETE with a body: the body is ignored, the tombstone is the only write.
    let target = tenant_id(&app.create_ok(&unique("delete-with-body"), "1"));
    let before = written(&app);
    let mut bytes = request_with_host(
        "DELETE",
        &format!("/v1/tenants/{target}"),
        HTTP_11,
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
    let resp = answer(&mut conn, IO_TIMEOUT).expect("an answer to the DELETE");
    let ctx = "DELETE with a body holding a request";
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    assert_eq!(resp.json()["state"], "tombstoned", "{ctx}");
    if let Some(next) = answer(&mut conn, IO_TIMEOUT) {
        assert_eq!(next.header("x-request-id"), Some("follow-up"), "{ctx}");
    }
    assert_closed(&mut conn, ctx);
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
        let bytes = request_with_host("POST", "/v1/tenants", HTTP_11, &headers, Some(&payload));
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
        let bytes = request_with_host("POST", "/v1/tenants", HTTP_11, &headers, Some(payload));
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
        let bytes = request_with_host(
            "POST",
            "/v1/tenants",
            HTTP_11,
            &headers,
            Some(&chunked(body.as_bytes(), 1024)),
        );
        let before = written(&app);
        let mut conn = Conn::open(&app.addr);
        conn.send(&bytes);
        let resp = answer(&mut conn, IO_TIMEOUT);
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
