//! A refusal for want of funds says the amount available in the budget's unit, whichever
//! write was refused: a reserve, a commit over its hold, a debit, a charge.

use serde_json::json;

use crate::helpers::*;
use crate::wire::Response;

/// Asserts a shortfall of `available` on budget `bid`, told as `in_unit` (such as
/// `5 tokens`).
fn assert_shortfall(resp: &Response, bid: &str, available: u128, in_unit: &str, ctx: &str) {
    assert_insufficient(resp, available, ctx);
    let body = resp.json();
    assert_eq!(body["budget_id"], bid, "{ctx}: the budget that is short");
    assert_eq!(
        body["detail"],
        format!("budget {bid} has only {in_unit} available"),
        "{ctx}: the detail"
    );
}

#[test]
fn a_shortfall_is_told_in_the_budget_s_unit() {
    let app = spawn_app();
    let s = Scene::new(&app, "shortfall-units", "4");
    let body = json!({ "name": "llm", "unit": "tokens", "opening_deposit_atomic": "5" });
    let resp = s.post_budget(&body);
    let created = assert_created(&resp, &budgets_path(&s.tid), "a budget in tokens");
    let tokens = s.on(str_of(&created, "id"));

    let bid = tokens.bid.clone();
    assert_shortfall(&tokens.reserve("6", None), &bid, 5, "5 tokens", "a reserve");
    assert_shortfall(&tokens.admin().debit("6"), &bid, 5, "5 tokens", "a debit");
    let charge = json!({ "budget_id": tokens.bid, "amount_atomic": "6" });
    let resp = tokens.post(&format!("/v1/tenants/{}/charges", s.tid), &charge);
    assert_shortfall(&resp, &bid, 5, "5 tokens", "a charge");
    let rid = tokens.hold_id("2");
    let resp = tokens.commit(&rid, "6");
    assert_shortfall(&resp, &bid, 3, "3 tokens", "a commit past its hold");

    // The default unit is said as it always was.
    let default = s.tid.replacen("ten_", "bud_", 1);
    assert_shortfall(
        &s.reserve("5", None),
        &default,
        4,
        "4 atomic units",
        "a reserve",
    );
}
