//! The audit chain as the writer extends it: each event linked to the head, inside the
//! transaction of the change it records, and the head read back from the database.

use crate::audit::{Actor, AuditEvent, Head, Linked};
use crate::domain::Timestamp;
use crate::store::StoreError;
use crate::store::sql::{Param, Sql, text};
use crate::store::write::state::WriterState;

impl<D: Sql> WriterState<D> {
    /// Appends `event` to the chain, inside the caller's transaction.
    pub(crate) fn record(
        &mut self,
        occurred_at: Timestamp,
        actor: &Actor,
        event: &AuditEvent,
    ) -> Result<(), StoreError> {
        let row = self.head().link(&occurred_at.to_string(), actor, event);
        append(self.db(), &row)?;
        self.set_head(row.into_head());
        self.counts().audit_event();
        Ok(())
    }
}

/// Reads the chain's head from the database (the genesis head for an empty chain).
pub(crate) fn load_head(db: &mut impl Sql) -> Result<Head, StoreError> {
    last_event(db).map(|(head, _)| head)
}

/// The chain's head and when its last event occurred (the genesis head and the epoch for an
/// empty chain). The `ORDER BY` names the table's column: PostgreSQL would take a bare `seq`
/// for the output column of that name, the text, and sort `9` after `10`.
pub(crate) fn last_event(db: &mut impl Sql) -> Result<(Head, Timestamp), StoreError> {
    let last = db.query_opt(
        "SELECT CAST(seq AS TEXT), hash, occurred_at FROM audit_events \
         ORDER BY audit_events.seq DESC LIMIT 1",
        &[],
        |row| {
            let seq = text(row, 0)?;
            let head = Head {
                seq: seq
                    .parse()
                    .map_err(|_| row.corrupt(0, format!("a bad seq {seq:?}")))?,
                hash: text(row, 1)?.into_owned(),
            };
            let at = text(row, 2)?;
            let at = Timestamp::parse(&at)
                .ok_or_else(|| row.corrupt(2, format!("a bad occurred_at {at:?}")))?;
            Ok((head, at))
        },
    )?;
    Ok(last.unwrap_or_else(|| (Head::genesis(), Timestamp::from_unix_ms(0))))
}

/// Appends one row inside the caller's transaction. The schema's insert trigger refuses a row
/// that does not continue the chain.
pub(crate) fn append(db: &mut impl Sql, row: &Linked) -> Result<(), StoreError> {
    let e = &row.entry;
    db.send(
        "INSERT INTO audit_events \
         (seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        &[
            Param::Int(e.seq),
            e.occurred_at.as_str().into(),
            e.actor.as_ref().into(),
            e.action.as_ref().into(),
            e.tenant_id.as_str().into(),
            e.payload.as_str().into(),
            row.prev_hash.as_str().into(),
            row.hash.as_str().into(),
        ],
    )?;
    Ok(())
}
