//! What the webhook sender writes: the endpoints it takes on (a lease, so that several
//! instances on one database send each endpoint's attempts as if one did), and each attempt's
//! outcome, with the next attempt's time, the endpoint's run of failures, and the endpoint
//! disabled when that run is long enough.

use std::time::Duration;

use crate::audit::Actor;
use crate::domain::rules::EndpointChange;
use crate::domain::{
    AuditEvent, DeliveryId, DeliveryState, DisabledReason, EndpointId, EndpointState, Timestamp,
};
use crate::store::rows::Columns;
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{StoreError, queries};

/// Takes on every enabled endpoint that no other instance holds (or whose holder's lease ran
/// out), and renews the leases this instance holds, until `now + lease`. Answers how many it
/// holds.
#[derive(Debug, Clone)]
pub(crate) struct ClaimEndpoints {
    /// This instance, as leases name it.
    pub(crate) owner: String,
    /// How long a lease lasts unless renewed.
    pub(crate) lease: Duration,
    /// Take every endpoint whoever holds it: the one process that can write the database (a
    /// SQLite file) has just started, and a lease from before is its own.
    pub(crate) take_all: bool,
}

impl WriteOp for ClaimEndpoints {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = usize;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<usize, StoreError> {
        let now = w.now();
        let lease_s = u32::try_from(self.lease.as_secs()).unwrap_or(u32::MAX);
        let until = now.plus_seconds(lease_s);
        // Its own leases are renewed whatever the endpoint's state, so one disabled while its
        // attempts run is not taken by another instance before they end.
        w.db().execute(
            "UPDATE webhook_endpoints SET lease_owner = ?1, lease_until = ?2 \
             WHERE state <> 'deleted' AND (lease_owner = ?1 OR (state = 'enabled' \
             AND (?4 = 1 OR lease_owner IS NULL OR lease_until < ?3)))",
            &[
                self.owner.as_str().into(),
                Param::Text(&until.to_string()),
                Param::Text(&now.to_string()),
                Param::Int(i64::from(self.take_all)),
            ],
        )
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempted {
    /// Which delivery.
    pub(crate) delivery: DeliveryId,
    /// Its endpoint.
    pub(crate) endpoint: EndpointId,
    /// Whether it succeeded (a `2xx` in time).
    pub(crate) succeeded: bool,
    /// The HTTP status, if one came.
    pub(crate) status: Option<u16>,
    /// Why it failed: a short sentence.
    pub(crate) error: Option<String>,
    /// When it ended.
    pub(crate) ended_at: Timestamp,
}

/// Records an attempt's outcome: the delivery succeeded, waits for its next attempt, or failed
/// for good; the endpoint's run of failures, and the endpoint disabled by the system after
/// `disable_after` failures in a row. Nothing for a delivery that is gone (its endpoint was
/// deleted, its event erased) or no longer pending.
#[derive(Debug, Clone)]
pub(crate) struct RecordAttempt {
    /// The outcome.
    pub(crate) attempt: Attempted,
    /// The waits before the 2nd, 3rd, … attempt.
    pub(crate) schedule: Vec<Duration>,
    /// Failures in a row that disable an endpoint.
    pub(crate) disable_after: u32,
}

impl WriteOp for RecordAttempt {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = ();

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<(), StoreError> {
        let RecordAttempt {
            attempt: a,
            schedule,
            disable_after,
        } = self;
        let Some((attempts, retry_once)) = pending(w, &a.delivery)? else {
            return Ok(());
        };
        let made = attempts + 1;
        let next = if a.succeeded || retry_once {
            None
        } else {
            usize::try_from(attempts)
                .ok()
                .and_then(|i| schedule.get(i))
                .map(|wait| a.ended_at.plus_millis(jittered(*wait)))
        };
        let state = match (a.succeeded, next) {
            (true, _) => DeliveryState::Succeeded,
            (false, Some(_)) => DeliveryState::Pending,
            (false, None) => DeliveryState::Failed,
        };
        let ended = a.ended_at.to_string();
        w.db().send(
            "UPDATE webhook_deliveries SET state = ?2, attempts = ?3, last_attempt_at = ?4, \
             last_status = ?5, last_error = ?6, next_attempt_at = ?7, succeeded_at = ?8, \
             retry_once = 0 WHERE id = ?1",
            &[
                a.delivery.as_str().into(),
                state.name().into(),
                Param::Int(i64::from(made)),
                Param::Text(&ended),
                a.status.map(i64::from).into(),
                a.error.as_deref().into(),
                next.map(|t| t.to_string()).as_ref().into(),
                a.succeeded.then_some(ended.as_str()).into(),
            ],
        )?;
        if state != DeliveryState::Pending {
            w.counts().delivery_moved(DeliveryState::Pending, state);
        }
        let failures = if a.succeeded {
            w.db().send(
                "UPDATE webhook_endpoints SET failures = 0 WHERE id = ?1 AND failures <> 0",
                &[a.endpoint.as_str().into()],
            )?;
            return Ok(());
        } else {
            w.db().query_opt(
                "UPDATE webhook_endpoints SET failures = failures + 1 WHERE id = ?1 \
                 RETURNING CAST(failures AS TEXT), state",
                &[a.endpoint.as_str().into()],
                |row| {
                    let c = Columns::new(row, 0);
                    Ok((
                        c.parse(0, "failures", |raw| raw.parse::<u64>().ok())?,
                        c.text(1)?.into_owned(),
                    ))
                },
            )?
        };
        if let Some((failures, state)) = failures
            && state == EndpointState::Enabled.name()
            && failures >= u64::from(disable_after)
        {
            disable(w, &a.endpoint)?;
        }
        Ok(())
    }
}

/// A pending delivery's attempts so far and whether its next attempt is its last (a retry by
/// hand); `None` when it is gone or not pending.
fn pending<D: Sql>(
    w: &mut WriterState<D>,
    id: &DeliveryId,
) -> Result<Option<(u32, bool)>, StoreError> {
    w.db().query_opt(
        "SELECT CAST(attempts AS TEXT), CAST(retry_once AS TEXT) FROM webhook_deliveries \
         WHERE id = ?1 AND state = 'pending'",
        &[id.as_str().into()],
        |row| {
            let c = Columns::new(row, 0);
            Ok((
                c.parse(0, "attempts", |raw| raw.parse().ok())?,
                &*c.text(1)? == "1",
            ))
        },
    )
}

/// Disables an endpoint that keeps failing, by the system, audited.
fn disable<D: Sql>(w: &mut WriterState<D>, id: &EndpointId) -> Result<(), StoreError> {
    let mut endpoint = queries::webhooks::endpoint(w.db(), Some(id))?;
    endpoint.state = EndpointState::Disabled(DisabledReason::Failing);
    super::endpoints::write_endpoint(w, &endpoint, false)?;
    let now = w.now();
    w.record(
        now,
        &Actor::System,
        &AuditEvent::WebhookEndpoint {
            change: EndpointChange::Updated,
            id: endpoint.id.clone(),
            url: endpoint.url.clone(),
            event_types: endpoint.event_types.clone(),
            tenant: endpoint.tenant_id.clone(),
            enabled: false,
        },
    )?;
    log::warn!(
        "webhook endpoint {} disabled after failing attempts in a row",
        endpoint.id
    );
    Ok(())
}

/// `wait` in milliseconds, give or take 10 % at random.
fn jittered(wait: Duration) -> u64 {
    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    let mut random = [0u8; 4];
    crate::crypto::random_bytes(&mut random);
    // 900 to 1100 thousandths.
    let per_mille = 900 + u64::from(u32::from_le_bytes(random) % 201);
    ms.saturating_mul(per_mille) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_moves_by_at_most_a_tenth() {
        let wait = Duration::from_secs(10);
        let waits: Vec<u64> = (0..500).map(|_| jittered(wait)).collect();
        assert!(waits.iter().all(|ms| (9_000..=11_000).contains(ms)));
        assert!(waits.iter().any(|ms| *ms < 9_800) && waits.iter().any(|ms| *ms > 10_200));
    }
}
