//! The audit chain as the writer extends it, and the head read back from the database.
//!
//! On SQLite each event is linked to the head inside the transaction of the change it
//! records. Where writers share the database ([`Sql::SHARED`]: PostgreSQL) no writer may
//! hold the chain's lock while it works, so each event waits in `audit_pending`, written with
//! its change, until the chainer ([`chain_pending`]) links the committed ones in id order.

use crate::audit::{Actor, AuditEvent, Entry, Head, Linked};
use crate::domain::Timestamp;
use crate::store::StoreError;
use crate::store::sql::{Param, Row, RowError, Sql, text};
use crate::store::write::many::{ManyRows, SHARED_ROWS};
use crate::store::write::state::WriterState;

impl<D: Sql> WriterState<D> {
    /// Records `event` inside the caller's transaction: appended to the chain, or pending
    /// where writers share the database.
    pub(crate) fn record(
        &mut self,
        occurred_at: Timestamp,
        actor: &Actor,
        event: &AuditEvent,
    ) -> Result<(), StoreError> {
        let occurred_at = occurred_at.to_string();
        if D::SHARED {
            // Inserted now, or with the rest of its batch.
            if let Some(entry) = self.defer_pending(Entry::new(0, &occurred_at, actor, event)) {
                append_pending(self.db(), &entry)?;
            }
        } else {
            let row = self.head().link(&occurred_at, actor, event);
            self.set_head(row.head());
            // Inserted now, or with the rest of its batch of operations.
            if let Some(row) = self.defer_audit(row) {
                append(self.db(), &row)?;
            }
        }
        self.counts().audit_event();
        Ok(())
    }
}

/// Reads the chain's head from the database (the genesis head for an empty chain).
pub(crate) fn load_head(db: &mut impl Sql) -> Result<Head, StoreError> {
    last_event(db).map(|(head, _)| head)
}

/// The chain's head and when its last event occurred (the genesis head and the epoch for an
/// empty chain).
pub(crate) fn last_event(db: &mut impl Sql) -> Result<(Head, Timestamp), StoreError> {
    let last = db.query_opt(LAST_EVENT, &[], last_event_row)?;
    Ok(last.unwrap_or_else(|| (Head::genesis(), Timestamp::from_unix_ms(0))))
}

/// The chain's last event, as [`last_event_row`] reads it. The `ORDER BY` names the table's
/// column: PostgreSQL would take a bare `seq` for the output column of that name, the text,
/// and sort `9` after `10`.
const LAST_EVENT: &str = "SELECT CAST(seq AS TEXT), hash, occurred_at FROM audit_events \
     ORDER BY audit_events.seq DESC LIMIT 1";

/// The head an event makes, and when it occurred.
fn last_event_row(row: &Row<'_>) -> Result<(Head, Timestamp), RowError> {
    let seq = text(row, 0)?;
    let head = Head {
        seq: seq
            .parse()
            .map_err(|_| row.corrupt(0, format!("a bad seq {seq:?}")))?,
        hash: text(row, 1)?.into_owned(),
    };
    let at = text(row, 2)?;
    let at =
        Timestamp::parse(&at).ok_or_else(|| row.corrupt(2, format!("a bad occurred_at {at:?}")))?;
    Ok((head, at))
}

/// The statements that append audit rows.
static AUDIT_ROWS: std::sync::LazyLock<ManyRows> = std::sync::LazyLock::new(|| {
    ManyRows::new(
        "INSERT INTO audit_events \
         (seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash) VALUES ",
        8,
    )
});

/// Appends one row inside the caller's transaction. The schema's insert trigger refuses a row
/// that does not continue the chain.
pub(crate) fn append(db: &mut impl Sql, row: &Linked) -> Result<(), StoreError> {
    append_rows(db, std::slice::from_ref(row))
}

/// Appends `rows`, in order, inside the caller's transaction, many to a statement (a batch of
/// operations' rows, on SQLite). The schema's insert trigger checks each row in turn.
pub(crate) fn append_rows(db: &mut impl Sql, rows: &[Linked]) -> Result<(), StoreError> {
    AUDIT_ROWS.insert(db, rows, |row| {
        let e = &row.entry;
        [
            Param::Int(e.seq),
            e.occurred_at.as_str().into(),
            e.actor.as_ref().into(),
            e.action.as_ref().into(),
            e.tenant_id.as_str().into(),
            e.payload.as_str().into(),
            row.prev_hash.as_str().into(),
            row.hash.as_str().into(),
        ]
    })
}

/// Writes `entry` (its `seq` unused) to `audit_pending`, inside the caller's transaction.
fn append_pending(db: &mut impl Sql, entry: &Entry) -> Result<(), StoreError> {
    append_pending_rows(db, std::slice::from_ref(entry))
}

/// The statements that insert rows into `audit_pending`, a batch's in one up to 64.
static PENDING_ROWS: std::sync::LazyLock<ManyRows> = std::sync::LazyLock::new(|| {
    ManyRows::shaped(
        "INSERT INTO audit_pending (occurred_at, actor, action, tenant_id, payload) VALUES ",
        &["{}"; 5],
        "",
        SHARED_ROWS,
    )
});

/// Writes `entries` (their `seq` unused) to `audit_pending` in order, inside the caller's
/// transaction: each takes its id in turn, so the chain keeps their order.
pub(crate) fn append_pending_rows(db: &mut impl Sql, entries: &[Entry]) -> Result<(), StoreError> {
    PENDING_ROWS.insert(db, entries, |entry| {
        [
            entry.occurred_at.as_str().into(),
            entry.actor.as_ref().into(),
            entry.action.as_ref().into(),
            entry.tenant_id.as_str().into(),
            entry.payload.as_str().into(),
        ]
    })
}

/// The columns of a pending row, as [`pending_row`] reads them.
macro_rules! pending_columns {
    () => {
        "CAST(id AS TEXT), occurred_at, actor, action, tenant_id, payload"
    };
}

/// The query that takes the chain's lock, unless another transaction holds it: one text
/// for [`LOCK_CHAIN`] and the guard of [`TAKE_PENDING`].
macro_rules! lock_chain {
    () => {
        "SELECT id FROM chain_head WHERE id = 1 FOR UPDATE SKIP LOCKED"
    };
}

/// Takes the chain's lock, unless another transaction holds it: the chainer sends it first,
/// so that what [`TAKE_PENDING`] reads is what was committed once the lock was granted.
pub(crate) const LOCK_CHAIN: &str = lock_chain!();

/// Deletes the `?1` pending rows of the lowest ids and returns them ([`pending_row`]), where
/// the transaction holds the chain's lock or takes it now without waiting; none otherwise.
/// So the lock, the rows and the head can be asked for together, in one round trip.
///
/// The rows are found in the key's order and deleted where they lie (`ctid`, a TID scan):
/// with `id IN (…)`, a plan made while the table was small went on reading all of it, and a
/// table that every audit row passes through holds far more dead rows than live ones.
pub(crate) const TAKE_PENDING: &str = concat!(
    "DELETE FROM audit_pending WHERE ctid = ANY(ARRAY(\
     SELECT ctid FROM audit_pending WHERE EXISTS (",
    lock_chain!(),
    ") ORDER BY id LIMIT ?1)) RETURNING ",
    pending_columns!()
);

/// A pending row: its id, and its entry (with `seq` 0).
fn pending_row(row: &Row<'_>) -> Result<(i64, Entry), RowError> {
    let id = text(row, 0)?;
    let id = id
        .parse()
        .map_err(|_| row.corrupt(0, format!("a bad pending id {id:?}")))?;
    Ok((
        id,
        Entry {
            seq: 0,
            occurred_at: text(row, 1)?.into_owned(),
            actor: text(row, 2)?.into_owned().into(),
            action: text(row, 3)?.into_owned().into(),
            tenant_id: text(row, 4)?.into_owned(),
            payload: text(row, 5)?.into_owned(),
        },
    ))
}

/// Moves up to `limit` pending rows into the chain, the lowest ids first, in the caller's
/// transaction, if it holds the chain's lock (`chain_head`) or can take it without waiting
/// (nothing is moved otherwise). A row is deleted and appended by the same transaction:
/// chained exactly once, or not at all. The rows' `occurred_at`, in the order chained.
///
/// The rows and the head are read in one round trip, after whatever the caller sent; the
/// rows are appended by a statement sent, not awaited, which the caller's `COMMIT` carries
/// (and whose failure it reports).
///
/// Only committed rows are seen, and a row of a transaction still open may have a lower id
/// than one chained now; it is chained later, after it. Each tenant's rows keep their order:
/// a tenant's writes take its row lock first and commit one after the other, so a later
/// change's row has a higher id and is never seen before an earlier one's.
pub(crate) fn chain_pending(db: &mut impl Sql, limit: i64) -> Result<Vec<String>, StoreError> {
    let mut rows = Vec::new();
    let mut last = None;
    // The head is read after the rows are taken: under the lock, whichever statement took it.
    db.query_each(
        &[(TAKE_PENDING, &[Param::Int(limit)]), (LAST_EVENT, &[])],
        |i, row| {
            match i {
                0 => rows.push(pending_row(row)?),
                _ => last = Some(last_event_row(row)?.0),
            }
            Ok(())
        },
    )?;
    let mut head = last.unwrap_or_else(Head::genesis);
    rows.sort_by_key(|(id, _)| *id);
    let mut linked = Vec::with_capacity(rows.len());
    for (_, entry) in rows {
        let row = head.link_entry(entry);
        head = row.head();
        linked.push(row);
    }
    append_all(db, &linked)?;
    Ok(linked
        .into_iter()
        .map(|row| row.entry.occurred_at)
        .collect())
}

/// Appends `rows`, in their order, in one statement: PostgreSQL's (the rows travel as one
/// JSON array, read back by `json_to_recordset`), where only the chainer appends many at once.
/// The chain's trigger checks each row in turn, and sees the rows before it.
fn append_all(db: &mut impl Sql, rows: &[Linked]) -> Result<(), StoreError> {
    if let [row] = rows {
        return append(db, row);
    }
    if rows.is_empty() {
        return Ok(());
    }
    let json = serde_json::Value::Array(
        rows.iter()
            .map(|row| {
                let e = &row.entry;
                serde_json::json!({
                    "seq": e.seq,
                    "occurred_at": e.occurred_at,
                    "actor": e.actor,
                    "action": e.action,
                    "tenant_id": e.tenant_id,
                    "payload": e.payload,
                    "prev_hash": row.prev_hash,
                    "hash": row.hash,
                })
            })
            .collect(),
    )
    .to_string();
    db.send(
        "INSERT INTO audit_events \
         (seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash) \
         SELECT seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash \
         FROM json_to_recordset(CAST(CAST(?1 AS TEXT) AS json)) AS r(seq bigint, \
         occurred_at text, actor text, action text, tenant_id text, payload text, \
         prev_hash text, hash text) ORDER BY seq",
        &[json.as_str().into()],
    )
}

/// Every pending row, in id order (none where writers do not share the database): what
/// `audit verify` replays after the chain, as the chainer will link it, and what `tenantd
/// copy` chains into its target.
pub(crate) fn pending<D: Sql>(db: &mut D) -> Result<Vec<Entry>, StoreError> {
    if !D::SHARED {
        return Ok(Vec::new());
    }
    let rows = db.query(
        concat!(
            "SELECT ",
            pending_columns!(),
            " FROM audit_pending ORDER BY id"
        ),
        &[],
        pending_row,
    )?;
    Ok(rows.into_iter().map(|(_, entry)| entry).collect())
}

/// Waits, at most `wait`, until no row waits in `audit_pending` (where writers share the
/// database; at once elsewhere): the instances chain what they committed. How many rows still
/// wait then.
pub(crate) fn settle_pending<D: Sql>(
    db: &mut D,
    wait: std::time::Duration,
) -> Result<usize, StoreError> {
    if !D::SHARED {
        return Ok(0);
    }
    let deadline = std::time::Instant::now() + wait;
    loop {
        let pending = db
            .query_opt(
                "SELECT CAST(count(*) AS TEXT) FROM audit_pending",
                &[],
                |row| {
                    let n = text(row, 0)?;
                    n.parse::<usize>()
                        .map_err(|_| row.corrupt(0, format!("a bad count {n:?}")))
                },
            )?
            .unwrap_or(0);
        if pending == 0 || std::time::Instant::now() >= deadline {
            return Ok(pending);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
