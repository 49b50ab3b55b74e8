//! A refusal for want of funds says the amount available in the budget's unit, whichever
//! write was refused: a reserve, a commit over its hold, a debit, a charge.

use serde_json::json;

use crate::helpers::*;
use crate::wire::Response;

/// Asserts a shortfall of `available` told as `in_unit` (such as `5 tokens`).
fn assert_shortfall(resp: &Response, available: u128, in_unit: &str, ctx: &str) {
    assert_insufficient(resp, available, ctx);
    let detail = resp.json()["detail"].clone();
    assert_eq!(
        detail,
        format!("the budget has only {in_unit} available"),
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

    assert_shortfall(&tokens.reserve("6", None), 5, "5 tokens", "a reserve");
    assert_shortfall(&tokens.admin().debit("6"), 5, "5 tokens", "a debit");
    let charge = json!({ "budget_id": tokens.bid, "amount_atomic": "6" });
    let resp = tokens.post(&format!("/v1/tenants/{}/charges", s.tid), &charge);
    assert_shortfall(&resp, 5, "5 tokens", "a charge");
    let rid = tokens.hold_id("2");
    let resp = tokens.commit(&rid, "6");
    assert_shortfall(&resp, 3, "3 tokens", "a commit past its hold");

    // The default unit is said as it always was.
    assert_shortfall(&s.reserve("5", None), 4, "4 atomic units", "a reserve");
}
