//! The command line: every flag declared once for clap (which gives `--help` and the errors),
//! then the presets resolved and the flags checked against one another into [`Args`].
//!
//! `--quick` and `--smoke` stand for flags of their own; as when they were spelled out, the
//! later of a preset and a flag it names wins (`--smoke --connections 8` runs 8 connections,
//! `--connections 8 --smoke` runs 4). Clap cannot say "the later one", so the positions clap
//! recorded decide.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};

use crate::scratch::database_url;

/// Most keep-alive connections `--connections` opens.
const CONNECTIONS_MAX: u64 = 4096;

/// The longest delay `--pg-delay-ms` takes, each way, in milliseconds.
const PG_DELAY_MS_MAX: f64 = 50.0;

/// Most tenantd instances `--instances` starts on one database.
const INSTANCES_MAX: u64 = 64;

/// Longest a measured or a warm-up phase may last, in seconds.
const PHASE_S_MAX: f64 = 3600.0;

/// `--connections` without the flag or a preset.
const CONNECTIONS_DEFAULT: u64 = 32;
/// `--duration-s` without the flag or a preset.
const DURATION_DEFAULT: Duration = Duration::from_secs(10);
/// `--warmup-s` without the flag or a preset.
const WARMUP_DEFAULT: Duration = Duration::from_secs(1);
/// `--scale` without the flag or a preset.
const SCALE_DEFAULT: u64 = 1_000_000;
/// `--base` without the flag or a preset.
const BASE_DEFAULT: u64 = 2_000;
/// `--instances` without the flag.
const INSTANCES_DEFAULT: u64 = 1;
/// `--boundary-budgets` without the flag or a preset.
const BOUNDARY_BUDGETS_DEFAULT: u64 = 100_000;
/// `--faketime` without the flag: Debian's package `faketime` on x86-64.
const FAKETIME_DEFAULT: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// What `--quick` stands for: `--duration-s 3 --scale 100000`.
const QUICK_DURATION: Duration = Duration::from_secs(3);
const QUICK_SCALE: u64 = 100_000;

/// What `--smoke` stands for: `--connections 4 --duration-s 0.5 --warmup-s 0.2 --scale 3000
/// --base 500 --boundary-budgets 2000`.
const SMOKE_CONNECTIONS: u64 = 4;
const SMOKE_DURATION: Duration = Duration::from_millis(500);
const SMOKE_WARMUP: Duration = Duration::from_millis(200);
const SMOKE_SCALE: u64 = 3_000;
const SMOKE_BASE: u64 = 500;
const SMOKE_BOUNDARY_BUDGETS: u64 = 2_000;

/// The load generator behind `make bench`: tenantd started on a fresh database, driven over
/// keep-alive connections, one markdown table of throughput, latency and cost per request.
#[derive(Parser, Debug)]
#[command(
    name = "load",
    bin_name = "cargo bench --bench load --",
    args_override_self = true,
    after_help = "\
A preset (--quick, --smoke) sets the flags it names; of a preset and such a flag, the one \
later on the command line wins.

Examples:
  cargo bench --bench load -- --quick             the whole table in about a minute
  cargo bench --bench load -- --smoke             what CI runs (exits 1 on any error)
  cargo bench --bench load -- --only spend --duration-s 5
  make bench BACKEND=postgres BENCH_ARGS=--quick  PostgreSQL with 1 and 3 instances, then SQLite"
)]
struct Cli {
    /// Keep-alive connections [default: 32]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=CONNECTIONS_MAX))]
    connections: Option<u64>,

    /// Measured seconds per row [default: 10]
    #[arg(long = "duration-s", value_name = "S", value_parser = seconds)]
    duration_s: Option<Duration>,

    /// Unmeasured seconds before each row [default: 1]
    #[arg(long = "warmup-s", value_name = "S", value_parser = seconds)]
    warmup_s: Option<Duration>,

    /// Tenants to seed for the scale check [default: 1000000]
    #[arg(long, value_name = "N")]
    scale: Option<u64>,

    /// Tenants present for the read rows [default: 2000]
    #[arg(long, value_name = "N")]
    base: Option<u64>,

    /// Monthly budgets that pass one boundary together in the boundary row [default: 100000]
    #[arg(long = "boundary-budgets", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    boundary_budgets: Option<u64>,

    /// libfaketime, which moves the boundary row's server clock [default:
    /// /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1, from Debian's package faketime]
    #[arg(long, value_name = "PATH", hide_default_value = true, default_value = FAKETIME_DEFAULT)]
    faketime: PathBuf,

    /// --duration-s 3 --scale 100000
    #[arg(long)]
    quick: bool,

    /// A few seconds in all; exits 1 on any error (CI): --connections 4 --duration-s 0.5
    /// --warmup-s 0.2 --scale 3000 --base 500 --boundary-budgets 2000
    #[arg(long)]
    smoke: bool,

    /// The tenantd binary [default: the one cargo built]
    #[arg(long, value_name = "PATH", hide_default_value = true,
          default_value = env!("CARGO_BIN_EXE_tenantd"))]
    server: PathBuf,

    /// Keep the server's log in FILE [default: discarded]
    #[arg(long = "server-log", value_name = "FILE")]
    server_log: Option<PathBuf>,

    /// Run one group of rows [default: all]
    #[arg(long, value_name = "GROUP")]
    only: Option<Group>,

    /// Serve from PostgreSQL: a fresh database per server on the cluster of this superuser
    /// URL (psql runs CREATE DATABASE … OWNER tenantd and, when the server stops, DROP
    /// DATABASE … WITH (FORCE)); needs --postgres-url
    #[arg(long, value_name = "ADMIN_URL")]
    postgres: Option<String>,

    /// tenantd's URL on that cluster (role tenantd); its database name is replaced by each
    /// server's own (make bench BACKEND=postgres passes scripts/with-postgres.sh's
    /// TENANTD_TEST_POSTGRES_ADMIN_URL and _URL)
    #[arg(long = "postgres-url", value_name = "URL")]
    postgres_url: Option<String>,

    /// A network delay between the instances and PostgreSQL, each way, in milliseconds (0 to
    /// 50; needs --postgres): a delaying proxy on 127.0.0.1 in front of the cluster, as a
    /// managed database across a network answers; the round trip through it is measured and
    /// shown [default: 0]
    #[arg(long = "pg-delay-ms", value_name = "MS")]
    pg_delay_ms: Option<f64>,

    /// tenantd processes on the one database, connections dealt out to them as --route says
    /// (more than 1 only with --postgres) [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=INSTANCES_MAX))]
    instances: Option<u64>,

    /// How the connections of the spend and webhooks groups' rows are dealt out to the
    /// instances: round-robin, each connection spending on every tenant, or by tenant, as a
    /// balancer that sends each tenant to one instance (tenant t of the row to instance
    /// t mod N; a connection spends only on its instance's tenants). The other groups deal
    /// theirs round-robin [default: round-robin]
    #[arg(long, value_name = "HOW")]
    route: Option<Route>,

    /// Writer connections of each instance (tenantd serve --pg-writers; needs --postgres)
    /// [default: tenantd's own with one instance, 1 each with several, as docs/postgres.md
    /// advises]
    #[arg(long = "pg-writers", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=16))]
    pg_writers: Option<u64>,

    /// Threads serving each instance's connections (tenantd serve --workers) [default:
    /// tenantd's own, one a core, with one instance; with several, the cores shared among
    /// them, at least 1 each, as docs/operations.md advises for instances on one machine]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: Option<u64>,

    /// What `cargo bench` passes to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// A group of rows, each run on a server of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Group {
    /// GET /healthz, the reads, and the 90 % read / 10 % create mix
    Base,
    /// Creates with group commit
    Create,
    /// Creates with --commit-batch-max 1
    #[value(name = "create1")]
    Create1,
    /// Reserve+commit cycles over 1,000 budgets and on one
    Spend,
    /// Charges on a leaf with 3 ancestors against a flat budget, over 1,000 tenants and on one
    Tree,
    /// Charges one a request against batches of 100 and of 1,000 (POST …/batch), over 1,000
    /// budgets of 100 tenants
    Batch,
    /// Reads at --scale tenants
    Scale,
    /// --boundary-budgets monthly budgets passing one boundary while charges go on (SQLite)
    Boundary,
    /// Webhook deliveries to a local receiver while charges go on, and the spend path with
    /// ten endpoints subscribed to everything
    Webhooks,
}

/// How the spending rows' connections are dealt out to the instances (`--route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Route {
    /// Connection i to instance i mod N, spending on every tenant of the row
    RoundRobin,
    /// Connection i to instance i mod N, spending only on that instance's tenants
    Tenant,
}

/// The PostgreSQL cluster every server gets a database of its own on.
#[derive(Debug, Clone)]
pub(crate) struct Postgres {
    /// A superuser's URL, for `psql`: creates and drops the databases.
    pub(crate) admin: String,
    /// tenantd's URL (role `tenantd`), whose database name each server replaces by its own.
    pub(crate) url: String,
    /// The delay each way between the instances and the cluster (`--pg-delay-ms`).
    pub(crate) delay: Duration,
}

/// What a run does, the command line resolved.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    /// Keep-alive connections, dealt out to the instances round-robin.
    pub(crate) connections: usize,
    /// How long each row is measured.
    pub(crate) duration: Duration,
    /// How long each row runs unmeasured first.
    pub(crate) warmup: Duration,
    /// Tenants seeded for the scale row.
    pub(crate) scale: u64,
    /// Tenants present for the read rows.
    pub(crate) base: u64,
    /// Monthly budgets passing one boundary together.
    pub(crate) boundary_budgets: u64,
    /// libfaketime, for the boundary row's server.
    pub(crate) faketime: PathBuf,
    /// Whether any failed request fails the run (exit 1).
    pub(crate) smoke: bool,
    /// The tenantd binary to start.
    pub(crate) server: PathBuf,
    /// Where the servers' log is appended, if it is kept.
    pub(crate) server_log: Option<PathBuf>,
    /// The one group of rows to run, or all of them.
    pub(crate) only: Option<Group>,
    /// The PostgreSQL cluster to serve from, or SQLite.
    pub(crate) postgres: Option<Postgres>,
    /// tenantd processes on the one database.
    pub(crate) instances: usize,
    /// Each instance's `--pg-writers`, where the run sets it.
    pub(crate) pg_writers: Option<u64>,
    /// Each instance's `--workers`, where the run sets it.
    pub(crate) workers: Option<u64>,
    /// How the spending rows' connections are dealt out to the instances.
    pub(crate) route: Route,
}

impl Args {
    /// The arguments of this process; prints the help, or an error and exits 2, as clap does.
    pub(crate) fn parse() -> Self {
        let matches = Cli::command().get_matches();
        let resolved = Cli::from_arg_matches(&matches)
            .map_err(|e| e.to_string())
            .and_then(|cli| Self::resolve(cli, &matches));
        resolved.unwrap_or_else(|message| {
            Cli::command()
                .error(ErrorKind::ArgumentConflict, message)
                .exit()
        })
    }

    /// The presets applied where they come later than the flags they name, and the flags
    /// checked against one another.
    fn resolve(cli: Cli, matches: &ArgMatches) -> Result<Self, String> {
        let quick = ("quick", cli.quick);
        let smoke = ("smoke", cli.smoke);
        let connections = latest(
            matches,
            CONNECTIONS_DEFAULT,
            [
                ("connections", cli.connections),
                on(smoke, SMOKE_CONNECTIONS),
            ],
        );
        let duration = latest(
            matches,
            DURATION_DEFAULT,
            [
                ("duration_s", cli.duration_s),
                on(quick, QUICK_DURATION),
                on(smoke, SMOKE_DURATION),
            ],
        );
        let warmup = latest(
            matches,
            WARMUP_DEFAULT,
            [("warmup_s", cli.warmup_s), on(smoke, SMOKE_WARMUP)],
        );
        let scale = latest(
            matches,
            SCALE_DEFAULT,
            [
                ("scale", cli.scale),
                on(quick, QUICK_SCALE),
                on(smoke, SMOKE_SCALE),
            ],
        );
        let base = latest(
            matches,
            BASE_DEFAULT,
            [("base", cli.base), on(smoke, SMOKE_BASE)],
        );
        let boundary_budgets = latest(
            matches,
            BOUNDARY_BUDGETS_DEFAULT,
            [
                ("boundary_budgets", cli.boundary_budgets),
                on(smoke, SMOKE_BOUNDARY_BUDGETS),
            ],
        );
        if base > scale {
            return Err("--base must not exceed --scale".into());
        }
        let count = |n: u64| usize::try_from(n).expect("a bound within usize");
        let mut args = Args {
            connections: count(connections),
            duration,
            warmup,
            scale,
            base,
            boundary_budgets,
            faketime: cli.faketime,
            smoke: cli.smoke,
            server: cli.server,
            server_log: cli.server_log,
            only: cli.only,
            postgres: postgres(cli.postgres, cli.postgres_url, cli.pg_delay_ms)?,
            instances: count(cli.instances.unwrap_or(INSTANCES_DEFAULT)),
            pg_writers: cli.pg_writers,
            workers: cli.workers,
            route: cli.route.unwrap_or(Route::RoundRobin),
        };
        if args.pg_writers.is_some() && args.postgres.is_none() {
            return Err("--pg-writers needs --postgres: SQLite has one writer".into());
        }
        if args.pg_writers.is_none() && args.instances > 1 {
            args.pg_writers = Some(1);
        }
        if args.workers.is_none() && args.instances > 1 {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            args.workers = Some(u64::try_from((cores / args.instances).max(1)).unwrap_or(1));
        }
        if args.instances > 1 && args.postgres.is_none() {
            return Err(
                "--instances above 1 needs --postgres: a SQLite file has one server".into(),
            );
        }
        if args.route == Route::Tenant && args.instances == 1 {
            return Err(
                "--route tenant needs --instances above 1: one instance has every tenant".into(),
            );
        }
        if args.connections < args.instances {
            return Err(
                "--connections must be at least --instances, so every instance has one".into(),
            );
        }
        Ok(args)
    }
}

/// The PostgreSQL cluster of `--postgres` and `--postgres-url`, which come together. A URL is
/// never repeated in a message: it may hold a password.
fn postgres(
    admin: Option<String>,
    url: Option<String>,
    delay_ms: Option<f64>,
) -> Result<Option<Postgres>, String> {
    let delay = match delay_ms {
        Some(ms) if (0.0..=PG_DELAY_MS_MAX).contains(&ms) => Duration::from_secs_f64(ms / 1000.0),
        Some(ms) => {
            return Err(format!("--pg-delay-ms is 0 to {PG_DELAY_MS_MAX}, not {ms}"));
        }
        None => Duration::ZERO,
    };
    match (admin, url) {
        (Some(admin), Some(url)) => {
            database_url(&url, "x")
                .ok_or("--postgres-url must name a database: postgres://…/NAME")?;
            Ok(Some(Postgres { admin, url, delay }))
        }
        (None, None) if delay_ms.is_some() => {
            Err("--pg-delay-ms needs --postgres (a delay in front of PostgreSQL)".into())
        }
        (None, None) => Ok(None),
        (Some(_), None) => Err("--postgres needs --postgres-url (tenantd's URL)".into()),
        (None, Some(_)) => Err("--postgres-url needs --postgres (a superuser's URL)".into()),
    }
}

/// A preset's value for a flag it names, when the preset was given.
fn on<T>((id, given): (&'static str, bool), value: T) -> (&'static str, Option<T>) {
    (id, given.then_some(value))
}

/// Of the flag and the presets in `given` (each by clap's id, with its value if it was
/// given), the value of the one latest on the command line; `default` when none was.
fn latest<T, const N: usize>(
    matches: &ArgMatches,
    default: T,
    given: [(&'static str, Option<T>); N],
) -> T {
    given
        .into_iter()
        .filter_map(|(id, value)| Some((position(matches, id)?, value?)))
        .max_by_key(|(at, _)| *at)
        .map_or(default, |(_, value)| value)
}

/// Where on the command line the argument `id` was last given, if it was.
fn position(matches: &ArgMatches, id: &str) -> Option<usize> {
    if matches.value_source(id) != Some(ValueSource::CommandLine) {
        return None;
    }
    matches.indices_of(id)?.next_back()
}

/// A number of seconds above 0 and at most [`PHASE_S_MAX`], as `--duration-s` and
/// `--warmup-s` take it.
fn seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= PHASE_S_MAX)
        .map(Duration::from_secs_f64)
        .ok_or(format!(
            "not a number of seconds above 0 and at most {PHASE_S_MAX}"
        ))
}
