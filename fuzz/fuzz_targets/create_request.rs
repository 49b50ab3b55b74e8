//! Fuzzes everything a `POST /v1/tenants` client controls below the socket: the headers the
//! handler reads and the whole body, through `handlers::create_request`, `auth::bearer_token`
//! and `domain::valid_request_id`, and every error rendered as the client would see it.
//!
//! # Input layout
//!
//! ```text
//! [ct] [key] [auth] [rid] [raw values ...] [body ...]
//! ```
//!
//! The first four bytes choose the `Content-Type`, `Idempotency-Key`, `Authorization` and
//! `X-Request-Id` headers, one selector each (see [`header_values`]): absent, a value from a
//! table of edge cases, a raw value taken from the input (a length byte, then that many
//! bytes), or two values. What is left is the request body. Inputs shorter than four bytes
//! have no headers and are all body.
//!
//! Any panic is a finding, and so is a broken invariant: an accepted request whose values
//! do not re-validate, a status outside the create's error table, a problem body that is not
//! JSON or does not match its error, a 422 with no `errors`.

#![no_main]

use std::collections::HashSet;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Body as _;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

use tenantd::fuzzing::{
    ApiError, REQUEST_ID_BYTES_MAX, TOKEN_BYTES_MAX, atomic, bearer_token, create_request,
    is_idempotency_key, is_tenant_id, is_tenant_name, token_tenant, ulid_value,
    valid_request_id,
};

/// `Content-Type` values the contract accepts, refuses, or has to think about.
const CONTENT_TYPES: &[&[u8]] = &[
    b"application/json",
    b"application/json; charset=utf-8",
    b"Application/JSON;charset=\"UTF-8\"",
    b"application/json; charset=latin1",
    b"application/json; q=1; charset",
    b"text/plain",
    b"application/jsonx",
    b"",
];

/// `Idempotency-Key` values on and around the 1-to-255 visible-ASCII rule.
const KEYS: &[&[u8]] = &[
    b"k",
    b"key-0001",
    &[b'k'; 255],
    &[b'k'; 256],
    b"has space",
    b"\x80obs-text",
    b"",
];

/// `Authorization` values, a well-formed tenant token among them.
const AUTHORIZATIONS: &[&[u8]] = &[
    b"Bearer abc",
    b"bearer tkn_01ARZ3NDEKTSV4RRFFQ69G5FAV_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    b"BEARER  tkn_01ARZ3NDEKTSV4RRFFQ69G5FAV_x ",
    b"Basic YWRtaW46YWRtaW4=",
    b"Bearer ",
    b"Bearer a b",
    &[b'a'; TOKEN_BYTES_MAX + 1],
];

/// `X-Request-Id` values on and around the 1-to-128 visible-ASCII rule.
const REQUEST_IDS: &[&[u8]] = &[
    b"req-1",
    b"\"quoted\\\"",
    &[b'r'; REQUEST_ID_BYTES_MAX],
    &[b'r'; REQUEST_ID_BYTES_MAX + 1],
    b"a b",
];

fuzz_target!(|data: &[u8]| {
    let (headers, body) = split(data);
    check_create(&headers, body);
    check_bearer(&headers);
    for value in headers.get_all("x-request-id") {
        check_request_id(value.as_bytes());
    }
    // Every string parser also sees the body as one string.
    if let Ok(text) = std::str::from_utf8(body) {
        check_parsers(text);
    }
});

/// Splits the input into headers and a body, as described in the crate doc.
fn split(data: &[u8]) -> (HeaderMap, &[u8]) {
    let mut headers = HeaderMap::new();
    let Some((selectors, mut rest)) = data.split_first_chunk::<4>() else {
        return (headers, data);
    };
    let names = [
        (CONTENT_TYPE, CONTENT_TYPES),
        (HeaderName::from_static("idempotency-key"), KEYS),
        (AUTHORIZATION, AUTHORIZATIONS),
        (HeaderName::from_static("x-request-id"), REQUEST_IDS),
    ];
    for (selector, (name, table)) in selectors.iter().zip(names) {
        for value in header_values(*selector, table, &mut rest) {
            // hyper never hands over a value with control characters; neither do we.
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.append(name.clone(), value);
            }
        }
    }
    (headers, rest)
}

/// One header's values: the low two bits of `selector` say how many and from where, the
/// rest pick a table entry.
fn header_values(selector: u8, table: &[&[u8]], rest: &mut &[u8]) -> Vec<Vec<u8>> {
    let entry = table[usize::from(selector >> 2) % table.len()].to_vec();
    match selector & 0b11 {
        0 => vec![],
        1 => vec![entry],
        2 => vec![take_raw(rest)],
        _ => vec![entry, take_raw(rest)],
    }
}

/// A value from the input: a length byte, then up to that many bytes.
fn take_raw(rest: &mut &[u8]) -> Vec<u8> {
    let Some((&len, tail)) = rest.split_first() else {
        return Vec::new();
    };
    let (value, tail) = tail.split_at(usize::from(len).min(tail.len()));
    *rest = tail;
    value.to_vec()
}

/// The create request itself: an accepted one re-validates and matches its body exactly; a
/// refused one has a status from the create's table and renders as a matching problem.
fn check_create(headers: &HeaderMap, body: &[u8]) {
    match create_request(headers, body) {
        Ok(request) => {
            let name = request.name();
            let amount = request.opening_deposit();
            assert!(is_tenant_name(name));
            assert_eq!(atomic(&amount.to_string()), Some(amount));
            let json: Value = serde_json::from_slice(body).expect("an accepted body is JSON");
            let object = json.as_object().expect("an accepted body is an object");
            assert_eq!(object.len(), 2, "only the two known members: {object:?}");
            assert_eq!(object["name"].as_str(), Some(name));
            assert_eq!(
                object["opening_deposit_atomic"].as_str(),
                Some(amount.to_string().as_str())
            );
            let keys: Vec<&HeaderValue> = headers.get_all("idempotency-key").iter().collect();
            match (request.idempotency_key(), &keys[..]) {
                (None, []) => {}
                (Some(key), [raw]) => {
                    assert_eq!(key.as_bytes(), raw.as_bytes());
                    assert!(is_idempotency_key(raw.as_bytes()));
                }
                other => panic!("the key does not match the headers: {other:?}"),
            }
            let types = headers.get_all(CONTENT_TYPE).iter().count();
            assert_eq!(types, 1, "accepted with {types} Content-Type headers");
        }
        Err(error) => {
            let request_id = headers
                .get("x-request-id")
                .and_then(|v| valid_request_id(v.as_bytes()))
                .unwrap_or("req");
            check_problem(error, request_id);
        }
    }
}

/// Renders `error` as the server would and checks the problem body against it.
fn check_problem(error: ApiError, request_id: &str) {
    let status = error.status();
    assert!(
        [
            StatusCode::BAD_REQUEST,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            StatusCode::UNPROCESSABLE_ENTITY
        ]
        .contains(&status),
        "a create cannot answer {status}: {error:?}"
    );
    let code = error.code();
    let is_validation = matches!(error, ApiError::ValidationFailed(_));
    let response = error.into_response(request_id);
    assert_eq!(response.status(), status);
    let json: Value = serde_json::from_slice(&body_of(response)).expect("a problem body is JSON");
    assert_eq!(json["status"].as_u64(), Some(u64::from(status.as_u16())));
    assert_eq!(json["code"].as_str(), Some(code));
    assert_eq!(json["request_id"].as_str(), Some(request_id));
    assert!(json["detail"].as_str().is_some_and(|d| !d.is_empty()));
    if is_validation {
        assert_eq!(code, "validation_failed");
        let errors = json["errors"].as_array().expect("a 422 lists its errors");
        assert!(!errors.is_empty(), "a 422 with no errors");
        let mut fields = HashSet::new();
        for e in errors {
            let field = e["field"].as_str().expect("each error names its field");
            assert!(fields.insert(field), "{field} reported twice");
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    } else {
        assert!(json.get("errors").is_none());
    }
}

/// A bearer token is taken only from exactly one `Authorization` header, is visible ASCII,
/// and appears in that header as sent.
fn check_bearer(headers: &HeaderMap) {
    let Some(token) = bearer_token(headers) else {
        return;
    };
    let values: Vec<&HeaderValue> = headers.get_all(AUTHORIZATION).iter().collect();
    let [value] = values[..] else {
        panic!("a token from {} Authorization headers", values.len());
    };
    assert!(!token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()));
    assert!(value.len() <= TOKEN_BYTES_MAX);
    assert!(value.as_bytes()[..7].eq_ignore_ascii_case(b"bearer "));
    assert!(value.to_str().is_ok_and(|v| v.contains(token)));
    if let Some(id) = token_tenant(token) {
        assert!(token.starts_with("tkn_"));
        assert!(is_tenant_id(&id));
    }
}

/// A client's request id is kept exactly as sent, and only when 1 to 128 visible ASCII.
fn check_request_id(raw: &[u8]) {
    if let Some(id) = valid_request_id(raw) {
        assert_eq!(id.as_bytes(), raw);
        assert!((1..=REQUEST_ID_BYTES_MAX).contains(&raw.len()));
        assert!(raw.iter().all(u8::is_ascii_graphic));
    }
}

/// The string parsers on arbitrary text: whatever they accept, they give back unchanged.
fn check_parsers(text: &str) {
    if let Some(amount) = atomic(text) {
        assert_eq!(amount.to_string(), text);
    }
    if is_tenant_id(text) {
        assert!(text.starts_with("ten_"));
    }
    if let Some(id) = token_tenant(text) {
        assert!(text.contains(&id["ten_".len()..]));
    }
    if let Some(value) = ulid_value(text) {
        assert_eq!(text.len(), 26);
        // The first character carries the top 3 bits, so it is a digit from 0 to 7.
        assert_eq!(u128::from(text.as_bytes()[0] - b'0'), value >> 125);
    }
}

/// The one frame of a rendered (fully buffered) response body.
fn body_of(response: Response<Full<Bytes>>) -> Bytes {
    let mut body = response.into_body();
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        Poll::Ready(None) => Bytes::new(),
        Poll::Pending => panic!("a Full body is always ready"),
        Poll::Ready(Some(Err(never))) => match never {},
    }
}
