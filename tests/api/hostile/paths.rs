//! Hostile paths: traversal and other spellings of a tenant's id never reach the tenant.

use std::time::Instant;

use super::*;

// ---------------------------------------------------------------------------------------
// Path traversal and other spellings of an id.
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
    let tombstoned: i64 = app.count("SELECT count(*) FROM tenants WHERE state <> 'active'");
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
