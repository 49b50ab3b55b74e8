//! Databases written by earlier releases (`tests/fixtures/revision-N.db`, at schema version
//! N) are migrated in place at start-up: their rows read as before, their audit chains still
//! verify, and an `Idempotency-Key` bound before the upgrade still replays its exact answer.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::wire::Response;

/// The schema version this build migrates every database to.
const SCHEMA_VERSION: i64 = 12;

/// The key of the fixture's keyed create.
const FIXTURE_KEY: &str = "fixture-key-1";
/// The body of the fixture's keyed create.
const FIXTURE_BODY: &str = r#"{"name":"fixture-keyed","opening_deposit_atomic":"1000"}"#;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(name)
}

/// A server on a copy of the fixture, its idempotency record moved back inside the replay
/// window (the fixture was written once; its record's 24 hours are long over).
fn upgraded_app() -> TestApp {
    upgraded_from("revision-1.db", 1)
}

/// A server on a copy of the fixture `name`, written at schema `version`, with its
/// idempotency records moved back inside the replay window.
fn upgraded_from(name: &str, version: i64) -> TestApp {
    let mut app = spawn_app();
    app.terminate();
    for side in ["-wal", "-shm"] {
        let mut path = app.db_path.clone().into_os_string();
        path.push(side);
        let _ = std::fs::remove_file(PathBuf::from(path));
    }
    std::fs::copy(fixture(name), &app.db_path).expect("copying the fixture");
    {
        let conn = open_rw(&app.db_path);
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("the version");
        assert_eq!(found, version, "{name} is at schema version {version}");
        conn.execute("UPDATE idempotency_keys SET created_ms = ?1", [now_ms()])
            .expect("refreshing the record");
    }
    app.start();
    app
}

#[test]
fn a_revision_1_database_is_migrated_and_keeps_replaying_its_keys() {
    let app = upgraded_app();
    let version: i64 = app
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("the version");
    assert_eq!(version, SCHEMA_VERSION, "migrated to the current schema");

    let replay = app.post_tenants(FIXTURE_BODY, Some(FIXTURE_KEY));
    assert_eq!(replay.status, 201, "the replay: {}", replay.describe());
    assert_eq!(
        replay.header("idempotent-replayed"),
        Some("true"),
        "{}",
        replay.describe()
    );
    let before = std::fs::read_to_string(fixture("revision-1.keyed-create.json"))
        .expect("the fixture's answer");
    assert_eq!(
        replay.text(),
        before,
        "the replay is the very answer given before the upgrade"
    );
    let created: Value = serde_json::from_str(&before).expect("JSON");
    let id = tenant_id(&created);
    assert_eq!(
        replay.header("location"),
        Some(format!("/v1/tenants/{id}").as_str()),
        "the Location of the original create"
    );

    let other = app.post_tenants(
        r#"{"name":"fixture-keyed","opening_deposit_atomic":"1001"}"#,
        Some(FIXTURE_KEY),
    );
    assert_problem(&other, 422, "idempotency_key_mismatch", "another body");

    let token = tenant_token(&created);
    let read = app.get(&id, Some(&token));
    assert_eq!(
        read.status,
        200,
        "the token minted before the upgrade works: {}",
        read.describe()
    );
    assert_eq!(app.tenant_count(), 3, "no tenant was added by the replay");
    assert_eq!(app.audit_count(), 4, "no event was added by the replay");
    let states: Vec<(String, String)> = {
        let db = app.db();
        let mut stmt = db
            .prepare("SELECT name, state FROM tenants ORDER BY id")
            .expect("a query");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("tenants")
    };
    assert_eq!(
        states,
        [
            ("fixture-keyed".to_owned(), "active".to_owned()),
            ("fixture-plain \"ü\"".to_owned(), "tombstoned".to_owned()),
            ("fixture-active".to_owned(), "active".to_owned()),
        ]
    );
    // Every tenant has its default budget, made from its opening deposit, with its opening
    // entry; a tombstoned tenant's is closed when the tenant was tombstoned.
    let budgets: Vec<(String, String, String, Option<String>, String, i64)> = {
        let db = app.db();
        let mut stmt = db
            .prepare(
                "SELECT t.name, b.name, b.state, b.closed_at IS t.tombstoned_at,                  b.credited_atomic, (SELECT count(*) FROM ledger_entries e                    WHERE e.budget_id = b.id AND e.kind = 'opening_deposit'                    AND e.id = 'ent_' || substr(b.id, 5))                  FROM tenants t JOIN budgets b ON b.id = 'bud_' || substr(t.id, 5) ORDER BY t.id",
            )
            .expect("a query");
        stmt.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get::<_, bool>(3)?.then(|| "same".to_owned()),
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("budgets")
    };
    assert_eq!(
        budgets.len(),
        3,
        "one default budget per tenant: {budgets:?}"
    );
    for (tenant, name, state, closed_at, credited, opening_entries) in &budgets {
        assert_eq!(name, "default", "{tenant}");
        assert_eq!(opening_entries, &1, "{tenant}: one opening entry");
        assert_eq!(closed_at.as_deref(), Some("same"), "{tenant}: closed_at");
        let tombstoned = tenant.starts_with("fixture-plain");
        assert_eq!(
            state,
            if tombstoned { "closed" } else { "open" },
            "{tenant}"
        );
        assert!(!credited.is_empty(), "{tenant}");
    }
    let overview = app.get(&id, Some(&token)).json();
    assert_eq!(
        overview["budget"]["id"],
        id.replacen("ten_", "bud_", 1),
        "the overview shows the default budget: {overview}"
    );
    assert_eq!(
        overview["budget"]["credited_atomic"], created["budget"]["opening_deposit_atomic"],
        "{overview}"
    );
    let verified = audit_verify(&app.db_path);
    assert_eq!(verified.code, Some(0), "{verified:?}");
    assert!(verified.stdout.starts_with("ok: 4 events"), "{verified:?}");
}

/// A database written by the release before budgets (`tests/fixtures/revision-2.db`, schema
/// version 2) gains its budgets in place: every tenant's default budget from its opening
/// deposit, closed for the tombstoned one; its key still replays the answer given then; and
/// the new operations work on the old tenants.
#[test]
fn a_revision_2_database_gains_budgets_and_keeps_its_keys() {
    let app = upgraded_from("revision-2.db", 2);
    let version: i64 = app
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("the version");
    assert_eq!(version, SCHEMA_VERSION, "migrated to the current schema");

    let body = r#"{"name":"fixture-keyed","opening_deposit_atomic":"2000"}"#;
    let replay = app.post_tenants(body, Some("fixture-key-2"));
    assert_eq!(
        replay.header("idempotent-replayed"),
        Some("true"),
        "{}",
        replay.describe()
    );
    let before = std::fs::read_to_string(fixture("revision-2.keyed-create.json"))
        .expect("the fixture's answer");
    assert_eq!(
        replay.text(),
        before,
        "the replay is the very answer given before"
    );

    let listed = get_as(&app, &app.admin(), "/v1/tenants").json();
    let tenants = listed["data"].as_array().expect("a page");
    assert_eq!(tenants.len(), 3, "{listed}");
    for tenant in tenants {
        let (name, budget) = (&tenant["name"], &tenant["budget"]);
        let gone = name == "fixture-gone";
        assert_eq!(budget["name"], "default", "{tenant}");
        assert_eq!(
            budget["state"],
            if gone { "closed" } else { "open" },
            "{tenant}"
        );
        assert_eq!(budget["closed_at"], tenant["tombstoned_at"], "{tenant}");
        assert_eq!(
            budget["credited_atomic"], budget["opening_deposit_atomic"],
            "{tenant}"
        );
        assert_eq!(
            budget["available_atomic"], budget["opening_deposit_atomic"],
            "{tenant}"
        );
    }

    // The old tenant's token spends from its new default budget.
    let created: Value = serde_json::from_str(&before).expect("JSON");
    let id = tenant_id(&created);
    let token = format!("Bearer {}", tenant_token(&created));
    let budget = id.replacen("ten_", "bud_", 1);
    let reserve = serde_json::json!({"budget_id": budget, "amount_atomic": "300"}).to_string();
    let path = reservations_path(&id);
    let held = send(&app.addr, "POST", &path, &token, Some(&reserve), None, &[]);
    assert_eq!(held.status, 201, "{}", held.describe());
    let entries = get_as(&app, &token, &budget_path(&id, &budget, "entries")).json();
    let kinds: Vec<&str> = entries["data"]
        .as_array()
        .expect("a page")
        .iter()
        .map(|e| e["kind"].as_str().expect("a kind"))
        .collect();
    assert_eq!(kinds, ["opening_deposit", "reserve"], "{entries}");

    let verified = audit_verify(&app.db_path);
    assert_eq!(verified.code, Some(0), "{verified:?}");
    assert!(verified.stdout.starts_with("ok: 5 events"), "{verified:?}");
}

/// Sends again the keyed reserve of `tests/fixtures/revision-N.db` (`fixture-key-N`: 40 on
/// `budget` of `tenant`, held for a day, with the tenant's `token`), and asserts that it
/// replays the answer that release gave (`revision-N.keyed-reserve.json`), byte for byte. The
/// replay.
fn keyed_reserve_replays(
    app: &TestApp,
    (tenant, budget, token): (&str, &str, &str),
    revision: u32,
) -> Response {
    let answered =
        std::fs::read_to_string(fixture(&format!("revision-{revision}.keyed-reserve.json")))
            .expect("the fixture's answer");
    let reserve = json!({"budget_id": budget, "amount_atomic": "40", "ttl_seconds": 86400});
    let replay = send(
        &app.addr,
        "POST",
        &reservations_path(tenant),
        token,
        Some(&reserve.to_string()),
        Some(&format!("fixture-key-{revision}")),
        &[],
    );
    assert_eq!(replay.status, 201, "{}", replay.describe());
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text(), answered, "the stored answer, byte for byte");
    replay
}

/// Asserts that every row of `before` is in `after` (found by its id, the first column) as it
/// was, and that the columns `after` has beyond them are `NULL`, which means `null_means`.
fn assert_kept(before: &[Vec<Option<String>>], after: &[Vec<Option<String>>], null_means: &str) {
    for before in before {
        let after = after
            .iter()
            .find(|e| e[0] == before[0])
            .unwrap_or_else(|| panic!("row {before:?} is kept"));
        assert_eq!(after[..before.len()], before[..], "kept as it was");
        assert!(
            after[before.len()..].iter().all(Option::is_none),
            "{null_means}: {after:?}"
        );
    }
}

/// Every row of `table` as text, in primary-key order.
fn rows(db: &rusqlite::Connection, table: &str, columns: &str) -> Vec<Vec<Option<String>>> {
    let mut stmt = db
        .prepare(&format!("SELECT {columns} FROM {table} ORDER BY id"))
        .expect("a query");
    let width = stmt.column_count();
    stmt.query_map([], |r| (0..width).map(|i| r.get(i)).collect())
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("every row")
}

const ENTRY_COLUMNS: &str = "id, budget_id, kind, amount_atomic, reservation_id, memo, \
                             occurred_at, balance_atomic, available_atomic";
const RESERVATION_COLUMNS: &str = "id, tenant_id, budget_id, state, amount_atomic, \
                                   committed_atomic, memo, created_at, expires_at, settled_at";

/// A database written by the release with budgets (`tests/fixtures/revision-3.db`, schema
/// version 3: reservations in every state, every kind of ledger entry, a tombstoned tenant)
/// is rebuilt by migration 4 with every row as it was; its keyed reserve still replays, the
/// rebuilt CHECKs still refuse what they refused, and spending goes on.
#[test]
fn a_revision_3_database_keeps_every_reservation_and_entry() {
    let ids: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("revision-3.json")).expect("the fixture's ids"),
    )
    .expect("JSON");
    let id = |name: &str| ids[name].as_str().expect(name).to_owned();
    let app = upgraded_from("revision-3.db", 3);

    // What the fixture holds, read from a second copy of it that no server opened.
    let before_path = app.db_path.with_extension("before.db");
    std::fs::copy(fixture("revision-3.db"), &before_path).expect("copying the fixture");
    let (entries_before, reservations_before) = {
        let db = open_rw(&before_path);
        (
            rows(&db, "ledger_entries", ENTRY_COLUMNS),
            rows(&db, "reservations", RESERVATION_COLUMNS),
        )
    };
    let states: Vec<&str> = reservations_before
        .iter()
        .filter_map(|r| r[3].as_deref())
        .collect();
    for state in ["active", "committed", "released", "expired"] {
        assert!(states.contains(&state), "the fixture has a {state} hold");
    }

    let db = app.db();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("the version");
    assert_eq!(version, SCHEMA_VERSION, "migrated to the current schema");
    // The server may have recorded expiries since (the fixture's holds last a day): those
    // add entries and settle active holds, and change nothing that was there.
    let entries_after = rows(&db, "ledger_entries", ENTRY_COLUMNS);
    let kept: Vec<_> = entries_after
        .iter()
        .filter(|e| entries_before.iter().any(|b| b[0] == e[0]))
        .cloned()
        .collect();
    assert_eq!(kept, entries_before, "every entry is kept as it was");
    for added in entries_after.iter().filter(|e| !kept.contains(e)) {
        assert_eq!(added[2].as_deref(), Some("expire"), "{added:?}");
    }
    let reservations_after = rows(&db, "reservations", RESERVATION_COLUMNS);
    assert_eq!(reservations_after.len(), reservations_before.len());
    for (before, after) in reservations_before.iter().zip(&reservations_after) {
        if before[3].as_deref() == Some("active") && after[3].as_deref() == Some("expired") {
            assert_eq!(before[..3], after[..3], "an expiry changes only the state");
        } else {
            assert_eq!(before, after, "every reservation is kept as it was");
        }
    }

    drop(db);

    // The rebuilt CHECKs refuse a kind and a state outside their lists, as before.
    let db = open_rw(&app.db_path);
    let bad_entry = db.execute(
        "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, reservation_id, memo, \
         occurred_at, balance_atomic, available_atomic) \
         VALUES ('ent_x', ?1, 'refund', '1', NULL, NULL, '2026-01-01T00:00:00.000Z', '1', '1')",
        [id("budget")],
    );
    assert!(
        format!("{bad_entry:?}").contains("CHECK constraint failed"),
        "{bad_entry:?}"
    );
    let bad_state = db.execute(
        "INSERT INTO reservations (id, tenant_id, budget_id, state, amount_atomic, \
         committed_atomic, memo, created_at, expires_at, settled_at) \
         VALUES ('res_x', ?1, ?2, 'paused', '1', NULL, NULL, '2026-01-01T00:00:00.000Z', \
         '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
        [id("tenant"), id("budget")],
    );
    assert!(
        format!("{bad_state:?}").contains("CHECK constraint failed"),
        "{bad_state:?}"
    );
    drop(db);

    // The keyed reserve replays the answer given before the upgrade.
    let token = format!("Bearer {}", id("tenant_token"));
    let tenant = id("tenant");
    let keyed = serde_json::json!({
        "budget_id": id("budget"), "amount_atomic": "200", "ttl_seconds": 86400
    })
    .to_string();
    let (path, key) = (reservations_path(&tenant), Some("fixture-key-3"));
    let replay = send(&app.addr, "POST", &path, &token, Some(&keyed), key, &[]);
    assert_eq!(replay.status, 201, "{}", replay.describe());
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let answered = std::fs::read_to_string(fixture("revision-3.keyed-reserve.json"))
        .expect("the fixture's answer");
    assert_eq!(replay.text(), answered, "the very answer given before");

    // Spending goes on: a hold and its commit on the second budget.
    let hold = serde_json::json!({"budget_id": id("second_budget"), "amount_atomic": "30"});
    let hold = hold.to_string();
    let held = send(&app.addr, "POST", &path, &token, Some(&hold), None, &[]);
    let held = assert_created(&held, &reservations_path(&tenant), "a new hold");
    let rid = str_of(&held, "id");
    let spent = serde_json::json!({"amount_atomic": "25"}).to_string();
    let commit = reservation_path(&tenant, rid, "commit");
    let committed = send(&app.addr, "POST", &commit, &token, Some(&spent), None, &[]);
    let committed = assert_ok(&committed, "its commit");
    assert_eq!(committed["state"], "committed", "{committed}");

    let verified = audit_verify(&app.db_path);
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

/// A database written by the release before periods and charges
/// (`tests/fixtures/revision-4.db`, schema version 4) gains them by migration 5: every entry
/// and reservation is kept as it was, each entry in no period; every budget reads with no
/// period and no thresholds; its keyed reserve still replays in that release's shape; its
/// budgets take a period and charges; and its chain verifies with theirs.
#[test]
fn a_revision_4_database_gains_periods_and_charges() {
    let ids: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("revision-4.json")).expect("the fixture's ids"),
    )
    .expect("JSON");
    let id = |name: &str| ids[name].as_str().expect(name).to_owned();
    let app = upgraded_from("revision-4.db", 4);
    let before_path = app.db_path.with_extension("before.db");
    std::fs::copy(fixture("revision-4.db"), &before_path).expect("copying the fixture");
    let entries_before = rows(&open_rw(&before_path), "ledger_entries", ENTRY_COLUMNS);

    let db = app.db();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("the version");
    assert_eq!(version, SCHEMA_VERSION, "migrated to the current schema");
    let entries_after = rows(
        &db,
        "ledger_entries",
        &format!("{ENTRY_COLUMNS}, period_id"),
    );
    assert_kept(&entries_before, &entries_after, "in no period");
    drop(db);

    let admin = app.admin();
    let (tenant, budget) = (id("tenant"), id("budget"));
    let path = format!("/v1/tenants/{tenant}/budgets/{budget}");
    let b = get_as(&app, &admin, &path).json();
    assert_eq!(b["period"], Value::Null, "{b}");
    assert_eq!(b["current_period"], Value::Null, "{b}");
    assert_eq!(b["alert_thresholds_atomic"], json!([]), "{b}");

    // The keyed reserve replays its exact answer, in the shape that release wrote.
    let token = format!("Bearer {}", id("token"));
    keyed_reserve_replays(&app, (&tenant, &budget, &token), 4);

    // The migrated budget takes a period and a charge.
    let period = json!({"period": {"every_seconds": 3600, "allowance_atomic": "100"}});
    let patched = send(
        &app.addr,
        "PATCH",
        &path,
        &admin,
        Some(&period.to_string()),
        None,
        &[],
    );
    assert_eq!(patched.status, 200, "{}", patched.describe());
    let charge = json!({"budget_id": budget, "amount_atomic": "7"});
    let charged = send(
        &app.addr,
        "POST",
        &format!("/v1/tenants/{tenant}/charges"),
        &token,
        Some(&charge.to_string()),
        None,
        &[],
    );
    assert_eq!(charged.status, 201, "{}", charged.describe());
    assert_eq!(
        charged.json()["period_id"],
        patched.json()["current_period"]["id"],
        "the charge fell in the new period"
    );
    let verified = audit_verify(&app.db_path);
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

/// What a budget is, and whether it is open: the columns that no expiry or period boundary
/// recorded since the fixture was written can move.
const BUDGET_COLUMNS: &str = "id, tenant_id, name, unit, state, created_at, closed_at, \
                              opening_deposit_atomic";

/// A database written by the release before budget trees (`tests/fixtures/revision-6.db`,
/// schema version 6: a budget with a monthly period and a threshold, a charge, holds
/// committed, released, extended and keyed, a closed budget, a tombstoned tenant) gains them
/// by migrations 7 and 8: every entry is kept as it was, each the budget's own movement; every
/// budget is kept as it was, at the top, and reads `"parent_id": null`; its keyed reserve
/// still replays in that release's shape; a migrated budget takes a child whose charge moves
/// it too; and its chain verifies with theirs.
#[test]
fn a_revision_6_database_gains_budget_trees() {
    let ids: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("revision-6.json")).expect("the fixture's ids"),
    )
    .expect("JSON");
    let id = |name: &str| ids[name].as_str().expect(name).to_owned();
    let app = upgraded_from("revision-6.db", 6);
    let before_path = app.db_path.with_extension("before.db");
    std::fs::copy(fixture("revision-6.db"), &before_path).expect("copying the fixture");
    let (entries_before, budgets_before) = {
        let db = open_rw(&before_path);
        (
            rows(
                &db,
                "ledger_entries",
                &format!("{ENTRY_COLUMNS}, period_id"),
            ),
            rows(&db, "budgets", BUDGET_COLUMNS),
        )
    };

    let db = app.db();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("the version");
    assert_eq!(version, SCHEMA_VERSION, "migrated to the current schema");
    let entries_after = rows(
        &db,
        "ledger_entries",
        &format!("{ENTRY_COLUMNS}, period_id, via_budget_id"),
    );
    assert_kept(&entries_before, &entries_after, "the budget's own movement");
    // The server may have recorded expiries and period boundaries since (the fixture's holds
    // last a day, its period a month): each is the budget's own movement too.
    let added = entries_after
        .iter()
        .filter(|e| !entries_before.iter().any(|b| b[0] == e[0]));
    for added in added {
        let kind = added[2].as_deref().unwrap_or_default();
        assert!(["expire", "refill", "forfeit"].contains(&kind), "{added:?}");
        assert_eq!(added.last(), Some(&None), "{added:?}");
    }
    let budgets_after = rows(&db, "budgets", &format!("{BUDGET_COLUMNS}, parent_id"));
    assert_eq!(
        budgets_after.len(),
        budgets_before.len(),
        "{budgets_after:?}"
    );
    for (before, after) in budgets_before.iter().zip(&budgets_after) {
        assert_eq!(after[..before.len()], before[..], "kept as it was");
        assert_eq!(after[before.len()], None, "at the top");
    }
    drop(db);

    // Every budget, open or closed, of a live or a tombstoned tenant, reads at the top.
    let admin = app.admin();
    let (tenant, budget) = (id("tenant"), id("budget"));
    let budgets = format!("/v1/tenants/{tenant}/budgets");
    let mut listed = Vec::new();
    for owner in [tenant.clone(), id("gone_tenant")] {
        let page = get_as(&app, &admin, &format!("/v1/tenants/{owner}/budgets")).json();
        listed.extend(page["data"].as_array().expect("a page").iter().cloned());
        let overview = get_as(&app, &admin, &format!("/v1/tenants/{owner}")).json();
        assert_eq!(
            overview["budget"].get("parent_id"),
            Some(&Value::Null),
            "{overview}"
        );
    }
    assert_eq!(listed.len(), budgets_before.len(), "{listed:?}");
    for b in &listed {
        assert_eq!(b.get("parent_id"), Some(&Value::Null), "{b}");
    }
    let closed = get_as(&app, &admin, &format!("{budgets}/{}", id("closed_budget"))).json();
    assert_eq!(closed["state"], "closed", "{closed}");
    assert_eq!(closed.get("parent_id"), Some(&Value::Null), "{closed}");

    // The keyed reserve replays its exact answer, in the shape that release wrote.
    let token = format!("Bearer {}", id("token"));
    let replay = keyed_reserve_replays(&app, (&tenant, &budget, &token), 6);
    assert_eq!(
        replay.header("location"),
        Some(reservation_path(&tenant, &id("keyed"), "").as_str()),
        "the Location of the original reserve"
    );

    // A migrated budget takes a child, and a charge on the child moves it too.
    let child = json!({"name": "gpu-hours-team", "opening_deposit_atomic": "300",
                       "parent_id": budget});
    let created = send(
        &app.addr,
        "POST",
        &budgets,
        &admin,
        Some(&child.to_string()),
        None,
        &[],
    );
    let created = assert_created(&created, &budgets, "a child of a migrated budget");
    assert_eq!(created["parent_id"], budget.as_str(), "{created}");
    let child_id = str_of(&created, "id").to_owned();
    let children = get_as(&app, &admin, &format!("{budgets}?parent_id={budget}")).json();
    assert_eq!(children["data"], json!([created]), "{children}");

    let parent_path = format!("{budgets}/{budget}");
    let spent = |b: &Value| -> u128 { str_of(b, "spent_atomic").parse().expect("a u128") };
    let parent_before = spent(&get_as(&app, &admin, &parent_path).json());
    let charge = json!({"budget_id": child_id, "amount_atomic": "25", "memo": "on the child"});
    let charged = send(
        &app.addr,
        "POST",
        &format!("/v1/tenants/{tenant}/charges"),
        &token,
        Some(&charge.to_string()),
        None,
        &[],
    );
    assert_eq!(charged.status, 201, "{}", charged.describe());
    let entry = charged.json();
    assert_eq!(entry["budget_id"], child_id.as_str(), "{entry}");
    assert_eq!(entry["via_budget_id"], Value::Null, "{entry}");
    let parent_after = spent(&get_as(&app, &admin, &parent_path).json());
    assert_eq!(parent_after, parent_before + 25, "the parent spent it too");
    let child_after = get_as(&app, &admin, &format!("{budgets}/{child_id}")).json();
    assert_eq!(child_after["spent_atomic"], "25", "{child_after}");
    let via: Vec<Vec<Option<String>>> = {
        let db = app.db();
        let mut stmt = db
            .prepare(
                "SELECT kind, amount_atomic, memo, via_budget_id FROM ledger_entries \
                 WHERE budget_id = ?1 AND via_budget_id IS NOT NULL ORDER BY id",
            )
            .expect("a query");
        stmt.query_map([&budget], |r| (0..4).map(|i| r.get(i)).collect())
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("the parent's entries")
    };
    let expected = ["charge", "25", "on the child", child_id.as_str()];
    assert_eq!(
        via,
        [expected.map(|s| Some(s.to_owned())).to_vec()],
        "the parent's one entry made by a spend below it"
    );

    let verified = audit_verify(&app.db_path);
    assert_eq!(verified.code, Some(0), "{verified:?}");
}
