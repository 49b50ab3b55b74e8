//! The spending rows: reserve+commit cycles over many budgets and on one hot budget, each
//! request kind alone, charges and credits; each phase says what the service acknowledged,
//! for `accounts` to check against the budgets at the end.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::accounts::Acknowledged;
use crate::args::Args;
use crate::client::Seeded;
use crate::client::{
    HOST, LATENCY_US_MAX, Pick, READ_CHUNK_BYTES, Stop, Tally, connect, exchange, histogram, next,
    post_json, seed_from_clock,
};
use crate::report::Row;
use crate::server::Server;
use crate::wire;

/// Budgets the spread reserve+commit cycles pick from (each its tenant's default budget).
pub(crate) const SPREAD_BUDGETS: u64 = 1000;

/// How long each hold lasts: the most the API allows (a day), so that none expires within a
/// run (at most an hour a phase) and every hold left unsettled is still reserved at the end.
const HOLD_TTL_S: u32 = 86_400;

/// Reserve+commit cycles: each connection reserves [`SPEND_HOLD`] atomic units from a budget
/// (its tenant's own token), then commits 0 to `SPEND_HOLD + 1` (below, at or above the hold).
const SPEND_HOLD: u64 = 2;

/// What a spending connection does: reserve+commit cycles (each hold committed at once), or
/// one kind of request alone: reserves that it keeps, commits of holds taken before, charges
/// of 1, or credits of 1 (with the admin's `Bearer …`, at most one every `pace` if given:
/// each writes an event).
pub(crate) enum Plan {
    Cycles,
    Reserve,
    Commit(Vec<Hold>),
    Charge,
    Credit {
        auth: Arc<str>,
        pace: Option<std::time::Duration>,
    },
}

/// A hold to commit: the index of its target and the reservation's id.
pub(crate) type Hold = (usize, String);

/// What one connection did: a histogram and a tally per request kind, what the service
/// acknowledged (to compare with the budget at the end), and the holds it kept.
pub(crate) struct Spent {
    reserve: (Histogram<u64>, Tally),
    commit: (Histogram<u64>, Tally),
    charge: (Histogram<u64>, Tally),
    credit: (Histogram<u64>, Tally),
    /// What the service acknowledged: commits and charges, holds granted and settled,
    /// credits.
    acknowledged: Acknowledged,
    holds: Vec<Hold>,
}

impl Spent {
    fn new() -> Self {
        Spent {
            reserve: (histogram(), Tally::default()),
            commit: (histogram(), Tally::default()),
            charge: (histogram(), Tally::default()),
            credit: (histogram(), Tally::default()),
            acknowledged: Acknowledged::default(),
            holds: Vec::new(),
        }
    }
}

/// One connection's closed loop of reserves and commits on budgets picked at random, as
/// `plan` says; a commit phase ends early when its holds run out.
async fn spend_connection(
    (addr, pick): (SocketAddr, Pick),
    targets: Arc<Vec<Seeded>>,
    stop: Stop,
    seed: u64,
    plan: Plan,
) -> Result<Spent, String> {
    let mut stream = connect(addr).await?;
    let mut rng = seed | 1;
    let (mut request, mut body) = (Vec::with_capacity(512), Vec::with_capacity(128));
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut spent = Spent::new();
    let (cycles, mut to_commit) = match plan {
        Plan::Cycles => (true, Vec::new()),
        Plan::Reserve => (false, Vec::new()),
        Plan::Commit(holds) => (false, holds),
        Plan::Charge => return charge_connection(stream, (targets, pick), stop, rng, None).await,
        Plan::Credit { auth, pace } => {
            let credit = Some((auth, pace));
            return charge_connection(stream, (targets, pick), stop, rng, credit).await;
        }
    };
    let committing_only = !to_commit.is_empty();
    while stop.take() {
        body.clear();
        // The commit of a hold, or a new hold on a budget picked at random.
        let (t, path, committing, amount) = if let Some((t, id)) = to_commit.pop() {
            let amount = next(&mut rng) % (SPEND_HOLD + 2);
            write!(body, r#"{{"amount_atomic":"{amount}"}}"#).expect("a Vec");
            let path = format!("{}/reservations/{id}/commit", targets[t].path);
            (t, path, true, amount)
        } else if committing_only {
            break;
        } else {
            let t = pick.next(&mut rng);
            write!(
                body,
                r#"{{"budget_id":"{}","amount_atomic":"{SPEND_HOLD}","ttl_seconds":{HOLD_TTL_S}}}"#,
                targets[t].budget_id
            )
            .expect("a Vec");
            (t, format!("{}/reservations", targets[t].path), false, 0)
        };
        let (frame, micros) = post_json(
            &mut stream,
            (&mut request, &mut buf),
            &path,
            targets[t].auth.as_str(),
            &body,
        )
        .await?;
        let status = frame.head.status;
        let (hist, tally) = if committing {
            &mut spent.commit
        } else {
            &mut spent.reserve
        };
        hist.saturating_record(micros.clamp(1, LATENCY_US_MAX));
        tally.count(status);
        if committing {
            if status == 200 {
                spent.acknowledged.spent += u128::from(amount);
                spent.acknowledged.settled += u128::from(SPEND_HOLD);
            }
        } else if status == 201 {
            // The id is the body's first member: found without parsing the whole body, so
            // the client spends as little of the shared machine as for a create.
            let id =
                reservation_id(&buf[frame.body.clone()]).ok_or("a reservation without an id")?;
            let hold = (t, id.to_owned());
            if cycles {
                to_commit.push(hold);
            } else {
                spent.holds.push(hold);
            }
            spent.acknowledged.held += u128::from(SPEND_HOLD);
        }
        buf.drain(..frame.len);
    }
    // A cycle cut short by the stop leaves its hold outstanding.
    spent.holds.extend(to_commit);
    Ok(spent)
}

/// One connection's closed loop of charges of 1 on budgets picked at random.
async fn charge_connection(
    mut stream: tokio::net::TcpStream,
    (targets, pick): (Arc<Vec<Seeded>>, Pick),
    stop: Stop,
    mut rng: u64,
    credit: Option<(Arc<str>, Option<std::time::Duration>)>,
) -> Result<Spent, String> {
    let (mut request, mut body) = (Vec::with_capacity(512), Vec::with_capacity(128));
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut spent = Spent::new();
    let mut pace = credit
        .as_ref()
        .and_then(|(_, pace)| *pace)
        .map(tokio::time::interval);
    while stop.take() {
        if let Some(pace) = &mut pace {
            pace.tick().await;
        }
        let t = pick.next(&mut rng);
        body.clear();
        let (auth, path) = match &credit {
            Some((auth, _)) => {
                body.extend_from_slice(br#"{"amount_atomic":"1"}"#);
                (&**auth, format!("{}/credits", targets[t].budget_path))
            }
            None => {
                write!(
                    body,
                    r#"{{"budget_id":"{}","amount_atomic":"1"}}"#,
                    targets[t].budget_id
                )
                .expect("a Vec");
                (
                    targets[t].auth.as_str(),
                    format!("{}/charges", targets[t].path),
                )
            }
        };
        let headers = [
            HOST,
            ("Authorization", auth),
            ("Content-Type", "application/json"),
        ];
        request.clear();
        wire::write_request(
            &mut request,
            "POST",
            &path,
            wire::HTTP_11,
            &headers,
            Some(&body),
        );
        let (frame, micros) = exchange(&mut stream, &request, &mut buf).await?;
        let counted = if credit.is_some() {
            &mut spent.credit
        } else {
            &mut spent.charge
        };
        counted.0.saturating_record(micros.clamp(1, LATENCY_US_MAX));
        counted.1.count(frame.head.status);
        if frame.head.status == 201 {
            match credit {
                Some(_) => spent.acknowledged.credited += 1,
                None => spent.acknowledged.spent += 1,
            }
        }
        buf.drain(..frame.len);
    }
    Ok(spent)
}

/// The `res_…` id at the start of a reservation's JSON body (`{"id":"res_…",…}`).
fn reservation_id(body: &[u8]) -> Option<&str> {
    const START: &[u8] = br#"{"id":""#;
    let rest = body.strip_prefix(START)?;
    let end = rest.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&rest[..end])
        .ok()
        .filter(|id| id.starts_with("res_"))
}

/// Runs one spending loop per plan until `stop`, and merges what they saw.
pub(crate) async fn spend_phase(
    server: &Server,
    targets: &Arc<Vec<Seeded>>,
    mut plans: Vec<Plan>,
    stop: Stop,
) -> Result<Spent, String> {
    if server.routes_by_tenant() {
        deal_by_tenant(server, targets.len(), &mut plans);
    }
    let mut tasks = Vec::with_capacity(plans.len());
    for (i, plan) in plans.into_iter().enumerate() {
        let seed = (seed_from_clock() as u64) ^ ((i as u64 + 1) << 32);
        tasks.push(tokio::spawn(spend_connection(
            server.route(i, targets.len()),
            Arc::clone(targets),
            stop.clone(),
            seed,
            plan,
        )));
    }
    let mut all = Spent::new();
    for task in tasks {
        let one = task.await.map_err(|e| e.to_string())??;
        for (into, from) in [
            (&mut all.reserve, one.reserve),
            (&mut all.commit, one.commit),
            (&mut all.charge, one.charge),
            (&mut all.credit, one.credit),
        ] {
            into.0.add(&from.0).map_err(|e| e.to_string())?;
            into.1.merge(from.1);
        }
        all.acknowledged.add(one.acknowledged);
        all.holds.extend(one.holds);
    }
    Ok(all)
}

/// Plans for `connections` connections: cycles, reserves, or commits of `holds` dealt out
/// round-robin.
pub(crate) fn plans(
    connections: usize,
    make: impl Fn() -> Plan,
    holds: Option<Vec<Hold>>,
) -> Vec<Plan> {
    match holds {
        None => (0..connections).map(|_| make()).collect(),
        Some(holds) => {
            let mut dealt: Vec<Vec<Hold>> = (0..connections).map(|_| Vec::new()).collect();
            for (i, hold) in holds.into_iter().enumerate() {
                dealt[i % connections].push(hold);
            }
            dealt.into_iter().map(Plan::Commit).collect()
        }
    }
}

/// Deals the holds of commit plans out again, each to a connection of its tenant's instance,
/// so that the commits follow the route their reserves took.
fn deal_by_tenant(server: &Server, targets: usize, plans: &mut [Plan]) {
    let mut holds = Vec::new();
    // The committing connections of each instance.
    let mut of_instance: Vec<Vec<usize>> = Vec::new();
    for (i, plan) in plans.iter_mut().enumerate() {
        if let Plan::Commit(dealt) = plan {
            holds.append(dealt);
            let instance = server.instance_of(i, targets);
            if of_instance.len() <= instance {
                of_instance.resize(instance + 1, Vec::new());
            }
            of_instance[instance].push(i);
        }
    }
    for (turn, hold) in holds.into_iter().enumerate() {
        let Some(connections) = of_instance
            .get(server.owner(hold.0))
            .filter(|c| !c.is_empty())
            .or_else(|| of_instance.iter().find(|c| !c.is_empty()))
        else {
            return;
        };
        if let Plan::Commit(dealt) = &mut plans[connections[turn % connections.len()]] {
            dealt.push(hold);
        }
    }
}

/// A phase of spending, with the server's counters over it, made into rows: one for the
/// reserves and one for the commits it sent (each counted on its own, and each request
/// charged the phase's CPU and frames alike).
pub(crate) async fn spend_rows(
    server: &Server,
    targets: &Arc<Vec<Seeded>>,
    plans: Vec<Plan>,
    stop: Stop,
    name: &str,
) -> Result<(Spent, Vec<Row>), String> {
    let before = server.sample_before();
    let started = Instant::now();
    let mut spent = spend_phase(server, targets, plans, stop).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cost = server.sample_after().since(before);
    let requests = spent.reserve.1.requests
        + spent.commit.1.requests
        + spent.charge.1.requests
        + spent.credit.1.requests;
    let mut rows = Vec::new();
    for (what, counted) in [
        ("POST reserve", &mut spent.reserve),
        ("POST commit", &mut spent.commit),
        ("POST charge", &mut spent.charge),
        ("POST credit", &mut spent.credit),
    ] {
        if counted.1.requests == 0 {
            continue;
        }
        let (hist, tally) = std::mem::replace(counted, (histogram(), Tally::default()));
        rows.push(Row {
            name: format!("{what} ({name})"),
            requests_per_s: tally.requests as f64 / elapsed,
            cost,
            charged: requests,
            peak_rss_kib: server.peak_rss_kib(),
            hist,
            tally,
        });
    }
    Ok((spent, rows))
}

/// A warm-up and a measured phase of reserve+commit cycles over `targets`: a row for the
/// reserves and one for the commits, and what was acknowledged in both phases.
pub(crate) async fn measure_cycles(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
) -> Result<(Vec<Row>, Acknowledged), String> {
    eprintln!(
        "  {name}: {:.1} s warm-up, {:.1} s measured",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let cycles = || plans(args.connections, || Plan::Cycles, None);
    let warm = spend_phase(
        server,
        targets,
        cycles(),
        Stop::At(Instant::now() + args.warmup),
    )
    .await?;
    let stop = Stop::At(Instant::now() + args.duration);
    let (spent, rows) = spend_rows(server, targets, cycles(), stop, name).await?;
    let mut acknowledged = warm.acknowledged;
    acknowledged.add(spent.acknowledged);
    Ok((rows, acknowledged))
}

/// Reserves alone, then commits alone of the holds they took (until they run out, at most
/// as long), over `targets`: each request kind's own throughput, after a warm-up of cycles.
pub(crate) async fn measure_alone(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
) -> Result<(Vec<Row>, Acknowledged), String> {
    eprintln!(
        "  {name}: {:.1} s warm-up, {:.1} s of reserves, then their commits",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let connections = args.connections;
    let warm = spend_phase(
        server,
        targets,
        plans(connections, || Plan::Cycles, None),
        Stop::At(Instant::now() + args.warmup),
    )
    .await?;
    let mut acknowledged = warm.acknowledged;
    let stop = Stop::At(Instant::now() + args.duration);
    let reserves = plans(connections, || Plan::Reserve, None);
    let (spent, mut rows) = spend_rows(server, targets, reserves, stop, name).await?;
    acknowledged.add(spent.acknowledged);
    let commits = plans(connections, || Plan::Cycles, Some(spent.holds));
    let stop = Stop::At(Instant::now() + args.duration);
    let (spent, commit_rows) = spend_rows(server, targets, commits, stop, name).await?;
    acknowledged.add(spent.acknowledged);
    rows.extend(commit_rows);
    Ok((rows, acknowledged))
}

/// A warm-up and a measured phase of charges of 1 over `targets`: their row.
pub(crate) async fn measure_charges(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
) -> Result<(Vec<Row>, Acknowledged), String> {
    eprintln!("  charges, {name}:");
    measure_plan(args, server, name, targets, || Plan::Charge).await
}

/// A warm-up and a measured phase of credits of 1 over `targets`, by the admin: their row.
/// Each credit writes an event (and a delivery for each endpoint that takes it).
pub(crate) async fn measure_credits(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
) -> Result<(Vec<Row>, Acknowledged), String> {
    eprintln!("  credits, {name}:");
    let auth: Arc<str> = format!("Bearer {}", server.token).into();
    let credit = || Plan::Credit {
        auth: Arc::clone(&auth),
        pace: None,
    };
    measure_plan(args, server, name, targets, credit).await
}

/// A warm-up and a measured phase of one request kind on every connection: its row, and
/// what both phases acknowledged.
async fn measure_plan(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
    make: impl Fn() -> Plan,
) -> Result<(Vec<Row>, Acknowledged), String> {
    eprintln!(
        "    {:.1} s warm-up, {:.1} s measured",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let warmup = Stop::At(Instant::now() + args.warmup);
    let warm = spend_phase(
        server,
        targets,
        plans(args.connections, &make, None),
        warmup,
    )
    .await?;
    let mut acknowledged = warm.acknowledged;
    let stop = Stop::At(Instant::now() + args.duration);
    let measured = plans(args.connections, &make, None);
    let (spent, rows) = spend_rows(server, targets, measured, stop, name).await?;
    acknowledged.add(spent.acknowledged);
    Ok((rows, acknowledged))
}
