//! A tree over time: a parent closes only after its children, a closing or a tombstone
//! returns holds at every level they held, thresholds fire on each level a spend crosses, and
//! the audit chain names a budget's parent and replays every level.

use serde_json::{Value, json};

use super::{Tree, assert_short, budget_body, charge, charged, child, child_of};
use crate::helpers::*;

/// Every event of the scene's tenant, oldest first, as admin reads them.
fn tenant_events(s: &Scene<'_>) -> Vec<Value> {
    list_all(
        s.app,
        &s.app.admin(),
        &format!("/v1/tenants/{}/events", s.tid),
    )
}

/// The tenant's events written since `seen` were read; `seen` becomes every event.
fn events_since(s: &Scene<'_>, seen: &mut Vec<Value>) -> Vec<Value> {
    let now = tenant_events(s);
    let kept = now.len() >= seen.len() && now[..seen.len()] == seen[..];
    assert!(kept, "the events read before, unchanged and first: {now:?}");
    let new = now[seen.len()..].to_vec();
    *seen = now;
    new
}

/// Asserts that `events` are `budget.available_low` events of `expected` (a level and the
/// threshold crossed), in that order, each carrying its budget as it reads now.
fn assert_lows(events: &[Value], expected: &[(&Scene<'_>, &str)], ctx: &str) {
    let shown: Vec<[&Value; 3]> = events
        .iter()
        .map(|e| {
            [
                &e["type"],
                &e["data"]["budget"]["id"],
                &e["data"]["threshold_atomic"],
            ]
        })
        .collect();
    let want: Vec<[Value; 3]> = expected
        .iter()
        .map(|(s, t)| [json!("budget.available_low"), json!(s.bid), json!(t)])
        .collect();
    let want: Vec<[&Value; 3]> = want.iter().map(|[a, b, c]| [a, b, c]).collect();
    assert_eq!(shown, want, "{ctx}: the events written: {events:?}");
    for (e, (s, _)) in events.iter().zip(expected) {
        assert_eq!(
            e["data"]["budget"],
            s.budget(),
            "{ctx}: the budget after: {e}"
        );
    }
}

/// Asserts that each level's ledger replays to the figures it shows.
fn assert_replays(levels: &[&Scene<'_>], ctx: &str) {
    for level in levels {
        let ctx = format!("{ctx}: the ledger of {}", level.bid);
        assert_eq!(replay(&level.entries(), &ctx), level.figures(), "{ctx}");
    }
}

/// Closing a budget that has an open child (the default budget too) is `409
/// budget_has_open_children` and changes nothing; once every child is closed, it closes.
#[test]
fn a_budget_closes_only_once_its_children_are_closed() {
    let app = spawn_app();
    let t = Tree::new(&app, "closing-order", ["1000", "500", "200"]);
    let under_default = child(&t.root, "under-default", "1");
    let done = child(&t.team, "done", "1");
    assert_ok(&done.close(), "closing a key without children");
    let events = app.audit_count();
    let refused = [
        (&t.team, "the team, one key open"),
        (&t.org, "the organisation, its team open"),
        (&t.root, "the default budget, a child open"),
    ];
    for (level, what) in refused {
        let was = level.budget();
        assert_conflict(&level.close(), "budget_has_open_children", what);
        assert_eq!(level.budget(), was, "{what}: unchanged, open");
    }
    assert_events(&app, events, "no refused closing appended one");
    for (level, what) in [
        (&t.key, "the key"),
        (&t.team, "the team, its keys closed"),
        (&t.org, "the organisation, its team closed"),
        (&under_default, "the default budget's child"),
        (&t.root, "the default budget, its child closed"),
    ] {
        let closed = assert_ok(&level.close(), what);
        assert_eq!(closed["state"], "closed", "{what}: closed");
    }
    assert_events(&app, events + 5, "one budget.closed each");
}

/// Closing a budget releases its reservations on every level they held, with a `release`
/// entry on each naming the budget; a tombstone does so for every hold of the tenant. No level
/// keeps anything reserved, and every ledger replays.
#[test]
fn closing_a_budget_or_tombstoning_its_tenant_returns_holds_at_every_level() {
    let app = spawn_app();
    let t = Tree::new(&app, "closing-holds", ["1000", "500", "200"]);
    let rid = t.key.hold_id("30");
    t.team.hold_id("20");
    t.expect(
        [[200, 0, 0, 30], [500, 0, 0, 50], [1000, 0, 0, 50]],
        "holds on the key and the team",
    );
    let events = app.audit_count();
    let closed = assert_ok(&t.key.close(), "closing the key with a hold");
    assert_eq!(closed["state"], "closed", "the key is closed");
    assert_eq!(t.key.state(&rid), "released", "its hold is released");
    t.expect(
        [[200, 0, 0, 0], [500, 0, 0, 20], [1000, 0, 0, 20]],
        "the key's hold returned at every level",
    );
    for level in [&t.team, &t.org] {
        let e = level.last_entry();
        let expected = [
            ("kind", json!("release")),
            ("amount_atomic", json!("30")),
            ("reservation_id", json!(rid)),
            ("via_budget_id", json!(t.key.bid)),
        ];
        assert_fields(&e, &expected, &format!("the release on {}", level.bid));
    }
    assert_replays(&t.levels(), "after closing the key");
    assert_events(&app, events + 1, "one budget.closed implies the releases");

    let u = Tree::new(&app, "tombstoned-tree", ["1000", "500", "200"]);
    let holds = [u.key.hold_id("40"), u.team.hold_id("5")];
    assert_ok(&app.delete(&u.root.tid), "tombstoning the tenant");
    u.expect(
        [[200, 0, 0, 0], [500, 0, 0, 0], [1000, 0, 0, 0]],
        "after the tombstone, nothing reserved at any level",
    );
    for level in [&u.key, &u.team, &u.org, &u.root] {
        assert_eq!(level.budget()["state"], "closed", "{}: closed", level.bid);
    }
    for rid in &holds {
        assert_eq!(u.key.state(rid), "released", "{rid}: released");
    }
    assert_replays(&u.levels(), "after the tombstone");
}

/// A spend fires the thresholds of each level whose available amount it takes through one,
/// each level's `budget.available_low` after the nearer level's, with the budget as it stands
/// after; a spend on a middle level fires nothing below it, and a level already below a
/// threshold fires nothing.
#[test]
fn a_spend_fires_the_thresholds_of_every_level_it_crosses_nearest_first() {
    let app = spawn_app();
    let s = Scene::new(&app, "alerts", "0");
    let body = json!({ "name": "org", "opening_deposit_atomic": "1000",
                       "alert_thresholds_atomic": ["945"] });
    let org = assert_created(&s.post_budget(&body), &budgets_path(&s.tid), "the org");
    let org = s.on(str_of(&org, "id"));
    let team = child_of(
        &org,
        json!({ "name": "team", "opening_deposit_atomic": "150",
                "alert_thresholds_atomic": ["100"] }),
    );
    let key = child_of(
        &team,
        json!({ "name": "key", "opening_deposit_atomic": "80",
                "alert_thresholds_atomic": ["50", "10"] }),
    );
    let mut seen = Vec::new();
    events_since(&s, &mut seen);

    charged(&key, "60");
    let new = events_since(&s, &mut seen);
    let crossed = [(&key, "50"), (&team, "100"), (&org, "945")];
    assert_lows(
        &new,
        &crossed,
        "a charge of 60: 80 to 20, 150 to 90, 1000 to 940",
    );
    charged(&key, "5");
    assert_lows(
        &events_since(&s, &mut seen),
        &[],
        "a charge of 5: all below already",
    );
    key.hold_id("10");
    let new = events_since(&s, &mut seen);
    assert_lows(&new, &[(&key, "10")], "a hold of 10: the key 15 to 5");

    assert_status(&team.credit("100"), 201, "a credit on the team");
    let new = events_since(&s, &mut seen);
    let types: Vec<&Value> = new.iter().map(|e| &e["type"]).collect();
    assert_eq!(types, ["budget.credited"], "the team 75 to 175, above 100");
    charged(&team, "80");
    let new = events_since(&s, &mut seen);
    assert_lows(&new, &[(&team, "100")], "a charge on the team: 175 to 95");
}

/// `budget.created` of a budget with a parent ends with `parent_id` (after the thresholds
/// when they are set); one without a parent, and `tenant.created`, have no such member.
#[test]
fn budget_created_names_the_parent_last_and_only_when_there_is_one() {
    let app = spawn_app();
    let t = Tree::new(&app, "audited-tree", ["1000", "500", "200"]);
    let body = json!({ "name": "watched", "opening_deposit_atomic": "50",
                       "alert_thresholds_atomic": ["5"] });
    let watched = child_of(&t.team, body);
    let rows = app
        .text_rows("SELECT payload FROM audit_events WHERE action = 'budget.created' ORDER BY seq");
    let base = ["id", "name", "unit", "opening_deposit_atomic"];
    let thresholds = ["period", "alert_thresholds_atomic"];
    let expected = [
        (&t.org, "org", "1000", None, &[][..]),
        (&t.team, "team", "500", Some(&t.org), &[][..]),
        (&t.key, "key", "200", Some(&t.team), &[][..]),
        (&watched, "watched", "50", Some(&t.team), &thresholds[..]),
    ];
    assert_eq!(rows.len(), expected.len(), "one per budget made: {rows:?}");
    for (row, (level, name, deposit, parent, policy)) in rows.iter().zip(expected) {
        let ctx = format!("budget.created of {name}");
        let payload = &row[0];
        let mut want = json!({ "id": level.bid, "name": name, "unit": "atomic",
                               "opening_deposit_atomic": deposit });
        let mut names: Vec<&str> = [&base[..], policy].concat();
        if !policy.is_empty() {
            want["period"] = Value::Null;
            want["alert_thresholds_atomic"] = json!(["5"]);
        }
        if let Some(parent) = parent {
            want["parent_id"] = json!(parent.bid);
            names.push("parent_id");
        }
        let parsed: Value = serde_json::from_str(payload).expect("a JSON payload");
        assert_eq!(parsed, want, "{ctx}: the payload");
        assert_eq!(
            member_names(payload, &ctx),
            names,
            "{ctx}: its members in order"
        );
    }
    for (_, payload) in audit_of(&app, "tenant.created") {
        let named = payload.get("parent_id");
        assert_eq!(named, None, "tenant.created names no parent: {payload}");
    }
}

/// After a mixed workload on a tree (spends at every level, within and above holds, a
/// release, an expiry, refusals, credits and debits, a closing with a hold, a tombstone) each
/// spend wrote its one audit row, every ledger replays, and `tenantd audit verify` passes.
#[test]
fn audit_verify_passes_after_a_mixed_workload_on_a_tree() {
    let app = spawn_app();
    let t = Tree::new(&app, "verified-tree", ["1000", "500", "200"]);
    let key2 = child(&t.team, "key-2", "100");
    let charges = [
        (&t.key, "30"),
        (&key2, "20"),
        (&t.team, "10"),
        (&t.org, "5"),
    ];
    for (level, amount) in charges {
        charged(level, amount);
    }
    let rid = t.key.hold_id("50");
    assert_ok(&t.key.commit(&rid, "40"), "a commit within its hold");
    let rid = key2.hold_id("10");
    assert_ok(&key2.commit(&rid, "25"), "a commit above its hold");
    let rid = t.team.hold_id("15");
    assert_ok(&t.team.release(&rid), "a release on the team");
    let short = charge(&t.key, "5000", None);
    assert_short(&short, &t.key, 130, "a refused charge on the key");
    let expiring = id_of(&t.key.hold("5", Some(1)));
    t.key.wait_expired(&expiring);
    let levels = [&t.key, &key2, &t.team, &t.org];
    for level in levels {
        assert_eq!(
            level.figures().reserved,
            0,
            "{}: the expiry returned",
            level.bid
        );
    }
    for (level, amount) in [(&t.org, "7"), (&t.team, "3"), (&key2, "2")] {
        assert_status(
            &level.credit(amount),
            201,
            &format!("a credit on {}", level.bid),
        );
        assert_status(&level.debit("1"), 201, &format!("a debit on {}", level.bid));
    }
    key2.hold_id("6");
    assert_ok(&key2.close(), "closing a key with a hold");
    assert_replays(&levels, "after the workload");

    let charged: Vec<Value> = audit_of(&app, "budget.charged")
        .into_iter()
        .map(|(_, p)| p["budget_id"].clone())
        .collect();
    let want: Vec<Value> = charges.iter().map(|(level, _)| json!(level.bid)).collect();
    assert_eq!(
        charged, want,
        "one budget.charged per charge, naming its budget"
    );
    let reserved = audit_of(&app, "reservation.created");
    assert_eq!(
        reserved.len(),
        5,
        "one reservation.created per hold: {reserved:?}"
    );
    let verified = app.audit_verify();
    assert_eq!(
        verified.code,
        Some(0),
        "audit verify on the tree: {verified:?}"
    );

    t.key.hold_id("3");
    assert_ok(
        &app.delete(&t.root.tid),
        "tombstoning with a hold on the key",
    );
    let late = t
        .root
        .post_budget(&budget_body("late", "1", Some(&t.org.bid)));
    assert_conflict(&late, "tenant_tombstoned", "nothing moves after it");
    let verified = app.audit_verify();
    assert_eq!(
        verified.code,
        Some(0),
        "audit verify after the tombstone: {verified:?}"
    );
}

/// An ancestor's figure edited behind the service's back is found and named: `audit verify`
/// replays every level's figures from the chain, though no audit row names the ancestors.
#[test]
fn audit_verify_finds_an_edited_figure_of_an_ancestor() {
    let mut app = spawn_app();
    let t = Tree::new(&app, "edited-tree", ["1000", "500", "200"]);
    charged(&t.key, "30");
    let rid = t.key.hold_id("20");
    assert_ok(&t.key.commit(&rid, "25"), "a commit above its hold");
    let (team, org) = (t.team.bid.clone(), t.org.bid.clone());
    assert_eq!(app.terminate().code(), Some(0), "graceful stop");
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "the untouched database: {verify:?}");

    for (bid, edited) in [(&org, "54"), (&team, "56")] {
        let set = |spent: &str| {
            app.execute(&format!(
                "UPDATE budgets SET spent_atomic = '{spent}' WHERE id = '{bid}'"
            ))
            .expect("editing the spend")
        };
        assert_eq!(set(edited), 1, "one budget edited");
        let verify = app.audit_verify();
        assert_eq!(
            verify.code,
            Some(1),
            "{bid}: an edited spend fails: {verify:?}"
        );
        let says = format!(
            "budget {bid}'s stored spent figure is {edited} atomic units, but its events give \
             55 atomic units"
        );
        assert!(
            verify.stderr.lines().any(|line| line.ends_with(&says)),
            "{bid}: the level and both values are named: {:?}",
            verify.stderr
        );
        assert_eq!(set("55"), 1, "the spend put back");
        let verify = app.audit_verify();
        assert_eq!(
            verify.code,
            Some(0),
            "{bid}: put back, it verifies: {verify:?}"
        );
    }
}
