//! PostgreSQL for the tests: which backend a [`TestApp`](super::TestApp) runs on, a database
//! of its own on the private test cluster (scripts/with-postgres.sh), and `psql`.
//!
//! URLs hold the cluster's passwords: they go to `psql` and `tenantd` as arguments, never
//! into a panic or an assertion message.

use std::process::Command;

/// A database of its own on the test cluster, owned by the unprivileged role `tenantd`,
/// empty, dropped (`WITH (FORCE)`) when this value is dropped: the one scratch database of
/// `tests/scratch/`, named `tenantd_t_<pid>_<n>` here.
pub use crate::scratch::Scratch as TestDb;

/// The variable that chooses the backend of every [`TestApp`](super::TestApp).
pub const BACKEND_VAR: &str = "TENANTD_TEST_BACKEND";

/// Which store the servers under test run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in the app's temporary directory (the default).
    Sqlite,
    /// A fresh database of its own on the test cluster.
    Postgres,
}

impl Backend {
    /// `TENANTD_TEST_BACKEND`: unset (or empty) or `sqlite`, or `postgres`; anything else
    /// panics, so a typo never runs the suite on the wrong backend.
    pub fn from_env() -> Self {
        match std::env::var(BACKEND_VAR) {
            Err(std::env::VarError::NotPresent) => Self::Sqlite,
            Ok(value) => match value.as_str() {
                "" | "sqlite" => Self::Sqlite,
                "postgres" => Self::Postgres,
                other => panic!("{BACKEND_VAR}={other:?}: expected `sqlite` or `postgres`"),
            },
            Err(e) => panic!("{BACKEND_VAR}: {e}"),
        }
    }
}

impl TestDb {
    /// Creates the database; panics with what to do when the cluster's URLs are not set.
    pub fn new() -> Self {
        Self::from_env("t")
    }

    /// Runs `sql` as the role tenantd runs as, and returns what it printed (unaligned).
    pub fn psql(&self, sql: &str) -> String {
        psql(&self.url, sql)
    }
}

/// Runs `sql` on the database at `url` and returns what it printed (unaligned, tuples only,
/// trimmed); panics with psql's error.
pub fn psql(url: &str, sql: &str) -> String {
    String::from_utf8_lossy(&psql_raw(url, &["-qAt", "-c", sql], sql))
        .trim()
        .to_owned()
}

/// [`psql`] without waiting for the audit rows to be chained first: for a test that looks at
/// the rows still pending.
pub fn psql_at_once(url: &str, sql: &str) -> String {
    String::from_utf8_lossy(&psql_checked(url, &["-qAt", "-c", sql], sql))
        .trim()
        .to_owned()
}

/// Runs a statement that changes rows and returns how many it changed (its command tag);
/// `Err` with psql's error when the server refuses it.
pub fn psql_execute(url: &str, sql: &str) -> Result<usize, String> {
    // The wait's own tag (`DO`) comes first; the statement's is the last word.
    let out = psql_command(url, &["-c", WAIT_CHAINED, "-c", sql])
        .output()
        .expect("psql runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    let tag = String::from_utf8_lossy(&out.stdout);
    Ok(tag
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}

/// The rows of a query, each column as text (as `COPY … TO STDOUT` writes it: numbers in
/// decimal, `bytea` as `\x` and hex), `None` for NULL.
pub fn psql_rows(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let copy = format!("COPY ({sql}) TO STDOUT");
    let out = psql_raw(url, &["-q", "-c", &copy], sql);
    let text = String::from_utf8(out).expect("psql prints UTF-8");
    text.lines()
        .map(|line| line.split('\t').map(copy_field).collect())
        .collect()
}

/// One field of `COPY`'s text format: `\N` is NULL; backslash escapes are undone.
fn copy_field(field: &str) -> Option<String> {
    if field == "\\N" {
        return None;
    }
    let mut text = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            text.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => text.push('\n'),
            Some('r') => text.push('\r'),
            Some('t') => text.push('\t'),
            Some('b') => text.push('\u{8}'),
            Some('f') => text.push('\u{c}'),
            Some('v') => text.push('\u{b}'),
            Some(other) => text.push(other),
            None => text.push('\\'),
        }
    }
    Some(text)
}

/// The rows of every table of the database at `url` as `pg_dump --data-only` writes them.
pub fn pg_dump(url: &str) -> Vec<u8> {
    let out = Command::new("pg_dump")
        .args(["--data-only", "--no-owner", "--dbname", url])
        .output()
        .expect("pg_dump runs");
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// psql on `url` with the caller's arguments: no `.psqlrc`, stop at the first error.
fn psql_command(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("psql");
    cmd.args([url, "-X", "-v", "ON_ERROR_STOP=1"]).args(args);
    cmd
}

/// Waits, at most 5 s (the contract's second, with room for a loaded machine), until no
/// audit row waits in `audit_pending` for its place in the chain, so that a test reads the
/// chain its changes made, as it would on SQLite. Whatever is pending then stays so: the
/// caller's checks see it. Nothing to wait for where no server made the schema yet. Sent
/// ahead of a test's statement in the same psql, which runs it in a session of its own.
const WAIT_CHAINED: &str = "DO $$ BEGIN \
    FOR i IN 1..250 LOOP \
        EXIT WHEN NOT EXISTS (SELECT 1 FROM audit_pending); \
        PERFORM pg_sleep(0.02); \
    END LOOP; \
    EXCEPTION WHEN undefined_table THEN NULL; \
END $$";

/// Runs psql and returns its stdout, once the changes made are chained ([`WAIT_CHAINED`]);
/// panics with `sql` and psql's error.
fn psql_raw(url: &str, args: &[&str], sql: &str) -> Vec<u8> {
    psql_checked(url, &[&["-q", "-c", WAIT_CHAINED][..], args].concat(), sql)
}

/// Runs psql with `args` and returns its stdout; panics with `sql` and psql's error.
fn psql_checked(url: &str, args: &[&str], sql: &str) -> Vec<u8> {
    let out = psql_command(url, args).output().expect("psql runs");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
