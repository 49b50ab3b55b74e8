//! `/v1/webhook-endpoints`: endpoints made, changed, deleted and given new secrets, and a
//! delivery retried by hand. Each change of an endpoint is audited; the writer forgets the
//! endpoints it knew, so the next event is delivered as the endpoints now stand.

use crate::audit::Actor;
use crate::domain::rules::EndpointChange;
use crate::domain::{
    AuditEvent, Delivery, DeliveryId, DeliveryState, DisabledReason, Endpoint, EndpointId,
    EndpointPatch, EndpointState, NewEndpoint, TenantId,
};
use crate::store::rows;
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{Keyed, StoreError, Written, queries};

/// How long a replaced secret goes on signing beside the new one.
pub(crate) const PREVIOUS_SECRET_SECONDS: u32 = 24 * 60 * 60;

/// The bytes of a signing secret.
pub(crate) type SecretBytes = [u8; 32];

/// `POST /v1/webhook-endpoints`.
#[derive(Debug, Clone)]
pub(crate) struct CreateEndpoint {
    /// What to make.
    pub(crate) endpoint: NewEndpoint,
    /// Its signing secret (shown to the caller once, never stored elsewhere).
    pub(crate) secret: Secret,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Endpoint>>,
}

/// A signing secret's bytes, never printed.
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) SecretBytes);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl WriteOp for CreateEndpoint {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = Written<Endpoint>;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let CreateEndpoint {
            endpoint: new,
            secret,
            actor,
            keyed,
        } = self;
        w.keyed(keyed, |w| {
            known_tenant(w, new.tenant_id.as_ref())?;
            let now = w.now();
            let endpoint = Endpoint {
                id: EndpointId::from_ulid(w.next_ulid(now)),
                url: new.url,
                description: new.description,
                event_types: new.event_types,
                tenant_id: new.tenant_id,
                state: EndpointState::Enabled,
                created_at: now,
            };
            w.db().send(
                "INSERT INTO webhook_endpoints (id, url, description, event_types, tenant_id, \
                 state, disabled_reason, created_at, secret, failures) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'enabled', NULL, ?6, ?7, 0)",
                &[
                    endpoint.id.as_str().into(),
                    endpoint.url.as_str().into(),
                    endpoint.description.as_ref().map(|d| d.as_str()).into(),
                    Param::Text(&endpoint.event_types.to_column()),
                    endpoint.tenant_id.as_ref().map(TenantId::as_str).into(),
                    Param::Text(&now.to_string()),
                    Param::Bytes(&secret.0),
                ],
            )?;
            *w.subscribers() = None;
            w.record(now, &actor, &audited(EndpointChange::Created, &endpoint))?;
            Ok(endpoint)
        })
    }
}

/// `PATCH /v1/webhook-endpoints/<whe>`.
#[derive(Debug, Clone)]
pub(crate) struct UpdateEndpoint {
    /// Which (`None`: the path named none that could exist).
    pub(crate) id: Option<EndpointId>,
    /// What to change.
    pub(crate) patch: EndpointPatch,
    /// Who asks.
    pub(crate) actor: Actor,
}

impl WriteOp for UpdateEndpoint {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = Endpoint;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Endpoint, StoreError> {
        let UpdateEndpoint { id, patch, actor } = self;
        let before = live_endpoint(w, id.as_ref())?;
        if let Some(Some(tenant)) = &patch.tenant_id {
            known_tenant(w, Some(tenant))?;
        }
        let mut after = before.clone();
        if let Some(url) = patch.url {
            after.url = url;
        }
        if let Some(description) = patch.description {
            after.description = description;
        }
        if let Some(types) = patch.event_types {
            after.event_types = types;
        }
        if let Some(tenant) = patch.tenant_id {
            after.tenant_id = tenant;
        }
        match (patch.enabled, before.state) {
            (Some(true), _) => after.state = EndpointState::Enabled,
            (Some(false), EndpointState::Enabled) => {
                after.state = EndpointState::Disabled(DisabledReason::Manual);
            }
            // Disabling a disabled endpoint changes nothing, whatever disabled it.
            _ => {}
        }
        if after == before {
            return Ok(before);
        }
        let now = w.now();
        write_endpoint(w, &after, before.state != after.state)?;
        if after.state == EndpointState::Enabled && before.state != EndpointState::Enabled {
            // Enabled again: what waited for its next attempt is due now.
            w.db().send(
                "UPDATE webhook_deliveries SET next_attempt_at = ?2 \
                 WHERE endpoint_id = ?1 AND state = 'pending' AND next_attempt_at > ?2",
                &[after.id.as_str().into(), Param::Text(&now.to_string())],
            )?;
        }
        w.record(now, &actor, &audited(EndpointChange::Updated, &after))?;
        Ok(after)
    }
}

/// `DELETE /v1/webhook-endpoints/<whe>`: final; its secret is wiped and its deliveries erased.
#[derive(Debug, Clone)]
pub(crate) struct DeleteEndpoint {
    /// Which.
    pub(crate) id: Option<EndpointId>,
    /// Who asks.
    pub(crate) actor: Actor,
}

impl WriteOp for DeleteEndpoint {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = Endpoint;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Endpoint, StoreError> {
        let DeleteEndpoint { id, actor } = self;
        let mut endpoint = live_endpoint(w, id.as_ref())?;
        let now = w.now();
        for (state, n) in delivery_counts(w, &endpoint.id)? {
            for _ in 0..n {
                w.counts().delivery_erased(state);
            }
        }
        w.db().send(
            "DELETE FROM webhook_deliveries WHERE endpoint_id = ?1",
            &[endpoint.id.as_str().into()],
        )?;
        w.db().send(
            "UPDATE webhook_endpoints SET state = 'deleted', disabled_reason = NULL, \
             secret = ?2, previous_secret = NULL, previous_until = NULL, lease_owner = NULL, \
             lease_until = NULL WHERE id = ?1",
            &[endpoint.id.as_str().into(), Param::Bytes(&[])],
        )?;
        *w.subscribers() = None;
        endpoint.state = EndpointState::Deleted;
        w.record(
            now,
            &actor,
            &AuditEvent::WebhookEndpointId {
                change: EndpointChange::Deleted,
                id: endpoint.id.clone(),
                tenant: endpoint.tenant_id.clone(),
            },
        )?;
        Ok(endpoint)
    }
}

/// `POST /v1/webhook-endpoints/<whe>/rotate-secret`: a new secret; the one it replaces goes on
/// signing beside it for [`PREVIOUS_SECRET_SECONDS`].
#[derive(Debug, Clone)]
pub(crate) struct RotateSecret {
    /// Which.
    pub(crate) id: Option<EndpointId>,
    /// The new secret.
    pub(crate) secret: Secret,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Endpoint>>,
}

impl WriteOp for RotateSecret {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = Written<Endpoint>;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let RotateSecret {
            id,
            secret,
            actor,
            keyed,
        } = self;
        w.keyed(keyed, |w| {
            let endpoint = live_endpoint(w, id.as_ref())?;
            let now = w.now();
            let until = now.plus_seconds(PREVIOUS_SECRET_SECONDS);
            w.db().send(
                "UPDATE webhook_endpoints SET previous_secret = secret, previous_until = ?2, \
                 secret = ?3 WHERE id = ?1",
                &[
                    endpoint.id.as_str().into(),
                    Param::Text(&until.to_string()),
                    Param::Bytes(&secret.0),
                ],
            )?;
            w.record(
                now,
                &actor,
                &AuditEvent::WebhookEndpointId {
                    change: EndpointChange::SecretRotated,
                    id: endpoint.id.clone(),
                    tenant: endpoint.tenant_id.clone(),
                },
            )?;
            Ok(endpoint)
        })
    }
}

/// `POST /v1/webhook-endpoints/<whe>/deliveries/<whd>/retry`: one more attempt, now.
#[derive(Debug, Clone)]
pub(crate) struct RetryDelivery {
    /// Whose.
    pub(crate) endpoint: Option<EndpointId>,
    /// Which.
    pub(crate) delivery: Option<DeliveryId>,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Delivery>>,
}

impl WriteOp for RetryDelivery {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = Written<Delivery>;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let RetryDelivery {
            endpoint,
            delivery,
            keyed,
        } = self;
        w.keyed(keyed, |w| {
            let endpoint = live_endpoint(w, endpoint.as_ref())?;
            let mut delivery =
                queries::webhooks::delivery(w.db(), &endpoint.id, delivery.as_ref())?;
            if endpoint.state != EndpointState::Enabled {
                return Err(StoreError::EndpointDisabled);
            }
            let now = w.now();
            // A pending delivery keeps its schedule and is only brought forward; a settled one
            // gets exactly one more attempt.
            let once = delivery.state != DeliveryState::Pending;
            w.db().send(
                "UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = ?2, \
                 succeeded_at = NULL, retry_once = CASE WHEN ?3 = 1 THEN 1 ELSE retry_once END \
                 WHERE id = ?1",
                &[
                    delivery.id.as_str().into(),
                    Param::Text(&now.to_string()),
                    Param::Int(i64::from(once)),
                ],
            )?;
            if once {
                w.counts()
                    .delivery_moved(delivery.state, DeliveryState::Pending);
            }
            delivery.state = DeliveryState::Pending;
            delivery.next_attempt_at = Some(now);
            delivery.succeeded_at = None;
            Ok(delivery)
        })
    }
}

/// The audit event of an endpoint made or changed.
fn audited(change: EndpointChange, e: &Endpoint) -> AuditEvent {
    AuditEvent::WebhookEndpoint {
        change,
        id: e.id.clone(),
        url: e.url.clone(),
        event_types: e.event_types.clone(),
        tenant: e.tenant_id.clone(),
        enabled: e.state == EndpointState::Enabled,
    }
}

/// `422` unless `tenant` (if any) names a tenant, active or tombstoned.
fn known_tenant<D: Sql>(
    w: &mut WriterState<D>,
    tenant: Option<&TenantId>,
) -> Result<(), StoreError> {
    match tenant {
        Some(t) if !queries::tenants::tenant_exists(w.db(), t)? => {
            Err(StoreError::UnknownTenantFilter)
        }
        _ => Ok(()),
    }
}

/// The endpoint, unless it is missing or deleted.
pub(crate) fn live_endpoint<D: Sql>(
    w: &mut WriterState<D>,
    id: Option<&EndpointId>,
) -> Result<Endpoint, StoreError> {
    // Where writers share the database, the endpoint's row is locked first, without waiting
    // (as a tenant's is: `WriterState::lock_tenant`), so that two changes of one endpoint
    // through two instances run one after the other. Sent with the read below.
    if let (true, Some(id)) = (D::SHARED, id) {
        w.db().send(
            "SELECT 1 FROM webhook_endpoints WHERE id = ?1 FOR NO KEY UPDATE NOWAIT",
            &[id.as_str().into()],
        )?;
    }
    queries::webhooks::endpoint(w.db(), id)
}

/// Writes `e`'s columns; `state_changed` resets its run of failures (an endpoint enabled again
/// starts afresh).
pub(crate) fn write_endpoint<D: Sql>(
    w: &mut WriterState<D>,
    e: &Endpoint,
    state_changed: bool,
) -> Result<(), StoreError> {
    w.db().send(
        "UPDATE webhook_endpoints SET url = ?2, description = ?3, event_types = ?4, \
         tenant_id = ?5, state = ?6, disabled_reason = ?7, \
         failures = CASE WHEN ?8 = 1 THEN 0 ELSE failures END WHERE id = ?1",
        &[
            e.id.as_str().into(),
            e.url.as_str().into(),
            e.description.as_ref().map(|d| d.as_str()).into(),
            Param::Text(&e.event_types.to_column()),
            e.tenant_id.as_ref().map(TenantId::as_str).into(),
            e.state.name().into(),
            e.state.reason().map(DisabledReason::name).into(),
            Param::Int(i64::from(state_changed)),
        ],
    )?;
    *w.subscribers() = None;
    Ok(())
}

/// How many deliveries of `endpoint` are in each state.
fn delivery_counts<D: Sql>(
    w: &mut WriterState<D>,
    endpoint: &EndpointId,
) -> Result<Vec<(DeliveryState, u64)>, StoreError> {
    w.db().query(
        "SELECT state, CAST(count(*) AS TEXT) FROM webhook_deliveries WHERE endpoint_id = ?1 \
         GROUP BY state",
        &[endpoint.as_str().into()],
        |row| {
            let c = rows::Columns::new(row, 0);
            Ok((
                c.parse(0, "delivery state", DeliveryState::parse)?,
                c.parse(1, "count", |raw| raw.parse().ok())?,
            ))
        },
    )
}
