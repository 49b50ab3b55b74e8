//! A spend in a tree: a charge, a reserve and a commit on a budget move it and every ancestor
//! alike, while credits and debits move only the budget they name; a spend that does not fit
//! some level moves nothing and names the nearest short one; and each level's ledger gets an
//! entry of the spend, naming the budget it was made on.

use serde_json::{Value, json};

use super::{Tree, assert_short, charge, charged, child, snapshot};
use crate::helpers::*;

/// Asserts that the spend whose entry on the key is `own` wrote one entry like it on each
/// ancestor, nearest first, naming the key in `via_budget_id` and carrying that ancestor's
/// figures after it; each reads alone as its ledger lists it.
fn assert_spread(t: &Tree<'_>, own: &Value, ctx: &str) {
    assert_eq!(
        own["budget_id"],
        json!(t.key.bid),
        "{ctx}: on the key: {own}"
    );
    let via = own.get("via_budget_id");
    assert_eq!(via, Some(&Value::Null), "{ctx}: the key's own entry: {own}");
    let mut nearer = id_of(own);
    for level in [&t.team, &t.org] {
        let ctx = format!("{ctx}: the entry on {}", level.bid);
        let e = level.last_entry();
        assert_entry_shape(&e, &ctx);
        for member in ["kind", "amount_atomic", "memo", "reservation_id"] {
            assert_eq!(e[member], own[member], "{ctx}: {member} as the key's: {e}");
        }
        assert_eq!(e["budget_id"], json!(level.bid), "{ctx}: its own: {e}");
        let via = e.get("via_budget_id");
        assert_eq!(via, Some(&json!(t.key.bid)), "{ctx}: via the key: {e}");
        let b = level.budget();
        for member in ["balance_atomic", "available_atomic"] {
            assert_eq!(e[member], b[member], "{ctx}: its {member} after it: {e}");
        }
        let id = id_of(&e);
        assert!(
            id > nearer,
            "{ctx}: written after the nearer level's ({nearer})"
        );
        let path = level.bpath(&format!("entries/{id}"));
        let alone = assert_ok(&get_as(t.key.app, &t.key.app.admin(), &path), &ctx);
        assert_eq!(alone, e, "{ctx}: reads alone as listed");
        nearer = id;
    }
}

/// A charge, a reserve, a commit within its hold and above it, and a release on the key move
/// the key, the team and the organisation alike; a spend on the team moves the team and the
/// organisation, not the key; credits and debits move only the budget they name.
#[test]
fn a_spend_moves_every_level_above_it_and_credits_and_debits_only_their_own() {
    let app = spawn_app();
    let t = Tree::new(&app, "spreads", ["1000", "500", "200"]);
    charged(&t.key, "30");
    // The three levels' figures after spends alone: each its deposit, all the same spent
    // and reserved.
    let f = |[k, tm, o]: [u128; 3], s, r| [[k, 0, s, r], [tm, 0, s, r], [o, 0, s, r]];
    let deposits = [200, 500, 1000];
    t.expect(f(deposits, 30, 0), "a charge of 30 on the key");
    let rid = t.key.hold_id("50");
    t.expect(f(deposits, 30, 50), "a hold of 50 on the key");
    assert_ok(&t.key.commit(&rid, "40"), "a commit of 40 of 50");
    t.expect(f(deposits, 70, 0), "spent 40, the whole hold gone");
    let rid = t.key.hold_id("20");
    assert_ok(&t.key.commit(&rid, "35"), "a commit of 35 of 20");
    t.expect(f(deposits, 105, 0), "spent 35, the whole hold gone");
    let rid = t.key.hold_id("25");
    t.expect(f(deposits, 105, 25), "a hold of 25");
    assert_ok(&t.key.release(&rid), "a release");
    t.expect(f(deposits, 105, 0), "the release returned it on each");
    let rid = t.key.hold_id("10");
    assert_ok(&t.key.commit(&rid, "0"), "a commit of nothing");
    t.expect(f(deposits, 105, 0), "spent nothing, the hold gone");

    charged(&t.team, "5");
    let rid = t.team.hold_id("7");
    let moved = [[200, 0, 105, 0], [500, 0, 110, 7], [1000, 0, 110, 7]];
    t.expect(moved, "a charge and a hold on the team, none on the key");
    assert_ok(&t.team.release(&rid), "a release on the team");

    let own = [
        (&t.org, "100", "10"),
        (&t.team, "20", "3"),
        (&t.key, "9", "4"),
    ];
    for (level, credit, debit) in own {
        let ctx = format!("a credit and a debit on {}", level.bid);
        assert_status(&level.credit(credit), 201, &ctx);
        assert_status(&level.debit(debit), 201, &ctx);
    }
    let after = [[209, 4, 105, 0], [520, 3, 110, 0], [1100, 10, 110, 0]];
    t.expect(after, "each credit and debit moved its own budget only");
    t.root
        .expect([0, 0, 0, 0], "the default budget, outside the tree");
}

/// A charge, a reserve or a commit above its hold that does not fit some level moves nothing
/// anywhere and is `409 insufficient_funds` naming the nearest short level (the budget itself
/// first) and that level's available amount; a refused commit leaves the reservation active.
#[test]
fn a_spend_that_does_not_fit_names_the_nearest_short_level_and_moves_nothing() {
    let app = spawn_app();
    // The organisation holds less than the team, the team far less than its key.
    let t = Tree::new(&app, "shortfalls", ["30", "40", "500"]);
    let lean = child(&t.org, "lean", "5");
    let all = [&t.key, &t.team, &t.org, &lean];
    let before = snapshot(&all);
    let cases = [
        (
            &t.key,
            "600",
            &t.key,
            500,
            "every level short: the key itself",
        ),
        (
            &t.key,
            "100",
            &t.team,
            40,
            "the team and the organisation short: the team",
        ),
        (&t.key, "35", &t.org, 30, "the organisation alone short"),
        (&lean, "10", &lean, 5, "the budget alone short"),
    ];
    for (on, amount, short, available, what) in cases {
        let ctx = format!("a charge of {amount} on {}: {what}", on.bid);
        assert_short(&charge(on, amount, None), short, available, &ctx);
        let ctx = format!("a reserve of {amount} on {}: {what}", on.bid);
        assert_short(&on.reserve(amount, None), short, available, &ctx);
    }
    assert_eq!(snapshot(&all), before, "nothing moved at any level");

    // A hold of 20 leaves 480, 20 and 10 available on the key, the team and the organisation.
    let rid = t.key.hold_id("20");
    let held = snapshot(&all);
    let reservation = t.key.reservation(&rid);
    let resp = t.key.commit(&rid, "35");
    assert_short(&resp, &t.org, 10, "a commit 15 above its hold");
    let resp = t.key.commit(&rid, "45");
    assert_short(&resp, &t.team, 20, "a commit 25 above its hold");
    assert_eq!(t.key.reservation(&rid), reservation, "it stays as it was");
    assert_eq!(snapshot(&all), held, "the refused commits moved nothing");
    assert_ok(&t.key.commit(&rid, "30"), "a commit 10 above its hold");
    let spent = [[500, 0, 30, 0], [40, 0, 30, 0], [30, 0, 30, 0]];
    t.expect(spent, "the excess fitted every level");

    // A debit moves its own budget only: no level above can refuse it.
    assert_status(
        &t.key.debit("400"),
        201,
        "a debit beyond the team's available",
    );
    t.expect(
        [[500, 400, 30, 0], spent[1], spent[2]],
        "the debit on the key",
    );
}

/// A spend on the key appends its entry on the key (`via_budget_id` `null`) and one of the same
/// kind, amount, memo and reservation on the team and then the organisation, each naming the
/// key and showing its own figures after it; the budget's own movements (an opening deposit, a
/// credit) name none. Each level's ledger replays to its figures.
#[test]
fn a_spend_writes_an_entry_on_every_level_naming_the_budget_it_was_made_on() {
    let app = spawn_app();
    let t = Tree::new(&app, "ledgers", ["1000", "500", "200"]);
    for level in t.levels() {
        let ledger = level.entries();
        let ctx = format!("the opening deposit of {}", level.bid);
        assert_eq!(ledger.len(), 1, "{ctx}: the only entry: {ledger:?}");
        assert_eq!(ledger[0]["kind"], "opening_deposit", "{ctx}");
        let via = ledger[0].get("via_budget_id");
        assert_eq!(via, Some(&Value::Null), "{ctx}: its own movement");
    }
    let credit = json!({ "amount_atomic": "50", "memo": "top-up" });
    let resp = t.team.admin().post(&t.team.bpath("credits"), &credit);
    let entry = assert_status(&resp, 201, "a credit on the team");
    let via = entry.get("via_budget_id");
    assert_eq!(
        via,
        Some(&Value::Null),
        "a credit is the team's own: {entry}"
    );
    assert_eq!(
        t.team.last_entry(),
        entry,
        "the credit's answer is its entry"
    );

    let resp = charge(&t.key, "30", Some("job 7"));
    let own = assert_status(&resp, 201, "a charge with a memo");
    assert_spread(&t, &own, "a charge");
    let body = json!({ "budget_id": t.key.bid, "amount_atomic": "20", "memo": "run 8" });
    let resp = t.key.post(&reservations_path(&t.key.tid), &body);
    let r = assert_created(&resp, &reservations_path(&t.key.tid), "a reserve");
    assert_spread(&t, &t.key.last_entry(), "a reserve");
    assert_ok(
        &t.key.commit(str_of(&r, "id"), "25"),
        "a commit above its hold",
    );
    assert_spread(&t, &t.key.last_entry(), "a commit");
    let rid = t.key.hold_id("10");
    assert_spread(&t, &t.key.last_entry(), "a second reserve");
    assert_ok(&t.key.release(&rid), "a release");
    assert_spread(&t, &t.key.last_entry(), "a release");

    let spends = ["charge", "reserve", "commit", "reserve", "release"];
    let kinds = |own: &[&'static str]| [own, &spends[..]].concat();
    assert_eq!(
        t.key.kinds(),
        kinds(&["opening_deposit"]),
        "the key's ledger"
    );
    let team = kinds(&["opening_deposit", "credit"]);
    assert_eq!(
        t.team.kinds(),
        team,
        "the team's: its own and one per spend"
    );
    assert_eq!(
        t.org.kinds(),
        kinds(&["opening_deposit"]),
        "the organisation's"
    );
    for level in t.levels() {
        let ctx = format!("the ledger of {}", level.bid);
        assert_eq!(
            replay(&level.entries(), &ctx),
            level.figures(),
            "{ctx}: replays"
        );
    }
}
