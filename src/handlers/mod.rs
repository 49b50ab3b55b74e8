//! One function per endpoint, a file per resource, with the resource's rows of the route
//! table beside them: request → domain types → store operation → response. What every
//! handler shares has a file for each job, re-exported here: reading a request's body and
//! head in the contract's order ([`body`]), building answers ([`response`]), the JSON object
//! reader ([`json`]) and the fields requests share ([`fields`]).

/// Many spends of one tenant in one request.
pub(crate) mod batch;
/// Reading a request's body and head: bounds, media type, framing, `Idempotency-Key`.
mod body;
/// Budgets, their movements and their ledgers.
pub(crate) mod budgets;
/// The events lists.
pub(crate) mod events;
/// The fields requests share: names, amounts, memos, TTLs, path ids.
mod fields;
/// Liveness, readiness, metrics and the API document.
pub(crate) mod health;
/// The JSON object reader and the field errors it collects.
mod json;
/// The query strings of lists.
mod query;
/// The members that make a budget renew: `period` and `alert_thresholds_atomic`.
mod renewal;
/// Reservations: reserve, commit, release, extend.
pub(crate) mod reservations;
/// Answers: JSON bodies, a keyed write's answer, the store's errors as the API's.
mod response;
/// A route as data: method, template, who may call it, handler; each resource lists its rows.
pub(crate) mod route;
/// A refusal for want of funds, told in the budget's unit.
mod shortfall;
/// `/v1/tenants` and `/v1/tenants/<id>`.
pub(crate) mod tenants;
/// `/v1/webhook-endpoints`: endpoints and their deliveries.
pub(crate) mod webhooks;

pub(crate) use body::drop_unread_body;
pub use body::{BATCH_BODY_BYTES_MAX, BODY_BYTES_MAX};
use body::{
    Post, check_json_body_headers, idempotency_key, read_body, read_patch, read_post,
    read_post_up_to,
};
#[cfg(test)]
use fields::invalid_fields;
use fields::{parse_amount, parse_memo, parse_name, parse_positive_amount, parse_ttl, tenant_id};
#[cfg(test)]
use json::member;
use json::{FieldErrors, Member, array_items, object_members};
pub(crate) use response::HttpResponse;
use response::{json_response, keyed, ok_json, respond};
use shortfall::refused;
