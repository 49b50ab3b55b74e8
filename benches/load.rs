//! `make bench`: a closed-loop load generator for tenantd.
//!
//! It starts the release binary on 127.0.0.1 with a fresh temporary database, drives it over
//! keep-alive connections (each sends a request, waits for the whole answer, sends the next),
//! records every latency in an HDR histogram, and prints one markdown table: requests/s,
//! p50/p99/p99.9, errors (any non-2xx), server CPU µs per request (from `/proc/PID/stat`) and
//! the server's peak RSS (`VmHWM`). The client is one thread speaking raw HTTP/1.1, so it
//! leaves the server as much of the machine as it can.
//!
//! `--smoke` is a run of a few seconds that fails on any error; CI runs it so the generator
//! cannot rot.
//!
//! With `--postgres ADMIN_URL --postgres-url URL` every server serves from a fresh database of
//! its own on that PostgreSQL cluster (made with `CREATE DATABASE … OWNER tenantd` through
//! `psql ADMIN_URL`, dropped `WITH (FORCE)` when the server stops), and `--instances N` starts
//! N tenantd processes on it, the load's connections dealt out to them round-robin. The server
//! CPU and peak RSS are then sums over the instances; the table adds the cluster's own CPU
//! (the postmaster and its children, from `/proc`, when the cluster runs on this machine) and
//! the commands per batch the writers committed (from `/metrics`), in place of WAL frames.
//!
//! Requests are written and responses parsed by the black-box tests' wire-level client
//! (`tests/wire/`), into buffers each connection reuses, so the client allocates nothing per
//! request.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// The load generator uses the request writer, the response parser and a one-shot request
// (to wait for the server); the rest of the module (the blocking connection's finer tools)
// serves the tests only.
#[allow(dead_code)]
#[path = "../tests/wire/mod.rs"]
mod wire;

const USAGE: &str = "\
usage: cargo bench --bench load -- [OPTIONS]
    --connections N   keep-alive connections (default 32)
    --duration-s S    measured seconds per row (default 10)
    --warmup-s S      unmeasured seconds before each row (default 1)
    --scale N         tenants to seed for the scale check (default 1000000)
    --base N          tenants present for the read rows (default 2000)
    --quick           --duration-s 3 --scale 100000
    --smoke           a few seconds in all; exits 1 on any error (CI)
    --server PATH     the tenantd binary (default: the one cargo built)
    --server-log FILE keep the server's log (default: discarded)
    --only GROUP      run one group of rows: base (health, reads, mix), create, create1,
                      spend (reserve+commit cycles over 1,000 budgets and on one), scale
    --postgres ADMIN_URL  serve from PostgreSQL: a fresh database per server on the cluster
                      of this superuser URL (psql runs CREATE DATABASE … OWNER tenantd and,
                      when the server stops, DROP DATABASE … WITH (FORCE)); needs
    --postgres-url URL    tenantd's URL on that cluster (role tenantd); its database name
                      is replaced by each server's own (make bench BACKEND=postgres passes
                      scripts/with-postgres.sh's TENANTD_TEST_POSTGRES_ADMIN_URL and _URL)
    --instances N     tenantd processes on the one database, connections dealt out to them
                      round-robin (default 1; more only with --postgres)";

/// Clock ticks per second in `/proc/PID/stat` (USER_HZ, 100 on every Linux ABI we run on).
const CLOCK_TICKS_PER_S: u64 = 100;

/// Largest response the client accepts; tenantd's are far smaller.
const RESPONSE_BYTES_MAX: usize = 1 << 20;

/// Latencies above this are recorded as this (the histogram's range).
const LATENCY_US_MAX: u64 = 60_000_000;

/// How long a started server may take to answer `GET /healthz`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a server may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Bytes a connection reads from its socket at a time.
const READ_CHUNK_BYTES: usize = 8192;

/// Most tenantd instances `--instances` starts on one database.
const INSTANCES_MAX: usize = 64;

/// How long `psql` may take to create or drop a database.
const PSQL_TIMEOUT: Duration = Duration::from_secs(60);

/// The PostgreSQL cluster every server gets a database of its own on.
#[derive(Debug, Clone)]
struct Postgres {
    /// A superuser's URL, for `psql`: creates and drops the databases.
    admin: String,
    /// tenantd's URL (role `tenantd`), whose database name each server replaces by its own.
    url: String,
}

#[derive(Debug, Clone)]
struct Args {
    connections: usize,
    duration: Duration,
    warmup: Duration,
    scale: u64,
    base: u64,
    smoke: bool,
    server: PathBuf,
    server_log: Option<PathBuf>,
    only: Option<String>,
    postgres: Option<Postgres>,
    instances: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        connections: 32,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(1),
        scale: 1_000_000,
        base: 2_000,
        smoke: false,
        server: PathBuf::from(env!("CARGO_BIN_EXE_tenantd")),
        server_log: None,
        only: None,
        postgres: None,
        instances: 1,
    };
    let (mut admin_url, mut url) = (None, None);
    let mut it = std::env::args().skip(1);
    let seconds = |v: String| -> Result<Duration, String> {
        v.parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && *s <= 3600.0)
            .map(Duration::from_secs_f64)
            .ok_or(format!("not a number of seconds: {v}"))
    };
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            // cargo bench passes this to every bench target.
            "--bench" => {}
            "--connections" => {
                args.connections = value()?
                    .parse()
                    .ok()
                    .filter(|n| (1..=4096).contains(n))
                    .ok_or("--connections takes 1 to 4096")?;
            }
            "--duration-s" => args.duration = seconds(value()?)?,
            "--warmup-s" => args.warmup = seconds(value()?)?,
            "--scale" => args.scale = value()?.parse().map_err(|_| "--scale takes a count")?,
            "--base" => args.base = value()?.parse().map_err(|_| "--base takes a count")?,
            "--quick" => {
                args.duration = Duration::from_secs(3);
                args.scale = 100_000;
            }
            "--smoke" => {
                args.smoke = true;
                args.connections = 4;
                args.duration = Duration::from_millis(500);
                args.warmup = Duration::from_millis(200);
                args.scale = 3_000;
                args.base = 500;
            }
            "--server" => args.server = PathBuf::from(value()?),
            "--server-log" => args.server_log = Some(PathBuf::from(value()?)),
            "--only" => {
                let group = value()?;
                if !["base", "create", "create1", "spend", "scale"].contains(&group.as_str()) {
                    return Err(format!(
                        "--only takes base, create, create1, spend or scale, not {group}"
                    ));
                }
                args.only = Some(group);
            }
            "--postgres" => admin_url = Some(value()?),
            "--postgres-url" => url = Some(value()?),
            "--instances" => {
                args.instances = value()?
                    .parse()
                    .ok()
                    .filter(|n| (1..=INSTANCES_MAX).contains(n))
                    .ok_or(format!("--instances takes 1 to {INSTANCES_MAX}"))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if args.base > args.scale {
        return Err("--base must not exceed --scale".into());
    }
    args.postgres = match (admin_url, url) {
        (Some(admin), Some(url)) => {
            database_url(&url, "x")
                .ok_or("--postgres-url must name a database: postgres://…/NAME")?;
            Some(Postgres { admin, url })
        }
        (None, None) => None,
        (Some(_), None) => return Err("--postgres needs --postgres-url (tenantd's URL)".into()),
        (None, Some(_)) => return Err("--postgres-url needs --postgres (a superuser's URL)".into()),
    };
    if args.instances > 1 && args.postgres.is_none() {
        return Err("--instances above 1 needs --postgres: a SQLite file has one server".into());
    }
    if args.connections < args.instances {
        return Err("--connections must be at least --instances, so every instance has one".into());
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let report = runtime.block_on(run(&args));
    match report {
        Ok(report) => {
            print!("{}", report.text);
            if args.smoke && report.errors > 0 {
                eprintln!("smoke run: {} requests failed", report.errors);
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}

/// tenantd on a fresh database: one process on a SQLite file in a temporary directory, or
/// `--instances` processes on a PostgreSQL database of its own.
struct Server {
    instances: Vec<Instance>,
    token: String,
    dir: tempfile::TempDir,
    /// Dropped (`WITH (FORCE)`) after the instances have stopped: fields drop after
    /// `Drop::drop` has killed them.
    database: Option<Database>,
    /// The PostgreSQL cluster's postmaster, when it runs on this machine.
    postmaster: Option<u32>,
}

/// One tenantd process.
struct Instance {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(args: &Args, extra: &[&str]) -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let token = format!("bench-{:032x}", seed_from_clock());
        std::fs::write(dir.path().join("admin.token"), &token).map_err(|e| e.to_string())?;
        let database = args.postgres.as_ref().map(Database::create).transpose()?;
        let postmaster = args.postgres.as_ref().and_then(|p| postmaster(&p.admin));
        let mut server = Server {
            instances: Vec::with_capacity(args.instances),
            token,
            dir,
            database,
            postmaster,
        };
        // One after another: the first applies the schema.
        for _ in 0..args.instances {
            let instance = server.spawn(args, extra)?;
            let addr = instance.addr;
            server.instances.push(instance);
            wait_ready(addr)?;
        }
        Ok(server)
    }

    /// Starts one more tenantd process on the server's database.
    fn spawn(&self, args: &Args, extra: &[&str]) -> Result<Instance, String> {
        // The port is picked here and handed over: the log can then go to /dev/null and still
        // cost the server what it costs in production.
        let addr = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?;
        let log = match &args.server_log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| e.to_string())?,
            ),
            None => Stdio::null(),
        };
        let mut command = Command::new(&args.server);
        command.arg("serve").arg("--listen").arg(addr.to_string());
        match &self.database {
            Some(database) => command.arg("--db").arg(&database.url),
            None => command.arg("--db").arg(self.dir.path().join("tenantd.db")),
        };
        let child = command
            .arg("--admin-token-file")
            .arg(self.dir.path().join("admin.token"))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", args.server.display()))?;
        Ok(Instance { child, addr })
    }

    /// The instance connection `i` talks to: round-robin.
    fn addr(&self, i: usize) -> SocketAddr {
        self.instances[i % self.instances.len()].addr
    }

    /// User plus system CPU time of the instances together, in microseconds.
    fn cpu_us(&self) -> u64 {
        self.instances
            .iter()
            .map(|instance| {
                let fields = proc_stat(instance.child.id());
                // utime and stime.
                (ticks(&fields, 11) + ticks(&fields, 12)) * 1_000_000 / CLOCK_TICKS_PER_S
            })
            .sum()
    }

    /// The PostgreSQL cluster's CPU time, in microseconds: the postmaster's own and that of
    /// the children it has reaped, and the CPU time of its children alive now (backends,
    /// the WAL writer, the checkpointer…). `None` on SQLite or a cluster on another machine.
    fn db_cpu_us(&self) -> Option<u64> {
        let postmaster = self.postmaster?;
        let own = proc_stat(postmaster);
        // utime, stime, cutime and cstime.
        let mut ticks_sum = (11..=14).map(|i| ticks(&own, i)).sum::<u64>();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let fields = proc_stat(pid);
            if ticks(&fields, 1) == u64::from(postmaster) {
                ticks_sum += ticks(&fields, 11) + ticks(&fields, 12);
            }
        }
        Some(ticks_sum * 1_000_000 / CLOCK_TICKS_PER_S)
    }

    /// The writers' counters from `/metrics`, summed over the instances.
    fn metrics(&self) -> Sample {
        let mut sample = Sample::default();
        for instance in &self.instances {
            let resp = wire::request(&instance.addr.to_string(), "GET", "/metrics", &[], None);
            let body = String::from_utf8_lossy(&resp.body);
            let counter = |name: &str| -> u64 {
                body.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
            };
            sample.wal_frames += counter("tenantd_store_wal_frames_total");
            sample.batches += counter("tenantd_store_batches_total");
            sample.commands += counter("tenantd_store_commands_total");
        }
        sample
    }

    /// The counters before a phase (`/metrics` first, so its requests are not charged).
    fn sample_before(&self) -> Sample {
        let metrics = self.metrics();
        Sample {
            cpu_us: self.cpu_us(),
            db_cpu_us: self.db_cpu_us(),
            ..metrics
        }
    }

    /// The counters after a phase (`/metrics` last).
    fn sample_after(&self) -> Sample {
        let (cpu_us, db_cpu_us) = (self.cpu_us(), self.db_cpu_us());
        Sample {
            cpu_us,
            db_cpu_us,
            ..self.metrics()
        }
    }

    /// Peak resident set size, in KiB, summed over the instances.
    fn peak_rss_kib(&self) -> u64 {
        self.instances
            .iter()
            .map(|instance| {
                std::fs::read_to_string(format!("/proc/{}/status", instance.child.id()))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    fn file_bytes(&self, name: &str) -> u64 {
        std::fs::metadata(self.dir.path().join(name)).map_or(0, |m| m.len())
    }

    /// The database's size: the main file and its WAL, or the PostgreSQL database's.
    fn db_bytes(&self) -> u64 {
        match &self.database {
            Some(database) => database.bytes(),
            None => self.file_bytes("tenantd.db") + self.file_bytes("tenantd.db-wal"),
        }
    }

    /// SIGTERM to every instance, then waits for them (SIGKILL after a while), then drops
    /// the PostgreSQL database.
    fn stop(mut self) {
        for instance in &self.instances {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(instance.child.id().to_string())
                .status();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for instance in &mut self.instances {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = instance.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = instance.child.kill();
            let _ = instance.child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for instance in &mut self.instances {
            let _ = instance.child.kill();
            let _ = instance.child.wait();
        }
    }
}

/// Waits until `GET /healthz` on `addr` answers `200`.
fn wait_ready(addr: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let addr = addr.to_string();
    while Instant::now() < deadline {
        let health = wire::try_request(&addr, "GET", "/healthz", &[], None);
        if health.is_ok_and(|response| response.status == 200) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "the server did not answer GET /healthz on {addr} within {READY_TIMEOUT:?}"
    ))
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces): field `i`
/// here is field `i + 3` of the line (1 the parent's pid, 11 and 12 utime and stime, 13 and
/// 14 the reaped children's). Empty when there is no such process.
fn proc_stat(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_default()
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Field `i` of [`proc_stat`]'s as a number, 0 when it is missing.
fn ticks(fields: &[String], i: usize) -> u64 {
    fields
        .get(i)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0)
}

/// A server's counters at one instant; [`Sample::since`] makes a phase's cost of them.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// tenantd's CPU time (all instances), in microseconds.
    cpu_us: u64,
    /// The PostgreSQL cluster's CPU time, in microseconds, when it runs on this machine.
    db_cpu_us: Option<u64>,
    wal_frames: u64,
    /// Write transactions committed, and the commands in them.
    batches: u64,
    commands: u64,
}

impl Sample {
    fn since(self, before: Sample) -> Sample {
        Sample {
            cpu_us: self.cpu_us.saturating_sub(before.cpu_us),
            db_cpu_us: self
                .db_cpu_us
                .zip(before.db_cpu_us)
                .map(|(after, before)| after.saturating_sub(before)),
            wal_frames: self.wal_frames.saturating_sub(before.wal_frames),
            batches: self.batches.saturating_sub(before.batches),
            commands: self.commands.saturating_sub(before.commands),
        }
    }
}

/// A database of its own on the PostgreSQL cluster, owned by role `tenantd`; dropped (`WITH
/// (FORCE)`) when this is.
struct Database {
    /// The superuser's URL.
    admin: String,
    name: String,
    /// tenantd's URL for it.
    url: String,
}

/// Databases this process has made: each gets the next number in its name.
static DATABASES: AtomicU64 = AtomicU64::new(0);

impl Database {
    fn create(postgres: &Postgres) -> Result<Database, String> {
        let name = format!(
            "tenantd_bench_{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        let url = database_url(&postgres.url, &name).ok_or("--postgres-url names no database")?;
        psql(
            &postgres.admin,
            &format!("CREATE DATABASE {name} OWNER tenantd"),
        )?;
        Ok(Database {
            admin: postgres.admin.clone(),
            name,
            url,
        })
    }

    /// `pg_database_size`, 0 if it cannot be read.
    fn bytes(&self) -> u64 {
        psql(
            &self.admin,
            &format!("SELECT pg_database_size('{}')", self.name),
        )
        .ok()
        .and_then(|size| size.parse().ok())
        .unwrap_or(0)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = psql(&self.admin, &drop) {
            eprintln!("the benchmark's database {} is left over: {e}", self.name);
        }
    }
}

/// `url` naming database `name` instead of its own (a `?query` after it is kept); `None`
/// when `url` names none (`postgres://user:password@host:port/database`).
fn database_url(url: &str, name: &str) -> Option<String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://")? + 3;
    let slash = authority + base[authority..].find('/')?;
    Some(format!("{}/{name}{query}", &base[..slash]))
}

/// Runs one statement through `psql` on `url` and returns what it printed (unaligned, tuples
/// only), within [`PSQL_TIMEOUT`]. The URL is an argument, never printed: an error carries the
/// statement and psql's message.
fn psql(url: &str, sql: &str) -> Result<String, String> {
    let mut child = Command::new("psql")
        .args([url, "-XqAt", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", PSQL_TIMEOUT.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    let deadline = Instant::now() + PSQL_TIMEOUT;
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("psql {sql:?}: no answer within {PSQL_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // What psql prints here fits in a pipe's buffer, so it could finish without a reader.
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The cluster's postmaster, when it runs on this machine: the parent of the checkpointer
/// that `pg_stat_activity` shows, both named `postgres` here.
fn postmaster(admin: &str) -> Option<u32> {
    let checkpointer: u32 = psql(
        admin,
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'",
    )
    .ok()?
    .parse()
    .ok()?;
    let parent = u32::try_from(ticks(&proc_stat(checkpointer), 1)).ok()?;
    let named_postgres = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim() == "postgres")
    };
    (named_postgres(checkpointer) && named_postgres(parent)).then_some(parent)
}

fn seed_from_clock() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(1)
}

/// What each request of a workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Healthz,
    Create,
    /// Reads with the admin token.
    Read,
    /// Reads with each tenant's own token, which the service checks on its credential path.
    ReadOwn,
    /// Reads of tenants' default budgets with the admin token.
    ReadBudget,
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
            Kind::Create => true,
            Kind::Read | Kind::ReadOwn | Kind::ReadBudget => false,
            Kind::Mix { read_percent } => next(rng) % 100 >= u64::from(read_percent),
        };
        if create || self.paths.is_empty() {
            let n = self.names.fetch_add(1, Ordering::Relaxed);
            body.clear();
            write!(
                body,
                r#"{{"name":"bench-{:x}-{n}","opening_deposit_atomic":"1000000"}}"#,
                self.run
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
            let path = match self.kind {
                Kind::ReadBudget => &tenant.budget_path,
                _ => &tenant.path,
            };
            wire::write_request(out, "GET", path, wire::HTTP_11, &headers, None);
        }
    }
}

/// The `Host` header of every request.
const HOST: (&str, &str) = ("Host", "bench");

/// xorshift64*: plenty for picking ids.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// When a phase ends: at a time, or after a number of requests shared by all connections.
#[derive(Clone)]
enum Stop {
    At(Instant),
    After(Arc<AtomicU64>),
}

impl Stop {
    fn take(&self) -> bool {
        match self {
            Stop::At(t) => Instant::now() < *t,
            Stop::After(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }
}

#[derive(Default)]
struct Tally {
    requests: u64,
    errors: u64,
    statuses: Vec<(u16, u64)>,
    /// The tenants created, when collected.
    paths: Vec<Seeded>,
}

impl Tally {
    fn count(&mut self, status: u16) {
        self.requests += 1;
        if !(200..300).contains(&status) {
            self.errors += 1;
            match self.statuses.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => self.statuses.push((status, 1)),
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        self.errors += other.errors;
        for (status, n) in other.statuses {
            match self.statuses.iter_mut().find(|(s, _)| *s == status) {
                Some((_, m)) => *m += n,
                None => self.statuses.push((status, n)),
            }
        }
        self.paths.extend(other.paths);
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
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

/// A keep-alive connection to the server, with Nagle's algorithm off.
async fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(stream)
}

/// Sends `request` and reads its response into `buf`: the response's place there, and the
/// microseconds from the first byte sent to the last byte read.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> Result<(wire::Frame, u64), String> {
    let started = Instant::now();
    stream.write_all(request).await.map_err(|e| e.to_string())?;
    let frame = read_response(stream, buf).await?;
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok((frame, micros))
}

/// Reads until a whole response lies at the front of `buf`, and locates it there.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<wire::Frame, String> {
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    loop {
        if let Some(frame) = wire::parse_frame(buf, false, false).map_err(|e| e.to_string())? {
            return Ok(frame);
        }
        if buf.len() > RESPONSE_BYTES_MAX {
            return Err(format!("a response longer than {RESPONSE_BYTES_MAX} bytes"));
        }
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(match wire::parse_frame(buf, false, true) {
                Err(e) => format!("the server closed the connection: {e}"),
                Ok(_) => "the server closed the connection".into(),
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A tenant the seeding made: its path and its own `Authorization` value.
struct Seeded {
    /// `/v1/tenants/<id>`.
    path: String,
    /// `/v1/tenants/<id>/budgets/<its default budget>`.
    budget_path: String,
    /// Its default budget's id.
    budget_id: String,
    /// `Bearer <its tenant token>`.
    auth: String,
}

/// The tenant a create's body describes.
fn tenant_path(body: &[u8]) -> Option<Seeded> {
    let created: serde_json::Value = serde_json::from_slice(body).ok()?;
    let token = created["sidecar_config_env"]["TENANTD_TENANT_TOKEN"].as_str()?;
    let path = format!("/v1/tenants/{}", created["id"].as_str()?);
    let budget_id = created["budget"]["id"].as_str()?.to_owned();
    Some(Seeded {
        budget_path: format!("{path}/budgets/{budget_id}"),
        budget_id,
        path,
        auth: format!("Bearer {token}"),
    })
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

/// One line of the table.
struct Row {
    name: String,
    requests_per_s: f64,
    hist: Histogram<u64>,
    tally: Tally,
    /// What the server's counters moved by over the phase, and the requests charged for it.
    cost: Sample,
    charged: u64,
    peak_rss_kib: u64,
}

impl Row {
    /// `value` per request charged.
    fn per_request(&self, value: u64) -> f64 {
        value as f64 / self.charged.max(1) as f64
    }
}

/// Budgets the spread reserve+commit cycles pick from (each its tenant's default budget).
const SPREAD_BUDGETS: u64 = 1000;

/// A warm-up, then a measured phase, with the server's CPU and RSS read around it.
async fn measure(
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
async fn seed(server: &Server, args: &Args, have: u64, total: u64) -> Result<Vec<Seeded>, String> {
    const STEP: u64 = 100_000;
    let mut paths = Vec::new();
    let started = Instant::now();
    let mut done = have;
    while done < total {
        let count = (total - done).min(STEP);
        let workload = Arc::new(Workload::new(
            Kind::Create,
            server,
            Arc::new(Vec::new()),
            true,
        ));
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

/// Reserve+commit cycles: each connection reserves [`SPEND_HOLD`] atomic units from a budget
/// (its tenant's own token), then commits 0 to `SPEND_HOLD + 1` (below, at or above the hold).
const SPEND_HOLD: u64 = 2;

/// What a spending connection does: reserve+commit cycles (each hold committed at once), or
/// one kind of request alone: reserves that it keeps, or commits of holds taken before.
enum Plan {
    Cycles,
    Reserve,
    Commit(Vec<Hold>),
}

/// A hold to commit: the index of its target and the reservation's id.
type Hold = (usize, String);

/// What one connection did: a histogram and a tally per request kind, what the service
/// acknowledged (to compare with the budget at the end), and the holds it kept.
struct Spent {
    reserve: (Histogram<u64>, Tally),
    commit: (Histogram<u64>, Tally),
    committed: u128,
    /// Atomic units held by granted reservations, and those of holds settled by a commit.
    held: u128,
    settled: u128,
    holds: Vec<Hold>,
}

impl Spent {
    fn new() -> Self {
        Spent {
            reserve: (histogram(), Tally::default()),
            commit: (histogram(), Tally::default()),
            committed: 0,
            held: 0,
            settled: 0,
            holds: Vec::new(),
        }
    }
}

/// One connection's closed loop of reserves and commits on budgets picked at random, as
/// `plan` says; a commit phase ends early when its holds run out.
async fn spend_connection(
    addr: SocketAddr,
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
            let t = (next(&mut rng) % targets.len() as u64) as usize;
            write!(
                body,
                r#"{{"budget_id":"{}","amount_atomic":"{SPEND_HOLD}"}}"#,
                targets[t].budget_id
            )
            .expect("a Vec");
            (t, format!("{}/reservations", targets[t].path), false, 0)
        };
        let headers = [
            HOST,
            ("Authorization", targets[t].auth.as_str()),
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
                spent.committed += u128::from(amount);
                spent.settled += u128::from(SPEND_HOLD);
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
            spent.held += u128::from(SPEND_HOLD);
        }
        buf.drain(..frame.len);
    }
    // A cycle cut short by the stop leaves its hold outstanding.
    spent.holds.extend(to_commit);
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
async fn spend_phase(
    server: &Server,
    targets: &Arc<Vec<Seeded>>,
    plans: Vec<Plan>,
    stop: Stop,
) -> Result<Spent, String> {
    let mut tasks = Vec::with_capacity(plans.len());
    for (i, plan) in plans.into_iter().enumerate() {
        let seed = (seed_from_clock() as u64) ^ ((i as u64 + 1) << 32);
        tasks.push(tokio::spawn(spend_connection(
            server.addr(i),
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
        ] {
            into.0.add(&from.0).map_err(|e| e.to_string())?;
            into.1.merge(from.1);
        }
        all.committed += one.committed;
        all.held += one.held;
        all.settled += one.settled;
        all.holds.extend(one.holds);
    }
    Ok(all)
}

/// Plans for `connections` connections: cycles, reserves, or commits of `holds` dealt out
/// round-robin.
fn plans(connections: usize, make: impl Fn() -> Plan, holds: Option<Vec<Hold>>) -> Vec<Plan> {
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

/// A phase of spending, with the server's counters over it, made into rows: one for the
/// reserves and one for the commits it sent (each counted on its own, and each request
/// charged the phase's CPU and frames alike).
async fn spend_rows(
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
    let requests = spent.reserve.1.requests + spent.commit.1.requests;
    let mut rows = Vec::new();
    for (what, counted) in [
        ("POST reserve", &mut spent.reserve),
        ("POST commit", &mut spent.commit),
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
async fn measure_cycles(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
) -> Result<(Vec<Row>, u128, u128), String> {
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
    Ok((
        rows,
        warm.committed + spent.committed,
        (warm.held + spent.held) - (warm.settled + spent.settled),
    ))
}

/// Reserves alone, then commits alone of the holds they took (until they run out, at most
/// as long), over `targets`: each request kind's own throughput, after a warm-up of cycles.
async fn measure_alone(
    args: &Args,
    server: &Server,
    name: &str,
    targets: &Arc<Vec<Seeded>>,
) -> Result<Vec<Row>, String> {
    eprintln!(
        "  {name}: {:.1} s warm-up, {:.1} s of reserves, then their commits",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let connections = args.connections;
    spend_phase(
        server,
        targets,
        plans(connections, || Plan::Cycles, None),
        Stop::At(Instant::now() + args.warmup),
    )
    .await?;
    let stop = Stop::At(Instant::now() + args.duration);
    let reserves = plans(connections, || Plan::Reserve, None);
    let (spent, mut rows) = spend_rows(server, targets, reserves, stop, name).await?;
    let commits = plans(connections, || Plan::Cycles, Some(spent.holds));
    let stop = Stop::At(Instant::now() + args.duration);
    rows.extend(spend_rows(server, targets, commits, stop, name).await?.1);
    Ok(rows)
}

/// Reads the budget at `target` and checks it against what was acknowledged: every commit
/// spent exactly once, every unsettled hold still reserved, and the invariant.
fn check_budget(
    server: &Server,
    target: &Seeded,
    deposit: u128,
    committed: u128,
    outstanding: u128,
) -> Result<String, String> {
    let auth = format!("Bearer {}", server.token);
    let headers = [("Authorization", auth.as_str())];
    let addr = server.addr(0).to_string();
    let resp = wire::request(&addr, "GET", &target.budget_path, &headers, None);
    let budget: serde_json::Value =
        serde_json::from_slice(&resp.body).map_err(|e| format!("the budget is not JSON: {e}"))?;
    let figure = |name: &str| -> Result<u128, String> {
        budget[name]
            .as_str()
            .and_then(|v| v.parse().ok())
            .ok_or(format!("the budget has no {name}: {budget}"))
    };
    let (credited, debited, spent, reserved) = (
        figure("credited_atomic")?,
        figure("debited_atomic")?,
        figure("spent_atomic")?,
        figure("reserved_atomic")?,
    );
    if credited != deposit || debited != 0 || spent != committed || reserved != outstanding {
        return Err(format!(
            "the hot budget does not match what was acknowledged: credited {credited} (deposit \
             {deposit}), spent {spent} (commits acknowledged {committed}), reserved {reserved} \
             (holds unsettled {outstanding})"
        ));
    }
    if credited < debited + spent + reserved {
        return Err(format!("the hot budget is overspent: {budget}"));
    }
    Ok(format!(
        "hot budget at the end: spent {spent} = the commits acknowledged, reserved {reserved} = \
         the holds left unsettled, available {}; nothing overspent",
        credited - debited - spent - reserved
    ))
}

struct Report {
    text: String,
    errors: u64,
}

async fn run(args: &Args) -> Result<Report, String> {
    let wanted = |group: &str| args.only.as_deref().is_none_or(|only| only == group);
    let mut rows = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let no_paths = Arc::new(Vec::new());
    let mut db_bytes = 0;

    if wanted("base") {
        eprintln!("server: health, reads and the mix at {} tenants", args.base);
        let server = Server::start(args, &[])?;
        rows.push(measure(args, &server, "GET /healthz", Kind::Healthz, &no_paths).await?);
        let paths = Arc::new(seed(&server, args, 0, args.base).await?);
        let name = format!("GET tenant ({} tenants)", args.base);
        rows.push(measure(args, &server, &name, Kind::Read, &paths).await?);
        let name = format!("GET tenant, own token ({} tenants)", args.base);
        rows.push(measure(args, &server, &name, Kind::ReadOwn, &paths).await?);
        let name = format!("GET budget ({} tenants)", args.base);
        rows.push(measure(args, &server, &name, Kind::ReadBudget, &paths).await?);
        let mix = Kind::Mix { read_percent: 90 };
        rows.push(measure(args, &server, "90 % read / 10 % create", mix, &paths).await?);
        server.stop();
    }
    if wanted("create") {
        eprintln!("server: creates with group commit");
        let server = Server::start(args, &[])?;
        let name = "POST create (group commit)";
        rows.push(measure(args, &server, name, Kind::Create, &no_paths).await?);
        server.stop();
    }
    if wanted("create1") {
        eprintln!("server: creates with --commit-batch-max 1");
        let server = Server::start(args, &["--commit-batch-max", "1"])?;
        let name = "POST create (--commit-batch-max 1)";
        rows.push(measure(args, &server, name, Kind::Create, &no_paths).await?);
        server.stop();
    }
    if wanted("spend") {
        eprintln!("server: reserve+commit cycles over {SPREAD_BUDGETS} budgets, then on one");
        let server = Server::start(args, &[])?;
        let spread = Arc::new(seed(&server, args, 0, SPREAD_BUDGETS).await?);
        let name = format!("{SPREAD_BUDGETS} budgets");
        rows.extend(measure_cycles(args, &server, &name, &spread).await?.0);
        let name = format!("{SPREAD_BUDGETS} budgets, each kind alone");
        rows.extend(measure_alone(args, &server, &name, &spread).await?);
        let auth = format!("Bearer {}", server.token);
        let deposit = u128::from(u64::MAX);
        let body = format!(r#"{{"name":"hot-budget","opening_deposit_atomic":"{deposit}"}}"#);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        let created = wire::request(
            &server.addr(0).to_string(),
            "POST",
            "/v1/tenants",
            &headers,
            Some(body.as_bytes()),
        );
        let hot = Arc::new(vec![
            tenant_path(&created.body).ok_or("the hot tenant was not created")?,
        ]);
        let (hot_rows, committed, outstanding) =
            measure_cycles(args, &server, "one hot budget", &hot).await?;
        rows.extend(hot_rows);
        notes.push(check_budget(
            &server,
            &hot[0],
            deposit,
            committed,
            outstanding,
        )?);
        server.stop();
    }
    if wanted("scale") {
        eprintln!("server: reads at {} tenants", args.scale);
        let server = Server::start(args, &[])?;
        let paths = Arc::new(seed(&server, args, 0, args.scale).await?);
        db_bytes = server.db_bytes();
        if server.database.is_some() {
            eprintln!("  database {:.1} MiB", db_bytes as f64 / 1048576.0);
        } else {
            eprintln!(
                "  database {:.1} MiB, of which WAL {:.1} MiB",
                db_bytes as f64 / 1048576.0,
                server.file_bytes("tenantd.db-wal") as f64 / 1048576.0
            );
        }
        let name = format!("GET tenant ({} tenants)", args.scale);
        rows.push(measure(args, &server, &name, Kind::Read, &paths).await?);
        server.stop();
    }

    let mut text = render(args, &rows, db_bytes);
    for note in notes {
        let _ = writeln!(text, "- {note}");
    }
    let errors = rows.iter().map(|r| r.tally.errors).sum();
    Ok(Report { text, errors })
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), Linux {}", kernel.trim())
}

fn render(args: &Args, rows: &[Row], db_bytes: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{}; {} connections, {:.1} s per row after {:.1} s warm-up; client and server share the machine.\n",
        machine(),
        args.connections,
        args.duration.as_secs_f64(),
        args.warmup.as_secs_f64()
    );
    if let Some(postgres) = &args.postgres {
        let version = psql(&postgres.admin, "SHOW server_version").unwrap_or_default();
        let _ = writeln!(
            out,
            "tenantd on PostgreSQL {version}: {} instance{} on one database, the connections \
             dealt out to them round-robin; server CPU and RSS are summed over the instances, \
             PostgreSQL CPU is the cluster's (every process of it).\n",
            args.instances,
            if args.instances == 1 { "" } else { "s" }
        );
        out.push_str("| workload | requests/s | p50 | p99 | p99.9 | errors | server CPU µs/req | PostgreSQL CPU µs/req | commands/batch | peak server RSS |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        out.push_str("| workload | requests/s | p50 | p99 | p99.9 | errors | server CPU µs/req | WAL frames/req | peak server RSS |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    for row in rows {
        let errors = if row.tally.statuses.is_empty() {
            "0".to_owned()
        } else {
            let detail: Vec<String> = row
                .tally
                .statuses
                .iter()
                .map(|(s, n)| format!("{n}×{s}"))
                .collect();
            format!("{} ({})", row.tally.errors, detail.join(", "))
        };
        // On PostgreSQL: the cluster's CPU, and how many commands a write transaction held.
        let costs = if args.postgres.is_some() {
            let db_cpu = row
                .cost
                .db_cpu_us
                .map_or("–".to_owned(), |us| format!("{:.1}", row.per_request(us)));
            let per_batch = match row.cost.batches {
                0 => "–".to_owned(),
                batches => format!("{:.2}", row.cost.commands as f64 / batches as f64),
            };
            format!("{db_cpu} | {per_batch}")
        } else {
            format!("{:.2}", row.per_request(row.cost.wal_frames))
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {:.1} | {costs} | {:.1} MiB |",
            row.name,
            row.requests_per_s,
            ms(row.hist.value_at_quantile(0.50)),
            ms(row.hist.value_at_quantile(0.99)),
            ms(row.hist.value_at_quantile(0.999)),
            errors,
            row.per_request(row.cost.cpu_us),
            row.peak_rss_kib as f64 / 1024.0,
        );
    }
    let find = |prefix: &str| rows.iter().find(|r| r.name.starts_with(prefix));
    let (health, read, create, batch1, scaled) = (
        find("GET /healthz"),
        find(&format!("GET tenant ({} ", args.base)),
        find("POST create (group"),
        find("POST create (--commit"),
        find(&format!("GET tenant ({} ", args.scale)),
    );
    out.push('\n');
    if let (Some(c), Some(b)) = (create, batch1) {
        let _ = writeln!(
            out,
            "- group commit ÷ batch-1 creates: {:.2}×",
            c.requests_per_s / b.requests_per_s
        );
    }
    if let (Some(r), Some(h)) = (read, health) {
        let _ = writeln!(
            out,
            "- reads ÷ /healthz: {:.0} %",
            100.0 * r.requests_per_s / h.requests_per_s
        );
    }
    if let (Some(r), Some(s)) = (read, scaled) {
        let p99 = |row: &Row| row.hist.value_at_quantile(0.99) as f64;
        let _ = writeln!(
            out,
            "- read latency at {} vs {} tenants: p50 {} → {}, p99 {} → {} ({:+.0} %)",
            args.base,
            args.scale,
            ms(r.hist.value_at_quantile(0.5)),
            ms(s.hist.value_at_quantile(0.5)),
            ms(r.hist.value_at_quantile(0.99)),
            ms(s.hist.value_at_quantile(0.99)),
            100.0 * (p99(s) - p99(r)) / p99(r).max(1.0),
        );
    }
    let spread_reserve = find("POST reserve (1000");
    let spread_commit = find("POST commit (1000");
    let hot_reserve = find("POST reserve (one hot");
    let hot_commit = find("POST commit (one hot");
    let alone = (
        find("POST reserve (1000 budgets, each"),
        find("POST commit (1000 budgets, each"),
    );
    for (what, pair) in [
        ("in cycles", (spread_reserve, spread_commit)),
        ("each kind alone", alone),
    ] {
        if let (Some(c), (Some(r), Some(m))) = (create, pair) {
            let _ = writeln!(
                out,
                "- over 1,000 budgets, {what}: reserves ÷ creates {:.0} %, commits ÷ creates \
                 {:.0} %",
                100.0 * r.requests_per_s / c.requests_per_s,
                100.0 * m.requests_per_s / c.requests_per_s
            );
        }
    }
    if let (Some(r), Some(m), Some(hr), Some(hm)) =
        (spread_reserve, spread_commit, hot_reserve, hot_commit)
    {
        let _ = writeln!(
            out,
            "- one hot budget ÷ 1,000 budgets: reserves {:.0} %, commits {:.0} %",
            100.0 * hr.requests_per_s / r.requests_per_s,
            100.0 * hm.requests_per_s / m.requests_per_s
        );
    }
    if let (Some(b), Some(r)) = (find("GET budget ("), read) {
        let _ = writeln!(
            out,
            "- GET budget ÷ GET tenant: {:.0} %",
            100.0 * b.requests_per_s / r.requests_per_s
        );
    }
    if db_bytes > 0 {
        let _ = writeln!(
            out,
            "- database at {} tenants: {:.1} MiB, {:.0} bytes per tenant (tenant row, indexes, audit event)",
            args.scale,
            db_bytes as f64 / (1024.0 * 1024.0),
            db_bytes as f64 / args.scale.max(1) as f64
        );
    }
    out
}
