//! `audit verify` of a copy's target on PostgreSQL, inside the copy's transaction: the rows
//! fed to the same replay as `audit verify`'s.

use tokio_postgres::{Client, Row};

use super::RowError;
use crate::audit::{Entry, Head, Linked, Replay, VerifyError};
use crate::store::rows::{self, TextRow};

/// `audit verify` inside the transaction the caller has begun on `client`: what it reads is
/// what that transaction sees, its own writes included (a copy checks its target before it
/// commits).
pub(crate) async fn verify_in_transaction(client: &Client) -> Result<Head, VerifyError> {
    let mut replay = Replay::default();
    let mut last = 0;
    each(client, rows::EVERY_EVENT, |row| {
        let linked = event(row, last)?;
        last = linked.entry.seq;
        replay.push(&linked)
    })
    .await?;
    let checked = |result: Result<(), RowError>, replay: &mut Replay| match result {
        Ok(()) => Ok(()),
        Err(RowError::Corrupt(reason)) => {
            Err(replay.unaccounted(format!("a row cannot be read: {reason}")))
        }
        Err(RowError::Read(reason)) => Err(VerifyError::Read(reason)),
    };
    each(
        client,
        rows::EVERY_TENANT,
        |row| match rows::tenant_with_deposit(row) {
            Ok(tenant) => replay.check_tenant(&tenant),
            Err(e) => checked(Err(e), &mut replay),
        },
    )
    .await?;
    each(client, rows::EVERY_BUDGET, |row| {
        match rows::budget(row, 0) {
            Ok(budget) => replay.check_budget(&budget),
            Err(e) => checked(Err(e), &mut replay),
        }
    })
    .await?;
    each(
        client,
        rows::EVERY_RESERVATION,
        |row| match rows::reservation(row) {
            Ok(reservation) => replay.check_reservation(&reservation),
            Err(e) => checked(Err(e), &mut replay),
        },
    )
    .await?;
    each(client, rows::EVERY_ENTRY, |row| match rows::entry(row) {
        Ok(entry) => replay.check_entry(&entry),
        Err(e) => checked(Err(e), &mut replay),
    })
    .await?;
    replay.finish()
}

/// Feeds every row of `sql` to `check`, as the rows arrive (memory stays bounded on a large
/// database).
async fn each(
    client: &Client,
    sql: &str,
    mut check: impl FnMut(&Row) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    let read = |e: tokio_postgres::Error| VerifyError::Read(super::explain(&e));
    let stream = client
        .query_raw(sql, std::iter::empty::<&str>())
        .await
        .map_err(read)?;
    let mut stream = std::pin::pin!(stream);
    while let Some(row) =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(stream.as_mut(), cx)).await
    {
        check(&row.map_err(read)?)?;
    }
    Ok(())
}

/// An audit row of [`rows::EVERY_EVENT`]; a column that cannot be read breaks the chain there.
fn event(row: &Row, last: i64) -> Result<Linked, VerifyError> {
    let seq: i64 = row
        .column(0)
        .ok()
        .flatten()
        .and_then(|seq| seq.parse().ok())
        .ok_or_else(|| VerifyError::Broken {
            seq: last + 1,
            reason: "a column cannot be read: the seq".into(),
        })?;
    let text = |i: usize| -> Result<String, VerifyError> {
        match row.column(i) {
            Ok(Some(value)) => Ok(value.into_owned()),
            Ok(None) => Err(VerifyError::Broken {
                seq,
                reason: format!("column {i} is NULL"),
            }),
            Err(e) => Err(VerifyError::Broken {
                seq,
                reason: format!("a column cannot be read: {e:?}"),
            }),
        }
    };
    Ok(Linked {
        entry: Entry {
            seq,
            occurred_at: text(1)?,
            actor: text(2)?.into(),
            action: text(3)?.into(),
            tenant_id: text(4)?,
            payload: text(5)?,
        },
        prev_hash: text(6)?,
        hash: text(7)?,
    })
}
