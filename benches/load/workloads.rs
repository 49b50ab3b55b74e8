//! The workloads of the table's rows: what each request is, the closed loops that send them
//! over many connections, a measured phase after its warm-up, and the tenants seeded first.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::args::Args;
use crate::client::{
    HOST, LATENCY_US_MAX, READ_CHUNK_BYTES, Seeded, Stop, Tally, connect, exchange, histogram,
    next, seed_from_clock, tenant_path,
};
use crate::report::Row;
use crate::server::Server;
use crate::wire;

/// The opening deposit of every tenant a create makes: more than any run spends.
pub(crate) const SEED_DEPOSIT: u128 = 1_000_000;

/// What each request of a workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Healthz,
    Create,
    /// Creates of tenants whose default budget renews every month in Europe/Berlin, with an
    /// allowance of 1000 (the deposit, 1000000, is forfeited at the first boundary).
    CreateMonthly,
    /// Reads with the admin token.
    Read,
    /// Reads with each tenant's own token, which the service checks on its credential path.
    ReadOwn,
    /// Reads of tenants' default budgets with the admin token.
    ReadBudget,
    /// Pages of 25 tenants after a tenant picked at random (the console's paging).
    ListPage,
    /// Searches of the tenants' names for a text none holds: every tenant read (the
    /// console's search at its slowest).
    SearchNone,
    /// `read_percent` reads, the rest creates.
    Mix {
        read_percent: u32,
    },
}

/// Everything a connection needs to make requests.
struct Workload {
    kind: Kind,
    /// `Bearer <admin token>`.
    auth: String,
    /// Tenants to read, chosen at random.
    paths: Arc<Vec<Seeded>>,
    /// Makes every created name unique across connections and runs.
    names: AtomicU64,
    run: u128,
    /// Collect the paths of created tenants (for seeding).
    collect: bool,
}

impl Workload {
    fn new(kind: Kind, server: &Server, paths: Arc<Vec<Seeded>>, collect: bool) -> Self {
        Self {
            kind,
            auth: format!("Bearer {}", server.token),
            paths,
            names: AtomicU64::new(0),
            run: seed_from_clock(),
            collect,
        }
    }

    /// Writes the next request into `out`, and a create's body into `body` first; both
    /// buffers are reused from one request to the next.
    fn write_request(&self, rng: &mut u64, out: &mut Vec<u8>, body: &mut Vec<u8>) {
        out.clear();
        let create = match self.kind {
            Kind::Healthz => {
                wire::write_request(out, "GET", "/healthz", wire::HTTP_11, &[HOST], None);
                return;
            }
            Kind::Create | Kind::CreateMonthly => true,
            Kind::Read | Kind::ReadOwn | Kind::ReadBudget | Kind::ListPage | Kind::SearchNone => {
                false
            }
            Kind::Mix { read_percent } => next(rng) % 100 >= u64::from(read_percent),
        };
        if create || self.paths.is_empty() {
            let n = self.names.fetch_add(1, Ordering::Relaxed);
            body.clear();
            write!(
                body,
                r#"{{"name":"bench-{:x}-{n}","opening_deposit_atomic":"{SEED_DEPOSIT}"{}}}"#,
                self.run,
                if self.kind == Kind::CreateMonthly {
                    r#","period":{"interval":"month","time_zone":"Europe/Berlin","allowance_atomic":"1000"}"#
                } else {
                    ""
                }
            )
            .expect("writing to a Vec cannot fail");
            let headers = [
                HOST,
                ("Authorization", self.auth.as_str()),
                ("Content-Type", "application/json"),
            ];
            wire::write_request(
                out,
                "POST",
                "/v1/tenants",
                wire::HTTP_11,
                &headers,
                Some(body),
            );
        } else {
            let tenant = &self.paths[(next(rng) % self.paths.len() as u64) as usize];
            let auth = match self.kind {
                Kind::ReadOwn => tenant.auth.as_str(),
                _ => self.auth.as_str(),
            };
            let headers = [HOST, ("Authorization", auth)];
            let listed;
            let path = match self.kind {
                Kind::ReadBudget => &tenant.budget_path,
                Kind::ListPage => {
                    let id = tenant.path.rsplit('/').next().unwrap_or_default();
                    listed = format!("/v1/tenants?limit=25&after={id}");
                    &listed
                }
                Kind::SearchNone => "/v1/tenants?limit=25&name_contains=no-such-name",
                _ => &tenant.path,
            };
            wire::write_request(out, "GET", path, wire::HTTP_11, &headers, None);
        }
    }
}

/// One connection's closed loop.
async fn connection(
    addr: SocketAddr,
    workload: Arc<Workload>,
    stop: Stop,
    seed: u64,
) -> Result<(Histogram<u64>, Tally), String> {
    let mut stream = connect(addr).await?;
    let mut rng = seed | 1;
    let (mut request, mut body) = (Vec::with_capacity(512), Vec::with_capacity(128));
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut hist = histogram();
    let mut tally = Tally::default();
    while stop.take() {
        workload.write_request(&mut rng, &mut request, &mut body);
        let (frame, micros) = exchange(&mut stream, &request, &mut buf).await?;
        hist.saturating_record(micros.clamp(1, LATENCY_US_MAX));
        let status = frame.head.status;
        tally.count(status);
        if workload.collect
            && status == 201
            && let Some(path) = tenant_path(&buf[frame.body.clone()])
        {
            tally.paths.push(path);
        }
        buf.drain(..frame.len);
    }
    Ok((hist, tally))
}

/// Runs `connections` closed loops until `stop`, and merges what they saw.
async fn phase(
    server: &Server,
    workload: Arc<Workload>,
    connections: usize,
    stop: Stop,
) -> Result<(Histogram<u64>, Tally), String> {
    let mut tasks = Vec::with_capacity(connections);
    for i in 0..connections {
        let seed = (seed_from_clock() as u64) ^ ((i as u64 + 1) << 32);
        tasks.push(tokio::spawn(connection(
            server.addr(i),
            Arc::clone(&workload),
            stop.clone(),
            seed,
        )));
    }
    let mut hist = histogram();
    let mut tally = Tally::default();
    for task in tasks {
        let (h, t) = task.await.map_err(|e| e.to_string())??;
        hist.add(h).map_err(|e| e.to_string())?;
        tally.merge(t);
    }
    Ok((hist, tally))
}

/// A warm-up, then a measured phase, with the server's CPU and RSS read around it.
pub(crate) async fn measure(
    args: &Args,
    server: &Server,
    name: &str,
    kind: Kind,
    paths: &Arc<Vec<Seeded>>,
) -> Result<Row, String> {
    eprintln!(
        "  {name}: {:.1} s warm-up, {:.1} s measured",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let warm = Arc::new(Workload::new(kind, server, Arc::clone(paths), false));
    phase(
        server,
        warm,
        args.connections,
        Stop::At(Instant::now() + args.warmup),
    )
    .await?;
    let workload = Arc::new(Workload::new(kind, server, Arc::clone(paths), false));
    let before = server.sample_before();
    let started = Instant::now();
    let (hist, tally) = phase(
        server,
        workload,
        args.connections,
        Stop::At(started + args.duration),
    )
    .await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cost = server.sample_after().since(before);
    Ok(Row {
        name: name.to_owned(),
        requests_per_s: tally.requests as f64 / elapsed,
        cost,
        charged: tally.requests,
        peak_rss_kib: server.peak_rss_kib(),
        hist,
        tally,
    })
}

/// Creates tenants through the API until `total` exist (of which `have` already do), and
/// returns the new tenants' paths.
pub(crate) async fn seed(
    server: &Server,
    args: &Args,
    have: u64,
    total: u64,
) -> Result<Vec<Seeded>, String> {
    seed_kind(server, args, have, total, Kind::Create).await
}

/// [`seed`] with creates of `kind` ([`Kind::Create`] or [`Kind::CreateMonthly`]).
pub(crate) async fn seed_kind(
    server: &Server,
    args: &Args,
    have: u64,
    total: u64,
    kind: Kind,
) -> Result<Vec<Seeded>, String> {
    const STEP: u64 = 100_000;
    let mut paths = Vec::new();
    let started = Instant::now();
    let mut done = have;
    while done < total {
        let count = (total - done).min(STEP);
        let workload = Arc::new(Workload::new(kind, server, Arc::new(Vec::new()), true));
        let (_, tally) = phase(
            server,
            workload,
            args.connections,
            Stop::After(Arc::new(AtomicU64::new(count))),
        )
        .await?;
        if tally.errors > 0 {
            return Err(format!(
                "seeding failed: {} errors {:?}",
                tally.errors, tally.statuses
            ));
        }
        paths.extend(tally.paths);
        done += count;
        eprintln!(
            "  seeded {done} / {total} tenants ({:.0}/s)",
            (done - have) as f64 / started.elapsed().as_secs_f64()
        );
    }
    Ok(paths)
}
