//! Budgets in a tree (revision 4): a budget's `parent_id`, shown in every answer and taken by
//! the budgets list as a filter, and the rules of a parent (an open budget of the same tenant,
//! at most three levels up, fixed for life). A spend on a budget holds at every level above it
//! in one step (`spending`): what moves where, which level a refusal names, and the ledger
//! entry each level gets. Closing, thresholds and the audit chain of a tree (`lifecycle`).

use serde_json::{Value, json};

use crate::helpers::*;
use crate::wire::Response;

pub(crate) mod concurrency;
mod lifecycle;
mod spending;

/// A well-formed budget id that no test creates.
const UNKNOWN_BUDGET: &str = "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV";

/// The body of a budget named `name` with `deposit`, under `parent` (none: at the top).
fn budget_body(name: &str, deposit: &str, parent: Option<&str>) -> Value {
    let mut body = json!({ "name": name, "opening_deposit_atomic": deposit });
    if let Some(parent) = parent {
        body["parent_id"] = json!(parent);
    }
    body
}

/// Asserts that a budget shows the member `parent_id`, and that it is `parent` (`null` for
/// none): a missing member is not `null`.
fn assert_parent(b: &Value, parent: Option<&str>, ctx: &str) {
    let shown = b.get("parent_id");
    assert_eq!(shown, Some(&json!(parent)), "{ctx}: parent_id of {b}");
}

/// Creates a budget as admin under `parent` from `body` (its `parent_id` added), asserting
/// `201` and the parent shown; the scene on it.
fn child_of<'a>(parent: &Scene<'a>, mut body: Value) -> Scene<'a> {
    body["parent_id"] = json!(parent.bid);
    let ctx = format!("a budget of {body}");
    let b = assert_created(&parent.post_budget(&body), &budgets_path(&parent.tid), &ctx);
    assert_budget_shape(&b, &ctx);
    assert_parent(&b, Some(&parent.bid), &ctx);
    parent.on(str_of(&b, "id"))
}

/// Creates a budget named `name` with `deposit` under `parent`; the scene on it.
fn child<'a>(parent: &Scene<'a>, name: &str, deposit: &str) -> Scene<'a> {
    child_of(parent, budget_body(name, deposit, None))
}

/// Three levels of one tenant: an organisation at the top, a team under it and a key under
/// the team; and the tenant's default budget (deposit `0`), outside the tree.
struct Tree<'a> {
    /// The tenant's default budget, with the tenant token as its credential.
    root: Scene<'a>,
    /// The top level.
    org: Scene<'a>,
    /// The organisation's child.
    team: Scene<'a>,
    /// The team's child, where the spends are made.
    key: Scene<'a>,
}

impl<'a> Tree<'a> {
    /// A new tenant named `tenant` with the three levels and their deposits, top first.
    fn new(app: &'a TestApp, tenant: &str, [org, team, key]: [&str; 3]) -> Self {
        let root = Scene::new(app, tenant, "0");
        let org = root.new_budget("org", org);
        let team = child(&org, "team", team);
        let key = child(&team, "key", key);
        Self {
            root,
            org,
            team,
            key,
        }
    }

    /// The levels nearest the spends first: the key, the team, the organisation.
    fn levels(&self) -> [&Scene<'a>; 3] {
        [&self.key, &self.team, &self.org]
    }

    /// Asserts each level's credited, debited, spent and reserved, the key's first.
    fn expect(&self, figures: [[u128; 4]; 3], ctx: &str) {
        for (level, f) in self.levels().into_iter().zip(figures) {
            level.expect(f, &format!("{ctx}: budget {}", level.bid));
        }
    }
}

/// Every budget and ledger of `levels`, as admin reads them: what a refused write must leave
/// as it was.
fn snapshot(levels: &[&Scene<'_>]) -> Vec<(Value, Vec<Value>)> {
    levels.iter().map(|s| (s.budget(), s.entries())).collect()
}

/// `/v1/tenants/<tid>/charges`.
fn charges_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/charges")
}

/// A charge of `amount` on the scene's budget with a memo if given, with its credential.
fn charge(s: &Scene<'_>, amount: &str, memo: Option<&str>) -> Response {
    let body = json!({ "budget_id": s.bid, "amount_atomic": amount, "memo": memo });
    s.post(&charges_path(&s.tid), &body)
}

/// A charge as [`charge`], asserting `201`; the entry.
fn charged(s: &Scene<'_>, amount: &str) -> Value {
    let resp = charge(s, amount, None);
    assert_status(&resp, 201, &format!("a charge of {amount} on {}", s.bid))
}

/// Asserts `409 insufficient_funds` naming `level` and its `available`.
fn assert_short(resp: &Response, level: &Scene<'_>, available: u128, ctx: &str) {
    assert_insufficient(resp, available, ctx);
    let named = resp.json()["budget_id"].clone();
    assert_eq!(named, json!(level.bid), "{ctx}: the level named");
}

/// `PATCH` of the scene's budget as admin.
fn patch(s: &Scene<'_>, body: &Value) -> Response {
    let (auth, text) = (s.app.admin(), body.to_string());
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    s.app
        .request("PATCH", &s.bpath(""), &headers, Some(text.as_bytes()))
}

/// The ids of a list read whole as admin.
fn listed_ids(app: &TestApp, path: &str) -> Vec<String> {
    list_all(app, &app.admin(), path)
        .iter()
        .map(id_of)
        .collect()
}

/// Some ids in id order, as a list shows them.
fn sorted(ids: &[&str]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    ids.sort();
    ids
}

/// Every budget shows `parent_id`: its parent's id, or `null` at the top and on the default
/// budget, in the create answer, a read and the list alike. `parent_id` lists a budget's
/// children (none for an unknown id or another tenant's budget), with `state` and paging as any
/// filter; a malformed value is `400 invalid_query`, as the reservations' `budget_id` filter.
#[test]
fn every_budget_shows_its_parent_and_the_parent_id_filter_lists_its_children() {
    let app = spawn_app();
    let t = Tree::new(&app, "tree-shape", ["1000", "500", "200"]);
    let other = Scene::new(&app, "tree-shape-other", "5");
    let key2 = child(&t.team, "key-2", "10");
    let team2 = child(&t.org, "team-2", "10");
    let key3 = child(&team2, "key-3", "10");
    let expected = [
        (&t.root, None),
        (&t.org, None),
        (&t.team, Some(&t.org.bid)),
        (&t.key, Some(&t.team.bid)),
        (&key2, Some(&t.team.bid)),
        (&team2, Some(&t.org.bid)),
        (&key3, Some(&team2.bid)),
    ];
    let path = budgets_path(&t.root.tid);
    let listed = list_all(&app, &app.admin(), &path);
    assert_eq!(
        listed.len(),
        expected.len(),
        "every budget listed: {listed:?}"
    );
    for (level, parent) in expected {
        let ctx = format!("budget {}", level.bid);
        let b = level.budget();
        assert_budget_shape(&b, &ctx);
        assert_parent(&b, parent.map(String::as_str), &ctx);
        assert!(listed.contains(&b), "{ctx}: listed as it reads: {b}");
    }
    let ctx = "the default budget";
    assert_parent(&t.root.created["budget"], None, ctx);
    assert_parent(&app.get_admin(&t.root.tid).json()["budget"], None, ctx);

    assert_ok(&key2.close(), "closing one of the team's keys");
    let with = |query: String| with_query(&path, &query);
    let cases = [
        (
            with(format!("parent_id={}", t.team.bid)),
            sorted(&[&t.key.bid, &key2.bid]),
        ),
        (
            with(format!("parent_id={}", t.org.bid)),
            sorted(&[&t.team.bid, &team2.bid]),
        ),
        (
            with(format!("parent_id={}", team2.bid)),
            vec![key3.bid.clone()],
        ),
        (with(format!("parent_id={}", t.key.bid)), vec![]),
        (with(format!("parent_id={}", t.root.bid)), vec![]),
        (with(format!("parent_id={UNKNOWN_BUDGET}")), vec![]),
        (with(format!("parent_id={}", other.bid)), vec![]),
        (
            with(format!("parent_id={}&state=open", t.team.bid)),
            vec![t.key.bid.clone()],
        ),
        (
            with(format!("state=closed&parent_id={}", t.team.bid)),
            vec![key2.bid.clone()],
        ),
    ];
    for (query, want) in &cases {
        assert_eq!(&listed_ids(&app, query), want, "GET {query}");
        let own = list_all(&app, &t.root.token, query);
        let admins = list_all(&app, &app.admin(), query);
        assert_eq!(own, admins, "GET {query}: the tenant token lists the same");
    }
    let first = with(format!("parent_id={}&limit=1", t.org.bid));
    let page = list_page(&app, &app.admin(), &first);
    let want = sorted(&[&t.team.bid, &team2.bid]);
    assert_eq!(
        page_ids(&page),
        want[..1],
        "GET {first}: a page of children"
    );
    assert_eq!(
        page["has_more"], true,
        "GET {first}: has_more counts children"
    );

    // As the reservations' `budget_id` filter: a malformed id is a bad query.
    let team = &t.team.bid;
    let malformed = [
        "parent_id=nope".to_owned(),
        "parent_id=".to_owned(),
        "parent_id".to_owned(),
        format!("parent_id={}", team.to_ascii_lowercase()),
        format!("parent_id={}", t.root.tid),
        format!("parent_id=res_{}", &team[4..]),
        format!("parent_id={team}&parent_id={team}"),
    ];
    for query in &malformed {
        let resp = get_as(&app, &app.admin(), &with(query.clone()));
        assert_invalid_query(&resp, &["parent_id"], &format!("GET ?{query}"));
    }
    let resp = get_as(&app, &app.admin(), &with("parent_id=x&limit=0".into()));
    let ctx = "a malformed parent_id and a bad limit";
    assert_invalid_query(&resp, &["limit", "parent_id"], ctx);
    let holds = with_query(
        &reservations_path(&t.root.tid),
        &format!("parent_id={team}"),
    );
    let ctx = "the reservations list takes no parent_id";
    assert_invalid_query(&get_as(&app, &app.admin(), &holds), &["parent_id"], ctx);
}

/// `parent_id` on create must name an open budget of the same tenant with at most two
/// ancestors: an unknown, malformed or another tenant's one, or one that would make a fifth
/// level, is `422` naming `parent_id`; a closed one `409 budget_closed`; an unknown tenant in
/// the path `404 tenant_not_found` first. The default budget may be a parent, `null` is none,
/// and a `PATCH` naming `parent_id` is `422` whatever it names.
#[test]
fn a_parent_is_an_open_budget_of_the_same_tenant_at_most_three_levels_up_and_fixed() {
    let app = spawn_app();
    let s = Scene::new(&app, "parents", "100");
    let other = Scene::new(&app, "parents-other", "100");
    let l1 = s.new_budget("l1", "10");
    let l2 = child(&l1, "l2", "10");
    let l3 = child(&l2, "l3", "10");
    let l4 = child(&l3, "l4", "10");
    let closed = s.new_budget("closed", "1");
    assert_ok(&closed.close(), "closing a budget");
    let events = app.audit_count();
    let path = budgets_path(&s.tid);
    let before = listed_ids(&app, &path);

    let refused = [
        (json!(UNKNOWN_BUDGET), "an unknown budget"),
        (json!(other.bid), "another tenant's budget"),
        (
            json!(l4.bid),
            "a budget with three ancestors: a fifth level",
        ),
        (json!(s.bid.to_ascii_lowercase()), "an id in lower case"),
        (json!("nope"), "not an id"),
        (json!(""), "an empty string"),
        (json!(s.tid), "a tenant id"),
        (json!(format!("res_{}", &s.bid[4..])), "a reservation id"),
        (json!(7), "a number"),
        (json!([s.bid]), "an array"),
        (json!({ "id": s.bid }), "an object"),
    ];
    for (parent, what) in refused {
        let mut body = budget_body("refused", "1", None);
        body["parent_id"] = parent;
        let ctx = format!("parent_id {what}: {body}");
        assert_invalid(&s.post_budget(&body), &["parent_id"], &ctx);
    }
    let body = json!({ "name": "", "opening_deposit_atomic": "1", "parent_id": "nope" });
    let ctx = "a bad name and a malformed parent_id";
    assert_invalid(&s.post_budget(&body), &["name", "parent_id"], ctx);
    let body = budget_body("under-closed", "1", Some(&closed.bid));
    assert_conflict(&s.post_budget(&body), "budget_closed", "a closed parent");
    let (addr, admin, no_tenant) = (&app.addr, app.admin(), budgets_path(UNKNOWN_TENANT));
    for parent in [UNKNOWN_BUDGET, &other.bid, &l4.bid] {
        let text = budget_body("lost", "1", Some(parent)).to_string();
        let resp = send(addr, "POST", &no_tenant, &admin, Some(&text), None, &[]);
        let ctx = format!("an unknown tenant, parent_id {parent}");
        assert_problem(&resp, 404, "tenant_not_found", &ctx);
    }
    assert_events(&app, events, "no refused budget appended one");
    assert_eq!(
        listed_ids(&app, &path),
        before,
        "no refused budget was made"
    );

    // A fourth level beside l4; the default budget as a parent; `null` as no parent.
    child(&l3, "l4-sibling", "1");
    child(&s, "under-default", "1");
    let body = json!({ "name": "top", "opening_deposit_atomic": "1", "parent_id": null });
    let top = assert_created(&s.post_budget(&body), &path, "parent_id null");
    assert_parent(&top, None, "parent_id null");

    // The parent is fixed for life: a PATCH naming it, whatever it names, is refused.
    let patches = [
        (&l2, json!({ "parent_id": l1.bid })),
        (&l2, json!({ "parent_id": s.bid })),
        (
            &l2,
            json!({ "parent_id": null, "alert_thresholds_atomic": ["5"] }),
        ),
        (&l1, json!({ "parent_id": null })),
        (&l1, json!({ "parent_id": UNKNOWN_BUDGET })),
        (
            &l4,
            json!({ "parent_id": "nope", "alert_thresholds_atomic": ["5"] }),
        ),
    ];
    let events = app.audit_count();
    for (level, body) in patches {
        let was = level.budget();
        let ctx = format!("PATCH {} with {body}", level.bid);
        assert_invalid(&patch(level, &body), &["parent_id"], &ctx);
        assert_eq!(level.budget(), was, "{ctx}: nothing changed");
    }
    assert_events(&app, events, "no refused PATCH appended one");

    assert_ok(&app.delete(&s.tid), "tombstoning the tenant");
    let body = budget_body("late", "1", Some(&l1.bid));
    let ctx = "a parent under a tombstoned tenant";
    assert_conflict(&s.post_budget(&body), "tenant_tombstoned", ctx);
}
