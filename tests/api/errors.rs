//! The error table of the contract row by row, the precedence of the rules, body limits,
//! media types, methods and request ids.

use std::time::{Duration, Instant};

use crate::helpers::*;
use crate::wire::{Response, chunked};

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
    let length = content_length.to_string();
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Content-Length", length.as_str()),
    ];
    if let Some(auth) = auth {
        headers.push(("Authorization", auth));
    }
    let started = Instant::now();
    let resp = app.request("POST", "/v1/tenants", &headers, None);
    (resp, started.elapsed())
}

/// How soon an answer that needs no body must come: far less than a client sending the body
/// slowly would take, with room for a busy machine.
const NO_BODY_ANSWER_WITHIN: Duration = Duration::from_secs(5);

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
            took < NO_BODY_ANSWER_WITHIN,
            "the 413 comes within {NO_BODY_ANSWER_WITHIN:?}, without waiting for the body \
             (took {took:?})"
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
        took < NO_BODY_ANSWER_WITHIN,
        "the 401 comes within {NO_BODY_ANSWER_WITHIN:?}, without waiting for the body \
         (took {took:?})"
    );
}

#[test]
fn an_oversized_chunked_body_is_413() {
    const BODY_BYTES: usize = 128 * 1024;
    let app = spawn_app();
    let body = padded_body("chunked-big", BODY_BYTES);
    let auth = app.admin();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Transfer-Encoding", "chunked"),
    ];
    let framed = chunked(&body, 8192);
    let resp = app.request("POST", "/v1/tenants", &headers, Some(&framed));
    assert_problem(
        &resp,
        413,
        "payload_too_large",
        &format!("a chunked body of {BODY_BYTES} bytes, over the {BODY_BYTES_MAX}-byte limit"),
    );
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
        "a body of exactly {BODY_BYTES_MAX} bytes: {}",
        resp.describe()
    );

    let small = tenant_body("small-chunked", "1");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Transfer-Encoding", "chunked"),
    ];
    let framed = chunked(small.as_bytes(), 10);
    let resp = app.request("POST", "/v1/tenants", &headers, Some(&framed));
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
        (
            "PUT on the collection",
            "PUT",
            "/v1/tenants",
            vec!["GET", "HEAD", "POST"],
        ),
        (
            "DELETE on the collection",
            "DELETE",
            "/v1/tenants",
            vec!["GET", "HEAD", "POST"],
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
            "GET of a commit",
            "GET",
            "/v1/tenants/ten_00000000000000000000000000/reservations/res_x/commit",
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
    let longest = "r".repeat(REQUEST_ID_BYTES_MAX);
    let longest_msg = format!("{REQUEST_ID_BYTES_MAX} characters");
    let cases = [
        ("a simple id", "client-req-1"),
        (longest_msg.as_str(), longest.as_str()),
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
    let long = "r".repeat(REQUEST_ID_BYTES_MAX + 1);
    let long_msg = format!("{} characters", REQUEST_ID_BYTES_MAX + 1);
    let cases = [
        (long_msg.as_str(), long.as_str()),
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
            !got.is_empty()
                && got.len() <= REQUEST_ID_BYTES_MAX
                && got.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "{msg}: the new id is 1 to {REQUEST_ID_BYTES_MAX} visible ASCII characters: {got:?}"
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
