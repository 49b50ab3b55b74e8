//! Tombstone: the state change, its readability afterwards, idempotent repeats and the
//! freed name.

use crate::helpers::*;

#[test]
fn create_read_tombstone_round_trip() {
    let app = spawn_app();
    let created = app.create_ok("round-trip", "1000");
    let id = tenant_id(&created);
    let created_at = created["created_at"]
        .as_str()
        .expect("created_at")
        .to_owned();

    let resp = app.delete(&id);
    assert_eq!(resp.status, 200, "DELETE: {}", resp.describe());
    assert!(
        resp.header("content-type")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .starts_with("application/json"),
        "DELETE answers application/json"
    );
    let gone = resp.json();
    assert_eq!(
        gone["state"], "tombstoned",
        "DELETE returns the tombstoned overview"
    );
    let tombstoned_at = gone["tombstoned_at"]
        .as_str()
        .unwrap_or_else(|| panic!("tombstoned_at is set: {gone}"));
    assert!(
        is_timestamp(tombstoned_at),
        "tombstoned_at is a contract timestamp: {tombstoned_at:?}"
    );
    assert!(
        timestamp_ms(tombstoned_at) >= timestamp_ms(&created_at),
        "tombstoned_at ({tombstoned_at}) is not before created_at ({created_at})"
    );
    for member in ["id", "name", "created_at"] {
        assert_eq!(
            gone[member], created[member],
            "{member} is unchanged by the tombstone"
        );
    }
    assert_eq!(
        gone["budget"]["state"], "closed",
        "the default budget is closed: {gone}"
    );
    assert_eq!(
        gone["budget"]["closed_at"], gone["tombstoned_at"],
        "closed when the tenant was tombstoned: {gone}"
    );
    assert!(
        gone.get("sidecar_config_env").is_none(),
        "the tombstoned overview carries no sidecar block: {gone}"
    );

    let read = app.get_admin(&id);
    assert_eq!(
        read.status,
        200,
        "a tombstoned tenant stays readable: {}",
        read.describe()
    );
    assert_eq!(read.json(), gone, "the read equals the DELETE body");

    let rows = app.rows(&format!(
        "SELECT state, tombstoned_at FROM tenants WHERE id = '{id}'"
    ));
    let [row] = rows.as_slice() else {
        panic!("the row is kept, never erased: {rows:?}");
    };
    assert_eq!(row[0].as_deref(), Some("tombstoned"), "the stored state");
    assert_eq!(
        row[1].as_deref(),
        Some(tombstoned_at),
        "the stored tombstoned_at"
    );
}

#[test]
fn a_repeated_delete_returns_the_same_body_and_adds_no_audit_event() {
    let app = spawn_app();
    let id = tenant_id(&app.create_ok("twice-deleted", "5"));
    let first = app.delete(&id);
    assert_eq!(first.status, 200, "first DELETE: {}", first.describe());
    let events = app.audit_count();
    assert_eq!(events, 2, "create and tombstone are two audit events");

    for attempt in 2..=3 {
        let again = app.delete(&id);
        assert_eq!(again.status, 200, "DELETE #{attempt}: {}", again.describe());
        assert_eq!(
            again.body, first.body,
            "DELETE #{attempt} returns the same body byte for byte"
        );
    }
    assert_eq!(
        app.audit_count(),
        events,
        "a repeated DELETE appends no audit event"
    );
}

#[test]
fn a_tombstoned_name_may_be_taken_again() {
    let app = spawn_app();
    let old = tenant_id(&app.create_ok("reused-name", "1"));
    assert_eq!(app.delete(&old).status, 200, "tombstoning the first holder");

    let resp = app.create("reused-name", "2");
    assert_eq!(
        resp.status,
        201,
        "the freed name is taken again: {}",
        resp.describe()
    );
    let new = tenant_id(&resp.json());
    assert_ne!(new, old, "the new tenant has a new id");

    let taken = app.create("reused-name", "3");
    assert_problem(&taken, 409, "tenant_name_taken", "the name is held again");

    assert_eq!(
        app.get_admin(&old).json()["state"],
        "tombstoned",
        "the old tenant stays tombstoned"
    );
    assert_eq!(
        app.get_admin(&new).json()["state"],
        "active",
        "the new one is active"
    );
}

#[test]
fn a_tombstone_freezes_the_budget() {
    let app = spawn_app();
    let created = app.create_ok("frozen", U128_MAX);
    let id = tenant_id(&created);
    let gone = app.delete(&id).json();
    for figure in [
        "opening_deposit_atomic",
        "credited_atomic",
        "balance_atomic",
        "available_atomic",
    ] {
        assert_eq!(
            gone["budget"][figure], U128_MAX,
            "{figure} is frozen as it was: {gone}"
        );
    }
    assert_eq!(gone["budget"]["state"], "closed", "{gone}");
}
