//! The endpoints anyone may call: liveness, readiness, metrics and the API's description.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::{HttpResponse, json_response};
use crate::app::App;
use crate::problem::ApiError;

use super::route::Access::Public;
use super::route::{Route, handler, route};

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    // Liveness: answers while the process runs.
    route("GET", "/healthz", Public, handler!(|_c| Ok(healthz()))),
    // Readiness: answers when a write could begin.
    route("GET", "/readyz", Public, handler!(|c| readyz(c.app).await)),
    // Prometheus text exposition.
    route("GET", "/metrics", Public, handler!(|c| Ok(metrics(c.app)))),
    // The API's own description.
    route("GET", "/v1/openapi.json", Public, handler!(|_c| Ok(openapi()))),
];

/// How long `/readyz` waits for the database to prove a write could begin.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// The OpenAPI document, embedded so the binary serves it with no file beside it.
pub(crate) const OPENAPI_JSON: &str = include_str!("../../openapi.json");

/// `GET /healthz`: answers while the process runs.
pub(crate) fn healthz() -> HttpResponse {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#)
}

/// `GET /readyz`: `200` once a write transaction could begin within [`READY_TIMEOUT`]; a
/// database locked by another process, full or read-only is `503`, and so is an identity
/// provider whose keys have not been had yet.
pub(crate) async fn readyz(app: &App) -> Result<HttpResponse, ApiError> {
    if app.oidc.as_ref().is_some_and(|oidc| !oidc.ready()) {
        return Err(ApiError::IdentityProviderUnavailable(
            "not ready: the identity provider's keys have not been had yet".into(),
        ));
    }
    match tokio::time::timeout(READY_TIMEOUT, app.store.check_writable()).await {
        Ok(Ok(())) => Ok(json_response(StatusCode::OK, r#"{"status":"ready"}"#)),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ApiError::Unavailable(format!(
            "the database could not begin a write within {} ms",
            READY_TIMEOUT.as_millis()
        ))),
    }
}

/// `GET /metrics`: the Prometheus text exposition.
pub(crate) fn metrics(app: &App) -> HttpResponse {
    let text = app.metrics.render(&app.store.gauges());
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// `GET /v1/openapi.json`.
pub(crate) fn openapi() -> HttpResponse {
    json_response(StatusCode::OK, OPENAPI_JSON)
}
