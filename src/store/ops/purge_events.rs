//! The events' retention: events older than `--event-retention` erased, a bounded batch at a
//! time. Run by the server every minute, not by a request.

use std::time::Duration;

use crate::domain::{EventId, Timestamp};
use crate::store::sql::{Param, Sql};
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{EVENT_PURGE_BATCH, StoreError};

/// Erases up to [`EVENT_PURGE_BATCH`] events written more than `retention` ago, oldest
/// first; answers how many (a full batch: run it again).
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
        let limit = i64::try_from(EVENT_PURGE_BATCH).unwrap_or(i64::MAX);
        w.db().execute(
            "DELETE FROM events WHERE id IN \
             (SELECT id FROM events WHERE id < CAST(?1 AS TEXT) ORDER BY id \
              LIMIT CAST(?2 AS BIGINT))",
            &[below.as_str().into(), Param::Int(limit)],
        )
    }
}
