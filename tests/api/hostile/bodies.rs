//! Hostile bodies: 10 MB bodies, invalid UTF-8 (in bodies and in the headers tenantd reads),
//! JSON nested ten thousand deep, duplicate members, and NUL, CR and LF inside JSON strings.

use std::time::{Duration, Instant};

use super::*;
use crate::wire::{HTTP_11, IO_TIMEOUT, chunked, parse_response};

/// Ten mebibytes, the size of the bodies that must be refused unread.
const TEN_MB: usize = 10 * 1024 * 1024;

/// How soon deeply nested JSON must be refused: a parser that recursed or backtracked through
/// it would take longer.
const DEEP_REFUSAL_WITHIN: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------
// Ten-megabyte bodies.
// ---------------------------------------------------------------------------------------

/// Sends `bytes` from a second thread and expects a `413` with the connection closed while
/// the client is still sending, nothing written, and the server still serving. Returns a
/// summary of the answer.
fn refused_while_sending(app: &TestApp, bytes: Vec<u8>, before: (i64, i64), ctx: &str) -> String {
    let mut conn = Conn::open(&app.addr);
    let t = Instant::now();
    let writer = conn.send_in_background(bytes);
    let resp =
        answer(&mut conn, IO_TIMEOUT).unwrap_or_else(|| panic!("{ctx}: no answer to the body"));
    let (took, sent) = (t.elapsed(), writer.written());
    assert_problem(&resp, 413, "payload_too_large", ctx);
    assert_close_header(&resp, ctx);
    assert!(
        sent < writer.total(),
        "{ctx}: the 413 came while the client was still sending ({sent} of {} bytes written)",
        writer.total()
    );
    assert_closed(&mut conn, ctx);
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
    let bytes = request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &admin_json(&auth),
        Some(&body),
    );
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
    let bytes = request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
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
    let mut bytes = request_with_host("POST", "/v1/tenants", HTTP_11, &admin_json(&auth), None);
    bytes.extend_from_slice(&garbage);
    let mut conn = Conn::open(&app.addr);
    let t = Instant::now();
    let writer = conn.send_in_background(bytes);
    let first = answer(&mut conn, IO_TIMEOUT).expect("an answer to the unframed POST");
    assert_problem(&first, 400, "malformed_json", ctx);
    let second =
        answer(&mut conn, IO_TIMEOUT).expect("the HTTP layer's answer to the bytes that follow");
    let (took, sent) = (t.elapsed(), writer.written());
    assert_bare(&second, &[400], ctx);
    assert!(
        second.header("x-request-id").is_none(),
        "{ctx}: the second answer is the HTTP layer's, not tenantd's: {}",
        second.describe()
    );
    assert!(
        sent < writer.total(),
        "{ctx}: refused while the client was still sending ({sent} of {} bytes written)",
        writer.total()
    );
    assert_closed(&mut conn, ctx);
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
    let mut bytes = request_with_host("POST", "/v1/tenants", HTTP_11, &headers, None);
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
// Invalid UTF-8.
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
        let bytes = request_with_host(
            "POST",
            "/v1/tenants",
            HTTP_11,
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
        let bytes = request_with_host(
            "GET",
            "/healthz",
            HTTP_11,
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
        let bytes = request_with_host(
            "POST",
            "/v1/tenants",
            HTTP_11,
            &headers,
            Some(body.as_bytes()),
        );
        let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
        assert_eq!(resp.status, 201, "{ctx}: a create: {}", resp.describe());
        check_replaced(&resp, "a create");
        assert_eq!(
            written(&app),
            (before.0 + 1, before.1 + 1),
            "{ctx}: the create is written once"
        );

        let bytes = request_with_host(
            "GET",
            "/v1/tenants/ten_00000000000000000000000000",
            HTTP_11,
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
    let bytes = request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &[
            ("Authorization", b"Bearer \xff\xfe\xfd"),
            ("Content-Type", b"application/json"),
            ("Connection", b"close"),
        ],
        Some(body.as_bytes()),
    );
    let resp = parse_response(&app.raw(&bytes), false).expect("a complete answer");
    assert_problem(&resp, 401, "unauthorized", "Authorization with 0xFF");
    let bytes = request_with_host(
        "POST",
        "/v1/tenants",
        HTTP_11,
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

// ---------------------------------------------------------------------------------------
// Deep nesting.
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
            took < DEEP_REFUSAL_WITHIN,
            "{ctx}: refused within {DEEP_REFUSAL_WITHIN:?}, not after {took:?}"
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
// Duplicate members.
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
        let resp = app.post_tenants(body, None);
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
// NUL, CR and LF.
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
        let resp = app.post_tenants(body, None);
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
