//! The crash loop: creates and tombstones from concurrent clients, reservations, commits and
//! releases from concurrent spenders, charges on a budget whose one-second periods pass all
//! the while, `kill -9` at a random instant, restart on the same database, and check that
//! every acknowledged write is there, that no write is half there, that no budget is
//! overspent, that every boundary is recorded once, in order and on its second, and that the
//! chain replays to the stored figures. Cycle after cycle.
//!
//! `CRASH_CYCLES` sets the number of cycles (10 by default, `make crash-test` runs 200) and
//! `CRASH_SEED` replays a run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::helpers::*;

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
    // One statement, so one snapshot: the restarted server records boundaries meanwhile.
    let sql = format!(
        "SELECT e.id, e.kind, e.amount_atomic, e.occurred_at, \
         CAST((SELECT count(*) FROM periods WHERE budget_id = '{budget}') AS TEXT), \
         CAST((SELECT count(*) FROM audit_events \
               WHERE tenant_id = '{tenant}' AND action = 'budget.period_reset') AS TEXT) \
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

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
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

/// Checks every acknowledged reservation and every budget's invariant.
fn check_spending(app: &TestApp, spent: &Spent, context: &str) -> usize {
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
    for row in rows {
        let [id, figures @ ..] = <[String; 5]>::try_from(row).expect("five columns");
        let [credited, debited, spent, reserved] =
            figures.map(|f| f.parse::<u128>().expect("an amount"));
        assert!(
            credited >= debited + spent + reserved,
            "{context}: budget {id} is overspent: {credited} < {debited} + {spent} + {reserved}"
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
    let mut app = spawn_app();
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let spent = Arc::new(Mutex::new(Spent::new()));
    let charged = Arc::new(Mutex::new(Charged::new()));
    let started = Instant::now();
    // Each spender spends from its own tenant's default budget, cycle after cycle.
    let spenders: Vec<(String, String)> = (0..SPENDERS)
        .map(|n| {
            let created = app.create_ok(&format!("spender-{n}"), &SPENDER_DEPOSIT.to_string());
            let budget = created["budget"]["id"]
                .as_str()
                .expect("a budget id")
                .to_owned();
            (tenant_id(&created), budget)
        })
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

    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let spender_seeds: Vec<u64> = (0..SPENDERS).map(|_| rng.next_u64()).collect();
        let charger_seed = rng.next_u64();
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
            .collect();
        let delay = rng.range(KILL_AFTER_MS_MIN, KILL_AFTER_MS_MAX);
        thread::sleep(Duration::from_millis(delay));
        app.kill();
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.join().expect("a load client panicked");
        }

        app.start();
        let acked = acked.lock().expect("acked lock");
        let context = format!("cycle {cycle} (seed {seed})");
        let (tenants, tombstoned) = check(&app, &acked, &context);
        let reservations = check_spending(&app, &spent.lock().expect("spent lock"), &context);
        let charges = charged.lock().expect("charged lock");
        let (tenant, budget) = (periodic.0.as_str(), periodic.1.as_str());
        let boundaries = check_periods(
            &app,
            (tenant, budget),
            periodic_created_ms,
            &charges,
            &context,
        );
        println!(
            "cycle {cycle}: killed after {delay} ms; {} creates and {} tombstones acknowledged so far; \
             {tenants} tenants stored, {tombstoned} tombstoned, {reservations} reservations, \
             {} charges, {boundaries} boundaries; nothing lost, nothing overspent",
            acked.created.len(),
            acked.tombstoned.len(),
            charges.len()
        );
    }
    let acked = acked.lock().expect("acked lock");
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
