//! Batches (`POST /v1/tenants/<id>/batch`): charges of 1 sent one a request against the same
//! charges sent in batches of [`SIZES`], over the same [`BUDGETS`] budgets on one server:
//! [`TENANTS`] tenants of [`BUDGETS_PER_TENANT`] budgets each, since a batch is one tenant's.
//! A single charge picks one of the budgets at random; a batch picks a tenant at random and
//! each of its charges one of that tenant's budgets. Every row runs on every connection, one
//! after another, with the tenant's own token.
//!
//! Each row is one closed loop per connection: a warm-up, then the measured window, and only
//! what completes inside the window is counted (its rate over the window's length, its
//! latencies). A batch of 1,000 may take seconds on 32 connections, so a loop that stopped at
//! the window's end and waited for its last answers would measure a tail of ever fewer
//! connections; here that tail comes after the window and is not measured. The server's CPU
//! and counters are read at the window's two ends.
//!
//! Every operation of every batch must answer `201` with its charge's entry; any other is an
//! error. At the end every budget is read: each must have spent exactly the charges
//! acknowledged on it (warm-up and tails included), and none may be overspent.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Deserialize;

use crate::admin::{Admin, UNSPENT, admin_auth, figure, grouped, within_invariant};
use crate::args::Args;
use crate::batch_summary::summary;
use crate::client::{
    LATENCY_US_MAX, READ_CHUNK_BYTES, Tally, connect, histogram, next, post_json, seed_from_clock,
};
use crate::report::Row;
use crate::server::{Sample, Server};

/// Tenants the budgets belong to.
const TENANTS: usize = 100;

/// Budgets of each tenant: its default budget and as many more beside it.
const BUDGETS_PER_TENANT: usize = 10;

/// Budgets the charges go to, single or batched.
const BUDGETS: usize = TENANTS * BUDGETS_PER_TENANT;

/// The charges a batch holds, in the batched rows.
const SIZES: [usize; 2] = [100, 1000];

/// The rows and notes of the group.
pub(crate) async fn measure(args: &Args) -> Result<(Vec<Row>, Vec<String>), String> {
    let sizes = SIZES.map(|n| grouped(n as u64)).join(" and ");
    eprintln!(
        "server: charges one a request, then in batches of {sizes}, over {} budgets of \
         {TENANTS} tenants",
        grouped(BUDGETS as u64)
    );
    let server = Server::start(args, &[])?;
    let tenants = Arc::new(seed(&server, args).await?);
    let mut acked = vec![0u64; BUDGETS];
    let mut notes = Vec::new();
    let mut measured = Vec::new();
    let over = format!("{} budgets of {TENANTS} tenants", grouped(BUDGETS as u64));
    let shapes = [1].into_iter().chain(SIZES);
    for size in shapes {
        let name = match size {
            1 => format!("POST charge ({over})"),
            n => format!("POST batch of {} charges ({over})", grouped(n as u64)),
        };
        let (row, sent) =
            measure_row(args, &server, &tenants, name, size, args.connections).await?;
        for (into, n) in acked.iter_mut().zip(&sent.acked) {
            *into += n;
        }
        notes.extend(row_notes(&row, &sent, args, args.connections));
        measured.push((row, size, sent.ops));
    }
    // A batch's own latency, with no queue of other requests in front of it: one connection
    // a row. On 32 connections a closed loop answers each request in about 32 ÷ its rate, so
    // there a batch of 100 takes 100 ÷ (its throughput ratio) times a charge.
    let mut alone = Vec::new();
    for size in [1, 100] {
        let name = match size {
            1 => format!("POST charge, one connection ({over})"),
            n => format!(
                "POST batch of {} charges, one connection ({over})",
                grouped(n as u64)
            ),
        };
        let (row, sent) = measure_row(args, &server, &tenants, name, size, 1).await?;
        for (into, n) in acked.iter_mut().zip(&sent.acked) {
            *into += n;
        }
        notes.extend(row_notes(&row, &sent, args, 1));
        alone.push(row);
    }
    if let [charge, batch] = alone.as_slice() {
        let p99 = |row: &Row| row.hist.value_at_quantile(0.99);
        notes.push(format!(
            "batch: alone on one connection, p50 / p99: a charge {:.2} / {:.2} ms, a batch of \
             100 {:.2} / {:.2} ms (p99 {:.1}× a charge's, target ≤ 10×)",
            charge.hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99(charge) as f64 / 1000.0,
            batch.hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99(batch) as f64 / 1000.0,
            p99(batch) as f64 / p99(charge).max(1) as f64
        ));
    }
    notes.splice(0..0, summary(&server, args, &measured, BUDGETS));
    notes.push(check(&server, &tenants, &acked).await?);
    notes.extend(server.notes("charges, single and batched"));
    server.stop();
    let rows = measured.into_iter().map(|(row, ..)| row).chain(alone);
    Ok((rows.collect(), notes))
}

/// What a row's run says beside its figures: failures outside the window, too few answers
/// for its latencies to mean much, operations of batches not applied.
fn row_notes(row: &Row, sent: &Sent, args: &Args, connections: usize) -> Vec<String> {
    let mut notes = Vec::new();
    if sent.unmeasured.errors > 0 {
        notes.push(format!(
            "{}: {} requests outside the measured window failed {:?}",
            row.name, sent.unmeasured.errors, sent.unmeasured.statuses
        ));
    }
    // Fewer answers than two a connection: requests slower than the window are missing from
    // its latencies, and its rate rests on a handful.
    if row.tally.requests < 2 * connections as u64 {
        notes.push(format!(
            "{}: only {} requests completed in the {:.1} s window on {connections} \
             connections; their latencies leave out those still running at its end, so \
             measure it over a longer --duration-s",
            row.name,
            row.tally.requests,
            args.duration.as_secs_f64(),
        ));
    }
    if sent.failed_items > 0 {
        notes.push(format!(
            "{}: {} operations in batches answered other than 201 {:?}",
            row.name, sent.failed_items, sent.item_statuses
        ));
    }
    notes
}

/// A tenant of the group: its path, its own token, and its budgets (the default one first).
struct Tenant {
    path: String,
    auth: String,
    budgets: Vec<String>,
}

/// Creates [`TENANTS`] tenants and [`BUDGETS_PER_TENANT`] budgets in each (its default one
/// and more), each opened with [`UNSPENT`], on [`Args::connections`] connections (a tenant's
/// budgets one after another, the tenants side by side).
async fn seed(server: &Server, args: &Args) -> Result<Vec<Tenant>, String> {
    let started = Instant::now();
    let run = seed_from_clock();
    let taken = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(args.connections);
    for i in 0..args.connections.min(TENANTS) {
        let admin = Admin::open(server.addr(i), admin_auth(server)).await?;
        tasks.push(tokio::spawn(seed_loop(admin, run, Arc::clone(&taken))));
    }
    let mut tenants: Vec<Option<Tenant>> = (0..TENANTS).map(|_| None).collect();
    for task in tasks {
        for (i, tenant) in task.await.map_err(|e| e.to_string())?? {
            tenants[i] = Some(tenant);
        }
    }
    eprintln!(
        "  seeded {TENANTS} tenants of {BUDGETS_PER_TENANT} budgets ({:.0} budgets/s)",
        BUDGETS as f64 / started.elapsed().as_secs_f64()
    );
    tenants
        .into_iter()
        .map(|tenant| tenant.ok_or_else(|| "a tenant was not made".to_owned()))
        .collect()
}

/// One connection's share of [`seed`]: the next tenant not yet taken, until none is left.
/// Any answer but `201` ends the seeding.
async fn seed_loop(
    mut admin: Admin,
    run: u128,
    taken: Arc<AtomicUsize>,
) -> Result<Vec<(usize, Tenant)>, String> {
    let mut made = Vec::new();
    loop {
        let i = taken.fetch_add(1, Ordering::Relaxed);
        if i >= TENANTS {
            return Ok(made);
        }
        let seeded = admin.create_tenant(&format!("batch-{run:x}-{i}")).await?;
        let mut tenant = Tenant {
            budgets: vec![seeded.budget_id],
            path: seeded.path,
            auth: seeded.auth,
        };
        for j in 1..BUDGETS_PER_TENANT {
            let id = admin
                .create_budget(&tenant.path, &format!("b{j}"), None)
                .await?;
            tenant.budgets.push(id);
        }
        made.push((i, tenant));
    }
}

/// A batch's answer as the client reads it: each operation's status, and of its body what
/// an entry says of the charge (borrowed, nothing else kept).
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    results: Vec<Item<'a>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    status: u16,
    #[serde(borrow)]
    body: Option<EntryOf<'a>>,
}

#[derive(Deserialize)]
struct EntryOf<'a> {
    #[serde(borrow)]
    budget_id: Option<&'a str>,
    #[serde(borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    amount_atomic: Option<&'a str>,
}

/// The measured window of a row: requests completed in it are counted.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// What a row's connections did: the requests completed in the window (their latencies and
/// statuses, and the charges they acknowledged), those outside it, and the charges acknowledged on
/// each budget (by its index, `tenant × BUDGETS_PER_TENANT + budget`) in and out of the
/// window.
struct Sent {
    hist: Histogram<u64>,
    measured: Tally,
    unmeasured: Tally,
    /// Charges acknowledged by the requests completed in the window.
    ops: u64,
    /// Operations of batches that answered other than `201`, and their statuses.
    failed_items: u64,
    item_statuses: Vec<(u16, u64)>,
    acked: Vec<u64>,
}

impl Sent {
    fn new() -> Self {
        Sent {
            hist: histogram(),
            measured: Tally::default(),
            unmeasured: Tally::default(),
            ops: 0,
            failed_items: 0,
            item_statuses: Vec::new(),
            acked: vec![0; BUDGETS],
        }
    }

    fn merge(&mut self, other: Sent) -> Result<(), String> {
        self.hist.add(&other.hist).map_err(|e| e.to_string())?;
        self.measured.merge(other.measured);
        self.unmeasured.merge(other.unmeasured);
        self.ops += other.ops;
        self.failed_items += other.failed_items;
        for (status, n) in other.item_statuses {
            count_status(&mut self.item_statuses, status, n);
        }
        for (into, n) in self.acked.iter_mut().zip(other.acked) {
            *into += n;
        }
        Ok(())
    }
}

fn count_status(statuses: &mut Vec<(u16, u64)>, status: u16, n: u64) {
    match statuses.iter_mut().find(|(s, _)| *s == status) {
        Some((_, m)) => *m += n,
        None => statuses.push((status, n)),
    }
}

/// One connection's closed loop until the window's end: single charges (`size` 1) or batches
/// of `size` charges, each of 1, with the tenant's own token.
async fn charge_loop(
    addr: SocketAddr,
    tenants: Arc<Vec<Tenant>>,
    size: usize,
    window: Window,
    seed: u64,
) -> Result<Sent, String> {
    let mut stream = connect(addr).await?;
    let mut rng = seed | 1;
    let (mut request, mut body) = (Vec::with_capacity(512), Vec::with_capacity(80 * size + 64));
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut picked: Vec<usize> = Vec::with_capacity(size);
    let mut sent = Sent::new();
    while Instant::now() < window.end {
        let t = (next(&mut rng) % TENANTS as u64) as usize;
        let tenant = &tenants[t];
        picked.clear();
        body.clear();
        let path = if size == 1 {
            let b = (next(&mut rng) % BUDGETS_PER_TENANT as u64) as usize;
            picked.push(t * BUDGETS_PER_TENANT + b);
            write!(
                body,
                r#"{{"budget_id":"{}","amount_atomic":"1"}}"#,
                tenant.budgets[b]
            )
            .expect("a Vec");
            format!("{}/charges", tenant.path)
        } else {
            body.extend_from_slice(br#"{"atomic":false,"operations":["#);
            for k in 0..size {
                let b = (next(&mut rng) % BUDGETS_PER_TENANT as u64) as usize;
                picked.push(t * BUDGETS_PER_TENANT + b);
                if k > 0 {
                    body.push(b',');
                }
                write!(
                    body,
                    r#"{{"op":"charge","budget_id":"{}","amount_atomic":"1"}}"#,
                    tenant.budgets[b]
                )
                .expect("a Vec");
            }
            body.extend_from_slice(b"]}");
            format!("{}/batch", tenant.path)
        };
        let (frame, micros) = post_json(
            &mut stream,
            (&mut request, &mut buf),
            &path,
            tenant.auth.as_str(),
            &body,
        )
        .await?;
        let done = Instant::now();
        let (status, charged) = match frame.head.status {
            201 if size == 1 => {
                sent.acked[picked[0]] += 1;
                (201, 1)
            }
            200 if size > 1 => {
                batch_status(&buf[frame.body.clone()], &tenants, &picked, &mut sent)?
            }
            other => (other, 0),
        };
        if window.start <= done && done < window.end {
            sent.hist.saturating_record(micros.clamp(1, LATENCY_US_MAX));
            sent.measured.count(status);
            sent.ops += charged;
        } else {
            sent.unmeasured.count(status);
        }
        buf.drain(..frame.len);
    }
    Ok(sent)
}

/// Reads a `200` batch's results, counts each charge acknowledged on its budget, and returns
/// the status the batch counts as (`200` when every operation answered `201`, or the first
/// other status) and the charges it acknowledged. An entry for another budget or amount than asked, or as many results as
/// there were not operations, is the service's fault and ends the run.
fn batch_status(
    body: &[u8],
    tenants: &[Tenant],
    picked: &[usize],
    sent: &mut Sent,
) -> Result<(u16, u64), String> {
    let answer: Answer = serde_json::from_slice(body).map_err(|e| {
        let start = String::from_utf8_lossy(&body[..body.len().min(300)]);
        format!("a batch's answer is not its results ({e}): {start}")
    })?;
    if answer.results.len() != picked.len() {
        return Err(format!(
            "a batch of {} operations answered {} results",
            picked.len(),
            answer.results.len()
        ));
    }
    let (mut status, mut charged) = (200, 0);
    for (item, &b) in answer.results.iter().zip(picked) {
        if item.status != 201 {
            sent.failed_items += 1;
            count_status(&mut sent.item_statuses, item.status, 1);
            if status == 200 {
                status = item.status;
            }
            continue;
        }
        let asked = &tenants[b / BUDGETS_PER_TENANT].budgets[b % BUDGETS_PER_TENANT];
        let entry = item.body.as_ref();
        let said = entry.map(|e| (e.budget_id, e.kind, e.amount_atomic));
        if said != Some((Some(asked.as_str()), Some("charge"), Some("1"))) {
            return Err(format!(
                "a batch's charge of 1 on {asked} answered 201 with another entry: {said:?}"
            ));
        }
        sent.acked[b] += 1;
        charged += 1;
    }
    Ok((status, charged))
}

/// A row: every connection in a closed loop of `size` charges a request through a warm-up
/// and the measured window; the server's counters read at the window's ends.
async fn measure_row(
    args: &Args,
    server: &Server,
    tenants: &Arc<Vec<Tenant>>,
    name: String,
    size: usize,
    connections: usize,
) -> Result<(Row, Sent), String> {
    eprintln!(
        "  {name}: {:.1} s warm-up, {:.1} s measured",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let start = Instant::now() + args.warmup;
    let window = Window {
        start,
        end: start + args.duration,
    };
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let seed = (seed_from_clock() as u64) ^ ((i as u64 + 1) << 32);
            let tenants = Arc::clone(tenants);
            tokio::spawn(charge_loop(server.addr(i), tenants, size, window, seed))
        })
        .collect();
    tokio::time::sleep_until(window.start.into()).await;
    let before = server.sample_before();
    tokio::time::sleep_until(window.end.into()).await;
    let cost: Sample = server.sample_after().since(before);
    let peak_rss_kib = server.peak_rss_kib();
    let mut sent = Sent::new();
    for task in tasks {
        sent.merge(task.await.map_err(|e| e.to_string())??)?;
    }
    let seconds = (window.end - window.start).as_secs_f64();
    let hist = std::mem::replace(&mut sent.hist, histogram());
    let tally = std::mem::take(&mut sent.measured);
    let row = Row {
        name,
        requests_per_s: tally.requests as f64 / seconds,
        cost,
        charged: tally.requests,
        peak_rss_kib,
        hist,
        tally,
    };
    Ok((row, sent))
}

/// Reads every budget of every tenant and checks it: spent exactly the charges acknowledged
/// on it, nothing else moved (credited its deposit, nothing debited or reserved), and within
/// its invariant. Any other answer than `200` is an error.
async fn check(server: &Server, tenants: &[Tenant], acked: &[u64]) -> Result<String, String> {
    let mut admin = Admin::open(server.addr(0), admin_auth(server)).await?;
    let mut read = 0u64;
    for (t, tenant) in tenants.iter().enumerate() {
        let listed = admin.budgets(&tenant.path).await?;
        if listed.len() != BUDGETS_PER_TENANT {
            return Err(format!(
                "{}: {} budgets listed, {BUDGETS_PER_TENANT} made",
                tenant.path,
                listed.len()
            ));
        }
        for (b, id) in tenant.budgets.iter().enumerate() {
            let budget = listed.iter().find(|budget| budget["id"] == id.as_str());
            let budget = budget.ok_or(format!("{}: budget {id} is not listed", tenant.path))?;
            within_invariant(budget)?;
            read += 1;
            let expected = u128::from(acked[t * BUDGETS_PER_TENANT + b]);
            let figures = (
                figure(budget, "spent_atomic")?,
                figure(budget, "credited_atomic")?,
                figure(budget, "debited_atomic")?,
                figure(budget, "reserved_atomic")?,
            );
            if figures != (expected, u128::from(UNSPENT), 0, 0) {
                return Err(format!(
                    "{}: budget {id} does not match the charges acknowledged on it ({expected}, \
                     of the deposit {UNSPENT}): {budget}",
                    tenant.path
                ));
            }
        }
    }
    Ok(format!(
        "batch at the end: {} budgets of {} tenants read; each spent exactly the charges \
         acknowledged on it ({} in all, warm-up and the requests after each window included); \
         nothing overspent",
        grouped(read),
        grouped(tenants.len() as u64),
        grouped(acked.iter().sum())
    ))
}
