//! Budgets that renew and one-call charges: a charge checks and spends in one step, every
//! entry reads alone, a period resets at its boundary with its refill or forfeit and carry,
//! statements tell each period's story, and a `PATCH` sets, changes and clears the policy and
//! the thresholds. The chain replays all of it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::wire::Response;

/// `PATCH` of the scene's budget, as admin, with `media` as its type.
fn patch(s: &Scene<'_>, body: &Value, media: &str) -> Response {
    let auth = s.app.admin();
    let text = body.to_string();
    s.app.request(
        "PATCH",
        &s.bpath(""),
        &[("Authorization", &auth), ("Content-Type", media)],
        Some(text.as_bytes()),
    )
}

/// A charge of `amount` on the scene's budget, with its credential.
fn charge(s: &Scene<'_>, amount: &str) -> Response {
    let body = json!({ "budget_id": s.bid, "amount_atomic": amount });
    s.post(&format!("/v1/tenants/{}/charges", s.tid), &body)
}

/// The budget's period statements, oldest first, as admin reads them.
fn statements(s: &Scene<'_>) -> Vec<Value> {
    let page = s.admin().get(&s.bpath("periods"));
    assert_eq!(page.status, 200, "{}", page.describe());
    page.json()["data"].as_array().expect("a page").clone()
}

/// Waits until the budget shows a period other than `id`, for at most `timeout`; the budget.
fn next_period(s: &Scene<'_>, id: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let b = s.budget();
        if b["current_period"]["id"] != json!(id) {
            return b;
        }
        assert!(Instant::now() < deadline, "no boundary recorded: {b}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_charge_spends_at_once_and_never_more_than_is_available() {
    let app = spawn_app();
    let s = Scene::new(&app, "charger", "100");
    let resp = charge(&s, "30");
    assert_eq!(resp.status, 201, "{}", resp.describe());
    assert_eq!(resp.header("location"), None, "a charge has no Location");
    let entry = resp.json();
    assert_fields(
        &entry,
        &[
            ("kind", json!("charge")),
            ("amount_atomic", json!("30")),
            ("available_atomic", json!("70")),
            ("period_id", Value::Null),
        ],
        "the charge's entry",
    );
    s.expect([100, 0, 30, 0], "spent at once, nothing held");

    let short = charge(&s, "71");
    let problem = assert_problem(
        &short,
        409,
        "insufficient_funds",
        "a charge above available",
    );
    assert_eq!(problem["available_atomic"], "70");
    s.expect([100, 0, 30, 0], "a refused charge changes nothing");

    // Every entry reads alone; another budget's, or an unknown one, is not found.
    let eid = str_of(&entry, "id");
    let alone = s.get(&s.bpath(&format!("entries/{eid}")));
    assert_eq!(alone.status, 200, "{}", alone.describe());
    assert_eq!(alone.json(), entry, "the entry as the charge answered it");
    let other = s.new_budget("other", "5");
    let elsewhere = s.get(&other.bpath(&format!("entries/{eid}")));
    assert_problem(&elsewhere, 404, "entry_not_found", "another budget's entry");
    let unknown = s.get(&s.bpath("entries/ent_nope"));
    assert_problem(&unknown, 404, "entry_not_found", "a malformed entry id");

    let missing = s.post(
        &format!("/v1/tenants/{}/charges", s.tid),
        &json!({ "budget_id": "bud_nope", "amount_atomic": "1" }),
    );
    assert_problem(&missing, 404, "budget_not_found", "an unknown budget");
    assert_eq!(s.close().status, 200);
    let closed = charge(&s, "1");
    assert_problem(&closed, 409, "budget_closed", "a closed budget");

    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn a_fixed_period_resets_with_its_allowance_and_carry_and_keeps_holds() {
    let app = spawn_app();
    let s = Scene::new(&app, "renewer", "0");
    let period = json!({ "every_seconds": 3, "allowance_atomic": "100",
                         "rollover_max_atomic": "10" });
    let created = s.post_budget(&json!({ "name": "monthly", "opening_deposit_atomic": "100",
                                        "period": period, "alert_thresholds_atomic": ["0", "50"] }));
    let b = assert_created(&created, &budgets_path(&s.tid), "a budget with a period");
    assert_eq!(
        b["period"], period,
        "the policy as given, with its defaults"
    );
    assert_eq!(
        b["alert_thresholds_atomic"],
        json!(["50", "0"]),
        "largest first"
    );
    let first = b["current_period"].clone();
    let started = timestamp_ms(str_of(&first, "started_at"));
    assert_eq!(str_of(&first, "started_at"), str_of(&b, "created_at"));
    assert_eq!(timestamp_ms(str_of(&first, "ends_at")) - started, 3000);
    let s = s.on(&id_of(&b));

    // Spend 60 and hold 25: 15 is left, 10 of it carries, 5 is forfeited; the hold stays.
    assert_eq!(charge(&s, "60").status, 201);
    let hold = s.hold("25", Some(60));
    let b = next_period(&s, str_of(&first, "id"), Duration::from_secs(5));
    let now = &b["current_period"];
    assert_eq!(
        now["started_at"], first["ends_at"],
        "the new period began at the boundary"
    );
    assert_eq!(
        b["available_atomic"], "110",
        "the allowance and the carry: {b}"
    );
    assert_eq!(b["reserved_atomic"], "25", "the hold is kept: {b}");
    let entries = s.entries();
    let refill = entries.last().expect("an entry");
    assert_fields(
        refill,
        &[
            ("kind", json!("refill")),
            ("amount_atomic", json!("95")),
            ("occurred_at", first["ends_at"].clone()),
            ("period_id", now["id"].clone()),
        ],
        "the boundary's entry, as if on time",
    );

    // The hold settles in the new period: what it does not spend returns there.
    let commit = s.post(
        &s.rpath(str_of(&hold, "id"), "commit"),
        &json!({ "amount_atomic": "5" }),
    );
    assert_eq!(commit.status, 200, "{}", commit.describe());
    let b = s.budget();
    assert_eq!(b["available_atomic"], "130", "{b}");

    let list = statements(&s);
    assert!(list.len() >= 2, "{list:?}");
    let closed = &list[0];
    assert_fields(
        closed,
        &[
            ("state", json!("closed")),
            ("allowance_atomic", json!("100")),
            ("carried_in_atomic", json!("0")),
            ("opening_available_atomic", json!("100")),
            ("credited_atomic", json!("0")),
            ("spent_atomic", json!("60")),
            ("closing_available_atomic", json!("15")),
            ("carried_out_atomic", json!("10")),
            ("forfeited_atomic", json!("5")),
            ("ends_at", first["ends_at"].clone()),
        ],
        "the first period's statement",
    );
    let second = &list[1];
    assert_eq!(second["carried_in_atomic"], "10", "{second}");
    assert_eq!(second["opening_available_atomic"], "110", "{second}");
    assert_eq!(second["started_at"], first["ends_at"], "{second}");

    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn boundaries_missed_while_stopped_are_all_recorded_in_order() {
    let mut app = spawn_app();
    let s = Scene::new(&app, "sleeper", "0");
    let created = s.post_budget(&json!({ "name": "tick", "opening_deposit_atomic": "7",
        "period": { "every_seconds": 1, "allowance_atomic": "3" } }));
    let b = assert_created(&created, &budgets_path(&s.tid), "a one-second period");
    let started = timestamp_ms(str_of(&b["current_period"], "started_at"));
    let (tid, bid) = (s.tid.clone(), id_of(&b));
    drop(s);
    app.terminate();
    std::thread::sleep(Duration::from_millis(3500));
    app.start();
    let mut s = Scene::new(&app, "waker", "0").admin();
    (s.tid, s.bid) = (tid, bid);
    let b = s.budget();
    let list = statements(&s);
    assert!(list.len() >= 4, "three boundaries or more passed: {list:?}");
    for (i, p) in list.iter().enumerate() {
        assert_eq!(
            timestamp_ms(str_of(p, "started_at")),
            started + 1000 * i as i64,
            "period {i} began on its boundary: {p}"
        );
    }
    let kinds = s.kinds();
    assert_eq!(kinds[0], "opening_deposit");
    assert_eq!(kinds[1], "forfeit", "7 available, 3 allowed: {kinds:?}");
    assert!(kinds[2..].iter().all(|k| k == "refill"), "{kinds:?}");
    assert_eq!(b["available_atomic"], "3", "{b}");
    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn a_patch_sets_changes_and_clears_the_policy_and_the_thresholds() {
    let app = spawn_app();
    let s = Scene::new(&app, "patcher", "500");
    let monthly = json!({ "interval": "month", "time_zone": "Europe/Berlin",
                          "allowance_atomic": "5000" });
    let resp = patch(
        &s,
        &json!({ "period": monthly }),
        "application/merge-patch+json",
    );
    assert_eq!(resp.status, 200, "{}", resp.describe());
    let b = resp.json();
    assert_eq!(
        b["period"],
        json!({ "interval": "month", "time_zone": "Europe/Berlin",
                "allowance_atomic": "5000", "rollover_max_atomic": "0" })
    );
    let current = &b["current_period"];
    let ends = str_of(current, "ends_at");
    assert!(
        ends.ends_with("T22:00:00.000Z") || ends.ends_with("T23:00:00.000Z"),
        "a Berlin midnight: {ends}"
    );
    let day = &ends[8..10];
    assert!(
        ["28", "29", "30", "31"].contains(&day),
        "the last day of a month, in UTC: {ends}"
    );
    assert_eq!(
        b["available_atomic"], "500",
        "a period set by PATCH starts as the budget is"
    );

    let events = app.audit_count();
    let same = patch(&s, &json!({ "period": monthly }), "application/json");
    assert_eq!(same.status, 200, "{}", same.describe());
    assert_eq!(same.json(), b, "nothing changes");
    assert_eq!(
        app.audit_count(),
        events,
        "a PATCH that changes nothing records nothing"
    );

    let resp = patch(
        &s,
        &json!({ "alert_thresholds_atomic": ["1", "100"] }),
        "application/json",
    );
    let b2 = resp.json();
    assert_eq!(b2["alert_thresholds_atomic"], json!(["100", "1"]));
    assert_eq!(
        b2["current_period"], b["current_period"],
        "thresholds leave the period be"
    );
    assert_eq!(app.audit_count(), events + 1);

    let cleared = patch(
        &s,
        &json!({ "period": null, "alert_thresholds_atomic": null }),
        "application/json",
    );
    let b3 = cleared.json();
    assert_eq!(b3["period"], Value::Null, "{b3}");
    assert_eq!(b3["current_period"], Value::Null, "{b3}");
    assert_eq!(b3["alert_thresholds_atomic"], json!([]), "{b3}");
    let list = statements(&s);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_fields(
        &list[0],
        &[
            ("state", json!("closed")),
            ("forfeited_atomic", json!("0")),
            ("carried_out_atomic", json!("500")),
            ("closing_available_atomic", json!("500")),
        ],
        "a period ended by a PATCH",
    );

    let bad = patch(
        &s,
        &json!({ "period": { "interval": "day", "every_seconds": 5,
                                             "allowance_atomic": "x" } }),
        "application/json",
    );
    let problem = assert_problem(&bad, 422, "validation_failed", "a bad period");
    assert_eq!(
        error_fields(&problem, "a bad period"),
        [
            "period.allowance_atomic",
            "period.every_seconds",
            "period.interval"
        ]
    );
    let text = patch(&s, &json!({}), "text/plain");
    assert_problem(
        &text,
        415,
        "unsupported_media_type",
        "a PATCH of another type",
    );
    assert_eq!(s.close().status, 200);
    let closed = patch(
        &s,
        &json!({ "alert_thresholds_atomic": ["1"] }),
        "application/json",
    );
    assert_problem(&closed, 409, "budget_closed", "a closed budget");

    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}
