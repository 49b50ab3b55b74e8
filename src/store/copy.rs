//! `tenantd copy --from SRC --to DST`: a whole database moved between the backends (SQLite
//! file or PostgreSQL URL, either way, or the same kind on both sides).
//!
//! The source is read in one snapshot and never written; the target must be empty, and is
//! written in one transaction, so a copy that fails leaves nothing half-made (a SQLite target
//! is written under a temporary name and linked to its own only once it checks out). Every
//! table is copied as stored, row by row in key order, the idempotency records included (so a
//! keyed retry still replays across a move). While it copies, a digest is taken of each
//! table's rows as read; before the commit the target is read back in its own transaction,
//! its digests must be the same, and its chain must verify and end at the source's head. A
//! source that does not verify is therefore never copied.
//!
//! All of that is written once, over the SQL seam ([`Sql`]): each table of the source is
//! streamed ([`Sql::for_each_row`]) and written into the target a chunk at a time, in the SQL
//! both backends speak. What differs is handed in by [`super::copy()`], which picks the
//! backends: each side opened by its backend (a file or a URL, the snapshot or the transaction
//! begun, the target's schema made), and the target's commit (a file is also closed and given
//! its name).

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::StoreError;
use super::queries::levels;
use super::sql::{Param, Row, RowError, Sql, text};
use super::verify;
use super::write::chain;
use crate::audit::Head;

/// Rows written at a time, in one statement.
const CHUNK_ROWS: usize = 1000;

/// How often progress is shown while a table is copied.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How a column's value is kept: the same on both backends but for amounts, which are text in
/// SQLite and `numeric(39,0)` in PostgreSQL (copied through their decimal text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    Amount,
    Bytes,
}

/// A table and its columns, the key (the leading `key` columns) first.
struct Table {
    name: &'static str,
    key: usize,
    columns: &'static [(&'static str, Kind)],
}

use Kind::{Amount, Bytes, Integer, Text};

/// Every table, in the order they are written. The chain comes first: each event must follow
/// the one before it, which the schema's trigger checks as the rows go in.
const TABLES: &[Table] = &[
    Table {
        name: "audit_events",
        key: 1,
        columns: &[
            ("seq", Integer),
            ("occurred_at", Text),
            ("actor", Text),
            ("action", Text),
            ("tenant_id", Text),
            ("payload", Text),
            ("prev_hash", Text),
            ("hash", Text),
        ],
    },
    Table {
        name: "tenants",
        key: 1,
        columns: &[
            ("id", Text),
            ("name", Text),
            ("state", Text),
            ("opening_deposit_atomic", Amount),
            ("token_hash", Bytes),
            ("created_at", Text),
            ("tombstoned_at", Text),
        ],
    },
    Table {
        name: "budgets",
        key: 1,
        columns: &[
            ("id", Text),
            ("tenant_id", Text),
            ("name", Text),
            ("unit", Text),
            ("state", Text),
            ("created_at", Text),
            ("closed_at", Text),
            ("opening_deposit_atomic", Amount),
            ("credited_atomic", Amount),
            ("debited_atomic", Amount),
            ("spent_atomic", Amount),
            ("reserved_atomic", Amount),
            ("parent_id", Text),
        ],
    },
    Table {
        name: "budget_renewals",
        key: 1,
        columns: &[
            ("budget_id", Text),
            ("period_interval", Text),
            ("period_time_zone", Text),
            ("period_every_seconds", Integer),
            ("period_allowance_atomic", Amount),
            ("period_rollover_max_atomic", Amount),
            ("period_anchor", Text),
            ("period_id", Text),
            ("period_started_at", Text),
            ("period_ends_at", Text),
            ("alert_thresholds", Text),
        ],
    },
    Table {
        name: "periods",
        key: 1,
        columns: &[
            ("id", Text),
            ("budget_id", Text),
            ("state", Text),
            ("started_at", Text),
            ("ends_at", Text),
            ("allowance_atomic", Amount),
            ("carried_in_atomic", Amount),
            ("opening_available_atomic", Amount),
            ("start_credited_atomic", Amount),
            ("start_debited_atomic", Amount),
            ("start_spent_atomic", Amount),
            ("credited_atomic", Amount),
            ("debited_atomic", Amount),
            ("spent_atomic", Amount),
            ("forfeited_atomic", Amount),
            ("carried_out_atomic", Amount),
            ("closing_available_atomic", Amount),
        ],
    },
    Table {
        name: "reservations",
        key: 1,
        columns: &[
            ("id", Text),
            ("tenant_id", Text),
            ("budget_id", Text),
            ("state", Text),
            ("amount_atomic", Amount),
            ("committed_atomic", Amount),
            ("memo", Text),
            ("created_at", Text),
            ("expires_at", Text),
            ("settled_at", Text),
        ],
    },
    Table {
        name: "ledger_entries",
        key: 1,
        columns: &[
            ("id", Text),
            ("budget_id", Text),
            ("kind", Text),
            ("amount_atomic", Amount),
            ("reservation_id", Text),
            ("memo", Text),
            ("occurred_at", Text),
            ("balance_atomic", Amount),
            ("available_atomic", Amount),
            ("period_id", Text),
            ("via_budget_id", Text),
        ],
    },
    Table {
        name: "idempotency_keys",
        key: 2,
        columns: &[
            ("principal", Text),
            ("key", Text),
            ("method", Text),
            ("path", Text),
            ("fingerprint", Bytes),
            ("status", Integer),
            ("location", Text),
            ("response_body", Text),
            ("created_ms", Integer),
        ],
    },
    Table {
        name: "events",
        key: 1,
        columns: &[
            ("id", Text),
            ("type", Text),
            ("created_at", Text),
            ("tenant_id", Text),
            ("data", Text),
        ],
    },
    Table {
        name: "webhook_endpoints",
        key: 1,
        columns: &[
            ("id", Text),
            ("url", Text),
            ("description", Text),
            ("event_types", Text),
            ("tenant_id", Text),
            ("state", Text),
            ("disabled_reason", Text),
            ("created_at", Text),
            ("secret", Bytes),
            ("previous_secret", Bytes),
            ("previous_until", Text),
            ("failures", Integer),
            ("lease_owner", Text),
            ("lease_until", Text),
        ],
    },
    Table {
        name: "webhook_deliveries",
        key: 1,
        columns: &[
            ("id", Text),
            ("endpoint_id", Text),
            ("event_id", Text),
            ("event_type", Text),
            ("state", Text),
            ("attempts", Integer),
            ("last_attempt_at", Text),
            ("last_status", Integer),
            ("last_error", Text),
            ("next_attempt_at", Text),
            ("succeeded_at", Text),
            ("retry_once", Integer),
        ],
    },
];

/// One stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Null,
    Text(String),
    Integer(i64),
    Bytes(Vec<u8>),
}

impl Value {
    /// The value as a statement's parameter: an amount goes as its decimal text, which
    /// PostgreSQL's `numeric` columns take as the number.
    fn param(&self) -> Param<'_> {
        match self {
            Value::Null => Param::Null,
            Value::Text(text) => Param::Text(text),
            Value::Integer(n) => Param::Int(*n),
            Value::Bytes(bytes) => Param::Bytes(bytes),
        }
    }
}

/// A row: its values in the table's column order.
type Values = Vec<Value>;

/// Adds a row to a table's digest: each value tagged with its kind and length, so that no two
/// different rows feed the same bytes.
fn digest_row(digest: &mut Sha256, row: &Values) {
    for value in row {
        let (tag, bytes): (u8, &[u8]) = match value {
            Value::Null => (0, &[]),
            Value::Text(text) => (1, text.as_bytes()),
            Value::Integer(n) => {
                digest.update([2]);
                digest.update(n.to_be_bytes());
                continue;
            }
            Value::Bytes(bytes) => (3, bytes),
        };
        digest.update([tag]);
        digest.update((bytes.len() as u64).to_be_bytes());
        digest.update(bytes);
    }
}

/// One side of a copy: its connection, opened by its backend (the source in its snapshot, the
/// target in its transaction), and its database as messages name it.
pub(crate) struct Side<D> {
    /// The connection.
    pub(crate) db: D,
    /// A file's path, or a URL without its password.
    pub(crate) name: String,
}

/// What a finished copy holds.
#[derive(Debug)]
pub(crate) struct Copied {
    /// Rows per table, in [`TABLES`] order.
    pub(crate) rows: Vec<(&'static str, u64)>,
    /// The chain's head, the same in the source and the copy.
    pub(crate) head: Head,
    /// The digest of every table's rows, the same in the source and the copy.
    pub(crate) digest: String,
}

/// Copies every table of `source` into the empty `target`, reporting progress through
/// `progress`, reads the target back and checks it, and only then has `commit` commit it.
pub(crate) fn run<S: Sql, T: Sql>(
    mut source: Side<S>,
    mut target: Side<T>,
    commit: impl FnOnce(&mut T) -> Result<(), String>,
    mut progress: impl FnMut(&str),
) -> Result<Copied, String> {
    for table in TABLES {
        let held = count(&mut target, table)?;
        if held > 0 {
            return Err(format!(
                "the target is not empty: its {} holds {held} rows; copy writes only into an \
                 empty database",
                table.name
            ));
        }
    }
    let mut counts = Vec::with_capacity(TABLES.len());
    let mut digests = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let (done, digest) = read_table(&mut source, table, &mut progress, |rows| {
            insert(&mut target, table, rows)
        })?;
        progress(&format!("{}: {done} rows", table.name));
        counts.push((table.name, done));
        digests.push(digest);
    }
    // The checks read the target inside its own transaction: nothing is committed (or, for a
    // file, given its name) before they pass.
    progress("reading the copy back");
    for (table, expected) in TABLES.iter().zip(&digests) {
        if read_table(&mut target, table, &mut progress, |_| Ok(()))?.1 != *expected {
            return Err(format!(
                "the copy's {} differs from the source's; nothing was kept",
                table.name
            ));
        }
    }
    if !T::SHARED {
        // SQLite's index of the levels' entries, made as the writer's sweep makes it, and
        // checked with the rest.
        progress("indexing the levels' entries");
        levels::sweep(&mut target.db).map_err(|e| format!("{}: {e}", target.name))?;
    }
    progress("verifying the copy's audit chain");
    let head = verify::verify_in_transaction(&mut target.db)
        .map_err(|e| format!("{}: {e}; nothing was kept", target.name))?;
    let source_head =
        chain::load_head(&mut source.db).map_err(|e| format!("{}: {e}", source.name))?;
    if head != source_head {
        return Err(format!(
            "the copy's chain ends at {} (seq {}), the source's at {} (seq {}); nothing was kept",
            head.hash, head.seq, source_head.hash, source_head.seq
        ));
    }
    commit(&mut target.db)?;
    progress("committed");
    let mut all = Sha256::new();
    for digest in &digests {
        all.update(digest);
    }
    Ok(Copied {
        rows: counts,
        head,
        digest: crate::crypto::hex(&all.finalize()),
    })
}

/// The rows `table` holds on `side`.
fn count(side: &mut Side<impl Sql>, table: &Table) -> Result<u64, String> {
    let failed = |e: StoreError| format!("{}: {}: {e}", side.name, table.name);
    let sql = format!("SELECT CAST(count(*) AS TEXT) FROM {}", table.name);
    let counted = side.db.query_opt(&sql, &[], |row| {
        let n = text(row, 0)?;
        n.parse()
            .map_err(|_| row.corrupt(0, format!("a bad count {n:?}")))
    });
    counted
        .map_err(failed)?
        .ok_or_else(|| failed(StoreError::Internal("a count without a row".into())))
}

/// Why the rows of a table stopped coming.
enum Stop {
    /// The side's rows could not be read.
    Read(StoreError),
    /// The rows could not be handed on: the message names the database that refused them.
    HandedOn(String),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Self::Read(e)
    }
}

/// Streams every row of `table` on `side` in key order into a digest, handing the rows to
/// `sink` [`CHUNK_ROWS`] at a time; its row count and digest. `progress` hears of long tables.
fn read_table(
    side: &mut Side<impl Sql>,
    table: &Table,
    progress: &mut impl FnMut(&str),
    mut sink: impl FnMut(&[Values]) -> Result<(), String>,
) -> Result<(u64, [u8; 32]), String> {
    let total = count(side, table)?;
    let mut digest = Sha256::new();
    let mut chunk: Vec<Values> = Vec::with_capacity(CHUNK_ROWS);
    let mut done: u64 = 0;
    let mut shown = Instant::now();
    let mut hand_on = |chunk: &mut Vec<Values>| {
        sink(chunk)?;
        done += chunk.len() as u64;
        chunk.clear();
        if shown.elapsed() >= PROGRESS_INTERVAL {
            progress(&format!("{}: {done} of {total} rows", table.name));
            shown = Instant::now();
        }
        Ok::<(), String>(())
    };
    let read = side.db.for_each_row(&select(table), &[], |row| {
        let values = values(table, row).map_err(StoreError::from)?;
        digest_row(&mut digest, &values);
        chunk.push(values);
        if chunk.len() == CHUNK_ROWS {
            hand_on(&mut chunk).map_err(Stop::HandedOn)?;
        }
        Ok(())
    });
    match read {
        Ok(()) => hand_on(&mut chunk)?,
        Err(Stop::Read(e)) => return Err(format!("{}: {}: {e}", side.name, table.name)),
        Err(Stop::HandedOn(e)) => return Err(e),
    }
    Ok((done, digest.finalize().into()))
}

/// The query that reads every row of `table` in key order. Integers are read as text, as
/// every other value but bytes (each backend hands amounts over in decimal); the `ORDER BY`
/// names the table's columns, not the text of the same name.
fn select(table: &Table) -> String {
    let columns: Vec<String> = table
        .columns
        .iter()
        .map(|(name, kind)| match kind {
            Kind::Integer => format!("CAST({name} AS TEXT)"),
            Kind::Text | Kind::Amount | Kind::Bytes => (*name).to_owned(),
        })
        .collect();
    let key: Vec<String> = table.columns[..table.key]
        .iter()
        .map(|(name, _)| format!("{}.{name}", table.name))
        .collect();
    format!(
        "SELECT {} FROM {} ORDER BY {}",
        columns.join(", "),
        table.name,
        key.join(", ")
    )
}

/// The values of a row of [`select`].
fn values(table: &Table, row: &Row<'_>) -> Result<Values, RowError> {
    let mut values = Vec::with_capacity(table.columns.len());
    for (i, (_, kind)) in table.columns.iter().enumerate() {
        let value = match kind {
            Kind::Text | Kind::Amount => row.column(i)?.map(|text| Value::Text(text.into_owned())),
            Kind::Integer => match row.column(i)? {
                Some(n) => {
                    Some(Value::Integer(n.parse().map_err(|_| {
                        row.corrupt(i, format!("not an integer: {n:?}"))
                    })?))
                }
                None => None,
            },
            Kind::Bytes => row.blob(i)?.map(|bytes| Value::Bytes(bytes.into_owned())),
        };
        values.push(value.unwrap_or(Value::Null));
    }
    Ok(values)
}

/// Writes `rows` into `table` on `side` with one statement.
fn insert(side: &mut Side<impl Sql>, table: &Table, rows: &[Values]) -> Result<(), String> {
    if rows.is_empty() {
        return Ok(());
    }
    let width = table.columns.len();
    let tuples: Vec<String> = (0..rows.len())
        .map(|r| {
            let marks: Vec<String> = (1..=width).map(|i| format!("?{}", r * width + i)).collect();
            format!("({})", marks.join(", "))
        })
        .collect();
    let names: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        table.name,
        names.join(", "),
        tuples.join(", ")
    );
    let params: Vec<Param<'_>> = rows.iter().flatten().map(Value::param).collect();
    side.db
        .execute(&sql, &params)
        .map(drop)
        .map_err(|e| format!("{}: {}: {e}", side.name, table.name))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A SQLite database in memory at this build's schema, seen through the seam alone.
    fn sqlite() -> impl Sql {
        crate::store::in_memory_for_tests()
    }

    #[test]
    fn rows_that_differ_never_digest_alike() {
        let digest = |rows: &[Values]| {
            let mut d = Sha256::new();
            for row in rows {
                digest_row(&mut d, row);
            }
            <[u8; 32]>::from(d.finalize())
        };
        let text = |s: &str| Value::Text(s.into());
        let pairs = [
            (
                vec![vec![text("ab"), text("c")]],
                vec![vec![text("a"), text("bc")]],
            ),
            (vec![vec![Value::Null]], vec![vec![text("")]]),
            (vec![vec![Value::Integer(1)]], vec![vec![text("1")]]),
            (
                vec![vec![Value::Bytes(b"x".to_vec())]],
                vec![vec![text("x")]],
            ),
        ];
        for (a, b) in pairs {
            assert_ne!(digest(&a), digest(&b), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn every_table_has_its_key_first() {
        for table in TABLES {
            assert!(
                table.key >= 1 && table.key <= table.columns.len(),
                "{}",
                table.name
            );
        }
    }

    /// The parameters one statement may take on both backends: SQLite's default bound
    /// (`SQLITE_MAX_VARIABLE_NUMBER`); PostgreSQL's, counted in 16 bits, is 65,535.
    const STATEMENT_PARAMS_MAX: usize = 32_766;

    /// A chunk goes into the target as one statement, whose parameters both backends bound.
    #[test]
    fn a_chunk_fits_in_one_statement() {
        for table in TABLES {
            assert!(
                table.columns.len() * CHUNK_ROWS <= STATEMENT_PARAMS_MAX,
                "{}",
                table.name
            );
        }
    }

    /// The tables of PostgreSQL's schema that are not copied: the schema's version, the
    /// chain's lock row, which `create_schema` makes in every PostgreSQL database, and the
    /// audit rows waiting for their place in the chain (a copy's source has none: it waits
    /// for them to be chained). SQLite has no need of them (its version is `PRAGMA
    /// user_version`; its writer is the only one, and chains as it writes).
    const POSTGRES_ONLY: [&str; 3] = ["schema_version", "chain_head", "audit_pending"];

    /// SQLite's tables that are not copied: the index of the levels' entries and its mark,
    /// which a copy into a file makes again from the entries ([`crate::store::queries::levels`]).
    const SQLITE_ONLY: [&str; 2] = ["ledger_levels", "ledger_levels_swept"];

    /// The tables `schema` creates, read from its text: the name after each `CREATE TABLE`.
    /// A schema that drops or renames a table is refused: its text alone does not say what is
    /// left.
    fn created_tables(schema: &str) -> BTreeSet<String> {
        let code = schema
            .lines()
            .map(|line| line.split("--").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_lowercase();
        assert!(
            !code.contains("drop table") && !code.contains("rename to"),
            "the schema drops or renames a table: read the tables of a database it made"
        );
        let words: Vec<&str> = code
            .split(|c: char| c.is_whitespace() || "(),;".contains(c))
            .filter(|word| !word.is_empty())
            .collect();
        let mut tables = BTreeSet::new();
        for (i, pair) in words.windows(2).enumerate() {
            if pair == ["create", "table"] {
                match &words[i + 2..] {
                    ["if", "not", "exists", name, ..] | [name, ..] => {
                        tables.insert((*name).to_owned());
                    }
                    [] => panic!("a CREATE TABLE without a name"),
                }
            }
        }
        tables
    }

    /// Every table the schemas leave is copied, but PostgreSQL's bookkeeping
    /// ([`POSTGRES_ONLY`]) and SQLite's derived index ([`SQLITE_ONLY`]). SQLite's are read
    /// from a database its migrations made, as the last one leaves them (migrations 2 and 4
    /// rebuild tables under new names, then rename them); PostgreSQL's from the `CREATE
    /// TABLE`s of its one script.
    #[test]
    fn copy_moves_every_table_of_both_schemas() {
        let copied: BTreeSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
        let mut db = sqlite();
        let sqlite: BTreeSet<String> = db
            .query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                &[],
                |row| Ok(text(row, 0)?.into_owned()),
            )
            .expect("the tables of schema.sql")
            .into_iter()
            .filter(|table| !SQLITE_ONLY.contains(&table.as_str()))
            .collect();
        assert_eq!(sqlite, copied, "the tables of schema.sql");

        let mut postgres = created_tables(include_str!("../../schema-postgres.sql"));
        for table in POSTGRES_ONLY {
            assert!(postgres.remove(table), "{table} is in schema-postgres.sql");
        }
        assert_eq!(postgres, copied, "the tables of schema-postgres.sql");
    }

    #[test]
    fn a_schema_is_read_for_its_tables() {
        let schema = "-- CREATE TABLE commented (x)\n\
                      CREATE TABLE a (x text); create table IF NOT EXISTS b(\n y text);";
        assert_eq!(
            created_tables(schema),
            ["a", "b"].map(String::from).into_iter().collect()
        );
    }
}
