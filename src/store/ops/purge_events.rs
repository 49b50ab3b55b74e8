//! The events' retention: events older than `--event-retention` erased, a bounded batch at a
//! time. Run by the server every minute, not by a request.

use std::time::Duration;

use crate::domain::{DeliveryState, EventId, Timestamp};
use crate::store::rows::Columns;
use crate::store::sql::{Param, Sql, text};
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{EVENT_PURGE_BATCH, StoreError};

/// Erases up to [`EVENT_PURGE_BATCH`] events written more than `retention` ago, oldest
/// first, with their webhook deliveries; answers how many events (a full batch: run it
/// again).
#[derive(Debug)]
pub(crate) struct PurgeEvents {
    /// How long an event is kept.
    pub(crate) retention: Duration,
}

impl WriteOp for PurgeEvents {
    type Output = usize;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<usize, StoreError> {
        let now = w.now().unix_ms();
        let retention = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        let Some(cutoff) = now.checked_sub(retention) else {
            return Ok(0);
        };
        // An event's id holds the millisecond it was written (or a later one, never an
        // earlier), so every id below the first of the cutoff's millisecond is older.
        let below = EventId::from_ulid(ulid::Ulid::from_parts(
            Timestamp::from_unix_ms(cutoff).unix_ms(),
            0,
        ));
        // The last event of this batch: the batch is every event up to it.
        let offset = i64::try_from(EVENT_PURGE_BATCH - 1).unwrap_or(i64::MAX);
        let last = w.db().query_opt(
            "SELECT id FROM events WHERE id < CAST(?1 AS TEXT) ORDER BY id \
             LIMIT 1 OFFSET CAST(?2 AS BIGINT)",
            &[below.as_str().into(), Param::Int(offset)],
            |row| Ok(text(row, 0)?.into_owned()),
        )?;
        let (condition, bound) = match &last {
            Some(last) => ("<=", last.as_str()),
            None => ("<", below.as_str()),
        };
        let erased = w.db().query(
            &format!(
                "SELECT state, CAST(count(*) AS TEXT) FROM webhook_deliveries \
                 WHERE event_id {condition} CAST(?1 AS TEXT) GROUP BY state"
            ),
            &[bound.into()],
            |row| {
                let c = Columns::new(row, 0);
                Ok((
                    c.parse(0, "delivery state", DeliveryState::parse)?,
                    c.parse(1, "count", |raw| raw.parse::<u64>().ok())?,
                ))
            },
        )?;
        for (state, n) in erased {
            for _ in 0..n {
                w.counts().delivery_erased(state);
            }
        }
        w.db().send(
            &format!("DELETE FROM webhook_deliveries WHERE event_id {condition} CAST(?1 AS TEXT)"),
            &[bound.into()],
        )?;
        w.db().execute(
            &format!("DELETE FROM events WHERE id {condition} CAST(?1 AS TEXT)"),
            &[bound.into()],
        )
    }
}
