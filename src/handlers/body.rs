//! Reading a request's body and head as the contract orders it: the body's size and time
//! bounds, its media type and framing, the `Idempotency-Key`, and the draining of a body no
//! handler read.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap};
use hyper::{Request, Version};

use crate::app::App;
use crate::domain::IdempotencyKey;
use crate::problem::ApiError;

/// The largest request body read, in bytes; a larger one is `413` and is not read to its end.
pub const BODY_BYTES_MAX: usize = 65_536;

/// The largest body of a batch (`POST /v1/tenants/<id>/batch`), in bytes.
pub const BATCH_BODY_BYTES_MAX: usize = 1_048_576;

/// Reads at most [`BODY_BYTES_MAX`] bytes ([`read_body_up_to`]).
pub(super) async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    read_body_up_to(headers, body, timeout, BODY_BYTES_MAX).await
}

/// Reads at most `bytes_max` bytes: a declared length over it is refused before a byte is
/// read, and a chunked body is cut off as soon as it passes it. A body that trickles in
/// slower than `timeout` is refused too, so it cannot hold a connection forever.
async fn read_body_up_to(
    headers: &HeaderMap,
    body: Incoming,
    timeout: Duration,
    bytes_max: usize,
) -> Result<Bytes, ApiError> {
    let too_large = ApiError::PayloadTooLarge { bytes_max };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > bytes_max as u64) {
        return Err(too_large);
    }
    let collected = tokio::time::timeout(timeout, Limited::new(body, bytes_max).collect())
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
pub(super) fn check_json_body_headers(headers: &HeaderMap) -> Result<(), ApiError> {
    if !is_json(headers) || has_content_coding(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    check_transfer_coding(headers)
}

/// Reads a `PATCH` in the contract's order: the body (`413`), then its media type
/// (`application/json` or `application/merge-patch+json`, else `415`) and transfer coding.
/// An `Idempotency-Key` is not read: a `PATCH` is idempotent by itself.
pub(super) async fn read_patch(app: &App, request: Request<Incoming>) -> Result<Bytes, ApiError> {
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
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
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

/// A `POST` as every handler reads it: the path, the `Idempotency-Key` and the whole body.
pub(super) struct Post {
    /// The request's path, which a key is bound to.
    pub(super) path: String,
    /// The `Idempotency-Key`, if the request sent one.
    pub(super) key: Option<IdempotencyKey>,
    /// The whole body (`{}` for an empty optional one).
    pub(super) body: Bytes,
}

/// Reads a `POST` in the contract's order: the body (`413`), its media type and transfer
/// coding (`415`, `501`), then the `Idempotency-Key` (`400`). With `body_optional`, an empty
/// body needs no media type: it stands for `{}`.
pub(super) async fn read_post(
    app: &App,
    request: Request<Incoming>,
    body_optional: bool,
) -> Result<Post, ApiError> {
    read_post_up_to(app, request, body_optional, BODY_BYTES_MAX).await
}

/// Reads a `POST` as [`read_post`] does, with a body of at most `bytes_max` bytes.
pub(super) async fn read_post_up_to(
    app: &App,
    request: Request<Incoming>,
    body_optional: bool,
    bytes_max: usize,
) -> Result<Post, ApiError> {
    let (parts, body) = request.into_parts();
    let body = read_body_up_to(
        &parts.headers,
        body,
        app.limits.body_read_timeout,
        bytes_max,
    )
    .await?;
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

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

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
