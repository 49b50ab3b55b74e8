//! Budgets in a tree: charges on a leaf with 3 ancestors against charges on a flat budget, on
//! one server. Every tenant of the spread rows ([`SPREAD_BUDGETS`] of them) and one hot tenant
//! get a chain org → team → project → key beside their default budget; the charges on the
//! default budgets (flat) and on the keys (leaves) are measured in slices that take turns, so
//! that their ratio is fair, over every tenant and then on the hot one. Then the same flat
//! budgets take turns with the keys of trees as a platform keeps them, whose upper levels
//! many keys share ([`crate::forest`]). At the end every budget of every tenant is read:
//! every level must have spent exactly what was acknowledged on the keys under it, every flat
//! budget what was acknowledged on it, and none may be overspent.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::admin::{Admin, admin_auth, figure, grouped, within_invariant};
use crate::args::Args;
use crate::client::{
    LATENCY_US_MAX, READ_CHUNK_BYTES, Seeded, Stop, Tally, connect, histogram, next, post_json,
    seed_from_clock,
};
use crate::forest::{Forest, LEAVES, TREES};
use crate::report::Row;
use crate::server::{Sample, Server};
use crate::spend::SPREAD_BUDGETS;
use crate::workloads::seed;

/// The levels of each tenant's chain, top first; each is the parent of the next.
const LEVELS: [&str; 4] = ["org", "team", "project", "key"];

/// The ancestors of the key, the leaf the charges go to.
const ANCESTORS: usize = LEVELS.len() - 1;

/// The measured slices of each row of a pair: the two rows take turns (flat, leaf, leaf,
/// flat, …), each slice a `SLICES`th of `--duration-s`.
const SLICES: u32 = 4;

/// The rows and notes of the group.
pub(crate) async fn measure(args: &Args) -> Result<(Vec<Row>, Vec<String>), String> {
    eprintln!(
        "server: charges on a leaf with {ANCESTORS} ancestors against a flat budget, over \
         {SPREAD_BUDGETS} tenants, then on one"
    );
    let server = Server::start(args, &[])?;
    let spread = Arc::new(seed(&server, args, 0, SPREAD_BUDGETS).await?);
    let hot = Arc::new(vec![hot_tenant(&server).await?]);
    let tenants: Vec<&Seeded> = spread.iter().chain(hot.iter()).collect();
    let paths = tenants.iter().map(|t| t.path.clone()).collect();
    // One chain for each tenant, the hot one's last.
    let chains = seed_chains(&server, args, paths).await?;

    let n = SPREAD_BUDGETS;
    let leaf = format!("POST charge on a leaf with {ANCESTORS} ancestors");
    let mut notes = Vec::new();
    let spread_pair = (
        Side::new(format!("POST charge, flat, {n} budgets"), &spread),
        Side::new(format!("{leaf}, {n} leaves"), &leaves(&spread, &chains)),
    );
    let ([flat_row, leaf_row], [mut on_flat, mut on_leaf]) =
        measure_pair(args, &server, spread_pair, &mut notes).await?;
    let hot_pair = (
        Side::new("POST charge, flat, one hot budget".into(), &hot),
        Side::new(
            format!("{leaf}, one hot leaf"),
            &leaves(&hot, &chains[spread.len()..]),
        ),
    );
    let ([hot_flat_row, hot_leaf_row], [on_hot_flat, on_hot_leaf]) =
        measure_pair(args, &server, hot_pair, &mut notes).await?;
    // The same flat budgets against the keys of trees whose upper levels are shared.
    let forest = Forest::seed(&server).await?;
    let forest_pair = (
        Side::new(format!("POST charge, flat, {n} budgets (again)"), &spread),
        Side::new(
            format!("{leaf}, {LEAVES} leaves in {TREES} trees"),
            &forest.keys,
        ),
    );
    let ([again_row, forest_row], [on_flat_again, on_keys]) =
        measure_pair(args, &server, forest_pair, &mut notes).await?;

    let ratio = |flat: &Row, leaf: &Row| 100.0 * leaf.requests_per_s / flat.requests_per_s;
    let note = format!(
        "tree: a leaf's charges at {:.0} % of a flat budget's ({} budgets, each leaf in a tree \
         of its own); {:.0} % in {TREES} trees of {} leaves; {:.0} % on one hot one",
        ratio(&flat_row, &leaf_row),
        grouped(n),
        ratio(&again_row, &forest_row),
        LEAVES / TREES,
        ratio(&hot_flat_row, &hot_leaf_row),
    );
    notes.insert(0, note);
    for (into, again) in on_flat.iter_mut().zip(on_flat_again) {
        *into += again;
    }
    on_flat.extend(on_hot_flat);
    on_leaf.extend(on_hot_leaf);
    notes.push(check(&server, &tenants, &chains, &on_flat, &on_leaf).await?);
    notes.push(forest.check(&server, &on_keys).await?);
    notes.extend(server.notes("charges on flat budgets and on leaves"));
    server.stop();
    let rows = [flat_row, leaf_row, hot_flat_row, hot_leaf_row];
    Ok((
        rows.into_iter().chain([again_row, forest_row]).collect(),
        notes,
    ))
}

/// The hot tenant: its default budget opened with [`crate::admin::UNSPENT`].
async fn hot_tenant(server: &Server) -> Result<Seeded, String> {
    let mut admin = Admin::open(server.addr(0), admin_auth(server)).await?;
    let name = format!("tree-hot-{:x}", seed_from_clock());
    admin.create_tenant(&name).await
}

/// Creates the chain of [`LEVELS`] in each tenant of `paths`, on [`Args::connections`]
/// connections (a chain's budgets one after another, each the parent of the next; the chains
/// side by side): each chain's ids, top first, in the order of `paths`.
async fn seed_chains(
    server: &Server,
    args: &Args,
    paths: Vec<String>,
) -> Result<Vec<[String; LEVELS.len()]>, String> {
    let started = Instant::now();
    let count = paths.len();
    let (paths, taken) = (Arc::new(paths), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::with_capacity(args.connections);
    for i in 0..args.connections.min(count) {
        let admin = Admin::open(server.addr(i), admin_auth(server)).await?;
        let (paths, taken) = (Arc::clone(&paths), Arc::clone(&taken));
        tasks.push(tokio::spawn(chain_loop(admin, paths, taken)));
    }
    let mut chains: Vec<Option<[String; LEVELS.len()]>> = (0..count).map(|_| None).collect();
    for task in tasks {
        for (i, chain) in task.await.map_err(|e| e.to_string())?? {
            chains[i] = Some(chain);
        }
    }
    eprintln!(
        "  seeded {count} chains of {} budgets ({:.0} budgets/s)",
        LEVELS.len(),
        (count * LEVELS.len()) as f64 / started.elapsed().as_secs_f64()
    );
    chains
        .into_iter()
        .map(|chain| chain.ok_or_else(|| "a chain was not made".to_owned()))
        .collect()
}

/// One connection's share of [`seed_chains`]: the next tenant not yet taken, until none is
/// left. Any answer but `201` ends the seeding.
async fn chain_loop(
    mut admin: Admin,
    paths: Arc<Vec<String>>,
    taken: Arc<AtomicUsize>,
) -> Result<Vec<(usize, [String; LEVELS.len()])>, String> {
    let mut made = Vec::new();
    loop {
        let i = taken.fetch_add(1, Ordering::Relaxed);
        let Some(path) = paths.get(i) else {
            return Ok(made);
        };
        let mut chain: [String; LEVELS.len()] = Default::default();
        for (level, name) in LEVELS.iter().enumerate() {
            let parent = level.checked_sub(1).map(|up| chain[up].as_str());
            chain[level] = admin.create_budget(path, name, parent).await?;
        }
        made.push((i, chain));
    }
}

/// Targets for charges on the key of each chain: the tenant's own token and path, the key's
/// budget.
fn leaves(tenants: &[Seeded], chains: &[[String; LEVELS.len()]]) -> Arc<Vec<Seeded>> {
    let leaves = tenants.iter().zip(chains).map(|(tenant, chain)| {
        let key = &chain[ANCESTORS];
        Seeded {
            path: tenant.path.clone(),
            budget_path: format!("{}/budgets/{key}", tenant.path),
            budget_id: key.clone(),
            auth: tenant.auth.clone(),
        }
    });
    Arc::new(leaves.collect())
}

/// What a phase of charges did: latencies, statuses, and the charges acknowledged on each
/// target, by its index.
struct Charged {
    hist: Histogram<u64>,
    tally: Tally,
    acked: Vec<u64>,
}

impl Charged {
    fn new(targets: usize) -> Self {
        Charged {
            hist: histogram(),
            tally: Tally::default(),
            acked: vec![0; targets],
        }
    }

    fn merge(&mut self, other: Charged) -> Result<(), String> {
        self.hist.add(&other.hist).map_err(|e| e.to_string())?;
        self.tally.merge(other.tally);
        for (into, n) in self.acked.iter_mut().zip(other.acked) {
            *into += n;
        }
        Ok(())
    }
}

/// One connection's closed loop of charges of 1 on targets picked at random, each with its
/// tenant's own token; every `201` is counted on its target.
async fn charge_loop(
    addr: SocketAddr,
    targets: Arc<Vec<Seeded>>,
    stop: Stop,
    seed: u64,
) -> Result<Charged, String> {
    let mut stream = connect(addr).await?;
    let mut rng = seed | 1;
    let (mut request, mut body) = (Vec::with_capacity(512), Vec::with_capacity(128));
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut charged = Charged::new(targets.len());
    while stop.take() {
        let t = (next(&mut rng) % targets.len() as u64) as usize;
        let target = &targets[t];
        body.clear();
        write!(
            body,
            r#"{{"budget_id":"{}","amount_atomic":"1"}}"#,
            target.budget_id
        )
        .expect("a Vec");
        let path = format!("{}/charges", target.path);
        let (frame, micros) = post_json(
            &mut stream,
            (&mut request, &mut buf),
            &path,
            target.auth.as_str(),
            &body,
        )
        .await?;
        charged
            .hist
            .saturating_record(micros.clamp(1, LATENCY_US_MAX));
        charged.tally.count(frame.head.status);
        if frame.head.status == 201 {
            charged.acked[t] += 1;
        }
        buf.drain(..frame.len);
    }
    Ok(charged)
}

/// Runs one [`charge_loop`] per connection until `stop`, and merges what they saw.
async fn charge_phase(
    server: &Server,
    targets: &Arc<Vec<Seeded>>,
    connections: usize,
    stop: Stop,
) -> Result<Charged, String> {
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let seed = (seed_from_clock() as u64) ^ ((i as u64 + 1) << 32);
            let targets = Arc::clone(targets);
            tokio::spawn(charge_loop(server.addr(i), targets, stop.clone(), seed))
        })
        .collect();
    let mut all = Charged::new(targets.len());
    for task in tasks {
        all.merge(task.await.map_err(|e| e.to_string())??)?;
    }
    Ok(all)
}

/// One row of a pair: its name and targets, the charges acknowledged on each target over all
/// its slices (warm-up included), and its measured slices added up.
struct Side {
    name: String,
    targets: Arc<Vec<Seeded>>,
    acked: Vec<u64>,
    /// Non-2xx answers in the warm-up, which no row shows.
    warmup_errors: u64,
    measured: Charged,
    /// The server's counters over the measured slices, and their seconds.
    cost: Option<Sample>,
    seconds: f64,
}

impl Side {
    fn new(name: String, targets: &Arc<Vec<Seeded>>) -> Self {
        Side {
            name,
            targets: Arc::clone(targets),
            acked: vec![0; targets.len()],
            warmup_errors: 0,
            measured: Charged::new(targets.len()),
            cost: None,
            seconds: 0.0,
        }
    }

    /// One slice of charges on every connection for `length`, added to the row if `measured`.
    async fn slice(
        &mut self,
        args: &Args,
        server: &Server,
        length: Duration,
        measured: bool,
    ) -> Result<(), String> {
        let before = server.sample_before();
        let started = Instant::now();
        let stop = Stop::At(started + length);
        let charged = charge_phase(server, &self.targets, args.connections, stop).await?;
        let seconds = started.elapsed().as_secs_f64();
        let cost = server.sample_after().since(before);
        for (into, n) in self.acked.iter_mut().zip(&charged.acked) {
            *into += n;
        }
        if !measured {
            self.warmup_errors += charged.tally.errors;
            return Ok(());
        }
        self.cost = Some(self.cost.map_or(cost, |total| add(total, cost)));
        self.seconds += seconds;
        self.measured.merge(charged)
    }

    /// The row of the measured slices, and the charges acknowledged on each target; a note
    /// of the warm-up's failed charges, if any failed.
    fn finish(self, server: &Server, notes: &mut Vec<String>) -> (Row, Vec<u64>) {
        if self.warmup_errors > 0 {
            notes.push(format!(
                "{}: {} charges of the warm-up failed",
                self.name, self.warmup_errors
            ));
        }
        let Charged { hist, tally, .. } = self.measured;
        let row = Row {
            name: self.name,
            requests_per_s: tally.requests as f64 / self.seconds,
            cost: self.cost.unwrap_or_default(),
            charged: tally.requests,
            peak_rss_kib: server.peak_rss_kib(),
            hist,
            tally,
        };
        (row, self.acked)
    }
}

/// Two phases' counters added up.
fn add(a: Sample, b: Sample) -> Sample {
    Sample {
        cpu_us: a.cpu_us + b.cpu_us,
        db_cpu_us: a.db_cpu_us.zip(b.db_cpu_us).map(|(a, b)| a + b),
        wal_frames: a.wal_frames + b.wal_frames,
        batches: a.batches + b.batches,
        commands: a.commands + b.commands,
    }
}

/// Charges on `flat` and on `leaf`: a warm-up of each, then [`SLICES`] measured slices of each,
/// taking turns and flipping the order every round. Their rows, and the charges acknowledged
/// on each target of each; the warm-up's failures go to `notes`.
async fn measure_pair(
    args: &Args,
    server: &Server,
    (flat, leaf): (Side, Side),
    notes: &mut Vec<String>,
) -> Result<([Row; 2], [Vec<u64>; 2]), String> {
    let length = args.duration / SLICES;
    eprintln!(
        "  {} / {}: {:.1} s warm-up each, then {SLICES} slices of {:.2} s each, taking turns",
        flat.name,
        leaf.name,
        args.warmup.as_secs_f64(),
        length.as_secs_f64()
    );
    let mut sides = [flat, leaf];
    for side in &mut sides {
        side.slice(args, server, args.warmup, false).await?;
    }
    for round in 0..SLICES {
        let order = if round.is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        };
        for i in order {
            sides[i].slice(args, server, length, true).await?;
        }
    }
    let [flat, leaf] = sides;
    let (flat, leaf) = (flat.finish(server, notes), leaf.finish(server, notes));
    Ok(([flat.0, leaf.0], [flat.1, leaf.1]))
}

/// Reads every budget of each tenant, page after page, and checks them: every budget within
/// its invariant; each level of the tenant's chain (top first) under the one above it, with
/// spent equal to `on_leaf` (the charges acknowledged on the key); the flat budget's spent
/// equal to `on_flat`. Any other answer than `200` is an error.
async fn check(
    server: &Server,
    tenants: &[&Seeded],
    chains: &[[String; LEVELS.len()]],
    on_flat: &[u64],
    on_leaf: &[u64],
) -> Result<String, String> {
    let mut admin = Admin::open(server.addr(0), admin_auth(server)).await?;
    let mut read = 0;
    for (i, tenant) in tenants.iter().enumerate() {
        let budgets = admin.budgets(&tenant.path).await?;
        read += budgets.len() as u64;
        for budget in &budgets {
            within_invariant(budget)?;
        }
        let spent = |id: &str| {
            let budget = budgets.iter().find(|b| b["id"] == id);
            let budget = budget.ok_or(format!("{}: budget {id} is not listed", tenant.path))?;
            Ok::<_, String>((figure(budget, "spent_atomic")?, &budget["parent_id"]))
        };
        let (flat, _) = spent(&tenant.budget_id)?;
        if flat != u128::from(on_flat[i]) {
            return Err(format!(
                "{}: the flat budget spent {flat}, but {} charges were acknowledged on it",
                tenant.path, on_flat[i]
            ));
        }
        let mut above = serde_json::Value::Null;
        for (name, id) in LEVELS.iter().zip(&chains[i]) {
            let (level, parent) = spent(id)?;
            if *parent != above || level != u128::from(on_leaf[i]) {
                return Err(format!(
                    "{}: the {name} spent {level} under {parent} (expected {} under {above}, \
                     the charges acknowledged on the key)",
                    tenant.path, on_leaf[i]
                ));
            }
            above = id.as_str().into();
        }
    }
    Ok(format!(
        "tree at the end: {} budgets of {} tenants read; every level spent exactly the charges \
         acknowledged on its key ({} in all), every flat budget those on it ({} in all); \
         nothing overspent at any level",
        grouped(read),
        grouped(tenants.len() as u64),
        grouped(on_leaf.iter().sum()),
        grouped(on_flat.iter().sum())
    ))
}
