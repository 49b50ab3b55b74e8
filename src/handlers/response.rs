//! The answers handlers build: JSON bodies, `no-store`, a keyed write's answer (sent now or
//! replayed), and the store's errors as the API's.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use crate::auth::Principal;
use crate::domain::{BodyFingerprint, IdempotencyKey};
use crate::problem::{ApiError, FieldError};
use crate::store::{Keyed, StoreError, StoredResponse, Written};

/// The response every handler returns.
pub(crate) type HttpResponse = Response<Full<Bytes>>;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::TenantNotFound => Self::TenantNotFound,
            StoreError::BudgetNotFound => Self::BudgetNotFound,
            StoreError::ReservationNotFound => Self::ReservationNotFound,
            StoreError::EntryNotFound => Self::EntryNotFound,
            StoreError::EventNotFound => Self::EventNotFound,
            StoreError::EndpointNotFound => Self::WebhookEndpointNotFound,
            StoreError::DeliveryNotFound => Self::DeliveryNotFound,
            StoreError::EndpointDisabled => Self::WebhookEndpointDisabled,
            StoreError::UnknownTenantFilter => Self::ValidationFailed(vec![FieldError {
                field: "tenant_id".into(),
                message: "must name a tenant".into(),
            }]),
            StoreError::TenantNameTaken => Self::TenantNameTaken,
            StoreError::BudgetNameTaken => Self::BudgetNameTaken,
            StoreError::TenantTombstoned => Self::TenantTombstoned,
            StoreError::BudgetClosed => Self::BudgetClosed,
            StoreError::ReservationNotActive(state) => Self::ReservationNotActive(state),
            // In atomic units: `shortfall::refused` names the unit of the budget that is short.
            StoreError::InsufficientFunds(available, budget) => Self::InsufficientFunds {
                available: available.to_string(),
                unit: None,
                budget: budget.map(|b| b.as_str().to_owned()),
            },
            StoreError::BudgetHasOpenChildren => Self::BudgetHasOpenChildren,
            StoreError::BadParent(message) => Self::ValidationFailed(vec![FieldError {
                field: "parent_id".into(),
                message: message.into(),
            }]),
            StoreError::AmountOverflow => Self::AmountOverflow,
            StoreError::IdempotencyMismatch => Self::IdempotencyKeyMismatch,
            StoreError::QueueFull => Self::Unavailable("a store queue is full".into()),
            StoreError::Unavailable(cause) | StoreError::Busy(cause) => Self::Unavailable(cause),
            StoreError::Internal(cause) => Self::Internal(cause),
            StoreError::Unauthenticated => Self::Unauthorized,
        }
    }
}

/// A response with a JSON body.
pub(super) fn json_response(status: StatusCode, body: impl Into<Bytes>) -> HttpResponse {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A tenant's data is not for caches.
pub(super) fn no_store(mut response: HttpResponse) -> HttpResponse {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The response a keyed write keeps, sent now or replayed later.
pub(super) fn stored_response(stored: StoredResponse, replayed: bool) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).expect("a stored status is a 2xx");
    let mut response = no_store(json_response(status, stored.body));
    let headers = response.headers_mut();
    if let Some(location) = stored.location {
        headers.insert(
            header::LOCATION,
            HeaderValue::from_str(&location).expect("locations are visible ASCII"),
        );
    }
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// The answer to a write: a fresh result rendered by `render`, or the replay of the
/// response kept for its key.
pub(super) fn respond<T>(
    written: Written<T>,
    render: impl FnOnce(&T) -> StoredResponse,
) -> HttpResponse {
    match written {
        Written::Fresh(value) => stored_response(render(&value), false),
        Written::Replayed(stored) => stored_response(stored, true),
    }
}

/// What binds `key` (if the request sent one) for `principal`: the method, the path and the
/// body's fingerprint, and how to render the response to keep.
pub(super) fn keyed<T>(
    principal: &Principal,
    key: Option<IdempotencyKey>,
    method: &'static str,
    path: &str,
    fingerprint: BodyFingerprint,
    render: impl Fn(&T) -> StoredResponse + Send + Sync + 'static,
) -> Option<Keyed<T>> {
    key.map(|key| Keyed {
        principal: principal.idempotency_scope(),
        key,
        method,
        path: path.to_owned(),
        fingerprint,
        render: std::sync::Arc::new(render),
    })
}

/// A `200` with a JSON body that must not be cached.
pub(super) fn ok_json(body: String) -> HttpResponse {
    no_store(json_response(StatusCode::OK, body))
}
