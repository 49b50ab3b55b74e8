//! PostgreSQL, the second backend: connecting (TLS as libpq's URLs say it), the schema, and
//! reading the stored rows as the SQLite backend reads them.
//!
//! Every value of the chain and of the ids is stored as the text SQLite stores; amounts are
//! `numeric(39,0)`, read back in decimal ([`Decimal`]) and written as text cast by the server,
//! never through a float or an `i64`.

pub(crate) mod blocking;
pub(super) mod copy;
#[cfg(test)]
pub(crate) mod scratch;
mod tls;
pub(crate) mod verify;
mod writer;

use std::borrow::Cow;
use std::time::Duration;

use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls};

use super::queries::Reads;
use super::rows::TextRow;
use super::write::batch;
use super::{StoreConfig, threads};

/// The schema, applied whole at every start: each statement is idempotent.
const SCHEMA: &str = include_str!("../../../schema-postgres.sql");

/// The schema version the file creates: SQLite's `user_version` when it gained the same
/// tables (SQLite's migration 4 changed nothing PostgreSQL has).
pub(crate) const SCHEMA_VERSION: i32 = 3;

/// The advisory lock that lets one of several instances starting at once create the schema
/// while the others wait ("tenantd" in ASCII).
const SCHEMA_LOCK: i64 = 0x0074_656e_616e_7464;

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

/// Applies the schema where it is missing, then starts the writer, the readers and the
/// credential thread on the database at `url`, each with a connection of its own. Runs on a
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
            let writer = writer::Writer::new(&url, config.clone())?;
            let stats = writer.stats();
            let readers = (0..=config.readers)
                .map(|_| {
                    let db = blocking::Blocking::connect_for_reads(&url)?;
                    Ok(Box::new(db) as Box<dyn Reads>)
                })
                .collect::<Result<Vec<_>, String>>()?;
            threads::start(
                &config,
                stats,
                move |queue| batch::run(writer, queue),
                readers,
                // A commit is durable when it returns: reads need not wait.
                None,
            )
            .map_err(|e| e.0)
        })
        .map_err(|e| super::OpenError(format!("cannot start a thread: {e}")))?
        .join()
        .map_err(|_| super::OpenError("opening the database panicked".into()))?
        .map_err(super::OpenError)
}

pub(crate) use super::sql::RowError;

impl TextRow for tokio_postgres::Row {
    type Error = RowError;

    fn column(&self, i: usize) -> Result<Option<Cow<'_, str>>, RowError> {
        let unreadable =
            |e: tokio_postgres::Error| RowError::Read(format!("column {i}: {}", explain(&e)));
        if *self.columns()[i].type_() == Type::NUMERIC {
            let value: Option<Decimal> = self.try_get(i).map_err(unreadable)?;
            Ok(value.map(|d| Cow::Owned(d.0)))
        } else {
            let value: Option<&str> = self.try_get(i).map_err(unreadable)?;
            Ok(value.map(Cow::Borrowed))
        }
    }

    fn blob(&self, i: usize) -> Result<Option<Cow<'_, [u8]>>, RowError> {
        let value: Option<&[u8]> = self
            .try_get(i)
            .map_err(|e| RowError::Read(format!("column {i}: {}", explain(&e))))?;
        Ok(value.map(Cow::Borrowed))
    }

    fn corrupt(&self, i: usize, what: String) -> RowError {
        RowError::Corrupt(format!("column {i}: {what}"))
    }

    fn len(&self) -> usize {
        self.columns().len()
    }
}

/// A `numeric` in decimal, from PostgreSQL's binary form: a sign, a weight and base-10000
/// digits. Anything but a whole number comes out as text no amount parser takes (a sign,
/// "not a whole number"), so it is refused where it is read, never rounded.
pub(crate) struct Decimal(pub(crate) String);

impl<'a> FromSql<'a> for Decimal {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let word = |i: usize| -> Result<u16, Box<dyn std::error::Error + Sync + Send>> {
            raw.get(2 * i..2 * i + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| "a numeric cut short".into())
        };
        let (ndigits, weight, sign, dscale) = (word(0)?, word(1)? as i16, word(2)?, word(3)?);
        let whole = i32::from(weight) + 1;
        if sign == 0xC000 || dscale > 0 || (ndigits > 0 && i32::from(ndigits) > whole) {
            return Ok(Self("not a whole number".into()));
        }
        let mut text = String::new();
        if sign == 0x4000 {
            text.push('-');
        }
        if ndigits == 0 {
            text.push('0');
            return Ok(Self(text));
        }
        // The digit groups, then the zero groups below them that the form leaves out.
        for i in 0..whole {
            let digit = if i < i32::from(ndigits) {
                word(4 + i as usize)?
            } else {
                0
            };
            if i == 0 {
                text.push_str(&digit.to_string());
            } else {
                text.push_str(&format!("{digit:04}"));
            }
        }
        Ok(Self(text))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut raw = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            raw.extend_from_slice(&w.to_be_bytes());
        }
        raw
    }

    fn decode(raw: &[u8]) -> String {
        Decimal::from_sql(&Type::NUMERIC, raw).expect("a numeric").0
    }

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

    #[test]
    fn whole_numerics_come_out_in_decimal() {
        assert_eq!(decode(&numeric(0, 0, 0, 0, &[])), "0");
        assert_eq!(decode(&numeric(1, 0, 0, 0, &[7])), "7");
        assert_eq!(decode(&numeric(2, 1, 0, 0, &[12, 34])), "120034");
        // 10^8: one digit group of weight 2, the two zero groups below it left out.
        assert_eq!(decode(&numeric(1, 2, 0, 0, &[1])), "100000000");
        let max = [340, 2823, 6692, 938, 4634, 6337, 4607, 4317, 6821, 1455];
        assert_eq!(decode(&numeric(10, 9, 0, 0, &max)), u128::MAX.to_string());
    }

    #[test]
    fn what_is_not_a_whole_number_is_no_amount() {
        for raw in [
            numeric(1, 0, 0x4000, 0, &[5]),
            numeric(0, 0, 0xC000, 0, &[]),
            numeric(1, -1, 0, 4, &[5000]),
            numeric(2, 0, 0, 4, &[1, 5000]),
        ] {
            let text = decode(&raw);
            assert!(crate::domain::Atomic::parse(&text).is_err(), "{text}");
        }
        assert!(Decimal::from_sql(&Type::NUMERIC, &[0, 1]).is_err());
    }
}
