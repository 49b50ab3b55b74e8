//! Budgets, reservations, ledger entries and lists: a [`Scene`] (one tenant, one of its
//! budgets, one credential) with the requests of the spending tests, the figures a budget
//! shows and the ones its ledger replays to, and the checks of their shapes.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::app::{TestApp, bearer, send, tenant_id, tenant_token};
use super::problem::{assert_problem, error_fields};
use super::shapes::{CROCKFORD, ULID_CHARS, is_timestamp, now_ms};
use crate::wire::Response;

/// The `ttl_seconds` of a reservation that names none.
pub const TTL_S_DEFAULT: i64 = 300;

/// The longest `ttl_seconds` the contract accepts.
pub const TTL_S_MAX: i64 = 86_400;

/// The page size of a list that names no `limit`.
pub const PAGE_LIMIT_DEFAULT: usize = 100;

/// The largest `limit` a list accepts.
pub const PAGE_LIMIT_MAX: usize = 1000;

/// The longest memo, in Unicode scalar values.
pub const MEMO_CHARS_MAX: usize = 200;

/// How long after `expires_at` the service may take to record an expiry.
pub const EXPIRY_RECORD_MS_MAX: i64 = 1000;

/// Scheduling slack a loaded test machine may add to a bound the server keeps by its clock.
pub const SCHEDULING_SLACK_MS: i64 = 250;

/// How long a test waits for a 1 s reservation's expiry to be recorded.
pub const EXPIRY_WAIT: Duration = Duration::from_secs(5);

/// A well-formed tenant id that no test creates.
pub const UNKNOWN_TENANT: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV";

/// How many pages [`list_all`] follows before it calls the paging broken.
const PAGES_MAX: usize = 1000;

/// How often a bounded wait looks again.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The members of a budget.
const BUDGET_MEMBERS: &str = "id tenant_id parent_id name unit state created_at closed_at \
     opening_deposit_atomic credited_atomic debited_atomic spent_atomic reserved_atomic \
     balance_atomic available_atomic period current_period alert_thresholds_atomic";

/// The members of a reservation.
const RESERVATION_MEMBERS: &str = "id tenant_id budget_id state amount_atomic \
     committed_atomic memo created_at expires_at settled_at";

/// The members of a ledger entry.
const ENTRY_MEMBERS: &str = "id budget_id kind amount_atomic reservation_id memo \
     occurred_at balance_atomic available_atomic period_id via_budget_id";

/// `/v1/tenants/<tid>/budgets`.
pub fn budgets_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/budgets")
}

/// `/v1/tenants/<tid>/budgets/<bid>`, with a `/<tail>` unless `tail` is empty.
pub fn budget_path(tid: &str, bid: &str, tail: &str) -> String {
    let base = format!("/v1/tenants/{tid}/budgets/{bid}");
    if tail.is_empty() {
        base
    } else {
        format!("{base}/{tail}")
    }
}

/// `/v1/tenants/<tid>/reservations`.
pub fn reservations_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/reservations")
}

/// `/v1/tenants/<tid>/reservations/<rid>`, with a `/<tail>` unless `tail` is empty.
pub fn reservation_path(tid: &str, rid: &str, tail: &str) -> String {
    let base = format!("/v1/tenants/{tid}/reservations/{rid}");
    if tail.is_empty() {
        base
    } else {
        format!("{base}/{tail}")
    }
}

/// `path?query`, or `path&query` when `path` already has a query.
pub fn with_query(path: &str, query: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{query}")
}

/// `GET path` as `auth`.
pub fn get_as(app: &TestApp, auth: &str, path: &str) -> Response {
    send(&app.addr, "GET", path, auth, None, None, &[])
}

/// Asserts a `201` with `Location` equal to `<collection>/<the body's id>`; returns the body.
pub fn assert_created(resp: &Response, collection: &str, ctx: &str) -> Value {
    assert_eq!(resp.status, 201, "{ctx}: {}", resp.describe());
    let body = resp.json();
    let location = format!("{collection}/{}", str_of(&body, "id"));
    assert_eq!(
        resp.header("location"),
        Some(location.as_str()),
        "{ctx}: Location"
    );
    body
}

/// Asserts a `200` and returns the body.
pub fn assert_ok(resp: &Response, ctx: &str) -> Value {
    assert_status(resp, 200, ctx)
}

/// Asserts a status and returns the body (`null` if there is none).
pub fn assert_status(resp: &Response, status: u16, ctx: &str) -> Value {
    assert_eq!(resp.status, status, "{ctx}: {}", resp.describe());
    if resp.body.is_empty() {
        Value::Null
    } else {
        resp.json()
    }
}

/// Asserts how many audit events the chain holds.
pub fn assert_events(app: &TestApp, events: i64, ctx: &str) {
    assert_eq!(app.audit_count(), events, "{ctx}: the audit events");
}

/// The values of a JSON array text: a table of values in one line.
pub fn values(text: &str) -> Vec<Value> {
    let parsed = serde_json::from_str::<Vec<Value>>(text);
    parsed.unwrap_or_else(|e| panic!("a JSON array ({e}): {text}"))
}

/// The body of a reservation of `amount` on `bid`, with a `ttl_seconds` if given.
pub fn reserve_body(bid: &str, amount: &str, ttl_s: Option<i64>) -> Value {
    let mut body = json!({ "budget_id": bid, "amount_atomic": amount });
    if let Some(ttl) = ttl_s {
        body["ttl_seconds"] = json!(ttl);
    }
    body
}

/// `{"amount_atomic": amount}`, the body of a credit, a debit or a commit.
pub fn amount_body(amount: &str) -> Value {
    json!({ "amount_atomic": amount })
}

/// One tenant, one of its budgets and one credential: the requests of a spending test.
#[derive(Clone)]
pub struct Scene<'a> {
    /// The server.
    pub app: &'a TestApp,
    /// The tenant's id.
    pub tid: String,
    /// The budget's id (the default one unless [`Scene::new_budget`] made another).
    pub bid: String,
    /// The credential of the reservation requests: the tenant token unless [`Scene::admin`].
    pub auth: String,
    /// `Bearer <the tenant token>`.
    pub token: String,
    /// The tenant's create response.
    pub created: Value,
}

impl<'a> Scene<'a> {
    /// Creates a tenant with `deposit`; the scene is its default budget and its token.
    pub fn new(app: &'a TestApp, name: &str, deposit: &str) -> Self {
        let created = app.create_ok(name, deposit);
        let token = bearer(&tenant_token(&created));
        Self {
            app,
            tid: tenant_id(&created),
            bid: str_of(&created["budget"], "id").to_owned(),
            auth: token.clone(),
            token,
            created,
        }
    }

    /// The same scene acting as the admin.
    pub fn admin(&self) -> Self {
        Self {
            auth: self.app.admin(),
            ..self.clone()
        }
    }

    /// The same scene on another budget of the tenant.
    pub fn on(&self, bid: &str) -> Self {
        Self {
            bid: bid.to_owned(),
            ..self.clone()
        }
    }

    /// Creates a budget of unit `atomic` as admin, asserting `201`; the scene on it.
    pub fn new_budget(&self, name: &str, deposit: &str) -> Self {
        let body = json!({ "name": name, "opening_deposit_atomic": deposit });
        let resp = self.post_budget(&body);
        let b = assert_created(&resp, &budgets_path(&self.tid), &format!("budget {name:?}"));
        self.on(str_of(&b, "id"))
    }

    /// `POST …/budgets` of `body` as admin.
    pub fn post_budget(&self, body: &Value) -> Response {
        self.admin().post(&budgets_path(&self.tid), body)
    }

    /// The budget's path with a `/<tail>` unless `tail` is empty.
    pub fn bpath(&self, tail: &str) -> String {
        budget_path(&self.tid, &self.bid, tail)
    }

    /// A reservation's path with a `/<tail>` unless `tail` is empty.
    pub fn rpath(&self, rid: &str, tail: &str) -> String {
        reservation_path(&self.tid, rid, tail)
    }

    /// `GET path` with the scene's credential.
    pub fn get(&self, path: &str) -> Response {
        get_as(self.app, &self.auth, path)
    }

    /// `POST path` of a JSON body with the scene's credential.
    pub fn post(&self, path: &str, body: &Value) -> Response {
        let (addr, text) = (&self.app.addr, body.to_string());
        send(addr, "POST", path, &self.auth, Some(&text), None, &[])
    }

    /// `POST path` of a JSON body with the scene's credential and an `Idempotency-Key`.
    pub fn post_keyed(&self, path: &str, body: &Value, key: &str) -> Response {
        let (addr, text) = (&self.app.addr, body.to_string());
        send(addr, "POST", path, &self.auth, Some(&text), Some(key), &[])
    }

    /// The budget as admin reads it, asserting `200`.
    pub fn budget(&self) -> Value {
        let resp = get_as(self.app, &self.app.admin(), &self.bpath(""));
        assert_ok(&resp, &format!("GET budget {}", self.bid))
    }

    /// The budget's figures, checked for consistency.
    pub fn figures(&self) -> Figures {
        Figures::of(&self.budget(), &format!("budget {}", self.bid))
    }

    /// Asserts the budget's credited, debited, spent and reserved.
    pub fn expect(&self, [c, d, s, r]: [u128; 4], ctx: &str) {
        assert_eq!(self.figures(), Figures::new(c, d, s, r), "{ctx}: figures");
    }

    /// Every ledger entry of the budget, oldest first, as admin reads them.
    pub fn entries(&self) -> Vec<Value> {
        list_all(self.app, &self.app.admin(), &self.bpath("entries"))
    }

    /// The kinds of the budget's ledger entries, in order.
    pub fn kinds(&self) -> Vec<String> {
        self.entries()
            .iter()
            .map(|e| str_of(e, "kind").to_owned())
            .collect()
    }

    /// `DELETE` of the budget as admin.
    pub fn close(&self) -> Response {
        let (addr, admin) = (&self.app.addr, self.app.admin());
        send(addr, "DELETE", &self.bpath(""), &admin, None, None, &[])
    }

    /// A credit of `amount` as admin.
    pub fn credit(&self, amount: &str) -> Response {
        self.admin()
            .post(&self.bpath("credits"), &amount_body(amount))
    }

    /// A debit of `amount` as admin.
    pub fn debit(&self, amount: &str) -> Response {
        self.admin()
            .post(&self.bpath("debits"), &amount_body(amount))
    }

    /// A reservation of `amount` on the budget, with a `ttl_seconds` if given.
    pub fn reserve(&self, amount: &str, ttl_s: Option<i64>) -> Response {
        let path = reservations_path(&self.tid);
        self.post(&path, &reserve_body(&self.bid, amount, ttl_s))
    }

    /// Reserves as [`Scene::reserve`], asserting `201` and `Location`; the reservation.
    pub fn hold(&self, amount: &str, ttl_s: Option<i64>) -> Value {
        let resp = self.reserve(amount, ttl_s);
        let ctx = format!("reserving {amount} on {}", self.bid);
        assert_created(&resp, &reservations_path(&self.tid), &ctx)
    }

    /// Reserves `amount` with the default ttl, asserting `201`; the reservation's id.
    pub fn hold_id(&self, amount: &str) -> String {
        id_of(&self.hold(amount, None))
    }

    /// Commits `amount` of a reservation.
    pub fn commit(&self, rid: &str, amount: &str) -> Response {
        self.post(&self.rpath(rid, "commit"), &amount_body(amount))
    }

    /// Releases a reservation with no body at all.
    pub fn release(&self, rid: &str) -> Response {
        let path = self.rpath(rid, "release");
        send(&self.app.addr, "POST", &path, &self.auth, None, None, &[])
    }

    /// Extends a reservation to `ttl_s` from now.
    pub fn extend(&self, rid: &str, ttl_s: i64) -> Response {
        self.post(&self.rpath(rid, "extend"), &json!({ "ttl_seconds": ttl_s }))
    }

    /// A reservation as admin reads it, asserting `200`.
    pub fn reservation(&self, rid: &str) -> Value {
        let resp = get_as(self.app, &self.app.admin(), &self.rpath(rid, ""));
        assert_ok(&resp, &format!("GET reservation {rid}"))
    }

    /// A reservation's state as admin reads it.
    pub fn state(&self, rid: &str) -> String {
        str_of(&self.reservation(rid), "state").to_owned()
    }

    /// The budget's newest ledger entry.
    pub fn last_entry(&self) -> Value {
        self.entries().pop().expect("every budget has an entry")
    }

    /// Polls a reservation (bounded by [`EXPIRY_WAIT`]) until its expiry is recorded.
    pub fn wait_expired(&self, rid: &str) -> Value {
        let seen = poll(EXPIRY_WAIT, || {
            let now = self.reservation(rid);
            let state = str_of(&now, "state");
            assert!(state == "active" || state == "expired", "{now}");
            Some(now).filter(|n| n["state"] == "expired")
        });
        seen.unwrap_or_else(|| panic!("{rid}: the expiry is recorded within {EXPIRY_WAIT:?}"))
    }
}

/// One page of a list, asserting `200` and the page's shape; `path` carries the query.
pub fn list_page(app: &TestApp, auth: &str, path: &str) -> Value {
    let page = assert_ok(&get_as(app, auth, path), &format!("GET {path}"));
    assert_members(&page, "data has_more next_after", &format!("page {path}"));
    let data = page["data"].as_array();
    let data = data.unwrap_or_else(|| panic!("GET {path}: data is an array: {page}"));
    let has_more = page["has_more"].as_bool();
    let has_more = has_more.unwrap_or_else(|| panic!("GET {path}: has_more: {page}"));
    let last = data.last().map(|i| i["id"].clone());
    let next = if has_more { last } else { Some(Value::Null) };
    let shown = Some(page["next_after"].clone());
    assert_eq!(shown, next, "GET {path}: next_after, the last id");
    page
}

/// The ids of a page's items.
pub fn page_ids(page: &Value) -> Vec<String> {
    let items = page["data"].as_array().cloned().unwrap_or_default();
    items.iter().map(id_of).collect()
}

/// Every item of a list, following `next_after` with the largest page; `path` may carry a
/// query of its own. Asserts the items come in strictly ascending id order.
pub fn list_all(app: &TestApp, auth: &str, path: &str) -> Vec<Value> {
    let mut items: Vec<Value> = Vec::new();
    let mut query = with_query(path, &format!("limit={PAGE_LIMIT_MAX}"));
    for _ in 0..PAGES_MAX {
        let page = list_page(app, auth, &query);
        items.extend(page["data"].as_array().cloned().unwrap_or_default());
        let Some(next) = page["next_after"].as_str() else {
            let ids: Vec<String> = items.iter().map(id_of).collect();
            let ascending = ids.windows(2).all(|w| w[0] < w[1]);
            assert!(ascending, "GET {path}: ids ascend strictly: {ids:?}");
            return items;
        };
        query = with_query(path, &format!("limit={PAGE_LIMIT_MAX}&after={next}"));
    }
    panic!("GET {path}: more than {PAGES_MAX} pages");
}

/// The string member `name` of `v`; fails the test if it is not a string.
pub fn str_of<'v>(v: &'v Value, name: &str) -> &'v str {
    v[name]
        .as_str()
        .unwrap_or_else(|| panic!("{name} is a string in {v}"))
}

/// The `id` of an object.
pub fn id_of(v: &Value) -> String {
    str_of(v, "id").to_owned()
}

/// An amount member of `v`, a decimal string of a `u128` without leading zeros.
pub fn amount(v: &Value, name: &str) -> u128 {
    let text = str_of(v, name);
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let canonical = digits && (text == "0" || !text.starts_with('0'));
    assert!(canonical, "{name}: decimal digits in {v}");
    text.parse()
        .unwrap_or_else(|e| panic!("{name} fits u128 ({e}) in {v}"))
}

/// A budget's four moved sums; balance and available follow from them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// The opening deposit plus every credit.
    pub credited: u128,
    /// Every debit.
    pub debited: u128,
    /// Every commit.
    pub spent: u128,
    /// The amounts of the active reservations.
    pub reserved: u128,
}

impl Figures {
    /// Credited, debited, spent, reserved.
    pub fn new(credited: u128, debited: u128, spent: u128, reserved: u128) -> Self {
        Self {
            credited,
            debited,
            spent,
            reserved,
        }
    }

    /// The figures a budget shows, after checking that its balance and available follow
    /// from them and that the invariant holds.
    pub fn of(b: &Value, ctx: &str) -> Self {
        let f = Self::new(
            amount(b, "credited_atomic"),
            amount(b, "debited_atomic"),
            amount(b, "spent_atomic"),
            amount(b, "reserved_atomic"),
        );
        f.assert_shown(b, ctx);
        f
    }

    /// credited − debited − spent, checked: a broken invariant fails the test.
    pub fn balance(&self) -> u128 {
        let b = self.credited.checked_sub(self.debited);
        let b = b.and_then(|b| b.checked_sub(self.spent));
        b.unwrap_or_else(|| panic!("credited ≥ debited + spent: {self:?}"))
    }

    /// balance − reserved, checked: a broken invariant fails the test.
    pub fn available(&self) -> u128 {
        let a = self.balance().checked_sub(self.reserved);
        a.unwrap_or_else(|| panic!("credited ≥ debited + spent + reserved: {self:?}"))
    }

    /// Asserts that the `balance_atomic` and `available_atomic` of `v` are these figures'.
    fn assert_shown(&self, v: &Value, ctx: &str) {
        let shown = (amount(v, "balance_atomic"), amount(v, "available_atomic"));
        let ours = (self.balance(), self.available());
        assert_eq!(shown, ours, "{ctx}: balance, available of {self:?}");
    }
}

/// Replays a budget's ledger entries in order, checking each entry's `balance_atomic` and
/// `available_atomic` against the running figures; returns the final figures.
pub fn replay(entries: &[Value], ctx: &str) -> Figures {
    let mut f = Figures::default();
    let mut held: HashMap<String, u128> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        let ctx = format!("{ctx}: entry {i} {e}");
        assert_entry_shape(e, &ctx);
        let kind = str_of(e, "kind");
        let first = kind == "opening_deposit";
        assert_eq!(i == 0, first, "{ctx}: the first is the deposit");
        let a = amount(e, "amount_atomic");
        let rid = e["reservation_id"].as_str().unwrap_or_default().to_owned();
        let held_kind = matches!(kind, "reserve" | "commit" | "release" | "expire");
        assert_eq!(!rid.is_empty(), held_kind, "{ctx}: reservation_id");
        let add = |x: u128| {
            x.checked_add(a)
                .unwrap_or_else(|| panic!("{ctx}: overflow"))
        };
        match kind {
            "opening_deposit" | "credit" | "refill" => f.credited = add(f.credited),
            "debit" | "forfeit" => f.debited = add(f.debited),
            "charge" => f.spent = add(f.spent),
            "reserve" => {
                let again = held.insert(rid, a).is_some();
                assert!(!again, "{ctx}: one reserve per reservation");
                f.reserved = add(f.reserved);
            }
            "commit" | "release" | "expire" => {
                let was = held.remove(&rid);
                let was = was.unwrap_or_else(|| panic!("{ctx}: settles an active hold"));
                if kind == "commit" {
                    f.spent = add(f.spent);
                } else {
                    assert_eq!(a, was, "{ctx}: a {kind} entry carries the amount returned");
                }
                f.reserved -= was;
            }
            other => panic!("{ctx}: an unknown entry kind {other:?}"),
        }
        f.assert_shown(e, &ctx);
    }
    f
}

/// Asserts that an object has exactly the members named in `expected` (space-separated).
pub fn assert_members(v: &Value, expected: &str, ctx: &str) {
    let object = v
        .as_object()
        .unwrap_or_else(|| panic!("{ctx}: an object: {v}"));
    let mut members: Vec<&str> = object.keys().map(String::as_str).collect();
    members.sort_unstable();
    let mut expected: Vec<&str> = expected.split_whitespace().collect();
    expected.sort_unstable();
    assert_eq!(members, expected, "{ctx}: the members of {v}");
}

/// `<prefix>_` followed by a ULID in upper-case Crockford base32 that fits 128 bits.
pub fn is_id(s: &str, prefix: &str) -> bool {
    let ulid = s
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'));
    ulid.is_some_and(|u| {
        u.len() == ULID_CHARS && u.chars().all(|c| CROCKFORD.contains(c)) && u.as_bytes()[0] <= b'7'
    })
}

/// Asserts the members holding ids have the contract's id shapes.
fn assert_ids(v: &Value, members: &[(&str, &str)], ctx: &str) {
    for (member, prefix) in members {
        let ok = v[*member].as_str().is_some_and(|s| is_id(s, prefix));
        assert!(ok, "{ctx}: {member} is {prefix}_ + a ULID: {v}");
    }
}

/// Asserts the members are contract timestamps, or null where `nullable`.
fn assert_times(v: &Value, members: &[&str], nullable: bool, ctx: &str) {
    for member in members {
        let ok = v[*member].as_str().is_some_and(is_timestamp) || nullable && v[*member].is_null();
        assert!(ok, "{ctx}: {member} is a contract timestamp: {v}");
    }
}

/// Checks a budget's members, ids, timestamps, state and figures.
pub fn assert_budget_shape(b: &Value, ctx: &str) {
    assert_members(b, BUDGET_MEMBERS, ctx);
    assert_ids(b, &[("id", "bud"), ("tenant_id", "ten")], ctx);
    if !b["parent_id"].is_null() {
        assert_ids(b, &[("parent_id", "bud")], ctx);
    }
    assert_times(b, &["created_at"], false, ctx);
    assert_times(b, &["closed_at"], true, ctx);
    let open = b["state"] == "open";
    assert!(open || b["state"] == "closed", "{ctx}: state: {b}");
    assert_eq!(open, b["closed_at"].is_null(), "{ctx}: closed_at: {b}");
    amount(b, "opening_deposit_atomic");
    Figures::of(b, ctx);
}

/// Checks a reservation's members, ids, timestamps, state and amounts.
pub fn assert_reservation_shape(r: &Value, ctx: &str) {
    assert_members(r, RESERVATION_MEMBERS, ctx);
    let ids = [("id", "res"), ("budget_id", "bud"), ("tenant_id", "ten")];
    assert_ids(r, &ids, ctx);
    assert_times(r, &["created_at", "expires_at"], false, ctx);
    assert_times(r, &["settled_at"], true, ctx);
    assert!(amount(r, "amount_atomic") >= 1, "{ctx}: amount: {r}");
    let state = str_of(r, "state");
    let known = ["active", "committed", "released", "expired"].contains(&state);
    assert!(known, "{ctx}: a known state: {r}");
    let active = state == "active";
    assert_eq!(active, r["settled_at"].is_null(), "{ctx}: settled_at: {r}");
    let committed = r["committed_atomic"].is_string();
    assert_eq!(state == "committed", committed, "{ctx}: committed_atomic");
    if committed {
        amount(r, "committed_atomic");
    }
}

/// Checks a ledger entry's members, ids, timestamp and amounts.
pub fn assert_entry_shape(e: &Value, ctx: &str) {
    assert_members(e, ENTRY_MEMBERS, ctx);
    assert_ids(e, &[("id", "ent"), ("budget_id", "bud")], ctx);
    if !e["reservation_id"].is_null() {
        assert_ids(e, &[("reservation_id", "res")], ctx);
    }
    if !e["via_budget_id"].is_null() {
        assert_ids(e, &[("via_budget_id", "bud")], ctx);
    }
    assert_times(e, &["occurred_at"], false, ctx);
    let memo = &e["memo"];
    assert!(memo.is_null() || memo.is_string(), "{ctx}: memo: {e}");
    for member in ["amount_atomic", "balance_atomic", "available_atomic"] {
        amount(e, member);
    }
}

/// Asserts a `409` of `code` and returns its body, after the checks of every problem.
pub fn assert_conflict(resp: &Response, code: &str, ctx: &str) -> Value {
    assert_problem(resp, 409, code, ctx)
}

/// Asserts `409 insufficient_funds` naming `available` in its `available_atomic`.
pub fn assert_insufficient(resp: &Response, available: u128, ctx: &str) {
    let body = assert_conflict(resp, "insufficient_funds", ctx);
    let want = available.to_string();
    assert_eq!(body["available_atomic"], want, "{ctx}: available_atomic");
}

/// Asserts `409 reservation_not_active` naming `state`.
pub fn assert_not_active(resp: &Response, state: &str, ctx: &str) {
    let body = assert_conflict(resp, "reservation_not_active", ctx);
    assert_eq!(body["state"], state, "{ctx}: the state named");
}

/// Sorted, deduplicated field names.
fn field_set(fields: &[&str]) -> Vec<String> {
    let mut set: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
    set.sort();
    set.dedup();
    set
}

/// Asserts `422 validation_failed` naming exactly `fields`.
pub fn assert_invalid(resp: &Response, fields: &[&str], ctx: &str) {
    let body = assert_problem(resp, 422, "validation_failed", ctx);
    let named = error_fields(&body, ctx);
    assert_eq!(named, field_set(fields), "{ctx}: the fields named");
}

/// Sleeps until the wall clock passes `ms` (since the epoch) plus `margin_ms`.
pub fn sleep_past(ms: i64, margin_ms: i64) {
    let wait = ms + margin_ms - now_ms();
    if wait > 0 {
        thread::sleep(Duration::from_millis(wait.unsigned_abs()));
    }
}

/// Calls `f` until it returns `Some`, at most for `timeout`.
pub fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = f() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// `(actor, payload)` of every audit event of `action`, in chain order.
pub fn audit_of(app: &TestApp, action: &str) -> Vec<(String, Value)> {
    assert!(
        action
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_'),
        "an action name: {action:?}"
    );
    let sql =
        format!("SELECT actor, payload FROM audit_events WHERE action = '{action}' ORDER BY seq");
    let parse = |p: &str| serde_json::from_str(p).unwrap_or_else(|e| panic!("JSON ({e}): {p}"));
    app.text_rows(&sql)
        .into_iter()
        .map(|row| (row[0].clone(), parse(&row[1])))
        .collect()
}

/// Asserts that the newest audit event of `action` is `actor`'s with `payload`.
pub fn assert_last_event(app: &TestApp, action: &str, actor: &str, payload: Value, ctx: &str) {
    let last = audit_of(app, action).pop();
    let want = Some((actor.to_owned(), payload));
    assert_eq!(last, want, "{ctx}: the {action} event");
}
