//! The webhook endpoint family: an endpoint made (`webhook_endpoint.created`) or changed
//! (`webhook_endpoint.updated`, by a `PATCH` or by the system after failures), deleted
//! (`webhook_endpoint.deleted`) or given a new secret (`webhook_endpoint.secret_rotated`).
//! Its rows name the tenant the endpoint is limited to, or none.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::foreign;
use super::payload::{IdPayload, Text, does_not_parse, id, id_payload, to_json};
use crate::audit::actor::Recorders;
use crate::audit::replay::{Replay, ReplayedEndpoint};
use crate::domain::rules::EndpointChange;
use crate::domain::{AuditEvent, EndpointId, EventTypes, TenantId};

/// The payload of `webhook_endpoint.created` and `webhook_endpoint.updated`: what the
/// endpoint is after the change, never its secret.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    url: Text<'a>,
    #[serde(borrow)]
    event_types: Vec<Text<'a>>,
    #[serde(borrow)]
    tenant_id: Option<Text<'a>>,
    enabled: bool,
}

/// The `action` column's text.
pub(super) fn action(event: &AuditEvent) -> &'static str {
    match event {
        AuditEvent::WebhookEndpoint { change, .. }
        | AuditEvent::WebhookEndpointId { change, .. } => match change {
            EndpointChange::Created => "webhook_endpoint.created",
            EndpointChange::Updated => "webhook_endpoint.updated",
            EndpointChange::Deleted => "webhook_endpoint.deleted",
            EndpointChange::SecretRotated => "webhook_endpoint.secret_rotated",
        },
        other => foreign(other),
    }
}

/// The tenant the endpoint is limited to, if it is (the column is then empty).
pub(super) fn tenant_id(event: &AuditEvent) -> Option<&TenantId> {
    match event {
        AuditEvent::WebhookEndpoint { tenant, .. }
        | AuditEvent::WebhookEndpointId { tenant, .. } => tenant.as_ref(),
        other => foreign(other),
    }
}

/// The payload.
pub(super) fn payload(event: &AuditEvent) -> String {
    match event {
        AuditEvent::WebhookEndpoint {
            id,
            url,
            event_types,
            tenant,
            enabled,
            ..
        } => to_json(&EndpointPayload {
            id: id.as_str().into(),
            url: url.as_str().into(),
            event_types: event_types.names().into_iter().map(Cow::Borrowed).collect(),
            tenant_id: tenant.as_ref().map(|t| t.as_str().into()),
            enabled: *enabled,
        }),
        AuditEvent::WebhookEndpointId { id, .. } => id_payload(id.as_str()),
        other => foreign(other),
    }
}

/// The change a `webhook_endpoint.*` action names.
fn endpoint_change(action: &str) -> Option<EndpointChange> {
    Some(match action {
        "webhook_endpoint.created" => EndpointChange::Created,
        "webhook_endpoint.updated" => EndpointChange::Updated,
        "webhook_endpoint.deleted" => EndpointChange::Deleted,
        "webhook_endpoint.secret_rotated" => EndpointChange::SecretRotated,
        _ => return None,
    })
}

/// The event of an `action` row of this family, or `None` for another family's action. The
/// row's `tenant_id` must be the endpoint's tenant, or empty for an endpoint of every tenant.
pub(super) fn parse(
    action: &str,
    tenant_id: &str,
    payload: &str,
) -> Option<Result<AuditEvent, String>> {
    let change = endpoint_change(action)?;
    Some((|| {
        let row_tenant = match tenant_id {
            "" => None,
            raw => Some(id(raw, TenantId::parse)?),
        };
        let event = read(change, payload, row_tenant).map_err(|e| does_not_parse(action, &e))??;
        if event.tenant_id().map_or("", TenantId::as_str) != tenant_id {
            return Err(format!(
                "the row's tenant_id {tenant_id:?} is not the endpoint's tenant"
            ));
        }
        Ok(event)
    })())
}

/// A webhook endpoint's event from its payload (the row's `tenant_id` is checked by the
/// caller). The outer error: a payload that does not parse; the inner: one that breaks a
/// rule.
fn read(
    change: EndpointChange,
    payload: &str,
    row_tenant: Option<TenantId>,
) -> Result<Result<AuditEvent, String>, serde_json::Error> {
    let endpoint = |raw: &str| id(raw, EndpointId::parse);
    let tenant = |raw: Option<&str>| raw.map(|t| id(t, TenantId::parse)).transpose();
    Ok(match change {
        EndpointChange::Created | EndpointChange::Updated => {
            let p: EndpointPayload<'_> = serde_json::from_str(payload)?;
            let names: Vec<&str> = p.event_types.iter().map(|n| n.as_ref()).collect();
            (|| {
                Ok(AuditEvent::WebhookEndpoint {
                    change,
                    id: endpoint(&p.id)?,
                    url: p.url.clone().into_owned(),
                    event_types: EventTypes::parse(&names)
                        .map_err(|(_, e)| format!("its event_types {e}"))?,
                    tenant: tenant(p.tenant_id.as_deref())?,
                    enabled: p.enabled,
                })
            })()
        }
        EndpointChange::Deleted | EndpointChange::SecretRotated => {
            let p: IdPayload<'_> = serde_json::from_str(payload)?;
            endpoint(&p.id).map(|id| AuditEvent::WebhookEndpointId {
                change,
                id,
                tenant: row_tenant,
            })
        }
    })
}

/// Who may record it: the admin, and the system too when it disables an endpoint that keeps
/// failing.
pub(super) fn recorders(event: &AuditEvent) -> Recorders {
    match event {
        AuditEvent::WebhookEndpoint {
            change: EndpointChange::Updated,
            enabled: false,
            ..
        } => Recorders::AdminOrSystem,
        AuditEvent::WebhookEndpoint { .. } | AuditEvent::WebhookEndpointId { .. } => {
            Recorders::Admin
        }
        other => foreign(other),
    }
}

/// What it does on replay: a creation makes an endpoint with an id never used; every other
/// change needs the endpoint there, and a deleted or rotated one keeps its tenant.
pub(super) fn replay(r: &mut Replay, seq: i64, event: AuditEvent) -> Result<(), String> {
    match event {
        AuditEvent::WebhookEndpoint {
            change,
            id,
            url,
            event_types,
            tenant,
            enabled,
        } => {
            let known = r.endpoints.get(&id).filter(|e| !e.deleted);
            match (change, known) {
                (EndpointChange::Created, None) if !r.endpoints.contains_key(&id) => {}
                (EndpointChange::Created, _) => {
                    return Err(format!("creates webhook endpoint {id} a second time"));
                }
                (_, None) => {
                    return Err(format!("changes webhook endpoint {id}, which is not there"));
                }
                (_, Some(_)) => {}
            }
            r.endpoints.insert(
                id,
                ReplayedEndpoint {
                    seq,
                    url,
                    event_types,
                    tenant,
                    enabled,
                    deleted: false,
                    stored: false,
                },
            );
        }
        AuditEvent::WebhookEndpointId { change, id, tenant } => {
            let Some(endpoint) = r.endpoints.get_mut(&id).filter(|e| !e.deleted) else {
                return Err(format!("changes webhook endpoint {id}, which is not there"));
            };
            if endpoint.tenant != tenant {
                return Err(format!("names webhook endpoint {id} with another tenant"));
            }
            endpoint.deleted = change == EndpointChange::Deleted;
        }
        other => foreign(&other),
    }
    Ok(())
}
