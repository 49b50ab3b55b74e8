//! Events and alert thresholds: one event per change, written with it, carrying exactly what
//! the API answers for the objects it names; `budget.available_low` once per threshold a
//! movement falls through; the events the system writes at a boundary and at an expiry; the
//! three event reads as lists (pages, filters, bad queries), who may read them, and that no
//! event carries a secret.

use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::wire::Response;

/// The list of every event.
const EVENTS: &str = "/v1/events";

/// The members of an event, in the order they are written.
const EVENT_MEMBERS: [&str; 5] = ["id", "type", "created_at", "tenant_id", "data"];

/// The members of a tenant overview.
const OVERVIEW_MEMBERS: &str = "id name state created_at tombstoned_at budget";

/// The members of a period statement.
const STATEMENT_MEMBERS: &str = "id budget_id state started_at ends_at allowance_atomic \
     carried_in_atomic opening_available_atomic credited_atomic debited_atomic spent_atomic \
     forfeited_atomic carried_out_atomic closing_available_atomic";

/// How long a test waits for the system to record a boundary or an expiry it is owed: the
/// contract's second, and room for a loaded machine.
const SYSTEM_WAIT: Duration = Duration::from_secs(8);

/// The members of `data` of an event of type `ty`, in the order they are written.
fn data_members(ty: &str) -> &'static [&'static str] {
    match ty {
        "tenant.created" | "tenant.tombstoned" => &["tenant"],
        "budget.created" | "budget.updated" | "budget.closed" => &["budget"],
        "budget.credited" | "budget.debited" => &["budget", "entry"],
        "budget.available_low" => &["budget", "threshold_atomic"],
        "budget.period_reset" => &["budget", "closed_period", "entry"],
        "reservation.expired" => &["reservation", "budget"],
        other => panic!("not an event type: {other:?}"),
    }
}

/// The raw text of the member `name` of the object `text`.
fn raw_member(text: &str, name: &str, ctx: &str) -> String {
    let found = members(text, ctx).into_iter().find(|(n, _)| n == name);
    let (_, raw) = found.unwrap_or_else(|| panic!("{ctx}: no member {name:?} in {text}"));
    raw.get().to_owned()
}

/// `/v1/events/<id>`.
fn event_path(id: &str) -> String {
    format!("{EVENTS}/{id}")
}

/// `/v1/tenants/<tid>/events`.
fn tenant_events_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/events")
}

/// A well-formed event id of no event: the ULID of 26 zeros sorts before every real one.
fn lowest_event_id() -> String {
    format!("evt_{}", "0".repeat(ULID_CHARS))
}

/// The largest well-formed event id: sorts after every real one.
fn highest_event_id() -> String {
    format!("evt_7{}", "Z".repeat(ULID_CHARS - 1))
}

/// Checks an event's text: its members and theirs in the contract's order, its ids and
/// timestamp, and the shape of every object in `data`. Returns the event.
fn assert_event_text(text: &str, ctx: &str) -> Value {
    let names = member_names(text, ctx);
    assert_eq!(names, EVENT_MEMBERS, "{ctx}: the event's members in order");
    let ev: Value = serde_json::from_str(text).expect("JSON");
    let ty = str_of(&ev, "type");
    assert!(EVENT_TYPES.contains(&ty), "{ctx}: a known type: {ev}");
    assert!(
        is_id(str_of(&ev, "id"), "evt"),
        "{ctx}: evt_ + a ULID: {ev}"
    );
    assert!(
        is_id(str_of(&ev, "tenant_id"), "ten"),
        "{ctx}: tenant_id: {ev}"
    );
    let at = str_of(&ev, "created_at");
    assert!(is_timestamp(at), "{ctx}: created_at {at:?}");
    let data_text = raw_member(text, "data", ctx);
    let names = member_names(&data_text, ctx);
    assert_eq!(
        names,
        data_members(ty),
        "{ctx}: the members of data in order"
    );
    let (data, tid) = (&ev["data"], &ev["tenant_id"]);
    if let Some(tenant) = data.get("tenant") {
        assert_members(tenant, OVERVIEW_MEMBERS, &format!("{ctx}: data.tenant"));
        assert_eq!(&tenant["id"], tid, "{ctx}: the event's tenant");
        assert_budget_shape(&tenant["budget"], &format!("{ctx}: data.tenant.budget"));
    }
    if let Some(budget) = data.get("budget") {
        assert_budget_shape(budget, &format!("{ctx}: data.budget"));
        assert_eq!(
            &budget["tenant_id"], tid,
            "{ctx}: the event's tenant's budget"
        );
    }
    if let Some(entry) = data.get("entry") {
        assert_entry_shape(entry, &format!("{ctx}: data.entry"));
        assert_eq!(
            entry["budget_id"], data["budget"]["id"],
            "{ctx}: its budget's"
        );
    }
    if let Some(r) = data.get("reservation") {
        assert_reservation_shape(r, &format!("{ctx}: data.reservation"));
        assert_eq!(r["budget_id"], data["budget"]["id"], "{ctx}: its budget's");
        assert_eq!(&r["tenant_id"], tid, "{ctx}: the event's tenant's");
    }
    if let Some(p) = data.get("closed_period") {
        assert_members(p, STATEMENT_MEMBERS, &format!("{ctx}: data.closed_period"));
        assert_eq!(p["state"], "closed", "{ctx}: the closed period: {p}");
        assert_eq!(p["budget_id"], data["budget"]["id"], "{ctx}: its budget's");
    }
    if data.get("threshold_atomic").is_some() {
        let threshold = amount(data, "threshold_atomic");
        let budget = &data["budget"];
        let set = budget["alert_thresholds_atomic"].as_array().cloned();
        let listed = set.unwrap_or_default().contains(&data["threshold_atomic"]);
        assert!(listed, "{ctx}: one of the budget's thresholds: {ev}");
        let available = amount(budget, "available_atomic");
        assert!(available <= threshold, "{ctx}: at or below it: {ev}");
    }
    ev
}

/// `GET /v1/events/<id>` as admin, asserting `200` and the event's text; the event and its
/// text.
fn read_event(app: &TestApp, id: &str) -> (Value, String) {
    let resp = get_as(app, &app.admin(), &event_path(id));
    assert_ok(&resp, &format!("GET {}", event_path(id)));
    let media = resp.header("content-type").unwrap_or_default();
    assert!(media.starts_with("application/json"), "{id}: {media:?}");
    let text = resp.text();
    (assert_event_text(&text, &format!("event {id}")), text)
}

/// `GET path` as admin, asserting `200`; the body's text.
fn read_text(app: &TestApp, path: &str) -> String {
    let resp = get_as(app, &app.admin(), path);
    assert_ok(&resp, &format!("GET {path}"));
    resp.text()
}

/// The budget of the scene as admin reads it, as text.
fn budget_text(s: &Scene<'_>) -> String {
    read_text(s.app, &s.bpath(""))
}

/// Every event of the scene's tenant, oldest first, as admin reads them.
fn tenant_events(s: &Scene<'_>) -> Vec<Value> {
    list_all(s.app, &s.app.admin(), &tenant_events_path(&s.tid))
}

/// The tenant's events written since `seen` was read: the list still begins with `seen`
/// unchanged (events are never changed, and new ones sort after the old). Each new one reads
/// alone as it is listed, with its members in order. `seen` becomes the whole list.
fn events_since(s: &Scene<'_>, seen: &mut Vec<Value>) -> Vec<Value> {
    let now = tenant_events(s);
    let kept = now.len() >= seen.len() && now[..seen.len()] == seen[..];
    assert!(kept, "the events read before, unchanged and first: {now:?}");
    let new = now[seen.len()..].to_vec();
    for ev in &new {
        let (alone, _) = read_event(s.app, str_of(ev, "id"));
        assert_eq!(&alone, ev, "an event reads alone as it is listed");
        assert_eq!(ev["tenant_id"], json!(s.tid), "the tenant's own: {ev}");
    }
    *seen = now;
    new
}

/// The types of some events, in order.
fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| str_of(e, "type").to_owned())
        .collect()
}

/// Asserts the types of some events, in order.
fn assert_types(events: &[Value], expected: &[&str], ctx: &str) {
    assert_eq!(
        types(events),
        expected,
        "{ctx}: the events written: {events:?}"
    );
}

/// Asserts that `data.<member>` of `ev` is exactly the API's answer `answer` (a body's text):
/// the same value, with its members in the same order.
fn assert_answer(app: &TestApp, ev: &Value, member: &str, answer: &str, ctx: &str) {
    let expected: Value = serde_json::from_str(answer).expect("an answer is JSON");
    assert_eq!(
        ev["data"][member], expected,
        "{ctx}: data.{member} is what the API answers for it"
    );
    let (_, text) = read_event(app, str_of(ev, "id"));
    let inner = raw_member(&raw_member(&text, "data", ctx), member, ctx);
    assert_eq!(
        member_names(&inner, ctx),
        member_names(answer, ctx),
        "{ctx}: data.{member} has its members in the API's order"
    );
}

/// Asserts a `budget.available_low` of `threshold` on the scene's budget.
fn assert_low(s: &Scene<'_>, ev: &Value, threshold: &str, ctx: &str) {
    assert_eq!(ev["type"], "budget.available_low", "{ctx}: {ev}");
    assert_eq!(ev["data"]["threshold_atomic"], threshold, "{ctx}: {ev}");
    assert_eq!(ev["data"]["budget"]["id"], json!(s.bid), "{ctx}: {ev}");
}

/// Asserts that events are in strictly ascending id order (as the list shows them).
fn assert_ascending(events: &[Value], ctx: &str) {
    let ids: Vec<String> = events.iter().map(id_of).collect();
    let ascending = ids.windows(2).all(|w| w[0] < w[1]);
    assert!(ascending, "{ctx}: ids ascend in the order written: {ids:?}");
}

/// A budget of the scene's tenant made as admin from `body`; the scene on it and the `201`
/// body's text.
fn new_budget<'a>(s: &Scene<'a>, body: &Value) -> (Scene<'a>, String) {
    let resp = s.post_budget(body);
    let b = assert_created(&resp, &budgets_path(&s.tid), &format!("a budget of {body}"));
    (s.on(str_of(&b, "id")), resp.text())
}

/// A budget of the scene's tenant with a deposit and thresholds; the scene on it.
fn watched<'a>(s: &Scene<'a>, name: &str, deposit: &str, thresholds: &[&str]) -> Scene<'a> {
    let body = json!({ "name": name, "opening_deposit_atomic": deposit,
                       "alert_thresholds_atomic": thresholds });
    new_budget(s, &body).0
}

/// A charge of `amount` on the scene's budget, with the scene's credential; asserts `201`
/// and returns the entry.
fn charge(s: &Scene<'_>, amount: &str) -> Value {
    let body = json!({ "budget_id": s.bid, "amount_atomic": amount });
    let resp = s.post(&format!("/v1/tenants/{}/charges", s.tid), &body);
    assert_status(&resp, 201, &format!("a charge of {amount}"))
}

/// `PATCH` of the scene's budget as admin.
fn patch(s: &Scene<'_>, body: &Value) -> Response {
    let (auth, text) = (s.app.admin(), body.to_string());
    s.app.request(
        "PATCH",
        &s.bpath(""),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        Some(text.as_bytes()),
    )
}

/// Waits (bounded by [`SYSTEM_WAIT`]) until the tenant has an event of type `ty`; every
/// event of the tenant then.
fn wait_for_event(s: &Scene<'_>, ty: &str) -> Vec<Value> {
    let found = poll(SYSTEM_WAIT, || {
        let events = tenant_events(s);
        events.iter().any(|e| e["type"] == ty).then_some(events)
    });
    found.unwrap_or_else(|| panic!("a {ty} event within {SYSTEM_WAIT:?}"))
}

#[test]
fn a_new_tenant_writes_one_tenant_created_event_with_its_overview() {
    let app = spawn_app();
    let before = now_ms();
    let s = Scene::new(&app, "evented", "100");
    let after = now_ms();
    let mut seen = Vec::new();
    let new = events_since(&s, &mut seen);
    assert_types(&new, &["tenant.created"], "a tenant and its default budget");
    let ev = &new[0];
    let at = timestamp_ms(str_of(ev, "created_at"));
    let window = before - 2000..=after + 2000;
    assert!(window.contains(&at), "created_at when it was written: {ev}");
    let overview = read_text(&app, &format!("/v1/tenants/{}", s.tid));
    assert_answer(&app, ev, "tenant", &overview, "tenant.created");
    assert_eq!(ev["data"]["tenant"]["budget"]["id"], json!(s.bid), "{ev}");

    let (_, text) = read_event(&app, str_of(ev, "id"));
    for secret in [tenant_token(&s.created), app.admin_token.clone()] {
        assert!(!text.contains(&secret), "no token in the event: {text}");
    }
    assert!(!text.contains("sidecar_config_env"), "{text}");
    assert!(!text.contains("TENANTD_"), "{text}");
    let all = list_all(&app, &app.admin(), EVENTS);
    assert_eq!(all, new, "the whole list holds the one event");
}

#[test]
fn a_tombstone_writes_only_tenant_tombstoned_with_the_deletes_body() {
    let app = spawn_app();
    let s = Scene::new(&app, "doomed", "100");
    let side = s.new_budget("side", "10");
    s.hold_id("5");
    side.hold_id("5");
    let mut seen = Vec::new();
    let new = events_since(&s, &mut seen);
    let ctx = "a tenant, a budget and two holds";
    assert_types(&new, &["tenant.created", "budget.created"], ctx);

    let resp = app.delete(&s.tid);
    assert_ok(&resp, "DELETE of the tenant");
    let new = events_since(&s, &mut seen);
    let ctx = "a tombstone, its closings and releases implied";
    assert_types(&new, &["tenant.tombstoned"], ctx);
    assert_answer(&app, &new[0], "tenant", &resp.text(), "tenant.tombstoned");
    assert_eq!(new[0]["data"]["tenant"]["state"], "tombstoned");

    let again = app.delete(&s.tid);
    assert_ok(&again, "a repeated DELETE");
    assert_types(&events_since(&s, &mut seen), &[], "a repeated DELETE");
    let revoked = get_as(&app, &s.token, &tenant_events_path(&s.tid));
    assert_problem(&revoked, 401, "unauthorized", "the revoked token");
}

#[test]
fn a_budget_writes_created_updated_and_closed_with_the_answers() {
    let app = spawn_app();
    let s = Scene::new(&app, "lifecycle", "100");
    let mut seen = Vec::new();
    events_since(&s, &mut seen);
    let body = json!({ "name": "gpu", "unit": "tokens", "opening_deposit_atomic": "50",
                       "period": { "interval": "month", "allowance_atomic": "50" } });
    let (b, created) = new_budget(&s, &body);
    let new = events_since(&s, &mut seen);
    assert_types(&new, &["budget.created"], "a new budget");
    assert_answer(&app, &new[0], "budget", &created, "budget.created");

    let resp = patch(&b, &json!({ "alert_thresholds_atomic": ["10"] }));
    assert_ok(&resp, "a PATCH of the thresholds");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.updated"], "a PATCH");
    assert_answer(&app, &new[0], "budget", &resp.text(), "budget.updated");

    let same = patch(&b, &json!({ "alert_thresholds_atomic": ["10"] }));
    assert_ok(&same, "a PATCH that changes nothing");
    assert_types(
        &events_since(&b, &mut seen),
        &[],
        "a PATCH that changes nothing",
    );

    let resp = patch(&b, &json!({ "period": null }));
    assert_ok(&resp, "a PATCH clearing the period");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.updated"], "a PATCH clearing the period");
    assert_answer(&app, &new[0], "budget", &resp.text(), "budget.updated");
    assert_eq!(new[0]["data"]["budget"]["period"], Value::Null);

    b.hold_id("5");
    let resp = b.close();
    assert_ok(&resp, "closing the budget");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.closed"], "a closing, its release implied");
    assert_answer(&app, &new[0], "budget", &resp.text(), "budget.closed");
    assert_eq!(new[0]["data"]["budget"]["state"], "closed");
    assert_eq!(new[0]["data"]["budget"]["reserved_atomic"], "0");
    assert_ok(&b.close(), "a repeated close");
    assert_types(&events_since(&b, &mut seen), &[], "a repeated close");
}

#[test]
fn credits_and_debits_carry_their_entry_and_the_budget_after() {
    let app = spawn_app();
    let s = Scene::new(&app, "ledgered", "100");
    let mut seen = Vec::new();
    events_since(&s, &mut seen);
    let cases = [
        ("credits", "budget.credited", "25", "a top-up"),
        ("debits", "budget.debited", "40", "a refund"),
    ];
    for (tail, ty, amount, memo) in cases {
        let body = json!({ "amount_atomic": amount, "memo": memo });
        let resp = s.admin().post(&s.bpath(tail), &body);
        assert_status(&resp, 201, tail);
        let new = events_since(&s, &mut seen);
        assert_types(&new, &[ty], tail);
        assert_answer(&app, &new[0], "entry", &resp.text(), ty);
        assert_answer(&app, &new[0], "budget", &budget_text(&s), ty);
        assert_eq!(new[0]["data"]["entry"]["memo"], memo);
    }
    assert_eq!(s.budget()["available_atomic"], "85");

    let refused = s.debit("86");
    assert_insufficient(&refused, 85, "a debit above available");
    assert_types(&events_since(&s, &mut seen), &[], "a refused debit");
    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn the_spend_path_writes_no_event_of_its_own() {
    let app = spawn_app();
    let s = Scene::new(&app, "spender", "1000");
    let mut seen = Vec::new();
    events_since(&s, &mut seen);
    let r1 = s.hold_id("100");
    assert_ok(&s.extend(&r1, 600), "an extend");
    assert_ok(&s.commit(&r1, "150"), "a commit above the hold");
    let r2 = s.hold_id("10");
    assert_ok(&s.release(&r2), "a release");
    let r3 = s.admin().hold_id("10");
    assert_ok(&s.admin().commit(&r3, "0"), "a commit of nothing");
    charge(&s, "7");
    charge(&s.admin(), "3");
    s.expect([1000, 0, 160, 0], "the spend path");
    let new = events_since(&s, &mut seen);
    assert_types(
        &new,
        &[],
        "reserves, extends, commits, releases and charges",
    );
}

#[test]
fn replays_and_repeats_write_no_second_event() {
    let app = spawn_app();
    let key = random_hex(8);
    let first = app.create_with_key("replayed", "100", &key);
    assert_eq!(first.status, 201, "{}", first.describe());
    let replay = app.create_with_key("replayed", "100", &key);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.status, 201, "{}", replay.describe());
    let created = first.json();
    let token = bearer(&tenant_token(&created));
    let s = Scene {
        app: &app,
        tid: tenant_id(&created),
        bid: str_of(&created["budget"], "id").to_owned(),
        auth: token.clone(),
        token,
        created,
    };
    let mut seen = Vec::new();
    assert_types(
        &events_since(&s, &mut seen),
        &["tenant.created"],
        "a replay",
    );

    let admin = s.admin();
    let budget = json!({ "name": "keyed", "opening_deposit_atomic": "1" });
    let credit = amount_body("5");
    for _ in 0..2 {
        let resp = admin.post_keyed(&budgets_path(&s.tid), &budget, &format!("{key}-b"));
        assert_status(&resp, 201, "a keyed budget");
        let resp = admin.post_keyed(&s.bpath("credits"), &credit, &format!("{key}-c"));
        assert_status(&resp, 201, "a keyed credit");
        let resp = admin.post_keyed(&s.bpath("debits"), &credit, &format!("{key}-d"));
        assert_status(&resp, 201, "a keyed debit");
    }
    let new = events_since(&s, &mut seen);
    let once = ["budget.created", "budget.credited", "budget.debited"];
    assert_types(&new, &once, "each write once, its replay nothing");
}

#[test]
fn available_low_fires_once_for_each_fall_through_a_threshold() {
    let app = spawn_app();
    let s = Scene::new(&app, "watcher", "0");
    let b = watched(&s, "watched", "100", &["20", "50"]);
    let mut seen = Vec::new();
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["tenant.created", "budget.created"], "the start");
    let thresholds = &new[1]["data"]["budget"]["alert_thresholds_atomic"];
    assert_eq!(thresholds, &json!(["50", "20"]), "largest first");

    charge(&b, "40");
    assert_types(&events_since(&b, &mut seen), &[], "100 to 60, above both");
    charge(&b, "15");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.available_low"], "60 to 45, through 50");
    assert_low(&b, &new[0], "50", "60 to 45");
    assert_answer(
        &app,
        &new[0],
        "budget",
        &budget_text(&b),
        "the budget after",
    );
    assert_eq!(new[0]["data"]["budget"]["available_atomic"], "45");

    charge(&b, "5");
    assert_types(
        &events_since(&b, &mut seen),
        &[],
        "45 to 40, still below 50",
    );
    assert_status(&b.credit("30"), 201, "a credit");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.credited"], "40 to 70, above 50 again");

    let resp = b.debit("25");
    assert_status(&resp, 201, "a debit");
    let new = events_since(&b, &mut seen);
    let ctx = "70 to 45: the debit, then its crossing";
    assert_types(&new, &["budget.debited", "budget.available_low"], ctx);
    assert_ascending(&new, ctx);
    assert_low(&b, &new[1], "50", ctx);
    let after = budget_text(&b);
    assert_answer(&app, &new[0], "entry", &resp.text(), ctx);
    assert_answer(&app, &new[0], "budget", &after, ctx);
    assert_answer(&app, &new[1], "budget", &after, ctx);

    charge(&b, "45");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.available_low"], "45 to 0, through 20 only");
    assert_low(&b, &new[0], "20", "45 to 0");
    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn thresholds_crossed_at_once_fire_largest_first_after_the_changes_own_event() {
    let app = spawn_app();
    let s = Scene::new(&app, "plunger", "0");
    let b = watched(&s, "plunging", "100", &["10", "50", "0", "30"]);
    let mut seen = Vec::new();
    events_since(&b, &mut seen);

    let resp = b.debit("95");
    assert_status(&resp, 201, "a debit of 95");
    let new = events_since(&b, &mut seen);
    let ctx = "100 to 5, through 50, 30 and 10";
    let low = "budget.available_low";
    assert_types(&new, &["budget.debited", low, low, low], ctx);
    assert_ascending(&new, ctx);
    for (ev, threshold) in new[1..].iter().zip(["50", "30", "10"]) {
        assert_low(&b, ev, threshold, ctx);
    }
    let after = budget_text(&b);
    for ev in &new {
        assert_answer(&app, ev, "budget", &after, ctx);
    }
    assert_answer(&app, &new[0], "entry", &resp.text(), ctx);

    let held = b.hold("5", None);
    let new = events_since(&b, &mut seen);
    assert_types(&new, &[low], "a reservation that takes 5 to 0");
    assert_low(&b, &new[0], "0", "exhausted");
    assert_eq!(new[0]["data"]["budget"]["reserved_atomic"], "5");
    assert_eq!(new[0]["data"]["budget"]["available_atomic"], "0");
    assert_ok(&b.release(str_of(&held, "id")), "a release");
    assert_types(&events_since(&b, &mut seen), &[], "a release raises");
    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn reservations_commits_and_charges_cross_thresholds_too() {
    let app = spawn_app();
    let s = Scene::new(&app, "crosser", "0");
    let b = watched(&s, "crossed", "100", &["50", "0"]);
    let mut seen = Vec::new();
    events_since(&b, &mut seen);
    let low = ["budget.available_low"];

    let r = b.hold_id("60");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &low, "a reservation: 100 to 40");
    assert_low(&b, &new[0], "50", "a reservation");
    assert_answer(&app, &new[0], "budget", &budget_text(&b), "a reservation");
    assert_ok(&b.release(&r), "a release");
    assert_types(&events_since(&b, &mut seen), &[], "a release: 40 to 100");

    let r = b.hold_id("40");
    assert_types(&events_since(&b, &mut seen), &[], "100 to 60");
    assert_ok(&b.commit(&r, "55"), "a commit above the hold");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &low, "a commit of 55 on a hold of 40: 60 to 45");
    assert_low(&b, &new[0], "50", "a commit above its hold");
    assert_answer(&app, &new[0], "budget", &budget_text(&b), "a commit");

    let r = b.hold_id("45");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &low, "a reservation of everything: 45 to 0");
    assert_low(&b, &new[0], "0", "exhausted");
    assert_ok(&b.commit(&r, "45"), "a commit of the whole hold");
    assert_types(&events_since(&b, &mut seen), &[], "0 stays 0");

    assert_status(&b.credit("10"), 201, "a credit");
    assert_types(
        &events_since(&b, &mut seen),
        &["budget.credited"],
        "0 to 10",
    );
    charge(&b, "10");
    let new = events_since(&b, &mut seen);
    assert_types(&new, &low, "a charge: 10 to 0");
    assert_low(&b, &new[0], "0", "a charge");
    assert_answer(&app, &new[0], "budget", &budget_text(&b), "a charge");
}

#[test]
fn a_threshold_already_reached_fires_only_after_rising_above_it_again() {
    let app = spawn_app();
    let body = json!({ "name": "low-born", "opening_deposit_atomic": "10",
                       "alert_thresholds_atomic": ["50"] });
    let created = app.post_tenants(&body.to_string(), None);
    assert_eq!(created.status, 201, "{}", created.describe());
    let created = created.json();
    let token = bearer(&tenant_token(&created));
    let s = Scene {
        app: &app,
        tid: tenant_id(&created),
        bid: str_of(&created["budget"], "id").to_owned(),
        auth: token.clone(),
        token,
        created,
    };
    let mut seen = Vec::new();
    let new = events_since(&s, &mut seen);
    assert_types(
        &new,
        &["tenant.created"],
        "a tenant born below its threshold",
    );
    let shown = &new[0]["data"]["tenant"]["budget"]["alert_thresholds_atomic"];
    assert_eq!(shown, &json!(["50"]), "{}", new[0]);

    charge(&s, "5");
    assert_types(&events_since(&s, &mut seen), &[], "10 to 5, never above 50");
    assert_status(&s.credit("100"), 201, "a credit");
    assert_types(
        &events_since(&s, &mut seen),
        &["budget.credited"],
        "5 to 105",
    );
    charge(&s, "60");
    let new = events_since(&s, &mut seen);
    assert_types(&new, &["budget.available_low"], "105 to 45");
    assert_low(&s, &new[0], "50", "after rising above it");

    let resp = patch(&s, &json!({ "alert_thresholds_atomic": ["100", "50"] }));
    assert_ok(&resp, "a PATCH adding a threshold already reached");
    let new = events_since(&s, &mut seen);
    assert_types(&new, &["budget.updated"], "a PATCH at 45 adding 100");
    charge(&s, "1");
    assert_types(&events_since(&s, &mut seen), &[], "45 to 44, below both");
    assert_status(&s.credit("100"), 201, "a credit");
    assert_types(
        &events_since(&s, &mut seen),
        &["budget.credited"],
        "44 to 144",
    );
    assert_status(&s.debit("100"), 201, "a debit");
    let new = events_since(&s, &mut seen);
    let low = "budget.available_low";
    assert_types(&new, &["budget.debited", low, low], "144 to 44");
    assert_low(&s, &new[1], "100", "the larger first");
    assert_low(&s, &new[2], "50", "then the smaller");

    let zero = watched(&s, "empty", "0", &["0"]);
    let new = events_since(&s, &mut seen);
    assert_types(
        &new,
        &["budget.created"],
        "a budget made at its threshold 0",
    );
    assert_status(&zero.credit("5"), 201, "a credit");
    charge(&zero, "5");
    let new = events_since(&s, &mut seen);
    assert_types(&new, &["budget.credited", low], "0 to 5, then 5 to 0");
    assert_low(&zero, &new[1], "0", "exhausted after rising");
}

/// The raw texts of the items of a page's text.
fn raw_items(page: &str) -> Vec<String> {
    let data = raw_member(page, "data", "a page");
    let items: Vec<Box<RawValue>> = serde_json::from_str(&data).expect("data is an array");
    items.iter().map(|i| i.get().to_owned()).collect()
}

/// How many of the statements of a page's text are closed.
fn closed_statements(page: &Value) -> usize {
    let data = page["data"].as_array().cloned().unwrap_or_default();
    data.iter().filter(|p| p["state"] == "closed").count()
}

/// The events of a type among some events.
fn of_type(events: &[Value], ty: &str) -> Vec<Value> {
    events.iter().filter(|e| e["type"] == ty).cloned().collect()
}

#[test]
fn a_boundary_writes_period_reset_with_its_entry_and_the_closed_statement() {
    let app = spawn_app();
    let s = Scene::new(&app, "renewing", "0");
    let body = json!({ "name": "two-seconds", "opening_deposit_atomic": "100",
                       "period": { "every_seconds": 2, "allowance_atomic": "100" } });
    let (b, created) = new_budget(&s, &body);
    let first: Value = serde_json::from_str(&created).expect("JSON");
    let first = first["current_period"].clone();
    charge(&b, "30");

    let events = wait_for_event(&b, "budget.period_reset");
    let periods_path = with_query(&b.bpath("periods"), "limit=1000");
    let statements_text = read_text(&app, &periods_path);
    let budget_now = budget_text(&b);
    let ctx = "the first boundary";
    let kinds: Vec<String> = types(&events);
    assert_eq!(
        kinds[..3],
        ["tenant.created", "budget.created", "budget.period_reset"]
    );
    let ev = &events[2];
    let (data, entry) = (&ev["data"], &ev["data"]["entry"]);
    assert_fields(
        entry,
        &[
            ("kind", json!("refill")),
            ("amount_atomic", json!("30")),
            ("available_atomic", json!("100")),
            ("occurred_at", first["ends_at"].clone()),
            ("period_id", data["budget"]["current_period"]["id"].clone()),
        ],
        ctx,
    );
    let entry_text = read_text(&app, &b.bpath(&format!("entries/{}", str_of(entry, "id"))));
    assert_answer(&app, ev, "entry", &entry_text, ctx);
    let statement = &raw_items(&statements_text)[0];
    assert_answer(&app, ev, "closed_period", statement, ctx);
    assert_fields(
        &data["closed_period"],
        &[
            ("id", first["id"].clone()),
            ("state", json!("closed")),
            ("ends_at", first["ends_at"].clone()),
            ("spent_atomic", json!("30")),
            ("closing_available_atomic", json!("70")),
            ("carried_out_atomic", json!("0")),
            ("forfeited_atomic", json!("70")),
        ],
        ctx,
    );
    let budget = &data["budget"];
    assert_eq!(budget["available_atomic"], "100", "{ctx}: {budget}");
    assert_eq!(budget["current_period"]["started_at"], first["ends_at"]);
    let shown: Value = serde_json::from_str(&budget_now).expect("JSON");
    if shown["current_period"]["id"] == budget["current_period"]["id"] {
        assert_answer(&app, ev, "budget", &budget_now, ctx);
    }

    // One event per boundary: every closed statement has its event and no more.
    let closed_before = closed_statements(&list_page(&app, &app.admin(), &periods_path));
    let resets = of_type(&tenant_events(&b), "budget.period_reset").len();
    let closed_after = closed_statements(&list_page(&app, &app.admin(), &periods_path));
    assert!(
        closed_before <= resets && resets <= closed_after,
        "one budget.period_reset per boundary: {closed_before} ≤ {resets} ≤ {closed_after}"
    );
    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}

#[test]
fn a_forfeit_at_a_boundary_crosses_a_threshold_after_its_period_reset() {
    let app = spawn_app();
    let s = Scene::new(&app, "forfeiting", "0");
    let body = json!({ "name": "shrinking", "opening_deposit_atomic": "100",
                       "alert_thresholds_atomic": ["50"],
                       "period": { "every_seconds": 2, "allowance_atomic": "40" } });
    let (b, _) = new_budget(&s, &body);
    let events = wait_for_event(&b, "budget.period_reset");
    let ctx = "a boundary that forfeits 60";
    let low = "budget.available_low";
    assert_eq!(
        types(&events)[..4],
        [
            "tenant.created",
            "budget.created",
            "budget.period_reset",
            low
        ],
        "{ctx}"
    );
    let (reset, alert) = (&events[2], &events[3]);
    assert_ascending(&events, ctx);
    let entry = &reset["data"]["entry"];
    assert_eq!(entry["kind"], "forfeit", "{ctx}: {entry}");
    assert_eq!(entry["amount_atomic"], "60", "{ctx}: {entry}");
    assert_low(&b, alert, "50", ctx);
    assert_eq!(
        alert["data"]["budget"], reset["data"]["budget"],
        "{ctx}: one movement"
    );
    assert_eq!(alert["data"]["budget"]["available_atomic"], "40");
    // Later boundaries refill nothing: 40 stays 40, and nothing crosses again.
    let later = poll(SYSTEM_WAIT, || {
        let events = tenant_events(&b);
        (of_type(&events, "budget.period_reset").len() >= 2).then_some(events)
    });
    let later = later.expect("a second boundary");
    assert_eq!(of_type(&later, low).len(), 1, "one crossing: {later:?}");
}

#[test]
fn an_expiry_writes_reservation_expired_with_the_reservation_and_the_budget() {
    let app = spawn_app();
    let s = Scene::new(&app, "expirer", "0");
    let b = watched(&s, "short", "100", &["50"]);
    let mut seen = Vec::new();
    events_since(&b, &mut seen);
    let r = b.hold("60", Some(1));
    let rid = id_of(&r);
    let new = events_since(&b, &mut seen);
    assert_types(&new, &["budget.available_low"], "a hold of 60: 100 to 40");

    b.wait_expired(&rid);
    let new = events_since(&b, &mut seen);
    let ctx = "an expiry recorded by the system";
    assert_types(&new, &["reservation.expired"], ctx);
    let reservation = read_text(&app, &b.rpath(&rid, ""));
    assert_answer(&app, &new[0], "reservation", &reservation, ctx);
    assert_answer(&app, &new[0], "budget", &budget_text(&b), ctx);
    let data = &new[0]["data"];
    assert_eq!(data["reservation"]["state"], "expired", "{ctx}: {data}");
    assert_eq!(data["budget"]["available_atomic"], "100", "{ctx}: {data}");

    charge(&b, "60");
    let new = events_since(&b, &mut seen);
    assert_types(
        &new,
        &["budget.available_low"],
        "risen by the expiry, fallen again",
    );
    assert_low(&b, &new[0], "50", "after the expiry");
}

#[test]
fn event_pages_hold_100_by_default_and_up_to_1000() {
    let app = spawn_app();
    let s = Scene::new(&app, "chatty", "0");
    for i in 0..PAGE_LIMIT_DEFAULT {
        assert_status(&s.credit("1"), 201, &format!("credit {i}"));
    }
    let admin = app.admin();
    let ids: Vec<String> = list_all(&app, &admin, EVENTS).iter().map(id_of).collect();
    assert_eq!(
        ids.len(),
        PAGE_LIMIT_DEFAULT + 1,
        "a creation and 100 credits"
    );
    for path in [EVENTS.to_owned(), tenant_events_path(&s.tid)] {
        let first = list_page(&app, &admin, &path);
        let (head, tail) = ids.split_at(PAGE_LIMIT_DEFAULT);
        assert_eq!(
            page_ids(&first),
            head,
            "GET {path}: 100 by default, oldest first"
        );
        assert_eq!(first["has_more"], true, "GET {path}: 101 do not fit");
        let after = format!("after={}", str_of(&first, "next_after"));
        let next = list_page(&app, &admin, &with_query(&path, &after));
        assert_eq!(page_ids(&next), tail, "GET {path}?{after}: the rest");
        assert_eq!(next["has_more"], false, "GET {path}?{after}: the last page");
        let all = list_page(&app, &admin, &with_query(&path, "limit=1000"));
        assert_eq!(page_ids(&all), ids, "GET {path}?limit=1000: all 101");
        let one = list_page(&app, &admin, &with_query(&path, "limit=1"));
        assert_eq!(page_ids(&one), ids[..1], "GET {path}?limit=1: the oldest");
        assert_eq!(one["has_more"], true, "GET {path}?limit=1");
    }
}

#[test]
fn paging_events_never_skips_or_repeats_and_after_may_name_no_event() {
    let app = spawn_app();
    let a = Scene::new(&app, "pager-a", "100");
    let b = Scene::new(&app, "pager-b", "100");
    for _ in 0..3 {
        assert_status(&a.credit("1"), 201, "a credit");
        assert_status(&b.debit("1"), 201, "a debit");
    }
    let admin = app.admin();
    for (round, path) in [EVENTS.to_owned(), tenant_events_path(&a.tid)]
        .into_iter()
        .enumerate()
    {
        let before: Vec<String> = list_all(&app, &admin, &path).iter().map(id_of).collect();
        assert!(before.len() >= 5, "GET {path}: pages to read: {before:?}");
        let mut seen: Vec<String> = Vec::new();
        let mut query = with_query(&path, "limit=2");
        for page_no in 0..50 {
            let page = list_page(&app, &admin, &query);
            let ids = page_ids(&page);
            assert!(ids.len() <= 2, "GET {query}: at most the limit: {ids:?}");
            seen.extend(ids);
            // Events written between pages must neither shift nor repeat what was read.
            assert_status(&a.credit("1"), 201, &format!("credit {round}-{page_no}"));
            let Some(next) = page["next_after"].as_str() else {
                break;
            };
            query = with_query(&path, &format!("limit=2&after={next}"));
        }
        for pair in seen.windows(2) {
            assert!(
                pair[0] < pair[1],
                "GET {path}: ascending, no repeats: {seen:?}"
            );
        }
        assert_eq!(seen[..before.len()], before, "GET {path}: nothing skipped");

        let ids: Vec<String> = list_all(&app, &admin, &path).iter().map(id_of).collect();
        // An id one above the second event's: within one millisecond the next event may
        // have exactly that id, so what follows it is computed, not assumed.
        let between = id_after(&ids[1]);
        let cases = [
            ("one above the second event's", between),
            ("below every event", lowest_event_id()),
            ("above every event", highest_event_id()),
            ("the last event's", ids[ids.len() - 1].clone()),
        ];
        for (msg, after) in cases {
            let expected: Vec<&String> = ids.iter().filter(|id| **id > after).collect();
            let page = list_page(&app, &admin, &with_query(&path, &format!("after={after}")));
            assert_eq!(
                page_ids(&page).iter().collect::<Vec<_>>(),
                expected,
                "GET {path} after an id {msg}"
            );
            assert_eq!(page["has_more"], false, "GET {path} after an id {msg}");
        }
    }
}

#[test]
fn filters_select_events_by_type_tenant_and_time() {
    let app = spawn_app();
    let a = Scene::new(&app, "filter-a", "100");
    let b = Scene::new(&app, "filter-b", "100");
    assert_status(&a.credit("1"), 201, "a credit");
    assert_status(&b.credit("2"), 201, "a credit");
    assert_status(&a.debit("1"), 201, "a debit");
    let admin = app.admin();
    let mark = list_all(&app, &admin, EVENTS).pop().expect("events");
    std::thread::sleep(Duration::from_millis(30));
    assert_status(&a.credit("3"), 201, "a credit");
    assert_status(&b.debit("1"), 201, "a debit");
    a.new_budget("late", "5");
    let all = list_all(&app, &admin, EVENTS);
    assert_eq!(all.len(), 8, "{all:?}");

    let ids = |events: &[Value]| -> Vec<String> { events.iter().map(id_of).collect() };
    let keep = |pred: &dyn Fn(&Value) -> bool| -> Vec<String> {
        ids(&all.iter().filter(|e| pred(e)).cloned().collect::<Vec<_>>())
    };
    let at = str_of(&mark, "created_at");
    let mark_ms = timestamp_ms(at);
    let later = |e: &Value| timestamp_ms(str_of(e, "created_at")) > mark_ms;
    let later_ids = keep(&later);
    assert_eq!(
        later_ids.len(),
        3,
        "the three written after the pause: {all:?}"
    );
    let offset = at
        .parse::<jiff::Timestamp>()
        .expect("a timestamp")
        .to_zoned(jiff::tz::TimeZone::fixed(jiff::tz::offset(1)))
        .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
        .to_string();
    let offset = offset.replace('+', "%2B");
    let (ta, tb) = (a.tid.as_str(), b.tid.as_str());
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            "type=budget.credited".into(),
            keep(&|e| e["type"] == "budget.credited"),
        ),
        (
            "type=tenant.created".into(),
            keep(&|e| e["type"] == "tenant.created"),
        ),
        ("type=budget.period_reset".into(), vec![]),
        (format!("tenant_id={ta}"), keep(&|e| e["tenant_id"] == ta)),
        (format!("tenant_id={UNKNOWN_TENANT}"), vec![]),
        (
            format!("tenant_id={tb}&type=budget.debited"),
            keep(&|e| e["tenant_id"] == tb && e["type"] == "budget.debited"),
        ),
        (format!("created_after={at}"), later_ids.clone()),
        (format!("created_after={offset}"), later_ids.clone()),
        ("created_after=2000-01-01T00:00:00Z".into(), ids(&all)),
        ("created_after=2999-01-01T00:00:00.000Z".into(), vec![]),
        (
            format!("created_after={at}&type=budget.credited&tenant_id={ta}"),
            keep(&|e| later(e) && e["type"] == "budget.credited" && e["tenant_id"] == ta),
        ),
    ];
    for (query, expected) in &cases {
        let path = format!("{EVENTS}?{query}");
        let got: Vec<String> = list_all(&app, &admin, &path).iter().map(id_of).collect();
        assert_eq!(&got, expected, "GET {path}: exactly the matching events");
        let first = list_page(&app, &admin, &with_query(&path, "limit=1"));
        assert_eq!(
            page_ids(&first),
            expected[..expected.len().min(1)],
            "GET {path}&limit=1"
        );
        assert_eq!(
            first["has_more"],
            expected.len() > 1,
            "GET {path}&limit=1: has_more"
        );
    }
    let own = tenant_events_path(ta);
    assert_eq!(
        ids(&list_all(&app, &admin, &own)),
        keep(&|e| e["tenant_id"] == ta),
        "GET {own}: the tenant's events"
    );
    let credited = with_query(&own, "type=budget.credited");
    assert_eq!(
        ids(&list_all(&app, &admin, &credited)),
        keep(&|e| e["tenant_id"] == ta && e["type"] == "budget.credited"),
        "GET {credited}"
    );
    for &ty in EVENT_TYPES {
        let path = format!("{EVENTS}?type={ty}");
        for event in list_all(&app, &admin, &path) {
            assert_eq!(event["type"], ty, "GET {path}: {event}");
        }
        list_page(&app, &admin, &with_query(&own, &format!("type={ty}")));
    }
}

#[test]
fn bad_event_queries_are_invalid_query_naming_each_parameter() {
    let app = spawn_app();
    let s = Scene::new(&app, "queried", "10");
    let admin = app.admin();
    let lowest = lowest_event_id();
    let lower = format!("after={}", highest_event_id().to_ascii_lowercase());
    let twice = format!("after={lowest}&after={lowest}");
    let wrong_kind = format!("after={UNKNOWN_TENANT}");
    let common: Vec<(String, Vec<&str>)> = [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        ("limit=-1", "limit"),
        ("limit=", "limit"),
        ("limit=1&limit=2", "limit"),
        ("after=", "after"),
        ("after=nope", "after"),
        (wrong_kind.as_str(), "after"),
        (lower.as_str(), "after"),
        (twice.as_str(), "after"),
        ("type=bogus", "type"),
        ("type=", "type"),
        ("type", "type"),
        ("type=*", "type"),
        ("type=Budget.Credited", "type"),
        ("type=budget.*", "type"),
        ("type=reservation.created", "type"),
        ("type=budget.charged", "type"),
        ("type=tenant.created,budget.created", "type"),
        ("type=tenant.created&type=budget.created", "type"),
        ("colour=red", "colour"),
        ("Type=tenant.created", "Type"),
    ]
    .iter()
    .map(|(q, f)| ((*q).to_owned(), vec![*f]))
    .collect();
    let combined = (
        "limit=0&type=bogus&colour=red".to_owned(),
        vec!["colour", "limit", "type"],
    );
    let mut global = common.clone();
    global.push(combined.clone());
    global.extend(
        [
            ("tenant_id=nope", "tenant_id"),
            ("tenant_id=", "tenant_id"),
            ("tenant_id=bud_01ARZ3NDEKTSV4RRFFQ69G5FAV", "tenant_id"),
            ("created_after=yesterday", "created_after"),
            ("created_after=", "created_after"),
            ("created_after=2026-01-01", "created_after"),
            ("created_after=2026-01-01T00:00:00", "created_after"),
            ("created_after=1700000000", "created_after"),
            ("created_after=2026-13-01T00:00:00Z", "created_after"),
        ]
        .iter()
        .map(|(q, f)| ((*q).to_owned(), vec![*f])),
    );
    global.push((
        format!("tenant_id={}", s.tid.to_ascii_lowercase()),
        vec!["tenant_id"],
    ));
    global.push((
        "created_after=x&tenant_id=y&limit=0".to_owned(),
        vec!["created_after", "limit", "tenant_id"],
    ));
    let mut own = common;
    own.push(combined);
    own.extend(
        [
            (format!("tenant_id={}", s.tid), "tenant_id"),
            (
                "created_after=2000-01-01T00:00:00Z".to_owned(),
                "created_after",
            ),
            ("state=active".to_owned(), "state"),
        ]
        .into_iter()
        .map(|(q, f)| (q, vec![f])),
    );
    let lists = [
        (EVENTS.to_owned(), global),
        (tenant_events_path(&s.tid), own),
    ];
    for (path, cases) in &lists {
        for (query, fields) in cases {
            let resp = get_as(&app, &admin, &with_query(path, query));
            assert_invalid_query(&resp, fields, &format!("GET {path}?{query}"));
        }
        let good = list_page(
            &app,
            &admin,
            &with_query(path, "limit=1000&type=tenant.created"),
        );
        assert_eq!(page_ids(&good).len(), 1, "GET {path}: a good query answers");
    }
}

#[test]
fn event_reads_need_the_admin_or_the_tenants_own_token() {
    let app = spawn_app();
    let a = Scene::new(&app, "reader-a", "10");
    let b = Scene::new(&app, "reader-b", "10");
    assert_status(&b.credit("1"), 201, "a credit");
    let admin = app.admin();
    let some_event = id_of(&list_all(&app, &admin, EVENTS)[0]);
    let forbidden = [
        EVENTS.to_owned(),
        format!("{EVENTS}?type=bogus"),
        format!("{EVENTS}?tenant_id={}", a.tid),
        event_path(&some_event),
        event_path("evt_nope"),
        tenant_events_path(&b.tid),
        with_query(&tenant_events_path(&b.tid), "type=bogus"),
        tenant_events_path(UNKNOWN_TENANT),
        tenant_events_path("nope"),
    ];
    for path in &forbidden {
        let ctx = format!("a tenant token on GET {path}");
        assert_problem(&a.get(path), 403, "forbidden", &ctx);
    }
    for path in [
        EVENTS.to_owned(),
        event_path(&some_event),
        tenant_events_path(&a.tid),
    ] {
        let resp = app.get_path(&path);
        assert_problem(
            &resp,
            401,
            "unauthorized",
            &format!("no token on GET {path}"),
        );
    }

    let own = tenant_events_path(&a.tid);
    for path in [own.clone(), with_query(&own, "type=tenant.created")] {
        let mine = list_all(&app, &a.token, &path);
        assert_eq!(
            mine,
            list_all(&app, &admin, &path),
            "GET {path}: the tenant's own"
        );
        assert_eq!(types(&mine), ["tenant.created"], "GET {path}");
    }

    let missing = [
        tenant_events_path(UNKNOWN_TENANT),
        tenant_events_path("nope"),
    ];
    for path in &missing {
        let ctx = format!("admin GET {path}");
        assert_problem(&get_as(&app, &admin, path), 404, "tenant_not_found", &ctx);
    }
    let bad_query = with_query(&tenant_events_path(UNKNOWN_TENANT), "limit=0");
    let ctx = "a bad query decides before an unknown tenant";
    assert_invalid_query(&get_as(&app, &admin, &bad_query), &["limit"], ctx);

    assert_ok(&app.delete(&a.tid), "tombstoning a");
    let after = list_all(&app, &admin, &own);
    let ctx = "a tombstoned tenant's events read on";
    assert_eq!(
        types(&after),
        ["tenant.created", "tenant.tombstoned"],
        "{ctx}"
    );
    let revoked = get_as(&app, &a.token, &own);
    assert_problem(&revoked, 401, "unauthorized", "its revoked token");
}

#[test]
fn an_event_reads_alone_and_an_unknown_or_malformed_id_is_event_not_found() {
    let app = spawn_app();
    let s = Scene::new(&app, "single", "10");
    assert_status(&s.credit("1"), 201, "a credit");
    let admin = app.admin();
    let all = list_all(&app, &admin, EVENTS);
    assert_eq!(all.len(), 2, "{all:?}");
    for ev in &all {
        let (alone, _) = read_event(&app, str_of(ev, "id"));
        assert_eq!(&alone, ev, "GET of an event is the listed event");
    }
    let real = id_of(&all[1]);
    let unknown = [
        lowest_event_id(),
        highest_event_id(),
        id_after(&real),
        real.to_ascii_lowercase(),
        "evt_nope".to_owned(),
        "nope".to_owned(),
        format!("{real}x"),
        real.replacen("evt_", "ent_", 1),
        s.tid.clone(),
    ];
    for id in &unknown {
        let resp = get_as(&app, &admin, &event_path(id));
        assert_problem(
            &resp,
            404,
            "event_not_found",
            &format!("GET {}", event_path(id)),
        );
    }
}

#[test]
fn a_tenant_sees_only_its_own_events_and_the_admin_sees_all() {
    let app = spawn_app();
    let a = Scene::new(&app, "own-a", "100");
    let b = Scene::new(&app, "own-b", "100");
    let c = Scene::new(&app, "own-c", "100");
    for (i, s) in [&a, &b, &a, &c, &b].iter().enumerate() {
        assert_status(&s.credit(&format!("{}", i + 1)), 201, "a credit");
        s.new_budget(&format!("extra-{i}"), "1");
    }
    assert_ok(&app.delete(&c.tid), "tombstoning c");
    let admin = app.admin();
    let all = list_all(&app, &admin, EVENTS);
    let mut union: Vec<Value> = Vec::new();
    for s in [&a, &b, &c] {
        let path = tenant_events_path(&s.tid);
        let own = list_all(&app, &admin, &path);
        assert!(!own.is_empty(), "GET {path}");
        for ev in &own {
            assert_eq!(
                ev["tenant_id"],
                json!(s.tid),
                "GET {path}: only its own: {ev}"
            );
        }
        let filtered = list_all(&app, &admin, &format!("{EVENTS}?tenant_id={}", s.tid));
        assert_eq!(filtered, own, "the filter and the tenant's list agree");
        if s.tid != c.tid {
            assert_eq!(
                list_all(&app, &s.token, &path),
                own,
                "its token sees the same"
            );
        }
        union.extend(own);
    }
    union.sort_by(|x, y| str_of(x, "id").cmp(str_of(y, "id")));
    assert_eq!(union, all, "the tenants' events together are all events");
}

#[test]
fn no_event_carries_a_token() {
    let app = spawn_app();
    let a = Scene::new(&app, "secretive-a", "100");
    let b = Scene::new(&app, "secretive-b", "100");
    let body = json!({ "name": "ticking", "opening_deposit_atomic": "10",
                       "alert_thresholds_atomic": ["5"],
                       "period": { "every_seconds": 1, "allowance_atomic": "3" } });
    new_budget(&a, &body);
    let short = a.hold("1", Some(1));
    assert_status(&a.credit("5"), 201, "a credit");
    assert_status(&a.debit("5"), 201, "a debit");
    let w = watched(&b, "watched", "10", &["5"]);
    charge(&w, "6");
    assert_ok(
        &patch(&w, &json!({ "alert_thresholds_atomic": ["1"] })),
        "a PATCH",
    );
    assert_ok(&w.close(), "a closing");
    a.wait_expired(str_of(&short, "id"));
    wait_for_event(&a, "budget.period_reset");
    assert_ok(&app.delete(&b.tid), "a tombstone");

    let admin = app.admin();
    let all = list_all(&app, &admin, EVENTS);
    let mut seen_types = types(&all);
    seen_types.sort();
    seen_types.dedup();
    assert_eq!(
        seen_types.len(),
        EVENT_TYPES.len(),
        "every type written: {seen_types:?}"
    );

    let mut secrets = vec![
        app.admin_token.clone(),
        sha256_hex(app.admin_token.as_bytes()),
    ];
    for s in [&a, &b] {
        let token = tenant_token(&s.created);
        secrets.push(sha256_hex(token.as_bytes()));
        secrets.push(token);
    }
    let mut texts = vec![read_text(&app, &format!("{EVENTS}?limit=1000"))];
    for s in [&a, &b] {
        texts.push(read_text(
            &app,
            &format!("{}?limit=1000", tenant_events_path(&s.tid)),
        ));
    }
    for ev in &all {
        texts.push(read_event(&app, str_of(ev, "id")).1);
    }
    for text in &texts {
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "a token or its hash in {text}"
            );
        }
        for name in ["sidecar_config_env", "TENANTD_TENANT_TOKEN"] {
            assert!(!text.contains(name), "{name} in {text}");
        }
    }
}

#[test]
fn head_answers_the_event_reads_without_a_body_and_other_methods_get_405() {
    let app = spawn_app();
    let s = Scene::new(&app, "headed", "10");
    let admin = app.admin();
    let some_event = id_of(&list_all(&app, &admin, EVENTS)[0]);
    let own = tenant_events_path(&s.tid);
    let cases = [
        (EVENTS.to_owned(), admin.clone(), 200),
        (format!("{EVENTS}?type=tenant.created"), admin.clone(), 200),
        (event_path(&some_event), admin.clone(), 200),
        (own.clone(), admin.clone(), 200),
        (own.clone(), s.token.clone(), 200),
        (event_path(&lowest_event_id()), admin.clone(), 404),
        (format!("{EVENTS}?type=bogus"), admin.clone(), 400),
        (EVENTS.to_owned(), s.token.clone(), 403),
    ];
    for (path, auth, status) in &cases {
        let got = get_as(&app, auth, path);
        let (resp, after_head) = app.head_on_own_connection(path, Some(auth));
        let ctx = format!("HEAD {path}");
        assert_eq!(resp.status, *status, "{ctx}: {}", resp.describe());
        assert_eq!(got.status, *status, "GET {path}: {}", got.describe());
        assert_eq!(after_head, 0, "{ctx}: no body follows the head");
        let ctype = resp.header("content-type");
        assert_eq!(
            ctype,
            got.header("content-type"),
            "{ctx}: the Content-Type of GET"
        );
        let length = resp.header("content-length");
        if *status == 200 {
            // An error's body holds its request id: only a success is the same twice.
            assert_eq!(length, got.header("content-length"), "{ctx}: GET's length");
        } else {
            assert!(
                length.is_some(),
                "{ctx}: a Content-Length: {}",
                resp.describe()
            );
        }
    }
    let cases = [
        ("POST", EVENTS.to_owned()),
        ("DELETE", EVENTS.to_owned()),
        ("POST", event_path(&some_event)),
        ("DELETE", event_path(&some_event)),
        ("PATCH", event_path(&some_event)),
        ("POST", own.clone()),
        ("PUT", own),
    ];
    for (method, path) in &cases {
        let resp = app.request(method, path, &[("Authorization", admin.as_str())], None);
        let ctx = format!("{method} {path}");
        assert_problem(&resp, 405, "method_not_allowed", &ctx);
        assert_eq!(allow_set(&resp), ["GET", "HEAD"], "{ctx}: the Allow header");
    }
    assert_eq!(
        list_all(&app, &admin, EVENTS).len(),
        1,
        "no 405 wrote an event"
    );
}
