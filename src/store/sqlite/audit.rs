//! The audit chain in SQLite: appending a row, reading the head, and feeding the stored rows
//! to the pure verifier in [`crate::audit`].

use rusqlite::Connection;

use super::scan;
use crate::audit::{Entry, Head, Linked, Replay, VerifyError};
use crate::store::rows;

/// Reads the head from the database (the genesis head for an empty chain).
pub(super) fn load_head(conn: &Connection) -> rusqlite::Result<Head> {
    let mut stmt =
        conn.prepare_cached("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")?;
    let mut rows = stmt.query([])?;
    match rows.next()? {
        Some(row) => Ok(Head {
            seq: row.get(0)?,
            hash: row.get(1)?,
        }),
        None => Ok(Head::genesis()),
    }
}

/// Appends one row inside the caller's transaction, for the tests' chains. The schema's insert
/// trigger refuses a row that does not continue the chain.
#[cfg(test)]
fn append(conn: &Connection, row: &Linked) -> rusqlite::Result<()> {
    let e = &row.entry;
    conn.prepare_cached(
        "INSERT INTO audit_events \
         (seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(rusqlite::params![
        e.seq,
        e.occurred_at,
        e.actor.as_ref(),
        e.action.as_ref(),
        e.tenant_id,
        e.payload,
        row.prev_hash,
        row.hash,
    ])?;
    Ok(())
}

/// Streams every row, in `seq` order, into `push`. A row whose columns cannot be read as text
/// (a tampered type, say) is broken.
pub(super) fn for_each_row(
    conn: &Connection,
    mut push: impl FnMut(&Linked) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    let read = |e: rusqlite::Error| VerifyError::Read(e.to_string());
    let mut stmt = conn.prepare(rows::EVERY_EVENT).map_err(read)?;
    let mut rows = stmt.query([]).map_err(read)?;
    let mut last = 0;
    while let Some(row) = rows.next().map_err(read)? {
        let unreadable = |e: rusqlite::Error| VerifyError::Broken {
            seq: row.get::<_, i64>(0).unwrap_or(last + 1),
            reason: format!("a column cannot be read: {e}"),
        };
        let linked = Linked {
            entry: Entry {
                seq: row.get(0).map_err(unreadable)?,
                occurred_at: row.get(1).map_err(unreadable)?,
                actor: row.get::<_, String>(2).map_err(unreadable)?.into(),
                action: row.get::<_, String>(3).map_err(unreadable)?.into(),
                tenant_id: row.get(4).map_err(unreadable)?,
                payload: row.get(5).map_err(unreadable)?,
            },
            prev_hash: row.get(6).map_err(unreadable)?,
            hash: row.get(7).map_err(unreadable)?,
        };
        last = linked.entry.seq;
        push(&linked)?;
    }
    Ok(())
}

/// Replays the whole chain, then compares every stored tenant, budget, reservation and ledger
/// entry with it. Memory grows with the number of tenants, budgets and reservations (a few
/// hundred bytes each), not with the number of events or entries.
pub(super) fn verify(conn: &Connection) -> Result<Head, VerifyError> {
    // Both passes read one snapshot, so a live database that is being written verifies too;
    // inside a caller's transaction (a copy checks its target before it commits), that one.
    let snapshot = if conn.is_autocommit() {
        Some(
            conn.unchecked_transaction()
                .map_err(|e| VerifyError::Read(e.to_string()))?,
        )
    } else {
        None
    };
    let mut replay = Replay::default();
    for_each_row(conn, |row| replay.push(row))?;
    scan::for_each_tenant(conn, |tenant| match tenant {
        Ok(tenant) => replay.check_tenant(&tenant),
        Err(reason) => Err(replay.unaccounted(reason)),
    })?;
    scan::for_each_budget(conn, |budget| match budget {
        Ok(budget) => replay.check_budget(&budget),
        Err(reason) => Err(replay.unaccounted(reason)),
    })?;
    scan::for_each_reservation(conn, |reservation| match reservation {
        Ok(reservation) => replay.check_reservation(&reservation),
        Err(reason) => Err(replay.unaccounted(reason)),
    })?;
    scan::for_each_entry(conn, |entry| match entry {
        Ok(entry) => replay.check_entry(&entry),
        Err(reason) => Err(replay.unaccounted(reason)),
    })?;
    drop(snapshot);
    replay.finish()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::sample::{Index, select};

    use super::*;
    use crate::audit::{Chain, Entry, GENESIS_HASH};

    fn audit_db() -> Connection {
        let conn = Connection::open_in_memory().expect("an in-memory database opens");
        for migration in super::super::open::MIGRATIONS.iter() {
            conn.execute_batch(migration).expect("the schema applies");
        }
        conn
    }

    /// Appends a row of free text (no typed event) after `head`.
    fn append_text(
        conn: &Connection,
        head: &Head,
        text: &(String, String, String, String),
    ) -> Head {
        let (occurred_at, action, tenant_id, payload) = text.clone();
        let entry = Entry {
            seq: head.seq + 1,
            occurred_at,
            actor: "admin".into(),
            action: action.into(),
            tenant_id,
            payload,
        };
        let hash = crate::audit::link_hash(&head.hash, &entry);
        let row = Linked {
            entry,
            prev_hash: head.hash.clone(),
            hash,
        };
        append(conn, &row).expect("append continues the chain");
        row.head()
    }

    /// Walks the links alone (no replay of the events).
    fn verify_chain(conn: &Connection) -> Result<Head, VerifyError> {
        let mut chain = Chain::default();
        for_each_row(conn, |row| chain.push(row))?;
        Ok(chain.head().clone())
    }

    /// How one stored row is tampered with.
    #[derive(Debug, Clone)]
    enum Tamper {
        /// A text column gets other text.
        Text(&'static str, String),
        /// A text column gets a blob, which cannot be read as text.
        Blob(&'static str),
        /// The row moves past the end of the chain.
        Renumber(i64),
        /// The row is deleted.
        Delete,
    }

    fn text() -> impl Strategy<Value = String> {
        "[a-z0-9 .:{}\"é\u{0}\n]{0,16}"
    }

    fn tamper() -> impl Strategy<Value = Tamper> {
        let column = || {
            select(vec![
                "occurred_at",
                "actor",
                "action",
                "tenant_id",
                "payload",
                "prev_hash",
                "hash",
            ])
        };
        prop_oneof![
            6 => (column(), text()).prop_map(|(c, t)| Tamper::Text(c, t)),
            1 => column().prop_map(Tamper::Blob),
            1 => (1i64..5).prop_map(Tamper::Renumber),
            1 => Just(Tamper::Delete),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// A chain built with `append` verifies; after one row is tampered with (the
        /// immutability triggers dropped first), the walk names that row's seq. Deleting the
        /// last row is the one change a chain alone cannot show: it verifies, one event
        /// shorter (the replay against the tenants table catches that).
        #[test]
        fn verify_names_the_first_tampered_row(
            events in prop::collection::vec((text(), text(), text(), text()), 1..10),
            row in any::<Index>(),
            change in tamper(),
        ) {
            let conn = audit_db();
            let mut head = Head::genesis();
            for event in &events {
                head = append_text(&conn, &head, event);
            }
            let n = events.len() as i64;
            prop_assert_eq!(verify_chain(&conn), Ok(head.clone()));
            prop_assert_eq!(head.seq, n);

            conn.execute_batch(
                "DROP TRIGGER audit_events_no_update; DROP TRIGGER audit_events_no_delete;",
            )
            .expect("the triggers drop");
            let seq = row.index(events.len()) as i64 + 1;
            let changed = match &change {
                Tamper::Text(column, text) => {
                    let sql = format!(
                        "UPDATE audit_events SET {column} = ?1 WHERE seq = ?2 AND {column} IS NOT ?1"
                    );
                    conn.execute(&sql, rusqlite::params![text, seq]).expect("update")
                }
                Tamper::Blob(column) => {
                    let sql = format!("UPDATE audit_events SET {column} = x'ff00' WHERE seq = ?1");
                    conn.execute(&sql, [seq]).expect("update")
                }
                Tamper::Renumber(past) => conn
                    .execute("UPDATE audit_events SET seq = ?1 WHERE seq = ?2", [n + past, seq])
                    .expect("update"),
                Tamper::Delete => conn
                    .execute("DELETE FROM audit_events WHERE seq = ?1", [seq])
                    .expect("delete"),
            };
            let verdict = verify_chain(&conn);
            if changed == 0 {
                prop_assert_eq!(verdict, Ok(head));
            } else if matches!(change, Tamper::Delete) && seq == n {
                prop_assert_eq!(verdict.map(|h| h.seq), Ok(n - 1));
            } else {
                match verdict {
                    Err(VerifyError::Broken { seq: broken, .. }) => {
                        prop_assert_eq!(broken, seq, "{:?} of seq {}", change, seq);
                    }
                    other => {
                        return Err(TestCaseError::fail(format!(
                            "{change:?} of seq {seq} not caught: {other:?}"
                        )));
                    }
                }
            }
        }
    }

    /// The genesis link: the first event links to 64 zeros.
    #[test]
    fn the_first_event_links_to_genesis() {
        let conn = audit_db();
        let head = append_text(
            &conn,
            &Head::genesis(),
            &("t".into(), "a".into(), "ten_x".into(), "{}".into()),
        );
        let prev: String = conn
            .query_row(
                "SELECT prev_hash FROM audit_events WHERE seq = 1",
                [],
                |r| r.get(0),
            )
            .expect("the row");
        assert_eq!(prev, GENESIS_HASH);
        assert_eq!(verify_chain(&conn), Ok(head.clone()));
        assert_eq!(load_head(&conn).expect("the head"), head);
    }
}
