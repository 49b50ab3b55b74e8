//! PostgreSQL, the second backend: connecting (TLS as libpq's URLs say it), the schema, and
//! the store's threads on it.
//!
//! Every value of the chain and of the ids is stored as the text SQLite stores; amounts are
//! `numeric(39,0)`, never through a float or an `i64`. The store's threads send them in
//! `numeric`'s binary form, built digit group by digit group from the integer, and read them
//! back in decimal from that form ([`codec`]); `tenantd copy` moves them as that decimal text,
//! through the same codec.

pub(crate) mod blocking;
mod chainer;
mod codec;
pub(super) mod copy;
// The one scratch database of the tests, shared with the black-box tests and the load
// generator (see the file's own doc for why it is included rather than exported).
#[cfg(test)]
#[path = "../../../tests/scratch/mod.rs"]
pub(crate) mod scratch;
mod tls;
mod writer;

#[cfg(test)]
mod known_tests;
#[cfg(test)]
mod read_ahead_tests;

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use self::chainer::Chainer;
use super::queries::reads::Reads;
use super::threads::WriterLoop;
use super::write::batch;
use super::write::stats::Stats;
use super::{StoreConfig, threads};

/// The schema, applied whole at every start: each statement is idempotent.
const SCHEMA: &str = include_str!("../../../schema-postgres.sql");

/// The schema version the file creates: 10, where SQLite's `user_version` is 12 (its migration
/// 4 changed nothing PostgreSQL has, and 7, 9 and 10 are what only PostgreSQL has: the pending
/// audit rows; the domains that check amounts, kinds and types once a connection; the chain
/// checked once a statement). SQLite's 11 (its budgets kept in the order of their tenants) and
/// 12 (the levels' entries indexed in bulk) have no counterpart here, and PostgreSQL's next
/// version takes number 13.
pub(crate) const SCHEMA_VERSION: i32 = 10;

/// The advisory lock that lets one of several instances starting at once create the schema
/// while the others wait ("tenantd" in ASCII).
const SCHEMA_LOCK: i64 = 0x0074_656e_616e_7464;

/// Credential threads of an instance, each with a connection of its own. A check is one
/// round trip to the server: one thread, with the server 1 ms away (2.5 ms a round trip),
/// checked at most 400 tenant tokens a second.
const CREDENTIAL_READERS: usize = 4;

/// How long a connection attempt may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may be silent before TCP probes it, when the URL does not say
/// (`keepalives_idle`; the driver's default is two hours): a server whose machine vanished is
/// noticed within about a minute.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);

/// The driver's own `keepalives_idle`, which the URL did not change when it is still this.
const KEEPALIVES_IDLE_DEFAULT: Duration = Duration::from_secs(2 * 60 * 60);

/// Whether `db` names a PostgreSQL database rather than a SQLite file.
pub(crate) fn is_url(db: &str) -> bool {
    let scheme = db
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    matches!(scheme.as_deref(), Some("postgres" | "postgresql"))
}

/// The URL as it may be shown: user, hosts, ports and database, never the password or the
/// other parameters.
pub(crate) fn describe(url: &str) -> String {
    let Ok((rest, _)) = tls::split_url(url) else {
        return "a PostgreSQL URL".into();
    };
    let Ok(config) = rest.parse::<tokio_postgres::Config>() else {
        return "a PostgreSQL URL".into();
    };
    // As the driver reads them: one port for every host, or one per host (5432 if none).
    let ports = config.get_ports();
    let port = |i: usize| match ports {
        [] => 5432,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(5432),
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| (host, port(i)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
        })
        .collect();
    format!(
        "postgres://{}{}/{}",
        config
            .get_user()
            .map(|u| format!("{u}@"))
            .unwrap_or_default(),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

/// Connects to the database at `url`; the connection's task runs on the current runtime.
pub(crate) async fn connect(url: &str) -> Result<Client, String> {
    let (rest, tls) = tls::split_url(url)?;
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| format!("{}: not a PostgreSQL URL: {e}", describe(url)))?;
    config.ssl_mode(tls.mode);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_keepalives_idle() == KEEPALIVES_IDLE_DEFAULT {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_application_name().is_none() {
        config.application_name("tenantd");
    }
    let failed =
        |e: tokio_postgres::Error| format!("{}: cannot connect: {}", describe(url), explain(&e));
    if tls.mode == tokio_postgres::config::SslMode::Disable {
        let (client, connection) = config.connect(NoTls).await.map_err(failed)?;
        tokio::spawn(drive(connection));
        Ok(client)
    } else {
        let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls::client_config(&tls)?);
        let (client, connection) = config.connect(connector).await.map_err(failed)?;
        tokio::spawn(drive(connection));
        Ok(client)
    }
}

/// What went wrong, all of it: the server's own message for an error it sent, else the error
/// and each of its causes (a TLS handshake names the certificate's fault only in a cause).
pub(crate) fn explain(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// Runs a connection until it ends.
async fn drive<F: Future<Output = Result<(), tokio_postgres::Error>>>(connection: F) {
    if let Err(e) = connection.await {
        log::warn!("a PostgreSQL connection ended: {e}");
    }
}

/// The schema version of the database, `None` where no tenantd schema is.
pub(crate) async fn schema_version(
    client: &impl tokio_postgres::GenericClient,
) -> Result<Option<i32>, String> {
    let found = client
        .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])
        .await
        .map_err(|e| format!("cannot read the schema: {}", explain(&e)))?;
    if !found.get::<_, bool>(0) {
        return Ok(None);
    }
    let row = client
        .query_one("SELECT max(version) FROM schema_version", &[])
        .await
        .map_err(|e| format!("cannot read the schema version: {}", explain(&e)))?;
    Ok(row.get(0))
}

/// Succeeds when the database holds a tenantd schema of this build's version, the one a
/// reader of its rows (`audit verify`, a copy's source) can read.
pub(crate) async fn expect_schema(client: &Client) -> Result<(), String> {
    match schema_version(client).await? {
        Some(SCHEMA_VERSION) => Ok(()),
        Some(other) => Err(format!(
            "the schema is at version {other}; this build reads version {SCHEMA_VERSION}"
        )),
        None => Err("no tenantd schema in this database".into()),
    }
}

/// Creates the schema, or brings it to this build's; several instances may do so at the same
/// moment (an advisory lock takes them one at a time). A database already at this build's
/// version is left alone: the script's `CREATE OR REPLACE TRIGGER`s would lock every table
/// against the writers of instances already serving, and deadlock with them. A newer schema
/// is refused.
pub(crate) async fn create_schema(client: &mut Client) -> Result<(), String> {
    let failed = |e: tokio_postgres::Error| format!("cannot create the schema: {}", explain(&e));
    let tx = client.transaction().await.map_err(failed)?;
    // The schema's `IF NOT EXISTS` would tell of every table already there.
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .await
        .map_err(failed)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(failed)?;
    match schema_version(&tx).await? {
        Some(SCHEMA_VERSION) => return tx.commit().await.map_err(failed),
        Some(newer) if newer > SCHEMA_VERSION => {
            return Err(format!(
                "the database's schema is at version {newer}, newer than this build's \
                 ({SCHEMA_VERSION}): run a newer tenantd"
            ));
        }
        _ => {}
    }
    tx.batch_execute(SCHEMA).await.map_err(failed)?;
    tx.commit().await.map_err(failed)
}

/// Applies the schema where it is missing, then starts the writers (`--pg-writers`), the
/// chainer, the readers and the credential threads on the database at `url`, each with a
/// connection of its own. Runs on a
/// thread of its own (every connection runs on a runtime of its own), so it may be called
/// from async code.
pub(super) fn open(
    url: &str,
    config: StoreConfig,
) -> Result<(threads::Store, threads::StoreThreads), super::OpenError> {
    let url = url.to_owned();
    std::thread::Builder::new()
        .name("tenantd-open".into())
        .spawn(move || {
            let mut schema = blocking::Blocking::connect(&url)?;
            schema.create_schema()?;
            drop(schema);
            let stats = Arc::new(Stats::default());
            let chainer = Arc::new(Chainer::start(
                &url,
                Arc::clone(&stats),
                config.clock.clone(),
            )?);
            let first_swept = Arc::new(writer::FirstSwept::default());
            let mut ids = None;
            let mut writers: Vec<WriterLoop> = Vec::with_capacity(config.pg_writers);
            for _ in 0..config.pg_writers {
                let (writer, shared) = writer::Writer::new(
                    &url,
                    config.clone(),
                    Arc::clone(&stats),
                    Arc::clone(&chainer),
                    Arc::clone(&first_swept),
                    ids.take(),
                )?;
                ids = Some(shared);
                writers.push(Box::new(move |queue: &_| batch::run(writer, queue)));
            }
            drop(chainer);
            let readers = |n: usize| {
                (0..n)
                    .map(|_| {
                        let db = blocking::Blocking::connect_for_reads(&url)?;
                        Ok(Box::new(db) as Box<dyn Reads>)
                    })
                    .collect::<Result<Vec<_>, String>>()
            };
            threads::start(
                &config,
                stats,
                writers,
                readers(config.readers)?,
                readers(CREDENTIAL_READERS)?,
                // A commit is durable when it returns: reads need not wait.
                None,
                // Writers of other connections and instances may hold a write's rows.
                true,
            )
            .map_err(|e| e.0)
        })
        .map_err(|e| super::OpenError(format!("cannot start a thread: {e}")))?
        .join()
        .map_err(|_| super::OpenError("opening the database panicked".into()))?
        .map_err(super::OpenError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password_or_parameters() {
        for (url, shown) in [
            ("postgres://u:secret@h/db", "postgres://u@h:5432/db"),
            (
                "postgresql://u:secret@h:6000/db?sslmode=require",
                "postgres://u@h:6000/db",
            ),
            (
                "postgres://u:secret@a,b:6000/db",
                "postgres://u@a:5432,b:6000/db",
            ),
            (
                "postgres://u:secret@a:6000,b:6001/db",
                "postgres://u@a:6000,b:6001/db",
            ),
        ] {
            assert_eq!(describe(url), shown, "{url}");
        }
        assert!(is_url("Postgres://h/db") && is_url("postgresql://h/db"));
        assert!(!is_url("./postgres.db") && !is_url("host=h password=secret"));
    }
}
