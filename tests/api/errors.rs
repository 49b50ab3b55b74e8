//! The error table of the contract row by row, the precedence of the rules, body limits,
//! media types, methods, request ids and the `503` of a locked database.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::helpers::*;

/// Who sends a request.
#[derive(Clone, Copy, Debug)]
enum Who {
    Nobody,
    Admin,
    /// The tenant token of the fixture's tenant `a`.
    Tenant,
    /// A well-formed but unknown token.
    Stranger,
}

/// A request of a table row. `{a}` and `{b}` in the path become the fixture's tenant ids.
struct Case {
    msg: &'static str,
    who: Who,
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
    status: u16,
    code: &'static str,
}

/// A server with two tenants, `a` and `b`, and an idempotency key bound to a third create.
struct Fixture {
    app: TestApp,
    a_id: String,
    a_name: String,
    a_token: String,
    b_id: String,
}

const BOUND_KEY: &str = "fixture-bound-key";

fn fixture() -> Fixture {
    let app = spawn_app();
    let a = app.create_ok("fixture-a", "1");
    let b = app.create_ok("fixture-b", "2");
    let bound = app.create_with_key("fixture-bound", "3", BOUND_KEY);
    assert_eq!(
        bound.status,
        201,
        "binding the fixture key: {}",
        bound.describe()
    );
    Fixture {
        a_id: tenant_id(&a),
        a_name: "fixture-a".to_owned(),
        a_token: tenant_token(&a),
        b_id: tenant_id(&b),
        app,
    }
}

impl Fixture {
    fn send(&self, case: &Case) -> Response {
        let auth = match case.who {
            Who::Nobody => None,
            Who::Admin => Some(bearer(&self.app.admin_token)),
            Who::Tenant => Some(bearer(&self.a_token)),
            Who::Stranger => Some(bearer(&random_hex(32))),
        };
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(auth) = auth.as_deref() {
            headers.push(("Authorization", auth));
        }
        for (name, value) in &case.headers {
            headers.push((name, value.as_str()));
        }
        let path = case
            .path
            .replace("{a}", &self.a_id)
            .replace("{b}", &self.b_id);
        self.app
            .request(case.method, &path, &headers, case.body.as_deref())
    }
}

fn json_ct() -> (&'static str, String) {
    ("Content-Type", "application/json".to_owned())
}

fn ct(value: &str) -> (&'static str, String) {
    ("Content-Type", value.to_owned())
}

fn key(value: &str) -> (&'static str, String) {
    ("Idempotency-Key", value.to_owned())
}

fn valid_body(name: &str) -> Option<Vec<u8>> {
    Some(tenant_body(name, "1").into_bytes())
}

/// A JSON body padded with spaces to `len` bytes.
fn padded_body(name: &str, len: usize) -> Vec<u8> {
    let mut body = tenant_body(name, "1").into_bytes();
    assert!(
        body.len() <= len,
        "the padding target is larger than the body"
    );
    body.resize(len, b' ');
    body
}

#[test]
fn every_row_of_the_error_table() {
    let f = fixture();
    let cases = vec![
        Case {
            msg: "400 malformed_json: not JSON",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: Some(b"{not json".to_vec()),
            status: 400,
            code: "malformed_json",
        },
        Case {
            msg: "400 invalid_header: a malformed Idempotency-Key",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct(), key("has space")],
            body: valid_body("row-invalid-header"),
            status: 400,
            code: "invalid_header",
        },
        Case {
            msg: "401 unauthorized: no token",
            who: Who::Nobody,
            method: "GET",
            path: "/v1/tenants/{a}",
            headers: vec![],
            body: None,
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 unauthorized: an unknown token",
            who: Who::Stranger,
            method: "GET",
            path: "/v1/tenants/{a}",
            headers: vec![],
            body: None,
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "403 forbidden: a tenant token on another tenant",
            who: Who::Tenant,
            method: "GET",
            path: "/v1/tenants/{b}",
            headers: vec![],
            body: None,
            status: 403,
            code: "forbidden",
        },
        Case {
            msg: "404 not_found: an unknown /v1 route",
            who: Who::Admin,
            method: "GET",
            path: "/v1/nope",
            headers: vec![],
            body: None,
            status: 404,
            code: "not_found",
        },
        Case {
            msg: "404 not_found: an unknown route outside /v1 needs no token",
            who: Who::Nobody,
            method: "GET",
            path: "/nope",
            headers: vec![],
            body: None,
            status: 404,
            code: "not_found",
        },
        Case {
            msg: "404 not_found: a path below a tenant",
            who: Who::Admin,
            method: "GET",
            path: "/v1/tenants/{a}/budget",
            headers: vec![],
            body: None,
            status: 404,
            code: "not_found",
        },
        Case {
            msg: "404 tenant_not_found: an unknown id",
            who: Who::Admin,
            method: "GET",
            path: "/v1/tenants/ten_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            headers: vec![],
            body: None,
            status: 404,
            code: "tenant_not_found",
        },
        Case {
            msg: "405 method_not_allowed: PUT on the collection",
            who: Who::Admin,
            method: "PUT",
            path: "/v1/tenants",
            headers: vec![],
            body: None,
            status: 405,
            code: "method_not_allowed",
        },
        Case {
            msg: "409 tenant_name_taken",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: valid_body(&f.a_name),
            status: 409,
            code: "tenant_name_taken",
        },
        Case {
            msg: "413 payload_too_large: one byte over the limit",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: Some(padded_body("row-too-large", BODY_BYTES_MAX + 1)),
            status: 413,
            code: "payload_too_large",
        },
        Case {
            msg: "415 unsupported_media_type: text/plain",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![ct("text/plain")],
            body: valid_body("row-text-plain"),
            status: 415,
            code: "unsupported_media_type",
        },
        Case {
            msg: "422 validation_failed",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: Some(tenant_body("", "1").into_bytes()),
            status: 422,
            code: "validation_failed",
        },
        Case {
            msg: "422 idempotency_key_mismatch",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct(), key(BOUND_KEY)],
            body: valid_body("not-the-bound-body"),
            status: 422,
            code: "idempotency_key_mismatch",
        },
    ];
    for case in &cases {
        let resp = f.send(case);
        assert_problem(&resp, case.status, case.code, case.msg);
    }
    assert_eq!(
        f.app.tenant_count(),
        3,
        "no error row created a tenant (only the fixture's three exist)"
    );
}

#[test]
fn the_first_broken_rule_in_contract_order_decides() {
    let f = fixture();
    let big = || Some(padded_body("too-large", 70_000));
    let bad_fields = || Some(tenant_body(" bad", "01").into_bytes());
    let taken_and_bad = Some(tenant_body(&f.a_name, "01").into_bytes());
    let cases = vec![
        // 401 first.
        Case {
            msg: "401 before 404: no token on an unknown /v1 route",
            who: Who::Nobody,
            method: "GET",
            path: "/v1/nope",
            headers: vec![],
            body: None,
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 before 405: no token, wrong method",
            who: Who::Nobody,
            method: "PUT",
            path: "/v1/tenants",
            headers: vec![],
            body: None,
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 before 404: an unknown token on an unknown id",
            who: Who::Stranger,
            method: "GET",
            path: "/v1/tenants/ten_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            headers: vec![],
            body: None,
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 before 413: an unknown token, a large body",
            who: Who::Stranger,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: big(),
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 before 415: no token, text/plain",
            who: Who::Nobody,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![ct("text/plain")],
            body: valid_body("x"),
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 before 400: no token, malformed JSON",
            who: Who::Nobody,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: Some(b"{".to_vec()),
            status: 401,
            code: "unauthorized",
        },
        Case {
            msg: "401 before 422: an unknown token, bad fields",
            who: Who::Stranger,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: bad_fields(),
            status: 401,
            code: "unauthorized",
        },
        // 403 next.
        Case {
            msg: "403 before 404: a tenant token on an unknown id",
            who: Who::Tenant,
            method: "GET",
            path: "/v1/tenants/ten_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            headers: vec![],
            body: None,
            status: 403,
            code: "forbidden",
        },
        Case {
            msg: "403 before 404: a tenant token on an unknown route",
            who: Who::Tenant,
            method: "GET",
            path: "/v1/nope",
            headers: vec![],
            body: None,
            status: 403,
            code: "forbidden",
        },
        Case {
            msg: "403 before 405: a tenant token, another method on itself",
            who: Who::Tenant,
            method: "PATCH",
            path: "/v1/tenants/{a}",
            headers: vec![],
            body: None,
            status: 403,
            code: "forbidden",
        },
        Case {
            msg: "403 before 413: a tenant token, a large body",
            who: Who::Tenant,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: big(),
            status: 403,
            code: "forbidden",
        },
        Case {
            msg: "403 before 415: a tenant token, text/plain",
            who: Who::Tenant,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![ct("text/plain")],
            body: valid_body("x"),
            status: 403,
            code: "forbidden",
        },
        Case {
            msg: "403 before 422: a tenant token, bad fields",
            who: Who::Tenant,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: bad_fields(),
            status: 403,
            code: "forbidden",
        },
        // Route next.
        Case {
            msg: "404 before 413: an unknown route, a large body",
            who: Who::Admin,
            method: "POST",
            path: "/v1/nope",
            headers: vec![json_ct()],
            body: big(),
            status: 404,
            code: "not_found",
        },
        Case {
            msg: "405 before 413: wrong method, a large body",
            who: Who::Admin,
            method: "PUT",
            path: "/v1/tenants/{a}",
            headers: vec![json_ct()],
            body: big(),
            status: 405,
            code: "method_not_allowed",
        },
        Case {
            msg: "405 before 415: wrong method, text/plain",
            who: Who::Admin,
            method: "PUT",
            path: "/v1/tenants",
            headers: vec![ct("text/plain")],
            body: valid_body("x"),
            status: 405,
            code: "method_not_allowed",
        },
        // 413 next.
        Case {
            msg: "413 before 415: a large text/plain body",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![ct("text/plain")],
            body: big(),
            status: 413,
            code: "payload_too_large",
        },
        Case {
            msg: "413 before 400: a large body with a bad key",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct(), key("bad key")],
            body: big(),
            status: 413,
            code: "payload_too_large",
        },
        // 415 next.
        Case {
            msg: "415 before 400: text/plain, a bad key, malformed JSON",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![ct("text/plain"), key("bad key")],
            body: Some(b"{".to_vec()),
            status: 415,
            code: "unsupported_media_type",
        },
        Case {
            msg: "415 before 400: no Content-Type, malformed JSON",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![],
            body: Some(b"{".to_vec()),
            status: 415,
            code: "unsupported_media_type",
        },
        Case {
            msg: "415 before 422: text/plain, bad fields",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![ct("text/plain")],
            body: bad_fields(),
            status: 415,
            code: "unsupported_media_type",
        },
        // 400: headers, then JSON.
        Case {
            msg: "400 header before 400 JSON: a bad key and malformed JSON",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct(), key("bad key")],
            body: Some(b"{".to_vec()),
            status: 400,
            code: "invalid_header",
        },
        Case {
            msg: "400 before 422: a bad key and bad fields",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct(), key("bad key")],
            body: bad_fields(),
            status: 400,
            code: "invalid_header",
        },
        Case {
            msg: "400 before 422: an array holding a bad object",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: Some(br#"[{"name":""}]"#.to_vec()),
            status: 400,
            code: "malformed_json",
        },
        // 422 before 409.
        Case {
            msg: "422 before 409: a taken name with a bad amount",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: taken_and_bad,
            status: 422,
            code: "validation_failed",
        },
        Case {
            msg: "422 before 409: a taken name with an unknown member",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct()],
            body: Some(
                serde_json::json!({"name": f.a_name, "opening_deposit_atomic": "1", "x": 1})
                    .to_string()
                    .into_bytes(),
            ),
            status: 422,
            code: "validation_failed",
        },
        Case {
            msg: "422 mismatch before 409: a bound key, another body with a taken name",
            who: Who::Admin,
            method: "POST",
            path: "/v1/tenants",
            headers: vec![json_ct(), key(BOUND_KEY)],
            body: valid_body(&f.a_name),
            status: 422,
            code: "idempotency_key_mismatch",
        },
    ];
    for case in &cases {
        let resp = f.send(case);
        assert_problem(&resp, case.status, case.code, case.msg);
    }
    assert_eq!(
        f.app.tenant_count(),
        3,
        "no precedence case created a tenant"
    );
}

/// Sends only the head of a POST announcing `content_length` bytes and returns the answer,
/// with how long it took. The body is never sent.
fn head_only_post(
    app: &TestApp,
    auth: Option<&str>,
    content_length: usize,
) -> (Response, Duration) {
    let mut head = format!(
        "POST /v1/tenants HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {content_length}\r\n",
        app.addr
    );
    if let Some(auth) = auth {
        head.push_str(&format!("Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    let started = Instant::now();
    let bytes = app.raw(head.as_bytes());
    let took = started.elapsed();
    let resp = parse_response(&bytes, false).unwrap_or_else(|e| {
        panic!(
            "no complete answer to a head-only POST ({e}): {:?}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (resp, took)
}

#[test]
fn an_oversized_content_length_is_refused_without_reading_the_body() {
    let app = spawn_app();
    let auth = app.admin();
    for length in [BODY_BYTES_MAX + 1, 10_000_000] {
        let (resp, took) = head_only_post(&app, Some(&auth), length);
        assert_problem(
            &resp,
            413,
            "payload_too_large",
            &format!("Content-Length {length} without a body sent"),
        );
        assert!(
            took < Duration::from_secs(5),
            "the 413 comes without waiting for the body (took {took:?})"
        );
    }
}

#[test]
fn authentication_is_checked_before_the_body_is_read() {
    let app = spawn_app();
    let (resp, took) = head_only_post(&app, None, 1000);
    assert_problem(
        &resp,
        401,
        "unauthorized",
        "a POST head without a token, body never sent",
    );
    assert!(
        took < Duration::from_secs(5),
        "the 401 does not wait for the body (took {took:?})"
    );
}

#[test]
fn an_oversized_chunked_body_is_413() {
    let app = spawn_app();
    let mut body = tenant_body("chunked-big", "1").into_bytes();
    body.resize(128 * 1024, b' ');
    let mut req = format!(
        "POST /v1/tenants HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        app.addr,
        app.admin()
    )
    .into_bytes();
    for chunk in body.chunks(8192) {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let bytes = app.raw(&req);
    let resp = parse_response(&bytes, false).expect("a complete answer to the chunked POST");
    assert_problem(&resp, 413, "payload_too_large", "a 128 KiB chunked body");
    assert_eq!(
        app.tenant_count(),
        0,
        "the oversized chunked body created nothing"
    );
}

#[test]
fn a_body_of_exactly_the_limit_is_accepted_chunked_or_not() {
    let app = spawn_app();
    let body = padded_body("exactly-the-limit", BODY_BYTES_MAX);
    let auth = app.admin();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let resp = app.request("POST", "/v1/tenants", &headers, Some(&body));
    assert_eq!(
        resp.status,
        201,
        "a body of exactly 65,536 bytes: {}",
        resp.describe()
    );

    let small = tenant_body("small-chunked", "1");
    let mut req = format!(
        "POST /v1/tenants HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: {auth}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        app.addr
    )
    .into_bytes();
    for chunk in small.as_bytes().chunks(10) {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let resp = parse_response(&app.raw(&req), false).expect("a complete answer");
    assert_eq!(
        resp.status,
        201,
        "a small chunked body: {}",
        resp.describe()
    );
}

#[test]
fn media_types_other_than_json_are_415() {
    let app = spawn_app();
    let auth = app.admin();
    let refused: Vec<(&str, Vec<&str>)> = vec![
        ("no Content-Type", vec![]),
        ("text/plain", vec!["text/plain"]),
        ("a vendor +json type", vec!["application/vnd.x+json"]),
        ("problem+json", vec!["application/problem+json"]),
        ("a form", vec!["application/x-www-form-urlencoded"]),
        ("a similar name", vec!["application/jsonx"]),
        (
            "a latin-1 charset",
            vec!["application/json; charset=latin-1"],
        ),
        ("a UTF-16 charset", vec!["application/json; charset=utf-16"]),
        ("an empty value", vec![""]),
        (
            "two Content-Type headers",
            vec!["application/json", "application/json"],
        ),
    ];
    for (msg, values) in refused {
        let mut headers = vec![("Authorization", auth.as_str())];
        headers.extend(values.iter().map(|v| ("Content-Type", *v)));
        let body = tenant_body(&unique("media"), "1");
        let resp = app.request("POST", "/v1/tenants", &headers, Some(body.as_bytes()));
        assert_problem(&resp, 415, "unsupported_media_type", msg);
    }
    assert_eq!(
        app.tenant_count(),
        0,
        "no refused media type created a tenant"
    );

    let accepted = [
        ("the plain type", "application/json"),
        ("a utf-8 charset", "application/json; charset=utf-8"),
        ("an upper-case type", "Application/JSON"),
        (
            "an upper-case charset value",
            "application/json;charset=UTF-8",
        ),
    ];
    for (msg, value) in accepted {
        let body = tenant_body(&unique("media-ok"), "1");
        let resp = app.request(
            "POST",
            "/v1/tenants",
            &[("Authorization", auth.as_str()), ("Content-Type", value)],
            Some(body.as_bytes()),
        );
        assert_eq!(resp.status, 201, "{msg} ({value:?}): {}", resp.describe());
    }
}

#[test]
fn known_paths_with_other_methods_are_405_with_allow() {
    let app = spawn_app();
    let id = tenant_id(&app.create_ok("methods", "1"));
    let auth = app.admin();
    let tenant_path = format!("/v1/tenants/{id}");
    let cases: Vec<(&str, &str, &str, Vec<&str>)> = vec![
        ("GET on the collection", "GET", "/v1/tenants", vec!["POST"]),
        ("PUT on the collection", "PUT", "/v1/tenants", vec!["POST"]),
        (
            "DELETE on the collection",
            "DELETE",
            "/v1/tenants",
            vec!["POST"],
        ),
        (
            "POST on a tenant",
            "POST",
            &tenant_path,
            vec!["DELETE", "GET", "HEAD"],
        ),
        (
            "PUT on a tenant",
            "PUT",
            &tenant_path,
            vec!["DELETE", "GET", "HEAD"],
        ),
        (
            "PATCH on a tenant",
            "PATCH",
            &tenant_path,
            vec!["DELETE", "GET", "HEAD"],
        ),
        ("POST on /healthz", "POST", "/healthz", vec!["GET", "HEAD"]),
        (
            "DELETE on /readyz",
            "DELETE",
            "/readyz",
            vec!["GET", "HEAD"],
        ),
        ("PUT on /metrics", "PUT", "/metrics", vec!["GET", "HEAD"]),
        (
            "POST on the OpenAPI document",
            "POST",
            "/v1/openapi.json",
            vec!["GET", "HEAD"],
        ),
        (
            "HEAD on the collection",
            "HEAD",
            "/v1/tenants",
            vec!["POST"],
        ),
    ];
    for (msg, method, path, allow) in cases {
        let resp = app.request(method, path, &[("Authorization", auth.as_str())], None);
        assert_eq!(resp.status, 405, "{msg}: {}", resp.describe());
        if method != "HEAD" {
            assert_problem(&resp, 405, "method_not_allowed", msg);
        }
        assert_eq!(allow_set(&resp), allow, "{msg}: the Allow header");
    }
    assert_eq!(
        app.get_admin(&id).json()["state"],
        "active",
        "no 405 changed the tenant"
    );
}

#[test]
fn a_valid_client_request_id_is_echoed() {
    let app = spawn_app();
    let long = "r".repeat(128);
    let cases = [
        ("a simple id", "client-req-1"),
        ("128 characters", long.as_str()),
        ("visible punctuation", "!#$%&'*+-.^_`|~:/?@[]{}\"\\"),
    ];
    for (msg, id) in cases {
        let ok = app.request("GET", "/healthz", &[("X-Request-Id", id)], None);
        assert_eq!(
            ok.header("x-request-id"),
            Some(id),
            "{msg}: echoed on a success"
        );
        let err = app.request("GET", "/nope", &[("X-Request-Id", id)], None);
        assert_eq!(
            err.header("x-request-id"),
            Some(id),
            "{msg}: echoed on an error"
        );
        let problem = assert_problem(&err, 404, "not_found", msg);
        assert_eq!(
            problem["request_id"], id,
            "{msg}: the problem body carries it too"
        );
    }
}

#[test]
fn an_invalid_client_request_id_is_replaced_silently() {
    let app = spawn_app();
    let long = "r".repeat(129);
    let cases = [
        ("129 characters", long.as_str()),
        ("an inner space", "has space"),
        ("an empty value", ""),
        ("non-ASCII", "zähler"),
        ("a tab", "a\tb"),
    ];
    for (msg, sent) in cases {
        let resp = app.request("GET", "/nope", &[("X-Request-Id", sent)], None);
        let problem = assert_problem(&resp, 404, "not_found", msg);
        let got = resp.header("x-request-id").unwrap_or_default();
        assert_ne!(got, sent, "{msg}: the invalid id is replaced");
        assert!(
            !got.is_empty() && got.len() <= 128 && got.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "{msg}: the new id is 1 to 128 visible ASCII characters: {got:?}"
        );
        assert_eq!(
            problem["request_id"], got,
            "{msg}: the body carries the new id"
        );
    }
    let first = app.get_path("/healthz");
    let second = app.get_path("/healthz");
    assert_ne!(
        first.header("x-request-id"),
        second.header("x-request-id"),
        "generated request ids differ"
    );
}

#[test]
fn a_locked_database_gives_503_with_retry_after() {
    /// How long the test's own connection holds the write lock: past the server's 1 s busy
    /// timeout, so a server that waited longer would succeed and fail this test.
    const LOCK_HELD: Duration = Duration::from_millis(1300);

    let app = spawn_app();
    app.create_ok("before-the-lock", "1");
    let events_before = app.audit_count();
    let tenants_before = app.tenant_count();

    // Another process (here: the test) takes the write lock and drops it from its own
    // thread after LOCK_HELD, while the create below is waiting for it.
    let (locked_tx, locked_rx) = mpsc::channel::<()>();
    let (released_tx, released_rx) = mpsc::channel::<()>();
    let db_path = app.db_path.clone();
    let holder = thread::spawn(move || {
        let locker = open_rw(&db_path);
        locker
            .execute_batch("BEGIN EXCLUSIVE")
            .expect("taking the write lock from the test");
        locked_tx
            .send(())
            .expect("telling the test the lock is held");
        thread::sleep(LOCK_HELD);
        locker
            .execute_batch("ROLLBACK")
            .expect("releasing the lock");
        drop(locker);
        let _ = released_tx.send(());
    });
    locked_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the test's connection took the write lock within 10 s");

    let key = format!("locked-key-{}", random_hex(4));
    let started = Instant::now();
    let resp = app.create_with_key("during-the-lock", "1", &key);
    let answered = Instant::now();

    released_rx
        .recv_timeout(LOCK_HELD + Duration::from_secs(10))
        .expect("the holding thread released the lock");
    holder.join().expect("the lock-holding thread");

    assert_problem(
        &resp,
        503,
        "unavailable",
        "a keyed create while another process holds the write lock for 1.3 s",
    );
    assert_eq!(
        resp.header("retry-after"),
        Some("1"),
        "the 503 says when to retry: {}",
        resp.describe()
    );
    let waited = answered - started;
    assert!(
        waited >= Duration::from_millis(900),
        "the server waits about 1 s for the lock before giving up (waited {waited:?})"
    );
    let db = app.db();
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tenants WHERE name = 'during-the-lock'"
        ),
        0,
        "the refused create wrote no tenant row"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM tenants"),
        tenants_before,
        "the refused create wrote no row at all"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM audit_events"),
        events_before,
        "the refused create appended no audit event"
    );
    assert_eq!(
        db.query_row(
            "SELECT count(*) FROM idempotency_keys WHERE key = ?1",
            [&key],
            |r| r.get::<_, i64>(0)
        )
        .expect("counting the key's records"),
        0,
        "the refused create bound its Idempotency-Key to nothing"
    );
    drop(db);

    let retry = app.create_with_key("during-the-lock", "1", &key);
    assert_eq!(
        retry.status,
        201,
        "a retry with the same key and body once the lock is gone creates: {}",
        retry.describe()
    );
    assert_eq!(
        retry.header("idempotent-replayed"),
        None,
        "the retry is a first create, not a replay of the 503: {}",
        retry.describe()
    );
    assert_eq!(
        app.tenant_count(),
        tenants_before + 1,
        "the retry made exactly one tenant"
    );
    assert_eq!(
        app.audit_count(),
        events_before + 1,
        "the retry appended exactly one audit event"
    );
}

/// The body-read limit of the `408` tests, in milliseconds.
const BODY_READ_TIMEOUT_MS: u64 = 600;

fn slow_body_app() -> TestApp {
    AppBuilder::new()
        .arg("--body-read-timeout-ms")
        .arg(&BODY_READ_TIMEOUT_MS.to_string())
        .spawn()
}

/// Sends the head of an admin create announcing `body.len()` bytes, then `body` in `pieces`
/// with `gap` between them (stopping early if the server answers), then waits for the answer.
/// Returns the answer and the time from the end of the head to the answer's end.
fn trickled_post(
    app: &TestApp,
    content_length: usize,
    pieces: &[&[u8]],
    gap: Duration,
) -> (Response, Duration) {
    let mut stream = TcpStream::connect(&app.addr).expect("connecting");
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .expect("a write timeout");
    let head = format!(
        "POST /v1/tenants HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n",
        app.addr,
        app.admin()
    );
    stream.write_all(head.as_bytes()).expect("sending the head");
    let started = Instant::now();
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut closed = false;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            // The pause between pieces is spent listening, so an early answer stops the
            // sending rather than racing it.
            stream.set_read_timeout(Some(gap)).expect("a read timeout");
            match stream.read(&mut chunk) {
                Ok(0) => closed = true,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("reading during the trickle: {e}"),
            }
            if closed || !received.is_empty() {
                break;
            }
        }
        if stream.write_all(piece).is_err() {
            break;
        }
    }
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .expect("a read timeout");
    while !closed {
        match stream.read(&mut chunk) {
            Ok(0) => closed = true,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A reset after the answer still leaves the answer usable.
            Err(_) if !received.is_empty() => closed = true,
            Err(e) => panic!(
                "no answer within {IO_TIMEOUT:?} of the end of the body ({e}); sent {} of {content_length} bytes",
                pieces.iter().map(|p| p.len()).sum::<usize>()
            ),
        }
    }
    let took = started.elapsed();
    let resp = parse_response(&received, false).unwrap_or_else(|e| {
        panic!(
            "no complete answer to a slow POST ({e}): {:?}",
            String::from_utf8_lossy(&received)
        )
    });
    (resp, took)
}

#[test]
fn a_body_that_stops_arriving_is_408_request_timeout() {
    let app = slow_body_app();
    let body = padded_body("unfinished", 50);
    let (resp, took) = trickled_post(&app, 50, &[&body[..20]], Duration::ZERO);
    assert_problem(
        &resp,
        408,
        "request_timeout",
        "Content-Length: 50 with only 20 bytes of the body sent",
    );
    let limit = Duration::from_millis(BODY_READ_TIMEOUT_MS);
    assert!(
        took >= limit - Duration::from_millis(50),
        "the 408 waits for --body-read-timeout-ms ({limit:?}) first (took {took:?})"
    );
    assert!(
        took < Duration::from_secs(5),
        "the 408 comes soon after --body-read-timeout-ms ({limit:?}), not after the default \
         10 s (took {took:?})"
    );
    assert_eq!(app.tenant_count(), 0, "the unfinished body created nothing");
    let ok = app.create("after-the-timeout", "1");
    assert_eq!(
        ok.status,
        201,
        "the server still serves others: {}",
        ok.describe()
    );
}

#[test]
fn the_body_read_timeout_bounds_the_whole_body_not_each_pause() {
    let app = slow_body_app();
    let limit = Duration::from_millis(BODY_READ_TIMEOUT_MS);

    // Five pieces 40 ms apart: slow, but complete well within the limit.
    let body = padded_body("slow-but-complete", 100);
    let pieces: Vec<&[u8]> = body.chunks(20).collect();
    let (resp, took) = trickled_post(&app, body.len(), &pieces, Duration::from_millis(40));
    assert_eq!(
        resp.status,
        201,
        "a body sent in 5 pieces over {took:?}, within the {limit:?} limit: {}",
        resp.describe()
    );
    assert_eq!(
        resp.json()["name"],
        "slow-but-complete",
        "the trickled body"
    );

    // Ten pieces 100 ms apart: no pause reaches the limit, the whole body does.
    let body = padded_body("too-slow-overall", 100);
    let pieces: Vec<&[u8]> = body.chunks(10).collect();
    let (resp, took) = trickled_post(&app, body.len(), &pieces, Duration::from_millis(100));
    assert_problem(
        &resp,
        408,
        "request_timeout",
        "a body in 10 pieces 100 ms apart, over a 600 ms limit",
    );
    assert!(
        took < Duration::from_secs(5),
        "the 408 comes soon after the limit (took {took:?})"
    );
    assert_eq!(
        count(
            &app.db(),
            "SELECT count(*) FROM tenants WHERE name = 'too-slow-overall'"
        ),
        0,
        "the timed-out body created nothing"
    );
}
