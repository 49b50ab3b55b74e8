//! `tenantd audit verify`, written once for both backends: the chain's rows, then every stored
//! tenant, budget, reservation, ledger entry and period statement, read through the SQL seam ([`Sql`]) in one
//! snapshot and fed to the replay ([`Replay`]) in the order it takes them.
//!
//! Each table is streamed ([`Sql::for_each_row`]), so memory grows with the tenants, budgets
//! and reservations the replay keeps (a few hundred bytes each), never with the number of
//! events or ledger entries. A row that cannot be read is not skipped: a column of the chain
//! that cannot be read breaks the chain at its row, and a stored row that breaks a rule of its
//! type is one the chain does not account for.

use std::time::Duration;

use super::StoreError;
use super::queries::levels;
use super::rows;
use super::sql::{Row, RowError, Sql};
use super::write::chain;
use crate::audit::{Entry, Head, Linked, Replay, VerifyError};

impl From<StoreError> for VerifyError {
    /// The database could not be read at all: the connection, the file, a statement.
    fn from(e: StoreError) -> Self {
        Self::Read(e.to_string())
    }
}

/// How long `audit verify` waits for the audit rows waiting in `audit_pending` to be chained
/// by the instances before it reads (PostgreSQL).
const PENDING_WAIT: Duration = Duration::from_secs(5);

/// Replays the whole chain, then compares every stored tenant, budget, reservation and ledger
/// entry with it, all read in one snapshot, so a live database that is being written verifies
/// too; the chain's head on success.
///
/// On PostgreSQL a committed change's audit row may still wait for its place in the chain:
/// `verify` first waits (at most [`PENDING_WAIT`]) for the instances to chain what is
/// pending, and replays whatever still waits in its snapshot after the chain, in the order
/// the chainer will link it, so every committed change is covered and none is called
/// missing. The head is then the one the chain will have once they are linked.
pub(crate) fn verify(db: &mut impl Sql) -> Result<Head, VerifyError> {
    verify_live(db).map(|(head, _)| head)
}

/// [`verify`], and how many of the events it replayed still waited for their place in the
/// chain when it read (PostgreSQL).
pub(crate) fn verify_live(db: &mut impl Sql) -> Result<(Head, usize), VerifyError> {
    chain::settle_pending(db, PENDING_WAIT)?;
    db.in_snapshot(|db| Ok(replay_all(db)))?
}

/// [`verify`] inside the transaction the caller has begun on `db`: what it reads is what that
/// transaction sees, its own writes included (a copy checks its target before it commits).
pub(crate) fn verify_in_transaction(db: &mut impl Sql) -> Result<Head, VerifyError> {
    replay_all(db).map(|(head, _)| head)
}

/// Replays the chain, then the rows still pending after it, and checks every stored row
/// against the replay, and SQLite's index of the levels' entries against the entries: the
/// head, and how many rows were pending.
fn replay_all<D: Sql>(db: &mut D) -> Result<(Head, usize), VerifyError> {
    let mut replay = Replay::default();
    let mut head = Head::genesis();
    for_each_event(db, |row| {
        head = row.head();
        replay.push(row)
    })?;
    let pending = chain::pending(db)?;
    let waiting = pending.len();
    for entry in pending {
        let row = head.link_entry(entry);
        head = row.head();
        replay.push(&row)?;
    }
    // SQLite's index of the levels' entries is checked before the entries are read through
    // it, so that a fault of the index is named as one.
    let indexed = !D::SHARED && levels::in_schema(db)?;
    if indexed && let Some(reason) = levels::misindexed(db)? {
        return Err(VerifyError::Unaccounted {
            head_seq: head.seq,
            reason,
        });
    }
    check_each(
        db,
        rows::EVERY_TENANT,
        &mut replay,
        |row| rows::tenant_with_deposit(row),
        Replay::check_tenant,
    )?;
    check_each(
        db,
        rows::EVERY_BUDGET,
        &mut replay,
        |row| rows::budget(row, 0),
        Replay::check_budget,
    )?;
    check_each(
        db,
        rows::EVERY_RESERVATION,
        &mut replay,
        |row| rows::reservation(row),
        Replay::check_reservation,
    )?;
    check_each(
        db,
        if indexed {
            levels::EVERY_ENTRY
        } else {
            rows::EVERY_ENTRY
        },
        &mut replay,
        |row| rows::entry(row),
        Replay::check_entry,
    )?;
    check_each(
        db,
        rows::EVERY_PERIOD,
        &mut replay,
        |row| rows::statement(row),
        Replay::check_period,
    )?;
    check_each(
        db,
        rows::EVERY_ENDPOINT,
        &mut replay,
        |row| rows::endpoint(row),
        Replay::check_endpoint,
    )?;
    replay.finish().map(|head| (head, waiting))
}

/// Streams every row of the chain, in `seq` order, into `push`.
pub(crate) fn for_each_event(
    db: &mut impl Sql,
    mut push: impl FnMut(&Linked) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    let mut last = 0;
    db.for_each_row(rows::EVERY_EVENT, &[], |row| {
        let linked = event(row, last)?;
        last = linked.entry.seq;
        push(&linked)
    })
}

/// A row of [`rows::EVERY_EVENT`], which follows the row of `seq` `last`. A column that cannot
/// be read (a tampered type, say) breaks the chain there.
fn event(row: &Row<'_>, last: i64) -> Result<Linked, VerifyError> {
    let text = |i: usize, seq: i64| match row.column(i) {
        Ok(Some(value)) => Ok(value.into_owned()),
        Ok(None) => Err(VerifyError::Broken {
            seq,
            reason: format!("column {i} is NULL"),
        }),
        Err(RowError::Read(e) | RowError::Corrupt(e)) => Err(VerifyError::Broken {
            seq,
            reason: format!("a column cannot be read: {e}"),
        }),
    };
    let number = text(0, last + 1)?;
    let seq = number.parse().map_err(|_| VerifyError::Broken {
        seq: last + 1,
        reason: format!("a column cannot be read: a bad seq {number:?}"),
    })?;
    Ok(Linked {
        entry: Entry {
            seq,
            occurred_at: text(1, seq)?,
            actor: text(2, seq)?.into(),
            action: text(3, seq)?.into(),
            tenant_id: text(4, seq)?,
            payload: text(5, seq)?,
        },
        prev_hash: text(6, seq)?,
        hash: text(7, seq)?,
    })
}

/// Streams every row of `sql`, each read by `read`, into `check` with the replay. A row that
/// breaks a rule of its type is one the chain does not account for; a row that cannot be read
/// at all stops the verification as unreadable.
fn check_each<T>(
    db: &mut impl Sql,
    sql: &str,
    replay: &mut Replay,
    read: impl Fn(&Row<'_>) -> Result<T, RowError>,
    check: impl Fn(&mut Replay, &T) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    db.for_each_row(sql, &[], |row| match read(row) {
        Ok(item) => check(replay, &item),
        Err(RowError::Corrupt(reason)) => {
            Err(replay.unaccounted(format!("a row cannot be read: {reason}")))
        }
        Err(RowError::Read(reason)) => Err(VerifyError::Read(reason)),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::sample::{Index, select};

    use super::*;
    use crate::audit::{Chain, GENESIS_HASH};
    use crate::store::sql::{Param, text};
    use crate::store::write::chain;

    /// A SQLite database in memory at this build's schema, seen through the seam alone.
    fn sqlite() -> impl Sql {
        crate::store::in_memory_for_tests()
    }

    /// Appends a row of free text (no typed event) after `head`; the schema's insert trigger
    /// refuses a row that does not continue the chain.
    fn append_text(
        db: &mut impl Sql,
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
        crate::store::write::chain::append(db, &row)
            .and_then(|()| db.flush())
            .expect("append continues the chain");
        row.head()
    }

    /// Walks the links alone (no replay of the events).
    fn verify_chain(db: &mut impl Sql) -> Result<Head, VerifyError> {
        let mut chain = Chain::default();
        for_each_event(db, |row| chain.push(row))?;
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

    fn text_value() -> impl Strategy<Value = String> {
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
            6 => (column(), text_value()).prop_map(|(c, t)| Tamper::Text(c, t)),
            1 => column().prop_map(Tamper::Blob),
            1 => (1i64..5).prop_map(Tamper::Renumber),
            1 => Just(Tamper::Delete),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// A chain built row by row verifies, on SQLite; after one row is tampered with (the
        /// immutability triggers dropped first), the walk names that row's seq. Deleting the
        /// last row is the one change a chain alone cannot show: it verifies, one event
        /// shorter (the replay against the tenants table catches that).
        #[test]
        fn verify_names_the_first_tampered_row(
            events in prop::collection::vec(
                (text_value(), text_value(), text_value(), text_value()),
                1..10,
            ),
            row in any::<Index>(),
            change in tamper(),
        ) {
            let mut db = sqlite();
            let mut head = Head::genesis();
            for event in &events {
                head = append_text(&mut db, &head, event);
            }
            let n = events.len() as i64;
            prop_assert_eq!(verify_chain(&mut db), Ok(head.clone()));
            prop_assert_eq!(head.seq, n);

            db.run("DROP TRIGGER audit_events_no_update").expect("the trigger drops");
            db.run("DROP TRIGGER audit_events_no_delete").expect("the trigger drops");
            let seq = row.index(events.len()) as i64 + 1;
            let changed = match &change {
                Tamper::Text(column, text) => db.execute(
                    &format!(
                        "UPDATE audit_events SET {column} = ?1 \
                         WHERE seq = ?2 AND {column} IS NOT ?1"
                    ),
                    &[Param::Text(text), Param::Int(seq)],
                ),
                Tamper::Blob(column) => db.execute(
                    &format!("UPDATE audit_events SET {column} = x'ff00' WHERE seq = ?1"),
                    &[Param::Int(seq)],
                ),
                Tamper::Renumber(past) => db.execute(
                    "UPDATE audit_events SET seq = ?1 WHERE seq = ?2",
                    &[Param::Int(n + past), Param::Int(seq)],
                ),
                Tamper::Delete => db.execute(
                    "DELETE FROM audit_events WHERE seq = ?1",
                    &[Param::Int(seq)],
                ),
            }
            .expect("the tampering");
            let verdict = verify_chain(&mut db);
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

    /// The genesis link: the first event links to 64 zeros, and the head read back is the
    /// last link.
    #[test]
    fn the_first_event_links_to_genesis() {
        let mut db = sqlite();
        let head = append_text(
            &mut db,
            &Head::genesis(),
            &(
                "2026-01-01T00:00:00.000Z".into(),
                "a".into(),
                "ten_x".into(),
                "{}".into(),
            ),
        );
        let prev = db
            .query_opt(
                "SELECT prev_hash FROM audit_events WHERE seq = 1",
                &[],
                |row| Ok(text(row, 0)?.into_owned()),
            )
            .expect("the query");
        assert_eq!(prev.as_deref(), Some(GENESIS_HASH));
        assert_eq!(verify_chain(&mut db), Ok(head.clone()));
        assert_eq!(chain::load_head(&mut db).expect("the head"), head);
    }
}
