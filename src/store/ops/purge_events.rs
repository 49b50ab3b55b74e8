//! The events' retention: events older than `--event-retention` erased, a bounded batch at a
//! time. Run by the server every minute, not by a request.

use std::time::Duration;

use crate::domain::{DeliveryState, EventId, Timestamp};
use crate::store::rows::Columns;
use crate::store::sql::{Param, Sql, text};
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{EVENT_PURGE_BATCH, StoreError};

/// Erases up to [`EVENT_PURGE_BATCH`] events written more than `retention` ago, oldest
/// first, with their webhook deliveries; answers how many events (a full batch: run it
/// again).
#[derive(Debug, Clone)]
pub(crate) struct PurgeEvents {
    /// How long an event is kept.
    pub(crate) retention: Duration,
}

impl WriteOp for PurgeEvents {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::audit::Actor;
    use crate::domain::{Atomic, EventTypes, Name, NewEndpoint, NewTenant, Thresholds};
    use crate::store::ops::{CreateEndpoint, CreateTenant, Secret};
    use crate::store::{Clock, ListQuery, Store, StoreConfig};

    const DAY_MS: u64 = 86_400_000;

    fn all() -> ListQuery {
        ListQuery::first(100)
    }

    async fn tenant(store: &Store, name: &str) {
        store
            .write(CreateTenant {
                tenant: NewTenant {
                    name: Name::parse(name).expect("a name"),
                    opening_deposit: Atomic::new(1),
                    policy: None,
                    thresholds: Thresholds::default(),
                },
                actor: Actor::Admin,
                keyed: None,
            })
            .await
            .expect("a tenant");
    }

    #[test]
    fn events_past_their_retention_go_with_their_deliveries_and_no_others() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let clock = Arc::new(AtomicU64::new(1_800_000_000_000));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let (store, threads) = Store::open(StoreConfig {
                clock: Clock::Manual(Arc::clone(&clock)),
                ..StoreConfig::for_tests(dir.path().join("purge.db"))
            })
            .expect("the store opens");
            let endpoint = store
                .write(CreateEndpoint {
                    endpoint: NewEndpoint {
                        url: "https://hooks.example.com/t".into(),
                        description: None,
                        event_types: EventTypes::All,
                        tenant_id: None,
                    },
                    secret: Secret([7; 32]),
                    actor: Actor::Admin,
                    keyed: None,
                })
                .await
                .expect("an endpoint");
            let crate::store::Written::Fresh(endpoint) = endpoint else {
                panic!("a fresh endpoint");
            };
            tenant(&store, "old").await;
            clock.fetch_add(29 * DAY_MS, Ordering::SeqCst);
            tenant(&store, "newer").await;
            clock.fetch_add(2 * DAY_MS, Ordering::SeqCst);
            let retention = Duration::from_millis(30 * DAY_MS);
            let erased = store
                .write(PurgeEvents { retention })
                .await
                .expect("a purge");
            assert_eq!(erased, 1, "only the event of 31 days ago");
            let events = store.list_events(all()).await.expect("events");
            let names: Vec<&str> = events.items.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(events.items.len(), 1, "{names:?}");
            assert!(events.items[0].data.contains("\"newer\""));
            let deliveries = store
                .list_deliveries(Some(endpoint.id.clone()), all())
                .await
                .expect("deliveries");
            assert_eq!(
                deliveries.items.len(),
                1,
                "the old event's delivery went with it"
            );
            assert_eq!(deliveries.items[0].event_id, events.items[0].id);
            let again = store
                .write(PurgeEvents { retention })
                .await
                .expect("a purge");
            assert_eq!(again, 0, "nothing more is due");
            threads.shutdown().await.expect("the store stops");
        });
    }
}
