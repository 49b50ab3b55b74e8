//! `HEAD` is answered wherever `GET` is: the same status and headers, and not one byte of
//! body.

use crate::helpers::*;
use crate::wire::{HTTP_11, IO_TIMEOUT, Response, request_bytes};

/// `GET path` with the same credentials.
fn get(app: &TestApp, path: &str, auth: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = auth
        .map(|auth| ("Authorization", auth))
        .into_iter()
        .collect();
    app.request("GET", path, &headers, None)
}

/// Checks a `HEAD` against the `GET` of the same path: status, `Content-Type`, and
/// `Content-Length` (only its presence when `same_length` is false, for a body that changes
/// between two requests), no body, and an `X-Request-Id`.
fn assert_head_like_get(
    app: &TestApp,
    path: &str,
    auth: Option<&str>,
    same_length: bool,
    ctx: &str,
) -> Response {
    let got = get(app, path, auth);
    let (head, after_head) = app.head_on_own_connection(path, auth);
    assert_eq!(
        head.status,
        got.status,
        "{ctx}: HEAD answers the status of GET; HEAD: {}; GET: {}",
        head.describe(),
        got.describe()
    );
    assert_eq!(
        after_head, 0,
        "{ctx}: not one byte of body follows the head of a HEAD answer"
    );
    assert_eq!(
        head.header("content-type"),
        got.header("content-type"),
        "{ctx}: the Content-Type of GET; HEAD: {}",
        head.describe()
    );
    if same_length {
        assert_eq!(
            head.header("content-length"),
            got.header("content-length"),
            "{ctx}: the Content-Length of GET; HEAD: {}",
            head.describe()
        );
    } else {
        assert_eq!(
            head.header("content-length").is_some(),
            got.header("content-length").is_some(),
            "{ctx}: a Content-Length as GET has one; HEAD: {}",
            head.describe()
        );
    }
    assert!(
        head.header("x-request-id").is_some_and(|id| !id.is_empty()),
        "{ctx}: every answer carries X-Request-Id; HEAD: {}",
        head.describe()
    );
    head
}

#[test]
fn head_is_answered_wherever_get_is_with_its_headers_and_no_body() {
    let app = spawn_app();
    let created = app.create_ok(&unique("head"), "1");
    let tenant_path = format!("/v1/tenants/{}", tenant_id(&created));
    let (admin, own) = (app.admin(), bearer(&tenant_token(&created)));
    let cases: [(&str, &str, Option<&str>, bool); 6] = [
        ("HEAD /healthz", "/healthz", None, true),
        ("HEAD /readyz", "/readyz", None, true),
        ("HEAD /metrics", "/metrics", None, false),
        ("HEAD /v1/openapi.json", "/v1/openapi.json", None, true),
        (
            "HEAD of a tenant as admin",
            &tenant_path,
            Some(&admin),
            true,
        ),
        (
            "HEAD of a tenant with its own token",
            &tenant_path,
            Some(&own),
            true,
        ),
    ];
    for (ctx, path, auth, same_length) in cases {
        let head = assert_head_like_get(&app, path, auth, same_length, ctx);
        assert_eq!(head.status, 200, "{ctx}: {}", head.describe());
    }
}

#[test]
fn head_of_an_unknown_tenant_is_404_and_of_a_post_only_route_405() {
    let app = spawn_app();
    let admin = app.admin();
    let unknown = "/v1/tenants/ten_00000000000000000000000000";
    let ctx = "HEAD of an unknown tenant";
    let head = assert_head_like_get(&app, unknown, Some(&admin), false, ctx);
    assert_eq!(head.status, 404, "{ctx}: {}", head.describe());

    let ctx = "HEAD of a commit";
    let path = "/v1/tenants/ten_00000000000000000000000000/reservations/res_0/commit";
    let (head, after_head) = app.head_on_own_connection(path, Some(&admin));
    assert_eq!(head.status, 405, "{ctx}: {}", head.describe());
    assert_eq!(allow_set(&head), ["POST"], "{ctx}: the Allow header");
    assert_eq!(after_head, 0, "{ctx}: no body follows the head");
}

/// On a kept-alive connection, the answer to a `HEAD` ends with its head, whatever its
/// `Content-Length` says: the next answer on the connection follows at once.
#[test]
fn the_answer_after_a_head_on_a_kept_connection_is_the_next_requests() {
    let app = spawn_app();
    let created = app.create_ok(&unique("head-kept"), "1");
    let tenant_path = format!("/v1/tenants/{}", tenant_id(&created));
    let admin = app.admin();
    let host = app.addr.as_str();
    let mut bytes = request_bytes(
        "HEAD",
        &tenant_path,
        HTTP_11,
        &[
            ("Host", host),
            ("Authorization", admin.as_str()),
            ("X-Request-Id", "the-head"),
        ],
        None,
    );
    bytes.extend(request_bytes(
        "GET",
        "/healthz",
        HTTP_11,
        &[
            ("Host", host),
            ("X-Request-Id", "after-the-head"),
            ("Connection", "close"),
        ],
        None,
    ));
    let mut conn = app.conn();
    conn.send(&bytes);
    let head = conn
        .head_response(IO_TIMEOUT)
        .expect("an answer to the HEAD");
    assert_eq!(head.status, 200, "HEAD of a tenant: {}", head.describe());
    assert_eq!(head.header("x-request-id"), Some("the-head"));
    let next = conn
        .response(IO_TIMEOUT)
        .expect("an answer to the GET after the HEAD");
    assert_eq!(
        next.header("x-request-id"),
        Some("after-the-head"),
        "the answer after the HEAD's is the GET's, not body bytes of the HEAD's: {}",
        next.describe()
    );
    assert_eq!(next.status, 200, "GET /healthz: {}", next.describe());
    assert!(
        conn.closes_within(IO_TIMEOUT) && conn.unread().is_empty(),
        "nothing follows the two answers"
    );
}
