//! The audit chain, recomputed from the database without trusting the service, and
//! `tenantd audit verify`.

use serde_json::{Value, json};

use crate::helpers::*;

#[test]
fn the_chain_recomputes_from_the_file_alone() {
    let app = spawn_app();
    let a = app.create_ok("audit-a", "100");
    let b = app.create_with_key("audit-b \"quoted\" ü", "200", "audit-key");
    assert_eq!(b.status, 201, "create b: {}", b.describe());
    let b = b.json();
    let c = app.create_ok("audit-c", U128_MAX);
    let (a_id, b_id, c_id) = (tenant_id(&a), tenant_id(&b), tenant_id(&c));
    assert_eq!(app.delete(&b_id).status, 200, "tombstoning b");
    // None of these may append anything.
    assert_eq!(app.delete(&b_id).status, 200, "repeating the tombstone");
    let replay = app.create_with_key("audit-b \"quoted\" ü", "200", "audit-key");
    assert_eq!(replay.status, 201, "replaying b: {}", replay.describe());
    assert_eq!(app.create("audit-a", "1").status, 409, "a refused create");
    assert_eq!(
        app.post_tenants("{}", None).status,
        422,
        "an invalid create"
    );

    let rows = app.audit_rows();
    assert_eq!(rows.len(), 4, "three creates and one tombstone: {rows:#?}");
    let head = assert_chain_valid(&rows, "the live chain");
    assert_eq!(
        rows[0].prev_hash, GENESIS_HASH,
        "the first event links to 64 zeros"
    );

    let expected = [
        (
            "tenant.created",
            &a_id,
            json!({"id": a_id, "name": "audit-a", "opening_deposit_atomic": "100"}),
        ),
        (
            "tenant.created",
            &b_id,
            json!({"id": b_id, "name": "audit-b \"quoted\" ü", "opening_deposit_atomic": "200"}),
        ),
        (
            "tenant.created",
            &c_id,
            json!({"id": c_id, "name": "audit-c", "opening_deposit_atomic": U128_MAX}),
        ),
        ("tenant.tombstoned", &b_id, json!({"id": b_id})),
    ];
    for (row, (action, tenant, payload)) in rows.iter().zip(expected.iter()) {
        let ctx = format!("seq {}", row.seq);
        assert_eq!(row.action, *action, "{ctx}: action");
        assert_eq!(&row.tenant_id, *tenant, "{ctx}: tenant_id");
        assert_eq!(row.actor, "admin", "{ctx}: actor");
        assert!(
            is_timestamp(&row.occurred_at),
            "{ctx}: occurred_at {:?}",
            row.occurred_at
        );
        let parsed: Value = serde_json::from_str(&row.payload)
            .unwrap_or_else(|e| panic!("{ctx}: payload is JSON ({e}): {}", row.payload));
        assert_eq!(&parsed, payload, "{ctx}: payload facts");
        let positions: Vec<Option<usize>> = ["\"id\"", "\"name\"", "\"opening_deposit_atomic\""]
            .iter()
            .filter(|m| parsed.get(m.trim_matches('"')).is_some())
            .map(|m| row.payload.find(m))
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{ctx}: payload members come in the order id, name, opening_deposit_atomic: {}",
            row.payload
        );
        if row.payload.is_ascii() && !row.payload.contains('\\') {
            assert_eq!(
                row.payload,
                serde_json::to_string(&parsed).expect("serializing"),
                "{ctx}: payload is compact JSON"
            );
        }
    }
    for pair in rows.windows(2) {
        assert!(
            pair[0].occurred_at <= pair[1].occurred_at,
            "occurred_at never goes backwards: {} then {}",
            pair[0].occurred_at,
            pair[1].occurred_at
        );
    }

    let mut secrets = vec![
        app.admin_token.clone(),
        sha256_hex(app.admin_token.as_bytes()),
    ];
    for created in [&a, &b, &c] {
        let token = tenant_token(created);
        secrets.push(sha256_hex(token.as_bytes()));
        secrets.push(sha256_hex(token.as_bytes()).to_ascii_uppercase());
        secrets.push(token);
    }
    for row in &rows {
        let all = format!("{row:?}");
        for secret in &secrets {
            assert!(
                !all.contains(secret.as_str()),
                "seq {} holds no token or token hash",
                row.seq
            );
        }
    }

    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(0),
        "audit verify on a live database: {verify:?}"
    );
    assert_eq!(
        verify.stdout.trim(),
        format!("ok: 4 events, head {head}"),
        "audit verify reports the count and the head"
    );
}

#[test]
fn audit_verify_on_an_empty_and_a_missing_database() {
    let app = spawn_app();
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "an empty chain verifies: {verify:?}");
    assert_eq!(
        verify.stdout.trim(),
        format!("ok: 0 events, head {GENESIS_HASH}"),
        "an empty chain has 0 events and the genesis head"
    );

    let missing = app.dir.path().join("absent.db");
    let verify = audit_verify(&missing);
    assert_eq!(
        verify.code,
        Some(2),
        "a missing database is a mistake in the command: {verify:?}"
    );
    assert!(
        !verify.stderr.trim().is_empty(),
        "the failure says why: {verify:?}"
    );
    assert!(!missing.exists(), "audit verify never creates a database");
}

/// A missing file is a mistake in the command line: `audit verify` says so in one line that
/// names the path once and what is wrong with it, exits 2 as a bad flag does, and creates
/// nothing.
#[test]
fn audit_verify_on_a_missing_file_names_it_once_and_exits_2() {
    let dir = tempfile::TempDir::new().expect("a temporary directory");
    let missing = dir.path().join("absent.db");
    let path = missing.to_str().expect("a UTF-8 path");
    let verify = audit_verify(&missing);
    assert_eq!(
        verify.code,
        Some(2),
        "the exit code of a usage error: {verify:?}"
    );
    assert_eq!(
        verify.stderr,
        format!("tenantd audit verify: no database at {path}: the file does not exist\n"),
        "one line, the path once, what is wrong"
    );
    assert_eq!(verify.stdout, "", "nothing is reported ok");
    assert!(!missing.exists(), "audit verify never creates a database");
}

/// A figure edited behind the service's back is named, with its stored value and the one the
/// events give, in the budget's unit, in one line.
#[test]
fn audit_verify_names_an_edited_figure_in_its_unit() {
    let mut app = spawn_app();
    let a = Scene::new(&app, "edited-figure", "1");
    let body = json!({ "name": "gpu", "unit": "tokens", "opening_deposit_atomic": "2000" });
    let created = assert_created(&a.post_budget(&body), &budgets_path(&a.tid), "gpu");
    let gpu = a.on(str_of(&created, "id"));
    let held = gpu.hold_id("1000");
    assert_ok(&gpu.commit(&held, "1000"), "spending 1000 tokens");
    let bid = gpu.bid.clone();
    assert_eq!(app.terminate().code(), Some(0), "graceful stop");
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "the untouched database: {verify:?}");

    let edited = app
        .execute(&format!(
            "UPDATE budgets SET spent_atomic = '1500' WHERE id = '{bid}'"
        ))
        .expect("editing the spend");
    assert_eq!(edited, 1, "one budget edited");
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(1), "an edited spend fails: {verify:?}");
    let says = format!(
        "budget {bid}'s stored spent figure is 1500 tokens, but its events give 1000 tokens"
    );
    let line = verify
        .stderr
        .lines()
        .find(|line| line.starts_with("tenantd audit verify: "));
    assert!(
        line.is_some_and(|line| line.ends_with(&says)),
        "one line that names the figure, both values and the unit: {:?}",
        verify.stderr
    );
}

#[test]
fn the_schema_refuses_updates_and_deletes() {
    let mut app = spawn_app();
    let id = tenant_id(&app.create_ok("immutable", "1"));
    assert_eq!(app.terminate().code(), Some(0), "graceful stop");

    let attempts = [
        (
            "UPDATE of an audit event",
            "UPDATE audit_events SET payload = '{}' WHERE seq = 1".to_owned(),
        ),
        (
            "DELETE of an audit event",
            "DELETE FROM audit_events WHERE seq = 1".to_owned(),
        ),
        (
            "DELETE of a tenant",
            format!("DELETE FROM tenants WHERE id = '{id}'"),
        ),
    ];
    for (msg, sql) in attempts {
        assert!(app.execute(&sql).is_err(), "a trigger aborts the {msg}");
    }
    assert_eq!(app.audit_count(), 1, "the event is still there");
    assert_eq!(app.tenant_count(), 1, "the tenant is still there");
}

#[test]
fn audit_verify_names_the_first_tampered_seq() {
    let mut app = spawn_app();
    for i in 0..4 {
        app.create_ok(&format!("tamper-{i}"), "1");
    }
    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(0),
        "the untouched chain verifies: {verify:?}"
    );
    assert_eq!(app.terminate().code(), Some(0), "graceful stop");

    app.drop_trigger("audit_events_no_update", "audit_events");
    let changed = app
        .execute(
            "UPDATE audit_events SET payload = replace(payload, 'tamper-2', 'tamper-X') WHERE seq = 3",
        )
        .expect("tampering with seq 3");
    assert_eq!(changed, 1, "one row tampered");

    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(1),
        "a tampered chain fails verification: {verify:?}"
    );
    assert!(
        verify.stderr.contains("seq 3"),
        "the message names the first bad seq (3): {:?}",
        verify.stderr
    );
    assert!(
        !verify.stdout.starts_with("ok"),
        "a broken chain is not reported ok: {:?}",
        verify.stdout
    );
}

/// A hash chain alone cannot show that its tail was cut; the tenants table can. Cutting the
/// last event (a tombstone, then a creation) fails `audit verify`, naming the tenant.
#[test]
fn audit_verify_notices_a_cut_tail() {
    let mut app = spawn_app();
    let kept = app.create_ok("tail-kept", "1");
    let buried = app.create_ok("tail-buried", "1");
    let buried_id = tenant_id(&buried);
    assert_eq!(app.delete(&buried_id).status, 200, "tombstoning");
    let last = app.create_ok("tail-last", "1");
    assert_eq!(app.terminate().code(), Some(0), "graceful stop");
    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(0),
        "the untouched chain verifies: {verify:?}"
    );

    app.drop_trigger("audit_events_no_delete", "audit_events");
    let cut = |seq: i64| {
        let deleted = app
            .execute(&format!("DELETE FROM audit_events WHERE seq = {seq}"))
            .expect("cutting the tail");
        assert_eq!(deleted, 1, "one event cut");
    };
    cut(4);
    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(1),
        "a chain missing its last creation fails: {verify:?}"
    );
    assert!(
        verify.stderr.contains(&tenant_id(&last)),
        "the message names the tenant whose creation is missing: {:?}",
        verify.stderr
    );
    cut(3);
    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(1),
        "a chain missing its last tombstone fails: {verify:?}"
    );
    assert!(
        verify.stderr.contains(&buried_id),
        "the message names the tenant whose tombstone is missing: {:?}",
        verify.stderr
    );
    let _ = kept;
}
