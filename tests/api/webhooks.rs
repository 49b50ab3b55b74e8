//! Webhooks: endpoints made, read, changed, rotated and deleted by the admin alone (and
//! audited, never with their secret); every event that matches an enabled endpoint POSTed to a
//! real receiver with the event's exact JSON and the Standard Webhooks headers, whose
//! signatures the third-party `standardwebhooks` library accepts (tests/webhooks/verify.py,
//! in the environment scripts/webhook-deps.sh makes); retries on the schedule, failures told
//! in short sentences, an endpoint disabled after failing and resumed, manual retries, at most
//! 4 attempts in flight per endpoint, loopback addresses refused unless allowed, deliveries
//! that survive a restart and `kill -9`, and a secret that no log, file or other answer shows.
//!
//! Unless a test checks those flags, servers run with `--webhook-allow-http
//! --webhook-allow-private` (the receiver is on the loopback), `--webhook-timeout 1` and a
//! short retry schedule. No URL of these tests leaves the machine.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::helpers::*;
use crate::wire::{self, Response};

/// The collection of endpoints.
const ENDPOINTS: &str = "/v1/webhook-endpoints";

/// The members of an endpoint, in order; `secret` follows in the answers of a create and a
/// rotation.
const ENDPOINT_MEMBERS: [&str; 8] = [
    "id",
    "url",
    "description",
    "event_types",
    "tenant_id",
    "state",
    "disabled_reason",
    "created_at",
];

/// The members of a delivery, in order.
const DELIVERY_MEMBERS: [&str; 11] = [
    "id",
    "endpoint_id",
    "event_id",
    "event_type",
    "state",
    "attempts",
    "last_attempt_at",
    "last_status",
    "last_error",
    "next_attempt_at",
    "succeeded_at",
];

/// The retry schedule of most tests: three waits, so four attempts.
const FAST_SCHEDULE: &str = "200ms,200ms,200ms";

/// The attempts [`FAST_SCHEDULE`] allows.
const FAST_ATTEMPTS: usize = 4;

/// A schedule whose first wait outlasts a test: one attempt, then a pending delivery.
const SLOW_SCHEDULE: &str = "1m";

/// The shortest gap between two attempts of [`FAST_SCHEDULE`] a test accepts: 200 ms less
/// its 10 % of jitter, less the receiver's and the clock's slack.
const FAST_GAP_MIN: Duration = Duration::from_millis(150);

/// The longest gap between two attempts of [`FAST_SCHEDULE`] a test accepts on a loaded
/// machine.
const FAST_GAP_MAX: Duration = Duration::from_secs(5);

/// How long a test waits for something the server owes it.
const WAIT: Duration = Duration::from_secs(10);

/// How long a test watches for something that must not happen, once what must happen did.
const SETTLE: Duration = Duration::from_millis(700);

/// The longest an API request may take while deliveries are slow.
const API_FAST: Duration = Duration::from_secs(2);

/// How long verify.py may take.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(60);

/// A well-formed endpoint id that names no endpoint.
fn unknown_endpoint() -> String {
    format!("whe_{}", "0".repeat(ULID_CHARS))
}

/// A well-formed delivery id that names no delivery.
fn unknown_delivery() -> String {
    format!("whd_{}", "0".repeat(ULID_CHARS))
}

// ---------------------------------------------------------------------------------------
// Servers

/// A server with webhooks to the loopback over http, each attempt bounded by `timeout_s`,
/// waits of `schedule`, and private addresses allowed when `private`.
fn hook_app(timeout_s: u32, schedule: &str, private: bool) -> AppBuilder {
    let builder = AppBuilder::new()
        .arg("--webhook-allow-http")
        .arg("--webhook-timeout")
        .arg(&timeout_s.to_string())
        .arg("--webhook-retry-schedule")
        .arg(schedule);
    if private {
        builder.arg("--webhook-allow-private")
    } else {
        builder
    }
}

/// The server of most tests: 1 s attempts, [`FAST_SCHEDULE`], the loopback allowed.
fn spawn_hooks() -> TestApp {
    hook_app(1, FAST_SCHEDULE, true).spawn()
}

// ---------------------------------------------------------------------------------------
// The items of a page, as their texts

/// The raw texts of the items of a page's `data`.
fn raw_items(page: &str, ctx: &str) -> Vec<String> {
    let data = members(page, ctx)
        .into_iter()
        .find(|(name, _)| name == "data");
    let (_, data) = data.unwrap_or_else(|| panic!("{ctx}: no data in {page}"));
    let items: Vec<Box<RawValue>> = serde_json::from_str(data.get()).expect("data is an array");
    items.iter().map(|i| i.get().to_owned()).collect()
}

// ---------------------------------------------------------------------------------------
// Endpoints

/// `/v1/webhook-endpoints/<id>`, with a `/<tail>` unless `tail` is empty.
fn endpoint_path(id: &str, tail: &str) -> String {
    if tail.is_empty() {
        format!("{ENDPOINTS}/{id}")
    } else {
        format!("{ENDPOINTS}/{id}/{tail}")
    }
}

/// `POST /v1/webhook-endpoints` of a JSON body as admin.
fn post_endpoint(app: &TestApp, body: &Value) -> Response {
    let text = body.to_string();
    send(
        &app.addr,
        "POST",
        ENDPOINTS,
        &app.admin(),
        Some(&text),
        None,
        &[],
    )
}

/// Creates an endpoint from `body`, asserting `201`, `Location` and the shape of an endpoint
/// with its secret; the endpoint.
fn new_endpoint_with(app: &TestApp, body: &Value) -> Value {
    let resp = post_endpoint(app, body);
    let ctx = format!("creating an endpoint of {body}");
    assert_created(&resp, ENDPOINTS, &ctx);
    assert_endpoint_text(&resp.text(), true, &ctx)
}

/// Creates an endpoint at `url` for `types`; the endpoint, with its secret.
fn new_endpoint(app: &TestApp, url: &str, types: &[&str]) -> Value {
    new_endpoint_with(app, &json!({ "url": url, "event_types": types }))
}

/// `GET` of an endpoint as admin.
fn get_endpoint(app: &TestApp, id: &str) -> Response {
    get_as(app, &app.admin(), &endpoint_path(id, ""))
}

/// `GET` of an endpoint as admin, asserting `200` and an endpoint without a secret.
fn read_endpoint(app: &TestApp, id: &str) -> Value {
    let resp = get_endpoint(app, id);
    let ctx = format!("GET endpoint {id}");
    assert_ok(&resp, &ctx);
    assert_endpoint_text(&resp.text(), false, &ctx)
}

/// `PATCH` of an endpoint as admin, of a JSON body sent as `media`.
fn patch_as(app: &TestApp, id: &str, body: &str, media: &str) -> Response {
    let auth = app.admin();
    app.request(
        "PATCH",
        &endpoint_path(id, ""),
        &[("Authorization", &auth), ("Content-Type", media)],
        Some(body.as_bytes()),
    )
}

/// `PATCH` of an endpoint as admin, as `application/json`.
fn patch_endpoint(app: &TestApp, id: &str, body: &Value) -> Response {
    patch_as(app, id, &body.to_string(), "application/json")
}

/// `PATCH` of an endpoint, asserting `200` and an endpoint without a secret.
fn patch_ok(app: &TestApp, id: &str, body: &Value) -> Value {
    let resp = patch_endpoint(app, id, body);
    let ctx = format!("PATCH {id} with {body}");
    assert_ok(&resp, &ctx);
    assert_endpoint_text(&resp.text(), false, &ctx)
}

/// `DELETE` of an endpoint as admin.
fn delete_endpoint(app: &TestApp, id: &str) -> Response {
    let path = endpoint_path(id, "");
    send(&app.addr, "DELETE", &path, &app.admin(), None, None, &[])
}

/// `POST …/rotate-secret` as admin, with no body or with the body text given.
fn rotate(app: &TestApp, id: &str, body: Option<&str>) -> Response {
    let path = endpoint_path(id, "rotate-secret");
    send(&app.addr, "POST", &path, &app.admin(), body, None, &[])
}

/// Rotates an endpoint's secret, asserting `200` and an endpoint with its (new) secret.
fn rotate_ok(app: &TestApp, id: &str, body: Option<&str>) -> Value {
    let resp = rotate(app, id, body);
    let ctx = format!("rotating the secret of {id}");
    assert_ok(&resp, &ctx);
    assert_endpoint_text(&resp.text(), true, &ctx)
}

/// The secret of an endpoint answer.
fn secret_of(endpoint: &Value) -> String {
    str_of(endpoint, "secret").to_owned()
}

/// The endpoints listed, every page followed.
fn list_endpoints(app: &TestApp) -> Vec<Value> {
    list_all(app, &app.admin(), ENDPOINTS)
}

/// `whsec_` and the padded standard base64 of 32 bytes: 43 characters of the alphabet, the
/// last of them canonical (its two low bits zero), then one `=`.
fn is_secret(s: &str) -> bool {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let Some(b64) = s.strip_prefix("whsec_") else {
        return false;
    };
    let chars: Vec<char> = b64.chars().collect();
    chars.len() == 44
        && chars[..43].iter().all(|c| ALPHABET.contains(*c))
        && "AEIMQUYcgkosw048".contains(chars[42])
        && chars[43] == '='
}

/// The position of an event type in the contract's list.
fn type_rank(ty: &str) -> usize {
    let rank = EVENT_TYPES.iter().position(|t| *t == ty);
    rank.unwrap_or_else(|| panic!("not an event type: {ty:?}"))
}

/// Some event types in the contract's order.
fn in_contract_order(types: &[&str]) -> Vec<String> {
    let mut sorted: Vec<&str> = types.to_vec();
    sorted.sort_by_key(|t| type_rank(t));
    sorted.into_iter().map(str::to_owned).collect()
}

/// Checks an endpoint's members and theirs: ids, timestamps, states, its event types in the
/// contract's order (or `["*"]`), and the secret's shape where there is one.
fn assert_endpoint(ep: &Value, ctx: &str) {
    let ok = ep["id"].as_str().is_some_and(|id| is_id(id, "whe"));
    assert!(ok, "{ctx}: id is whe_ + a ULID: {ep}");
    assert!(ep["url"].is_string(), "{ctx}: url: {ep}");
    let desc = &ep["description"];
    assert!(
        desc.is_null() || desc.is_string(),
        "{ctx}: description: {ep}"
    );
    let types = ep["event_types"].as_array();
    let types = types.unwrap_or_else(|| panic!("{ctx}: event_types is an array: {ep}"));
    let types: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
    assert!(!types.is_empty(), "{ctx}: event_types is not empty: {ep}");
    if types != ["*"] {
        let ranks: Vec<usize> = types.iter().map(|t| type_rank(t)).collect();
        let ascending = ranks.windows(2).all(|w| w[0] < w[1]);
        assert!(
            ascending,
            "{ctx}: event types in the contract's order: {ep}"
        );
    }
    let tenant = &ep["tenant_id"];
    let ok = tenant.is_null() || tenant.as_str().is_some_and(|t| is_id(t, "ten"));
    assert!(ok, "{ctx}: tenant_id: {ep}");
    let reason = &ep["disabled_reason"];
    match str_of(ep, "state") {
        "enabled" => assert!(reason.is_null(), "{ctx}: no disabled_reason: {ep}"),
        "disabled" => {
            let known = reason == "manual" || reason == "failing";
            assert!(known, "{ctx}: disabled_reason manual or failing: {ep}");
        }
        "deleted" => {}
        other => panic!("{ctx}: an unknown state {other:?}: {ep}"),
    }
    assert!(
        is_timestamp(str_of(ep, "created_at")),
        "{ctx}: created_at: {ep}"
    );
    if let Some(secret) = ep.get("secret") {
        let ok = secret.as_str().is_some_and(is_secret);
        assert!(ok, "{ctx}: whsec_ + base64 of 32 bytes, padded: {ep}");
    }
}

/// Checks an endpoint answer's text: its members in the contract's order (`secret` last, and
/// only when `with_secret`), and [`assert_endpoint`]. Returns the endpoint.
fn assert_endpoint_text(text: &str, with_secret: bool, ctx: &str) -> Value {
    let mut expected: Vec<&str> = ENDPOINT_MEMBERS.to_vec();
    if with_secret {
        expected.push("secret");
    }
    let names = member_names(text, ctx);
    assert_eq!(
        names, expected,
        "{ctx}: the endpoint's members in order: {text}"
    );
    let ep: Value = serde_json::from_str(text).expect("JSON");
    assert_endpoint(&ep, ctx);
    ep
}

/// An endpoint without its `secret` member.
fn without_secret(ep: &Value) -> Value {
    let mut ep = ep.clone();
    ep.as_object_mut().expect("an object").remove("secret");
    ep
}

// ---------------------------------------------------------------------------------------
// Deliveries

/// `…/deliveries` of an endpoint, with a query if not empty.
fn deliveries_path(whe: &str, query: &str) -> String {
    let path = endpoint_path(whe, "deliveries");
    if query.is_empty() {
        path
    } else {
        with_query(&path, query)
    }
}

/// Every delivery of an endpoint matching `query`, every page followed, each checked.
fn deliveries(app: &TestApp, whe: &str, query: &str) -> Vec<Value> {
    let path = deliveries_path(whe, query);
    let all = list_all(app, &app.admin(), &path);
    for d in &all {
        assert_delivery(d, &format!("GET {path}"));
        assert_eq!(d["endpoint_id"], whe, "GET {path}: the endpoint's: {d}");
    }
    all
}

/// The delivery of `evt` to `whe`, if there is one (never more than one).
fn delivery_of(app: &TestApp, whe: &str, evt: &str) -> Option<Value> {
    let mut found = deliveries(app, whe, &format!("event_id={evt}"));
    assert!(
        found.len() <= 1,
        "one delivery per event and endpoint: {found:?}"
    );
    let d = found.pop();
    if let Some(d) = &d {
        assert_eq!(d["event_id"], evt, "the event filtered: {d}");
    }
    d
}

/// Waits (bounded by [`WAIT`]) until the delivery of `evt` to `whe` exists and `pred` holds
/// for it; the delivery.
fn wait_delivery(
    app: &TestApp,
    whe: &str,
    evt: &str,
    ctx: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let found = poll(WAIT, || delivery_of(app, whe, evt).filter(|d| pred(d)));
    found.unwrap_or_else(|| {
        panic!(
            "{ctx}: the delivery of {evt} to {whe} did not reach the state awaited within \
             {WAIT:?}; it is {:?}",
            delivery_of(app, whe, evt)
        )
    })
}

/// Waits for the delivery of `evt` to `whe` to reach `state` with `attempts` attempts.
fn wait_state(app: &TestApp, whe: &str, evt: &str, state: &str, attempts: u64) -> Value {
    let ctx = format!("{state} after {attempts} attempts");
    wait_delivery(app, whe, evt, &ctx, |d| {
        d["state"] == state && d["attempts"].as_u64() == Some(attempts)
    })
}

/// `POST …/deliveries/<whd>/retry` as admin, with no body.
fn retry(app: &TestApp, whe: &str, whd: &str) -> Response {
    let path = endpoint_path(whe, &format!("deliveries/{whd}/retry"));
    send(&app.addr, "POST", &path, &app.admin(), None, None, &[])
}

/// Checks a delivery's members, ids, timestamps, and that its state agrees with the rest.
fn assert_delivery(d: &Value, ctx: &str) {
    assert_members(d, &DELIVERY_MEMBERS.join(" "), ctx);
    let ids = [("id", "whd"), ("endpoint_id", "whe"), ("event_id", "evt")];
    for (member, prefix) in ids {
        let ok = d[member].as_str().is_some_and(|s| is_id(s, prefix));
        assert!(ok, "{ctx}: {member} is {prefix}_ + a ULID: {d}");
    }
    type_rank(str_of(d, "event_type"));
    assert!(d["attempts"].is_u64(), "{ctx}: attempts is a count: {d}");
    for member in ["last_attempt_at", "next_attempt_at", "succeeded_at"] {
        let v = &d[member];
        let ok = v.is_null() || v.as_str().is_some_and(is_timestamp);
        assert!(ok, "{ctx}: {member} is null or a timestamp: {d}");
    }
    let status = &d["last_status"];
    let ok = status.is_null() || status.as_u64().is_some_and(|s| (100..600).contains(&s));
    assert!(ok, "{ctx}: last_status is null or a status: {d}");
    let error = &d["last_error"];
    let ok = error.is_null() || error.as_str().is_some_and(|e| !e.trim().is_empty());
    assert!(ok, "{ctx}: last_error is null or a sentence: {d}");
    let attempted = d["attempts"].as_u64().unwrap_or_default() > 0;
    assert_eq!(
        attempted,
        d["last_attempt_at"].is_string(),
        "{ctx}: last_attempt_at is set once attempted: {d}"
    );
    match str_of(d, "state") {
        "pending" => assert!(d["succeeded_at"].is_null() || attempted, "{ctx}: {d}"),
        "succeeded" => {
            let two = status.as_u64().is_some_and(|s| (200..300).contains(&s));
            assert!(two, "{ctx}: a success's last_status is its 2xx: {d}");
            assert!(error.is_null(), "{ctx}: no last_error after a success: {d}");
            assert!(d["succeeded_at"].is_string(), "{ctx}: succeeded_at: {d}");
            assert!(d["next_attempt_at"].is_null(), "{ctx}: nothing next: {d}");
        }
        "failed" => {
            assert!(d["succeeded_at"].is_null(), "{ctx}: never succeeded: {d}");
            assert!(d["next_attempt_at"].is_null(), "{ctx}: nothing next: {d}");
            assert!(error.is_string(), "{ctx}: why it failed: {d}");
        }
        other => panic!("{ctx}: an unknown state {other:?}: {d}"),
    }
}

// ---------------------------------------------------------------------------------------
// Events

/// The ids of the events `GET /v1/events?<query>` lists, oldest first.
fn event_ids(app: &TestApp, query: &str) -> Vec<String> {
    let path = with_query("/v1/events", query);
    list_all(app, &app.admin(), &path)
        .iter()
        .map(id_of)
        .collect()
}

/// The one event of `ty` of tenant `tid`.
fn only_event(app: &TestApp, tid: &str, ty: &str) -> String {
    let ids = event_ids(app, &format!("tenant_id={tid}&type={ty}"));
    let [id] = ids.as_slice() else {
        panic!("one {ty} event of {tid}: {ids:?}");
    };
    id.clone()
}

/// Creates a tenant; its id and its `tenant.created` event's id.
fn new_tenant(app: &TestApp, name: &str) -> (String, String) {
    let tid = tenant_id(&app.create_ok(name, "1000"));
    let evt = only_event(app, &tid, "tenant.created");
    (tid, evt)
}

/// The text of `GET /v1/events/<id>`, asserting `200`.
fn event_text(app: &TestApp, id: &str) -> String {
    let resp = get_as(app, &app.admin(), &format!("/v1/events/{id}"));
    assert_ok(&resp, &format!("GET event {id}"));
    resp.text()
}

/// The `webhook-id` of a request.
fn webhook_id(req: &Received) -> String {
    let id = req.header("webhook-id");
    id.unwrap_or_else(|| panic!("a webhook-id header: {req:?}"))
        .to_owned()
}

/// The `webhook-id`s of some requests, sorted and deduplicated.
fn webhook_ids(reqs: &[Received]) -> Vec<String> {
    let mut ids: Vec<String> = reqs.iter().map(webhook_id).collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Some ids, sorted.
fn sorted<S: AsRef<str>>(ids: &[S]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|s| s.as_ref().to_owned()).collect();
    ids.sort();
    ids
}

/// The `v1,` signatures of a request's `webhook-signature`, in order.
fn signatures(req: &Received) -> Vec<String> {
    let header = req.header("webhook-signature");
    let header = header.unwrap_or_else(|| panic!("a webhook-signature header: {req:?}"));
    let sigs: Vec<String> = header.split(' ').map(str::to_owned).collect();
    for sig in &sigs {
        let b64 = sig.strip_prefix("v1,").unwrap_or_default();
        let ok = b64.len() == 44 && b64.ends_with('=') && !b64.contains(' ');
        assert!(ok, "v1, + base64 of an HMAC-SHA256: {header:?}");
    }
    sigs
}

/// Checks one attempt as received: `POST` to the endpoint's path, `webhook-id` the event's
/// id, the body exactly what `GET /v1/events/<id>` answers, a fresh `webhook-timestamp`, the
/// content type, the user agent, each Standard Webhooks header once. Returns the event id.
fn assert_attempt(app: &TestApp, req: &Received, path: &str, ctx: &str) -> String {
    assert_eq!(req.method, "POST", "{ctx}: an attempt is a POST");
    assert_eq!(req.path, path, "{ctx}: to the URL's path");
    for name in [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
    ] {
        assert_eq!(req.header_count(name), 1, "{ctx}: one {name}: {req:?}");
    }
    let id = webhook_id(req);
    assert!(
        is_id(&id, "evt"),
        "{ctx}: webhook-id is the event's id: {id:?}"
    );
    let text = event_text(app, &id);
    assert_eq!(
        req.text(),
        text,
        "{ctx}: the body is exactly the event as GET /v1/events/{id} answers it"
    );
    let ts = req.header("webhook-timestamp").unwrap_or_default();
    let seconds: i64 = ts
        .parse()
        .unwrap_or_else(|e| panic!("{ctx}: webhook-timestamp in Unix seconds ({e}): {ts:?}"));
    let skew = req.unix_ms / 1000 - seconds;
    assert!(
        (-2..=10).contains(&skew),
        "{ctx}: webhook-timestamp {seconds} is the attempt's time (received at {} ms)",
        req.unix_ms
    );
    assert_eq!(
        req.header("content-type"),
        Some("application/json"),
        "{ctx}: content-type"
    );
    let agent = req.header("user-agent").unwrap_or_default();
    let version = agent.strip_prefix("tenantd/").unwrap_or_default();
    let ok = !version.is_empty() && !version.contains(char::is_whitespace);
    assert!(ok, "{ctx}: user-agent tenantd/<version>: {agent:?}");
    signatures(req);
    id
}

// ---------------------------------------------------------------------------------------
// The third-party verifier

/// The interpreter of the environment scripts/webhook-deps.sh makes.
fn venv_python() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-webhooks/bin/python")
}

/// Runs tests/webhooks/verify.py (the `standardwebhooks` library) on `items`; its line for
/// each: `ok` or `fail: <reason>`.
fn library(items: &[Value]) -> Vec<String> {
    let python = venv_python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/webhook-deps.sh, which installs the pinned Standard \
         Webhooks library (standardwebhooks) that these tests check signatures with",
        python.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/webhooks/verify.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    let input = serde_json::to_vec(items).expect("JSON");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = thread::spawn(move || stdin.write_all(&input));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = wait_exit(&mut child, VERIFY_TIMEOUT);
    let _ = writer.join();
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    let status = status.unwrap_or_else(|| panic!("verify.py ran over {VERIFY_TIMEOUT:?}"));
    let lines: Vec<String> = out.lines().map(str::to_owned).collect();
    assert_eq!(
        lines.len(),
        items.len(),
        "verify.py answers one line per item ({status}); stdout:\n{out}\nstderr:\n{err}"
    );
    let all_ok = lines.iter().all(|l| l == "ok");
    assert_eq!(
        status.success(),
        all_ok,
        "verify.py's exit status: {out}\n{err}"
    );
    lines
}

/// The verifier's item for one attempt: every secret of `secrets` must verify it alone.
fn item(secrets: &[&str], req: &Received) -> Value {
    let headers: Map<String, Value> = req
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), json!(v)))
        .collect();
    json!({ "secrets": secrets, "headers": headers, "body": req.text() })
}

/// Asserts that the library verifies every attempt with every one of `secrets`.
fn assert_verified(secrets: &[&str], reqs: &[Received], ctx: &str) {
    assert!(!reqs.is_empty(), "{ctx}: attempts to verify");
    let items: Vec<Value> = reqs.iter().map(|r| item(secrets, r)).collect();
    let lines = library(&items);
    for (line, req) in lines.iter().zip(reqs) {
        assert_eq!(
            line,
            "ok",
            "{ctx}: the standardwebhooks library verifies the attempt of {} with each of the \
             {} secret(s)",
            webhook_id(req),
            secrets.len()
        );
    }
}

/// Asserts that the library refuses `item`.
fn assert_refused(item: Value, ctx: &str) {
    let lines = library(&[item]);
    assert!(lines[0].starts_with("fail: "), "{ctx}: refused: {lines:?}");
}

// ---------------------------------------------------------------------------------------
// Endpoints: create, read, list

#[test]
fn a_new_endpoint_is_201_with_location_and_its_secret_last() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let before = now_ms();
    let resp = post_endpoint(&app, &json!({ "url": rx.url() }));
    let after = now_ms();
    assert_created(&resp, ENDPOINTS, "a create");
    let ep = assert_endpoint_text(&resp.text(), true, "a create");
    let expected = [
        ("url", json!(rx.url())),
        ("description", Value::Null),
        ("event_types", json!(["*"])),
        ("tenant_id", Value::Null),
        ("state", json!("enabled")),
        ("disabled_reason", Value::Null),
    ];
    assert_fields(&ep, &expected, "the defaults");
    let at = timestamp_ms(str_of(&ep, "created_at"));
    assert!(
        (before - 1000..=after + 1000).contains(&at),
        "created_at is the time of the create: {ep}"
    );

    let id = id_of(&ep);
    let read = read_endpoint(&app, &id);
    assert_eq!(
        read,
        without_secret(&ep),
        "GET shows the endpoint without its secret"
    );
    let listed = list_endpoints(&app);
    assert_eq!(
        listed,
        [without_secret(&ep)],
        "the list shows it without its secret"
    );
    let page = get_as(&app, &app.admin(), ENDPOINTS).text();
    for text in raw_items(&page, "the list") {
        assert_endpoint_text(&text, false, "a listed endpoint");
    }

    let other = new_endpoint_with(&app, &json!({ "url": rx.url() }));
    assert!(
        id_of(&other) > id,
        "a later endpoint's id sorts after: {other}"
    );
    assert_ne!(
        secret_of(&other),
        secret_of(&ep),
        "every endpoint has its own secret"
    );
    assert_eq!(rx.connections(), 0, "creating endpoints sends nothing");
}

#[test]
fn event_types_show_in_the_contracts_order_and_filters_and_descriptions_come_back() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let kept = tenant_id(&app.create_ok("hooked", "1"));
    let gone = tenant_id(&app.create_ok("hooked-gone", "1"));
    assert_eq!(app.delete(&gone).status, 200, "tombstoning");

    let picked = [
        "reservation.expired",
        "tenant.created",
        "budget.available_low",
    ];
    let body = json!({ "url": rx.url(), "event_types": picked, "tenant_id": kept,
                       "description": "billing ü" });
    let ep = new_endpoint_with(&app, &body);
    let expected = [
        ("event_types", json!(in_contract_order(&picked))),
        ("tenant_id", json!(kept)),
        ("description", json!("billing ü")),
    ];
    assert_fields(
        &ep,
        &expected,
        "what was sent, types in the contract's order",
    );
    assert_eq!(read_endpoint(&app, &id_of(&ep)), without_secret(&ep), "GET");

    let mut reversed = EVENT_TYPES.to_vec();
    reversed.reverse();
    let all = new_endpoint(&app, &rx.url(), &reversed);
    assert_eq!(
        all["event_types"],
        json!(EVENT_TYPES),
        "every type, in order"
    );
    let star = new_endpoint(&app, &rx.url(), &["*"]);
    assert_eq!(star["event_types"], json!(["*"]), "[\"*\"] shows as itself");
    let null = new_endpoint_with(
        &app,
        &json!({ "url": rx.url(), "event_types": null,
                                                "tenant_id": null, "description": null }),
    );
    let defaults = [
        ("event_types", json!(["*"])),
        ("tenant_id", Value::Null),
        ("description", Value::Null),
    ];
    assert_fields(&null, &defaults, "null is the same as absent");

    let body = json!({ "url": rx.url(), "tenant_id": gone });
    let tombstoned = new_endpoint_with(&app, &body);
    assert_eq!(
        tombstoned["tenant_id"],
        json!(gone),
        "a tombstoned tenant is taken"
    );
    for desc in [json!("€".repeat(MEMO_CHARS_MAX)), json!(""), json!("a b")] {
        let body = json!({ "url": rx.url(), "description": desc });
        let ep = new_endpoint_with(&app, &body);
        assert_eq!(
            ep["description"], desc,
            "a description under a memo's rules"
        );
    }
    assert_eq!(
        list_endpoints(&app).len(),
        8,
        "every endpoint made is listed"
    );
}

#[test]
fn bad_endpoint_bodies_are_422_naming_every_bad_member() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let url = rx.url();
    let base = format!("http://127.0.0.1:{}/", rx.port());
    let long = format!("{base}{}", "a".repeat(2049 - base.len()));
    let longest = format!("{base}{}", "a".repeat(2048 - base.len()));
    let bad_urls = [
        json!(null),
        json!(5),
        json!(""),
        json!("/hook"),
        json!("127.0.0.1/hook"),
        json!("not a url"),
        json!("ftp://127.0.0.1/hook"),
        json!("HTTP://127.0.0.1/hook"),
        json!("HTTPS://127.0.0.1/hook"),
        json!("http://user:pw@127.0.0.1/hook"),
        json!("http://user@127.0.0.1/hook"),
        json!(format!("{url}#fragment")),
        json!("http://"),
        json!(long),
    ];
    let mut cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["url"]),
        (json!({ "event_types": ["*"] }), vec!["url"]),
    ];
    cases.extend(
        bad_urls
            .into_iter()
            .map(|u| (json!({ "url": u }), vec!["url"])),
    );
    let bad_types = [
        json!([]),
        json!("tenant.created"),
        json!(["tenant.create"]),
        json!(["Tenant.Created"]),
        json!(["tenant.created", "tenant.created"]),
        json!(["*", "tenant.created"]),
        json!(["*", "*"]),
        json!([5]),
        json!([null]),
        json!({ "tenant.created": true }),
    ];
    cases.extend(
        bad_types
            .into_iter()
            .map(|t| (json!({ "url": url, "event_types": t }), vec!["event_types"])),
    );
    let bad_tenants = [json!(UNKNOWN_TENANT), json!("ten_x"), json!(5), json!("")];
    cases.extend(
        bad_tenants
            .into_iter()
            .map(|t| (json!({ "url": url, "tenant_id": t }), vec!["tenant_id"])),
    );
    let memos = values(r#"["a\nb", "a\u0000b", "a ", " a", "a\u0085", 1, ["m"]]"#);
    let too_long = json!("m".repeat(MEMO_CHARS_MAX + 1));
    cases.extend(
        memos
            .into_iter()
            .chain([too_long])
            .map(|m| (json!({ "url": url, "description": m }), vec!["description"])),
    );
    let unknown = [
        (json!({ "url": url, "secret": "whsec_x" }), vec!["secret"]),
        (json!({ "url": url, "enabled": true }), vec!["enabled"]),
        (json!({ "url": url, "state": "enabled" }), vec!["state"]),
        (
            json!({ "url": url, "eventtypes": ["*"] }),
            vec!["eventtypes"],
        ),
        (
            json!({ "url": "ftp://x", "event_types": [], "description": " x", "extra": 1 }),
            vec!["url", "event_types", "description", "extra"],
        ),
    ];
    cases.extend(unknown);
    for (body, fields) in &cases {
        let resp = post_endpoint(&app, body);
        let ctx = format!("POST {body}");
        let problem = assert_problem(&resp, 422, "validation_failed", &ctx);
        // `event_types.N` names the bad item of the array.
        let mut named: Vec<String> = error_fields(&problem, &ctx)
            .into_iter()
            .map(|f| match f.strip_prefix("event_types.") {
                Some(n) if n.parse::<usize>().is_ok() => "event_types".to_owned(),
                _ => f,
            })
            .collect();
        named.dedup();
        let mut expected: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
        expected.sort();
        assert_eq!(named, expected, "{ctx}: the members named");
    }
    let not_json = send(
        &app.addr,
        "POST",
        ENDPOINTS,
        &app.admin(),
        Some("{"),
        None,
        &[],
    );
    assert_problem(&not_json, 400, "malformed_json", "a body that is not JSON");
    let array = send(
        &app.addr,
        "POST",
        ENDPOINTS,
        &app.admin(),
        Some("[]"),
        None,
        &[],
    );
    assert_problem(
        &array,
        400,
        "malformed_json",
        "a body that is not an object",
    );
    let auth = app.admin();
    let plain = app.request(
        "POST",
        ENDPOINTS,
        &[("Authorization", &auth), ("Content-Type", "text/plain")],
        Some(json!({ "url": url }).to_string().as_bytes()),
    );
    assert_problem(&plain, 415, "unsupported_media_type", "text/plain");
    assert!(list_endpoints(&app).is_empty(), "nothing was made");
    assert_events(&app, 0, "nothing was audited");

    let ep = new_endpoint_with(&app, &json!({ "url": longest }));
    assert_eq!(
        ep["url"],
        json!(longest),
        "a URL of 2,048 characters is taken"
    );
}

#[test]
fn an_http_url_needs_allow_http_and_an_https_one_does_not() {
    let app = AppBuilder::new().spawn();
    let rx = Receiver::start();
    let resp = post_endpoint(&app, &json!({ "url": rx.url() }));
    assert_invalid(&resp, &["url"], "http:// without --webhook-allow-http");
    let https = format!("https://127.0.0.1:{}/hook", rx.port());
    let ep = new_endpoint_with(&app, &json!({ "url": https }));
    assert_eq!(ep["url"], json!(https), "https:// is taken");
    let patched = patch_endpoint(&app, &id_of(&ep), &json!({ "url": rx.url() }));
    assert_invalid(&patched, &["url"], "a PATCH to http:// without the flag");
    assert_eq!(
        read_endpoint(&app, &id_of(&ep))["url"],
        json!(https),
        "unchanged"
    );
    assert_eq!(rx.connections(), 0, "no event, so no attempt");
}

#[test]
fn only_the_admin_manages_endpoints() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let s = Scene::new(&app, "outsider", "100");
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let id = id_of(&ep);
    let whd = unknown_delivery();
    let body = json!({ "url": rx.url() }).to_string();
    let calls: Vec<(&str, String, Option<&str>)> = vec![
        ("POST", ENDPOINTS.to_owned(), Some(&body)),
        ("GET", ENDPOINTS.to_owned(), None),
        ("GET", endpoint_path(&id, ""), None),
        ("PATCH", endpoint_path(&id, ""), Some("{\"enabled\":false}")),
        ("DELETE", endpoint_path(&id, ""), None),
        ("POST", endpoint_path(&id, "rotate-secret"), None),
        ("GET", endpoint_path(&id, "deliveries"), None),
        (
            "POST",
            endpoint_path(&id, &format!("deliveries/{whd}/retry")),
            None,
        ),
    ];
    for (method, path, body) in &calls {
        let ctx = format!("{method} {path}");
        let tenant = send(&app.addr, method, path, &s.token, *body, None, &[]);
        assert_problem(
            &tenant,
            403,
            "forbidden",
            &format!("{ctx} with a tenant token"),
        );
        let bad = bearer(&random_hex(32));
        let nobody = send(&app.addr, method, path, &bad, *body, None, &[]);
        assert_problem(
            &nobody,
            401,
            "unauthorized",
            &format!("{ctx} with no valid token"),
        );
    }
    assert_eq!(
        read_endpoint(&app, &id),
        without_secret(&ep),
        "nothing changed"
    );
    assert_eq!(list_endpoints(&app).len(), 1, "nothing was made");
    let put = send(
        &app.addr,
        "PUT",
        &endpoint_path(&id, ""),
        &app.admin(),
        None,
        None,
        &[],
    );
    assert_problem(&put, 405, "method_not_allowed", "PUT on an endpoint");
    let allowed = allow_set(&put);
    for method in ["DELETE", "GET", "PATCH"] {
        assert!(
            allowed.iter().any(|m| m == method),
            "Allow names {method}: {allowed:?}"
        );
    }
}

#[test]
fn the_list_pages_endpoints_in_id_order_and_unknown_ids_are_404() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let made: Vec<Value> = (0..3)
        .map(|_| without_secret(&new_endpoint(&app, &rx.url(), &["*"])))
        .collect();
    let first = list_page(&app, &app.admin(), &format!("{ENDPOINTS}?limit=2"));
    assert_eq!(
        first["data"],
        json!(made[..2]),
        "the first two, oldest first"
    );
    assert_eq!(first["has_more"], true, "more follow");
    let next = str_of(&first, "next_after").to_owned();
    let second = list_page(&app, &app.admin(), &format!("{ENDPOINTS}?after={next}"));
    assert_eq!(
        second["data"],
        json!(made[2..]),
        "the third after the second"
    );
    assert_eq!(second["has_more"], false, "the end");
    let whole = list_page(&app, &app.admin(), ENDPOINTS);
    assert_eq!(whole["data"], json!(made), "one page of all three");

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("state=enabled", "state"),
    ] {
        let resp = get_as(&app, &app.admin(), &format!("{ENDPOINTS}?{query}"));
        let problem = assert_problem(&resp, 400, "invalid_query", query);
        assert_eq!(error_fields(&problem, query), [field], "{query}: named");
    }
    for id in [unknown_endpoint(), "whe_nope".to_owned(), "nope".to_owned()] {
        let ctx = format!("GET {id}");
        assert_problem(
            &get_endpoint(&app, &id),
            404,
            "webhook_endpoint_not_found",
            &ctx,
        );
        let path = deliveries_path(&id, "");
        let list = get_as(&app, &app.admin(), &path);
        assert_problem(
            &list,
            404,
            "webhook_endpoint_not_found",
            &format!("GET {path}"),
        );
        let patch = patch_endpoint(&app, &id, &json!({ "enabled": false }));
        assert_problem(
            &patch,
            404,
            "webhook_endpoint_not_found",
            &format!("PATCH {id}"),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Endpoints: change, delete, audit

#[test]
fn patch_changes_each_member_and_null_restores_its_default() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let tid = tenant_id(&app.create_ok("patched", "1"));
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let id = id_of(&ep);

    let body = json!({ "url": rx.url_at("/other"), "event_types": ["budget.debited", "tenant.created"],
                       "tenant_id": tid, "description": "ops" });
    let changed = patch_ok(&app, &id, &body);
    let expected = [
        ("id", json!(id)),
        ("url", json!(rx.url_at("/other"))),
        ("event_types", json!(["tenant.created", "budget.debited"])),
        ("tenant_id", json!(tid)),
        ("description", json!("ops")),
        ("state", json!("enabled")),
        ("created_at", ep["created_at"].clone()),
    ];
    assert_fields(&changed, &expected, "every member changed");
    assert_eq!(read_endpoint(&app, &id), changed, "GET shows the change");

    let nulls = json!({ "event_types": null, "tenant_id": null, "description": null });
    let resp = patch_as(
        &app,
        &id,
        &nulls.to_string(),
        "application/merge-patch+json",
    );
    assert_ok(&resp, "a merge patch");
    let cleared = assert_endpoint_text(&resp.text(), false, "a merge patch");
    let expected = [
        ("event_types", json!(["*"])),
        ("tenant_id", Value::Null),
        ("description", Value::Null),
        ("url", json!(rx.url_at("/other"))),
    ];
    assert_fields(
        &cleared,
        &expected,
        "null restores each default, the rest stays",
    );

    let off = patch_ok(&app, &id, &json!({ "enabled": false }));
    let expected = [
        ("state", json!("disabled")),
        ("disabled_reason", json!("manual")),
    ];
    assert_fields(&off, &expected, "enabled: false");
    let on = patch_ok(&app, &id, &json!({ "enabled": true }));
    let expected = [
        ("state", json!("enabled")),
        ("disabled_reason", Value::Null),
    ];
    assert_fields(&on, &expected, "enabled: true");

    let refused: Vec<(Value, Vec<&str>)> = vec![
        (json!({ "enabled": null }), vec!["enabled"]),
        (json!({ "enabled": "yes" }), vec!["enabled"]),
        (json!({ "url": "ftp://127.0.0.1/hook" }), vec!["url"]),
        (json!({ "event_types": [] }), vec!["event_types"]),
        (json!({ "tenant_id": UNKNOWN_TENANT }), vec!["tenant_id"]),
        (json!({ "description": " x" }), vec!["description"]),
        (json!({ "secret": "whsec_x" }), vec!["secret"]),
        (json!({ "state": "enabled" }), vec!["state"]),
        (json!({ "id": unknown_endpoint() }), vec!["id"]),
        (json!({ "enabled": 1, "url": 1 }), vec!["enabled", "url"]),
    ];
    for (body, fields) in &refused {
        let resp = patch_endpoint(&app, &id, body);
        let ctx = format!("PATCH {body}");
        let problem = assert_problem(&resp, 422, "validation_failed", &ctx);
        let mut named = error_fields(&problem, &ctx);
        for f in &mut named {
            if f.starts_with("event_types.") {
                *f = "event_types".to_owned();
            }
        }
        named.dedup();
        assert_eq!(named, *fields, "PATCH {body}: the members named");
    }
    let plain = patch_as(&app, &id, "{}", "text/plain");
    assert_problem(&plain, 415, "unsupported_media_type", "PATCH as text/plain");
    let array = patch_as(&app, &id, "[]", "application/json");
    assert_problem(&array, 400, "malformed_json", "PATCH of an array");
    assert_eq!(
        read_endpoint(&app, &id),
        on,
        "the refused changes changed nothing"
    );
}

#[test]
fn a_patch_that_changes_nothing_records_nothing() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let types = ["budget.credited", "tenant.created"];
    let ep = new_endpoint(&app, &rx.url(), &types);
    let id = id_of(&ep);
    let created = app.audit_count();
    let same = without_secret(&ep);
    let reversed = ["tenant.created", "budget.credited"];
    for body in [
        json!({}),
        json!({ "url": rx.url() }),
        json!({ "event_types": reversed }),
        json!({ "event_types": types, "tenant_id": null, "description": null }),
        json!({ "enabled": true }),
    ] {
        let answer = patch_ok(&app, &id, &body);
        assert_eq!(answer, same, "PATCH {body} answers the endpoint unchanged");
        assert_events(&app, created, &format!("PATCH {body} records nothing"));
    }
    let off = patch_ok(&app, &id, &json!({ "enabled": false }));
    assert_events(&app, created + 1, "disabling records one event");
    let again = patch_ok(&app, &id, &json!({ "enabled": false }));
    assert_eq!(again, off, "disabling a disabled endpoint changes nothing");
    assert_events(&app, created + 1, "and records nothing");
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "audit verify: {verify:?}");
    let expected = format!("ok: {} events", created + 1);
    assert!(
        verify.stdout.starts_with(&expected),
        "{expected}: {verify:?}"
    );
}

#[test]
fn a_deleted_endpoint_is_404_to_every_call_and_gets_nothing_more() {
    let app = spawn_hooks();
    let (rx, marker) = (Receiver::start(), Receiver::start());
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let id = id_of(&ep);
    let (_, evt) = new_tenant(&app, "before-delete");
    let d = wait_state(&app, &id, &evt, "succeeded", 1);
    let whd = id_of(&d);

    let resp = delete_endpoint(&app, &id);
    assert_ok(&resp, "DELETE");
    let deleted = assert_endpoint_text(&resp.text(), false, "DELETE");
    assert_eq!(deleted["state"], "deleted", "the endpoint, now deleted");
    let same = [
        "id",
        "url",
        "description",
        "event_types",
        "tenant_id",
        "created_at",
    ];
    for member in same {
        assert_eq!(deleted[member], ep[member], "{member} as it was");
    }

    let nf = "webhook_endpoint_not_found";
    assert_problem(&get_endpoint(&app, &id), 404, nf, "GET");
    let patch = patch_endpoint(&app, &id, &json!({ "enabled": true }));
    assert_problem(&patch, 404, nf, "PATCH");
    assert_problem(&delete_endpoint(&app, &id), 404, nf, "DELETE again");
    assert_problem(&rotate(&app, &id, None), 404, nf, "rotate-secret");
    let list = get_as(&app, &app.admin(), &deliveries_path(&id, ""));
    assert_problem(&list, 404, nf, "its deliveries");
    assert_problem(&retry(&app, &id, &whd), 404, nf, "a retry of its delivery");
    assert!(list_endpoints(&app).is_empty(), "no longer listed");

    let mark = new_endpoint(&app, &marker.url(), &["*"]);
    let (_, later) = new_tenant(&app, "after-delete");
    marker.wait_for(1, WAIT, "the marker endpoint");
    wait_state(&app, &id_of(&mark), &later, "succeeded", 1);
    thread::sleep(SETTLE);
    assert_eq!(
        webhook_ids(&rx.requests()),
        [evt],
        "nothing after the delete"
    );
}

#[test]
fn endpoint_changes_are_audited_without_the_secret_and_the_chain_verifies() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let tid = tenant_id(&app.create_ok("audited", "1"));
    let scoped = new_endpoint_with(
        &app,
        &json!({ "url": rx.url(), "event_types": ["budget.credited"], "tenant_id": tid }),
    );
    let global = new_endpoint(&app, &rx.url_at("/all"), &["*"]);
    let (sid, gid) = (id_of(&scoped), id_of(&global));
    patch_ok(&app, &sid, &json!({ "enabled": false }));
    patch_ok(
        &app,
        &gid,
        &json!({ "event_types": ["tenant.tombstoned", "tenant.created"] }),
    );
    let rotated = rotate_ok(&app, &sid, None);
    assert_ok(&delete_endpoint(&app, &gid), "DELETE");

    let rows: Vec<AuditRow> = app
        .audit_rows()
        .into_iter()
        .filter(|r| r.action.starts_with("webhook_endpoint."))
        .collect();
    let expected = [
        (
            "webhook_endpoint.created",
            tid.as_str(),
            json!({ "id": sid, "url": rx.url(), "event_types": ["budget.credited"],
                    "tenant_id": tid, "enabled": true }),
        ),
        (
            "webhook_endpoint.created",
            "",
            json!({ "id": gid, "url": rx.url_at("/all"), "event_types": ["*"],
                    "tenant_id": null, "enabled": true }),
        ),
        (
            "webhook_endpoint.updated",
            tid.as_str(),
            json!({ "id": sid, "url": rx.url(), "event_types": ["budget.credited"],
                    "tenant_id": tid, "enabled": false }),
        ),
        (
            "webhook_endpoint.updated",
            "",
            json!({ "id": gid, "url": rx.url_at("/all"),
                    "event_types": ["tenant.created", "tenant.tombstoned"],
                    "tenant_id": null, "enabled": true }),
        ),
        (
            "webhook_endpoint.secret_rotated",
            tid.as_str(),
            json!({ "id": sid }),
        ),
        ("webhook_endpoint.deleted", "", json!({ "id": gid })),
    ];
    assert_eq!(rows.len(), expected.len(), "one row per change: {rows:#?}");
    let secrets = [secret_of(&scoped), secret_of(&global), secret_of(&rotated)];
    for (row, (action, tenant, payload)) in rows.iter().zip(&expected) {
        let ctx = format!("seq {} {}", row.seq, row.action);
        assert_eq!(row.action, *action, "{ctx}: action");
        assert_eq!(row.actor, "admin", "{ctx}: actor");
        assert_eq!(row.tenant_id, *tenant, "{ctx}: the tenant_id column");
        let parsed: Value = serde_json::from_str(&row.payload).expect("a JSON payload");
        assert_eq!(&parsed, payload, "{ctx}: the payload");
        let names = member_names(&row.payload, &ctx);
        let order: Vec<String> = ["id", "url", "event_types", "tenant_id", "enabled"]
            .iter()
            .filter(|m| parsed.get(**m).is_some())
            .map(|m| (*m).to_owned())
            .collect();
        assert_eq!(names, order, "{ctx}: the payload's members in order");
        for secret in &secrets {
            let b64 = secret.trim_start_matches("whsec_");
            assert!(
                !row.payload.contains(b64),
                "{ctx}: no secret in the payload"
            );
        }
    }
    assert_chain_valid(&app.audit_rows(), "the chain");
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "audit verify: {verify:?}");
    assert!(
        verify
            .stdout
            .starts_with(&format!("ok: {} events", app.audit_count())),
        "audit verify counts every event: {verify:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Delivery

#[test]
fn an_event_is_posted_as_its_exact_json_with_headers_the_library_verifies() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let (id, secret) = (id_of(&ep), secret_of(&ep));
    let s = Scene::new(&app, "delivered ü", "100");
    let created = only_event(&app, &s.tid, "tenant.created");
    let reqs = rx.wait_for(1, WAIT, "the tenant.created event");
    assert_eq!(
        assert_attempt(&app, &reqs[0], "/hook", "the first attempt"),
        created,
        "webhook-id is the event's id"
    );
    let d = wait_state(&app, &id, &created, "succeeded", 1);
    let expected = [
        ("event_type", json!("tenant.created")),
        ("last_status", json!(200)),
        ("last_error", Value::Null),
        ("next_attempt_at", Value::Null),
    ];
    assert_fields(&d, &expected, "a delivery that succeeded");
    let last = timestamp_ms(str_of(&d, "last_attempt_at"));
    let done = timestamp_ms(str_of(&d, "succeeded_at"));
    assert!(last <= done, "succeeded after it was attempted: {d}");
    assert!(
        (reqs[0].unix_ms - last).abs() < 5000,
        "last_attempt_at: {d}"
    );

    let credit = json!({ "amount_atomic": "5", "memo": "top-up ü \"quoted\"" });
    assert_status(
        &s.admin().post(&s.bpath("credits"), &credit),
        201,
        "a credit",
    );
    let credited = only_event(&app, &s.tid, "budget.credited");
    let reqs = rx.wait_for(2, WAIT, "the budget.credited event");
    assert_eq!(
        assert_attempt(&app, &reqs[1], "/hook", "the credit's"),
        credited
    );
    assert_eq!(
        signatures(&reqs[1]).len(),
        1,
        "one signature before any rotation"
    );
    assert_verified(&[&secret], &reqs, "each attempt");

    let stranger = secret_of(&new_endpoint(
        &app,
        &rx.url_at("/unused"),
        &["budget.closed"],
    ));
    assert_refused(item(&[&stranger], &reqs[0]), "another endpoint's secret");
    let mut tampered = item(&[&secret], &reqs[1]);
    tampered["body"] = json!(format!("{} ", reqs[1].text()));
    assert_refused(tampered, "a body changed by one byte");
    let pages = deliveries(&app, &id, "");
    assert_eq!(pages.len(), 2, "one delivery per event: {pages:?}");
}

#[test]
fn every_matching_endpoint_gets_the_event_under_the_same_webhook_id() {
    let app = spawn_hooks();
    let (rx1, rx2) = (Receiver::start(), Receiver::start());
    let ep1 = new_endpoint(&app, &rx1.url(), &["*"]);
    let ep2 = new_endpoint(&app, &rx2.url_at("/second"), &["tenant.created"]);
    let (_, evt) = new_tenant(&app, "shared");
    let a = rx1.wait_for(1, WAIT, "the first endpoint")[0].clone();
    let b = rx2.wait_for(1, WAIT, "the second endpoint")[0].clone();
    assert_eq!(assert_attempt(&app, &a, "/hook", "the first"), evt);
    assert_eq!(assert_attempt(&app, &b, "/second", "the second"), evt);
    assert_eq!(a.body, b.body, "the same body to both");
    let (s1, s2) = (secret_of(&ep1), secret_of(&ep2));
    assert_verified(
        &[&s1],
        std::slice::from_ref(&a),
        "the first, with its secret",
    );
    assert_verified(
        &[&s2],
        std::slice::from_ref(&b),
        "the second, with its secret",
    );
    assert_refused(
        item(&[&s2], &a),
        "the first's attempt with the second's secret",
    );
    let d1 = wait_state(&app, &id_of(&ep1), &evt, "succeeded", 1);
    let d2 = wait_state(&app, &id_of(&ep2), &evt, "succeeded", 1);
    assert_ne!(d1["id"], d2["id"], "a delivery per endpoint");
}

#[test]
fn event_types_and_tenant_choose_what_is_delivered_and_earlier_events_are_not() {
    let app = spawn_hooks();
    let a = Scene::new(&app, "chosen-a", "1000").admin();
    let b = Scene::new(&app, "chosen-b", "1000").admin();
    let (rx_all, rx_credit, rx_a) = (Receiver::start(), Receiver::start(), Receiver::start());
    new_endpoint(&app, &rx_all.url(), &["*"]);
    new_endpoint(&app, &rx_credit.url(), &["budget.credited"]);
    new_endpoint_with(&app, &json!({ "url": rx_a.url(), "tenant_id": a.tid }));

    assert_status(&a.credit("10"), 201, "a credit of a");
    assert_status(&b.credit("10"), 201, "a credit of b");
    b.new_budget("second", "5");
    assert_status(&a.debit("3"), 201, "a debit of a");
    let credit_a = only_event(&app, &a.tid, "budget.credited");
    let credit_b = only_event(&app, &b.tid, "budget.credited");
    let created_b = only_event(&app, &b.tid, "budget.created");
    let debit_a = only_event(&app, &a.tid, "budget.debited");

    let cases = [
        (
            &rx_all,
            vec![&credit_a, &credit_b, &created_b, &debit_a],
            "every type",
        ),
        (
            &rx_credit,
            vec![&credit_a, &credit_b],
            "budget.credited only",
        ),
        (&rx_a, vec![&credit_a, &debit_a], "tenant a only"),
    ];
    for (rx, expected, ctx) in &cases {
        let want = sorted(expected);
        let got = rx.wait_until(WAIT, |r| webhook_ids(r).len() >= want.len());
        assert!(
            got.is_some(),
            "{ctx}: {} events delivered within {WAIT:?}",
            want.len()
        );
    }
    thread::sleep(SETTLE);
    for (rx, expected, ctx) in &cases {
        let got = webhook_ids(&rx.requests());
        assert_eq!(
            got,
            sorted(expected),
            "{ctx}: exactly the matching events, none before"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Failures and retries

#[test]
fn a_failed_attempt_is_retried_after_the_scheduled_wait_until_one_succeeds() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let tell = format!("receiver-body-{}", random_hex(8));
    rx.plan(&[
        Behaviour::status_with_body(500, &tell),
        Behaviour::status(410),
    ]);
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let (_, evt) = new_tenant(&app, "retried");
    let reqs = rx.wait_for(3, WAIT, "two failures and a success");
    let d = wait_state(&app, &id_of(&ep), &evt, "succeeded", 3);
    assert_fields(
        &d,
        &[("last_status", json!(200)), ("last_error", Value::Null)],
        "the success after the failures",
    );
    for (i, req) in reqs.iter().enumerate() {
        assert_eq!(
            assert_attempt(&app, req, "/hook", &format!("attempt {i}")),
            evt
        );
    }
    assert_eq!(
        reqs[0].body, reqs[2].body,
        "every attempt sends the same body"
    );
    for pair in reqs.windows(2) {
        let gap = pair[1].at - pair[0].at;
        let ok = (FAST_GAP_MIN..FAST_GAP_MAX).contains(&gap);
        assert!(ok, "a retry waits the schedule's 200 ms (±10 %): {gap:?}");
    }
    assert_verified(&[&secret_of(&ep)], &reqs, "every attempt");
    thread::sleep(SETTLE);
    assert_eq!(rx.count(), 3, "nothing after the success");
    let answers = [
        get_as(&app, &app.admin(), &deliveries_path(&id_of(&ep), "")).text(),
        get_as(&app, &app.admin(), &endpoint_path(&id_of(&ep), "")).text(),
        get_as(&app, &app.admin(), "/v1/events").text(),
    ];
    for text in answers {
        assert!(
            !text.contains(&tell),
            "no answer holds the receiver's body: {text}"
        );
    }
    assert!(!app.log_text().contains(&tell), "nor the log");
}

#[test]
fn a_spent_schedule_fails_the_delivery_after_its_last_attempt() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let tell = format!("receiver-body-{}", random_hex(8));
    rx.set(Behaviour::status_with_body(500, &tell));
    let ep = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let (_, evt) = new_tenant(&app, "spent");
    let reqs = rx.wait_for(FAST_ATTEMPTS, WAIT, "every attempt of the schedule");
    let d = wait_state(&app, &id_of(&ep), &evt, "failed", FAST_ATTEMPTS as u64);
    let expected = [
        ("last_status", json!(500)),
        ("last_error", json!("HTTP 500")),
        ("next_attempt_at", Value::Null),
        ("succeeded_at", Value::Null),
    ];
    assert_fields(&d, &expected, "failed after the schedule");
    assert!(
        !d.to_string().contains(&tell),
        "never the response's body: {d}"
    );
    for pair in reqs.windows(2) {
        let gap = pair[1].at - pair[0].at;
        let ok = (FAST_GAP_MIN..FAST_GAP_MAX).contains(&gap);
        assert!(ok, "each wait follows the schedule: {gap:?}");
    }
    thread::sleep(SETTLE);
    assert_eq!(
        rx.count(),
        FAST_ATTEMPTS,
        "no attempt after the schedule is spent"
    );
    assert_eq!(
        deliveries(&app, &id_of(&ep), "state=failed").len(),
        1,
        "one failed"
    );
}

#[test]
fn a_redirect_is_a_failure_and_its_location_is_not_followed() {
    let app = hook_app(1, SLOW_SCHEDULE, true).spawn();
    let rx = Receiver::start();
    rx.set(Behaviour::redirect(&rx.url_at("/elsewhere")));
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let (_, evt) = new_tenant(&app, "redirected");
    rx.wait_for(1, WAIT, "the first attempt");
    let d = wait_state(&app, &id_of(&ep), &evt, "pending", 1);
    let expected = [
        ("last_status", json!(302)),
        ("last_error", json!("HTTP 302")),
        ("succeeded_at", Value::Null),
    ];
    assert_fields(&d, &expected, "a 302 is a failed attempt");
    let last = timestamp_ms(str_of(&d, "last_attempt_at"));
    let next = timestamp_ms(str_of(&d, "next_attempt_at"));
    assert!(
        (last + 50_000..=last + 70_000).contains(&next),
        "the next attempt a minute (±10 %) later: {d}"
    );
    thread::sleep(SETTLE);
    assert!(
        rx.requests_to("/elsewhere").is_empty(),
        "the Location is not followed"
    );
    assert_eq!(rx.count(), 1, "one attempt");
}

#[test]
fn a_stalled_or_late_attempt_times_out_and_a_dropped_connection_fails() {
    let app = hook_app(1, SLOW_SCHEDULE, true).spawn();
    let (stalled, dropped) = (Receiver::start(), Receiver::start());
    let (late, slow_ok) = (Receiver::start(), Receiver::start());
    stalled.set(Behaviour::Stall);
    dropped.set(Behaviour::Drop);
    late.set(Behaviour::status(200).after(Duration::from_secs(3)));
    slow_ok.set(Behaviour::status(204).after(Duration::from_millis(300)));
    let slow = new_endpoint(&app, &stalled.url(), &["*"]);
    let gone = new_endpoint(&app, &dropped.url(), &["*"]);
    let too_late = new_endpoint(&app, &late.url(), &["*"]);
    let in_time = new_endpoint(&app, &slow_ok.url(), &["*"]);
    let (_, evt) = new_tenant(&app, "unanswered");

    let ended = stalled.wait_until(WAIT, |r| r.first().is_some_and(|r| r.ended.is_some()));
    let ended = ended.unwrap_or_else(|| panic!("the stalled attempt ends within {WAIT:?}"));
    let held = ended[0].ended.expect("ended") - ended[0].at;
    assert!(
        (Duration::from_millis(800)..Duration::from_secs(5)).contains(&held),
        "--webhook-timeout 1 ends the attempt after a second: {held:?}"
    );
    let d = wait_state(&app, &id_of(&slow), &evt, "pending", 1);
    let expected = [
        ("last_status", Value::Null),
        ("last_error", json!("timed out")),
    ];
    assert_fields(&d, &expected, "a timeout");

    dropped.wait_for(1, WAIT, "the attempt whose connection is dropped");
    let d = wait_state(&app, &id_of(&gone), &evt, "pending", 1);
    assert_eq!(d["last_status"], Value::Null, "no status: {d}");
    let error = str_of(&d, "last_error");
    let short = error.len() <= 100 && !error.starts_with("HTTP ") && error != "timed out";
    assert!(short, "a short sentence of its own: {d}");
    let d = wait_state(&app, &id_of(&too_late), &evt, "pending", 1);
    let expected = [
        ("last_status", Value::Null),
        ("last_error", json!("timed out")),
    ];
    assert_fields(&d, &expected, "a 200 after the timeout is a timeout");
    let d = wait_state(&app, &id_of(&in_time), &evt, "succeeded", 1);
    assert_eq!(d["last_status"], 204, "a 2xx within the timeout: {d}");
    let counts = [
        stalled.count(),
        dropped.count(),
        late.count(),
        slow_ok.count(),
    ];
    assert_eq!(counts, [1; 4], "one attempt each");
}

#[test]
fn retry_queues_exactly_one_more_attempt_now() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    rx.set(Behaviour::status(500));
    let ep = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let other = new_endpoint(&app, &rx.url_at("/other"), &["budget.closed"]);
    let id = id_of(&ep);
    let (_, evt) = new_tenant(&app, "retried-by-hand");
    rx.wait_for(FAST_ATTEMPTS, WAIT, "the schedule");
    let failed = wait_state(&app, &id, &evt, "failed", FAST_ATTEMPTS as u64);
    let whd = id_of(&failed);

    rx.set(Behaviour::status(200));
    let before = now_ms();
    let resp = retry(&app, &id, &whd);
    assert_eq!(resp.status, 202, "a retry: {}", resp.describe());
    let queued = resp.json();
    assert_delivery(&queued, "the retry's answer");
    assert_eq!(queued["id"], json!(whd), "the same delivery");
    assert_eq!(
        queued["state"], "pending",
        "pending until the attempt ends: {queued}"
    );
    let next = timestamp_ms(str_of(&queued, "next_attempt_at"));
    assert!(
        (before - 1000..=now_ms() + 1000).contains(&next),
        "next is now: {queued}"
    );
    rx.wait_for(FAST_ATTEMPTS + 1, WAIT, "the attempt of the retry");
    wait_state(&app, &id, &evt, "succeeded", FAST_ATTEMPTS as u64 + 1);

    rx.set(Behaviour::status(500));
    assert_eq!(retry(&app, &id, &whd).status, 202, "a retry of a success");
    rx.wait_for(FAST_ATTEMPTS + 2, WAIT, "its one attempt");
    let d = wait_state(&app, &id, &evt, "failed", FAST_ATTEMPTS as u64 + 2);
    assert_eq!(d["last_error"], "HTTP 500", "{d}");
    thread::sleep(SETTLE);
    assert_eq!(
        rx.count(),
        FAST_ATTEMPTS + 2,
        "one attempt per retry, no schedule after"
    );

    let nf = "delivery_not_found";
    let foreign = retry(&app, &id_of(&other), &whd);
    assert_problem(&foreign, 404, nf, "another endpoint's delivery");
    assert_problem(
        &retry(&app, &id, &unknown_delivery()),
        404,
        nf,
        "an unknown delivery",
    );
    assert_problem(
        &retry(&app, &id, "whd_nope"),
        404,
        nf,
        "a malformed delivery id",
    );
    patch_ok(&app, &id, &json!({ "enabled": false }));
    let disabled = retry(&app, &id, &whd);
    assert_problem(
        &disabled,
        409,
        "webhook_endpoint_disabled",
        "a disabled endpoint",
    );
    assert_eq!(
        rx.count(),
        FAST_ATTEMPTS + 2,
        "the refused retries sent nothing"
    );
}

#[test]
fn after_n_failures_in_a_row_the_endpoint_is_disabled_and_enabling_resumes_it() {
    let app = spawn_hooks_with_disable_after(3);
    let rx = Receiver::start();
    rx.set(Behaviour::status(500));
    let ep = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let id = id_of(&ep);
    let (_, first) = new_tenant(&app, "failing-1");
    let disabled = poll(WAIT, || {
        let ep = read_endpoint(&app, &id);
        (ep["state"] == "disabled").then_some(ep)
    });
    let disabled = disabled.unwrap_or_else(|| panic!("disabled within {WAIT:?}"));
    assert_eq!(disabled["disabled_reason"], "failing", "{disabled}");
    let payload = json!({ "id": id, "url": rx.url(), "event_types": ["tenant.created"],
                          "tenant_id": null, "enabled": false });
    assert_last_event(
        &app,
        "webhook_endpoint.updated",
        "system",
        payload,
        "disabled",
    );
    assert_eq!(rx.count(), 3, "three attempts");
    let d = wait_state(&app, &id, &first, "pending", 3);
    assert_eq!(d["last_error"], "HTTP 500", "{d}");
    thread::sleep(SETTLE);
    assert_eq!(rx.count(), 3, "no attempt while disabled");
    wait_state(&app, &id, &first, "pending", 3);

    let events = app.audit_count();
    let off = patch_ok(&app, &id, &json!({ "enabled": false }));
    assert_eq!(
        off["disabled_reason"], "failing",
        "disabling again changes nothing"
    );
    assert_events(&app, events, "and records nothing");
    let (_, second) = new_tenant(&app, "failing-2");

    rx.set(Behaviour::status(200));
    let on = patch_ok(&app, &id, &json!({ "enabled": true }));
    let expected = [
        ("state", json!("enabled")),
        ("disabled_reason", Value::Null),
    ];
    assert_fields(&on, &expected, "enabled again");
    rx.wait_for(4, WAIT, "the pending delivery resumed");
    wait_state(&app, &id, &first, "succeeded", 4);
    thread::sleep(SETTLE);
    assert_eq!(
        webhook_ids(&rx.requests()),
        [first],
        "the event of the disabled time never"
    );
    assert_eq!(delivery_of(&app, &id, &second), None, "no delivery of it");
    assert_verified(&[&secret_of(&ep)], &rx.requests(), "every attempt");
}

/// The server of most tests, disabling an endpoint after `n` failed attempts in a row.
fn spawn_hooks_with_disable_after(n: u32) -> TestApp {
    hook_app(1, FAST_SCHEDULE, true)
        .arg("--webhook-disable-after")
        .arg(&n.to_string())
        .spawn()
}

#[test]
fn a_disabled_endpoint_gets_no_new_event_and_resumes_its_pending_ones() {
    let wait = Duration::from_millis(1500);
    let app = hook_app(1, "1500ms,1500ms,1500ms", true).spawn();
    let rx = Receiver::start();
    rx.set(Behaviour::status(500));
    let ep = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let id = id_of(&ep);
    let (_, first) = new_tenant(&app, "paused-1");
    let attempt = rx.wait_for(1, WAIT, "the first attempt")[0].clone();
    let off = patch_ok(&app, &id, &json!({ "enabled": false }));
    assert!(
        attempt.at.elapsed() < wait.mul_f64(0.9),
        "disabled before the retry was due; too slow a machine for this test"
    );
    assert_eq!(off["disabled_reason"], "manual", "{off}");
    let (_, second) = new_tenant(&app, "paused-2");
    let due = attempt.at + wait.mul_f64(1.1) + Duration::from_millis(500);
    thread::sleep(due.saturating_duration_since(Instant::now()));
    assert_eq!(
        rx.count(),
        1,
        "no attempt while disabled, though one was due"
    );
    wait_state(&app, &id, &first, "pending", 1);

    rx.set(Behaviour::status(200));
    patch_ok(&app, &id, &json!({ "enabled": true }));
    rx.wait_for(2, WAIT, "the pending delivery resumed");
    wait_state(&app, &id, &first, "succeeded", 2);
    thread::sleep(SETTLE);
    assert_eq!(
        webhook_ids(&rx.requests()),
        [first],
        "never the event of the disabled time"
    );
    assert_eq!(delivery_of(&app, &id, &second), None, "no delivery of it");
}

#[test]
fn at_most_four_attempts_are_in_flight_per_endpoint_and_a_slow_one_delays_no_other() {
    let app = hook_app(30, FAST_SCHEDULE, true).spawn();
    let (slow_rx, fast_rx) = (Receiver::start(), Receiver::start());
    slow_rx.set(Behaviour::Stall);
    let slow = new_endpoint(&app, &slow_rx.url(), &["tenant.created"]);
    new_endpoint(&app, &fast_rx.url(), &["tenant.created"]);
    let mut events = Vec::new();
    for i in 0..10 {
        let started = Instant::now();
        events.push(new_tenant(&app, &format!("busy-{i}")).1);
        assert!(
            started.elapsed() < API_FAST,
            "a create while deliveries stall"
        );
    }
    let fast = fast_rx.wait_until(WAIT, |r| webhook_ids(r).len() >= events.len());
    assert!(fast.is_some(), "the other endpoint gets all ten meanwhile");
    slow_rx.wait_for(1, WAIT, "the stalled endpoint's first attempt");
    thread::sleep(SETTLE);
    let started = Instant::now();
    let listed = list_endpoints(&app);
    assert!(
        started.elapsed() < API_FAST,
        "a read while deliveries stall"
    );
    assert_eq!(listed.len(), 2);
    let open = slow_rx.count();
    assert!(
        (1..=4).contains(&open) && slow_rx.max_open() <= 4,
        "at most 4 attempts in flight: {open} open, at most {} at once",
        slow_rx.max_open()
    );

    slow_rx.set(Behaviour::status(200));
    let all = slow_rx.wait_until(WAIT, |r| webhook_ids(r).len() >= events.len());
    assert!(all.is_some(), "every event once the endpoint answers");
    // Counted from the receiver's answers: a connection's thread ends a moment after its
    // answer, when the sender may already have started its next attempt.
    assert!(
        slow_rx.max_unanswered() <= 4,
        "never more than 4 at once: {}",
        slow_rx.max_unanswered()
    );
    let mut expected = events.clone();
    expected.sort();
    assert_eq!(webhook_ids(&slow_rx.requests()), expected, "the ten events");
    assert_eq!(webhook_ids(&fast_rx.requests()), expected, "the ten events");
    let d = poll(WAIT, || {
        let all = deliveries(&app, &id_of(&slow), "state=succeeded");
        (all.len() == events.len()).then_some(all)
    });
    assert!(d.is_some(), "every delivery succeeded");
}

/// An endpoint enabled again sends at once what waited for a later attempt.
#[test]
fn enabling_an_endpoint_makes_its_waiting_deliveries_due_at_once() {
    let app = hook_app(1, SLOW_SCHEDULE, true).spawn();
    let rx = Receiver::start();
    rx.set(Behaviour::status(500));
    let endpoint = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let id = id_of(&endpoint);
    let (_, evt) = new_tenant(&app, "waiting");
    rx.wait_for(1, WAIT, "the first attempt");
    // Its failure recorded: an attempt still under way when the endpoint is enabled again
    // sets its own next attempt once it ends, a minute on.
    wait_state(&app, &id, &evt, "pending", 1);
    rx.set(Behaviour::status(200));
    patch_ok(&app, &id, &json!({ "enabled": false }));
    patch_ok(&app, &id, &json!({ "enabled": true }));
    // The schedule's next wait is a minute; enabled again, the attempt comes at once.
    rx.wait_for(
        2,
        Duration::from_secs(5),
        "the second attempt, right after the enable",
    );
}

/// An endpoint disabled and enabled again while its attempts stall: the attempts still
/// running count against the bound of 4, and a delivery being attempted is not sent again.
#[test]
fn attempts_under_way_when_an_endpoint_is_disabled_still_count_once_it_is_enabled() {
    let app = hook_app(30, FAST_SCHEDULE, true).spawn();
    let rx = Receiver::start();
    rx.set(Behaviour::Stall);
    let endpoint = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let id = id_of(&endpoint);
    let mut events = Vec::new();
    for i in 0..8 {
        events.push(new_tenant(&app, &format!("toggled-{i}")).1);
    }
    rx.wait_for(4, WAIT, "four stalled attempts");
    patch_ok(&app, &id, &json!({ "enabled": false }));
    thread::sleep(SETTLE);
    patch_ok(&app, &id, &json!({ "enabled": true }));
    thread::sleep(SETTLE * 2);
    assert_eq!(
        rx.count(),
        4,
        "no attempt beyond the four still under way: {} requests, {} at once",
        rx.count(),
        rx.max_open()
    );
    rx.set(Behaviour::status(200));
    let all = rx.wait_until(WAIT, |r| webhook_ids(r).len() >= events.len());
    assert!(all.is_some(), "every event once the endpoint answers");
    // Counted from the receiver's answers, as in the test above.
    assert!(
        rx.max_unanswered() <= 4,
        "never more than 4 at once: {}",
        rx.max_unanswered()
    );
    let sent = rx.requests().len();
    assert_eq!(sent, events.len(), "no event sent twice");
}

// ---------------------------------------------------------------------------------------
// Addresses

#[test]
fn loopback_addresses_are_refused_at_each_attempt_without_allow_private() {
    let app = hook_app(1, SLOW_SCHEDULE, false).spawn();
    let rx = Receiver::start();
    let port = rx.port();
    let urls = [
        rx.url(),
        rx.localhost_url(),
        rx.ipv6_url(),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://0.0.0.0:{port}/hook"),
        format!("http://127.1.2.3:{port}/hook"),
    ];
    let ids: Vec<String> = urls
        .iter()
        .map(|url| id_of(&new_endpoint(&app, url, &["*"])))
        .collect();
    let (_, evt) = new_tenant(&app, "refused");
    for (id, url) in ids.iter().zip(&urls) {
        let d = wait_state(&app, id, &evt, "pending", 1);
        let expected = [
            ("last_status", Value::Null),
            ("last_error", json!("address not allowed")),
        ];
        assert_fields(&d, &expected, &format!("an attempt to {url}"));
    }
    assert_eq!(rx.connections(), 0, "refused without connecting");
}

#[test]
fn allow_private_delivers_to_loopback_by_name_and_by_address() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let mut urls = vec![
        rx.url(),
        rx.localhost_url(),
        format!("http://[::ffff:127.0.0.1]:{}/hook", rx.port()),
    ];
    if rx.has_ipv6() {
        urls.push(rx.ipv6_url());
    } else {
        eprintln!("no IPv6 loopback here: [::1] is checked only for its refusal");
    }
    let eps: Vec<Value> = urls.iter().map(|u| new_endpoint(&app, u, &["*"])).collect();
    let (_, evt) = new_tenant(&app, "allowed");
    let reqs = rx.wait_for(urls.len(), WAIT, "an attempt per endpoint");
    for ep in &eps {
        wait_state(&app, &id_of(ep), &evt, "succeeded", 1);
    }
    assert_eq!(rx.count(), urls.len(), "one attempt each");
    let v6 = reqs.iter().filter(|r| r.local.is_ipv6()).count();
    assert_eq!(v6 > 0, rx.has_ipv6(), "[::1] reached over IPv6: {reqs:?}");
    let secrets: Vec<String> = eps.iter().map(secret_of).collect();
    let mut items = Vec::new();
    for req in &reqs {
        assert_eq!(
            assert_attempt(&app, req, "/hook", "an allowed attempt"),
            evt
        );
        items.extend(secrets.iter().map(|s| item(&[s], req)));
    }
    let lines = library(&items);
    for (i, verdicts) in lines.chunks(secrets.len()).enumerate() {
        let oks = verdicts.iter().filter(|l| *l == "ok").count();
        assert_eq!(
            oks, 1,
            "attempt {i}: its endpoint's secret verifies it: {verdicts:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Secrets

#[test]
fn a_rotation_signs_with_both_secrets_and_a_second_drops_the_oldest() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let ep = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let id = id_of(&ep);
    let s0 = secret_of(&ep);
    let rotated = rotate_ok(&app, &id, None);
    let s1 = secret_of(&rotated);
    assert_ne!(s1, s0, "a new secret");
    assert_eq!(
        without_secret(&rotated),
        without_secret(&ep),
        "nothing else changes"
    );
    assert_eq!(
        read_endpoint(&app, &id),
        without_secret(&ep),
        "GET shows no secret"
    );

    new_tenant(&app, "rotated-1");
    let first = rx.wait_for(1, WAIT, "an attempt after the rotation")[0].clone();
    let sigs = signatures(&first);
    assert_eq!(sigs.len(), 2, "the new signature, then the old: {sigs:?}");
    assert_verified(&[&s1, &s0], std::slice::from_ref(&first), "both secrets");
    for (sig, secret, which) in [(&sigs[0], &s1, "new"), (&sigs[1], &s0, "old")] {
        let mut alone = item(&[secret], &first);
        alone["headers"]["webhook-signature"] = json!(sig);
        assert_eq!(
            library(&[alone]),
            ["ok"],
            "the {which} secret's signature: {sigs:?}"
        );
    }

    let s2 = secret_of(&rotate_ok(&app, &id, Some("{}")));
    assert!(s2 != s1 && s2 != s0, "another new secret");
    new_tenant(&app, "rotated-2");
    let second = rx.wait_for(2, WAIT, "an attempt after the second rotation")[1].clone();
    assert_eq!(signatures(&second).len(), 2, "two signatures still");
    assert_verified(
        &[&s2, &s1],
        std::slice::from_ref(&second),
        "the new and the one it replaced",
    );
    assert_refused(item(&[&s0], &second), "the oldest secret");
}

#[test]
fn the_secret_is_in_no_log_no_file_and_no_other_answer() {
    let app = hook_app(1, FAST_SCHEDULE, true)
        .env("RUST_LOG", "trace")
        .spawn();
    let rx = Receiver::start();
    rx.plan(&[Behaviour::status(500)]);
    let admin = app.admin();
    let mut answers: Vec<String> = Vec::new();
    let mut keep = |resp: Response| answers.push(resp.text());

    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let id = id_of(&ep);
    keep(get_endpoint(&app, &id));
    keep(get_as(&app, &admin, ENDPOINTS));
    keep(patch_endpoint(
        &app,
        &id,
        &json!({ "description": "before" }),
    ));
    let (_, before) = new_tenant(&app, "secretive-1");
    wait_state(&app, &id, &before, "succeeded", 2);
    let rotated = rotate_ok(&app, &id, None);
    let (_, after) = new_tenant(&app, "secretive-2");
    wait_state(&app, &id, &after, "succeeded", 1);
    assert_verified(
        &[&secret_of(&ep)],
        &rx.requests()[..2],
        "before the rotation",
    );
    assert_verified(&[&secret_of(&rotated)], &rx.requests()[2..], "after it");
    keep(patch_endpoint(
        &app,
        &id,
        &json!({ "description": "after" }),
    ));
    keep(get_endpoint(&app, &id));
    keep(get_as(&app, &admin, ENDPOINTS));
    keep(get_as(&app, &admin, &deliveries_path(&id, "")));
    let whd = id_of(&deliveries(&app, &id, "")[0]);
    keep(retry(&app, &id, &whd));
    rx.wait_for(4, WAIT, "the retried attempt");
    keep(get_as(&app, &admin, &deliveries_path(&id, "")));
    keep(get_as(&app, &admin, "/v1/events"));
    keep(get_as(&app, &admin, &format!("/v1/events/{after}")));
    keep(rotate(&app, &unknown_endpoint(), None));
    keep(patch_endpoint(
        &app,
        &id,
        &json!({ "secret": secret_of(&ep) }),
    ));
    keep(delete_endpoint(&app, &id));
    keep(get_endpoint(&app, &id));

    let log = app.log_text();
    let below_info = log.contains(" DEBUG ") || log.contains(" TRACE ");
    assert!(below_info, "RUST_LOG=trace logs below info; log:\n{log}");
    let contents = app.db_contents();
    for secret in [secret_of(&ep), secret_of(&rotated)] {
        let b64 = secret.trim_start_matches("whsec_").to_owned();
        for needle in [&secret, &b64] {
            assert!(!log.contains(needle.as_str()), "a secret in the log");
            let stored = contains_bytes(&contents, needle.as_bytes());
            assert!(!stored, "a secret's text in the database");
            if app.backend() == Backend::Sqlite {
                let files = files_holding(app.dir.path(), needle.as_bytes());
                assert!(files.is_empty(), "a secret's text in {files:?}");
            }
            for text in &answers {
                assert!(
                    !text.contains(needle.as_str()),
                    "a secret in an answer: {text}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Restarts and lists of deliveries

#[test]
fn pending_and_in_flight_deliveries_survive_kill_9() {
    let mut app = hook_app(2, "1s,1s,1s", true).spawn();
    let (failing, stalled) = (Receiver::start(), Receiver::start());
    failing.set(Behaviour::status(500));
    stalled.set(Behaviour::Stall);
    let a = new_endpoint(&app, &failing.url(), &["tenant.created"]);
    let b = new_endpoint(&app, &stalled.url(), &["tenant.created"]);
    let (_, evt) = new_tenant(&app, "survivor");
    failing.wait_for(1, WAIT, "a failed attempt");
    stalled.wait_for(1, WAIT, "an attempt in flight");
    app.kill();
    let (failed_before, stalled_before) = (failing.count(), stalled.count());
    failing.set(Behaviour::status(200));
    stalled.set(Behaviour::status(200));
    app.start();
    failing.wait_for(
        failed_before + 1,
        WAIT,
        "the pending delivery after the restart",
    );
    stalled.wait_for(
        stalled_before + 1,
        WAIT,
        "the attempt cut by kill -9, again",
    );
    wait_delivery(&app, &id_of(&a), &evt, "a", |d| d["state"] == "succeeded");
    wait_delivery(&app, &id_of(&b), &evt, "b", |d| d["state"] == "succeeded");
    for rx in [&failing, &stalled] {
        let reqs = rx.requests();
        assert_eq!(webhook_ids(&reqs), [evt.as_str()], "the same event");
        let last = reqs.last().expect("an attempt");
        assert_eq!(
            assert_attempt(&app, last, "/hook", "after the restart"),
            evt
        );
    }
    let verify = app.audit_verify();
    assert_eq!(verify.code, Some(0), "audit verify: {verify:?}");
}

#[test]
fn a_pending_delivery_survives_a_graceful_restart() {
    let mut app = hook_app(1, "1s,1s,1s", true).spawn();
    let rx = Receiver::start();
    rx.set(Behaviour::status(500));
    let ep = new_endpoint(&app, &rx.url(), &["*"]);
    let (_, evt) = new_tenant(&app, "restarted");
    rx.wait_for(1, WAIT, "a failed attempt");
    app.restart();
    let before = rx.count();
    rx.set(Behaviour::status(200));
    rx.wait_for(before + 1, WAIT, "the attempt after the restart");
    wait_delivery(&app, &id_of(&ep), &evt, "after a restart", |d| {
        d["state"] == "succeeded"
    });
    assert_verified(&[&secret_of(&ep)], &rx.requests(), "every attempt");
}

#[test]
fn deliveries_list_in_id_order_with_state_and_event_filters() {
    let app = spawn_hooks();
    let rx = Receiver::start();
    let ep = new_endpoint(&app, &rx.url(), &["tenant.created"]);
    let id = id_of(&ep);
    let ok: Vec<String> = (0..3)
        .map(|i| new_tenant(&app, &format!("listed-{i}")).1)
        .collect();
    for evt in &ok {
        wait_state(&app, &id, evt, "succeeded", 1);
    }
    rx.set(Behaviour::status(500));
    let (_, bad) = new_tenant(&app, "listed-failing");
    wait_state(&app, &id, &bad, "failed", FAST_ATTEMPTS as u64);

    let path = deliveries_path(&id, "");
    let page = get_as(&app, &app.admin(), &path);
    assert_ok(&page, "the deliveries");
    for text in raw_items(&page.text(), "the deliveries") {
        assert_eq!(
            member_names(&text, "a delivery"),
            DELIVERY_MEMBERS,
            "in order"
        );
    }
    let all = deliveries(&app, &id, "");
    let events: Vec<String> = all
        .iter()
        .map(|d| str_of(d, "event_id").to_owned())
        .collect();
    assert_eq!(events.len(), 4, "a delivery per event: {all:?}");
    assert_eq!(
        sorted(&events[..3]),
        sorted(&ok),
        "the first three: {all:?}"
    );
    assert_eq!(
        events[3], bad,
        "the later event's delivery sorts last: {all:?}"
    );

    let first = list_page(&app, &app.admin(), &deliveries_path(&id, "limit=3"));
    assert_eq!(first["data"], json!(all[..3]), "a page of three");
    assert_eq!(first["has_more"], true);
    let after = str_of(&first, "next_after");
    let rest = list_page(
        &app,
        &app.admin(),
        &deliveries_path(&id, &format!("after={after}")),
    );
    assert_eq!(rest["data"], json!(all[3..]), "the rest after it");

    let succeeded = deliveries(&app, &id, "state=succeeded");
    assert_eq!(succeeded, all[..3], "state=succeeded");
    assert_eq!(
        deliveries(&app, &id, "state=failed"),
        all[3..],
        "state=failed"
    );
    assert!(
        deliveries(&app, &id, "state=pending").is_empty(),
        "state=pending"
    );
    let one = deliveries(&app, &id, &format!("event_id={bad}&state=failed"));
    assert_eq!(one, all[3..], "event_id and state");
    let none = format!("event_id=evt_{}", "0".repeat(ULID_CHARS));
    assert!(
        deliveries(&app, &id, &none).is_empty(),
        "an event of no delivery"
    );
    for (query, field) in [
        ("state=bogus", "state"),
        ("limit=0", "limit"),
        ("type=tenant.created", "type"),
    ] {
        let resp = get_as(&app, &app.admin(), &deliveries_path(&id, query));
        let problem = assert_problem(&resp, 400, "invalid_query", query);
        assert_eq!(error_fields(&problem, query), [field], "{query}: named");
    }
}

// ---------------------------------------------------------------------------------------
// The harness itself: the receiver and the third-party verifier, without a server

/// One request to a receiver on a fresh connection, as a client that reads to the close.
fn post_to(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<Response> {
    wire::try_request(addr, "POST", path, headers, Some(body)).ok()
}

#[test]
fn the_receiver_records_every_request_and_answers_as_told() {
    let rx = Receiver::start();
    let addr = format!("127.0.0.1:{}", rx.port());
    let headers = [("X-Thing", "a b"), ("Content-Type", "application/json")];
    let ok = post_to(&addr, "/hook", &headers, b"{\"a\":1}").expect("an answer");
    assert_eq!(ok.status, 200, "200 by default: {}", ok.describe());
    let got = &rx.requests()[0];
    assert_eq!((got.method.as_str(), got.path.as_str()), ("POST", "/hook"));
    assert_eq!(got.header("x-thing"), Some("a b"), "{got:?}");
    assert_eq!(got.body, b"{\"a\":1}", "the raw body");
    assert!(got.ended.is_some(), "answered");

    rx.plan(&[Behaviour::status_with_body(500, "boom")]);
    let failed = post_to(&addr, "/hook", &[], b"x").expect("an answer");
    assert_eq!((failed.status, failed.text()), (500, "boom".to_owned()));
    assert_eq!(
        post_to(&addr, "/hook", &[], b"x").map(|r| r.status),
        Some(200)
    );
    rx.set(Behaviour::redirect(&rx.url_at("/elsewhere")));
    let moved = post_to(&addr, "/hook", &[], b"x").expect("an answer");
    assert_eq!(moved.status, 302);
    assert_eq!(
        moved.header("location"),
        Some(rx.url_at("/elsewhere").as_str())
    );
    rx.set(Behaviour::Drop);
    assert!(
        post_to(&addr, "/hook", &[], b"x").is_none(),
        "dropped: no answer"
    );
    rx.set(Behaviour::status(200).after(Duration::from_millis(300)));
    let started = Instant::now();
    assert_eq!(
        post_to(&addr, "/hook", &[], b"x").map(|r| r.status),
        Some(200)
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "answered after the delay"
    );
    rx.set(Behaviour::status(200));
    let framing = [
        ("Host", addr.as_str()),
        ("Connection", "close"),
        ("Transfer-Encoding", "chunked"),
    ];
    let bytes = wire::request_bytes(
        "POST",
        "/chunked",
        wire::HTTP_11,
        &framing,
        Some(&wire::chunked(b"in chunks", 4)),
    );
    wire::raw(&addr, &bytes);
    assert_eq!(
        rx.requests_to("/chunked")[0].body,
        b"in chunks",
        "chunks joined"
    );

    rx.set(Behaviour::Stall);
    let stalled = format!("POST /stall HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1\r\n\r\nx");
    let mut conns: Vec<wire::Conn> = (0..3).map(|_| wire::Conn::open(&addr)).collect();
    for conn in &mut conns {
        conn.send(stalled.as_bytes());
    }
    rx.wait_for(10, WAIT, "three stalled requests");
    assert!(
        conns[0].response(Duration::from_millis(300)).is_none(),
        "no answer while stalled"
    );
    let gone = conns.pop().expect("a connection");
    gone.shutdown();
    drop(gone);
    let left = rx.wait_until(WAIT, |r| {
        r.iter()
            .filter(|r| r.path == "/stall" && r.ended.is_some())
            .count()
            == 1
    });
    assert!(
        left.is_some(),
        "a client that hangs up ends its stalled request"
    );
    rx.set(Behaviour::status(201));
    for conn in &mut conns {
        let answer = conn.response(WAIT).expect("answered once released");
        assert_eq!(answer.status, 201, "as the new behaviour says");
    }
    assert_eq!(rx.max_open(), 3, "three open at once");
    assert_eq!(rx.connections(), 10, "a connection per request");
    if rx.has_ipv6() {
        let v6 = format!("[::1]:{}", rx.port());
        assert_eq!(post_to(&v6, "/v6", &[], b"x").map(|r| r.status), Some(201));
        assert!(
            rx.requests_to("/v6")[0].local.is_ipv6(),
            "arrived over IPv6"
        );
    }
}

#[test]
fn the_verifier_takes_a_signature_the_library_made_and_refuses_others() {
    let rx = Receiver::start();
    let sign = r#"
import base64, json, os
from datetime import datetime, timezone
import standardwebhooks
secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
body = '{"id":"evt_01ARZ3NDEKTSV4RRFFQ69G5FAV","memo":"\u00fc \\"q\\""}'
now = datetime.now(tz=timezone.utc)
sig = standardwebhooks.Webhook(secret).sign("evt_01ARZ3NDEKTSV4RRFFQ69G5FAV", now, body)
print(json.dumps({"secret": secret, "sig": sig, "ts": str(int(now.timestamp())), "body": body}))
"#;
    let python = venv_python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/webhook-deps.sh",
        python.display()
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(sign)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let signed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let secret = str_of(&signed, "secret").to_owned();
    assert!(is_secret(&secret), "the shape of a secret: {secret}");
    let headers = [
        ("webhook-id", "evt_01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        ("Webhook-Timestamp", str_of(&signed, "ts")),
        ("webhook-signature", str_of(&signed, "sig")),
    ];
    let addr = format!("127.0.0.1:{}", rx.port());
    post_to(&addr, "/hook", &headers, str_of(&signed, "body").as_bytes()).expect("an answer");
    let reqs = rx.requests();
    assert_eq!(signatures(&reqs[0]).len(), 1, "one signature");
    assert_verified(&[&secret], &reqs, "a signature the library made");
    let other = format!("whsec_{}=", "A".repeat(43));
    assert!(is_secret(&other), "the shape of a secret: {other}");
    assert_refused(item(&[&other], &reqs[0]), "another secret");
    let lines = library(&[item(&[&secret, &other], &reqs[0])]);
    assert!(
        lines[0].starts_with("fail: secret 1"),
        "both must verify: {lines:?}"
    );
}
