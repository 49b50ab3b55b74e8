//! Batches: `POST /v1/tenants/<id>/batch` (revision 4), many operations of one tenant in one
//! request. A batch leaves exactly what the same operations sent one by one leave (a seeded
//! property test: `BATCH_SEED` replays a run, `BATCH_ROUNDS` sets its length); an atomic batch
//! with a refusal leaves every row of the database as it was; the refusals of the whole request
//! and of each item; the `Idempotency-Key` over the whole batch; one rate-limit slot per batch;
//! one audit row per applied operation; and the order within a batch.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::wire::{self, Response};

/// A well-formed budget id that no test creates.
const UNKNOWN_BUDGET: &str = "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV";

/// A well-formed reservation id that no test creates.
const UNKNOWN_RESERVATION: &str = "res_01ARZ3NDEKTSV4RRFFQ69G5FAV";

/// The largest body of a batch, in bytes (the single calls keep [`BODY_BYTES_MAX`]).
const BATCH_BYTES_MAX: usize = 1_048_576;

/// The most operations one batch may hold.
const BATCH_OPERATIONS_MAX: usize = 1_000;

/// Rounds of the property test unless `BATCH_ROUNDS` says otherwise.
const ROUNDS_DEFAULT: u64 = 12;

/// The most operations of one round of the property test.
const ROUND_OPERATIONS_MAX: u64 = 40;

/// `/v1/tenants/<tid>/batch`.
fn batch_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/batch")
}

/// `/v1/tenants/<tid>/charges`.
fn charges_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/charges")
}

/// `/v1/tenants/<tid>/events`.
fn tenant_events_path(tid: &str) -> String {
    format!("/v1/tenants/{tid}/events")
}

/// A batch's body: `operations`, and `atomic` if given.
fn batch_body(atomic: Option<bool>, ops: &[Value]) -> Value {
    let mut body = json!({ "operations": ops });
    if let Some(atomic) = atomic {
        body["atomic"] = json!(atomic);
    }
    body
}

/// `POST …/batch` of a body text as `auth`, with an `Idempotency-Key` if given.
fn post_batch_text(
    app: &TestApp,
    auth: &str,
    tid: &str,
    text: &str,
    key: Option<&str>,
) -> Response {
    send(
        &app.addr,
        "POST",
        &batch_path(tid),
        auth,
        Some(text),
        key,
        &[],
    )
}

/// `POST …/batch` of a JSON body as `auth`, with an `Idempotency-Key` if given.
fn post_batch(app: &TestApp, auth: &str, tid: &str, body: &Value, key: Option<&str>) -> Response {
    post_batch_text(app, auth, tid, &body.to_string(), key)
}

/// Checks a `results` array: one item per operation, each exactly `status` and `body`, every
/// refusal a problem without `request_id`. Returns the items.
fn results_of(body: &Value, ops: usize, ctx: &str) -> Vec<Value> {
    let results = body["results"].as_array();
    let results = results.unwrap_or_else(|| panic!("{ctx}: results is an array: {body}"));
    assert_eq!(
        results.len(),
        ops,
        "{ctx}: one result per operation: {body}"
    );
    for (i, item) in results.iter().enumerate() {
        let ctx = format!("{ctx}: result {i}");
        assert_members(item, "status body", &ctx);
        let status = item["status"].as_u64();
        let status = status.unwrap_or_else(|| panic!("{ctx}: status is a number: {item}"));
        if status >= 400 && status != 424 {
            let code = str_of(&item["body"], "code").to_owned();
            item_problem(item, status, &code, &ctx);
        }
    }
    results.clone()
}

/// Asserts a `200` batch answer of JSON `{"results": [...]}` with one result per operation;
/// returns the results.
fn batch_results(resp: &Response, ops: usize, ctx: &str) -> Vec<Value> {
    assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
    let media = resp.header("content-type").unwrap_or_default();
    assert!(media.starts_with("application/json"), "{ctx}: {media:?}");
    let body = resp.json();
    assert_members(&body, "results", ctx);
    results_of(&body, ops, ctx)
}

/// Asserts `409 batch_failed` (a problem with `results`); returns the results.
fn batch_failed(resp: &Response, ops: usize, ctx: &str) -> Vec<Value> {
    let body = assert_problem(resp, 409, "batch_failed", ctx);
    results_of(&body, ops, ctx)
}

/// The result of an operation of a rolled-back atomic batch that did not fail itself.
fn not_applied() -> Value {
    json!({ "status": 424, "body": null })
}

/// Asserts that an item is a problem of `status` and `code` as the contract writes one, without
/// `request_id` (the batch's answer has one); returns its body.
fn item_problem(item: &Value, status: u64, code: &str, ctx: &str) -> Value {
    assert_eq!(item["status"], status, "{ctx}: the status of {item}");
    let body = &item["body"];
    let reason = reason_phrase(u16::try_from(status).expect("a status"));
    let expected = [
        ("type", json!("about:blank")),
        ("title", json!(reason)),
        ("status", json!(status)),
        ("code", json!(code)),
    ];
    assert_fields(body, &expected, ctx);
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(!detail.trim().is_empty(), "{ctx}: a detail: {item}");
    assert!(
        body.get("request_id").is_none(),
        "{ctx}: an item's problem has no request_id: {item}"
    );
    let listed = body["errors"].as_array().is_some_and(|e| !e.is_empty());
    assert_eq!(
        listed,
        code == "validation_failed",
        "{ctx}: errors with validation_failed only: {item}"
    );
    body.clone()
}

/// Asserts an item's `422 validation_failed` naming exactly `fields`.
fn item_invalid(item: &Value, fields: &[&str], ctx: &str) {
    let body = item_problem(item, 422, "validation_failed", ctx);
    let mut expected: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
    expected.sort();
    assert_eq!(
        error_fields(&body, ctx),
        expected,
        "{ctx}: the fields named"
    );
}

/// Asserts an item's success status; returns its body.
fn item_ok(item: &Value, status: u64, ctx: &str) -> Value {
    assert_eq!(item["status"], status, "{ctx}: {item}");
    item["body"].clone()
}

/// The single call an operation stands for: its path and its body (the operation without `op`,
/// and without the id its path carries).
fn single_call(tid: &str, op: &Value) -> (String, Value) {
    let mut body = op.as_object().cloned().expect("an operation is an object");
    let name = body.remove("op");
    let name = name
        .as_ref()
        .and_then(Value::as_str)
        .expect("op")
        .to_owned();
    let mut take = |member: &str| -> String {
        let id = body.remove(member);
        let id = id.as_ref().and_then(Value::as_str).map(str::to_owned);
        id.unwrap_or_else(|| panic!("{member} in {op}"))
    };
    let path = match name.as_str() {
        "charge" => charges_path(tid),
        "reserve" => reservations_path(tid),
        "commit" | "release" | "extend" => reservation_path(tid, &take("reservation_id"), &name),
        "credit" | "debit" => budget_path(tid, &take("budget_id"), &format!("{name}s")),
        other => panic!("not an operation: {other:?}"),
    };
    (path, Value::Object(body))
}

/// Sends an operation as its single call with `auth`; the answer as a batch would give it.
fn send_single(app: &TestApp, auth: &str, tid: &str, op: &Value, ctx: &str) -> (u64, Value) {
    let (path, body) = single_call(tid, op);
    let text = body.to_string();
    let resp = send(&app.addr, "POST", &path, auth, Some(&text), None, &[]);
    single_answer(&resp, &format!("{ctx}: POST {path} {text}"))
}

/// A single call's status and body, its problem's `request_id` (checked against the header)
/// taken out.
fn single_answer(resp: &Response, ctx: &str) -> (u64, Value) {
    let mut body = if resp.body.is_empty() {
        Value::Null
    } else {
        resp.json()
    };
    if resp.status >= 400 {
        let said = body.as_object_mut().and_then(|o| o.remove("request_id"));
        let said = said.as_ref().and_then(Value::as_str).map(str::to_owned);
        assert_eq!(
            said.as_deref(),
            resp.header("x-request-id"),
            "{ctx}: a problem's request_id: {}",
            resp.describe()
        );
    }
    (u64::from(resp.status), body)
}

/// An item's status and body.
fn item_answer(item: &Value) -> (u64, Value) {
    (
        item["status"].as_u64().expect("a status"),
        item["body"].clone(),
    )
}

/// `text` with each id of kind `prefix` (`prefix_` and a ULID) replaced by `<prefix>`.
fn mask_ids(text: &str, prefix: &str) -> String {
    let mark = format!("{prefix}_");
    let (mut out, mut rest) = (String::with_capacity(text.len()), text);
    while let Some(at) = rest.find(&mark) {
        out.push_str(&rest[..at]);
        let tail = &rest[at + mark.len()..];
        let ulid = tail.get(..ULID_CHARS).unwrap_or_default();
        if ulid.len() == ULID_CHARS && ulid.chars().all(|c| CROCKFORD.contains(c)) {
            out.push_str(&format!("<{prefix}>"));
            rest = &tail[ULID_CHARS..];
        } else {
            out.push_str(&mark);
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// What makes two tenants' answers comparable: each id (and the tenant's name) of one tenant
/// and the label it shares with its counterpart in the other.
#[derive(Default)]
struct Names(Vec<(String, String)>);

impl Names {
    /// Names `id` `label`.
    fn add(&mut self, id: &str, label: &str) {
        self.0.push((id.to_owned(), label.to_owned()));
    }

    /// A text with every named id replaced by its label and every entry, event and request id
    /// masked.
    fn text(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (id, label) in &self.0 {
            if text.contains(id.as_str()) {
                text = text.replace(id.as_str(), label);
            }
        }
        ["ent", "evt", "req", "per"]
            .iter()
            .fold(text, |t, prefix| mask_ids(&t, prefix))
    }

    /// A value with every string as [`Names::text`] has it and every timestamp (a member
    /// `…_at` holding a string) replaced by `<time>`.
    fn norm(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(items) => items.iter().map(|x| self.norm(x)).collect(),
            Value::Object(members) => members
                .iter()
                .map(|(k, x)| {
                    let x = if k.ends_with("_at") && x.is_string() {
                        json!("<time>")
                    } else {
                        self.norm(x)
                    };
                    (k.clone(), x)
                })
                .collect(),
            other => other.clone(),
        }
    }
}

/// An item of `items`, chosen by `rng`.
fn pick<'t, T>(rng: &mut Rng, items: &'t [T]) -> &'t T {
    &items[rng.range(0, items.len() as u64 - 1) as usize]
}

/// One round of the property test: the budgets of each tenant, the reservations made before,
/// the operations, and how they are sent.
struct Plan {
    /// The default budget's deposit.
    deposit: u64,
    /// Each further budget: its label, its create body without `parent_id`, its parent's label.
    budgets: Vec<(&'static str, Value, Option<&'static str>)>,
    /// The reservations made one by one before the operations: a budget's label and an amount.
    holds: Vec<(&'static str, u64)>,
    /// The operations, `budget_id` and `reservation_id` written `@b:<label>` and `@r:<hold>`.
    ops: Vec<Value>,
    /// Whether the batch is atomic.
    atomic: bool,
    /// Whether a batch that is not atomic says `"atomic": false` (else it leaves it out).
    says_false: bool,
    /// Whether the operations go with the tenant token (else the admin's).
    tenant_token: bool,
}

/// An amount for an operation: mostly small or middling, some large, now and then one no
/// budget holds (or, for a credit, one that carries it past `u128`).
fn random_amount(rng: &mut Rng) -> String {
    match rng.range(0, 19) {
        0 => U128_MAX.to_owned(),
        1..=8 => rng.range(1, 20).to_string(),
        9..=15 => rng.range(20, 200).to_string(),
        _ => rng.range(200, 1500).to_string(),
    }
}

/// A budget for an operation: one of the tenant's mostly, now and then an unknown or a
/// malformed id.
fn random_budget(rng: &mut Rng, labels: &[&str]) -> Value {
    match rng.range(0, 19) {
        0 => json!(UNKNOWN_BUDGET),
        1 => json!("bud_nope"),
        _ => json!(format!("@b:{}", pick(rng, labels))),
    }
}

/// A reservation for an operation: one made before mostly, now and then an unknown one.
fn random_reservation(rng: &mut Rng, holds: usize) -> Value {
    match rng.range(0, 14) {
        0 => json!(UNKNOWN_RESERVATION),
        1 => json!("res_nope"),
        _ => json!(format!("@r:{}", rng.range(0, holds as u64 - 1))),
    }
}

/// One random operation of any of the seven kinds; about one in ten has a bad field.
fn random_operation(rng: &mut Rng, labels: &[&str], holds: usize) -> Value {
    let mut op = match rng.range(0, 99) {
        0..=19 => json!({ "op": "charge", "budget_id": random_budget(rng, labels),
                          "amount_atomic": random_amount(rng) }),
        20..=34 => {
            let mut op = json!({ "op": "reserve", "budget_id": random_budget(rng, labels),
                                 "amount_atomic": random_amount(rng) });
            if rng.range(0, 2) > 0 {
                op["ttl_seconds"] = json!(rng.range(60, 3600));
            }
            op
        }
        35..=49 => {
            let amount = if rng.range(0, 9) < 7 {
                rng.range(0, 100).to_string()
            } else {
                random_amount(rng)
            };
            json!({ "op": "commit", "reservation_id": random_reservation(rng, holds),
                    "amount_atomic": amount })
        }
        50..=59 => json!({ "op": "release", "reservation_id": random_reservation(rng, holds) }),
        60..=69 => json!({ "op": "extend", "reservation_id": random_reservation(rng, holds),
                           "ttl_seconds": rng.range(60, TTL_S_MAX as u64) }),
        70..=84 => json!({ "op": "credit", "budget_id": random_budget(rng, labels),
                           "amount_atomic": random_amount(rng) }),
        _ => json!({ "op": "debit", "budget_id": random_budget(rng, labels),
                     "amount_atomic": random_amount(rng) }),
    };
    let takes_memo =
        ["charge", "reserve", "credit", "debit"].contains(&op["op"].as_str().unwrap_or_default());
    if takes_memo {
        match rng.range(0, 9) {
            0..=1 => op["memo"] = json!(format!("memo {}", rng.range(0, 999))),
            2 => op["memo"] = Value::Null,
            _ => {}
        }
    }
    if rng.range(0, 9) == 0 {
        let op = op.as_object_mut().expect("an object");
        match rng.range(0, 6) {
            0 => op.insert("amount_atomic".into(), json!("0")),
            1 => op.insert("amount_atomic".into(), json!("01")),
            2 => op.insert("amount_atomic".into(), json!(5)),
            3 => op.remove("amount_atomic"),
            4 => op.insert("x".into(), json!(1)),
            5 => op.insert("memo".into(), json!("m".repeat(MEMO_CHARS_MAX + 1))),
            _ => op.insert("ttl_seconds".into(), json!(0)),
        };
    }
    op
}

/// A round's plan: a flat budget and a tree of two or three levels (its top in a unit of its
/// own) beside the default budget, some with thresholds, 3 to 6 reservations, 1 to 40
/// operations.
fn random_plan(rng: &mut Rng, round: u64) -> Plan {
    let mut budgets = vec![
        (
            "flat",
            json!({ "name": "flat", "opening_deposit_atomic": rng.range(100, 800).to_string(),
                    "alert_thresholds_atomic": ["300", "50"] }),
            None,
        ),
        (
            "org",
            json!({ "name": "org", "unit": "tokens",
                    "opening_deposit_atomic": rng.range(500, 2500).to_string(),
                    "alert_thresholds_atomic": ["400", "0"] }),
            None,
        ),
        (
            "team",
            json!({ "name": "team", "opening_deposit_atomic": rng.range(200, 900).to_string() }),
            Some("org"),
        ),
    ];
    if rng.range(0, 1) == 1 {
        let key = json!({ "name": "key", "opening_deposit_atomic": rng.range(50, 400).to_string(),
                          "alert_thresholds_atomic": ["100"] });
        budgets.push(("key", key, Some("team")));
    }
    let mut labels = vec!["default"];
    labels.extend(budgets.iter().map(|(label, _, _)| *label));
    let holds: Vec<(&'static str, u64)> = (0..rng.range(3, 6))
        .map(|_| (*pick(rng, &labels), rng.range(5, 80)))
        .collect();
    let ops = (0..rng.range(1, ROUND_OPERATIONS_MAX))
        .map(|_| random_operation(rng, &labels, holds.len()))
        .collect();
    Plan {
        deposit: rng.range(300, 1500),
        budgets,
        holds,
        ops,
        atomic: round % 4 == 3,
        says_false: rng.range(0, 1) == 1,
        tenant_token: round % 3 == 2,
    }
}

/// One of the two tenants of a round: its scene (with the round's credential), its budgets by
/// label, the reservations made before the operations, and its names.
struct Side<'a> {
    s: Scene<'a>,
    budgets: Vec<(&'static str, String)>,
    held: Vec<Option<String>>,
    names: Names,
}

impl<'a> Side<'a> {
    /// A tenant with the plan's budgets, made as admin.
    fn new(app: &'a TestApp, plan: &Plan, which: &str, ctx: &str) -> Self {
        let name = unique(&format!("batch-prop-{which}"));
        let s = Scene::new(app, &name, &plan.deposit.to_string());
        let mut budgets = vec![("default", s.bid.clone())];
        for (label, body, parent) in &plan.budgets {
            let mut body = body.clone();
            if let Some(parent) = parent {
                let parent = budgets.iter().find(|(l, _)| l == parent).expect("a parent");
                body["parent_id"] = json!(parent.1);
            }
            let ctx = format!("{ctx}: budget {label} of {which}");
            let b = assert_created(&s.post_budget(&body), &budgets_path(&s.tid), &ctx);
            budgets.push((label, id_of(&b)));
        }
        let mut names = Names::default();
        names.add(&s.tid, "<tenant>");
        names.add(&name, "<tenant name>");
        for (label, id) in &budgets {
            names.add(id, &format!("<budget {label}>"));
        }
        let s = if plan.tenant_token { s } else { s.admin() };
        Self {
            s,
            budgets,
            held: Vec::new(),
            names,
        }
    }

    /// The id of the budget `label`.
    fn budget(&self, label: &str) -> &str {
        let found = self.budgets.iter().find(|(l, _)| *l == label);
        &found.unwrap_or_else(|| panic!("no budget {label}")).1
    }

    /// An operation of the plan with this tenant's ids.
    fn resolve(&self, op: &Value) -> Value {
        let mut op = op.clone();
        for member in ["budget_id", "reservation_id"] {
            let Some(text) = op.get(member).and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            let id = if let Some(label) = text.strip_prefix("@b:") {
                self.budget(label).to_owned()
            } else if let Some(i) = text.strip_prefix("@r:") {
                let i: usize = i.parse().expect("a hold's index");
                let held = self.held[i].clone();
                held.unwrap_or_else(|| UNKNOWN_RESERVATION.to_owned())
            } else {
                text
            };
            op[member] = json!(id);
        }
        op
    }

    /// Everything the operations may have changed, normalised: each budget and its entries
    /// (checked to replay to its figures), the tenant's reservations and events, and its audit
    /// rows (actor, action, payload).
    fn state(&self, ctx: &str) -> Vec<(String, Value)> {
        let (app, admin) = (self.s.app, self.s.app.admin());
        let mut parts = Vec::new();
        for (label, bid) in &self.budgets {
            let level = self.s.on(bid);
            let (budget, entries) = (level.budget(), level.entries());
            let ctx = format!("{ctx}: budget {label}");
            let figures = Figures::of(&budget, &ctx);
            assert_eq!(
                replay(&entries, &ctx),
                figures,
                "{ctx}: its entries replay to it"
            );
            parts.push((format!("budget {label}"), self.names.norm(&budget)));
            let entries = self.names.norm(&Value::Array(entries));
            parts.push((format!("the entries of budget {label}"), entries));
        }
        let tid = &self.s.tid;
        let reservations = list_all(app, &admin, &reservations_path(tid));
        let events = list_all(app, &admin, &tenant_events_path(tid));
        parts.push(("reservations".into(), self.names.norm(&json!(reservations))));
        parts.push(("events".into(), self.names.norm(&json!(events))));
        let sql = format!(
            "SELECT actor, action, payload FROM audit_events WHERE tenant_id = '{tid}' ORDER BY seq"
        );
        let audit: Vec<Value> = app
            .text_rows(&sql)
            .into_iter()
            .map(|row| {
                let payload: Value = serde_json::from_str(&row[2]).expect("a JSON payload");
                json!([row[0], row[1], self.names.norm(&payload)])
            })
            .collect();
        parts.push(("audit rows".into(), Value::Array(audit)));
        parts
    }
}

/// Makes the plan's reservations one by one on each side, as admin: both must answer alike.
fn make_holds<'a>(a: &mut Side<'a>, b: &mut Side<'a>, plan: &Plan, ctx: &str) {
    for (i, (label, amount)) in plan.holds.iter().enumerate() {
        let mut made = Vec::new();
        for side in [&mut *a, &mut *b] {
            let body = reserve_body(side.budget(label), &amount.to_string(), Some(600));
            let resp = side.s.admin().post(&reservations_path(&side.s.tid), &body);
            let made_it = resp.status == 201;
            made.push(resp.status);
            let id = made_it.then(|| id_of(&resp.json()));
            if let Some(id) = &id {
                side.names.add(id, &format!("<hold {i}>"));
            }
            side.held.push(id);
        }
        assert_eq!(made[0], made[1], "{ctx}: hold {i} answers alike on both");
    }
}

/// Compares a batch's results (for the operations `which` of the plan, in order) with the
/// single calls' answers: the same status and body, ids of each tenant by their labels. A
/// reservation an operation made gets a label of its own on both sides.
fn compare_answers(
    a: &mut Side<'_>,
    b: &mut Side<'_>,
    singles: &[(u64, Value)],
    which: &[usize],
    results: &[Value],
    ops: &[Value],
    ctx: &str,
) {
    for (j, &i) in which.iter().enumerate() {
        let (status, single) = &singles[i];
        let (item_status, item) = item_answer(&results[j]);
        let ctx = format!("{ctx}: operation {i} {}", ops[i]);
        assert_eq!(item_status, *status, "{ctx}: the status: {item} / {single}");
        if ops[i]["op"] == "reserve" && *status == 201 {
            a.names
                .add(str_of(single, "id"), &format!("<reservation of {i}>"));
            b.names
                .add(str_of(&item, "id"), &format!("<reservation of {i}>"));
        }
        assert_eq!(b.names.norm(&item), a.names.norm(single), "{ctx}: the body");
    }
}

/// Asserts that two sides' states are equal, part by part.
fn assert_same_state(a: &[(String, Value)], b: &[(String, Value)], ctx: &str) {
    assert_eq!(a.len(), b.len(), "{ctx}: the parts");
    for ((part, a), (_, b)) in a.iter().zip(b) {
        assert_eq!(a, b, "{ctx}: {part} (one by one, then the batch)");
    }
}

/// The property: for random operations over all seven kinds on a flat budget and a tree, some
/// refused (short funds, a reservation no longer active, an unknown id, a bad field, a tenant
/// token's credit), tenant A gets them one by one and tenant B, laid out alike, as one batch.
/// Each result equals the single answer, and the two tenants' budgets, entries, reservations,
/// events and audit rows are equal but for ids and times. Every fourth round is atomic: with a
/// refusal the batch is `409 batch_failed` and B is left as it was, then the operations A
/// applied go again as an atomic batch, which must apply them all as A did.
#[test]
fn a_batch_leaves_what_its_operations_sent_one_by_one_leave() {
    let seed = env_number("BATCH_SEED", now_ms().unsigned_abs());
    let rounds = env_number("BATCH_ROUNDS", ROUNDS_DEFAULT);
    println!("batch property: {rounds} rounds, seed {seed} (replay with BATCH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let app = spawn_app();
    for round in 0..rounds {
        let plan = random_plan(&mut rng, round);
        let ctx = format!(
            "seed {seed} round {round} (atomic {}, tenant token {})",
            plan.atomic, plan.tenant_token
        );
        let mut a = Side::new(&app, &plan, "a", &ctx);
        let mut b = Side::new(&app, &plan, "b", &ctx);
        make_holds(&mut a, &mut b, &plan, &ctx);

        let singles: Vec<(u64, Value)> = plan
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let ctx = format!("{ctx}: single {i}");
                send_single(&app, &a.s.auth, &a.s.tid, &a.resolve(op), &ctx)
            })
            .collect();
        let ops: Vec<Value> = plan.ops.iter().map(|op| b.resolve(op)).collect();
        let all: Vec<usize> = (0..ops.len()).collect();
        let (auth, tid) = (b.s.auth.clone(), b.s.tid.clone());
        if !plan.atomic {
            let atomic = plan.says_false.then_some(false);
            let resp = post_batch(&app, &auth, &tid, &batch_body(atomic, &ops), None);
            let results = batch_results(&resp, ops.len(), &ctx);
            compare_answers(&mut a, &mut b, &singles, &all, &results, &plan.ops, &ctx);
        } else if singles.iter().all(|(status, _)| *status < 400) {
            let resp = post_batch(&app, &auth, &tid, &batch_body(Some(true), &ops), None);
            let results = batch_results(&resp, ops.len(), &ctx);
            compare_answers(&mut a, &mut b, &singles, &all, &results, &plan.ops, &ctx);
        } else {
            let before = b.state(&ctx);
            let resp = post_batch(&app, &auth, &tid, &batch_body(Some(true), &ops), None);
            let results = batch_failed(&resp, ops.len(), &ctx);
            let (refused, applied): (Vec<usize>, Vec<usize>) =
                all.iter().copied().partition(|&i| singles[i].0 >= 400);
            for &i in &applied {
                let ctx = format!("{ctx}: operation {i} {}", plan.ops[i]);
                assert_eq!(results[i], not_applied(), "{ctx}: not applied");
            }
            let refusals: Vec<Value> = refused.iter().map(|&i| results[i].clone()).collect();
            compare_answers(
                &mut a, &mut b, &singles, &refused, &refusals, &plan.ops, &ctx,
            );
            let ctx_rolled = format!("{ctx}: B after the atomic batch that failed");
            assert_same_state(&before, &b.state(&ctx_rolled), &ctx_rolled);
            if !applied.is_empty() {
                let kept: Vec<Value> = applied.iter().map(|&i| ops[i].clone()).collect();
                let resp = post_batch(&app, &auth, &tid, &batch_body(Some(true), &kept), None);
                let ctx = format!("{ctx}: the applied ones, atomic");
                let results = batch_results(&resp, kept.len(), &ctx);
                compare_answers(
                    &mut a, &mut b, &singles, &applied, &results, &plan.ops, &ctx,
                );
            }
        }
        assert_same_state(&a.state(&ctx), &b.state(&ctx), &ctx);
        let mut seen: Vec<(u64, usize)> = Vec::new();
        for (status, _) in &singles {
            match seen.iter_mut().find(|(s, _)| s == status) {
                Some((_, n)) => *n += 1,
                None => seen.push((*status, 1)),
            }
        }
        seen.sort_unstable();
        println!(
            "{ctx}: {} operations, (status, count) {seen:?}",
            singles.len()
        );
    }
    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(0),
        "seed {seed}: audit verify: {verify:?}"
    );
}

/// A column that moves with any write attempt, refused ones included: on PostgreSQL each
/// tenant's `last_id` is the writer's last id when it last took the tenant's lock (a refused
/// single charge stores it too), a lower bound for the ids made after it, not a record of a
/// change. Left out of [`dump`].
const WATERMARK: (&str, &str) = ("tenants", "last_id");

/// Every row of every table of the server's database (SQLite: from `sqlite_master`, every
/// column; PostgreSQL: the base tables of schema `public`, every column but [`WATERMARK`]),
/// each table's rows sorted.
fn dump(app: &TestApp) -> Vec<(String, Vec<Vec<Option<String>>>)> {
    // Each table and the columns selected of it.
    let tables: Vec<(String, String)> = match app.backend() {
        Backend::Sqlite => app
            .text_rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .into_iter()
            .map(|r| (r[0].clone(), "*".to_owned()))
            .collect(),
        Backend::Postgres => {
            let sql = "SELECT c.table_name, c.column_name FROM information_schema.columns c \
                 JOIN information_schema.tables t \
                   ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
                 WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' \
                 ORDER BY c.table_name, c.ordinal_position";
            let mut tables: Vec<(String, String)> = Vec::new();
            for row in app.text_rows(sql) {
                let (table, column) = (&row[0], &row[1]);
                if (table.as_str(), column.as_str()) == WATERMARK {
                    continue;
                }
                let quoted = format!("\"{column}\"");
                match tables.last_mut() {
                    Some((t, columns)) if t == table => *columns = format!("{columns}, {quoted}"),
                    _ => tables.push((table.clone(), quoted)),
                }
            }
            tables
        }
    };
    for table in [
        "audit_events",
        "tenants",
        "budgets",
        "events",
        "reservations",
    ] {
        let listed = tables.iter().any(|(t, _)| t == table);
        assert!(listed, "{table} among {tables:?}");
    }
    tables
        .into_iter()
        .map(|(table, columns)| {
            let mut rows = app.rows(&format!("SELECT {columns} FROM \"{table}\""));
            rows.sort();
            (table, rows)
        })
        .collect()
}

/// The newest audit row's hash: the chain's head.
fn head(app: &TestApp) -> String {
    let rows = app.audit_rows();
    assert_chain_valid(&rows, "the chain");
    rows.last().map(|r| r.hash.clone()).unwrap_or_default()
}

/// Asserts that two dumps hold the same tables with the same rows, table by table.
fn assert_same_rows(
    before: &[(String, Vec<Vec<Option<String>>>)],
    after: &[(String, Vec<Vec<Option<String>>>)],
    ctx: &str,
) {
    let names = |d: &[(String, Vec<Vec<Option<String>>>)]| -> Vec<String> {
        d.iter().map(|(t, _)| t.clone()).collect()
    };
    assert_eq!(names(before), names(after), "{ctx}: the tables");
    for ((table, was), (_, is)) in before.iter().zip(after) {
        assert_eq!(was, is, "{ctx}: every row of {table} as it was");
    }
}

/// Creates a budget of the scene's tenant as admin from `body`, under `parent` if given;
/// the scene on it.
fn budget_under<'a>(s: &Scene<'a>, mut body: Value, parent: Option<&Scene<'_>>) -> Scene<'a> {
    if let Some(parent) = parent {
        body["parent_id"] = json!(parent.bid);
    }
    let ctx = format!("a budget of {body}");
    let b = assert_created(&s.post_budget(&body), &budgets_path(&s.tid), &ctx);
    s.on(str_of(&b, "id"))
}

/// Asserts `audit verify` passes and reports the chain's head.
fn assert_verifies(app: &TestApp, ctx: &str) {
    let head = head(app);
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "{ctx}: audit verify: {verify:?}");
    let count = app.audit_count();
    let said = format!("ok: {count} events, head {head}");
    assert_eq!(verify.stdout.trim(), said, "{ctx}: audit verify's report");
}

/// An atomic batch of seven kinds of operation, all applicable but one near the end, is `409
/// batch_failed`: every row of every table stays as it was (no audit row, entry, event,
/// reservation or key), the chain's head with it; the refused operation's problem counts the
/// operations before it (the level that is short, and its available amount after them), the
/// others say `424`. The same key then binds nothing: the corrected batch applies once, its
/// retry replays, and the failed body is then a mismatch.
#[test]
fn an_atomic_batch_with_one_refusal_changes_no_row_and_binds_no_key() {
    let app = spawn_app();
    let root = Scene::new(&app, "atomic-rollback", "1000").admin();
    let org = json!({ "name": "org", "opening_deposit_atomic": "1000",
                      "alert_thresholds_atomic": ["500"] });
    let org = budget_under(&root, org, None);
    let team = budget_under(
        &root,
        json!({ "name": "team", "opening_deposit_atomic": "400" }),
        Some(&org),
    );
    let flat = json!({ "name": "flat", "opening_deposit_atomic": "300",
                       "alert_thresholds_atomic": ["100"] });
    let flat = budget_under(&root, flat, None);
    let r1 = team.hold_id("50");
    let r2 = flat.hold_id("40");
    let r3 = flat.hold_id("30");
    // team: 400 held 50 → 350 available; org 1000 − 50 → 950; flat 300 − 70 → 230.
    let ops = |last_charge: &str| {
        vec![
            json!({ "op": "credit", "budget_id": flat.bid, "amount_atomic": "100", "memo": "top-up" }),
            json!({ "op": "charge", "budget_id": team.bid, "amount_atomic": "100" }),
            json!({ "op": "commit", "reservation_id": r1, "amount_atomic": "80" }),
            json!({ "op": "release", "reservation_id": r2 }),
            json!({ "op": "extend", "reservation_id": r3, "ttl_seconds": 900 }),
            json!({ "op": "debit", "budget_id": flat.bid, "amount_atomic": "20" }),
            json!({ "op": "reserve", "budget_id": org.bid, "amount_atomic": "700", "ttl_seconds": 600 }),
            // After those, team has 220 available and org 120: 200 fits the team, not the org.
            json!({ "op": "charge", "budget_id": team.bid, "amount_atomic": last_charge }),
            json!({ "op": "charge", "budget_id": flat.bid, "amount_atomic": "1" }),
        ]
    };
    let failing = batch_body(Some(true), &ops("200"));
    let key = "atomic-rollback-key";
    let rows = dump(&app);
    let (chain, events) = (
        head(&app),
        list_all(&app, &app.admin(), &tenant_events_path(&root.tid)),
    );

    for attempt in ["first", "again with the same key"] {
        let ctx = format!("the failing atomic batch, {attempt}");
        let resp = post_batch(&app, &root.auth, &root.tid, &failing, Some(key));
        let results = batch_failed(&resp, 9, &ctx);
        for (i, item) in results.iter().enumerate() {
            if i == 7 {
                let body = item_problem(item, 409, "insufficient_funds", &ctx);
                assert_eq!(
                    body["budget_id"],
                    json!(org.bid),
                    "{ctx}: the level short: {body}"
                );
                assert_eq!(
                    body["available_atomic"], "120",
                    "{ctx}: after the operations before it"
                );
            } else {
                assert_eq!(item, &not_applied(), "{ctx}: operation {i}");
            }
        }
        assert_eq!(resp.header("idempotent-replayed"), None, "{ctx}: no replay");
        assert_same_rows(&rows, &dump(&app), &ctx);
        assert_eq!(head(&app), chain, "{ctx}: the chain's head");
        let now = list_all(&app, &app.admin(), &tenant_events_path(&root.tid));
        assert_eq!(now, events, "{ctx}: no event");
    }
    flat.expect([300, 0, 0, 70], "flat, untouched");
    team.expect([400, 0, 0, 50], "team, untouched");
    org.expect([1000, 0, 0, 50], "org, untouched");
    assert_eq!(root.state(&r1), "active", "r1 untouched");
    assert_eq!(root.state(&r2), "active", "r2 untouched");

    let corrected = batch_body(Some(true), &ops("100"));
    let audit = app.audit_count();
    let first = post_batch(&app, &root.auth, &root.tid, &corrected, Some(key));
    let results = batch_results(&first, 9, "the corrected batch");
    let expected = [201, 201, 200, 200, 200, 201, 201, 201, 201];
    for (i, (item, status)) in results.iter().zip(expected).enumerate() {
        item_ok(item, status, &format!("the corrected batch: operation {i}"));
    }
    assert_eq!(
        first.header("idempotent-replayed"),
        None,
        "a fresh answer, not a replay"
    );
    assert_eq!(app.audit_count(), audit + 9, "one audit row per operation");
    let after = [
        (&flat, [400, 20, 1, 30]),
        (&team, [400, 0, 280, 0]),
        (&org, [1000, 0, 280, 700]),
    ];
    for (level, figures) in after {
        level.expect(figures, &format!("budget {}", level.bid));
    }
    let new_events = list_all(&app, &app.admin(), &tenant_events_path(&root.tid));
    let types: Vec<&str> = new_events[events.len()..]
        .iter()
        .map(|e| str_of(e, "type"))
        .collect();
    assert_eq!(
        types,
        ["budget.credited", "budget.debited", "budget.available_low"],
        "the events of the applied batch, in order"
    );

    let replay = post_batch(&app, &root.auth, &root.tid, &corrected, Some(key));
    assert_eq!(replay.status, 200, "the retry: {}", replay.describe());
    assert_eq!(
        replay.header("idempotent-replayed"),
        Some("true"),
        "the retry is a replay"
    );
    assert_eq!(
        replay.body, first.body,
        "the replay is the first answer, byte for byte"
    );
    assert_eq!(app.audit_count(), audit + 9, "the replay applied nothing");
    for (level, figures) in after {
        level.expect(figures, &format!("budget {} after the replay", level.bid));
    }
    let resp = post_batch(&app, &root.auth, &root.tid, &failing, Some(key));
    assert_problem(
        &resp,
        422,
        "idempotency_key_mismatch",
        "the failed body, once the key is bound",
    );
    assert_verifies(&app, "after the batches");
}

/// The whole request's refusals, each for the whole batch with nothing applied: `400` for a
/// body that is not a JSON object, `422` naming `operations` (missing, not an array, empty, over
/// 1,000), `atomic` (not a boolean, `null` included) and any unknown member, `404` for an unknown
/// tenant (after the body's `422`), `403` for a tenant token on another tenant's path, `401`,
/// `405` and `415`.
#[test]
fn the_whole_request_is_refused_for_its_body_its_tenant_or_its_credential() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-whole", "100000");
    let other = Scene::new(&app, "batch-whole-other", "100");
    let op = json!({ "op": "charge", "budget_id": s.bid, "amount_atomic": "1" });
    let ok_ops = json!([op]);
    let too_many = Value::Array(vec![op.clone(); BATCH_OPERATIONS_MAX + 1]);
    let (audit, figures, entries) = (app.audit_count(), s.figures(), s.entries().len());
    let admin = app.admin();

    for text in [
        "[]",
        "[1]",
        "\"x\"",
        "5",
        "null",
        "true",
        "{",
        "",
        "{\"operations\":[1]",
    ] {
        let resp = post_batch_text(&app, &admin, &s.tid, text, None);
        assert_problem(&resp, 400, "malformed_json", &format!("body {text:?}"));
    }
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["operations"]),
        (json!({ "atomic": true }), vec!["operations"]),
        (json!({ "operations": {} }), vec!["operations"]),
        (json!({ "operations": op }), vec!["operations"]),
        (json!({ "operations": "charge" }), vec!["operations"]),
        (json!({ "operations": null }), vec!["operations"]),
        (json!({ "operations": [] }), vec!["operations"]),
        (json!({ "operations": too_many }), vec!["operations"]),
        (
            json!({ "operations": ok_ops, "atomic": "true" }),
            vec!["atomic"],
        ),
        (
            json!({ "operations": ok_ops, "atomic": null }),
            vec!["atomic"],
        ),
        (json!({ "operations": ok_ops, "atomic": 1 }), vec!["atomic"]),
        (
            json!({ "operations": ok_ops, "atomic": [true] }),
            vec!["atomic"],
        ),
        (json!({ "operations": ok_ops, "extra": 1 }), vec!["extra"]),
        (
            json!({ "operations": ok_ops, "Atomic": true }),
            vec!["Atomic"],
        ),
        (json!({ "operations": ok_ops, "op": "charge" }), vec!["op"]),
        (
            json!({ "atomic": 0, "x": 1 }),
            vec!["atomic", "operations", "x"],
        ),
        (
            json!({ "operations": [], "atomic": null }),
            vec!["atomic", "operations"],
        ),
    ];
    for (body, fields) in &cases {
        let ctx = format!(
            "body {}",
            body.to_string().chars().take(200).collect::<String>()
        );
        let resp = post_batch(&app, &admin, &s.tid, body, None);
        assert_invalid(&resp, fields, &ctx);
        let resp = post_batch(&app, &s.token, &s.tid, body, None);
        assert_invalid(&resp, fields, &format!("{ctx} with the tenant token"));
    }
    // Duplicate members, which a JSON value cannot hold: the text as sent.
    let dup = format!(r#"{{"operations":{ok_ops},"operations":{ok_ops}}}"#);
    let resp = post_batch_text(&app, &admin, &s.tid, &dup, None);
    assert_eq!(resp.status, 422, "operations twice: {}", resp.describe());

    // An unknown tenant, well-formed or not: 404 for the whole request, after the body's 422.
    for tid in [UNKNOWN_TENANT, "ten_nope"] {
        let resp = post_batch(
            &app,
            &admin,
            tid,
            &batch_body(None, std::slice::from_ref(&op)),
            None,
        );
        assert_problem(&resp, 404, "tenant_not_found", &format!("tenant {tid}"));
        let resp = post_batch(&app, &admin, tid, &json!({ "operations": [] }), None);
        assert_invalid(&resp, &["operations"], &format!("tenant {tid}, a bad body"));
        let refused_items = batch_body(Some(true), &[json!({ "op": "zap" })]);
        let resp = post_batch(&app, &admin, tid, &refused_items, None);
        assert_problem(
            &resp,
            404,
            "tenant_not_found",
            &format!("tenant {tid}, a bad item"),
        );
    }
    // Another tenant's token: 403 whether or not the tenant exists, before the body is looked at.
    for tid in [other.tid.as_str(), UNKNOWN_TENANT] {
        for body in [batch_body(None, std::slice::from_ref(&op)), json!({})] {
            let resp = post_batch(&app, &s.token, tid, &body, None);
            assert_problem(
                &resp,
                403,
                "forbidden",
                &format!("{tid} with another's token"),
            );
        }
    }
    let path = batch_path(&s.tid);
    let text = batch_body(None, std::slice::from_ref(&op)).to_string();
    let resp = app.request(
        "POST",
        &path,
        &[("Content-Type", "application/json")],
        Some(text.as_bytes()),
    );
    assert_problem(&resp, 401, "unauthorized", "no credential");
    let headers = [
        ("Authorization", admin.as_str()),
        ("Content-Type", "text/plain"),
    ];
    let resp = app.request("POST", &path, &headers, Some(text.as_bytes()));
    assert_problem(&resp, 415, "unsupported_media_type", "text/plain");
    let resp = get_as(&app, &admin, &path);
    assert_problem(&resp, 405, "method_not_allowed", "GET …/batch");
    assert_eq!(allow_set(&resp), ["POST"], "Allow: {}", resp.describe());
    let resp = send(
        &app.addr,
        "POST",
        &path,
        &admin,
        Some(&text),
        Some("has space"),
        &[],
    );
    assert_problem(&resp, 400, "invalid_header", "a malformed Idempotency-Key");

    assert_eq!(app.audit_count(), audit, "no refused request is audited");
    assert_eq!(s.figures(), figures, "no refused request moved the budget");
    assert_eq!(
        s.entries().len(),
        entries,
        "no refused request wrote an entry"
    );
    let resp = post_batch(&app, &admin, &s.tid, &batch_body(None, &[op]), None);
    batch_results(&resp, 1, "a good batch after them");
}

/// A batch's body may be 1 MiB where a single call's is 64 KiB: 1,048,577 bytes are `413`
/// (with a length or chunked), and nothing is applied; 1,000 charges with memos of 200
/// four-byte characters, about 900 KiB, padded to exactly 1 MiB, are all applied.
#[test]
fn a_batch_body_may_be_one_mebibyte_and_not_a_byte_more() {
    let app = spawn_app();
    let s = Scene::new(&app, "big-batch", "1000000").admin();
    let memo = "💸".repeat(MEMO_CHARS_MAX);
    let ops: Vec<Value> = (0..BATCH_OPERATIONS_MAX)
        .map(|i| {
            json!({ "op": "charge", "budget_id": s.bid, "amount_atomic": (i % 7 + 1).to_string(),
                         "memo": memo })
        })
        .collect();
    let spent: u128 = (0..BATCH_OPERATIONS_MAX).map(|i| (i % 7 + 1) as u128).sum();
    let text = batch_body(None, &ops).to_string();
    assert!(
        (850 * 1024..BATCH_BYTES_MAX).contains(&text.len()),
        "about 900 KiB of operations: {} bytes",
        text.len()
    );
    let padded = |len: usize| {
        let mut body = text.clone().into_bytes();
        body.resize(len, b' ');
        body
    };
    let (audit, entries) = (app.audit_count(), s.entries().len());
    let auth = app.admin();
    let json_headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let over = padded(BATCH_BYTES_MAX + 1);
    let resp = app.request("POST", &batch_path(&s.tid), &json_headers, Some(&over));
    assert_problem(&resp, 413, "payload_too_large", "1,048,577 bytes");
    let chunked_headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Transfer-Encoding", "chunked"),
    ];
    let resp = app.request(
        "POST",
        &batch_path(&s.tid),
        &chunked_headers,
        Some(&wire::chunked(&over, 64 * 1024)),
    );
    assert_problem(&resp, 413, "payload_too_large", "1,048,577 bytes, chunked");
    assert_eq!(app.audit_count(), audit, "nothing applied");
    s.expect([1_000_000, 0, 0, 0], "nothing applied");

    // A single call keeps its 64 KiB; a batch of that size passes.
    let single = padded_json(
        &json!({ "budget_id": s.bid, "amount_atomic": "1" }),
        BODY_BYTES_MAX + 1,
    );
    let resp = app.request("POST", &charges_path(&s.tid), &json_headers, Some(&single));
    assert_problem(
        &resp,
        413,
        "payload_too_large",
        "a single charge of 65,537 bytes",
    );
    let small = padded_json(&batch_body(None, &ops[..1]), BODY_BYTES_MAX + 1);
    let resp = app.request("POST", &batch_path(&s.tid), &json_headers, Some(&small));
    batch_results(&resp, 1, "a batch of 65,537 bytes");

    let exact = padded(BATCH_BYTES_MAX);
    let resp = app.request("POST", &batch_path(&s.tid), &json_headers, Some(&exact));
    let results = batch_results(&resp, BATCH_OPERATIONS_MAX, "1,048,576 bytes");
    for (i, item) in results.iter().enumerate() {
        let entry = item_ok(item, 201, &format!("charge {i}"));
        assert_eq!(entry["memo"], json!(memo), "charge {i}: its memo");
        assert_eq!(
            entry["amount_atomic"],
            json!((i % 7 + 1).to_string()),
            "charge {i}"
        );
    }
    s.expect([1_000_000, 0, spent + 1, 0], "every charge applied");
    assert_eq!(
        s.entries().len(),
        entries + BATCH_OPERATIONS_MAX + 1,
        "an entry per charge"
    );
    let audited = app.audit_count() - audit;
    assert_eq!(
        audited,
        BATCH_OPERATIONS_MAX as i64 + 1,
        "an audit row per charge"
    );
}

/// A JSON body padded with spaces to `len` bytes.
fn padded_json(body: &Value, len: usize) -> Vec<u8> {
    let mut bytes = body.to_string().into_bytes();
    assert!(bytes.len() <= len, "the body is larger than {len}");
    bytes.resize(len, b' ');
    bytes
}

/// Each item's own refusals, beside items that succeed: `422` naming `op` for an item that is
/// not an object or names no known `op` (also `op` twice); `422` naming the path's id
/// (`reservation_id`, `budget_id`) when it is missing; every other refusal exactly the single
/// call's answer, fields named as it names them (never `operations.N.…`).
#[test]
fn each_item_is_refused_as_its_single_call_and_the_others_apply() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-items", "1000").admin();
    let r = s.hold_id("10");
    let good = json!({ "op": "charge", "budget_id": s.bid, "amount_atomic": "1" });
    let with = |extra: Value| {
        let mut op = good.clone();
        for (k, v) in extra.as_object().expect("an object") {
            op[k] = v.clone();
        }
        op
    };
    let shaped: Vec<(Value, Vec<&str>)> = vec![
        (json!(5), vec!["op"]),
        (json!("charge"), vec!["op"]),
        (json!([good]), vec!["op"]),
        (json!(null), vec!["op"]),
        (json!(true), vec!["op"]),
        (json!({}), vec!["op"]),
        (
            json!({ "budget_id": s.bid, "amount_atomic": "1" }),
            vec!["op"],
        ),
        (with(json!({ "op": "zap" })), vec!["op"]),
        (with(json!({ "op": "Charge" })), vec!["op"]),
        (with(json!({ "op": 1 })), vec!["op"]),
        (with(json!({ "op": null })), vec!["op"]),
        (with(json!({ "op": ["charge"] })), vec!["op"]),
        (
            json!({ "op": "commit", "amount_atomic": "1" }),
            vec!["reservation_id"],
        ),
        (
            json!({ "op": "commit" }),
            vec!["amount_atomic", "reservation_id"],
        ),
        (
            json!({ "op": "commit", "reservation_id": 7, "amount_atomic": "1" }),
            vec!["reservation_id"],
        ),
        (json!({ "op": "release" }), vec!["reservation_id"]),
        (
            json!({ "op": "release", "reservation_id": null }),
            vec!["reservation_id"],
        ),
        (
            json!({ "op": "extend", "ttl_seconds": 60 }),
            vec!["reservation_id"],
        ),
        (
            json!({ "op": "credit", "amount_atomic": "1" }),
            vec!["budget_id"],
        ),
        (
            json!({ "op": "debit", "budget_id": [], "amount_atomic": "0" }),
            vec!["amount_atomic", "budget_id"],
        ),
    ];
    let mut ops = vec![good.clone()];
    ops.extend(shaped.iter().map(|(op, _)| op.clone()));
    ops.push(good.clone());
    let resp = post_batch(&app, &s.auth, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "ill-shaped items");
    item_ok(&results[0], 201, "the first good charge");
    item_ok(&results[ops.len() - 1], 201, "the last good charge");
    for ((op, fields), item) in shaped.iter().zip(&results[1..]) {
        item_invalid(item, fields, &format!("item {op}"));
    }
    s.expect([1000, 0, 2, 10], "the two good charges only");
    // `op` twice, in the text as sent.
    let text = format!(
        r#"{{"operations":[{{"op":"charge","op":"charge","budget_id":"{}","amount_atomic":"1"}},{good}]}}"#,
        s.bid
    );
    let resp = post_batch_text(&app, &s.auth, &s.tid, &text, None);
    let results = batch_results(&resp, 2, "op twice");
    item_invalid(&results[0], &["op"], "op twice");
    item_ok(&results[1], 201, "the good charge after it");
    s.expect([1000, 0, 3, 10], "the good charges only");

    // Refusals the single calls make, each item exactly the single answer.
    let bid = s.bid.as_str();
    let single_cases: Vec<Value> = vec![
        with(json!({ "amount_atomic": "0" })),
        with(json!({ "amount_atomic": "01" })),
        with(json!({ "amount_atomic": 5 })),
        with(json!({ "amount_atomic": null })),
        with(json!({ "amount_atomic": "340282366920938463463374607431768211456" })),
        with(json!({ "memo": "m".repeat(MEMO_CHARS_MAX + 1) })),
        with(json!({ "memo": "a\tb" })),
        with(json!({ "memo": " lead" })),
        with(json!({ "budget_id": null })),
        with(json!({ "budget_id": 7 })),
        with(json!({ "x": 1, "amount_atomic": "-1", "ttl_seconds": 60 })),
        with(json!({ "operations": [] })),
        json!({ "op": "charge", "amount_atomic": "1" }),
        with(json!({ "budget_id": UNKNOWN_BUDGET })),
        with(json!({ "budget_id": "bud_nope" })),
        with(json!({ "budget_id": bid.to_ascii_lowercase() })),
        with(json!({ "amount_atomic": "5000" })),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "1", "ttl_seconds": 0 }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "1", "ttl_seconds": 86401 }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "1", "ttl_seconds": "60" }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "1", "ttl_seconds": 1.5 }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "0", "ttl": 60 }),
        json!({ "op": "reserve", "amount_atomic": "1" }),
        json!({ "op": "reserve", "budget_id": UNKNOWN_BUDGET, "amount_atomic": "1" }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "5000" }),
        json!({ "op": "commit", "reservation_id": r, "amount_atomic": "-1" }),
        json!({ "op": "commit", "reservation_id": r }),
        json!({ "op": "commit", "reservation_id": r, "amount_atomic": "1", "memo": "no" }),
        json!({ "op": "commit", "reservation_id": r, "amount_atomic": "5000" }),
        json!({ "op": "commit", "reservation_id": UNKNOWN_RESERVATION, "amount_atomic": "1" }),
        json!({ "op": "commit", "reservation_id": "res_nope", "amount_atomic": "1" }),
        json!({ "op": "release", "reservation_id": r, "x": 1 }),
        json!({ "op": "release", "reservation_id": UNKNOWN_RESERVATION }),
        json!({ "op": "extend", "reservation_id": r }),
        json!({ "op": "extend", "reservation_id": r, "ttl_seconds": 0 }),
        json!({ "op": "extend", "reservation_id": r, "ttl_seconds": 86401 }),
        json!({ "op": "extend", "reservation_id": UNKNOWN_RESERVATION, "ttl_seconds": 60 }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "0" }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "1", "x": null }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": U128_MAX }),
        json!({ "op": "credit", "budget_id": UNKNOWN_BUDGET, "amount_atomic": "1" }),
        json!({ "op": "debit", "budget_id": bid, "amount_atomic": "1.5" }),
        json!({ "op": "debit", "budget_id": bid, "amount_atomic": "5000" }),
    ];
    let singles: Vec<(u64, Value)> = single_cases
        .iter()
        .map(|op| send_single(&app, &s.auth, &s.tid, op, &format!("single {op}")))
        .collect();
    let resp = post_batch(
        &app,
        &s.auth,
        &s.tid,
        &batch_body(None, &single_cases),
        None,
    );
    let results = batch_results(&resp, single_cases.len(), "items the single calls refuse");
    for ((op, (status, single)), item) in single_cases.iter().zip(&singles).zip(&results) {
        let ctx = format!("item {op}");
        assert!(
            *status >= 400,
            "{ctx}: the single call refuses it: {single}"
        );
        assert_eq!(
            item_answer(item),
            (*status, single.clone()),
            "{ctx}: the single answer"
        );
        if let Some(errors) = item["body"]["errors"].as_array() {
            for e in errors {
                let field = str_of(e, "field");
                assert!(
                    !field.starts_with("operations."),
                    "{ctx}: the single call's name: {field}"
                );
            }
        }
    }
    s.expect([1000, 0, 3, 10], "nothing more applied");
    assert_eq!(s.state(&r), "active", "the hold untouched");
}

/// A tenant token may batch what it may do alone: its charges and reservations apply, each of
/// its credits and debits is that item's `403` (before the item's own `422`); the admin's credit
/// and debit in the same batch apply.
#[test]
fn a_tenant_tokens_credit_or_debit_is_its_own_403_and_the_admins_passes() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-forbidden", "1000");
    let bid = s.bid.as_str();
    let ops = vec![
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "5" }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "10" }),
        json!({ "op": "debit", "budget_id": bid, "amount_atomic": "1" }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "7" }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "0" }),
        json!({ "op": "debit", "amount_atomic": "1" }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "3" }),
    ];
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "the tenant token's batch");
    for (i, status) in [(0, 201), (3, 201), (6, 201)] {
        item_ok(&results[i], status, &format!("the tenant's operation {i}"));
    }
    for i in [1, 2, 4, 5] {
        let ctx = format!("the tenant's operation {i} {}", ops[i]);
        item_problem(&results[i], 403, "forbidden", &ctx);
        if i < 5 {
            let single = send_single(&app, &s.token, &s.tid, &ops[i], &ctx);
            assert_eq!(
                item_answer(&results[i]),
                single,
                "{ctx}: the single call's 403"
            );
        }
    }
    s.expect(
        [1000, 0, 12, 3],
        "the tenant's charges and reservation only",
    );
    let actors = audit_of(&app, "budget.charged");
    assert!(
        actors.iter().all(|(actor, _)| actor == "tenant"),
        "{actors:?}"
    );

    let resp = post_batch(&app, &app.admin(), &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "the admin's batch");
    let expected = [201, 201, 201, 201, 422, 422, 201];
    for (i, status) in expected.into_iter().enumerate() {
        assert_eq!(
            results[i]["status"], status,
            "the admin's operation {i}: {}",
            results[i]
        );
    }
    item_invalid(&results[4], &["amount_atomic"], "the admin's credit of 0");
    item_invalid(
        &results[5],
        &["budget_id"],
        "the admin's debit without a budget",
    );
    assert_eq!(results[1]["body"]["kind"], "credit", "{}", results[1]);
    s.expect([1010, 1, 24, 6], "both batches");
    assert_last_event(
        &app,
        "budget.credited",
        "admin",
        json!({ "budget_id": bid, "amount_atomic": "10", "memo": null }),
        "the admin's credit",
    );
}

/// On a tombstoned tenant each item is refused as its single call is: `409 tenant_tombstoned`
/// after its own `422` and `404`; an atomic batch fails whole. Nothing is recorded.
#[test]
fn a_tombstoned_tenants_items_are_each_refused_as_their_single_calls() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-tombstoned", "100").admin();
    let r = s.hold_id("10");
    let gone = app.delete(&s.tid);
    assert_eq!(gone.status, 200, "tombstoning: {}", gone.describe());
    let bid = s.bid.as_str();
    let ops = vec![
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "1" }),
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "1" }),
        json!({ "op": "commit", "reservation_id": r, "amount_atomic": "1" }),
        json!({ "op": "release", "reservation_id": r }),
        json!({ "op": "extend", "reservation_id": r, "ttl_seconds": 60 }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "1" }),
        json!({ "op": "debit", "budget_id": bid, "amount_atomic": "1" }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "0" }),
        json!({ "op": "charge", "budget_id": UNKNOWN_BUDGET, "amount_atomic": "1" }),
        json!({ "op": "commit", "reservation_id": UNKNOWN_RESERVATION, "amount_atomic": "1" }),
    ];
    let audit = app.audit_count();
    let resp = post_batch(&app, &s.auth, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "a tombstoned tenant's batch");
    for (i, (op, item)) in ops.iter().zip(&results).enumerate() {
        let ctx = format!("operation {i} {op}");
        let single = send_single(&app, &s.auth, &s.tid, op, &ctx);
        assert_eq!(item_answer(item), single, "{ctx}: the single answer");
        if i < 7 {
            item_problem(item, 409, "tenant_tombstoned", &ctx);
        }
    }
    let zap = json!({ "op": "zap" });
    let resp = post_batch(
        &app,
        &s.auth,
        &s.tid,
        &batch_body(Some(true), &[ops[0].clone(), zap]),
        None,
    );
    let failed = batch_failed(&resp, 2, "an atomic batch of a tombstoned tenant");
    item_problem(
        &failed[0],
        409,
        "tenant_tombstoned",
        "the atomic batch's charge",
    );
    item_invalid(&failed[1], &["op"], "the atomic batch's zap");
    assert_eq!(app.audit_count(), audit, "nothing recorded");
    s.expect(
        [100, 0, 0, 0],
        "the tombstone released the hold; nothing moved since",
    );
}

/// The `Idempotency-Key` covers the whole batch: the same key and body replay the first answer
/// byte for byte with `Idempotent-Replayed: true` and move nothing again, whatever the layout
/// of the valid operations and whether `"atomic": false` is written out; another body, another
/// path or `atomic` is a mismatch; another principal's key is its own.
#[test]
fn the_same_key_and_batch_replay_the_first_answer_and_move_nothing() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-idempotent", "1000");
    let r = s.hold_id("100");
    let bid = &s.bid;
    let text = format!(
        r#"{{"operations":[
            {{"op":"charge","budget_id":"{bid}","amount_atomic":"10","memo":"first"}},
            {{"op":"reserve","budget_id":"{bid}","amount_atomic":"20","ttl_seconds":120}},
            {{"op":"commit","reservation_id":"{r}","amount_atomic":"50"}},
            {{"op":"charge","budget_id":"{bid}","amount_atomic":"100000"}}]}}"#
    );
    let key = "batch-key-1";
    let first = post_batch_text(&app, &s.token, &s.tid, &text, Some(key));
    let results = batch_results(&first, 4, "the first batch");
    let statuses: Vec<&Value> = results.iter().map(|r| &r["status"]).collect();
    assert_eq!(statuses, [201, 201, 200, 409], "the first batch's statuses");
    assert_eq!(
        first.header("idempotent-replayed"),
        None,
        "the first is no replay"
    );
    let figures = [1000, 0, 60, 20];
    s.expect(figures, "after the first batch");
    let (audit, entries) = (app.audit_count(), s.entries().len());

    let relaid = format!(
        r#"{{ "atomic" : false, "operations" : [
            {{"memo":"first","amount_atomic":"10","budget_id":"{bid}","op":"charge"}},
            {{"ttl_seconds":120,"op":"reserve","amount_atomic":"20","budget_id":"{bid}"}},
            {{"amount_atomic":"50","op":"commit","reservation_id":"{r}"}},
            {{"amount_atomic":"100000","op":"charge","budget_id":"{bid}"}} ] }}"#
    );
    for (what, body) in [
        ("the same text", &text),
        ("another layout, atomic false", &relaid),
    ] {
        let again = post_batch_text(&app, &s.token, &s.tid, body, Some(key));
        assert_eq!(again.status, 200, "{what}: {}", again.describe());
        assert_eq!(
            again.header("idempotent-replayed"),
            Some("true"),
            "{what}: a replay"
        );
        assert_eq!(
            again.body, first.body,
            "{what}: the first answer, byte for byte"
        );
        s.expect(figures, what);
        assert_eq!(app.audit_count(), audit, "{what}: nothing audited");
        assert_eq!(s.entries().len(), entries, "{what}: no entry");
    }

    let sent: Value = serde_json::from_str(&text).expect("the batch is JSON");
    let ops = sent["operations"].as_array().cloned().expect("operations");
    let mut other_amount = ops.clone();
    other_amount[0]["amount_atomic"] = json!("11");
    let mut swapped = ops.clone();
    swapped.swap(0, 1);
    let mismatches = [
        ("another amount", batch_body(None, &other_amount)),
        ("another order", batch_body(None, &swapped)),
        ("one fewer", batch_body(None, &ops[..3])),
        ("atomic", batch_body(Some(true), &ops)),
    ];
    for (what, body) in &mismatches {
        let resp = post_batch(&app, &s.token, &s.tid, body, Some(key));
        assert_problem(&resp, 422, "idempotency_key_mismatch", what);
    }
    let charge = json!({ "budget_id": bid, "amount_atomic": "10", "memo": "first" });
    let resp = s.post_keyed(&charges_path(&s.tid), &charge, key);
    assert_problem(
        &resp,
        422,
        "idempotency_key_mismatch",
        "the key on the single charge",
    );
    s.expect(figures, "after the mismatches");
    assert_eq!(app.audit_count(), audit, "no mismatch audited");

    // The admin's keys are its own: the same key and body from the admin apply afresh. Its
    // commit of the reservation the tenant committed is refused.
    let theirs = post_batch_text(&app, &app.admin(), &s.tid, &text, Some(key));
    let results = batch_results(&theirs, 4, "the admin's batch with the tenant's key");
    assert_eq!(
        theirs.header("idempotent-replayed"),
        None,
        "not the tenant's replay"
    );
    assert_not_active_item(&results[2], "committed", "the admin's commit");
    s.expect([1000, 0, 70, 40], "the admin's batch applied");
}

/// Asserts an item's `409 reservation_not_active` naming `state`.
fn assert_not_active_item(item: &Value, state: &str, ctx: &str) {
    let body = item_problem(item, 409, "reservation_not_active", ctx);
    assert_eq!(body["state"], state, "{ctx}: the state named: {body}");
}

/// The contract binds a key to the body after parsing: white space and member order do not
/// matter. That holds for a refused item too: the retry of a batch whose answer was kept, laid
/// out otherwise, is its replay.
#[test]
fn a_replay_ignores_the_layout_of_refused_items_too() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-idempotent-refused", "1000");
    let bid = &s.bid;
    let first_text = format!(
        r#"{{"operations":[{{"op":"charge","budget_id":"{bid}","amount_atomic":"1"}},{{"op":"zap"}},{{"op":"charge","budget_id":"{bid}","amount_atomic":"0","memo":"m"}}]}}"#
    );
    let key = "refused-layout-key";
    let first = post_batch_text(&app, &s.token, &s.tid, &first_text, Some(key));
    let results = batch_results(&first, 3, "the first batch");
    item_ok(&results[0], 201, "the charge");
    item_invalid(&results[1], &["op"], "the zap");
    item_invalid(&results[2], &["amount_atomic"], "the charge of 0");
    let retry_text = format!(
        r#"{{"operations":[{{"op":"charge","budget_id":"{bid}","amount_atomic":"1"}},{{ "op" : "zap" }},{{"memo":"m","amount_atomic":"0","op":"charge","budget_id":"{bid}"}}]}}"#
    );
    let retry = post_batch_text(&app, &s.token, &s.tid, &retry_text, Some(key));
    assert_eq!(
        retry.status,
        200,
        "the same batch laid out otherwise is its replay; sent:\n{first_text}\nthen:\n{retry_text}\ngot: {}",
        retry.describe()
    );
    assert_eq!(
        retry.header("idempotent-replayed"),
        Some("true"),
        "a replay"
    );
    assert_eq!(retry.body, first.body, "the first answer");
    s.expect([1000, 0, 1, 0], "applied once");
}

/// A batch is one request to the rate limit: with a bucket of 2, a batch of 100 operations and
/// one more request pass, the third is `429`.
#[test]
fn a_batch_of_a_hundred_operations_takes_one_rate_limit_slot() {
    let app = AppBuilder::new()
        .arg("--rate-limit")
        .arg("1/m")
        .arg("--rate-limit-burst")
        .arg("2")
        .spawn();
    let s = Scene::new(&app, "batch-limited", "1000");
    let op = json!({ "op": "charge", "budget_id": s.bid, "amount_atomic": "1" });
    let ops = vec![op; 100];
    let remaining = |resp: &Response| -> Option<u64> {
        let value = resp.header("ratelimit").unwrap_or_default();
        value
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .and_then(|n| n.parse().ok())
    };
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, 100, "the batch");
    assert!(
        results.iter().all(|r| r["status"] == 201),
        "every charge applied"
    );
    assert_eq!(
        remaining(&resp),
        Some(1),
        "one slot taken: {}",
        resp.describe()
    );
    let resp = app.get(&s.tid, Some(&tenant_token(&s.created)));
    assert_eq!(resp.status, 200, "the second request: {}", resp.describe());
    assert_eq!(remaining(&resp), Some(0), "{}", resp.describe());
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(None, &ops[..1]), None);
    assert_problem(&resp, 429, "rate_limited", "the third request");
    s.expect([1000, 0, 100, 0], "the one batch");
}

/// Each applied operation writes its own audit row, in order, with the actor of the batch and
/// the payload its single call writes; refused ones write none; `audit verify` passes.
#[test]
fn each_applied_operation_writes_its_own_audit_row_and_refused_ones_none() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-audit", "1000");
    let (r1, r2, r3) = (s.hold_id("100"), s.hold_id("50"), s.hold_id("30"));
    let bid = s.bid.as_str();
    let ops = vec![
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "40", "ttl_seconds": 120 }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "25", "memo": "tokens ✓" }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "100000" }),
        json!({ "op": "commit", "reservation_id": r1, "amount_atomic": "60" }),
        json!({ "op": "extend", "reservation_id": r2, "ttl_seconds": 900 }),
        json!({ "op": "release", "reservation_id": r3 }),
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "5" }),
        json!({ "op": "release", "reservation_id": r3 }),
        json!({ "op": "zap" }),
    ];
    let seq = app.audit_count();
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "the tenant's mixed batch");
    let expected = [201, 201, 409, 200, 200, 200, 403, 409, 422];
    for (i, status) in expected.into_iter().enumerate() {
        assert_eq!(
            results[i]["status"], status,
            "operation {i}: {}",
            results[i]
        );
    }
    let body = |i: usize| results[i]["body"].clone();
    let new_id = str_of(&body(0), "id").to_owned();
    let wanted = vec![
        (
            "reservation.created",
            format!(
                r#"{{"id":"{new_id}","budget_id":"{bid}","amount_atomic":"40","expires_at":"{}"}}"#,
                str_of(&body(0), "expires_at")
            ),
        ),
        (
            "budget.charged",
            format!(r#"{{"budget_id":"{bid}","amount_atomic":"25","memo":"tokens ✓"}}"#),
        ),
        (
            "reservation.committed",
            format!(r#"{{"id":"{r1}","amount_atomic":"60"}}"#),
        ),
        (
            "reservation.extended",
            format!(
                r#"{{"id":"{r2}","expires_at":"{}"}}"#,
                str_of(&body(4), "expires_at")
            ),
        ),
        ("reservation.released", format!(r#"{{"id":"{r3}"}}"#)),
    ];
    let rows = app.audit_rows();
    let new: Vec<(String, String, String, String)> = rows[seq as usize..]
        .iter()
        .map(|r| {
            (
                r.actor.clone(),
                r.action.clone(),
                r.tenant_id.clone(),
                r.payload.clone(),
            )
        })
        .collect();
    let want: Vec<(String, String, String, String)> = wanted
        .into_iter()
        .map(|(action, payload)| {
            (
                "tenant".to_owned(),
                action.to_owned(),
                s.tid.clone(),
                payload,
            )
        })
        .collect();
    assert_eq!(new, want, "one audit row per applied operation, in order");

    let admin_ops = vec![
        json!({ "op": "credit", "budget_id": bid, "amount_atomic": "5", "memo": "refund" }),
        json!({ "op": "debit", "budget_id": bid, "amount_atomic": "100000" }),
        json!({ "op": "debit", "budget_id": bid, "amount_atomic": "3" }),
    ];
    let seq = app.audit_count();
    let resp = post_batch(
        &app,
        &app.admin(),
        &s.tid,
        &batch_body(None, &admin_ops),
        None,
    );
    let results = batch_results(&resp, 3, "the admin's batch");
    item_problem(
        &results[1],
        409,
        "insufficient_funds",
        "the admin's large debit",
    );
    let rows = app.audit_rows();
    let new: Vec<(&str, &str, &str)> = rows[seq as usize..]
        .iter()
        .map(|r| (r.actor.as_str(), r.action.as_str(), r.payload.as_str()))
        .collect();
    let credit = format!(r#"{{"budget_id":"{bid}","amount_atomic":"5","memo":"refund"}}"#);
    let debit = format!(r#"{{"budget_id":"{bid}","amount_atomic":"3","memo":null}}"#);
    let want = vec![
        ("admin", "budget.credited", credit.as_str()),
        ("admin", "budget.debited", debit.as_str()),
    ];
    assert_eq!(new, want, "the admin's rows");
    assert_verifies(&app, "after the batches");
}

/// Operations apply in order, each seeing the ones before it: a reservation takes what a later
/// charge needed (refused, naming what is left), a release gives it back, a commit, extend or
/// release of the reservation released before is `409 reservation_not_active` naming
/// `released`; in a tree, a reservation on one key leaves its sibling short at the team.
#[test]
fn each_operation_sees_the_ones_before_it() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-order", "100");
    let r = s.hold_id("10");
    let bid = s.bid.as_str();
    let ops = vec![
        json!({ "op": "reserve", "budget_id": bid, "amount_atomic": "60" }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "40" }),
        json!({ "op": "release", "reservation_id": r }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "40" }),
        json!({ "op": "commit", "reservation_id": r, "amount_atomic": "5" }),
        json!({ "op": "extend", "reservation_id": r, "ttl_seconds": 60 }),
        json!({ "op": "release", "reservation_id": r }),
        json!({ "op": "charge", "budget_id": bid, "amount_atomic": "1" }),
    ];
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "the ordered batch");
    let held = item_ok(&results[0], 201, "the reservation");
    assert_eq!(held["state"], "active", "{held}");
    let body = item_problem(
        &results[1],
        409,
        "insufficient_funds",
        "the charge after it",
    );
    assert_eq!(
        body["available_atomic"], "30",
        "what the reservation left: {body}"
    );
    let released = item_ok(&results[2], 200, "the release");
    assert_eq!(released["state"], "released", "{released}");
    let charged = item_ok(&results[3], 201, "the charge after the release");
    assert_eq!(charged["available_atomic"], "0", "{charged}");
    for (i, what) in [(4, "commit"), (5, "extend"), (6, "release")] {
        assert_not_active_item(
            &results[i],
            "released",
            &format!("the {what} after the release"),
        );
    }
    let body = item_problem(&results[7], 409, "insufficient_funds", "the last charge");
    assert_eq!(body["available_atomic"], "0", "{body}");
    s.expect([100, 0, 40, 60], "the batch");
    assert_eq!(s.state(&r), "released", "the hold");

    // A tree: team 100 under org 1000; two keys of 100 under the team.
    let root = Scene::new(&app, "batch-order-tree", "0").admin();
    let org = budget_under(
        &root,
        json!({ "name": "org", "opening_deposit_atomic": "1000" }),
        None,
    );
    let team = budget_under(
        &root,
        json!({ "name": "team", "opening_deposit_atomic": "100" }),
        Some(&org),
    );
    let k1 = budget_under(
        &root,
        json!({ "name": "k1", "opening_deposit_atomic": "100" }),
        Some(&team),
    );
    let k2 = budget_under(
        &root,
        json!({ "name": "k2", "opening_deposit_atomic": "100" }),
        Some(&team),
    );
    let ops = vec![
        json!({ "op": "reserve", "budget_id": k1.bid, "amount_atomic": "70" }),
        json!({ "op": "charge", "budget_id": k2.bid, "amount_atomic": "50" }),
        json!({ "op": "credit", "budget_id": team.bid, "amount_atomic": "20" }),
        json!({ "op": "charge", "budget_id": k2.bid, "amount_atomic": "50" }),
    ];
    let resp = post_batch(&app, &root.auth, &root.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, ops.len(), "the tree's batch");
    item_ok(&results[0], 201, "the reservation on k1");
    let body = item_problem(&results[1], 409, "insufficient_funds", "k2's charge");
    assert_eq!(
        body["budget_id"],
        json!(team.bid),
        "the team is short: {body}"
    );
    assert_eq!(body["available_atomic"], "30", "{body}");
    item_ok(&results[2], 201, "the team's credit");
    item_ok(&results[3], 201, "k2's charge after the credit");
    k1.expect([100, 0, 0, 70], "k1");
    k2.expect([100, 0, 50, 0], "k2");
    team.expect([120, 0, 50, 70], "team");
    org.expect([1000, 0, 50, 70], "org");
}

/// A batch that meets a hold past its `expires_at` (recorded by the system already or not yet,
/// whichever comes first): a commit of it is `409 reservation_not_active` naming `expired`, the
/// amount it held is free for the next operation, and its expiry is recorded exactly once
/// (one `expire` entry before the charge that used the amount, one `reservation.expired` audit
/// row and event, actor `system`). An atomic batch that fails on it applies nothing else.
#[test]
fn a_batch_meeting_an_expired_hold_frees_it_and_records_its_expiry_once() {
    let app = spawn_app();
    let s = Scene::new(&app, "batch-expired", "100");
    let atomic = s.admin().new_budget("atomic", "100");
    let held = s.hold("100", Some(1));
    let held_atomic = s.on(&atomic.bid).hold("100", Some(1));
    let until = timestamp_ms(str_of(&held, "expires_at"))
        .max(timestamp_ms(str_of(&held_atomic, "expires_at")));
    sleep_past(until, 20);

    let ops = vec![
        json!({ "op": "commit", "reservation_id": held["id"], "amount_atomic": "10" }),
        json!({ "op": "charge", "budget_id": s.bid, "amount_atomic": "100" }),
    ];
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(None, &ops), None);
    let results = batch_results(&resp, 2, "the batch meeting an expired hold");
    assert_not_active_item(&results[0], "expired", "the commit of the expired hold");
    let entry = item_ok(&results[1], 201, "the charge of what it held");
    assert_eq!(entry["available_atomic"], "0", "{entry}");

    let ops = vec![
        json!({ "op": "charge", "budget_id": atomic.bid, "amount_atomic": "1" }),
        json!({ "op": "commit", "reservation_id": held_atomic["id"], "amount_atomic": "10" }),
    ];
    let resp = post_batch(&app, &s.token, &s.tid, &batch_body(Some(true), &ops), None);
    let results = batch_failed(&resp, 2, "the atomic batch meeting an expired hold");
    assert_eq!(results[0], not_applied(), "the atomic batch's charge");
    assert_not_active_item(&results[1], "expired", "the atomic batch's commit");

    for (level, hold, kinds, figures) in [
        (
            s.clone(),
            &held,
            ["opening_deposit", "reserve", "expire", "charge"].as_slice(),
            [100, 0, 100, 0],
        ),
        (
            atomic.clone(),
            &held_atomic,
            ["opening_deposit", "reserve", "expire"].as_slice(),
            [100, 0, 0, 0],
        ),
    ] {
        let ctx = format!("budget {}", level.bid);
        let expired = s.wait_expired(str_of(hold, "id"));
        assert_eq!(expired["committed_atomic"], Value::Null, "{ctx}: {expired}");
        assert_eq!(level.kinds(), kinds, "{ctx}: one expire entry");
        level.expect(figures, &ctx);
        replay(&level.entries(), &ctx);
    }
    let expiries = audit_of(&app, "reservation.expired");
    let ids: Vec<(String, Value)> = vec![
        ("system".to_owned(), json!({ "id": held["id"] })),
        ("system".to_owned(), json!({ "id": held_atomic["id"] })),
    ];
    let mut sorted_expiries = expiries.clone();
    sorted_expiries.sort_by_key(|(_, p)| p["id"].as_str().map(str::to_owned));
    assert_eq!(
        sorted_expiries, ids,
        "one reservation.expired row a hold: {expiries:?}"
    );
    let events = list_all(&app, &app.admin(), &tenant_events_path(&s.tid));
    let expired_events = events
        .iter()
        .filter(|e| e["type"] == "reservation.expired")
        .count();
    assert_eq!(
        expired_events, 2,
        "one reservation.expired event a hold: {events:?}"
    );
    assert_verifies(&app, "after the expiries");
}
