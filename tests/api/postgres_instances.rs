//! Many tenantd instances on one PostgreSQL database, and a fail-over of that database.
//!
//! Three `tenantd serve` processes share a database of their own on the test cluster (see
//! scripts/with-postgres.sh); requests are spread over them, at once, from many threads. Every
//! rule must hold as with one instance: one tenant per name, one effect per key, no budget
//! overspent, one gapless chain (`audit verify`), a tombstone revoking the token everywhere,
//! expiries recorded once, nothing acknowledged lost when an instance is killed (cycle after
//! cycle, any of the three and the one chaining among them, in `kill_loop`), and every
//! event delivered to each webhook endpoint once, as if one instance sent it. The fail-over
//! test runs a primary and a synchronous standby of its own, kills the primary under
//! write load and promotes the standby.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::*;
use crate::wire::{self, Response};

mod kill_loop;
mod tree;

/// Instances started on one database.
const INSTANCES: usize = 3;

/// The webhook flags of [`Instances::start_with`]'s instances: http to the test's receivers
/// on the loopback, one-second attempts, and two quick retries.
const HOOK_FLAGS: [&str; 6] = [
    "--webhook-allow-http",
    "--webhook-allow-private",
    "--webhook-timeout",
    "1",
    "--webhook-retry-schedule",
    "200ms,200ms",
];

/// tenantd processes serving one database, with one admin token.
struct Instances {
    dir: TempDir,
    db: String,
    args: Vec<String>,
    admin: String,
    servers: Vec<Option<Child>>,
    addrs: Vec<String>,
    log: LogBuffer,
}

impl Instances {
    /// Starts `n` instances on the database at `db`, one after another (the first applies
    /// the schema).
    fn start(db: &str, n: usize) -> Self {
        Self::start_with(db, n, &[])
    }

    /// As [`Instances::start`], each instance with `args` after the standard flags.
    fn start_with(db: &str, n: usize, args: &[&str]) -> Self {
        let dir = TempDir::new().expect("a temporary directory");
        let admin_token = random_admin_token();
        write_private(&dir.path().join("admin-token"), &format!("{admin_token}\n"));
        let mut instances = Self {
            dir,
            db: db.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            admin: bearer(&admin_token),
            servers: Vec::new(),
            addrs: Vec::new(),
            log: Arc::new(Mutex::new(Vec::new())),
        };
        for slot in 0..n {
            let server = instances.spawn(slot);
            instances.addrs.push(server.addr);
            instances.servers.push(Some(server.child));
        }
        instances
    }

    /// A server for slot `slot`. On PostgreSQL its connections carry the application name
    /// [`instance_name`]`(slot)`, so that `pg_stat_activity` tells the instances apart (a
    /// SQLite file's path is left as it is).
    fn spawn(&self, slot: usize) -> Server {
        let db = if self.db.contains("://") {
            let sep = if self.db.contains('?') { '&' } else { '?' };
            format!("{}{sep}application_name={}", self.db, instance_name(slot))
        } else {
            self.db.clone()
        };
        let mut cmd = tenantd_command(self.dir.path());
        let token = self.dir.path().join("admin-token");
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--db", &db])
            .arg("--admin-token-file")
            .arg(&token)
            .args(&self.args);
        start_server(cmd, &self.log)
    }

    /// SIGKILL of instance `i`.
    fn kill(&mut self, i: usize) {
        let mut child = self.servers[i].take().expect("a running instance");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaping the instance");
    }

    /// Starts a fresh server in the slot of killed instance `i`; it listens on a new port,
    /// which `addrs[i]` then holds.
    fn restart(&mut self, i: usize) {
        assert!(self.servers[i].is_none(), "instance {i} is still running");
        let server = self.spawn(i);
        self.addrs[i] = server.addr;
        self.servers[i] = Some(server.child);
    }

    fn log_text(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }
}

impl Drop for Instances {
    fn drop(&mut self) {
        for child in self.servers.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The application name of the connections of the instance in slot `slot`.
fn instance_name(slot: usize) -> String {
    format!("tenantd-{slot}")
}

/// `POST path` of a JSON body (and a key, if any) to `addr`; `None` for a transport error,
/// which the threads here expect of an instance killed under them.
fn post(addr: &str, auth: &str, path: &str, body: &Value, key: Option<&str>) -> Option<Response> {
    try_send(addr, "POST", path, auth, Some(&body.to_string()), key, &[]).ok()
}

/// Creates a tenant through `addr`: the tenant, its id and its default budget's id.
fn create_tenant(addr: &str, admin: &str, name: &str, deposit: &str) -> (Value, String, String) {
    let body = json!({ "name": name, "opening_deposit_atomic": deposit });
    let created = post(addr, admin, "/v1/tenants", &body, None).expect("a create is answered");
    assert_eq!(created.status, 201, "{}", created.describe());
    let tenant = created.json();
    let tid = tenant["id"].as_str().expect("an id").to_owned();
    let bid = tenant["budget"]["id"]
        .as_str()
        .expect("a budget id")
        .to_owned();
    (tenant, tid, bid)
}

/// Every acknowledged create (name, id) reads back through `addr`.
fn assert_found(addr: &str, admin: &str, acknowledged: &[(String, String)]) {
    for (name, id) in acknowledged {
        let resp = get(addr, admin, &format!("/v1/tenants/{id}"));
        assert_eq!(
            resp.status,
            200,
            "{name} was acknowledged: {}",
            resp.describe()
        );
    }
}

fn get(addr: &str, auth: &str, path: &str) -> Response {
    wire::request(addr, "GET", path, &[("Authorization", auth)], None)
}

/// Every item of the list at `path` (which may carry a query) through `addr`, every page
/// followed.
fn list_all_at(addr: &str, auth: &str, path: &str) -> Vec<Value> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut items = Vec::new();
    let mut after = String::new();
    loop {
        let page = get(addr, auth, &format!("{path}{sep}limit=1000{after}"));
        assert_eq!(page.status, 200, "GET {path}: {}", page.describe());
        let page = page.json();
        items.extend(
            page["data"]
                .as_array()
                .expect("a page's data")
                .iter()
                .cloned(),
        );
        match page["next_after"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return items,
        }
    }
}

/// `tenantd audit verify` passes on `db`; what it printed.
fn assert_verifies(db: &str, ctx: &str) -> String {
    let out = audit_verify(Path::new(db));
    assert_eq!(
        out.code,
        Some(0),
        "{ctx}: audit verify failed: {}",
        out.stderr
    );
    out.stdout
}

#[test]
fn three_instances_keep_every_rule_on_one_database() {
    let db = TestDb::new();
    let instances = Instances::start(&db.url, INSTANCES);
    let admin = instances.admin.clone();

    // Names: ten names sent through every instance at once, and ten of each instance's own.
    // One tenant per name; the rest are 409 name_taken.
    let statuses = Arc::new(Mutex::new(BTreeMap::<String, Vec<u16>>::new()));
    let workers: Vec<_> = instances
        .addrs
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let (addr, admin, statuses) = (addr.clone(), admin.clone(), Arc::clone(&statuses));
            thread::spawn(move || {
                for n in 0..10 {
                    for name in [format!("shared-{n}"), format!("own-{i}-{n}")] {
                        let body = json!({ "name": name, "opening_deposit_atomic": "1" });
                        let resp = post(&addr, &admin, "/v1/tenants", &body, None)
                            .expect("a create is answered");
                        statuses
                            .lock()
                            .unwrap()
                            .entry(name)
                            .or_default()
                            .push(resp.status);
                    }
                }
            })
        })
        .collect();
    workers
        .into_iter()
        .for_each(|w| w.join().expect("a create worker"));
    for (name, got) in statuses.lock().unwrap().iter() {
        let created = got.iter().filter(|s| **s == 201).count();
        assert_eq!(
            created,
            1,
            "{name}: exactly one create succeeds: {got:?}; log:\n{}",
            instances.log_text()
        );
        assert!(
            got.iter().all(|s| *s == 201 || *s == 409),
            "{name}: the others are refused as taken: {got:?}"
        );
    }

    // Keys: one key sent through every instance at once has one effect, and every answer
    // is that effect.
    for k in 0..5 {
        let key = format!("key-{k}");
        let workers: Vec<_> = instances
            .addrs
            .iter()
            .map(|addr| {
                let (addr, admin, key) = (addr.clone(), admin.clone(), key.clone());
                thread::spawn(move || {
                    let body =
                        json!({ "name": format!("keyed-{key}"), "opening_deposit_atomic": "7" });
                    let resp = post(&addr, &admin, "/v1/tenants", &body, Some(&key))
                        .expect("a keyed create is answered");
                    assert_eq!(resp.status, 201, "{key}: {}", resp.describe());
                    resp.json()["id"].as_str().expect("an id").to_owned()
                })
            })
            .collect();
        let ids: BTreeSet<String> = workers
            .into_iter()
            .map(|w| w.join().expect("a keyed worker"))
            .collect();
        assert_eq!(
            ids.len(),
            1,
            "{key}: one tenant for the key, whoever answered: {ids:?}"
        );
    }
    assert_eq!(
        psql(&db.url, "SELECT count(*) FROM tenants"),
        (10 + 10 * INSTANCES + 5).to_string(),
        "every name once, every key once"
    );

    // Reservations: a budget that funds exactly 20 holds of 10, reserved from every
    // instance by many threads at once, grants exactly 20.
    let (tenant, tid, bid) = create_tenant(&instances.addrs[0], &admin, "spender", "200");
    let token = bearer(&tenant_token(&tenant));
    let workers: Vec<_> = (0..12)
        .map(|t| {
            let addr = instances.addrs[t % INSTANCES].clone();
            let (token, tid, bid) = (token.clone(), tid.clone(), bid.clone());
            thread::spawn(move || {
                let mut granted = 0;
                for _ in 0..4 {
                    let body =
                        json!({ "budget_id": bid, "amount_atomic": "10", "ttl_seconds": 300 });
                    let resp = post(&addr, &token, &reservations_path(&tid), &body, None)
                        .expect("a reserve is answered");
                    match resp.status {
                        201 => granted += 1,
                        409 => assert_eq!(resp.json()["code"], "insufficient_funds"),
                        other => panic!("a reserve answered {other}: {}", resp.describe()),
                    }
                }
                granted
            })
        })
        .collect();
    let granted: usize = workers
        .into_iter()
        .map(|w| w.join().expect("a reserver"))
        .sum();
    assert_eq!(granted, 20, "exactly what the budget funds is granted");
    let budget = get(&instances.addrs[2], &token, &budget_path(&tid, &bid, "")).json();
    assert_eq!(budget["reserved_atomic"], "200", "{budget}");
    assert_eq!(budget["available_atomic"], "0", "{budget}");

    // A tombstone through one instance revokes the token on every instance at once.
    let gone = wire::request(
        &instances.addrs[0],
        "DELETE",
        &format!("/v1/tenants/{tid}"),
        &[("Authorization", &admin)],
        None,
    );
    assert_eq!(gone.status, 200, "{}", gone.describe());
    for addr in &instances.addrs {
        let resp = get(addr, &token, &format!("/v1/tenants/{tid}"));
        assert_eq!(resp.status, 401, "the token is revoked on {addr}");
    }

    let verified = assert_verifies(&db.url, "three instances");
    let events = psql(&db.url, "SELECT count(*) FROM audit_events");
    assert!(verified.contains(&format!("{events} events")), "{verified}");
    assert_eq!(
        psql(&db.url, "SELECT max(seq) = count(*) FROM audit_events"),
        "t",
        "the chain is gapless"
    );
    drop(instances);
}

#[test]
fn killing_an_instance_under_load_loses_nothing_acknowledged() {
    let db = TestDb::new();
    let mut instances = Instances::start(&db.url, INSTANCES);
    let admin = instances.admin.clone();
    let stop_at = Instant::now() + Duration::from_secs(3);
    let acknowledged = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let workers: Vec<_> = (0..6)
        .map(|t| {
            let addr = instances.addrs[t % INSTANCES].clone();
            let (admin, acknowledged) = (admin.clone(), Arc::clone(&acknowledged));
            thread::spawn(move || {
                let mut n = 0;
                while Instant::now() < stop_at {
                    let name = format!("load-{t}-{n}");
                    n += 1;
                    let body = json!({ "name": name, "opening_deposit_atomic": "5" });
                    let resp = post(&addr, &admin, "/v1/tenants", &body, None);
                    if let Some(resp) = resp.filter(|r| r.status == 201) {
                        let id = resp.json()["id"].as_str().unwrap().to_owned();
                        acknowledged.lock().unwrap().push((name, id));
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(1500));
    instances.kill(1);
    workers
        .into_iter()
        .for_each(|w| w.join().expect("a load worker"));
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 50,
        "the load was real: {} creates",
        acknowledged.len()
    );
    assert_found(&instances.addrs[0], &admin, &acknowledged);
    assert_verifies(&db.url, "after kill -9 of an instance");
    assert!(
        !instances.log_text().contains("panicked"),
        "no instance panicked:\n{}",
        instances.log_text()
    );
}

#[test]
fn every_instance_records_expiries_and_each_is_recorded_once() {
    let db = TestDb::new();
    let mut instances = Instances::start(&db.url, INSTANCES);
    let admin = instances.admin.clone();
    let (_, tid, bid) = create_tenant(&instances.addrs[0], &admin, "holder", "1000");
    // Holds taken through every instance, then the instance that took the first ones is
    // killed: the others must record those expiries too.
    for i in 0..30 {
        let body = json!({ "budget_id": bid, "amount_atomic": "10", "ttl_seconds": 1 });
        let resp = post(
            &instances.addrs[i % INSTANCES],
            &admin,
            &reservations_path(&tid),
            &body,
            None,
        )
        .expect("a reserve");
        assert_eq!(resp.status, 201, "{}", resp.describe());
    }
    instances.kill(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let expired = loop {
        let n: usize = psql(
            &db.url,
            "SELECT count(*) FROM ledger_entries WHERE kind = 'expire'",
        )
        .parse()
        .expect("a count");
        if n >= 30 || Instant::now() >= deadline {
            break n;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        expired, 30,
        "every hold's expiry is recorded, by the instances left"
    );
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        psql(
            &db.url,
            "SELECT count(*) FROM ledger_entries WHERE kind = 'expire'"
        ),
        "30",
        "and recorded once"
    );
    let budget = get(&instances.addrs[1], &admin, &budget_path(&tid, &bid, "")).json();
    assert_eq!(budget["reserved_atomic"], "0", "{budget}");
    assert_verifies(&db.url, "after expiries by many instances");
}

/// A primary and its synchronous standby of their own (scripts/postgres.sh), under the
/// build directory; both stopped and removed at the end.
struct Pair {
    dir: std::path::PathBuf,
}

impl Pair {
    fn start() -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/postgres")
            .join(format!("failover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let pair = Self { dir };
        pair.script(&["start", pair.path("primary").as_str()]);
        pair.script(&[
            "start",
            pair.path("standby").as_str(),
            "--standby-of",
            pair.path("primary").as_str(),
        ]);
        pair
    }

    fn path(&self, which: &str) -> String {
        self.dir
            .join(which)
            .to_str()
            .expect("a UTF-8 path")
            .to_owned()
    }

    fn file(&self, which: &str, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(which).join(name))
            .unwrap_or_else(|e| panic!("{which}/{name}: {e}"))
            .trim()
            .to_owned()
    }

    fn script(&self, args: &[&str]) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh");
        let out = Command::new("bash")
            .arg(script)
            .args(args)
            .output()
            .expect("scripts/postgres.sh runs");
        assert!(
            out.status.success(),
            "postgres.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The URL of both servers, the writable one chosen: what a deployment gives tenantd.
    fn url(&self) -> String {
        let single = self.file("primary", "url");
        let (auth, _) = single
            .strip_prefix("postgres://")
            .and_then(|rest| rest.split_once('@'))
            .expect("a URL with credentials");
        format!(
            "postgres://{auth}@127.0.0.1:{},127.0.0.1:{}/tenantd?target_session_attrs=read-write",
            self.file("primary", "port"),
            self.file("standby", "port"),
        )
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh");
        for which in ["standby", "primary"] {
            let _ = Command::new("bash")
                .arg(&script)
                .args(["kill", &self.path(which)])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_failover_to_the_synchronous_standby_loses_nothing_acknowledged() {
    let pair = Pair::start();
    let url = pair.url();
    let instances = Instances::start(&url, 2);
    let admin = instances.admin.clone();
    let stop_at = Arc::new(Mutex::new(None::<Instant>));
    let outcome = Arc::new(Mutex::new((Vec::<(String, String)>::new(), 0usize, 0usize)));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let addr = instances.addrs[t % 2].clone();
            let (admin, stop_at, outcome) =
                (admin.clone(), Arc::clone(&stop_at), Arc::clone(&outcome));
            thread::spawn(move || {
                let give_up = Instant::now() + Duration::from_secs(60);
                for n in 0.. {
                    if stop_at
                        .lock()
                        .unwrap()
                        .is_some_and(|at| Instant::now() >= at)
                    {
                        break;
                    }
                    // One name, one key: retried until answered, so a create whose COMMIT's
                    // outcome was unknown is settled by its key.
                    let name = format!("failover-{t}-{n}");
                    let body = json!({ "name": name, "opening_deposit_atomic": "3" });
                    loop {
                        assert!(Instant::now() < give_up, "{name}: never answered");
                        match post(&addr, &admin, "/v1/tenants", &body, Some(&name)) {
                            Some(resp) if resp.status == 201 => {
                                let id = resp.json()["id"].as_str().unwrap().to_owned();
                                outcome.lock().unwrap().0.push((name, id));
                                break;
                            }
                            Some(resp) if resp.status == 503 => outcome.lock().unwrap().1 += 1,
                            Some(resp) => panic!("{name}: {}", resp.describe()),
                            None => outcome.lock().unwrap().2 += 1,
                        }
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(1500));
    let before = outcome.lock().unwrap().0.len();
    pair.script(&["kill", pair.path("primary").as_str()]);
    thread::sleep(Duration::from_millis(500));
    pair.script(&["promote", pair.path("standby").as_str()]);
    let promoted = outcome.lock().unwrap().0.len();
    *stop_at.lock().unwrap() = Some(Instant::now() + Duration::from_secs(3));
    workers
        .into_iter()
        .for_each(|w| w.join().expect("a load worker"));
    let (acknowledged, unavailable, transport) = outcome.lock().unwrap().clone();
    assert!(
        before > 20,
        "writes went through before the fail-over: {before}"
    );
    assert!(
        acknowledged.len() > promoted + 20,
        "writes go through the promoted standby: {} after, {promoted} at the promotion; log:\n{}",
        acknowledged.len(),
        instances.log_text()
    );
    assert!(unavailable > 0, "the fail-over was seen as 503s");
    assert_eq!(transport, 0, "no connection to tenantd failed");
    let standby = pair.file("standby", "url");
    assert_found(&instances.addrs[0], &admin, &acknowledged);
    assert_eq!(
        psql(&standby, "SELECT count(*) FROM tenants"),
        acknowledged.len().to_string(),
        "one tenant for every acknowledged key, and none besides"
    );
    assert_verifies(&standby, "after the fail-over");
    eprintln!(
        "fail-over: {} creates acknowledged ({before} before the primary was killed, {promoted} \
         by its promotion), {unavailable} answers 503 meanwhile, none lost",
        acknowledged.len()
    );
}

#[test]
fn connections_the_server_ended_while_idle_are_replaced_unseen() {
    let db = TestDb::new();
    let instances = Instances::start(&db.url, 1);
    let (addr, admin) = (&instances.addrs[0], &instances.admin);
    let create = |name: &str| {
        let body = json!({ "name": name, "opening_deposit_atomic": "1" });
        post(addr, admin, "/v1/tenants", &body, None).expect("a create is answered")
    };
    let first = create("before");
    assert_eq!(first.status, 201, "{}", first.describe());
    let id = first.json()["id"].as_str().unwrap().to_owned();
    // Every connection of the instance is ended by the server (as a restart would).
    let ended = psql(
        db.admin_url(),
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{}'",
            db.name
        ),
    );
    assert!(
        ended.parse::<usize>().expect("a count") >= 3,
        "writer, readers: {ended}"
    );
    thread::sleep(Duration::from_millis(200));
    let after = create("after");
    assert_eq!(
        after.status,
        201,
        "the writer connects again: {}",
        after.describe()
    );
    let read = get(addr, admin, &format!("/v1/tenants/{id}"));
    assert_eq!(
        read.status,
        200,
        "a reader connects again: {}",
        read.describe()
    );
    let listed = get(addr, admin, "/v1/tenants");
    assert_eq!(listed.status, 200, "{}", listed.describe());
    assert_eq!(listed.json()["data"].as_array().map(Vec::len), Some(2));
}

/// Webhook endpoints of [`three_instances_deliver_each_event_once_to_each_endpoint`].
const ENDPOINTS: usize = 3;

/// Credits and debits written, spread over the instances.
const MOVEMENTS: usize = 300;

/// How long the deliveries of those events may take, from the last write: they take about
/// 2 s.
const DELIVERY_WAIT: Duration = Duration::from_secs(20);

/// How long the test watches for a late duplicate once everything arrived.
const DUPLICATE_WATCH: Duration = Duration::from_millis(1500);

#[test]
fn three_instances_deliver_each_event_once_to_each_endpoint() {
    let started = Instant::now();
    let db = TestDb::new();
    let instances = Instances::start_with(&db.url, INSTANCES, &HOOK_FLAGS);
    let admin = instances.admin.clone();
    let addrs = &instances.addrs;
    // Each endpoint its own receiver. Every answer is a 2xx well within the timeout; the
    // third receiver's come 25 ms late, so that its attempts overlap and meet the bound of 4.
    let receivers: Vec<Receiver> = (0..ENDPOINTS).map(|_| Receiver::start()).collect();
    receivers[1].set(Behaviour::status(204));
    receivers[2].set(Behaviour::status(200).after(Duration::from_millis(25)));
    let endpoints: Vec<String> = receivers
        .iter()
        .enumerate()
        .map(|(i, rx)| {
            let body = json!({ "url": rx.url(), "description": format!("receiver {i}") });
            let addr = &addrs[i % INSTANCES];
            let resp = post(addr, &admin, "/v1/webhook-endpoints", &body, None)
                .expect("an endpoint's create is answered");
            assert_eq!(resp.status, 201, "{}", resp.describe());
            resp.json()["id"].as_str().expect("an id").to_owned()
        })
        .collect();

    // A tenant through each instance, then credits and debits on them from six threads, each
    // request to the next instance in turn.
    let budgets: Vec<(String, String)> = (0..INSTANCES)
        .map(|i| {
            let (_, tid, bid) = create_tenant(&addrs[i], &admin, &format!("hooked-{i}"), "1000");
            (tid, bid)
        })
        .collect();
    let written = Instant::now();
    let threads = 6;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (addrs, admin, budgets) = (addrs.clone(), admin.clone(), budgets.clone());
            thread::spawn(move || {
                let mut entries = Vec::new();
                for n in (t..MOVEMENTS).step_by(threads) {
                    let (tid, bid) = &budgets[n % INSTANCES];
                    let (tail, ty) = if n % 3 == 2 {
                        ("debits", "budget.debited")
                    } else {
                        ("credits", "budget.credited")
                    };
                    let body = json!({ "amount_atomic": format!("{}", 1 + n % 7) });
                    let path = budget_path(tid, bid, tail);
                    let resp = post(&addrs[(t + n) % INSTANCES], &admin, &path, &body, None)
                        .expect("a credit or debit is answered");
                    assert_eq!(resp.status, 201, "{path}: {}", resp.describe());
                    let entry = resp.json()["id"].as_str().expect("an entry id").to_owned();
                    entries.push((entry, ty));
                }
                entries
            })
        })
        .collect();
    let entries: Vec<(String, &str)> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("a credit worker"))
        .collect();
    let writing = written.elapsed();
    assert_eq!(entries.len(), MOVEMENTS);

    // Every event stored, and each acknowledged entry's among them.
    let events = list_all_at(&addrs[0], &admin, "/v1/events");
    let by_entry: HashMap<&str, (&str, &str)> = events
        .iter()
        .filter_map(|e| {
            let entry = e["data"]["entry"]["id"].as_str()?;
            Some((entry, (e["id"].as_str()?, e["type"].as_str()?)))
        })
        .collect();
    for (entry, ty) in &entries {
        let event = by_entry.get(entry.as_str());
        assert_eq!(
            event.map(|(_, t)| t),
            Some(ty),
            "the {ty} event of entry {entry}"
        );
    }
    let expected: BTreeSet<String> = events
        .iter()
        .map(|e| e["id"].as_str().expect("an event id").to_owned())
        .collect();
    assert_eq!(
        expected.len(),
        MOVEMENTS + INSTANCES,
        "a tenant.created event a tenant, an event a movement"
    );

    // Every event reaches every endpoint; each delivery is then listed succeeded.
    let ids = |reqs: &[Received]| -> Vec<String> {
        reqs.iter()
            .map(|r| r.header("webhook-id").expect("a webhook-id").to_owned())
            .collect()
    };
    let deadline = Instant::now() + DELIVERY_WAIT;
    for (i, rx) in receivers.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let all = rx.wait_until(left, |reqs| {
            let got: BTreeSet<String> = ids(reqs).into_iter().collect();
            got.is_superset(&expected)
        });
        assert!(
            all.is_some(),
            "endpoint {i} got {} of the {} events within {DELIVERY_WAIT:?}; log:\n{}",
            ids(&rx.requests())
                .into_iter()
                .collect::<BTreeSet<_>>()
                .len(),
            expected.len(),
            instances.log_text()
        );
    }
    let delivered = written.elapsed();
    let path = |whe: &str| format!("/v1/webhook-endpoints/{whe}/deliveries");
    for (i, whe) in endpoints.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let settled = poll(left, || {
            let listed = list_all_at(&addrs[i % INSTANCES], &admin, &path(whe));
            let done =
                listed.len() == expected.len() && listed.iter().all(|d| d["state"] == "succeeded");
            done.then_some(listed)
        });
        let listed = settled.unwrap_or_else(|| {
            panic!(
                "endpoint {i}: every delivery listed succeeded: {:?}",
                list_all_at(&addrs[0], &admin, &path(whe))
            )
        });
        let listed_events: BTreeSet<String> = listed
            .iter()
            .map(|d| d["event_id"].as_str().expect("an event id").to_owned())
            .collect();
        assert_eq!(listed_events, expected, "endpoint {i}: a delivery an event");
        for d in &listed {
            assert_eq!(
                d["attempts"], 1,
                "endpoint {i}: each delivered by its first attempt: {d}"
            );
            assert!(
                d["last_status"]
                    .as_u64()
                    .is_some_and(|s| (200..300).contains(&s)),
                "{d}"
            );
        }
    }

    // Nothing more comes: each event reached each endpoint once, and never more than 4
    // attempts were in flight to one.
    thread::sleep(DUPLICATE_WATCH);
    let mut report = Vec::new();
    for (i, rx) in receivers.iter().enumerate() {
        let reqs = rx.requests();
        let mut times: BTreeMap<String, usize> = BTreeMap::new();
        for id in ids(&reqs) {
            *times.entry(id).or_default() += 1;
        }
        // Each event sent again: when its requests arrived, from the first one's end.
        let twice: Vec<(&String, Vec<String>)> = times
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| {
                let sent: Vec<&Received> = reqs
                    .iter()
                    .filter(|r| r.header("webhook-id") == Some(id.as_str()))
                    .collect();
                let first_end = sent[0].ended.unwrap_or(sent[0].at);
                let after = sent[1..]
                    .iter()
                    .map(|r| match r.at.checked_duration_since(first_end) {
                        Some(d) => format!("{} ms after the first was answered", d.as_millis()),
                        None => "while the first was open".to_owned(),
                    })
                    .collect();
                (id, after)
            })
            .collect();
        assert!(
            twice.is_empty(),
            "endpoint {i}: each event once, as if one instance sent them, but {} of {} events \
             came more than once: {twice:?}",
            twice.len(),
            times.len()
        );
        assert_eq!(
            reqs.len(),
            expected.len(),
            "endpoint {i}: one request an event"
        );
        assert!(
            reqs.iter()
                .all(|r| r.method == "POST" && r.path == HOOK_PATH),
            "endpoint {i}: POSTs to its URL"
        );
        let in_flight = rx.max_unanswered();
        assert!(
            (1..=4).contains(&in_flight),
            "endpoint {i}: at most 4 attempts in flight, but {in_flight} were at once"
        );
        report.push(format!("endpoint {i}: at most {in_flight} in flight"));
    }
    let owners = psql(
        &db.url,
        "SELECT count(DISTINCT lease_owner) FROM webhook_endpoints",
    );
    assert!(
        !instances.log_text().contains("panicked"),
        "no instance panicked:\n{}",
        instances.log_text()
    );
    eprintln!(
        "webhooks on {INSTANCES} instances: {} events to each of {ENDPOINTS} endpoints (held by \
         {owners} instance(s)), written in {:.1} s, all delivered {:.1} s after the first \
         write, each exactly once; {}; {:.1} s in all",
        expected.len(),
        writing.as_secs_f64(),
        delivered.as_secs_f64(),
        report.join(", "),
        started.elapsed().as_secs_f64()
    );
}

/// Credits timed in each phase of [`a_stalled_endpoint_does_not_slow_api_requests`], at
/// least: as many as it takes to fill [`TIMED_SPAN`] if more.
const TIMED_CREDITS: usize = 200;

/// The shortest span of a timed phase: longer than an attempt's timeout, so that attempts
/// time out, are recorded and sent again while the credits run.
const TIMED_SPAN: Duration = Duration::from_millis(1500);

/// Sequential credits of 1 to the budget through `addr`: [`TIMED_CREDITS`] of them, or more
/// until [`TIMED_SPAN`] has passed; how long each took.
fn time_credits(addr: &str, admin: &str, (tid, bid): (&str, &str)) -> Vec<Duration> {
    let path = budget_path(tid, bid, "credits");
    let body = json!({ "amount_atomic": "1" });
    let started = Instant::now();
    let mut took = Vec::new();
    while took.len() < TIMED_CREDITS || started.elapsed() < TIMED_SPAN {
        let sent = Instant::now();
        let resp = post(addr, admin, &path, &body, None).expect("a credit is answered");
        took.push(sent.elapsed());
        assert_eq!(resp.status, 201, "{}", resp.describe());
    }
    took
}

/// The median and the 90th percentile.
fn median_p90(mut took: Vec<Duration>) -> (Duration, Duration) {
    took.sort();
    (took[took.len() / 2], took[took.len() * 9 / 10])
}

/// One server on `db`: credits timed without an endpoint, then with one whose receiver never
/// answers (every attempt held until its one-second timeout, 4 at a time). The median and
/// 90th percentile of each phase, and the attempts made during the second.
fn stalled_endpoint_timings(db: &str) -> ([(Duration, Duration); 2], usize) {
    let mut flags = HOOK_FLAGS.to_vec();
    flags.extend(["--webhook-disable-after", "1000000"]);
    let instances = Instances::start_with(db, 1, &flags);
    let (addr, admin) = (&instances.addrs[0], &instances.admin);
    let (_, tid, bid) = create_tenant(addr, admin, "timed", "1");
    let budget = (tid.as_str(), bid.as_str());
    let path = budget_path(&tid, &bid, "credits");
    for _ in 0..20 {
        let warm = post(addr, admin, &path, &json!({ "amount_atomic": "1" }), None);
        assert_eq!(warm.map(|r| r.status), Some(201), "a warm-up credit");
    }
    let without = median_p90(time_credits(addr, admin, budget));

    let rx = Receiver::start();
    rx.set(Behaviour::Stall);
    let body = json!({ "url": rx.url(), "event_types": ["*"] });
    let resp = post(addr, admin, "/v1/webhook-endpoints", &body, None).expect("an endpoint");
    assert_eq!(resp.status, 201, "{}", resp.describe());
    for _ in 0..10 {
        let warm = post(addr, admin, &path, &json!({ "amount_atomic": "1" }), None);
        assert_eq!(warm.map(|r| r.status), Some(201), "a credit to deliver");
    }
    let held = rx.wait_until(Duration::from_secs(10), |reqs| {
        reqs.iter().filter(|r| r.ended.is_none()).count() >= 4
    });
    assert!(held.is_some(), "4 attempts held by the receiver");
    let before = rx.count();
    let with = median_p90(time_credits(addr, admin, budget));
    // (How many were held at once is not checked here: the receiver notices a timed-out
    // attempt's closed connection only at its next poll, so it may count one extra; the
    // bound is checked against receivers that answer, in webhooks.rs and above.)
    assert!(
        rx.count() >= before + 4,
        "attempts timed out and were made again meanwhile: {} before, {} after",
        before,
        rx.count()
    );
    ([without, with], rx.count() - before)
}

/// How much slower credits may be, at the median, with a stalled endpoint, whatever their
/// speed without one.
const STALL_MARGIN: Duration = Duration::from_millis(50);

#[test]
fn a_stalled_endpoint_does_not_slow_api_requests() {
    let dir = TempDir::new().expect("a temporary directory");
    let file = dir.path().join("tenantd.db");
    let pg = TestDb::new();
    let sqlite = file.to_str().expect("a UTF-8 path");
    for (backend, db) in [("SQLite", sqlite), ("PostgreSQL", pg.url.as_str())] {
        let ([(base, base_p90), (stalled, stalled_p90)], attempts) = stalled_endpoint_timings(db);
        eprintln!(
            "{backend}: credits take {base:?} (p90 {base_p90:?}) without an endpoint, \
             {stalled:?} (p90 {stalled_p90:?}) with a stalled one ({attempts} attempts made \
             meanwhile)"
        );
        // A credit held up by an attempt would wait for its one-second timeout; the margin
        // is what the tests running beside this one move a median by on two cores (medians
        // of 5 ms and 19 ms were seen in one run, with nothing held up).
        assert!(
            stalled < base * 3 || stalled < base + STALL_MARGIN,
            "{backend}: a stalled endpoint slows credits: median {stalled:?} against {base:?}"
        );
    }
}

/// How long the outside session holds the locked tenant's rows.
const OUTSIDE_LOCK: Duration = Duration::from_secs(3);

/// Writes of different tenants never wait for one another: with one tenant's rows locked by
/// a session outside the service (`SELECT … FOR UPDATE` in psql), credits to other tenants
/// through each of three instances complete within a second each, and the locked tenant's
/// credit, sent while the lock is held, completes once it goes.
#[test]
fn a_tenant_locked_from_outside_holds_up_no_other_tenant() {
    let db = TestDb::new();
    let instances = Instances::start(&db.url, INSTANCES);
    let admin = instances.admin.clone();
    let (_, locked_tid, locked_bid) =
        create_tenant(&instances.addrs[0], &admin, "locked-from-outside", "0");
    let others: Vec<(String, String)> = (0..INSTANCES)
        .map(|i| {
            let (_, tid, bid) =
                create_tenant(&instances.addrs[i], &admin, &format!("free-{i}"), "0");
            (tid, bid)
        })
        .collect();
    let credit = json!({ "amount_atomic": "1" });

    // The outside session: locks the tenant's row and its budgets', holds them, commits.
    let (mut outside, locked_at) = hold_from_outside(
        &db.url,
        &format!(
            "SELECT id FROM tenants WHERE id = '{locked_tid}' FOR UPDATE; \
             SELECT id FROM budgets WHERE tenant_id = '{locked_tid}' FOR UPDATE"
        ),
        OUTSIDE_LOCK,
    );

    // The locked tenant's credit, through the first instance, waits for the lock.
    let waiting = {
        let (addr, admin) = (instances.addrs[0].clone(), admin.clone());
        let path = budget_path(&locked_tid, &locked_bid, "credits");
        let body = credit.clone();
        thread::spawn(move || {
            let sent = Instant::now();
            let resp = post(&addr, &admin, &path, &body, None).expect("an answer");
            (resp, sent.elapsed())
        })
    };
    // Meanwhile, every instance credits every other tenant, each within a second.
    for (i, addr) in instances.addrs.iter().enumerate() {
        for (tid, bid) in &others {
            let sent = Instant::now();
            let resp = post(
                addr,
                &admin,
                &budget_path(tid, bid, "credits"),
                &credit,
                None,
            )
            .expect("an answer");
            let took = sent.elapsed();
            assert_eq!(resp.status, 201, "instance {i}: {}", resp.describe());
            assert!(
                took < Duration::from_secs(1),
                "instance {i}: a credit to {tid} took {took:?} while another tenant was locked"
            );
        }
    }
    assert!(
        locked_at.elapsed() < OUTSIDE_LOCK,
        "the other tenants' credits ran while the lock was held"
    );
    let (resp, took) = waiting.join().expect("the locked tenant's credit");
    assert!(
        outside.wait().expect("psql ends").success(),
        "the outside session committed"
    );
    assert_eq!(resp.status, 201, "once the lock went: {}", resp.describe());
    assert!(
        locked_at.elapsed() >= OUTSIDE_LOCK && took < OUTSIDE_LOCK + Duration::from_secs(5),
        "the locked tenant's credit completed once the lock went, after {took:?}"
    );
    let budget = get(
        &instances.addrs[1],
        &admin,
        &format!("/v1/tenants/{locked_tid}/budgets/{locked_bid}"),
    );
    assert_eq!(
        budget.json()["credited_atomic"],
        "1",
        "{}",
        budget.describe()
    );
    assert_verifies(&db.url, "after the outside lock");
}

/// How long the outside session holds the chain's lock: longer than `audit verify` waits for
/// pending rows (5 s), so that it reads them still pending.
const CHAIN_HELD: Duration = Duration::from_secs(8);

/// `tenantd audit verify` on a live database whose audit rows cannot be chained for now (the
/// chain's lock held by a session outside the service): it waits, then checks the pending
/// rows after the chain and says how many there were; it does not call the database broken.
/// Once the lock goes, the rows are chained and it verifies again, with nothing pending.
#[test]
fn audit_verify_with_rows_waiting_to_be_chained_passes_and_says_so() {
    let db = TestDb::new();
    let instances = Instances::start(&db.url, 1);
    let (addr, admin) = (&instances.addrs[0], &instances.admin);
    create_tenant(addr, admin, "chained-before", "10");
    assert_eq!(
        db.psql("SELECT count(*) FROM audit_pending"),
        "0",
        "the first create is chained before the lock is taken"
    );
    let (mut outside, locked_at) =
        hold_from_outside(&db.url, "SELECT id FROM chain_head FOR UPDATE", CHAIN_HELD);
    let waiting = 4;
    for i in 0..waiting {
        create_tenant(addr, admin, &format!("waiting-{i}"), "10");
    }
    assert_eq!(
        psql_at_once(&db.url, "SELECT count(*) FROM audit_pending"),
        waiting.to_string(),
        "the creates' audit rows wait while the chain's lock is held"
    );

    let out = audit_verify(Path::new(&db.url));
    assert!(
        locked_at.elapsed() < CHAIN_HELD,
        "audit verify read while the lock was still held"
    );
    assert_eq!(out.code, Some(0), "audit verify: {}", out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("ok: {} events", 1 + waiting)),
        "every event counted, the pending ones too: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains(&format!(
            "{waiting} of the {} events were still waiting",
            1 + waiting
        )),
        "the pending rows are reported: {}",
        out.stderr
    );

    assert!(
        outside.wait().expect("psql ends").success(),
        "the outside session"
    );
    let chained = poll(Duration::from_secs(5), || {
        (psql_at_once(&db.url, "SELECT count(*) FROM audit_pending") == "0").then_some(())
    });
    assert!(chained.is_some(), "the rows are chained once the lock goes");
    let after = audit_verify(Path::new(&db.url));
    assert_eq!(after.code, Some(0), "audit verify: {}", after.stderr);
    assert_eq!(
        after.stdout, out.stdout,
        "the same events and head once they are in the chain"
    );
    assert!(
        !after.stderr.contains("still waiting"),
        "nothing is reported pending: {}",
        after.stderr
    );
}

/// A session outside the service (psql) that runs `locks` in a transaction, holds them for
/// `hold` and commits; returned once it holds them, with the instant it began.
fn hold_from_outside(url: &str, locks: &str, hold: Duration) -> (Child, Instant) {
    let script = format!(
        "BEGIN; {locks}; SELECT pg_sleep({}); COMMIT;",
        hold.as_secs()
    );
    let outside = Command::new("psql")
        .args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", &script])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql runs");
    let began = Instant::now();
    let held = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND query LIKE '%pg_sleep%' AND state = 'active' AND pid <> pg_backend_pid()";
    let holding = poll(hold, || (psql_at_once(url, held) == "1").then_some(()));
    assert!(
        holding.is_some(),
        "the outside session never held its locks"
    );
    (outside, began)
}
