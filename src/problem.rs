//! The one error type of the HTTP boundary, rendered as RFC 9457 `application/problem+json`.
//!
//! Every row of the contract's error table is a variant here (but `409
//! idempotency_key_in_flight`, which this server never needs: one writer runs requests with
//! the same key one after the other, so a waiting request always gets its replay), and [`ApiError::status`] and
//! [`ApiError::code`] map each to its status and stable code in one place. A `500` says
//! nothing of its cause to the client; the cause goes to the log with the request id.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use serde::Serialize;

/// Seconds a client should wait before retrying a `503`.
pub(crate) const RETRY_AFTER_S: u32 = 1;

/// One bad field of a request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// The member's name.
    pub field: String,
    /// What is wrong with it, a phrase that follows the name.
    pub message: String,
}

/// Every way a request can fail, one variant per row of the contract's error table.
#[derive(Debug)]
pub enum ApiError {
    /// The body is not JSON, or not a JSON object; why, for the client.
    MalformedJson(String),
    /// A malformed header, said in a sentence.
    InvalidHeader(&'static str),
    /// No valid token.
    Unauthorized,
    /// An access token of the identity provider that fails a check; the phrase names the
    /// check, never a value.
    InvalidToken(&'static str),
    /// A valid token outside its scope.
    Forbidden,
    /// The principal is over its rate limit: whole seconds until one more is allowed.
    RateLimited {
        /// `Retry-After`, at least 1.
        retry_after_s: u64,
    },
    /// No such route.
    RouteNotFound,
    /// No such tenant.
    TenantNotFound,
    /// A known path with another method.
    MethodNotAllowed {
        /// The methods the path answers.
        allow: &'static str,
    },
    /// An active tenant already has the name.
    TenantNameTaken,
    /// A bad or unknown query parameter, every one of them.
    InvalidQuery(Vec<FieldError>),
    /// No such budget under the tenant.
    BudgetNotFound,
    /// No such reservation under the tenant.
    ReservationNotFound,
    /// No such ledger entry under the budget.
    EntryNotFound,
    /// No such event (or one erased past its retention).
    EventNotFound,
    /// No such webhook endpoint, or a deleted one.
    WebhookEndpointNotFound,
    /// No such delivery of the endpoint.
    DeliveryNotFound,
    /// A delivery retry on a disabled endpoint.
    WebhookEndpointDisabled,
    /// An open budget of the tenant already has the name.
    BudgetNameTaken,
    /// The movement needs more than is available.
    InsufficientFunds {
        /// What is available on the nearest level that is short, in decimal digits.
        available: String,
        /// That budget's unit, when it has one other than the default `atomic`.
        unit: Option<String>,
        /// That budget: the one the request moves, or one of its ancestors.
        budget: Option<String>,
    },
    /// A credit would carry `credited_atomic` past `u128`.
    AmountOverflow,
    /// Closing a budget one of whose children is open.
    BudgetHasOpenChildren,
    /// The reservation is not active; its state.
    ReservationNotActive(&'static str),
    /// The budget is closed.
    BudgetClosed,
    /// The tenant is tombstoned.
    TenantTombstoned,
    /// An atomic batch one of whose operations failed: each operation's result, a JSON array
    /// ([`crate::handlers`]' batch), nothing applied.
    BatchFailed {
        /// The `results` member: each failing operation's status and problem, `424` for the
        /// others.
        results: String,
    },
    /// The body is larger than the bound.
    PayloadTooLarge {
        /// The bound, in bytes.
        bytes_max: usize,
    },
    /// The body did not arrive within the body read timeout.
    BodyTimeout,
    /// The body is not `application/json`, or carries a content coding.
    UnsupportedMediaType,
    /// A transfer coding other than `chunked`: the body cannot be read as sent.
    UnsupportedTransferCoding,
    /// Fields that break a rule, every one of them.
    ValidationFailed(Vec<FieldError>),
    /// The key is bound to another method, path or body.
    IdempotencyKeyMismatch,
    /// A bug. The string is for the log only.
    Internal(String),
    /// The database cannot take the request now. The string is for the log only.
    Unavailable(String),
    /// The identity provider's keys cannot be had to check an access token. The string is
    /// for the log only.
    IdentityProviderUnavailable(String),
}

impl ApiError {
    /// The status code of the contract's row.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MalformedJson(_) | Self::InvalidHeader(_) | Self::InvalidQuery(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::Unauthorized | Self::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::RouteNotFound
            | Self::TenantNotFound
            | Self::BudgetNotFound
            | Self::ReservationNotFound
            | Self::EntryNotFound
            | Self::EventNotFound
            | Self::WebhookEndpointNotFound
            | Self::DeliveryNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::TenantNameTaken
            | Self::BudgetNameTaken
            | Self::InsufficientFunds { .. }
            | Self::AmountOverflow
            | Self::BudgetHasOpenChildren
            | Self::ReservationNotActive(_)
            | Self::BudgetClosed
            | Self::TenantTombstoned
            | Self::BatchFailed { .. }
            | Self::WebhookEndpointDisabled => StatusCode::CONFLICT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            Self::ValidationFailed(_) | Self::IdempotencyKeyMismatch => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) | Self::IdentityProviderUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// The stable, machine-readable code of the contract's row.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MalformedJson(_) => "malformed_json",
            Self::InvalidHeader(_) => "invalid_header",
            Self::Unauthorized | Self::InvalidToken(_) => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::RateLimited { .. } => "rate_limited",
            Self::RouteNotFound => "not_found",
            Self::TenantNotFound => "tenant_not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::TenantNameTaken => "tenant_name_taken",
            Self::InvalidQuery(_) => "invalid_query",
            Self::BudgetNotFound => "budget_not_found",
            Self::ReservationNotFound => "reservation_not_found",
            Self::EntryNotFound => "entry_not_found",
            Self::EventNotFound => "event_not_found",
            Self::WebhookEndpointNotFound => "webhook_endpoint_not_found",
            Self::DeliveryNotFound => "delivery_not_found",
            Self::WebhookEndpointDisabled => "webhook_endpoint_disabled",
            Self::BudgetNameTaken => "budget_name_taken",
            Self::InsufficientFunds { .. } => "insufficient_funds",
            Self::AmountOverflow => "amount_overflow",
            Self::BudgetHasOpenChildren => "budget_has_open_children",
            Self::ReservationNotActive(_) => "reservation_not_active",
            Self::BudgetClosed => "budget_closed",
            Self::TenantTombstoned => "tenant_tombstoned",
            Self::BatchFailed { .. } => "batch_failed",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::BodyTimeout => "request_timeout",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::UnsupportedTransferCoding => "unsupported_transfer_coding",
            Self::ValidationFailed(_) => "validation_failed",
            Self::IdempotencyKeyMismatch => "idempotency_key_mismatch",
            Self::Internal(_) => "internal",
            Self::Unavailable(_) | Self::IdentityProviderUnavailable(_) => "unavailable",
        }
    }

    /// A sentence for the client. It never holds a secret or an internal cause.
    fn detail(&self) -> String {
        match self {
            Self::MalformedJson(why) => format!("the request body is not a JSON object: {why}"),
            Self::InvalidHeader(why) => format!("{why}."),
            Self::Unauthorized => {
                "a valid bearer token is required in the Authorization header".into()
            }
            Self::InvalidToken(why) => format!("the access token was refused: {why}"),
            Self::Forbidden => "this credential may not do this".into(),
            Self::RateLimited { retry_after_s } => format!(
                "this credential is over its rate limit; one more request is allowed in \
                 {retry_after_s} s"
            ),
            Self::RouteNotFound => "there is no such resource".into(),
            Self::TenantNotFound => "there is no tenant with this id".into(),
            Self::MethodNotAllowed { allow } => {
                format!("this resource allows only {allow}")
            }
            Self::TenantNameTaken => "an active tenant already has this name".into(),
            Self::InvalidQuery(errors) => match errors.len() {
                1 => "the query has 1 invalid parameter".into(),
                n => format!("the query has {n} invalid parameters"),
            },
            Self::BudgetNotFound => "this tenant has no budget with this id".into(),
            Self::ReservationNotFound => "this tenant has no reservation with this id".into(),
            Self::EntryNotFound => "this budget has no ledger entry with this id".into(),
            Self::EventNotFound => {
                "no event has this id (events are kept for the retention period)".into()
            }
            Self::WebhookEndpointNotFound => "no webhook endpoint has this id".into(),
            Self::DeliveryNotFound => "this webhook endpoint has no delivery with this id".into(),
            Self::WebhookEndpointDisabled => {
                "the webhook endpoint is disabled: enable it to retry its deliveries".into()
            }
            Self::BudgetNameTaken => "an open budget of this tenant already has this name".into(),
            Self::InsufficientFunds {
                available,
                unit,
                budget,
            } => {
                let unit = unit.as_deref().unwrap_or("atomic units");
                match budget {
                    Some(budget) => {
                        format!("budget {budget} has only {available} {unit} available")
                    }
                    None => format!("the budget has only {available} {unit} available"),
                }
            }
            Self::AmountOverflow => {
                "this credit would carry the budget's credited amount past the largest u128".into()
            }
            Self::BudgetHasOpenChildren => {
                "a budget under this one is open: close its children first".into()
            }
            Self::ReservationNotActive(state) => {
                format!("the reservation is {state}, no longer active")
            }
            Self::BudgetClosed => "the budget is closed and never moves again".into(),
            Self::TenantTombstoned => "the tenant is tombstoned; nothing of it moves again".into(),
            Self::BatchFailed { .. } => {
                "an operation of this atomic batch failed, so none was applied: see results".into()
            }
            Self::PayloadTooLarge { bytes_max } => {
                format!("the request body exceeds {bytes_max} bytes")
            }
            Self::BodyTimeout => "the request body did not arrive in time".into(),
            Self::UnsupportedMediaType => {
                "the request body must be application/json, without a content coding".into()
            }
            Self::UnsupportedTransferCoding => {
                "the only transfer coding understood is chunked".into()
            }
            Self::ValidationFailed(errors) => match errors.len() {
                1 => "the request body has 1 invalid field".into(),
                n => format!("the request body has {n} invalid fields"),
            },
            Self::IdempotencyKeyMismatch => {
                "this Idempotency-Key was used with a different request body".into()
            }
            Self::Internal(_) => "the server failed to handle this request".into(),
            Self::Unavailable(_) => "the database cannot take this request now; retry".into(),
            Self::IdentityProviderUnavailable(_) => {
                "the identity provider's keys cannot be had to check this token now; retry".into()
            }
        }
    }

    /// The cause to log, for errors whose cause is not the client's to see.
    pub(crate) fn log_cause(&self) -> Option<&str> {
        match self {
            Self::Internal(cause)
            | Self::Unavailable(cause)
            | Self::IdentityProviderUnavailable(cause) => Some(cause),
            _ => None,
        }
    }

    /// The problem document, with the headers its row needs (`WWW-Authenticate`, `Allow`,
    /// `Retry-After`, or `Connection: close` where the body was not read to its end).
    pub fn into_response(self, request_id: &str) -> Response<Full<Bytes>> {
        let status = self.status();
        let json = self.body(Some(request_id));
        let mut response = Response::new(Full::new(Bytes::from(json)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match self {
            Self::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"tenantd\""),
                );
            }
            Self::InvalidToken(_) => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"tenantd\", error=\"invalid_token\""),
                );
            }
            Self::MethodNotAllowed { allow } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            Self::Unavailable(_) | Self::IdentityProviderUnavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            }
            Self::RateLimited { retry_after_s } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
            }
            // The rest of an oversized body was not read, so the connection cannot carry
            // another request.
            Self::PayloadTooLarge { .. } | Self::BodyTimeout | Self::UnsupportedTransferCoding => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }

    /// The problem document's JSON: with `request_id` as an answer's, without one as an
    /// operation's result in a batch.
    pub(crate) fn body(&self, request_id: Option<&str>) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            r#type: &'static str,
            title: &'static str,
            status: u16,
            code: &'static str,
            detail: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            errors: Option<&'a [FieldError]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            budget_id: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            available_atomic: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            state: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            results: Option<&'a serde_json::value::RawValue>,
            #[serde(skip_serializing_if = "Option::is_none")]
            request_id: Option<&'a str>,
        }
        let status = self.status();
        let errors = match self {
            Self::ValidationFailed(errors) | Self::InvalidQuery(errors) => Some(errors.as_slice()),
            _ => None,
        };
        let (budget_id, available_atomic) = match self {
            Self::InsufficientFunds {
                available, budget, ..
            } => (budget.as_deref(), Some(available.as_str())),
            _ => (None, None),
        };
        let state = match self {
            Self::ReservationNotActive(state) => Some(*state),
            _ => None,
        };
        let results = match self {
            Self::BatchFailed { results } => {
                serde_json::from_str::<&serde_json::value::RawValue>(results).ok()
            }
            _ => None,
        };
        let body = Body {
            r#type: "about:blank",
            title: title(status),
            status: status.as_u16(),
            code: self.code(),
            detail: self.detail(),
            errors,
            budget_id,
            available_atomic,
            state,
            results,
            request_id,
        };
        serde_json::to_vec(&body).expect("a problem body always serializes")
    }
}

/// The status's reason phrase as RFC 9110 names it (which renamed 413 and 422).
fn title(status: StatusCode) -> &'static str {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => "Content Too Large",
        StatusCode::UNPROCESSABLE_ENTITY => "Unprocessable Content",
        other => other.canonical_reason().unwrap_or("Error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn body_json(error: ApiError) -> (StatusCode, serde_json::Value) {
        let response = error.into_response("req-1");
        let status = response.status();
        let bytes = futures_body(response.into_body());
        (status, serde_json::from_slice(&bytes).expect("json"))
    }

    fn futures_body(body: Full<Bytes>) -> Bytes {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(body.collect())
            .expect("infallible")
            .to_bytes()
    }

    #[test]
    fn problems_carry_status_code_detail_and_request_id() {
        let (status, json) = body_json(ApiError::ValidationFailed(vec![FieldError {
            field: "name".into(),
            message: "must not be empty".into(),
        }]));
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(json["type"], "about:blank");
        assert_eq!(json["title"], "Unprocessable Content");
        assert_eq!(json["status"], 422);
        assert_eq!(json["code"], "validation_failed");
        assert_eq!(json["detail"], "the request body has 1 invalid field");
        assert_eq!(json["errors"][0]["field"], "name");
        assert_eq!(json["request_id"], "req-1");
    }

    #[test]
    fn internal_causes_stay_out_of_the_body() {
        let (_, json) = body_json(ApiError::Internal("secret cause".into()));
        assert!(!json.to_string().contains("secret cause"));
        let (_, json) = body_json(ApiError::Unavailable("disk full at /x".into()));
        assert!(!json.to_string().contains("/x"));
    }
}
