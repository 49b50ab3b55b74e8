//! One function per endpoint, a file per resource, with the resource's rows of the route
//! table beside them: request → domain types → store operation → response. This file holds
//! what every handler shares: reading a bounded body, the media type checks, the JSON object
//! reader, the `Idempotency-Key` header and the rendering of a keyed write's answer.

/// Budgets, their movements and their ledgers.
pub(crate) mod budgets;
/// The events lists.
pub(crate) mod events;
/// Liveness, readiness, metrics and the API document.
pub(crate) mod health;
/// The query strings of lists.
mod query;
/// Reservations: reserve, commit, release, extend.
mod renewal;
pub(crate) mod reservations;
/// A route as data: method, template, who may call it, handler; each resource lists its rows.
pub(crate) mod route;
/// `/v1/tenants` and `/v1/tenants/<id>`.
pub(crate) mod tenants;
/// `/v1/webhook-endpoints`: endpoints and their deliveries.
pub(crate) mod webhooks;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode, Version};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::app::App;
use crate::auth::Principal;
use crate::domain::{Atomic, BodyFingerprint, IdempotencyKey, Memo, Name, TenantId, Ttl};
use crate::problem::{ApiError, FieldError};
use crate::store::{Keyed, StoreError, StoredResponse, Written};

/// The largest request body read, in bytes; a larger one is `413` and is not read to its end.
pub const BODY_BYTES_MAX: usize = 65_536;

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
            StoreError::InsufficientFunds(available) => {
                Self::InsufficientFunds(available.to_string())
            }
            StoreError::AmountOverflow => Self::AmountOverflow,
            StoreError::IdempotencyMismatch => Self::IdempotencyKeyMismatch,
            StoreError::QueueFull => Self::Unavailable("a store queue is full".into()),
            StoreError::Unavailable(cause) => Self::Unavailable(cause),
            StoreError::Internal(cause) => Self::Internal(cause),
        }
    }
}

/// A response with a JSON body.
fn json_response(status: StatusCode, body: impl Into<Bytes>) -> HttpResponse {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A tenant's data is not for caches.
fn no_store(mut response: HttpResponse) -> HttpResponse {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The response a keyed write keeps, sent now or replayed later.
fn stored_response(stored: StoredResponse, replayed: bool) -> HttpResponse {
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
fn respond<T>(written: Written<T>, render: impl FnOnce(&T) -> StoredResponse) -> HttpResponse {
    match written {
        Written::Fresh(value) => stored_response(render(&value), false),
        Written::Replayed(stored) => stored_response(stored, true),
    }
}

/// What binds `key` (if the request sent one) for `principal`: the method, the path and the
/// body's fingerprint, and how to render the response to keep.
fn keyed<T>(
    principal: &Principal,
    key: Option<IdempotencyKey>,
    method: &'static str,
    path: &str,
    fingerprint: BodyFingerprint,
    render: impl FnOnce(&T) -> StoredResponse + Send + 'static,
) -> Option<Keyed<T>> {
    key.map(|key| Keyed {
        principal: principal.idempotency_scope(),
        key,
        method,
        path: path.to_owned(),
        fingerprint,
        render: Box::new(render),
    })
}

/// Reads at most [`BODY_BYTES_MAX`] bytes: a declared length over it is refused before a
/// byte is read, and a chunked body is cut off as soon as it passes it. A body that trickles
/// in slower than `timeout` is refused too, so it cannot hold a connection forever.
async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let too_large = ApiError::PayloadTooLarge {
        bytes_max: BODY_BYTES_MAX,
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > BODY_BYTES_MAX as u64) {
        return Err(too_large);
    }
    let collected = tokio::time::timeout(timeout, Limited::new(body, BODY_BYTES_MAX).collect())
        .await
        .map_err(|_| ApiError::BodyTimeout)?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large),
        Err(e) => Err(ApiError::MalformedJson(format!(
            "the body could not be read ({e})"
        ))),
    }
}

/// Reads and drops the body of a request that no handler read, such as one answered `401`
/// or `404` from its head alone, so that the connection can carry the next request. Left
/// unread, hyper would find the body abandoned once the answer's head is written, and close
/// the connection unless the rest of the body had already arrived, with nothing in the
/// answer to warn the client. Returns whether the body is gone; when it is not, the answer
/// must say `Connection: close`. It is not read when the connection ends with this request
/// anyway, when it is over [`BODY_BYTES_MAX`], or when the client waits for
/// `100 Continue` (asking for a body only to drop it would cost the client an upload); nor
/// past `timeout`.
pub(crate) async fn drop_unread_body(request: Request<Incoming>, timeout: Duration) -> bool {
    if request.body().is_end_stream() {
        return true;
    }
    if !keeps_alive(&request) || request.headers().contains_key(header::EXPECT) {
        return false;
    }
    let mut body = request.into_body();
    if body.size_hint().lower() > BODY_BYTES_MAX as u64 {
        return false;
    }
    let drain = async {
        let mut bytes = 0;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return false;
            };
            bytes += frame.data_ref().map_or(0, Bytes::len);
            if bytes > BODY_BYTES_MAX {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(timeout, drain).await.unwrap_or(false)
}

/// Whether the client means to send another request on this connection (RFC 9112 §9.3):
/// in HTTP/1.1 unless it said `Connection: close`, in HTTP/1.0 only if it said `keep-alive`.
fn keeps_alive<B>(request: &Request<B>) -> bool {
    let says = |option: &str| {
        request
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case(option))
    };
    if request.version() == Version::HTTP_10 {
        says("keep-alive")
    } else {
        !says("close")
    }
}

/// `415` for a body that is not `application/json` or carries a content coding, then `501`
/// for a transfer coding that cannot be read: the contract's order.
fn check_json_body_headers(headers: &HeaderMap) -> Result<(), ApiError> {
    if !is_json(headers) || has_content_coding(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    check_transfer_coding(headers)
}

/// Reads a `PATCH` in the contract's order: the body (`413`), then its media type
/// (`application/json` or `application/merge-patch+json`, else `415`) and transfer coding.
/// An `Idempotency-Key` is not read: a `PATCH` is idempotent by itself.
async fn read_patch(app: &App, request: Request<Incoming>) -> Result<Bytes, ApiError> {
    let (parts, body) = request.into_parts();
    let body = read_body(&parts.headers, body, app.limits.body_read_timeout).await?;
    let media_ok = is_media(&parts.headers, "application/json")
        || is_media(&parts.headers, "application/merge-patch+json");
    if !media_ok || has_content_coding(&parts.headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    check_transfer_coding(&parts.headers)?;
    Ok(body)
}

/// `application/json`, with any parameters, but no charset other than UTF-8 (the only one
/// JSON allows).
fn is_json(headers: &HeaderMap) -> bool {
    is_media(headers, "application/json")
}

/// One `Content-Type` of the JSON media type `media`, with any parameters but no charset
/// other than UTF-8.
fn is_media(headers: &HeaderMap, media: &str) -> bool {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let mut parts = value.split(';');
    let media_type = parts.next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case(media) {
        return false;
    }
    parts.all(|param| match param.split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
            value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        }
        _ => true,
    })
}

/// The HTTP layer decodes `chunked` and nothing else; it lets `gzip, chunked` through with
/// the body still gzipped. Any coding but a lone `chunked` is refused (RFC 9112 §6.1: 501).
fn check_transfer_coding(headers: &HeaderMap) -> Result<(), ApiError> {
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let codings = value
            .to_str()
            .map_err(|_| ApiError::UnsupportedTransferCoding)?;
        for coding in codings.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("chunked") {
                return Err(ApiError::UnsupportedTransferCoding);
            }
        }
    }
    Ok(())
}

/// A `Content-Encoding` other than `identity`: the body is not the JSON it claims to be
/// (RFC 9110 §15.5.16 answers it with 415).
fn has_content_coding(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|value| {
            !value.to_str().is_ok_and(|codings| {
                codings
                    .split(',')
                    .map(str::trim)
                    .all(|c| c.is_empty() || c.eq_ignore_ascii_case("identity"))
            })
        })
}

/// The request's `Idempotency-Key`, if it sent one; more than one is a `400`.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::InvalidHeader(
            "send at most one Idempotency-Key header",
        ));
    }
    IdempotencyKey::parse(value.as_bytes())
        .map(Some)
        .map_err(ApiError::InvalidHeader)
}

/// One member's value, as much as a validator needs to know of it. Numbers are classified,
/// never converted, so a number no float can hold (`1e400`) is still a number of a JSON
/// object, reported against its field rather than refusing the body.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Member {
    String(String),
    Number(String),
    Null,
    /// An object, as its JSON text.
    Object(String),
    /// An array, as its JSON text.
    Array(String),
    /// `true` or `false`.
    Bool(bool),
}

/// The parser's recursion limit: a body nested this deep (the object itself is one level) or
/// deeper is not JSON to it, and is refused the same way here.
const MEMBER_DEPTH_MAX: usize = 128;

/// A JSON object's members in order, duplicates kept, so that a duplicate can be refused
/// rather than silently resolved.
struct RawMembers(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for RawMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = RawMembers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMembers, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(entry);
                }
                Ok(RawMembers(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Reads a body as one JSON object: `400 malformed_json` unless it is one (nested deeper
/// than [`MEMBER_DEPTH_MAX`] counts as not JSON, as the parser would have it).
fn object_members(body: &[u8]) -> Result<Vec<(String, Member)>, ApiError> {
    let malformed = |e: serde_json::Error| {
        let why = match e.classify() {
            serde_json::error::Category::Data => "it must be a JSON object".to_owned(),
            _ => e.to_string(),
        };
        ApiError::MalformedJson(why)
    };
    let RawMembers(raw) = serde_json::from_slice(body).map_err(malformed)?;
    raw.into_iter()
        .map(|(name, value)| Ok((name, member(value.get())?)))
        .collect()
}

/// One JSON value the parser has accepted, classified.
fn member(text: &str) -> Result<Member, ApiError> {
    let malformed = |e: serde_json::Error| ApiError::MalformedJson(e.to_string());
    Ok(match text.as_bytes().first() {
        Some(b'"') => Member::String(serde_json::from_str(text).map_err(malformed)?),
        Some(b'-' | b'0'..=b'9') => Member::Number(text.to_owned()),
        Some(b'n') => Member::Null,
        Some(b'{') => {
            check_depth(text)?;
            Member::Object(text.to_owned())
        }
        Some(b'[') => {
            check_depth(text)?;
            Member::Array(text.to_owned())
        }
        Some(b't') => Member::Bool(true),
        _ => Member::Bool(false),
    })
}

/// The items of an array member, classified.
fn array_items(text: &str) -> Result<Vec<Member>, ApiError> {
    let items: Vec<Box<RawValue>> =
        serde_json::from_str(text).map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    items.iter().map(|item| member(item.get())).collect()
}

/// Refuses an array or object nested deeper than [`MEMBER_DEPTH_MAX`]. `text` is JSON the
/// parser has already accepted, so counting brackets outside strings is exact.
fn check_depth(text: &str) -> Result<(), ApiError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                // The object holding the member is the first level; like the parser, the
                // limit itself is refused.
                if 1 + depth >= MEMBER_DEPTH_MAX {
                    return Err(ApiError::MalformedJson(format!(
                        "it nests deeper than {MEMBER_DEPTH_MAX} levels"
                    )));
                }
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Collects a body's field errors, each field once, in the order met.
#[derive(Default)]
struct FieldErrors {
    errors: Vec<FieldError>,
    reported: HashSet<String>,
}

impl FieldErrors {
    fn add(&mut self, field: &str, message: &str) {
        if self.reported.insert(field.to_owned()) {
            self.errors.push(FieldError {
                field: field.to_owned(),
                message: message.to_owned(),
            });
        }
    }

    /// Walks `members` once: a duplicate is an error of its own, a known member goes to
    /// `check`, an unknown one is reported, and a missing `required` one too.
    fn walk(
        &mut self,
        members: &[(String, Member)],
        required: &[&str],
        mut check: impl FnMut(&mut Self, &str, &Member) -> bool,
    ) {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(members.len());
        for (name, _) in members {
            *seen.entry(name.as_str()).or_insert(0) += 1;
        }
        for (name, value) in members {
            if seen[name.as_str()] > 1 {
                self.add(name, "must appear only once");
            } else if !check(self, name, value) {
                self.add(name, "is not a known member");
            }
        }
        for name in required {
            if !seen.contains_key(name) {
                self.add(name, "is required");
            }
        }
    }

    /// `422` with every error found, if there was one.
    fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::ValidationFailed(self.errors))
        }
    }
}

/// A `POST` as every handler reads it: the path, the `Idempotency-Key` and the whole body.
struct Post {
    path: String,
    key: Option<IdempotencyKey>,
    body: Bytes,
}

/// Reads a `POST` in the contract's order: the body (`413`), its media type and transfer
/// coding (`415`, `501`), then the `Idempotency-Key` (`400`). With `body_optional`, an empty
/// body needs no media type: it stands for `{}`.
async fn read_post(
    app: &App,
    request: Request<Incoming>,
    body_optional: bool,
) -> Result<Post, ApiError> {
    let (parts, body) = request.into_parts();
    let body = read_body(&parts.headers, body, app.limits.body_read_timeout).await?;
    if !(body_optional && body.is_empty()) {
        check_json_body_headers(&parts.headers)?;
    }
    let key = idempotency_key(&parts.headers)?;
    let body = if body.is_empty() && body_optional {
        Bytes::from_static(b"{}")
    } else {
        body
    };
    Ok(Post {
        path: parts.uri.path().to_owned(),
        key,
        body,
    })
}

/// The tenant a path names, once the body's checks are done: an id that cannot exist is a
/// `404`, like an unknown one.
fn tenant_id(raw: &str) -> Result<TenantId, ApiError> {
    TenantId::parse(raw).ok_or(ApiError::TenantNotFound)
}

/// A `200` with a JSON body that must not be cached.
fn ok_json(body: String) -> HttpResponse {
    no_store(json_response(StatusCode::OK, body))
}

/// A name member (a tenant's or a budget's), or its error.
fn parse_name(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Name> {
    match value {
        Member::String(raw) => Name::parse(raw)
            .map_err(|message| errors.add(field, message))
            .ok(),
        _ => {
            errors.add(field, "must be a string");
            None
        }
    }
}

/// An amount member (a string of decimal digits), or its error.
fn parse_amount(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Atomic> {
    match value {
        Member::String(raw) => Atomic::parse(raw)
            .map_err(|message| errors.add(field, message))
            .ok(),
        Member::Number(_) => {
            errors.add(
                field,
                "must be a string of decimal digits, not a JSON number",
            );
            None
        }
        _ => {
            errors.add(field, "must be a string");
            None
        }
    }
}

/// An amount member of at least 1, or its error.
fn parse_positive_amount(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Atomic> {
    let amount = parse_amount(errors, field, value)?;
    if amount.get() == 0 {
        errors.add(field, "must be at least 1");
        return None;
    }
    Some(amount)
}

/// An optional memo member (`null` is no memo), or its error.
fn parse_memo(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Option<Memo>> {
    match value {
        Member::Null => Some(None),
        Member::String(raw) => Memo::parse(raw)
            .map(Some)
            .map_err(|message| errors.add(field, message))
            .ok(),
        _ => {
            errors.add(field, "must be a string or null");
            None
        }
    }
}

/// A TTL member: a JSON integer of seconds, or its error.
fn parse_ttl(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Ttl> {
    match value {
        Member::Number(raw) => Ttl::parse(raw)
            .map_err(|message| errors.add(field, message))
            .ok(),
        _ => {
            errors.add(field, "must be a JSON integer of seconds from 1 to 86400");
            None
        }
    }
}

/// The fields a validation error names, for the handlers' tests.
#[cfg(test)]
fn invalid_fields(result: Result<impl std::fmt::Debug, ApiError>) -> Vec<String> {
    match result {
        Err(ApiError::ValidationFailed(errors)) => errors.into_iter().map(|e| e.field).collect(),
        other => panic!("expected a validation error, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_classified_not_converted() {
        let members = object_members(
            br#"{"s":"x\u00e9","n":1e400,"m":-1e400,"i":123456789012345678901234567890123456789012,"z":null,"a":[1],"o":{},"b":true}"#,
        )
        .expect("an object");
        let kinds: Vec<(&str, &Member)> = members.iter().map(|(k, v)| (k.as_str(), v)).collect();
        assert_eq!(
            kinds,
            vec![
                ("s", &Member::String("xé".into())),
                ("n", &Member::Number("1e400".into())),
                ("m", &Member::Number("-1e400".into())),
                (
                    "i",
                    &Member::Number("123456789012345678901234567890123456789012".into())
                ),
                ("z", &Member::Null),
                ("a", &Member::Array("[1]".into())),
                ("o", &Member::Object("{}".into())),
                ("b", &Member::Bool(true)),
            ]
        );
    }

    #[test]
    fn non_objects_are_malformed() {
        let deep = format!("{{\"name\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        let just_too_deep = format!(
            "{{\"name\":{}{}}}",
            "[".repeat(MEMBER_DEPTH_MAX - 1),
            "]".repeat(MEMBER_DEPTH_MAX - 1)
        );
        for body in [
            "",
            "[]",
            "\"x\"",
            "1",
            "1e400",
            "null",
            "{",
            "{\"name\":\"a\"} x",
            "\u{fffd}",
            &deep,
            &just_too_deep,
        ] {
            assert!(
                matches!(
                    object_members(body.as_bytes()),
                    Err(ApiError::MalformedJson(_))
                ),
                "{body:?}"
            );
        }
        assert!(matches!(
            object_members(b"{\"name\":\"\xff\"}"),
            Err(ApiError::MalformedJson(_))
        ));
        let deep_enough = format!(
            "{{\"name\":{}{}}}",
            "[".repeat(MEMBER_DEPTH_MAX - 2),
            "]".repeat(MEMBER_DEPTH_MAX - 2)
        );
        assert!(object_members(deep_enough.as_bytes()).is_ok());
        // The parser itself draws the line at the same place.
        assert!(serde_json::from_str::<serde_json::Value>(&deep_enough).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&just_too_deep).is_err());
    }

    #[test]
    fn only_plain_chunked_framing_is_read() {
        let cases = [
            ("chunked", true),
            ("Chunked", true),
            ("gzip, chunked", false),
            ("chunked, gzip", false),
            ("identity", false),
            ("x-custom, chunked", false),
        ];
        for (value, readable) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static(value));
            assert_eq!(check_transfer_coding(&headers).is_ok(), readable, "{value}");
        }
        assert!(check_transfer_coding(&HeaderMap::new()).is_ok());
    }

    #[test]
    fn json_media_types_are_recognised() {
        let cases = [
            ("application/json", true),
            ("Application/JSON", true),
            ("application/json; charset=utf-8", true),
            ("application/json;charset=\"UTF-8\"", true),
            ("application/json; charset=latin1", false),
            ("application/vnd.x+json", false),
            ("text/plain", false),
            ("application/jsonx", false),
        ];
        for (value, want) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&headers), want, "{value}");
        }
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn a_client_keeps_the_connection_unless_it_says_otherwise() {
        let cases = [
            (Version::HTTP_11, None, true),
            (Version::HTTP_11, Some("close"), false),
            (Version::HTTP_11, Some("Keep-Alive, Close"), false),
            (Version::HTTP_11, Some("keep-alive"), true),
            (Version::HTTP_11, Some("closed"), true),
            (Version::HTTP_10, None, false),
            (Version::HTTP_10, Some("keep-alive"), true),
            (Version::HTTP_10, Some("close"), false),
        ];
        for (version, connection, want) in cases {
            let mut request = Request::new(());
            *request.version_mut() = version;
            if let Some(value) = connection {
                request
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static(value));
            }
            assert_eq!(
                keeps_alive(&request),
                want,
                "{version:?} with Connection: {connection:?}"
            );
        }
    }

    #[test]
    fn a_content_coding_is_refused_but_identity() {
        for (value, coded) in [("gzip", true), ("identity", false), ("identity, br", true)] {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(value));
            assert_eq!(has_content_coding(&headers), coded, "{value}");
        }
    }
}
