//! The database, read on its own without trusting the service: counts, audit rows and the
//! hash chain.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::shapes::sha256_hex;

/// The `prev_hash` of the first audit event.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How long the tests' own connections wait for a lock the server holds.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The `-wal` file beside a database.
pub fn wal_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// Opens a database read-only for independent checks.
pub fn open_ro(path: &Path) -> Connection {
    open_with(path, OpenFlags::SQLITE_OPEN_READ_ONLY, "read-only")
}

/// Opens a database read-write (for tampering and locking tests only).
pub fn open_rw(path: &Path) -> Connection {
    open_with(path, OpenFlags::SQLITE_OPEN_READ_WRITE, "read-write")
}

/// Opens an existing database with `access`, waiting for locks as the server does.
fn open_with(path: &Path, access: OpenFlags, what: &str) -> Connection {
    let conn = Connection::open_with_flags(path, access | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .unwrap_or_else(|e| panic!("opening {} {what}: {e}", path.display()));
    conn.busy_timeout(BUSY_TIMEOUT)
        .expect("setting a busy timeout");
    conn
}

/// `SELECT count(*) ...` or any query with one integer result.
pub fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |row| row.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// One row of `audit_events`, as stored.
#[derive(Debug, Clone)]
pub struct AuditRow {
    /// The position in the chain, 1, 2, 3, … without gaps.
    pub seq: i64,
    /// When the change happened, a contract timestamp.
    pub occurred_at: String,
    /// Who made the change: `admin`, `tenant`, `system` or `oidc:<sub>`.
    pub actor: String,
    /// What happened, such as `tenant.created`.
    pub action: String,
    /// The tenant concerned.
    pub tenant_id: String,
    /// The compact JSON text of the event's facts.
    pub payload: String,
    /// The `hash` of the row before, or the genesis hash for the first.
    pub prev_hash: String,
    /// The lowercase hex SHA-256 that links this row to the chain.
    pub hash: String,
}

impl AuditRow {
    /// The hash the contract defines for this row, computed here.
    pub fn expected_hash(&self) -> String {
        let text = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.prev_hash,
            self.seq,
            self.occurred_at,
            self.actor,
            self.action,
            self.tenant_id,
            self.payload
        );
        sha256_hex(text.as_bytes())
    }
}

/// Every audit row, in `seq` order.
pub fn audit_rows(conn: &Connection) -> Vec<AuditRow> {
    let mut stmt = conn
        .prepare(
            "SELECT seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash \
             FROM audit_events ORDER BY seq",
        )
        .expect("preparing the audit query");
    stmt.query_map([], |r| {
        Ok(AuditRow {
            seq: r.get(0)?,
            occurred_at: r.get(1)?,
            actor: r.get(2)?,
            action: r.get(3)?,
            tenant_id: r.get(4)?,
            payload: r.get(5)?,
            prev_hash: r.get(6)?,
            hash: r.get(7)?,
        })
    })
    .expect("querying audit_events")
    .collect::<Result<Vec<_>, _>>()
    .expect("reading audit_events")
}

/// Checks the whole chain from the file alone: gapless `seq` from 1, genesis, links and
/// hashes. Returns the head hash.
pub fn assert_chain_valid(rows: &[AuditRow], ctx: &str) -> String {
    let mut prev = GENESIS_HASH.to_owned();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row.seq,
            i as i64 + 1,
            "{ctx}: seq is gapless from 1; {row:?}"
        );
        assert_eq!(
            row.prev_hash, prev,
            "{ctx}: prev_hash links to the row before; {row:?}"
        );
        assert!(
            row.hash.len() == 64
                && row
                    .hash
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{ctx}: hash is 64 lowercase hex; {row:?}"
        );
        assert_eq!(
            row.hash,
            row.expected_hash(),
            "{ctx}: hash of seq {} recomputed independently",
            row.seq
        );
        prev = row.hash.clone();
    }
    prev
}

/// Every byte of a database file and its `-wal`, for searching secrets in them.
pub fn db_bytes(db: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(db).unwrap_or_default();
    bytes.extend(std::fs::read(wal_path(db)).unwrap_or_default());
    bytes
}
