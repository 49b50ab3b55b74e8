//! The crash loop: creates and tombstones from concurrent clients, reservations, commits and
//! releases from concurrent spenders (each on the key at the bottom of a three-level tree),
//! charges on a budget whose one-second periods pass all the while, `kill -9` at a random
//! instant, restart on the same database, and check that every acknowledged write is there,
//! that no write is half there, that no budget is overspent, that every spend on a key is on
//! each level above it, that every boundary is recorded once, in order and on its second, and
//! that the chain replays to every level's stored figures and entries. Cycle after cycle.
//!
//! A webhook endpoint takes every event, sent to a receiver of the test's that answers `200`
//! at once; credits and debits from a client of their own write events too. After the last
//! restart, every event whose change was acknowledged (a credit's or debit's entry, a tenant
//! created or tombstoned), and every other event stored, must reach the receiver at least
//! once, and every delivery end `succeeded`. A crash may send an event again: the duplicates
//! are counted and printed.
//!
//! A batcher sends batches of charges, atomic or not, some with an operation that is refused
//! ([`batcher`]): after each restart every batch is all there or not at all, and an
//! acknowledged one is there as its answer said.
//!
//! `CRASH_CYCLES` sets the number of cycles (10 by default, `make crash-test` runs 200) and
//! `CRASH_SEED` replays a run.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::helpers::*;

mod batcher;

const CYCLES_DEFAULT: usize = 10;
const CLIENTS: usize = 6;
const KILL_AFTER_MS_MIN: u64 = 20;
const KILL_AFTER_MS_MAX: u64 = 600;
/// One request in this many is a tombstone of a tenant the client created earlier.
const TOMBSTONE_EVERY: usize = 4;
/// Acknowledged tenants read back over HTTP after each restart (all are checked in SQL).
const HTTP_SAMPLE: usize = 50;
/// Clients that spend, each from a budget of its own tenant.
const SPENDERS: usize = 4;
/// What each spender's budget opens with: enough for the reservations of `make crash-test`'s
/// 200 cycles (a spender stops at its first `insufficient_funds` to a reserve).
const SPENDER_DEPOSIT: u64 = 1_000_000;
/// The periodic budget's allowance: its one-second periods run short under the charger's
/// load, so refusals and refills both happen.
const PERIOD_ALLOWANCE: u64 = 400;

/// The charges acknowledged on the periodic budget: entry id → amount.
type Charged = HashMap<String, u64>;

/// What the credit and debit client's budget opens with: its debits (a third of its movements,
/// 1 to 9 each) never outrun its credits (1 to 29 each) and this.
const MOVER_DEPOSIT: u64 = 1_000_000;

/// The flags of the server under test: webhooks over http to the loopback, a timeout and
/// retries long enough that an attempt to the receiver, which answers at once, never fails
/// on a loaded machine (an attempt cut by `kill -9` is not a failure: it is never recorded).
const WEBHOOK_FLAGS: [&str; 6] = [
    "--webhook-allow-http",
    "--webhook-allow-private",
    "--webhook-timeout",
    "5",
    "--webhook-retry-schedule",
    "200ms,500ms,1s,2s,5s",
];

/// After the last restart, how long the receiver may go without a new request while some
/// event has not reached it: on PostgreSQL the killed server's lease on the endpoint (5 s)
/// runs out first.
const WEBHOOK_STALL_MAX: Duration = Duration::from_secs(20);

/// How long the deliveries may take in all after the last restart, however fast they come.
const WEBHOOK_DRAIN_MAX: Duration = Duration::from_secs(600);

/// The credits and debits acknowledged: entry id → the type of the event it writes.
type Moved = HashMap<String, &'static str>;

/// The credit and debit client's closed loop until the server goes away: two credits of 1 to
/// 29 for one debit of 1 to 9; each `201` records its entry, whose event was committed with it.
fn mover(
    addr: String,
    auth: String,
    (tenant, budget): (String, String),
    seed: u64,
    moved: Arc<Mutex<Moved>>,
) {
    let mut rng = Rng::new(seed);
    loop {
        let debit = rng.range(0, 3) == 0;
        let (tail, event, amount) = if debit {
            ("debits", "budget.debited", rng.range(1, 10))
        } else {
            ("credits", "budget.credited", rng.range(1, 30))
        };
        let path = format!("/v1/tenants/{tenant}/budgets/{budget}/{tail}");
        let body = format!(r#"{{"amount_atomic":"{amount}"}}"#);
        match try_send(&addr, "POST", &path, &auth, Some(&body), None, &[]) {
            Ok(resp) if resp.status == 201 => {
                let Ok(entry) = serde_json::from_slice::<serde_json::Value>(&resp.body) else {
                    return;
                };
                let id = entry["id"].as_str().unwrap_or_default().to_owned();
                moved.lock().expect("moved lock").insert(id, event);
            }
            Ok(resp) => panic!("a {tail} under load answered {}", resp.describe()),
            Err(_) => return,
        }
    }
}

/// The `webhook-id`s the receiver got: when each arrived.
#[derive(Default)]
struct Arrived {
    /// Requests read so far.
    seen: usize,
    /// `webhook-id` → the arrival of each of its requests.
    times: HashMap<String, Vec<Instant>>,
}

impl Arrived {
    /// Reads the requests that arrived since the last call.
    fn update(&mut self, rx: &Receiver) {
        let new = rx.requests_since(self.seen);
        self.seen += new.len();
        for req in new {
            let id = req
                .header("webhook-id")
                .unwrap_or_else(|| panic!("a webhook attempt has a webhook-id: {:?}", req.headers));
            self.times.entry(id.to_owned()).or_default().push(req.at);
        }
    }

    /// Requests beyond the first of their event.
    fn duplicates(&self) -> usize {
        self.seen - self.times.len()
    }

    /// The duplicates that came from the same server as the request before them: no restart
    /// began between the two. (One that did is an attempt cut by `kill -9` and sent again.)
    fn duplicates_within_a_run(&self, restarts: &[Instant]) -> usize {
        let run = |at: &Instant| restarts.partition_point(|r| r < at);
        self.times
            .values()
            .map(|arrivals| {
                let runs: Vec<usize> = arrivals.iter().map(run).collect();
                runs.windows(2).filter(|w| w[0] == w[1]).count()
            })
            .sum()
    }
}

/// The stored events, by the acknowledgement that implies each: `(type, id)` of the entry
/// (a credit or a debit) or the tenant (created, tombstoned) → event id; and every event id.
fn stored_events(app: &TestApp) -> (HashMap<(String, String), String>, Vec<String>) {
    let mut by_subject = HashMap::new();
    let mut all = Vec::new();
    for event in list_all(app, &app.admin(), "/v1/events") {
        let id = id_of(&event);
        let ty = str_of(&event, "type").to_owned();
        let subject = match ty.as_str() {
            "budget.credited" | "budget.debited" => event["data"]["entry"]["id"].as_str(),
            "tenant.created" | "tenant.tombstoned" => event["data"]["tenant"]["id"].as_str(),
            _ => None,
        };
        if let Some(subject) = subject {
            let earlier = by_subject.insert((ty.clone(), subject.to_owned()), id.clone());
            assert_eq!(earlier, None, "one {ty} event of {subject}");
        }
        all.push(id);
    }
    (by_subject, all)
}

/// After the last restart: every event stored reaches the receiver (waiting while requests
/// keep coming, bounded), the events of every acknowledged change among them, and every
/// delivery ends `succeeded`. Events stored, and acknowledged ones.
fn check_webhooks(
    app: &TestApp,
    rx: &Receiver,
    arrived: &mut Arrived,
    acknowledged: &[(String, String)],
    context: &str,
) -> (usize, usize) {
    let (by_subject, all) = stored_events(app);
    let mut expected: HashSet<&str> = HashSet::new();
    for (ty, subject) in acknowledged {
        let event = by_subject.get(&(ty.clone(), subject.clone()));
        let event = event.unwrap_or_else(|| {
            panic!("{context}: the {ty} event of acknowledged {subject} was lost")
        });
        expected.insert(event);
    }
    let acknowledged_events = expected.len();
    expected.extend(all.iter().map(String::as_str));
    let started = Instant::now();
    let (mut last_seen, mut last_progress) = (arrived.seen, Instant::now());
    loop {
        arrived.update(rx);
        let missing: Vec<&&str> = expected
            .iter()
            .filter(|id| !arrived.times.contains_key(**id))
            .collect();
        if missing.is_empty() {
            break;
        }
        if arrived.seen > last_seen {
            (last_seen, last_progress) = (arrived.seen, Instant::now());
        }
        let stalled = last_progress.elapsed() >= WEBHOOK_STALL_MAX;
        assert!(
            !stalled && started.elapsed() < WEBHOOK_DRAIN_MAX,
            "{context}: {} of {} events never reached the receiver (none arrived for {:?}, \
             {:?} after the last checks began), e.g. {:?}",
            missing.len(),
            expected.len(),
            last_progress.elapsed(),
            started.elapsed(),
            &missing[..missing.len().min(5)]
        );
        thread::sleep(Duration::from_millis(50));
    }
    // The periodic budget's boundaries go on writing events meanwhile: those read now are a
    // superset of every one sent so far.
    let (_, now_stored) = stored_events(app);
    let now_stored: HashSet<&str> = now_stored.iter().map(String::as_str).collect();
    let unknown: Vec<&String> = arrived
        .times
        .keys()
        .filter(|id| !now_stored.contains(id.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "{context}: only stored events are sent: {unknown:?}"
    );
    // The outcome of an attempt is written after it ends.
    let unsettled = "SELECT event_id, state FROM webhook_deliveries WHERE state <> 'succeeded'";
    let settled = poll(WEBHOOK_STALL_MAX, || {
        let rows = app.text_rows(unsettled);
        let left = rows
            .iter()
            .any(|r| r[1] != "pending" || expected.contains(r[0].as_str()));
        (!left).then_some(())
    });
    assert!(
        settled.is_some(),
        "{context}: every delivery succeeded: {:?} have not",
        app.text_rows(unsettled)
    );
    // One statement, one snapshot.
    let unmatched = app.count(
        "SELECT (SELECT count(*) FROM events) - (SELECT count(*) FROM webhook_deliveries) \
         + (SELECT count(*) FROM (SELECT event_id FROM webhook_deliveries GROUP BY event_id \
         HAVING count(*) > 1) AS twice)",
    );
    assert_eq!(unmatched, 0, "{context}: one delivery an event");
    (all.len(), acknowledged_events)
}

/// The charger's closed loop until the server goes away: charges of 1 to 19 on the periodic
/// budget; a refusal for lack of funds waits a little for the next period.
fn charger(
    addr: String,
    auth: String,
    tenant: String,
    budget: String,
    seed: u64,
    charged: Arc<Mutex<Charged>>,
) {
    let mut rng = Rng::new(seed);
    let path = format!("/v1/tenants/{tenant}/charges");
    loop {
        let amount = rng.range(1, 20);
        let body = format!(r#"{{"budget_id":"{budget}","amount_atomic":"{amount}"}}"#);
        match try_send(&addr, "POST", &path, &auth, Some(&body), None, &[]) {
            Ok(resp) if resp.status == 201 => {
                let Ok(entry) = serde_json::from_slice::<serde_json::Value>(&resp.body) else {
                    return;
                };
                let id = entry["id"].as_str().unwrap_or_default().to_owned();
                charged.lock().expect("charged lock").insert(id, amount);
            }
            Ok(resp) if resp.status == 409 => thread::sleep(Duration::from_millis(20)),
            Ok(resp) => panic!("a charge under load answered {}", resp.describe()),
            Err(_) => return,
        }
    }
}

/// Checks the periodic budget: every acknowledged charge is in its ledger, and its
/// boundaries are recorded once each, in order, each on its second after `created_ms`, with
/// a statement a period and one `budget.period_reset` event a boundary. How many boundaries.
fn check_periods(
    app: &TestApp,
    (tenant, budget): (&str, &str),
    created_ms: i64,
    charged: &Charged,
    context: &str,
) -> usize {
    // One statement, so one snapshot: the restarted server records boundaries meanwhile. On
    // PostgreSQL a boundary just recorded may have its audit row still waiting for its place
    // in the chain (durable with it, in audit_pending): both tables are counted.
    let resets_in = |table: &str| {
        format!(
            "(SELECT count(*) FROM {table} \
              WHERE tenant_id = '{tenant}' AND action = 'budget.period_reset')"
        )
    };
    let audit_resets = match app.backend() {
        Backend::Postgres => format!(
            "{} + {}",
            resets_in("audit_events"),
            resets_in("audit_pending")
        ),
        Backend::Sqlite => resets_in("audit_events"),
    };
    let sql = format!(
        "SELECT e.id, e.kind, e.amount_atomic, e.occurred_at, \
         CAST((SELECT count(*) FROM periods WHERE budget_id = '{budget}') AS TEXT), \
         CAST({audit_resets} AS TEXT) \
         FROM ledger_entries e WHERE e.budget_id = '{budget}' ORDER BY e.id"
    );
    let mut charges: HashMap<String, String> = HashMap::new();
    let mut resets: Vec<i64> = Vec::new();
    let (mut periods, mut events) = (0, 0);
    for row in app.text_rows(&sql) {
        let [id, kind, amount, at, p, e] = <[String; 6]>::try_from(row).expect("six columns");
        (periods, events) = (
            p.parse::<usize>().expect("a count"),
            e.parse::<usize>().expect("a count"),
        );
        match kind.as_str() {
            "charge" => {
                charges.insert(id, amount);
            }
            "refill" | "forfeit" => resets.push(timestamp_ms(&at)),
            _ => {}
        }
    }
    for (id, amount) in charged {
        assert_eq!(
            charges.get(id),
            Some(&amount.to_string()),
            "{context}: acknowledged charge {id} of {amount}"
        );
    }
    let on_time: Vec<i64> = (1..=resets.len() as i64)
        .map(|k| created_ms + 1000 * k)
        .collect();
    assert_eq!(
        resets, on_time,
        "{context}: each boundary once, in order, on its second"
    );
    assert_eq!(periods, resets.len() + 1, "{context}: a statement a period");
    assert_eq!(events, resets.len(), "{context}: an event a boundary");
    resets.len()
}

/// What the clients were told had happened.
#[derive(Default)]
struct Acknowledged {
    /// id → name, for every `201`.
    created: HashMap<String, String>,
    /// ids answered `200` to a DELETE.
    tombstoned: Vec<String>,
}

/// What a spender was told about one reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settled {
    /// `201` to the reserve, nothing acknowledged since.
    Active,
    /// `200` to a commit of this amount.
    Committed(u64),
    /// `200` to a release.
    Released,
}

/// What the spenders were told: reservation id → (tenant, amount held, what was settled).
type Spent = HashMap<String, (String, u64, Settled)>;

/// One spender's closed loop until the server goes away: reserve, then commit (below, at or
/// above the hold) or release.
fn spender(
    addr: String,
    auth: String,
    tenant: String,
    budget: String,
    seed: u64,
    spent: Arc<Mutex<Spent>>,
) {
    let mut rng = Rng::new(seed);
    loop {
        let amount = rng.range(1, 60);
        let body =
            format!(r#"{{"budget_id":"{budget}","amount_atomic":"{amount}","ttl_seconds":3600}}"#);
        let path = format!("/v1/tenants/{tenant}/reservations");
        let id = match try_send(&addr, "POST", &path, &auth, Some(&body), None, &[]) {
            Ok(resp) if resp.status == 201 => {
                let Ok(r) = serde_json::from_slice::<serde_json::Value>(&resp.body) else {
                    return;
                };
                let id = r["id"].as_str().unwrap_or_default().to_owned();
                let mut spent = spent.lock().expect("spent lock");
                spent.insert(id.clone(), (tenant.clone(), amount, Settled::Active));
                id
            }
            // The budget is used up: nothing more to spend in this run.
            Ok(resp) if resp.status == 409 => return,
            Ok(resp) => panic!("a reserve under load answered {}", resp.describe()),
            Err(_) => return,
        };
        let release = rng.range(0, 4) == 0;
        let committed = rng.range(0, amount + amount / 4 + 1);
        let (action, body) = if release {
            ("release", String::new())
        } else {
            ("commit", format!(r#"{{"amount_atomic":"{committed}"}}"#))
        };
        let path = format!("/v1/tenants/{tenant}/reservations/{id}/{action}");
        let body = (!body.is_empty()).then_some(body.as_str());
        match try_send(&addr, "POST", &path, &auth, body, None, &[]) {
            Ok(resp) if resp.status == 200 => {
                let settled = if release {
                    Settled::Released
                } else {
                    Settled::Committed(committed)
                };
                if let Some(entry) = spent.lock().expect("spent lock").get_mut(&id) {
                    entry.2 = settled;
                }
            }
            // An excess the budget cannot cover: the reservation stays active.
            Ok(resp) if resp.status == 409 => {}
            Ok(resp) => panic!("a {action} under load answered {}", resp.describe()),
            Err(_) => return,
        }
    }
}

/// A spender's tenant and its three levels, the key (where it spends) first.
struct Tree {
    tenant: String,
    levels: [String; 3],
}

/// A budget of `tenant` named `name` under `parent`, opening with [`SPENDER_DEPOSIT`]; its id.
fn child_budget(app: &TestApp, tenant: &str, name: &str, parent: &str) -> String {
    let body = format!(
        r#"{{"name":"{name}","opening_deposit_atomic":"{SPENDER_DEPOSIT}","parent_id":"{parent}"}}"#
    );
    let path = format!("/v1/tenants/{tenant}/budgets");
    let resp = send(
        &app.addr,
        "POST",
        &path,
        &app.admin(),
        Some(&body),
        None,
        &[],
    );
    assert_eq!(resp.status, 201, "{}", resp.describe());
    resp.json()["id"].as_str().expect("a budget id").to_owned()
}

/// Checks every acknowledged reservation and every budget's invariant; and that every spend
/// on a tree's key is on each level above it: every level has spent and holds what the key
/// has (nothing else moves them).
fn check_spending(app: &TestApp, spent: &Spent, trees: &[Tree], context: &str) -> usize {
    let mut stored: HashMap<String, (String, Option<String>)> = HashMap::new();
    for row in app.rows("SELECT id, state, committed_atomic FROM reservations") {
        let [id, state, committed] = <[Option<String>; 3]>::try_from(row).expect("three columns");
        let (id, state) = id.zip(state).expect("a reservation has an id and a state");
        stored.insert(id, (state, committed));
    }
    for (id, (_, _, settled)) in spent {
        let Some((state, committed)) = stored.get(id) else {
            panic!("{context}: acknowledged reservation {id} was lost");
        };
        match settled {
            // A commit or release sent but not acknowledged may have happened.
            Settled::Active => assert!(
                ["active", "committed", "released"].contains(&state.as_str()),
                "{context}: reservation {id} is {state}"
            ),
            Settled::Committed(amount) => assert_eq!(
                (state.as_str(), committed.as_deref()),
                ("committed", Some(amount.to_string().as_str())),
                "{context}: acknowledged commit of {id}"
            ),
            Settled::Released => {
                assert_eq!(state, "released", "{context}: acknowledged release of {id}")
            }
        }
    }
    let rows = app.text_rows(
        "SELECT id, credited_atomic, debited_atomic, spent_atomic, reserved_atomic FROM budgets",
    );
    let mut moved: HashMap<String, (u128, u128)> = HashMap::new();
    for row in rows {
        let [id, figures @ ..] = <[String; 5]>::try_from(row).expect("five columns");
        let [credited, debited, spent, reserved] =
            figures.map(|f| f.parse::<u128>().expect("an amount"));
        assert!(
            credited >= debited + spent + reserved,
            "{context}: budget {id} is overspent: {credited} < {debited} + {spent} + {reserved}"
        );
        moved.insert(id, (spent, reserved));
    }
    for tree in trees {
        let [key, team, org] = tree.levels.each_ref().map(|id| moved[id]);
        assert!(
            key == team && team == org,
            "{context}: tenant {}'s levels differ (spent, reserved): key {key:?}, team {team:?}, \
             org {org:?}",
            tree.tenant
        );
    }
    stored.len()
}

/// One client's closed loop until the server goes away.
fn client(
    addr: String,
    auth: String,
    tag: String,
    seed: u64,
    acked: Arc<Mutex<Acknowledged>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed);
    let mut mine: Vec<String> = Vec::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let tombstone = !mine.is_empty() && i.is_multiple_of(TOMBSTONE_EVERY);
        if tombstone {
            let id = mine.swap_remove((rng.next_u64() % mine.len() as u64) as usize);
            let path = format!("/v1/tenants/{id}");
            match try_send(&addr, "DELETE", &path, &auth, None, None, &[]) {
                Ok(resp) if resp.status == 200 => {
                    acked.lock().expect("acked lock").tombstoned.push(id);
                }
                Ok(resp) => panic!("a tombstone under load answered {}", resp.describe()),
                Err(_) => break,
            }
        } else {
            let name = format!("{tag}-{i}");
            let body = tenant_body(&name, "1");
            match try_send(&addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]) {
                Ok(resp) if resp.status == 201 => {
                    // A body cut short by the kill is no acknowledgement.
                    let Ok(created) = serde_json::from_slice::<serde_json::Value>(&resp.body)
                    else {
                        break;
                    };
                    let id = created["id"].as_str().unwrap_or_default().to_owned();
                    mine.push(id.clone());
                    acked.lock().expect("acked lock").created.insert(id, name);
                }
                Ok(resp) => panic!("a create under load answered {}", resp.describe()),
                Err(_) => break,
            }
        }
    }
}

/// Checks the database against what was acknowledged, reading every row once.
fn check(app: &TestApp, acked: &Acknowledged, context: &str) -> (usize, usize) {
    let mut tenants: HashMap<String, (String, String)> = HashMap::new();
    for row in app.text_rows("SELECT id, name, state FROM tenants") {
        let [id, name, state] = <[String; 3]>::try_from(row).expect("three columns");
        tenants.insert(id, (name, state));
    }
    let mut events: HashMap<(String, String), usize> = HashMap::new();
    for row in app.text_rows("SELECT tenant_id, action FROM audit_events") {
        let [tenant, action] = <[String; 2]>::try_from(row).expect("two columns");
        *events.entry((tenant, action)).or_default() += 1;
    }

    for (id, name) in &acked.created {
        let stored = tenants.get(id);
        assert!(
            stored.is_some(),
            "{context}: acknowledged tenant {id} was lost"
        );
        assert_eq!(
            stored.map(|(n, _)| n.as_str()),
            Some(name.as_str()),
            "{context}: tenant {id} keeps its name"
        );
    }
    for id in &acked.tombstoned {
        assert_eq!(
            tenants.get(id).map(|(_, s)| s.as_str()),
            Some("tombstoned"),
            "{context}: acknowledged tombstone of {id} was lost"
        );
    }
    // No half-written change: each tenant has its creation event, and a tombstone event
    // exactly when it is tombstoned; no event names a tenant that is not there.
    let mut tombstoned = 0;
    for (id, (_, state)) in &tenants {
        let created = events
            .get(&(id.clone(), "tenant.created".into()))
            .copied()
            .unwrap_or(0);
        let buried = events
            .get(&(id.clone(), "tenant.tombstoned".into()))
            .copied()
            .unwrap_or(0);
        let want_buried = usize::from(state == "tombstoned");
        tombstoned += want_buried;
        assert_eq!(
            created, 1,
            "{context}: tenant {id} has {created} creation events"
        );
        assert_eq!(
            buried, want_buried,
            "{context}: tenant {id} ({state}) has {buried} tombstone events"
        );
    }
    let tenant_events: usize = events
        .iter()
        .filter(|((_, action), _)| action.starts_with("tenant."))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        tenant_events,
        tenants.len() + tombstoned,
        "{context}: no tenant event without its change"
    );
    let verify = app.audit_verify();
    assert_eq!(
        verify.code,
        Some(0),
        "{context}: the chain verifies: {verify:?}"
    );

    let mut rng = Rng::new(acked.created.len() as u64 + 1);
    let ids: Vec<&String> = acked.created.keys().collect();
    for _ in 0..HTTP_SAMPLE.min(ids.len()) {
        let id = ids[(rng.next_u64() % ids.len() as u64) as usize];
        let resp = app.get_admin(id);
        assert_eq!(
            resp.status,
            200,
            "{context}: GET {id} after restart: {}",
            resp.describe()
        );
    }
    (tenants.len(), tombstoned)
}

#[test]
fn kill_9_at_random_instants_loses_no_acknowledged_write() {
    let cycles = env_number("CRASH_CYCLES", CYCLES_DEFAULT as u64) as usize;
    let seed = env_number("CRASH_SEED", now_ms() as u64);
    println!("crash loop: {cycles} cycles, seed {seed} (replay with CRASH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let mut app = WEBHOOK_FLAGS
        .iter()
        .fold(AppBuilder::new(), |builder, flag| builder.arg(flag))
        .spawn();
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let spent = Arc::new(Mutex::new(Spent::new()));
    let charged = Arc::new(Mutex::new(Charged::new()));
    let moved = Arc::new(Mutex::new(Moved::new()));
    let batches = Arc::new(Mutex::new(batcher::Batches::new()));
    let started = Instant::now();
    // One endpoint for every event, first, so that every event stored is to be delivered.
    let rx = Receiver::start();
    let endpoint = serde_json::json!({ "url": rx.url(), "event_types": ["*"] }).to_string();
    let path = "/v1/webhook-endpoints";
    let created = send(
        &app.addr,
        "POST",
        path,
        &app.admin(),
        Some(&endpoint),
        None,
        &[],
    );
    assert_eq!(created.status, 201, "{}", created.describe());
    let mut arrived = Arrived::default();
    let mut restarts: Vec<Instant> = Vec::new();
    // Each spender spends, cycle after cycle, from the key at the bottom of its own tenant's
    // three-level tree: the default budget, a team under it, the key under the team.
    let trees: Vec<Tree> = (0..SPENDERS)
        .map(|n| {
            let created = app.create_ok(&format!("spender-{n}"), &SPENDER_DEPOSIT.to_string());
            let tenant = tenant_id(&created);
            let org = created["budget"]["id"]
                .as_str()
                .expect("a budget id")
                .to_owned();
            let team = child_budget(&app, &tenant, "team", &org);
            let key = child_budget(&app, &tenant, "key", &team);
            Tree {
                tenant,
                levels: [key, team, org],
            }
        })
        .collect();
    let spenders: Vec<(String, String)> = trees
        .iter()
        .map(|t| (t.tenant.clone(), t.levels[0].clone()))
        .collect();
    // The charger's tenant, whose default budget renews every second.
    let period = format!(r#"{{"every_seconds":1,"allowance_atomic":"{PERIOD_ALLOWANCE}"}}"#);
    let body = format!(
        r#"{{"name":"charger","opening_deposit_atomic":"{PERIOD_ALLOWANCE}","period":{period}}}"#
    );
    let created = app.post_tenants(&body, None);
    assert_eq!(created.status, 201, "{}", created.describe());
    let created = created.json();
    let periodic = (
        tenant_id(&created),
        created["budget"]["id"]
            .as_str()
            .expect("a budget id")
            .to_owned(),
    );
    let periodic_created_ms = timestamp_ms(created["created_at"].as_str().expect("a time"));
    // The credit and debit client's tenant.
    let created = app.create_ok("mover", &MOVER_DEPOSIT.to_string());
    let movable = (
        tenant_id(&created),
        created["budget"]["id"]
            .as_str()
            .expect("a budget id")
            .to_owned(),
    );

    // The batcher's tenant: it charges a key under the default budget.
    let created = app.create_ok("batcher", &SPENDER_DEPOSIT.to_string());
    let batched = {
        let tenant = tenant_id(&created);
        let org = created["budget"]["id"]
            .as_str()
            .expect("a budget id")
            .to_owned();
        let key = child_budget(&app, &tenant, "key", &org);
        (tenant, key, org)
    };

    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let spender_seeds: Vec<u64> = (0..SPENDERS).map(|_| rng.next_u64()).collect();
        let charger_seed = rng.next_u64();
        let mover_seed = rng.next_u64();
        let batcher_seed = rng.next_u64();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (addr, auth) = (app.addr.clone(), app.admin());
                let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
                let tag = format!("crash-{cycle}-{c}");
                let client_seed = rng.next_u64();
                thread::spawn(move || client(addr, auth, tag, client_seed, acked, stop))
            })
            .chain(
                spenders
                    .iter()
                    .zip(&spender_seeds)
                    .map(|((tenant, budget), seed)| {
                        let (addr, auth) = (app.addr.clone(), app.admin());
                        let (tenant, budget, spent) =
                            (tenant.clone(), budget.clone(), Arc::clone(&spent));
                        let spender_seed = *seed;
                        thread::spawn(move || {
                            spender(addr, auth, tenant, budget, spender_seed, spent)
                        })
                    }),
            )
            .chain(std::iter::once({
                let (addr, auth) = (app.addr.clone(), app.admin());
                let (tenant, budget) = periodic.clone();
                let charged = Arc::clone(&charged);
                thread::spawn(move || charger(addr, auth, tenant, budget, charger_seed, charged))
            }))
            .chain(std::iter::once({
                let (addr, auth) = (app.addr.clone(), app.admin());
                let (movable, moved) = (movable.clone(), Arc::clone(&moved));
                thread::spawn(move || mover(addr, auth, movable, mover_seed, moved))
            }))
            .chain(std::iter::once({
                let (addr, auth) = (app.addr.clone(), app.admin());
                let (tenant, key) = (batched.0.clone(), batched.1.clone());
                let batches = Arc::clone(&batches);
                let tag = format!("b{cycle}");
                thread::spawn(move || {
                    batcher::batcher((addr, auth), (tenant, key), tag, batcher_seed, batches)
                })
            }))
            .collect();
        let delay = rng.range(KILL_AFTER_MS_MIN, KILL_AFTER_MS_MAX);
        thread::sleep(Duration::from_millis(delay));
        app.kill();
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            if client.join().is_err() {
                // The server's warnings and errors tell why a request failed.
                for line in app.log_lines() {
                    if line.contains(" WARN ") || line.contains(" ERROR ") {
                        eprintln!("server: {line}");
                    }
                }
                panic!("a load client panicked");
            }
        }

        restarts.push(Instant::now());
        app.start();
        let acked = acked.lock().expect("acked lock");
        let context = format!("cycle {cycle} (seed {seed})");
        let (tenants, tombstoned) = check(&app, &acked, &context);
        let reservations =
            check_spending(&app, &spent.lock().expect("spent lock"), &trees, &context);
        let charges = charged.lock().expect("charged lock");
        let (tenant, budget) = (periodic.0.as_str(), periodic.1.as_str());
        let boundaries = check_periods(
            &app,
            (tenant, budget),
            periodic_created_ms,
            &charges,
            &context,
        );
        let (batches_acked, batched_charges) = batcher::check_batches(
            &app,
            (&batched.1, &batched.2),
            &batches.lock().expect("batches lock"),
            &context,
        );
        arrived.update(&rx);
        println!(
            "cycle {cycle}: killed after {delay} ms; {} creates and {} tombstones acknowledged so far; \
             {tenants} tenants stored, {tombstoned} tombstoned, {reservations} reservations, \
             {} charges, {} credits and debits, {boundaries} boundaries, {batches_acked} batches \
             acknowledged ({batched_charges} of their charges stored, no batch in part); nothing \
             lost, nothing overspent; webhooks so far: {} requests, {} events, {} duplicates ({} \
             within a run)",
            acked.created.len(),
            acked.tombstoned.len(),
            charges.len(),
            moved.lock().expect("moved lock").len(),
            arrived.seen,
            arrived.times.len(),
            arrived.duplicates(),
            arrived.duplicates_within_a_run(&restarts),
        );
    }
    let acked = acked.lock().expect("acked lock");
    let moved = moved.lock().expect("moved lock");
    let acknowledged: Vec<(String, String)> = moved
        .iter()
        .map(|(entry, ty)| ((*ty).to_owned(), entry.clone()))
        .chain(
            acked
                .created
                .keys()
                .map(|id| ("tenant.created".to_owned(), id.clone())),
        )
        .chain(
            acked
                .tombstoned
                .iter()
                .map(|id| ("tenant.tombstoned".to_owned(), id.clone())),
        )
        .collect();
    let waited = Instant::now();
    let context = format!("webhooks after the last restart (seed {seed})");
    let (events, acknowledged_events) =
        check_webhooks(&app, &rx, &mut arrived, &acknowledged, &context);
    println!(
        "webhooks: {events} events stored ({acknowledged_events} of acknowledged changes, {} of \
         them credits and debits), all at the receiver {:.1} s after the last cycle's checks; \
         {} requests, {} duplicates: {} sent again by a restarted server (the one before was \
         killed while sending them), {} by the server that had sent them already; every \
         delivery succeeded",
        moved.len(),
        waited.elapsed().as_secs_f64(),
        arrived.seen,
        arrived.duplicates(),
        arrived.duplicates() - arrived.duplicates_within_a_run(&restarts),
        arrived.duplicates_within_a_run(&restarts),
    );
    let spent = spent.lock().expect("spent lock");
    let charges = charged.lock().expect("charged lock").len();
    let settled = |want: fn(&Settled) -> bool| spent.values().filter(|(_, _, s)| want(s)).count();
    println!(
        "crash loop done: {cycles} kill -9 cycles in {:.0} s, {} creates, {} tombstones, {} \
         reservations, {} commits and {} releases and {charges} charges acknowledged, none \
         lost, no half-written change, no budget overspent, every boundary recorded once, the \
         chain replayed to the stored figures every time",
        started.elapsed().as_secs_f64(),
        acked.created.len(),
        acked.tombstoned.len(),
        spent.len(),
        settled(|s| matches!(s, Settled::Committed(_))),
        settled(|s| *s == Settled::Released),
    );
}
