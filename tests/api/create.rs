//! Create and read: the exact response shape, ids, timestamps, the sidecar block and how
//! the tenant token is kept.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::thread;

use serde_json::Value;

use crate::helpers::*;

#[test]
fn create_returns_201_with_the_documented_shape() {
    let app = spawn_app();
    let before = now_ms();
    let resp = app.create("acme-prod", "1000");
    let after = now_ms();

    assert_eq!(resp.status, 201, "create: {}", resp.describe());
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type
            .to_ascii_lowercase()
            .starts_with("application/json"),
        "a success body is application/json, got {content_type:?}"
    );
    assert!(
        resp.header("x-request-id").is_some_and(|v| !v.is_empty()),
        "every response carries X-Request-Id: {}",
        resp.describe()
    );
    let body = resp.json();
    let mut members: Vec<&str> = body
        .as_object()
        .expect("the body is an object")
        .keys()
        .map(String::as_str)
        .collect();
    members.sort();
    assert_eq!(
        members,
        [
            "budget",
            "created_at",
            "id",
            "name",
            "sidecar_config_env",
            "state",
            "tombstoned_at"
        ],
        "the create body has exactly the contract's members: {body}"
    );

    let id = tenant_id(&body);
    assert!(
        is_tenant_id(&id),
        "id is ten_ + 26 Crockford characters: {id:?}"
    );
    assert_eq!(
        resp.header("location"),
        Some(format!("/v1/tenants/{id}").as_str()),
        "Location is the path of the new tenant"
    );
    assert_eq!(body["name"], "acme-prod", "name echoes the request");
    assert_eq!(body["state"], "active", "a new tenant is active");
    assert!(
        body["tombstoned_at"].is_null(),
        "tombstoned_at is null: {body}"
    );

    let created_at = body["created_at"].as_str().expect("created_at is a string");
    assert!(
        is_timestamp(created_at),
        "created_at is RFC 3339 UTC with milliseconds and Z: {created_at:?}"
    );
    let created_ms = timestamp_ms(created_at);
    assert!(
        (before - 2000..=after + 2000).contains(&created_ms),
        "created_at {created_at} lies within the request ({before}..{after} ms)"
    );
    let id_ms = ulid_ms(&id);
    assert!(
        (before - 2000..=after + 2000).contains(&id_ms),
        "the id's 48-bit time ({id_ms} ms) lies within the request ({before}..{after} ms)"
    );

    let budget_id = id.replacen("ten_", "bud_", 1);
    assert_eq!(
        body["budget"],
        serde_json::json!({
            "id": budget_id, "tenant_id": id, "parent_id": null, "name": "default",
            "unit": "atomic",
            "state": "open", "created_at": created_at, "closed_at": null,
            "opening_deposit_atomic": "1000", "credited_atomic": "1000",
            "debited_atomic": "0", "spent_atomic": "0", "reserved_atomic": "0",
            "balance_atomic": "1000", "available_atomic": "1000",
            "period": null, "current_period": null, "alert_thresholds_atomic": []
        }),
        "the default budget, every amount a string"
    );
    assert_eq!(
        body["sidecar_config_env"]["TENANTD_BUDGET_ID"], budget_id,
        "the sidecar learns its default budget"
    );

    let env = body["sidecar_config_env"]
        .as_object()
        .expect("sidecar_config_env is an object");
    for (name, value) in env {
        assert!(
            is_env_name(name),
            "env name {name:?} matches ^[A-Z][A-Z0-9_]*$"
        );
        let value = value
            .as_str()
            .unwrap_or_else(|| panic!("env value of {name} is a string: {value}"));
        assert!(
            !value.contains(['\0', '\r', '\n']),
            "env value of {name} holds no NUL, CR or LF: {value:?}"
        );
    }
    assert_eq!(
        env.get("TENANTD_URL").and_then(Value::as_str),
        Some(format!("http://{}", app.addr).as_str()),
        "TENANTD_URL defaults to http:// + the bound address"
    );
    assert_eq!(
        env.get("TENANTD_TENANT_ID").and_then(Value::as_str),
        Some(id.as_str()),
        "TENANTD_TENANT_ID is the new id"
    );
    let token = tenant_token(&body);
    let ulid = id.strip_prefix("ten_").unwrap_or_default();
    let token_hex = token
        .strip_prefix(&format!("tkn_{ulid}_"))
        .unwrap_or_default();
    assert!(
        token_hex.len() == 64
            && token_hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "the tenant token is tkn_ + the tenant's ULID + _ + 64 lowercase hex (256 random bits): {token:?}"
    );
    assert_ne!(
        token, app.admin_token,
        "a tenant token is never the admin token"
    );
}

#[test]
fn read_returns_the_overview_without_the_sidecar_block() {
    let app = spawn_app();
    let created = app.create_ok("reader", "42");
    let id = tenant_id(&created);
    let mut overview = created.clone();
    overview
        .as_object_mut()
        .expect("an object")
        .remove("sidecar_config_env");

    let resp = app.get_admin(&id);
    assert_eq!(resp.status, 200, "admin read: {}", resp.describe());
    assert!(
        resp.header("content-type")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .starts_with("application/json"),
        "a read is application/json: {}",
        resp.describe()
    );
    assert_eq!(
        resp.json(),
        overview,
        "a read returns the create response without sidecar_config_env"
    );

    let auth = app.admin();
    let with_query = app.request(
        "GET",
        &format!("/v1/tenants/{id}?fields=all&x=1"),
        &[("Authorization", auth.as_str())],
        None,
    );
    assert_eq!(
        with_query.status,
        200,
        "a query string is ignored: {}",
        with_query.describe()
    );
    assert_eq!(
        with_query.json(),
        overview,
        "a query string changes nothing"
    );
}

#[test]
fn public_url_flag_is_passed_through_exactly() {
    let url = "https://tenants.example.com:8443/control-plane/";
    let app = AppBuilder::new().arg("--public-url").arg(url).spawn();
    let created = app.create_ok("public-url", "1");
    assert_eq!(
        created["sidecar_config_env"]["TENANTD_URL"], url,
        "TENANTD_URL is --public-url exactly as given"
    );
}

#[test]
fn the_tenant_token_is_stored_only_as_its_sha256() {
    let app = spawn_app();
    let created = app.create_ok("hashed-token", "7");
    let id = tenant_id(&created);
    let token = tenant_token(&created);

    let hex = match app.backend() {
        Backend::Sqlite => "lower(hex(token_hash))",
        Backend::Postgres => "encode(token_hash, 'hex')",
    };
    let stored = app.text_rows(&format!("SELECT {hex} FROM tenants WHERE id = '{id}'"));
    assert_eq!(
        stored,
        [[sha256_hex(token.as_bytes())]],
        "tenants.token_hash is the SHA-256 of the token string"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys"),
        0,
        "a create without Idempotency-Key keeps no stored response"
    );
    assert!(
        !contains_bytes(&app.db_contents(), token.as_bytes()),
        "the plaintext token of a create without Idempotency-Key is nowhere in the database"
    );
}

#[test]
fn every_create_mints_a_distinct_id_and_token() {
    let app = spawn_app();
    let a = app.create_ok("distinct-a", "1");
    let b = app.create_ok("distinct-b", "1");
    assert_ne!(tenant_id(&a), tenant_id(&b), "ids differ");
    assert_ne!(tenant_token(&a), tenant_token(&b), "tokens differ");
}

#[test]
fn ids_of_sequential_creates_sort_ascending() {
    let app = spawn_app();
    let ids: Vec<String> = (0..40)
        .map(|i| tenant_id(&app.create_ok(&format!("seq-{i:02}"), "1")))
        .collect();
    for pair in ids.windows(2) {
        assert!(
            pair[0].as_bytes() < pair[1].as_bytes(),
            "an id created later sorts after an earlier one: {} then {}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn concurrent_creates_get_distinct_ids_in_creation_order() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 50;
    let app = spawn_app();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            let addr = app.addr.clone();
            let auth = app.admin();
            thread::spawn(move || {
                barrier.wait();
                (0..PER_THREAD)
                    .map(|i| {
                        let body = tenant_body(&format!("burst-{t}-{i}"), "1");
                        let resp =
                            send(&addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]);
                        assert_eq!(
                            resp.status,
                            201,
                            "create burst-{t}-{i}: {}",
                            resp.describe()
                        );
                        tenant_id(&resp.json())
                    })
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let answered: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a creating client panicked"))
        .collect();
    let total = THREADS * PER_THREAD;
    assert_eq!(answered.len(), total, "every create was answered");
    let distinct: BTreeSet<&str> = answered.iter().map(String::as_str).collect();
    assert_eq!(
        distinct.len(),
        total,
        "{} of {total} answered ids are duplicates",
        total - distinct.len()
    );
    for id in &answered {
        assert!(is_tenant_id(id), "a well-formed id: {id:?}");
    }

    // The audit chain is the truth of creation order: seq increases with each commit.
    let in_order: Vec<(i64, String, String)> = app
        .text_rows(
            "SELECT a.seq, a.tenant_id, t.created_at FROM audit_events a \
             JOIN tenants t ON t.id = a.tenant_id \
             WHERE a.action = 'tenant.created' ORDER BY a.seq",
        )
        .into_iter()
        .map(|row| {
            let [seq, id, at] = <[String; 3]>::try_from(row).expect("three columns");
            (seq.parse().expect("seq is an integer"), id, at)
        })
        .collect();
    let recorded: BTreeSet<&str> = in_order.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(
        recorded, distinct,
        "the audit chain records exactly the answered ids, once each"
    );
    assert_eq!(in_order.len(), total, "one tenant.created event per create");
    // On PostgreSQL an instance's writers commit creates side by side, and the chain keeps
    // each tenant's own rows in order, not one tenant's against another's (revision 4's
    // Storage section): there, ids made one after another sort in that order
    // (ids_of_sequential_creates_sort_ascending), but concurrent creates may take their
    // places in the chain in another.
    if app.backend() == Backend::Postgres {
        return;
    }
    for pair in in_order.windows(2) {
        let ((seq_a, id_a, at_a), (seq_b, id_b, at_b)) = (&pair[0], &pair[1]);
        assert!(
            id_a.as_bytes() < id_b.as_bytes(),
            "an id created later sorts byte-wise after an earlier one: seq {seq_a} {id_a} \
             ({at_a}), then seq {seq_b} {id_b} ({at_b})"
        );
    }
    let same_ms = in_order
        .windows(2)
        .filter(|pair| ulid_ms(&pair[0].1) == ulid_ms(&pair[1].1))
        .count();
    assert!(
        same_ms > 0,
        "some consecutive creates share a millisecond, so the order within one millisecond \
         was checked too (none of {total} did)"
    );
}

#[test]
fn names_are_unique_among_active_tenants_and_case_sensitive() {
    let app = spawn_app();
    app.create_ok("Acme", "1");
    let again = app.create("Acme", "2");
    assert_problem(&again, 409, "tenant_name_taken", "the same name again");
    let lower = app.create("acme", "1");
    assert_eq!(
        lower.status,
        201,
        "names compare case-sensitively: {}",
        lower.describe()
    );
    assert_eq!(app.tenant_count(), 2, "the refused create added no row");
    assert_eq!(
        app.audit_count(),
        2,
        "the refused create added no audit event"
    );
}

#[test]
fn unknown_and_malformed_ids_are_tenant_not_found() {
    let app = spawn_app();
    let id = tenant_id(&app.create_ok("real", "1"));
    let ulid = &id[4..];
    let cases: Vec<(&str, String)> = vec![
        (
            "a well-formed id nobody has",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned(),
        ),
        ("the real id in lower case", id.to_ascii_lowercase()),
        (
            "the real id one character short",
            id[..id.len() - 1].to_owned(),
        ),
        ("the real id one character long", format!("{id}0")),
        ("the ULID without its prefix", ulid.to_owned()),
        ("only the prefix", "ten_".to_owned()),
        ("a wrong prefix", format!("tnt_{ulid}")),
        (
            "a letter outside Crockford's alphabet",
            format!("ten_{}U", &ulid[..25]),
        ),
        ("a percent-encoded underscore", format!("ten%5F{ulid}")),
        (
            "an id that overflows 128 bits",
            "ten_ZZZZZZZZZZZZZZZZZZZZZZZZZZ".to_owned(),
        ),
    ];
    for (msg, bad) in cases {
        let resp = app.get_admin(&bad);
        assert_problem(
            &resp,
            404,
            "tenant_not_found",
            &format!("GET {msg} ({bad})"),
        );
        let resp = app.delete(&bad);
        assert_problem(
            &resp,
            404,
            "tenant_not_found",
            &format!("DELETE {msg} ({bad})"),
        );
    }
    assert_eq!(
        app.get_admin(&id).json()["state"],
        "active",
        "no DELETE above touched the real tenant"
    );
}
