//! The servers under test: tenantd started on a fresh database (a SQLite file, or a scratch
//! PostgreSQL database for `--instances` processes), stopped at the end of its rows, and
//! what it costs read from `/proc` and `/metrics`.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::args::{Args, Route};
use crate::client::{Pick, seed_from_clock};
use crate::delay::{DelayProxy, proxied};
use crate::scratch::{Scratch, psql};
use crate::wire;

/// Clock ticks per second in `/proc/PID/stat` (USER_HZ, 100 on every Linux ABI we run on).
const CLOCK_TICKS_PER_S: u64 = 100;

/// How long a started server may take to answer `GET /healthz`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a server may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// tenantd on a fresh database: one process on a SQLite file in a temporary directory, or
/// `--instances` processes on a PostgreSQL database of its own.
pub(crate) struct Server {
    instances: Vec<Instance>,
    pub(crate) token: String,
    dir: tempfile::TempDir,
    /// Dropped (`WITH (FORCE)`) after the instances have stopped: fields drop after
    /// `Drop::drop` has killed them.
    pub(crate) database: Option<Scratch>,
    /// The PostgreSQL cluster's postmaster, when it runs on this machine.
    postmaster: Option<u32>,
    /// The instances' URL through the delaying proxy (`--pg-delay-ms`), and the proxy.
    delayed: Option<(String, DelayProxy)>,
    /// How the spending rows' connections are dealt out to the instances.
    route: Route,
}

/// One tenantd process.
struct Instance {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    pub(crate) fn start(args: &Args, extra: &[&str]) -> Result<Server, String> {
        Self::start_with(args, extra, &[])
    }

    /// [`Server::start`], each instance with `env` added to its environment.
    pub(crate) fn start_with(
        args: &Args,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let token = format!("bench-{:032x}", seed_from_clock());
        std::fs::write(dir.path().join("admin.token"), &token).map_err(|e| e.to_string())?;
        let database = args
            .postgres
            .as_ref()
            .map(|p| Scratch::create(&p.admin, &p.url, "bench"))
            .transpose()?;
        let postmaster = args.postgres.as_ref().and_then(|p| postmaster(&p.admin));
        let delayed = match (&args.postgres, &database) {
            (Some(p), Some(database)) if !p.delay.is_zero() => {
                Some(proxied(&database.url, p.delay)?)
            }
            _ => None,
        };
        let mut server = Server {
            instances: Vec::with_capacity(args.instances),
            token,
            dir,
            database,
            postmaster,
            delayed,
            route: args.route,
        };
        // One after another: the first applies the schema.
        for _ in 0..args.instances {
            let instance = server.spawn(args, extra, env)?;
            let addr = instance.addr;
            server.instances.push(instance);
            wait_ready(addr)?;
        }
        Ok(server)
    }

    /// Starts one more tenantd process on the server's database.
    fn spawn(&self, args: &Args, extra: &[&str], env: &[(&str, &str)]) -> Result<Instance, String> {
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
        match (&self.delayed, &self.database) {
            (Some((url, _)), _) => command.arg("--db").arg(url),
            (None, Some(database)) => command.arg("--db").arg(&database.url),
            (None, None) => command.arg("--db").arg(self.dir.path().join("tenantd.db")),
        };
        if let Some(writers) = args.pg_writers {
            command.arg("--pg-writers").arg(writers.to_string());
        }
        if let Some(workers) = args.workers {
            command.arg("--workers").arg(workers.to_string());
        }
        let child = command
            .arg("--admin-token-file")
            .arg(self.dir.path().join("admin.token"))
            .args(extra)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", args.server.display()))?;
        Ok(Instance { child, addr })
    }

    /// The instance connection `i` talks to: round-robin.
    pub(crate) fn addr(&self, i: usize) -> SocketAddr {
        self.instances[i % self.instances.len()].addr
    }

    /// Where spending connection `i` goes and which of `targets` it spends on, as `--route`
    /// says. By tenant, target t belongs to instance t mod N; with fewer targets than
    /// instances (one hot budget), connection i goes to the instance of target i mod targets,
    /// and the instances without one stay idle, as they would behind such a balancer.
    pub(crate) fn route(&self, i: usize, targets: usize) -> (SocketAddr, Pick) {
        let n = self.instances.len();
        if self.route == Route::RoundRobin || n == 1 {
            return (self.addr(i), Pick::all(targets));
        }
        let first = self.instance_of(i, targets);
        let pick = Pick {
            first,
            stride: n,
            count: (targets - first).div_ceil(n),
        };
        (self.instances[first].addr, pick)
    }

    /// The instance spending connection `i` goes to, routed by tenant over `targets`.
    pub(crate) fn instance_of(&self, i: usize, targets: usize) -> usize {
        i % self.instances.len().min(targets)
    }

    /// The instance target `t` belongs to, routed by tenant (see [`Server::route`]).
    pub(crate) fn owner(&self, t: usize) -> usize {
        t % self.instances.len()
    }

    /// Whether the spending rows route by tenant.
    pub(crate) fn routes_by_tenant(&self) -> bool {
        self.route == Route::Tenant && self.instances.len() > 1
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

    /// The notes of a group of rows on this server, `what` naming them: how long their
    /// audit rows waited for the chain ([`Server::chaining_note`]) and, through the delaying
    /// proxy, how long it held what it carried ([`DelayProxy::held_note`]).
    pub(crate) fn notes(&self, what: &str) -> impl Iterator<Item = String> {
        let held = self.delayed.as_ref().and_then(|(_, p)| p.held_note(what));
        self.chaining_note(what).into_iter().chain(held)
    }

    /// How long the audit rows of this server's writes waited for their place in the chain
    /// (PostgreSQL's `tenantd_audit_chaining_seconds`, summed over the instances): the
    /// median and the 99th percentile as the upper bounds of their buckets, and the longest.
    /// `None` where nothing was chained (SQLite chains as it writes).
    fn chaining_note(&self, what: &str) -> Option<String> {
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        let mut max = 0.0f64;
        for instance in &self.instances {
            let resp = wire::request(&instance.addr.to_string(), "GET", "/metrics", &[], None);
            let body = String::from_utf8_lossy(&resp.body);
            for line in body.lines() {
                if let Some(rest) = line.strip_prefix("tenantd_audit_chaining_seconds_bucket{le=\"")
                    && let Some((le, count)) = rest.split_once("\"} ")
                {
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().ok()?
                    };
                    let count: u64 = count.trim().parse().ok()?;
                    match buckets.iter_mut().find(|(bound, _)| *bound == le) {
                        Some((_, n)) => *n += count,
                        None => buckets.push((le, count)),
                    }
                } else if let Some(v) = line.strip_prefix("tenantd_audit_chaining_max_seconds ") {
                    max = max.max(v.trim().parse().ok()?);
                }
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = buckets.last().map_or(0, |(_, n)| *n);
        if total == 0 {
            return None;
        }
        // The buckets are cumulative: the first whose count reaches the rank holds it.
        let quantile = |q: f64| {
            let rank = (q * total as f64).ceil() as u64;
            let bound = buckets
                .iter()
                .find(|(_, n)| *n >= rank)
                .map_or(f64::INFINITY, |b| b.0);
            if bound.is_infinite() {
                "over 5 s".to_owned()
            } else {
                format!("≤ {} ms", bound * 1e3)
            }
        };
        Some(format!(
            "{what}: {total} audit rows chained after their commit; p50 {}, p99 {}, max {} ms",
            quantile(0.5),
            quantile(0.99),
            max * 1e3
        ))
    }

    /// The counters before a phase (`/metrics` first, so its requests are not charged).
    pub(crate) fn sample_before(&self) -> Sample {
        let metrics = self.metrics();
        Sample {
            cpu_us: self.cpu_us(),
            db_cpu_us: self.db_cpu_us(),
            ..metrics
        }
    }

    /// The counters after a phase (`/metrics` last).
    pub(crate) fn sample_after(&self) -> Sample {
        let (cpu_us, db_cpu_us) = (self.cpu_us(), self.db_cpu_us());
        Sample {
            cpu_us,
            db_cpu_us,
            ..self.metrics()
        }
    }

    /// Peak resident set size, in KiB, summed over the instances.
    pub(crate) fn peak_rss_kib(&self) -> u64 {
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

    /// The SQLite file, when the server serves from one.
    pub(crate) fn db_path(&self) -> Option<std::path::PathBuf> {
        self.database
            .is_none()
            .then(|| self.dir.path().join("tenantd.db"))
    }

    pub(crate) fn file_bytes(&self, name: &str) -> u64 {
        std::fs::metadata(self.dir.path().join(name)).map_or(0, |m| m.len())
    }

    /// The database's size: the main file and its WAL, or the PostgreSQL database's.
    pub(crate) fn db_bytes(&self) -> u64 {
        match &self.database {
            Some(database) => database_bytes(database),
            None => self.file_bytes("tenantd.db") + self.file_bytes("tenantd.db-wal"),
        }
    }

    /// SIGTERM to every instance, then waits for them (SIGKILL after a while), then drops
    /// the PostgreSQL database.
    pub(crate) fn stop(mut self) {
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
pub(crate) struct Sample {
    /// tenantd's CPU time (all instances), in microseconds.
    pub(crate) cpu_us: u64,
    /// The PostgreSQL cluster's CPU time, in microseconds, when it runs on this machine.
    pub(crate) db_cpu_us: Option<u64>,
    pub(crate) wal_frames: u64,
    /// Write transactions committed, and the commands in them.
    pub(crate) batches: u64,
    pub(crate) commands: u64,
}

impl Sample {
    pub(crate) fn since(self, before: Sample) -> Sample {
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

/// The size of `database` (`pg_database_size`), 0 if it cannot be read.
fn database_bytes(database: &Scratch) -> u64 {
    psql(
        database.admin_url(),
        &format!("SELECT pg_database_size('{}')", database.name),
    )
    .ok()
    .and_then(|size| size.parse().ok())
    .unwrap_or(0)
}

/// Queries `pgbench` sends on one connection to measure a round trip.
const ROUND_TRIPS: u32 = 200;

/// The PostgreSQL round trip directly and through the proxy of `--pg-delay-ms`, as the
/// report's first note says it: the mean latency of [`ROUND_TRIPS`] `SELECT 1` on one
/// connection, by `pgbench` (Debian's postgresql package has it).
pub(crate) fn round_trip_line(url: &str, delay: Duration) -> Result<String, String> {
    // The proxy stays up until both are measured.
    let (through, _proxy) = proxied(url, delay)?;
    let ms = delay.as_secs_f64() * 1000.0;
    Ok(format!(
        "PostgreSQL round trip (pgbench, {ROUND_TRIPS} × SELECT 1 on one connection, mean): \
         {:.2} ms direct, {:.2} ms through the {ms:.2} ms proxy",
        pgbench_latency_ms(url)?,
        pgbench_latency_ms(&through)?,
    ))
}

/// The mean latency `pgbench` reports for [`ROUND_TRIPS`] `SELECT 1` on `url`. The URL is
/// an argument, never in a message.
fn pgbench_latency_ms(url: &str) -> Result<f64, String> {
    let pgbench = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no /usr/lib/postgresql for pgbench: {e}"))?
        .flatten()
        .map(|version| version.path().join("bin/pgbench"))
        .filter(|path| path.exists())
        .max()
        .ok_or("no /usr/lib/postgresql/*/bin/pgbench")?;
    let script = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    std::fs::write(script.path(), "SELECT 1;\n").map_err(|e| e.to_string())?;
    let out = Command::new(pgbench)
        .args(["-n", "-c", "1", "-t", &ROUND_TRIPS.to_string(), "-f"])
        .arg(script.path())
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run pgbench: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("latency average = "))
        .and_then(|rest| rest.trim_end_matches(" ms").trim().parse().ok())
        .ok_or_else(|| {
            format!(
                "pgbench gave no latency (exit {:?}): {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
}
