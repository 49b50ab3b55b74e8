//! What is read of webhook endpoints and their deliveries: one, pages of them, the endpoints an
//! instance sends to and the deliveries due, and how long the oldest pending one has waited.

use std::borrow::Cow;
use std::time::Duration;

use super::page;
use crate::domain::{Delivery, DeliveryId, Endpoint, EndpointId, Event, EventId, Timestamp};
use crate::store::rows::{self, Columns, DELIVERY_COLUMNS, ENDPOINT_COLUMNS};
use crate::store::sql::{Param, Row, RowError, Sql};
use crate::store::{ListQuery, Page, StoreError};

/// The webhook endpoint `id`: `webhook_endpoint_not_found` for none, or a deleted one.
pub(crate) fn endpoint(db: &mut impl Sql, id: Option<&EndpointId>) -> Result<Endpoint, StoreError> {
    let Some(id) = id else {
        return Err(StoreError::EndpointNotFound);
    };
    db.query_opt(
        &format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
             WHERE id = CAST(?1 AS TEXT) AND state <> 'deleted'"
        ),
        &[id.as_str().into()],
        |row| rows::endpoint(row),
    )?
    .ok_or(StoreError::EndpointNotFound)
}

/// A page of webhook endpoints, deleted ones left out.
pub(crate) fn list_endpoints(
    db: &mut impl Sql,
    query: &ListQuery,
) -> Result<Page<Endpoint>, StoreError> {
    let mut items = db.query(
        &format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
             WHERE state <> 'deleted' AND id > ?1 ORDER BY id LIMIT CAST(?2 AS BIGINT)"
        ),
        &[
            Param::Text(query.after.as_deref().unwrap_or("")),
            Param::Int(i64::try_from(query.limit).unwrap_or(i64::MAX - 1) + 1),
        ],
        |row| rows::endpoint(row),
    )?;
    let has_more = items.len() > query.limit;
    items.truncate(query.limit);
    Ok(Page { items, has_more })
}

/// A page of an endpoint's deliveries, with its `state` and `event_id` filters.
pub(crate) fn list_deliveries<D: Sql>(
    db: &mut D,
    endpoint_id: Option<&EndpointId>,
    query: &ListQuery,
) -> Result<Page<Delivery>, StoreError> {
    db.in_snapshot(|db| {
        let endpoint = endpoint(db, endpoint_id)?;
        let select = format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries");
        let mut filters = vec![("endpoint_id", endpoint.id.as_str())];
        if let Some(event) = &query.event_id {
            filters.push(("event_id", event));
        }
        page::page(db, &select, "id", "state", &filters, query, |row| {
            rows::delivery(row)
        })
    })
}

/// The delivery `id` of `endpoint`: `delivery_not_found` for none (or another endpoint's).
pub(crate) fn delivery(
    db: &mut impl Sql,
    endpoint: &EndpointId,
    id: Option<&DeliveryId>,
) -> Result<Delivery, StoreError> {
    let Some(id) = id else {
        return Err(StoreError::DeliveryNotFound);
    };
    db.query_opt(
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE id = CAST(?1 AS TEXT) AND endpoint_id = CAST(?2 AS TEXT)"
        ),
        &[id.as_str().into(), endpoint.as_str().into()],
        |row| rows::delivery(row),
    )?
    .ok_or(StoreError::DeliveryNotFound)
}

/// An endpoint this instance sends to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sending {
    /// Which.
    pub(crate) id: EndpointId,
    /// Where.
    pub(crate) url: String,
}

/// What signs an attempt: the endpoint's secret, and the secret it replaced while that still
/// signs beside it. Its `Debug` shows neither.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    /// The secret's bytes.
    pub(crate) secret: [u8; 32],
    /// The replaced secret's bytes, while it signs.
    pub(crate) previous: Option<[u8; 32]>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys { .. }")
    }
}

/// A secret's 32 bytes in column `i`, if any.
fn key(row: &Row<'_>, i: usize) -> Result<Option<[u8; 32]>, RowError> {
    match row.blob(i)? {
        None => Ok(None),
        Some(bytes) => bytes
            .as_ref()
            .try_into()
            .map(Some)
            .map_err(|_| row.corrupt(i, "a secret that is not 32 bytes".into())),
    }
}

/// What the sender reads at each turn: the enabled endpoints whose lease `owner` holds at
/// `now`, and whether any enabled endpoint is held by no one (its lease is to be taken).
pub(crate) fn sending(
    db: &mut impl Sql,
    owner: &str,
    now: Timestamp,
) -> Result<(Vec<Sending>, bool), StoreError> {
    let now = now.to_string();
    let rows = db.query(
        "SELECT id, url, \
         CASE WHEN lease_owner = ?1 AND lease_until > ?2 THEN 'mine' \
              WHEN lease_owner IS NULL OR lease_until <= ?2 THEN 'free' ELSE 'held' END \
         FROM webhook_endpoints WHERE state = 'enabled' ORDER BY id",
        &[owner.into(), Param::Text(&now)],
        |row| {
            let c = Columns::new(row, 0);
            let sending = Sending {
                id: c.parse(0, "endpoint id", EndpointId::parse)?,
                url: c.text(1)?.into_owned(),
            };
            Ok((sending, c.text(2)?.into_owned()))
        },
    )?;
    let free = rows.iter().any(|(_, lease)| lease == "free");
    let mine = rows
        .into_iter()
        .filter(|(_, lease)| lease == "mine")
        .map(|(s, _)| s)
        .collect();
    Ok((mine, free))
}

/// A delivery whose attempt is due, with its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    /// Which delivery.
    pub(crate) delivery: DeliveryId,
    /// Its event, as stored.
    pub(crate) event: Event,
    /// What signs it, read with it: after the event was written, so after any rotation of
    /// the endpoint's secret that came before the event.
    pub(crate) keys: Keys,
}

/// Up to `limit` deliveries of `endpoint` due at `now`, soonest first, with their events;
/// none while the endpoint is not enabled. The sender's task for an endpoint stops when it
/// next reads the endpoints, but a disable committed before this read (the run of failures
/// that the attempt before ended) is seen here at once: no attempt follows it.
pub(crate) fn due_deliveries(
    db: &mut impl Sql,
    endpoint: &EndpointId,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Due>, StoreError> {
    db.query(
        "SELECT d.id, e.id, e.type, e.created_at, e.tenant_id, e.data, w.secret, \
         CASE WHEN w.previous_until > ?2 THEN w.previous_secret END \
         FROM webhook_deliveries d JOIN events e ON e.id = d.event_id \
         JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE d.endpoint_id = ?1 AND d.state = 'pending' AND d.next_attempt_at <= ?2 \
         AND w.state = 'enabled' \
         ORDER BY d.next_attempt_at LIMIT CAST(?3 AS BIGINT)",
        &[
            endpoint.as_str().into(),
            Param::Text(&now.to_string()),
            Param::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
        ],
        |row| {
            let c = Columns::new(row, 0);
            Ok(Due {
                delivery: c.parse(0, "delivery id", DeliveryId::parse)?,
                event: rows::event_at(row, 1)?,
                keys: Keys {
                    secret: key(row, 6)?.ok_or_else(|| row.corrupt(6, "no secret".into()))?,
                    previous: key(row, 7)?,
                },
            })
        },
    )
}

/// The age of the oldest pending delivery's event at `now`, if any is pending.
pub(crate) fn oldest_pending(
    db: &mut impl Sql,
    now: Timestamp,
) -> Result<Option<Duration>, StoreError> {
    let oldest = db.query_opt(
        "SELECT min(event_id) FROM webhook_deliveries WHERE state = 'pending'",
        &[],
        |row| Ok(row.column(0)?.map(Cow::into_owned)),
    )?;
    Ok(oldest
        .flatten()
        .and_then(|id| EventId::parse(&id))
        .map(|id| {
            let written = id.ulid().timestamp_ms();
            Duration::from_millis(now.unix_ms().saturating_sub(written))
        }))
}
