//! RFC 9457 problem bodies, checked against the contract.

use serde_json::Value;

use crate::wire::Response;

/// The `Retry-After` of every `503`, in seconds: the server's busy timeout.
pub const RETRY_AFTER_S: &str = "1";

/// The RFC 9110 reason phrase the problem `title` must carry.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => panic!("no reason phrase listed for {status}"),
    }
}

/// Checks one RFC 9457 error response against the contract and returns its body.
pub fn assert_problem(resp: &Response, status: u16, code: &str, ctx: &str) -> Value {
    assert_eq!(
        resp.status,
        status,
        "{ctx}: expected status {status} ({code}), got {}",
        resp.describe()
    );
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type
            .to_ascii_lowercase()
            .starts_with("application/problem+json"),
        "{ctx}: an error must be application/problem+json, got {content_type:?}"
    );
    let body = resp.json();
    assert_eq!(body["type"], "about:blank", "{ctx}: problem type; {body}");
    assert_eq!(
        body["title"],
        reason_phrase(status),
        "{ctx}: problem title is the RFC 9110 phrase; {body}"
    );
    assert_eq!(
        body["status"], status,
        "{ctx}: problem status member; {body}"
    );
    assert_eq!(body["code"], code, "{ctx}: problem code; {body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        !detail.trim().is_empty(),
        "{ctx}: detail must be a non-empty sentence; {body}"
    );
    let request_id = resp.header("x-request-id").unwrap_or_default();
    assert!(
        !request_id.is_empty(),
        "{ctx}: every response carries X-Request-Id; {}",
        resp.describe()
    );
    assert_eq!(
        body["request_id"], request_id,
        "{ctx}: request_id in the body equals the X-Request-Id header"
    );
    if code == "validation_failed" || code == "invalid_query" {
        let errors = body["errors"].as_array();
        assert!(
            errors.is_some_and(|e| !e.is_empty()),
            "{ctx}: {code} lists its errors; {body}"
        );
    } else {
        assert!(
            body.get("errors").is_none(),
            "{ctx}: only validation_failed and invalid_query carry errors; {body}"
        );
    }
    if status == 401 {
        assert_eq!(
            resp.header("www-authenticate"),
            Some("Bearer realm=\"tenantd\""),
            "{ctx}: 401 carries WWW-Authenticate"
        );
    }
    if status == 405 {
        assert!(
            resp.header("allow").is_some(),
            "{ctx}: 405 carries Allow; {}",
            resp.describe()
        );
    }
    if status == 408 {
        assert!(
            resp.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "{ctx}: 408 carries Connection: close; {}",
            resp.describe()
        );
    }
    if status == 503 {
        assert_eq!(
            resp.header("retry-after"),
            Some(RETRY_AFTER_S),
            "{ctx}: 503 carries Retry-After: {RETRY_AFTER_S}"
        );
    }
    body
}

/// The `field` members of a validation problem's `errors`, sorted, after checking every
/// entry has a non-empty message.
pub fn error_fields(body: &Value, ctx: &str) -> Vec<String> {
    let errors = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: no errors array in {body}"));
    let mut fields: Vec<String> = errors
        .iter()
        .map(|e| {
            let message = e["message"].as_str().unwrap_or_default();
            assert!(
                !message.trim().is_empty(),
                "{ctx}: every error entry has a message; {e}"
            );
            e["field"]
                .as_str()
                .unwrap_or_else(|| panic!("{ctx}: error entry without field: {e}"))
                .to_owned()
        })
        .collect();
    fields.sort();
    fields
}

/// The set of methods of an `Allow` header, sorted.
pub fn allow_set(resp: &Response) -> Vec<String> {
    let mut methods: Vec<String> = resp
        .header("allow")
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .collect();
    methods.sort();
    methods
}

/// Asserts `400 invalid_query` whose `errors` name exactly `fields` (each list's bad queries).
pub fn assert_invalid_query(resp: &Response, fields: &[&str], ctx: &str) {
    assert_eq!(resp.status, 400, "{ctx}: {}", resp.describe());
    let media = resp.header("content-type").unwrap_or_default();
    assert!(
        media.starts_with("application/problem+json"),
        "{ctx}: {media:?}"
    );
    let body = resp.json();
    let expected = [
        ("type", serde_json::json!("about:blank")),
        ("title", serde_json::json!(reason_phrase(400))),
        ("status", serde_json::json!(400)),
        ("code", serde_json::json!("invalid_query")),
        ("request_id", serde_json::json!(resp.header("x-request-id"))),
    ];
    super::shapes::assert_fields(&body, &expected, ctx);
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(!detail.trim().is_empty(), "{ctx}: a detail: {body}");
    let mut named = error_fields(&body, ctx);
    named.dedup();
    let mut expected: Vec<&str> = fields.to_vec();
    expected.sort_unstable();
    assert_eq!(named, expected, "{ctx}: errors name each bad parameter");
}
