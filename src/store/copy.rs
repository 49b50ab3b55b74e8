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

use sha2::{Digest, Sha256};

use super::{postgres, sqlite};
use crate::audit::Head;

/// Rows read and written at a time (on PostgreSQL, one statement each way).
pub(crate) const CHUNK_ROWS: usize = 1000;

/// How a column's value is kept: the same on both backends but for amounts, which are text in
/// SQLite and `numeric(39,0)` in PostgreSQL (copied through their decimal text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Integer,
    Amount,
    Bytes,
}

/// A table and its columns, the key (the leading `key` columns) first.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) key: usize,
    pub(crate) columns: &'static [(&'static str, Kind)],
}

use Kind::{Amount, Bytes, Integer, Text};

/// Every table, in the order they are written. The chain comes first: each event must follow
/// the one before it, which the schema's trigger checks as the rows go in.
pub(crate) const TABLES: &[Table] = &[
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
];

/// One stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Text(String),
    Integer(i64),
    Bytes(Vec<u8>),
}

/// A row: its values in the table's column order.
pub(crate) type Row = Vec<Value>;

/// Adds a row to a table's digest: each value tagged with its kind and length, so that no two
/// different rows feed the same bytes.
fn digest_row(digest: &mut Sha256, row: &Row) {
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

/// One side of a copy.
pub(crate) enum Side {
    Sqlite(sqlite::copy::File),
    Postgres(postgres::copy::Database),
}

impl Side {
    /// Up to [`CHUNK_ROWS`] rows of `table` after the key `after`, in key order.
    async fn rows(&mut self, table: &Table, after: Option<&[Value]>) -> Result<Vec<Row>, String> {
        match self {
            Side::Sqlite(file) => file.rows(table, after),
            Side::Postgres(db) => db.rows(table, after).await,
        }
    }

    async fn insert(&mut self, table: &Table, rows: &[Row]) -> Result<(), String> {
        match self {
            Side::Sqlite(file) => file.insert(table, rows),
            Side::Postgres(db) => db.insert(table, rows).await,
        }
    }

    async fn count(&mut self, table: &Table) -> Result<u64, String> {
        match self {
            Side::Sqlite(file) => file.count(table),
            Side::Postgres(db) => db.count(table).await,
        }
    }

    /// Reads every row of `table` in key order, a chunk at a time, into a digest (and into
    /// `into`, when given); its row count and digest. `progress` hears of long tables.
    async fn read_table(
        &mut self,
        table: &Table,
        mut into: Option<&mut Side>,
        progress: &mut impl FnMut(&str),
    ) -> Result<(u64, [u8; 32]), String> {
        let total = self.count(table).await?;
        let mut digest = Sha256::new();
        let (mut done, mut after): (u64, Option<Row>) = (0, None);
        let mut shown = std::time::Instant::now();
        loop {
            let rows = self.rows(table, after.as_deref()).await?;
            for row in &rows {
                digest_row(&mut digest, row);
            }
            if let Some(target) = into.as_deref_mut() {
                target.insert(table, &rows).await?;
            }
            done += rows.len() as u64;
            if shown.elapsed() >= PROGRESS_INTERVAL {
                progress(&format!("{}: {done} of {total} rows", table.name));
                shown = std::time::Instant::now();
            }
            match rows.last() {
                Some(last) if rows.len() == CHUNK_ROWS => after = Some(last[..table.key].to_vec()),
                _ => return Ok((done, digest.finalize().into())),
            }
        }
    }
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
/// `progress`, reads the target back and checks it, and only then commits it.
pub(crate) async fn run(
    source: &mut Side,
    target: &mut Side,
    mut progress: impl FnMut(&str),
) -> Result<Copied, String> {
    for table in TABLES {
        let held = target.count(table).await?;
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
        let (done, digest) = source
            .read_table(table, Some(&mut *target), &mut progress)
            .await?;
        progress(&format!("{}: {done} rows", table.name));
        counts.push((table.name, done));
        digests.push(digest);
    }
    // The checks read the target inside its own transaction: nothing is committed (or, for a
    // file, given its name) before they pass.
    progress("reading the copy back");
    for (table, expected) in TABLES.iter().zip(&digests) {
        if target.read_table(table, None, &mut progress).await?.1 != *expected {
            return Err(format!(
                "the copy's {} differs from the source's; nothing was kept",
                table.name
            ));
        }
    }
    let source_head = match source {
        Side::Sqlite(file) => file.head()?,
        Side::Postgres(db) => db.head().await?,
    };
    progress("verifying the copy's audit chain");
    let head = match target {
        Side::Sqlite(file) => file.verify()?,
        Side::Postgres(db) => db.verify_uncommitted().await?,
    };
    if head != source_head {
        return Err(format!(
            "the copy's chain ends at {} (seq {}), the source's at {} (seq {}); nothing was kept",
            head.hash, head.seq, source_head.hash, source_head.seq
        ));
    }
    match target {
        Side::Sqlite(file) => file.commit()?,
        Side::Postgres(db) => db.commit().await?,
    }
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

/// How often progress is shown while a table is copied.
const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_differ_never_digest_alike() {
        let digest = |rows: &[Row]| {
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

    /// A chunk goes into PostgreSQL as one statement, whose parameters are counted in 16 bits.
    #[test]
    fn a_chunk_fits_in_one_statement() {
        for table in TABLES {
            assert!(
                table.columns.len() * CHUNK_ROWS <= usize::from(u16::MAX),
                "{}",
                table.name
            );
        }
    }
}
