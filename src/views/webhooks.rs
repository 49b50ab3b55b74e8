//! Webhook endpoints, their secret only where it is shown, and their deliveries.

use serde::Serialize;

use super::{page_json, to_json};
use crate::domain::{
    Delivery, DeliveryId, Endpoint, EndpointId, EventId, Memo, Page, TenantId, Timestamp,
};

/// A webhook endpoint; its secret only in the answer that made it (a create, a rotation).
#[derive(Serialize)]
struct EndpointView<'a> {
    id: &'a EndpointId,
    url: &'a str,
    description: Option<&'a Memo>,
    event_types: Vec<&'static str>,
    tenant_id: Option<&'a TenantId>,
    state: &'static str,
    disabled_reason: Option<&'static str>,
    created_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<&'a str>,
}

impl<'a> From<&'a Endpoint> for EndpointView<'a> {
    fn from(e: &'a Endpoint) -> Self {
        Self {
            id: &e.id,
            url: &e.url,
            description: e.description.as_ref(),
            event_types: e.event_types.names(),
            tenant_id: e.tenant_id.as_ref(),
            state: e.state.name(),
            disabled_reason: e.state.reason().map(|r| r.name()),
            created_at: e.created_at,
            secret: None,
        }
    }
}

/// A webhook delivery.
#[derive(Serialize)]
struct DeliveryView<'a> {
    id: &'a DeliveryId,
    endpoint_id: &'a EndpointId,
    event_id: &'a EventId,
    event_type: &'static str,
    state: &'static str,
    attempts: u32,
    last_attempt_at: Option<Timestamp>,
    last_status: Option<u16>,
    last_error: Option<&'a str>,
    next_attempt_at: Option<Timestamp>,
    succeeded_at: Option<Timestamp>,
}

impl<'a> From<&'a Delivery> for DeliveryView<'a> {
    fn from(d: &'a Delivery) -> Self {
        Self {
            id: &d.id,
            endpoint_id: &d.endpoint_id,
            event_id: &d.event_id,
            event_type: d.event_type.name(),
            state: d.state.name(),
            attempts: d.attempts,
            last_attempt_at: d.last_attempt_at,
            last_status: d.last_status,
            last_error: d.last_error.as_deref(),
            next_attempt_at: d.next_attempt_at,
            succeeded_at: d.succeeded_at,
        }
    }
}

/// A webhook endpoint, with its secret (as `whsec_…` text) when one is given: the answer to a
/// create or a rotation, the only ones that show it.
pub(crate) fn endpoint_json(endpoint: &Endpoint, secret: Option<&str>) -> String {
    to_json(&EndpointView {
        secret,
        ..EndpointView::from(endpoint)
    })
}

/// A page of webhook endpoints.
pub(crate) fn endpoints_json(page: &Page<Endpoint>) -> String {
    page_json::<_, EndpointView<'_>, _>(page, |e| &e.id)
}

/// A webhook delivery.
pub(crate) fn delivery_json(delivery: &Delivery) -> String {
    to_json(&DeliveryView::from(delivery))
}

/// A page of an endpoint's deliveries.
pub(crate) fn deliveries_json(page: &Page<Delivery>) -> String {
    page_json::<_, DeliveryView<'_>, _>(page, |d| &d.id)
}
