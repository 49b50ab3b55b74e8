//! `/healthz`, `/readyz` and the OpenAPI document.

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

    let operations = [
        (
            "/v1/tenants",
            "post",
            vec![
                "201", "400", "401", "403", "409", "413", "415", "422", "503",
            ],
        ),
        ("/v1/tenants/{id}", "get", vec!["200", "401", "403", "404"]),
        (
            "/v1/tenants/{id}",
            "delete",
            vec!["200", "401", "403", "404"],
        ),
    ];
    for (path, method, statuses) in operations {
        let op = &doc["paths"][path][method];
        let responses = op["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{method} {path} documents its responses: {op}"));
        for status in statuses {
            assert!(
                responses.contains_key(status),
                "{method} {path} documents status {status}: {:?}",
                responses.keys().collect::<Vec<_>>()
            );
        }
        let secured = op.get("security").or(doc.get("security"));
        assert!(
            secured.is_some_and(|s| s.as_array().is_some_and(|a| !a.is_empty())),
            "{method} {path} requires the bearer scheme"
        );
    }
    let post_body =
        &doc["paths"]["/v1/tenants"]["post"]["requestBody"]["content"]["application/json"];
    assert!(
        post_body != &Value::Null,
        "the create operation documents its application/json body"
    );
}
