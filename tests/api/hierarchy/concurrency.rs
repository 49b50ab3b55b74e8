//! Many clients spending at once on one tree: an organisation short of funds over two teams,
//! each over three keys, where the keys' own funds and the teams' far exceed the
//! organisation's. Every spend under the organisation must fit it too, so charges, reserves,
//! commits within and above their holds, and releases on the keys, the teams and the
//! organisation itself, sent from many threads at once, race for its last funds. No level is
//! ever overspent: every answer is a success or `409 insufficient_funds` naming the
//! organisation (the one level that can be short); each level's figures are what the
//! acknowledged spends made on it and under it add up to; each level's ledger holds exactly the
//! entries of those spends and replays, the invariant holding after every entry; the audit
//! chain has one row per acknowledged spend and `tenantd audit verify` passes.
//!
//! The tree, the race and its checks take a list of addresses: `postgres_instances::tree` runs
//! them on three instances sharing one PostgreSQL database.

use std::collections::BTreeMap;
use std::iter::successors;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{assert_parent, budget_body, charges_path};
use crate::helpers::*;
use crate::wire::Response;

/// Concurrent clients, each request on a connection of its own.
const THREADS: usize = 16;

/// Requests each client sends (then one release for each hold it still has).
const REQUESTS: usize = 50;

/// When the clients stop sending new requests, from their start, whatever they have left.
const DEADLINE: Duration = Duration::from_secs(12);

/// Teams under the organisation.
const TEAMS: usize = 2;

/// Keys under each team.
const KEYS_PER_TEAM: usize = 3;

/// Budgets in the tree: the organisation, then the teams, then the keys, team by team.
const BUDGETS: usize = 1 + TEAMS + TEAMS * KEYS_PER_TEAM;

/// The organisation's deposit: what every spend in the tree races for.
const ORG_DEPOSIT: u128 = 1000;

/// Each team's deposit: more than the organisation can ever let through.
const TEAM_DEPOSIT: u128 = 5000;

/// Each key's deposit.
const KEY_DEPOSIT: u128 = 20_000;

/// The largest amount of a charge or a reservation (each at least 1).
const AMOUNT_MAX: u64 = 5;

/// The largest excess of a commit above its hold (each at least 1).
const EXCESS_MAX: u64 = 5;

/// In how many of a hundred requests a client with holds settles one rather than spend anew.
const SETTLE_PERCENT: u64 = 45;

/// How long the observer waits between two readings of the upper levels.
const OBSERVE_EVERY: Duration = Duration::from_millis(15);

/// The parent of budget `i`: none for the organisation, the organisation for a team, a key's
/// team.
fn parent(i: usize) -> Option<usize> {
    match i {
        0 => None,
        team if team <= TEAMS => Some(0),
        key => Some(1 + (key - 1 - TEAMS) / KEYS_PER_TEAM),
    }
}

/// Budget `i` and every budget above it, nearest first.
fn levels(i: usize) -> Vec<usize> {
    successors(Some(i), |&j| parent(j)).collect()
}

/// The opening deposit of budget `i`.
fn deposit(i: usize) -> u128 {
    match i {
        0 => ORG_DEPOSIT,
        team if team <= TEAMS => TEAM_DEPOSIT,
        _ => KEY_DEPOSIT,
    }
}

/// A name for budget `i`, in messages and as the budget's name.
fn name(i: usize) -> String {
    match i {
        0 => "org".to_owned(),
        team if team <= TEAMS => format!("team-{team}"),
        key => format!("key-{}-{}", parent(key).unwrap_or(0), key),
    }
}

/// One request of a client, on budget `on` (an index of the tree).
#[derive(Clone, Debug)]
enum Op {
    /// A charge of an amount.
    Charge { on: usize, amount: u128 },
    /// A reservation of an amount.
    Reserve { on: usize, amount: u128 },
    /// A commit of an amount of the reservation `rid`, which holds `held`.
    Commit {
        on: usize,
        rid: String,
        held: u128,
        amount: u128,
    },
    /// A release of the reservation `rid`, which holds `held`.
    Release { on: usize, rid: String, held: u128 },
}

impl Op {
    /// The budget the request names, or whose reservation it settles.
    fn on(&self) -> usize {
        match self {
            Self::Charge { on, .. }
            | Self::Reserve { on, .. }
            | Self::Commit { on, .. }
            | Self::Release { on, .. } => *on,
        }
    }

    /// What the request must find available at every level: nothing for a release or a
    /// commit within its hold, which no level can refuse.
    fn needs(&self) -> u128 {
        match self {
            Self::Charge { amount, .. } | Self::Reserve { amount, .. } => *amount,
            Self::Commit { held, amount, .. } => amount.saturating_sub(*held),
            Self::Release { .. } => 0,
        }
    }

    /// The status of its success.
    fn success(&self) -> u16 {
        match self {
            Self::Charge { .. } | Self::Reserve { .. } => 201,
            Self::Commit { .. } | Self::Release { .. } => 200,
        }
    }
}

/// The tree as its clients reach it: the servers' addresses (requests go to each in turn),
/// the tenant's token and the admin's (each request takes the next), the tenant and the
/// tree's budget ids by index.
#[derive(Clone)]
pub(crate) struct Client {
    addrs: Vec<String>,
    auths: [String; 2],
    tid: String,
    bids: Vec<String>,
}

impl Client {
    /// Creates a tenant named `tenant` (its default budget empty, outside the tree) and the
    /// tree's budgets under it, top first, each through the next of `addrs`, as `admin`.
    pub(crate) fn build(addrs: &[String], admin: &str, tenant: &str) -> Self {
        let body = tenant_body(tenant, "0");
        let resp = send(
            &addrs[0],
            "POST",
            "/v1/tenants",
            admin,
            Some(&body),
            None,
            &[],
        );
        let created = assert_status(&resp, 201, &format!("creating tenant {tenant:?}"));
        let mut client = Self {
            addrs: addrs.to_vec(),
            auths: [bearer(&tenant_token(&created)), admin.to_owned()],
            tid: tenant_id(&created),
            bids: Vec::new(),
        };
        for i in 0..BUDGETS {
            let above = parent(i).map(|p| client.bids[p].as_str());
            let deposit = deposit(i).to_string();
            let body = budget_body(&name(i), &deposit, above).to_string();
            let (addr, path) = (client.addr(i), budgets_path(&client.tid));
            let resp = send(addr, "POST", &path, admin, Some(&body), None, &[]);
            let ctx = format!("creating {}", name(i));
            let b = assert_created(&resp, &path, &ctx);
            assert_parent(&b, above, &ctx);
            client.bids.push(id_of(&b));
        }
        client
    }

    /// The address of request `n`.
    fn addr(&self, n: usize) -> &str {
        &self.addrs[n % self.addrs.len()]
    }

    /// Sends `op` as request `n` of its client: to the `n`th address and with the `n`th
    /// credential (each modulo their number), on a connection of its own.
    fn send(&self, n: usize, op: &Op) -> Response {
        let (tid, auth) = (&self.tid, &self.auths[n % self.auths.len()]);
        let (path, body) = match op {
            Op::Charge { on, amount } => {
                let body =
                    json!({ "budget_id": self.bids[*on], "amount_atomic": amount.to_string() });
                (charges_path(tid), Some(body))
            }
            Op::Reserve { on, amount } => {
                let body = reserve_body(&self.bids[*on], &amount.to_string(), None);
                (reservations_path(tid), Some(body))
            }
            Op::Commit { rid, amount, .. } => (
                reservation_path(tid, rid, "commit"),
                Some(amount_body(&amount.to_string())),
            ),
            Op::Release { rid, .. } => (reservation_path(tid, rid, "release"), None),
        };
        let text = body.map(|b| b.to_string());
        send(
            self.addr(n),
            "POST",
            &path,
            auth,
            text.as_deref(),
            None,
            &[],
        )
    }

    /// `GET path` through the `n`th address as the admin, asserting `200`; the body.
    fn get(&self, n: usize, path: &str) -> Value {
        let resp = send(self.addr(n), "GET", path, &self.auths[1], None, None, &[]);
        assert_ok(&resp, &format!("GET {path} through {}", self.addr(n)))
    }

    /// Budget `i` as the admin reads it through the `n`th address.
    fn budget(&self, n: usize, i: usize) -> Value {
        self.get(n, &budget_path(&self.tid, &self.bids[i], ""))
    }

    /// Every ledger entry of budget `i`, oldest first, through the first address, each page
    /// as large as a page may be.
    fn entries(&self, i: usize) -> Vec<Value> {
        let path = budget_path(&self.tid, &self.bids[i], "entries");
        let mut entries = Vec::new();
        let mut query = with_query(&path, &format!("limit={PAGE_LIMIT_MAX}"));
        loop {
            let page = self.get(0, &query);
            let data = page["data"].as_array();
            entries.extend(
                data.unwrap_or_else(|| panic!("GET {query}: {page}"))
                    .clone(),
            );
            let Some(next) = page["next_after"].as_str() else {
                return entries;
            };
            query = with_query(&path, &format!("limit={PAGE_LIMIT_MAX}&after={next}"));
        }
    }
}

/// A hold a client took and has not settled: its id, its budget and its amount.
type Hold = (String, usize, u128);

/// A number in `lo..=hi` as an amount.
fn pick(rng: &mut Rng, lo: u64, hi: u64) -> u128 {
    u128::from(rng.range(lo, hi))
}

/// The next request of a client that holds `holds`: now and then a settlement of one of
/// them (a commit within it, a commit above it, a release, as often each), otherwise a charge
/// or a reserve on a key (half the time), a team or the organisation.
fn next_op(rng: &mut Rng, holds: &[Hold]) -> Op {
    if !holds.is_empty() && rng.range(0, 99) < SETTLE_PERCENT {
        let last = u64::try_from(holds.len() - 1).expect("a small count");
        let index = usize::try_from(rng.range(0, last)).expect("a small index");
        let (rid, on, held) = holds[index].clone();
        let held_u64 = u64::try_from(held).expect("a small amount");
        return match rng.range(0, 2) {
            0 => Op::Commit {
                on,
                rid,
                held,
                amount: pick(rng, 0, held_u64),
            },
            1 => Op::Commit {
                on,
                rid,
                held,
                amount: pick(rng, held_u64 + 1, held_u64 + EXCESS_MAX),
            },
            _ => Op::Release { on, rid, held },
        };
    }
    let on = match rng.range(0, 9) {
        0 | 1 => 0,
        2..=4 => {
            let teams = u64::try_from(TEAMS - 1).expect("a small count");
            1 + usize::try_from(rng.range(0, teams)).expect("a team")
        }
        _ => {
            let keys = u64::try_from(TEAMS * KEYS_PER_TEAM - 1).expect("a small count");
            1 + TEAMS + usize::try_from(rng.range(0, keys)).expect("a key")
        }
    };
    let amount = pick(rng, 1, AMOUNT_MAX);
    if rng.range(0, 1) == 0 {
        Op::Charge { on, amount }
    } else {
        Op::Reserve { on, amount }
    }
}

/// Keeps `holds` as `op`'s answer leaves them: a granted reserve adds one; a commit or a
/// release answered takes its hold away, but for a commit refused for lack of funds, whose
/// hold stays.
fn settle(holds: &mut Vec<Hold>, op: &Op, resp: &Response) {
    match op {
        Op::Reserve { on, amount } if resp.status == 201 => {
            let rid = resp.json()["id"].as_str().map(str::to_owned);
            holds.extend(rid.map(|rid| (rid, *on, *amount)));
        }
        Op::Commit { .. } if resp.status == 409 => {}
        Op::Commit { rid, .. } | Op::Release { rid, .. } => holds.retain(|h| &h.0 != rid),
        _ => {}
    }
}

/// One client: up to [`REQUESTS`] requests (fewer if the deadline comes first), each with
/// the next credential, then a release of every hold it still has. Every request with its
/// answer, in the order sent.
fn run_client(
    client: &Client,
    thread_no: usize,
    seed: u64,
    deadline: Instant,
) -> Vec<(Op, Response)> {
    let thread_seed = u64::try_from(thread_no).expect("a small number") + 1;
    let mut rng = Rng::new(seed ^ thread_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut holds: Vec<Hold> = Vec::new();
    let mut answers = Vec::new();
    for n in 0..REQUESTS {
        if Instant::now() >= deadline {
            break;
        }
        let op = next_op(&mut rng, &holds);
        let resp = client.send(thread_no + n, &op);
        settle(&mut holds, &op, &resp);
        answers.push((op, resp));
    }
    for (n, (rid, on, held)) in holds.into_iter().enumerate() {
        let op = Op::Release { on, rid, held };
        let resp = client.send(n, &op);
        answers.push((op, resp));
    }
    answers
}

/// Reads the organisation and the teams again and again until `stop`: each reading's figures
/// consistent and within the invariant ([`Figures::of`]), nothing credited or debited but the
/// deposit, and `spent_atomic` never going back. How many readings it made.
fn observe(client: &Client, stop: &AtomicBool) -> usize {
    let mut spent = [0u128; 1 + TEAMS];
    let mut readings = 0;
    while !stop.load(Ordering::Relaxed) {
        for (i, was) in spent.iter_mut().enumerate() {
            let ctx = format!("{} read during the race", name(i));
            let f = Figures::of(&client.budget(readings + i, i), &ctx);
            assert_eq!((f.credited, f.debited), (deposit(i), 0), "{ctx}: {f:?}");
            assert!(f.spent >= *was, "{ctx}: spent went back from {was}: {f:?}");
            *was = f.spent;
        }
        readings += 1;
        thread::sleep(OBSERVE_EVERY);
    }
    readings
}

/// A ledger entry of a spend as the checks compare them: its kind, amount, `via_budget_id`
/// and `reservation_id`.
type Entry = (String, u128, Option<String>, Option<String>);

/// Entries of a ledger, each with how many times it occurs.
type Entries = BTreeMap<Entry, usize>;

/// What the answers add up to: per budget, the spends acknowledged on it and under it, the
/// holds still active, and the ledger entries each level should have; per audit action,
/// how many rows.
#[derive(Default)]
struct Tally {
    spent: [u128; BUDGETS],
    reserved: [u128; BUDGETS],
    /// Per budget, the entries of the spends acknowledged on it and under it.
    entries: Vec<Entries>,
    /// Acknowledged charges, reserves, commits and releases.
    acknowledged: BTreeMap<&'static str, usize>,
    /// Refusals for lack of funds.
    short: usize,
}

impl Tally {
    /// Checks every answer against its request and adds up what was acknowledged. Any
    /// answer but the request's success or `409 insufficient_funds` where a level could be
    /// short fails the test, with every such answer in the message.
    fn of(answers: &[(Op, Response)], bids: &[String], seed: u64) -> Self {
        let mut t = Self {
            entries: vec![BTreeMap::new(); BUDGETS],
            ..Self::default()
        };
        let unexpected: Vec<String> = answers
            .iter()
            .filter(|(op, resp)| {
                let refusable = op.needs() > 0 && resp.status == 409;
                resp.status != op.success() && !refusable
            })
            .map(|(op, resp)| format!("{op:?}: {}", resp.describe()))
            .collect();
        assert!(
            unexpected.is_empty(),
            "every answer a success or 409 insufficient_funds (seed {seed}); {} of {} not: {unexpected:#?}",
            unexpected.len(),
            answers.len()
        );
        for (op, resp) in answers {
            let ctx = format!("{op:?} (seed {seed})");
            if resp.status == 409 {
                t.refused(op, resp, &bids[0], &ctx);
            } else {
                t.acknowledge(op, &resp.json(), bids, &ctx);
            }
        }
        t
    }

    /// Checks a refusal: `insufficient_funds` naming the organisation, whose available amount
    /// it shows was less than the request needed.
    fn refused(&mut self, op: &Op, resp: &Response, org: &str, ctx: &str) {
        let body = assert_conflict(resp, "insufficient_funds", ctx);
        assert_eq!(
            body["budget_id"],
            json!(org),
            "{ctx}: the level named: {body}"
        );
        let available = amount(&body, "available_atomic");
        assert!(
            available < op.needs(),
            "{ctx}: it was not available: {body}"
        );
        self.short += 1;
    }

    /// Checks a success's body and adds what it moved at every level.
    fn acknowledge(&mut self, op: &Op, body: &Value, bids: &[String], ctx: &str) {
        let on = op.on();
        let (kind, moved, rid) = match op {
            Op::Charge { amount, .. } => {
                assert_entry_shape(body, ctx);
                let expected = [
                    ("kind", json!("charge")),
                    ("budget_id", json!(bids[on])),
                    ("amount_atomic", json!(amount.to_string())),
                    ("via_budget_id", Value::Null),
                ];
                assert_fields(body, &expected, ctx);
                ("charge", *amount, None)
            }
            Op::Reserve { amount, .. } => {
                assert_reservation_shape(body, ctx);
                let expected = [
                    ("state", json!("active")),
                    ("budget_id", json!(bids[on])),
                    ("amount_atomic", json!(amount.to_string())),
                ];
                assert_fields(body, &expected, ctx);
                ("reserve", *amount, Some(id_of(body)))
            }
            Op::Commit { rid, amount, .. } => {
                let expected = [
                    ("id", json!(rid)),
                    ("state", json!("committed")),
                    ("committed_atomic", json!(amount.to_string())),
                ];
                assert_fields(body, &expected, ctx);
                ("commit", *amount, Some(rid.clone()))
            }
            Op::Release { rid, held, .. } => {
                let expected = [("id", json!(rid)), ("state", json!("released"))];
                assert_fields(body, &expected, ctx);
                ("release", *held, Some(rid.clone()))
            }
        };
        *self.acknowledged.entry(kind).or_default() += 1;
        for level in levels(on) {
            match op {
                Op::Charge { amount, .. } => self.spent[level] += amount,
                Op::Reserve { amount, .. } => self.reserved[level] += amount,
                Op::Commit { held, amount, .. } => {
                    self.spent[level] += amount;
                    self.reserved[level] -= held;
                }
                Op::Release { held, .. } => self.reserved[level] -= held,
            }
            let via = (level != on).then(|| bids[on].clone());
            let entry = (kind.to_owned(), moved, via, rid.clone());
            *self.entries[level].entry(entry).or_default() += 1;
        }
    }

    /// How many requests of `kind` were acknowledged.
    fn count(&self, kind: &str) -> usize {
        self.acknowledged.get(kind).copied().unwrap_or(0)
    }
}

/// The entries of a ledger but its opening deposit, as [`Tally::entries`] counts them.
fn spend_entries(ledger: &[Value]) -> Entries {
    let mut counted = BTreeMap::new();
    for e in ledger.iter().filter(|e| e["kind"] != "opening_deposit") {
        let text = |member: &str| e[member].as_str().map(str::to_owned);
        let entry = (
            str_of(e, "kind").to_owned(),
            amount(e, "amount_atomic"),
            text("via_budget_id"),
            text("reservation_id"),
        );
        *counted.entry(entry).or_default() += 1;
    }
    counted
}

/// What a race left: every request with its answer, how long the clients took, and how many
/// readings the observer made meanwhile.
pub(crate) struct Race {
    answers: Vec<(Op, Response)>,
    took: Duration,
    readings: usize,
}

impl Race {
    /// [`THREADS`] clients released together, each running [`run_client`] (timing from
    /// `seed`) while [`observe`] reads the upper levels.
    pub(crate) fn run(client: &Client, seed: u64) -> Self {
        let started = Instant::now();
        let deadline = started + DEADLINE;
        let stop = Arc::new(AtomicBool::new(false));
        let observer = {
            let (client, stop) = (client.clone(), Arc::clone(&stop));
            thread::spawn(move || observe(&client, &stop))
        };
        let barrier = Arc::new(Barrier::new(THREADS));
        let clients: Vec<_> = (0..THREADS)
            .map(|thread_no| {
                let (client, barrier) = (client.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    barrier.wait();
                    run_client(&client, thread_no, seed, deadline)
                })
            })
            .collect();
        let answers: Vec<(Op, Response)> = clients
            .into_iter()
            .flat_map(|c| c.join().expect("a client panicked"))
            .collect();
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let readings = observer.join().expect("the observer saw a level overspent");
        Self {
            answers,
            took,
            readings,
        }
    }

    /// Checks the race's answers and what they left: the tally of [`Tally::of`]; each
    /// level's figures, the same through every address, equal to its deposit and the spends
    /// acknowledged on it and under it, nothing left reserved; each ledger's entries exactly
    /// those spends', and its replay; as many rows of each spend's audit action as were
    /// acknowledged, `audit_rows` counting the rows of an action. A line that sums it up.
    pub(crate) fn check(
        &self,
        client: &Client,
        seed: u64,
        audit_rows: impl Fn(&str) -> usize,
    ) -> String {
        let t = Tally::of(&self.answers, &client.bids, seed);
        assert!(
            t.short > 0,
            "the organisation ran short: no spend was refused (seed {seed})"
        );
        for i in 0..BUDGETS {
            let ctx = format!("{} ({}), seed {seed}", name(i), client.bids[i]);
            let read = client.budget(0, i);
            for n in 1..client.addrs.len() {
                let through = client.budget(n, i);
                assert_eq!(through, read, "{ctx}: the same through {}", client.addr(n));
            }
            let shown = Figures::of(&read, &ctx);
            let expected = Figures::new(deposit(i), 0, t.spent[i], t.reserved[i]);
            assert_eq!(
                shown, expected,
                "{ctx}: the figures are the deposit and the spends acknowledged on it and under it"
            );
            assert_eq!(shown.reserved, 0, "{ctx}: every hold was settled");
            let ledger = client.entries(i);
            assert_eq!(
                spend_entries(&ledger),
                t.entries[i],
                "{ctx}: one entry per acknowledged spend on it or under it, and no other"
            );
            let replayed = replay(&ledger, &format!("the ledger of {ctx}"));
            assert_eq!(replayed, shown, "{ctx}: the ledger replays to the figures");
        }
        let actions = [
            ("budget.charged", "charge"),
            ("reservation.created", "reserve"),
            ("reservation.committed", "commit"),
            ("reservation.released", "release"),
        ];
        for (action, kind) in actions {
            assert_eq!(
                audit_rows(action),
                t.count(kind),
                "one {action} row per acknowledged {kind} (seed {seed})"
            );
        }
        let org = Figures::of(&client.budget(0, 0), "the organisation");
        format!(
            "{} requests from {THREADS} clients in {:.1} s through {} instance(s) (seed {seed}): \
             {:?} acknowledged, {} refused for the organisation's lack of funds; the \
             organisation spent {} of {}; {} readings of the upper levels meanwhile",
            self.answers.len(),
            self.took.as_secs_f64(),
            client.addrs.len(),
            t.acknowledged,
            t.short,
            org.spent,
            org.credited,
            self.readings,
        )
    }
}

/// How many audit rows of `action` the chain of `app` holds.
fn audit_rows(app: &TestApp, action: &str) -> usize {
    let sql = format!("SELECT count(*) FROM audit_events WHERE action = '{action}'");
    usize::try_from(app.count(&sql)).expect("a count")
}

#[test]
fn many_clients_spending_on_every_level_of_a_tree_never_overspend_any_level() {
    let app = spawn_app();
    let client = Client::build(
        std::slice::from_ref(&app.addr),
        &app.admin(),
        "contested-tree",
    );
    let seed = now_ms().unsigned_abs();
    let race = Race::run(&client, seed);
    let summary = race.check(&client, seed, |action| audit_rows(&app, action));
    let verified = app.audit_verify();
    assert_eq!(
        verified.code,
        Some(0),
        "audit verify after the race (seed {seed}): {verified:?}"
    );
    eprintln!("{:?}: {summary}", app.backend());
}
