//! `/healthz`, `/readyz` and the OpenAPI document.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

#[test]
fn healthz_and_readyz_answer_without_a_token() {
    let app = spawn_app();
    let cases = [
        ("/healthz", json!({ "status": "ok" })),
        ("/readyz", json!({ "status": "ready" })),
    ];
    for (path, expected) in cases {
        let resp = app.get_path(path);
        assert_eq!(resp.status, 200, "GET {path}: {}", resp.describe());
        assert!(
            resp.header("content-type")
                .unwrap_or_default()
                .to_ascii_lowercase()
                .starts_with("application/json"),
            "GET {path} is application/json: {}",
            resp.describe()
        );
        assert_eq!(resp.json(), expected, "GET {path} body");
        assert!(
            resp.header("x-request-id").is_some_and(|v| !v.is_empty()),
            "GET {path} carries X-Request-Id"
        );
    }
}

/// How soon `/readyz` must answer while the database is locked: the server's busy timeout
/// (1 s) and a margin for a busy machine.
const READY_ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// Ready means a write could begin now: while another process holds the database's write
/// lock, `/readyz` says `503`, and once the lock is gone, `200`.
#[test]
fn readyz_is_503_while_another_process_holds_the_write_lock() {
    let app = spawn_app();
    let before = app.get_path("/readyz");
    assert_eq!(before.status, 200, "ready at first: {}", before.describe());

    let locker = open_rw(&app.db_path);
    locker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("taking the write lock from the test");
    let started = Instant::now();
    let locked = app.get_path("/readyz");
    let took = started.elapsed();
    assert_problem(
        &locked,
        503,
        "unavailable",
        "GET /readyz while another process holds the write lock",
    );
    assert!(
        took < READY_ANSWER_WITHIN,
        "GET /readyz answers within {READY_ANSWER_WITHIN:?} while the lock is held (took {took:?})"
    );

    locker
        .execute_batch("ROLLBACK")
        .expect("releasing the write lock");
    let after = app.get_path("/readyz");
    assert_eq!(
        after.status,
        200,
        "ready again once the lock is released: {}",
        after.describe()
    );
    assert_eq!(
        after.json(),
        json!({ "status": "ready" }),
        "GET /readyz body"
    );
}

#[test]
fn the_openapi_document_describes_the_api() {
    let app = spawn_app();
    let resp = app.get_path("/v1/openapi.json");
    assert_eq!(
        resp.status,
        200,
        "GET /v1/openapi.json: {}",
        resp.describe()
    );
    assert!(
        resp.header("content-type")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .starts_with("application/json"),
        "the document is application/json"
    );
    let doc = resp.json();
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "openapi is 3.1.x: {}",
        doc["openapi"]
    );
    for member in ["title", "version"] {
        assert!(
            doc["info"][member].as_str().is_some_and(|v| !v.is_empty()),
            "info.{member} is set"
        );
    }
    let schemes = doc["components"]["securitySchemes"]
        .as_object()
        .expect("components.securitySchemes is an object");
    assert!(
        schemes.values().any(|s| s["type"] == "http"
            && s["scheme"]
                .as_str()
                .is_some_and(|v| v.eq_ignore_ascii_case("bearer"))),
        "an HTTP bearer security scheme is declared: {schemes:?}"
    );

    let operations: [(&str, &str, &[&str], bool); 4] = [
        (
            "/v1/tenants",
            "post",
            &[
                "201", "400", "401", "403", "408", "409", "413", "415", "422", "429", "500", "501",
                "503",
            ],
            true,
        ),
        (
            "/v1/tenants/{id}",
            "get",
            &["200", "401", "403", "404", "429", "500", "503"],
            true,
        ),
        (
            "/v1/tenants/{id}",
            "delete",
            &["200", "401", "403", "404", "429", "500", "503"],
            true,
        ),
        ("/readyz", "get", &["200", "503"], false),
    ];
    for (path, method, statuses, needs_token) in operations {
        let op = &doc["paths"][path][method];
        let responses = op["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{method} {path} documents its responses: {op}"));
        let documented: BTreeSet<&str> = responses.keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = statuses.iter().copied().collect();
        assert_eq!(
            documented,
            expected,
            "{method} {path} documents exactly the status codes it can return; missing {:?}, \
             not returned {:?}",
            expected.difference(&documented).collect::<Vec<_>>(),
            documented.difference(&expected).collect::<Vec<_>>()
        );
        let security = op.get("security").or(doc.get("security"));
        let secured = security.is_some_and(|s| s.as_array().is_some_and(|a| !a.is_empty()));
        assert_eq!(
            secured, needs_token,
            "{method} {path} requires the bearer scheme: {needs_token}; security {security:?}"
        );
    }
    let post_body =
        &doc["paths"]["/v1/tenants"]["post"]["requestBody"]["content"]["application/json"];
    assert!(
        post_body != &Value::Null,
        "the create operation documents its application/json body"
    );
}

/// `info.version` follows the policy of `docs/versioning.md`: semantic versioning whose major
/// is the path's version (every path under `/v1` but the probes and the metrics), and the
/// version the policy's table names last, the current one.
#[test]
fn info_version_follows_the_version_policy() {
    let app = spawn_app();
    let doc = app.get_path("/v1/openapi.json").json();
    let version = doc["info"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let parts: Vec<u64> = version
        .split('.')
        .map(|p| p.parse().unwrap_or(u64::MAX))
        .collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| *p != u64::MAX),
        "info.version is MAJOR.MINOR.PATCH: {version:?}"
    );
    let paths: Vec<&String> = doc["paths"]
        .as_object()
        .expect("paths is an object")
        .keys()
        .filter(|p| !matches!(p.as_str(), "/healthz" | "/readyz" | "/metrics"))
        .collect();
    let major = format!("/v{}/", parts[0]);
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.starts_with(&major)),
        "the major version {} is the paths' {major}: {paths:?}",
        parts[0]
    );
    let policy = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/versioning.md"),
    )
    .expect("docs/versioning.md");
    let listed: Vec<&str> = policy
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(
        listed.last().copied(),
        Some(version.as_str()),
        "the policy's table ends with the served version: {listed:?}"
    );
}
