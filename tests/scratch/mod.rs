//! A scratch PostgreSQL database: a database of its own on a test cluster, owned by the
//! unprivileged role `tenantd`, empty, and dropped (`WITH (FORCE)`) when the value is dropped.
//! This is the one way the unit tests (`src/store/postgres/`), the black-box tests
//! (`tests/api/`) and the load generator (`benches/load/`) make one.
//!
//! Those are three crates, and each compiles this file in with `#[path]`, as the black-box
//! tests and the load generator do with `tests/wire/`. The library does not export it: it is
//! test equipment, which the library that ships has no use for, and it needs nothing of the
//! library's. So it uses `std` and `psql` only; `psql` may run from any thread, also from
//! inside an async runtime (the load generator's), where the library's blocking connection
//! could not. `psql` comes with the cluster (Debian's `postgresql-client`).
//!
//! URLs hold the cluster's passwords: they go to `psql` as arguments, never into an error or
//! a panic message.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The variable that holds the superuser's URL on the test cluster (database `postgres`), as
/// scripts/with-postgres.sh and `make postgres-up` export it.
pub const ADMIN_URL_VAR: &str = "TENANTD_TEST_POSTGRES_ADMIN_URL";

/// The variable that holds the URL of the unprivileged role tenantd runs as (database
/// `tenantd`), as scripts/with-postgres.sh and `make postgres-up` export it.
pub const URL_VAR: &str = "TENANTD_TEST_POSTGRES_URL";

/// How long `psql` may take to connect and run one statement.
pub const PSQL_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a running `psql` is looked at until it ends.
const PSQL_POLL: Duration = Duration::from_millis(10);

/// Tells the databases of one process apart; with the process id, tells them apart from
/// those of other processes and runs.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A database of its own on a PostgreSQL cluster, dropped when this value is.
pub struct Scratch {
    /// `tenantd_<tag>_<pid>_<n>`: unique among parallel tests and successive runs.
    pub name: String,
    /// The database's URL for the role `tenantd`, which owns nothing else.
    pub url: String,
    /// The superuser's URL, which creates and drops the database.
    admin_url: String,
}

impl Scratch {
    /// A database on the test cluster whose URLs the environment holds ([`ADMIN_URL_VAR`],
    /// [`URL_VAR`]); `tag` says whose it is. Panics with what to do when they are not set,
    /// and with psql's error when the database cannot be made: for tests.
    pub fn from_env(tag: &str) -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.is_empty())
                .unwrap_or_else(|| {
                    panic!(
                        "{name} is not set: the PostgreSQL tests run beside the private \
                         cluster of scripts/with-postgres.sh, as in `make test` or \
                         `scripts/with-postgres.sh cargo test` (or export what \
                         `make postgres-up` prints)"
                    )
                })
        };
        Self::create(&var(ADMIN_URL_VAR), &var(URL_VAR), tag)
            .unwrap_or_else(|e| panic!("a scratch database: {e}"))
    }

    /// A database on the cluster of the superuser's `admin_url`, reached by tenantd at `url`
    /// with its database name replaced; `tag` says whose it is.
    pub fn create(admin_url: &str, url: &str, tag: &str) -> Result<Self, String> {
        let name = format!(
            "tenantd_{tag}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let url = database_url(url, &name)
            .ok_or("tenantd's URL names no database (postgres://USER:PASS@HOST:PORT/DB)")?;
        // A run killed before its drops ran may have left one of this name (a reused pid).
        psql(
            admin_url,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )?;
        psql(admin_url, &format!("CREATE DATABASE {name} OWNER tenantd"))?;
        Ok(Self {
            name,
            url,
            admin_url: admin_url.to_owned(),
        })
    }

    /// The superuser's URL on the database's cluster.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = psql(&self.admin_url, &drop) {
            eprintln!("the scratch database {} is left over: {e}", self.name);
        }
    }
}

/// `url` naming database `name` instead of its own (a `?query` after it is kept); `None`
/// when `url` names none (`postgres://user:password@host:port/database`).
pub fn database_url(url: &str, name: &str) -> Option<String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://")? + 3;
    let slash = authority + base[authority..].find('/')?;
    Some(format!("{}/{name}{query}", &base[..slash]))
}

/// Runs one statement through `psql` on `url` and returns what it printed (unaligned, tuples
/// only, trimmed), within [`PSQL_TIMEOUT`]. The URL is an argument, never printed: an error
/// carries the statement and psql's message.
pub fn psql(url: &str, sql: &str) -> Result<String, String> {
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
        std::thread::sleep(PSQL_POLL);
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
