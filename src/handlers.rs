//! One function per endpoint: request → domain types → store command → response.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::App;
use crate::domain::{Atomic, IdempotencyKey, NewTenant, TenantId, TenantName};
use crate::problem::{ApiError, FieldError};
use crate::store::CreateRequest;
use crate::views;

/// The largest request body read, in bytes; a larger one is `413` and is not read to its end.
pub const BODY_BYTES_MAX: usize = 65_536;

/// How long `/readyz` waits for the database.
pub const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// The OpenAPI document, embedded so the binary serves it with no file beside it.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A tenant's data is not for caches.
fn no_store(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub fn healthz() -> Response<Full<Bytes>> {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#)
}

pub async fn readyz(app: &App) -> Result<Response<Full<Bytes>>, ApiError> {
    match tokio::time::timeout(READY_TIMEOUT, app.store.ping()).await {
        Ok(Ok(())) => Ok(json_response(StatusCode::OK, r#"{"status":"ready"}"#)),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ApiError::Unavailable(
            "the database did not answer within 1 s".into(),
        )),
    }
}

pub fn metrics(app: &App) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(app.metrics.render(&app.store))));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

pub fn openapi() -> Response<Full<Bytes>> {
    json_response(StatusCode::OK, OPENAPI_JSON)
}

pub async fn get_tenant(app: &App, id: &str) -> Result<Response<Full<Bytes>>, ApiError> {
    let id = TenantId::parse(id).ok_or(ApiError::TenantNotFound)?;
    let tenant = app.store.get(id).await?;
    Ok(no_store(json_response(
        StatusCode::OK,
        views::tenant_json(&tenant),
    )))
}

pub async fn tombstone_tenant(app: &App, id: &str) -> Result<Response<Full<Bytes>>, ApiError> {
    let id = TenantId::parse(id).ok_or(ApiError::TenantNotFound)?;
    let tenant = app.store.tombstone(id).await?;
    Ok(no_store(json_response(
        StatusCode::OK,
        views::tenant_json(&tenant),
    )))
}

/// Checks in the contract's order: `413`, `415`, then a body sent with a transfer coding
/// that cannot be read (`501`, not in the contract's table), `400` (headers, then JSON),
/// `422`, `409`. The still-encoded body is read (and bounded) before it is refused.
pub async fn create_tenant(
    app: &App,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let (parts, body) = request.into_parts();
    let body = read_body(&parts.headers, body, app.limits.body_read_timeout).await?;
    let created = app
        .store
        .create(create_request(&parts.headers, &body)?)
        .await?;
    let mut response = no_store(json_response(StatusCode::CREATED, created.body));
    let headers = response.headers_mut();
    headers.insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/tenants/{}", created.id))
            .expect("ids are visible ASCII"),
    );
    if created.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// Turns a create's headers and whole body into a store command: `415`, `501`, then `400`
/// (the `Idempotency-Key`, then the JSON), then `422`. Everything below the socket and above the
/// store, so the fuzzer drives exactly what a client can reach.
pub fn create_request(headers: &HeaderMap, body: &[u8]) -> Result<CreateRequest, ApiError> {
    if !is_json(headers) || has_content_coding(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    check_transfer_coding(headers)?;
    let idempotency_key = idempotency_key(headers)?;
    let tenant = parse_create(body)?;
    Ok(CreateRequest {
        tenant,
        idempotency_key,
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
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > BODY_BYTES_MAX as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    let collected = tokio::time::timeout(timeout, Limited::new(body, BODY_BYTES_MAX).collect())
        .await
        .map_err(|_| ApiError::BodyTimeout)?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::PayloadTooLarge),
        Err(e) => Err(ApiError::MalformedJson(format!(
            "the body could not be read ({e})"
        ))),
    }
}

/// `application/json`, with any parameters, but no charset other than UTF-8 (the only one
/// JSON allows).
fn is_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let mut parts = value.split(';');
    let media_type = parts.next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
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

/// A JSON object's members in order, duplicates kept, so that a duplicate can be refused
/// rather than silently resolved.
struct Members(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Parses and validates a create body, reporting every bad field at once.
fn parse_create(body: &[u8]) -> Result<NewTenant, ApiError> {
    let Members(members) = serde_json::from_slice(body).map_err(|e| {
        let why = match e.classify() {
            serde_json::error::Category::Data => "it must be a JSON object".to_owned(),
            _ => e.to_string(),
        };
        ApiError::MalformedJson(why)
    })?;
    let mut errors = Vec::new();
    let mut reported = std::collections::HashSet::new();
    let mut field_error = |field: &str, message: &str| {
        if reported.insert(field.to_owned()) {
            errors.push(FieldError {
                field: field.to_owned(),
                message: message.to_owned(),
            });
        }
    };
    let mut seen = std::collections::HashMap::with_capacity(members.len());
    for (key, _) in &members {
        *seen.entry(key.as_str()).or_insert(0usize) += 1;
    }
    let (mut name, mut deposit) = (None, None);
    for (key, value) in &members {
        if seen[key.as_str()] > 1 {
            field_error(key, "must appear only once");
            continue;
        }
        match key.as_str() {
            "name" => match value {
                Value::String(raw) => match TenantName::parse(raw) {
                    Ok(parsed) => name = Some(parsed),
                    Err(message) => field_error(key, message),
                },
                _ => field_error(key, "must be a string"),
            },
            "opening_deposit_atomic" => match value {
                Value::String(raw) => match Atomic::parse(raw) {
                    Ok(parsed) => deposit = Some(parsed),
                    Err(message) => field_error(key, message),
                },
                Value::Number(_) => {
                    field_error(key, "must be a string of decimal digits, not a JSON number")
                }
                _ => field_error(key, "must be a string"),
            },
            _ => field_error(key, "is not a known member"),
        }
    }
    for required in ["name", "opening_deposit_atomic"] {
        if !seen.contains_key(required) {
            field_error(required, "is required");
        }
    }
    match (name, deposit) {
        (Some(name), Some(opening_deposit)) if errors.is_empty() => Ok(NewTenant {
            name,
            opening_deposit,
        }),
        _ => Err(ApiError::ValidationFailed(errors)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(body: &str) -> Vec<String> {
        match parse_create(body.as_bytes()) {
            Err(ApiError::ValidationFailed(errors)) => {
                errors.into_iter().map(|e| e.field).collect()
            }
            other => panic!("{body}: expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn a_good_body_parses() {
        let parsed =
            parse_create(br#"{ "opening_deposit_atomic": "7", "name": "acme" }"#).expect("valid");
        assert_eq!(parsed.name.as_str(), "acme");
        assert_eq!(parsed.opening_deposit.get(), 7);
    }

    #[test]
    fn every_bad_field_is_reported_once() {
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["name", "opening_deposit_atomic"]),
            (
                r#"{"name":"","opening_deposit_atomic":"01"}"#,
                &["name", "opening_deposit_atomic"],
            ),
            (
                r#"{"name":"a","opening_deposit_atomic":5}"#,
                &["opening_deposit_atomic"],
            ),
            (r#"{"name":1,"opening_deposit_atomic":"5"}"#, &["name"]),
            (
                r#"{"name":"a","opening_deposit_atomic":"5","nmae":"x"}"#,
                &["nmae"],
            ),
            (
                r#"{"name":"a","name":"b","opening_deposit_atomic":"5"}"#,
                &["name"],
            ),
            (
                r#"{"name":null,"opening_deposit_atomic":null,"x":1,"y":2}"#,
                &["name", "opening_deposit_atomic", "x", "y"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(fields(body), *want, "{body}");
        }
    }

    #[test]
    fn non_objects_are_malformed() {
        for body in [
            "",
            "[]",
            "\"x\"",
            "1",
            "null",
            "{",
            "{\"name\":\"a\"} x",
            "\u{fffd}",
        ] {
            assert!(
                matches!(
                    parse_create(body.as_bytes()),
                    Err(ApiError::MalformedJson(_))
                ),
                "{body:?}"
            );
        }
        assert!(matches!(
            parse_create(b"{\"name\":\"\xff\"}"),
            Err(ApiError::MalformedJson(_))
        ));
        let deep = format!("{{\"name\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse_create(deep.as_bytes()),
            Err(ApiError::MalformedJson(_))
        ));
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
    fn a_wrong_media_type_outranks_an_unknown_transfer_coding() {
        let body = br#"{"name":"a","opening_deposit_atomic":"1"}"#;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, chunked"),
        );
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(matches!(
            create_request(&headers, body),
            Err(ApiError::UnsupportedMediaType)
        ));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(matches!(
            create_request(&headers, body),
            Err(ApiError::UnsupportedTransferCoding)
        ));
    }

    #[test]
    fn a_content_coding_is_refused_but_identity() {
        for (value, coded) in [("gzip", true), ("identity", false), ("identity, br", true)] {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(value));
            assert_eq!(has_content_coding(&headers), coded, "{value}");
            let body = br#"{"name":"a","opening_deposit_atomic":"1"}"#;
            assert_eq!(
                matches!(
                    create_request(&headers, body),
                    Err(ApiError::UnsupportedMediaType)
                ),
                coded,
                "{value}"
            );
        }
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
}
