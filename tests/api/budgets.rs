//! Budgets: creation and its rules, credits and debits and the figures after them, closing,
//! the tenant token's scope, and what a tombstone does to a tenant's budgets.

use serde_json::{Value, json};

use crate::helpers::*;

/// The budget-creation body of a name and a deposit.
fn budget_body(name: &str, deposit: &str) -> Value {
    json!({ "name": name, "opening_deposit_atomic": deposit })
}

#[test]
fn create_budget_returns_201_with_every_field() {
    let app = spawn_app();
    let s = Scene::new(&app, "budget-owner", "10");
    let before = now_ms();
    let body = json!({ "name": "gpu", "unit": "usd_micros", "opening_deposit_atomic": "5000" });
    let resp = s.post_budget(&body);
    let after = now_ms();
    let b = assert_created(&resp, &budgets_path(&s.tid), "create a budget");
    let media = resp.header("content-type").unwrap_or_default();
    assert!(
        media.starts_with("application/json"),
        "media type {media:?}"
    );
    assert_budget_shape(&b, "the new budget");
    let expected = [
        ("tenant_id", json!(s.tid)),
        ("name", json!("gpu")),
        ("unit", json!("usd_micros")),
        ("state", json!("open")),
        ("closed_at", Value::Null),
        ("opening_deposit_atomic", json!("5000")),
    ];
    assert_fields(&b, &expected, "the new budget");
    assert_ne!(id_of(&b), s.bid, "not the default budget");
    let created = timestamp_ms(str_of(&b, "created_at"));
    let window = before - 2000..=after + 2000;
    assert!(window.contains(&created), "created_at: {b}");
    let s = s.on(&id_of(&b));
    assert_eq!(s.budget(), b, "a read returns the budget");
    s.expect([5000, 0, 0, 0], "the new budget");

    let ledger = s.entries();
    assert_eq!(ledger.len(), 1, "one entry: {ledger:?}");
    let expected = [
        ("budget_id", json!(s.bid)),
        ("kind", json!("opening_deposit")),
        ("amount_atomic", json!("5000")),
        ("reservation_id", Value::Null),
        ("memo", Value::Null),
        ("balance_atomic", json!("5000")),
        ("available_atomic", json!("5000")),
    ];
    assert_fields(&ledger[0], &expected, "the opening deposit entry");
    let payload = json!({
        "id": s.bid, "name": "gpu", "unit": "usd_micros", "opening_deposit_atomic": "5000"
    });
    let events = audit_of(&app, "budget.created");
    let want = [("admin".to_owned(), payload)];
    assert_eq!(events, want, "budget.created (none for the default)");
}

#[test]
fn the_unit_defaults_to_atomic_and_any_deposit_opens_the_ledger() {
    let app = spawn_app();
    let s = Scene::new(&app, "units", "1");
    let unit_32 = format!("u{}z", "_9".repeat(15));
    let cases = [
        (
            json!({ "name": "a", "opening_deposit_atomic": "0" }),
            "atomic",
        ),
        (
            json!({ "name": "b", "unit": null, "opening_deposit_atomic": "7" }),
            "atomic",
        ),
        (
            json!({ "name": "c", "unit": "tokens", "opening_deposit_atomic": U128_MAX }),
            "tokens",
        ),
        (
            json!({ "name": "d", "unit": unit_32, "opening_deposit_atomic": "1" }),
            unit_32.as_str(),
        ),
        (
            json!({ "name": "e", "unit": "x", "opening_deposit_atomic": "1" }),
            "x",
        ),
    ];
    for (body, unit) in cases {
        let ctx = format!("create {body}");
        let b = assert_created(&s.post_budget(&body), &budgets_path(&s.tid), &ctx);
        assert_budget_shape(&b, &ctx);
        assert_eq!(b["unit"], unit, "{ctx}: the unit");
        let deposit = amount(&body, "opening_deposit_atomic");
        let on = s.on(&id_of(&b));
        on.expect([deposit, 0, 0, 0], &ctx);
        let ledger = on.entries();
        assert_eq!(on.kinds(), ["opening_deposit"], "{ctx}: the first entry");
        assert_eq!(
            amount(&ledger[0], "amount_atomic"),
            deposit,
            "{ctx}: also 0"
        );
    }
}

#[test]
fn the_default_budget_is_the_overviews_budget() {
    let app = spawn_app();
    let s = Scene::new(&app, "with-default", "1000");
    let overview = app.get_admin(&s.tid).json();
    let b = s.budget();
    assert_budget_shape(&b, "the default budget");
    assert_eq!(overview["budget"], b, "the overview's budget");
    assert_eq!(s.created["budget"], b, "the create response's budget");
    let ulid = &s.tid[4..];
    assert_eq!(s.bid, format!("bud_{ulid}"), "bud_ + the tenant's ULID");
    let env = &s.created["sidecar_config_env"];
    assert_eq!(env["TENANTD_BUDGET_ID"], s.bid, "TENANTD_BUDGET_ID");
    let expected = [
        ("name", json!("default")),
        ("unit", json!("atomic")),
        ("created_at", overview["created_at"].clone()),
        ("opening_deposit_atomic", json!("1000")),
    ];
    assert_fields(&b, &expected, "the default budget");
    assert_eq!(s.kinds(), ["opening_deposit"], "its first entry");
    let listed = list_all(&app, &app.admin(), &budgets_path(&s.tid));
    assert_eq!(listed, [b], "the tenant's only budget");
}

#[test]
fn refused_budget_bodies_name_every_bad_field() {
    let app = spawn_app();
    let s = Scene::new(&app, "refusals", "1");
    let good = json!({ "name": "fine", "unit": "atomic", "opening_deposit_atomic": "1" });
    let long_name = json!("n".repeat(NAME_CHARS_MAX + 1));
    let over = "340282366920938463463374607431768211456";
    let bad = [
        (
            "name",
            values(r#"["", "a\tb", "a\u0085b", " a", "a\u00a0", 3, null, ["a"]]"#),
        ),
        ("name", vec![long_name]),
        (
            "opening_deposit_atomic",
            values(r#"[1, "+1", "01", "", " 1", "1.0", null]"#),
        ),
        ("opening_deposit_atomic", vec![json!(over)]),
        (
            "unit",
            values(r#"["USD", "1usd", "_usd", "", "usd-micros", "usd ", "éur", 5]"#),
        ),
        ("unit", vec![json!("u".repeat(33))]),
    ];
    let events = app.audit_count();
    for (field, cases) in bad {
        for value in cases {
            let mut body = good.clone();
            body[field] = value;
            assert_invalid(&s.post_budget(&body), &[field], &format!("{body}"));
        }
    }
    let whole = [
        (json!({}), vec!["name", "opening_deposit_atomic"]),
        (
            json!({ "name": "x", "opening_deposit_atomic": "1", "ccy": "usd" }),
            vec!["ccy"],
        ),
        (
            json!({ "name": "", "unit": "X", "opening_deposit_atomic": -1 }),
            vec!["name", "opening_deposit_atomic", "unit"],
        ),
    ];
    for (body, fields) in whole {
        assert_invalid(&s.post_budget(&body), &fields, &format!("{body}"));
    }
    assert_events(&app, events, "no refused body appended one");
    let listed = list_all(&app, &app.admin(), &budgets_path(&s.tid));
    assert_eq!(listed.len(), 1, "no new budget: {listed:?}");
}

#[test]
fn budget_names_are_unique_among_open_budgets() {
    let app = spawn_app();
    let s = Scene::new(&app, "names", "1");
    let other = Scene::new(&app, "names-other", "1");
    let taken = s.post_budget(&budget_body("default", "1"));
    assert_conflict(&taken, "budget_name_taken", "the default budget's name");
    let gpu = s.new_budget("gpu", "5");
    let again = json!({ "name": "gpu", "unit": "tokens", "opening_deposit_atomic": "9" });
    let taken = s.post_budget(&again);
    assert_conflict(&taken, "budget_name_taken", "an open budget's name");
    s.new_budget("GPU", "1");
    other.new_budget("gpu", "1");

    let events = app.audit_count();
    assert_ok(&gpu.close(), "closing gpu");
    assert_events(&app, events + 1, "closing appends one");
    let reused = s.new_budget("gpu", "9");
    assert_ne!(reused.bid, gpu.bid, "the freed name, a new budget");
    let taken = s.post_budget(&again);
    assert_conflict(&taken, "budget_name_taken", "the name is held again");
    assert_eq!(gpu.budget()["state"], "closed", "the first stays closed");
}

#[test]
fn credits_and_debits_move_the_figures() {
    let app = spawn_app();
    let s = Scene::new(&app, "movements", "1000");
    let admin = s.admin();
    let credit = json!({ "amount_atomic": "300", "memo": "top-up ü" });
    let c = assert_status(&admin.post(&s.bpath("credits"), &credit), 201, "a credit");
    assert_entry_shape(&c, "the credit entry");
    let expected = [
        ("kind", json!("credit")),
        ("memo", json!("top-up ü")),
        ("balance_atomic", json!("1300")),
    ];
    assert_fields(&c, &expected, "the credit entry");
    let debit = json!({ "amount_atomic": "100", "memo": null });
    let d = assert_status(&admin.post(&s.bpath("debits"), &debit), 201, "a debit");
    let expected = [
        ("kind", json!("debit")),
        ("memo", Value::Null),
        ("available_atomic", json!("1200")),
    ];
    assert_fields(&d, &expected, "the debit entry");

    let rid = s.hold_id("200");
    s.expect([1300, 100, 0, 200], "after a credit, a debit and a hold");
    assert_insufficient(&s.debit("1001"), 1000, "a debit above available");
    assert_status(&s.debit("1000"), 201, "a debit of all available");
    assert_insufficient(&s.debit("1"), 0, "a debit of nothing available");
    s.expect([1300, 1100, 0, 200], "the refused debits moved nothing");
    let state = s.reservation(&rid)["state"].clone();
    assert_eq!(state, "active", "a debit never touches a hold");

    let ledger = s.entries();
    let kinds = ["opening_deposit", "credit", "debit", "reserve", "debit"];
    assert_eq!(s.kinds(), kinds, "one entry per movement");
    assert_eq!(ledger[1], c, "the credit's answer is its entry");
    let replayed = replay(&ledger, "the ledger");
    assert_eq!(replayed, s.figures(), "the ledger replays");

    let payload = json!({ "budget_id": s.bid, "amount_atomic": "300", "memo": "top-up ü" });
    let credited = audit_of(&app, "budget.credited");
    assert_eq!(credited, [("admin".to_owned(), payload)], "budget.credited");
    let debited = audit_of(&app, "budget.debited");
    assert_eq!(debited.len(), 2, "refused debits append no event");
    let payload = json!({ "budget_id": s.bid, "amount_atomic": "100", "memo": null });
    assert_eq!(debited[0].1, payload, "a null memo in the event");
}

#[test]
fn a_credit_past_u128_is_amount_overflow() {
    let app = spawn_app();
    let s = Scene::new(&app, "overflow", "1");
    let full = s.new_budget("full", &(u128::MAX - 5).to_string());
    assert_status(&full.credit("5"), 201, "a credit up to u128::MAX");
    assert_conflict(&full.credit("1"), "amount_overflow", "one past u128::MAX");
    full.expect([u128::MAX, 0, 0, 0], "the refusal moved nothing");
    assert_eq!(full.entries().len(), 2, "the refusal made no entry");
    // credited counts, not the balance: a budget debited to 0 still cannot pass u128.
    let drained = s.new_budget("drained", "10");
    assert_status(&drained.debit("10"), 201, "draining");
    let credit = drained.credit(U128_MAX);
    assert_conflict(&credit, "amount_overflow", "credited 10 + u128::MAX");
}

#[test]
fn credit_and_debit_bodies_are_validated() {
    let app = spawn_app();
    let s = Scene::new(&app, "memos", "100000");
    let admin = s.admin();
    let amounts = values(r#"["0", 5, null, "-1", "01", "1.5", " 1", ""]"#);
    let memos = values(r#"["a\nb", "a\u0000b", "a ", " a", "a\u0085", 1, ["m"]]"#);
    let mut refused: Vec<(Value, Vec<&str>)> = vec![
        (json!({ "memo": "x" }), vec!["amount_atomic"]),
        (json!({ "amount_atomic": "1", "note": "x" }), vec!["note"]),
        (
            json!({ "amount_atomic": "0", "memo": "\u{7}" }),
            vec!["amount_atomic", "memo"],
        ),
        (
            json!({ "amount_atomic": "1", "memo": "m".repeat(MEMO_CHARS_MAX + 1) }),
            vec!["memo"],
        ),
    ];
    refused.extend(
        amounts
            .into_iter()
            .map(|a| (json!({ "amount_atomic": a }), vec!["amount_atomic"])),
    );
    refused.extend(
        memos
            .into_iter()
            .map(|m| (json!({ "amount_atomic": "1", "memo": m }), vec!["memo"])),
    );
    let accepted = [
        json!("€".repeat(MEMO_CHARS_MAX)),
        Value::Null,
        json!(""),
        json!("a b"),
    ];
    for kind in ["credits", "debits"] {
        for (body, fields) in &refused {
            let ctx = format!("{kind}: {body}");
            assert_invalid(&admin.post(&s.bpath(kind), body), fields, &ctx);
        }
        for memo in &accepted {
            let body = json!({ "amount_atomic": "1", "memo": memo });
            let entry = assert_status(&admin.post(&s.bpath(kind), &body), 201, &format!("{body}"));
            assert_eq!(&entry["memo"], memo, "{kind}: the memo comes back");
        }
        let bare = assert_status(&admin.post(&s.bpath(kind), &amount_body("1")), 201, kind);
        assert_eq!(bare["memo"], Value::Null, "{kind}: no memo is null");
    }
    assert_eq!(s.entries().len(), 11, "only the accepted made entries");
    s.expect([100_005, 5, 0, 0], "the figures after them");
}

#[test]
fn closing_a_budget_releases_its_reservations_and_freezes_it() {
    let app = spawn_app();
    let s = Scene::new(&app, "closing", "1").new_budget("closing", "100");
    let r1 = s.hold_id("30");
    let r2 = id_of(&s.admin().hold("20", Some(60)));
    let r3 = s.hold_id("10");
    assert_ok(&s.commit(&r3, "4"), "committing r3");
    let events = app.audit_count();

    let closed = assert_ok(&s.close(), "closing");
    assert_budget_shape(&closed, "the closed budget");
    assert_eq!(closed["state"], "closed", "DELETE returns it closed");
    assert_eq!(s.budget(), closed, "a read shows it closed");
    s.expect([100, 0, 4, 0], "closing returned every hold");
    assert_events(&app, events + 1, "one for the closing and its releases");
    let event = ("admin".to_owned(), json!({ "id": s.bid }));
    assert_eq!(audit_of(&app, "budget.closed"), [event], "budget.closed");
    let released = audit_of(&app, "reservation.released");
    assert!(released.is_empty(), "no event per release: {released:?}");
    for rid in [&r1, &r2] {
        let now = s.reservation(rid);
        assert_reservation_shape(&now, "a released reservation");
        assert_eq!(now["state"], "released", "closing released it");
        assert_settled_near(&now, str_of(&closed, "closed_at"), "closing");
    }
    assert_eq!(s.reservation(&r3)["state"], "committed", "a settled one");
    let ledger = s.entries();
    let mut tail: Vec<(&str, &str)> = ledger[ledger.len() - 2..]
        .iter()
        .map(|e| (str_of(e, "kind"), str_of(e, "amount_atomic")))
        .collect();
    tail.sort_unstable();
    let want = [("release", "20"), ("release", "30")];
    assert_eq!(tail, want, "a release entry per hold");
    assert_eq!(replay(&ledger, "closed"), s.figures(), "the ledger replays");

    let refusals = [
        ("a credit", s.credit("1")),
        ("a debit", s.debit("1")),
        ("a reservation", s.reserve("1", None)),
        (
            "a reservation beyond available",
            s.admin().reserve("1000", None),
        ),
    ];
    for (msg, resp) in refusals {
        assert_conflict(&resp, "budget_closed", &format!("{msg}, budget closed"));
    }
    let late = s.commit(&r1, "1");
    let code = late.json()["code"].clone();
    let either = code == "budget_closed" || code == "reservation_not_active";
    assert!(
        late.status == 409 && either,
        "late commit: {}",
        late.describe()
    );
    let again = assert_ok(&s.close(), "a repeated DELETE");
    assert_eq!(again, closed, "the same body");
    assert_events(&app, events + 1, "none for the repeat or the refusals");
    assert_eq!(s.entries(), ledger, "the refusals appended no entry");
}

#[test]
fn the_default_budget_can_be_closed() {
    let app = spawn_app();
    let s = Scene::new(&app, "closes-default", "50");
    let closed = assert_ok(&s.close(), "closing the default budget");
    assert_eq!(closed["state"], "closed", "it is closed");
    let overview = app.get_admin(&s.tid).json();
    assert_eq!(overview["state"], "active", "the tenant stays active");
    assert_eq!(overview["budget"], closed, "the overview shows it closed");
    let reused = s.new_budget("default", "1");
    assert_ne!(reused.bid, s.bid, "its name is free for a new budget");
    let shown = app.get_admin(&s.tid).json()["budget"]["id"].clone();
    assert_eq!(shown, s.bid, "the overview keeps the default budget");
}

#[test]
fn budgets_of_another_tenant_and_malformed_ids_are_budget_not_found() {
    let app = spawn_app();
    let a = Scene::new(&app, "nf-a", "10");
    let b = Scene::new(&app, "nf-b", "10");
    let ulid = &a.bid[4..];
    let bad_ids = [
        b.bid.clone(),
        "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned(),
        a.bid.to_ascii_lowercase(),
        a.bid[..a.bid.len() - 1].to_owned(),
        a.tid.clone(),
        ulid.to_owned(),
        format!("res_{ulid}"),
        "bud_ZZZZZZZZZZZZZZZZZZZZZZZZZZ".to_owned(),
    ];
    for bid in &bad_ids {
        let (on, admin) = (a.on(bid), a.on(bid).admin());
        let requests = [
            ("GET", admin.get(&on.bpath(""))),
            ("GET as the tenant", on.get(&on.bpath(""))),
            ("GET entries", admin.get(&on.bpath("entries"))),
            ("DELETE", on.close()),
            ("a credit", on.credit("1")),
            ("a debit", on.debit("1")),
        ];
        for (what, resp) in requests {
            let ctx = format!("{what} of {bid}");
            assert_problem(&resp, 404, "budget_not_found", &ctx);
        }
    }
    b.expect([10, 0, 0, 0], "b's budget is untouched");
    assert_eq!(b.budget()["state"], "open", "b's budget stays open");
    let none = get_as(&app, &app.admin(), &budgets_path(UNKNOWN_TENANT));
    assert_problem(&none, 404, "tenant_not_found", "budgets of no tenant");
    let (path, admin) = (budgets_path(UNKNOWN_TENANT), app.admin());
    let body = budget_body("x", "1").to_string();
    let resp = send(&app.addr, "POST", &path, &admin, Some(&body), None, &[]);
    assert_problem(&resp, 404, "tenant_not_found", "a budget for no tenant");
}

/// The request of a route spec `METHOD /tail` under tenant `tid`, where `{b}` and `{r}`
/// stand for a budget and a reservation id; the body is the one the route takes.
fn route(spec: &str, tid: &str, bid: &str, rid: &str) -> (String, String, Option<Value>) {
    let (method, tail) = spec.split_once(' ').expect("METHOD /tail");
    let tail = tail.replace("{b}", bid).replace("{r}", rid);
    let body = match (method, tail.rsplit('/').next().unwrap_or_default()) {
        ("POST", "budgets") => Some(budget_body("more", "1")),
        ("POST", "reservations") => Some(reserve_body(bid, "1", None)),
        ("POST", "credits" | "debits" | "commit") => Some(amount_body("1")),
        ("POST", "release") => Some(json!({})),
        ("POST", "extend") => Some(json!({ "ttl_seconds": 60 })),
        _ => None,
    };
    (method.to_owned(), format!("/v1/tenants/{tid}{tail}"), body)
}

/// What a tenant token may do under its own tenant, with the status of success.
const SPEND_ROUTES: [(&str, u16); 9] = [
    ("GET /budgets", 200),
    ("GET /budgets/{b}", 200),
    ("GET /budgets/{b}/entries", 200),
    ("POST /reservations", 201),
    ("GET /reservations", 200),
    ("GET /reservations/{r}", 200),
    ("POST /reservations/{r}/commit", 200),
    ("POST /reservations/{r}/release", 200),
    ("POST /reservations/{r}/extend", 200),
];

/// What only the admin may do under a tenant.
const ADMIN_ROUTES: [&str; 5] = [
    "POST /budgets",
    "DELETE /budgets/{b}",
    "POST /budgets/{b}/credits",
    "POST /budgets/{b}/debits",
    "DELETE ",
];

#[test]
fn the_tenant_token_reads_budgets_and_spends_only_on_its_own_tenant() {
    let app = spawn_app();
    let a = Scene::new(&app, "scope-a", "100");
    let b = Scene::new(&app, "scope-b", "100");
    let b_rid = b.admin().hold_id("5");
    let send_as = |auth: &str, (method, path, body): (String, String, Option<Value>)| {
        let body = body.as_ref().map(Value::to_string);
        send(&app.addr, &method, &path, auth, body.as_deref(), None, &[])
    };
    // Its own spending routes; commit, release and extend each on a hold of its own.
    for (spec, status) in SPEND_ROUTES {
        let rid = a.admin().hold_id("5");
        let resp = send_as(&a.token, route(spec, &a.tid, &a.bid, &rid));
        assert_status(&resp, status, &format!("the tenant token: {spec}"));
    }
    let events = app.audit_count();
    let own = ADMIN_ROUTES
        .iter()
        .map(|spec| route(spec, &a.tid, &a.bid, &b_rid));
    let mut forbidden: Vec<(String, String, Option<Value>)> = own.collect();
    forbidden.push(("GET".into(), "/v1/tenants".into(), None));
    forbidden.push(("POST".into(), budgets_path(&a.tid), Some(json!({}))));
    for tid in [b.tid.as_str(), UNKNOWN_TENANT] {
        let specs = SPEND_ROUTES
            .iter()
            .map(|(spec, _)| *spec)
            .chain(ADMIN_ROUTES);
        forbidden.extend(specs.map(|spec| route(spec, tid, &b.bid, &b_rid)));
    }
    for request in forbidden {
        let ctx = format!("the tenant token on {} {}", request.0, request.1);
        assert_problem(&send_as(&a.token, request), 403, "forbidden", &ctx);
    }
    assert_events(&app, events, "no forbidden request appended one");
    assert_eq!(b.reservation(&b_rid)["state"], "active", "b's hold stays");
    b.expect([100, 0, 0, 5], "b's budget is untouched");
    assert_eq!(a.budget()["state"], "open", "a's budget stays open");
    let tenant = app.get_admin(&a.tid).json();
    assert_eq!(tenant["state"], "active", "a stays active");
}

#[test]
fn a_tombstone_closes_every_budget_and_releases_every_reservation() {
    let app = spawn_app();
    let s = Scene::new(&app, "tombstoned", "100");
    let bystander = Scene::new(&app, "bystander", "100");
    let extra = s.new_budget("extra", "50");
    let early = s.new_budget("already-closed", "5");
    let early_closed = assert_ok(&early.close(), "closing one budget first");
    let held = [s.hold_id("40"), extra.admin().hold_id("50")];
    let kept = bystander.hold_id("9");
    let events = app.audit_count();

    let gone = assert_ok(&app.delete(&s.tid), "the tombstone");
    let at = str_of(&gone, "tombstoned_at");
    assert_events(&app, events + 1, "tenant.tombstoned implies the rest");
    for (budget, credited) in [(&s, 100), (&extra, 50)] {
        let b = budget.budget();
        let expected = [("state", json!("closed")), ("closed_at", json!(at))];
        assert_fields(&b, &expected, "closed at the tombstone");
        budget.expect([credited, 0, 0, 0], "the holds went back");
        let ledger = budget.entries();
        let last = ledger.last().map(|e| e["kind"].clone());
        assert_eq!(last, Some(json!("release")), "a release entry");
        let replayed = replay(&ledger, "a tombstoned budget");
        assert_eq!(replayed, budget.figures(), "its ledger replays");
    }
    assert_eq!(gone["budget"], s.budget(), "the overview's budget");
    assert_eq!(early.budget(), early_closed, "one closed before stays");
    for rid in &held {
        let now = s.reservation(rid);
        assert_eq!(now["state"], "released", "every hold is released");
        assert_settled_near(&now, at, "the tombstone");
    }
    let other = bystander.reservation(&kept);
    assert_eq!(other["state"], "active", "another tenant's hold stays");

    let (admin, rid) = (extra.admin(), &held[0]);
    let refusals = [
        ("a reserve by the admin", admin.reserve("1", None)),
        ("a reserve beyond available", admin.reserve("1000", None)),
        (
            "a reserve, budget closed before",
            early.admin().reserve("1", None),
        ),
        ("a credit", s.credit("1")),
        ("a debit", extra.debit("1")),
        ("a new budget", s.post_budget(&budget_body("late", "1"))),
        ("closing a budget", extra.close()),
        ("a commit of a released hold", admin.commit(rid, "1")),
        ("a release", admin.release(rid)),
        ("an extend", admin.extend(rid, 60)),
    ];
    for (msg, resp) in refusals {
        let ctx = format!("{msg}, tenant tombstoned");
        assert_conflict(&resp, "tenant_tombstoned", &ctx);
    }
    let revoked = extra.reserve("1", None);
    assert_problem(&revoked, 401, "unauthorized", "the revoked token");
    for path in [
        budgets_path(&s.tid),
        reservations_path(&s.tid),
        extra.bpath("entries"),
    ] {
        assert_ok(&admin.get(&path), &format!("reads go on: {path}"));
    }
    assert_events(&app, events + 1, "nothing after the tombstone");
}

/// Asserts that a reservation settled by a closing or a tombstone at `at` shows a
/// `settled_at` of that transaction (the contract fixes no other instant for it).
fn assert_settled_near(r: &Value, at: &str, by: &str) {
    let settled = timestamp_ms(str_of(r, "settled_at"));
    let gap = (settled - timestamp_ms(at)).abs();
    assert!(gap <= 1000, "settled_at by {by} ({at}): {r}");
}
