//! Routing: the table of paths, and the pipeline every request goes through (request id,
//! authentication, route, handler, metrics, access log).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response};

use crate::App;
use crate::auth;
use crate::domain::valid_request_id;
use crate::handlers;
use crate::problem::ApiError;

/// A routed path and the methods it answers.
#[derive(Debug, PartialEq, Eq)]
pub struct RouteSpec {
    /// The path as the OpenAPI document writes it.
    pub template: &'static str,
    /// The methods, as the `Allow` header lists them.
    pub allow: &'static str,
}

/// Every routed path: the source of `Allow` headers, metric labels and the check that the
/// OpenAPI document and the router agree.
pub const ROUTES: [RouteSpec; 6] = [
    RouteSpec {
        template: "/healthz",
        allow: "GET",
    },
    RouteSpec {
        template: "/readyz",
        allow: "GET",
    },
    RouteSpec {
        template: "/metrics",
        allow: "GET",
    },
    RouteSpec {
        template: "/v1/openapi.json",
        allow: "GET",
    },
    RouteSpec {
        template: "/v1/tenants",
        allow: "POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}",
        allow: "GET, DELETE",
    },
];

/// The metric and log label of a request that matched no route; it keeps the label set
/// bounded whatever paths clients send.
pub const UNMATCHED: &str = "unmatched";

/// What a request's path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
    Tenants,
    Tenant(&'a str),
    Unknown,
}

impl<'a> Target<'a> {
    pub fn parse(path: &'a str) -> Self {
        match path {
            "/healthz" => Self::Healthz,
            "/readyz" => Self::Readyz,
            "/metrics" => Self::Metrics,
            "/v1/openapi.json" => Self::OpenApi,
            "/v1/tenants" => Self::Tenants,
            _ => match path.strip_prefix("/v1/tenants/") {
                Some(id) if !id.is_empty() && !id.contains('/') => Self::Tenant(id),
                _ => Self::Unknown,
            },
        }
    }

    /// The index of this target in [`ROUTES`]; `None` for an unknown path.
    pub fn index(&self) -> Option<usize> {
        match self {
            Self::Healthz => Some(0),
            Self::Readyz => Some(1),
            Self::Metrics => Some(2),
            Self::OpenApi => Some(3),
            Self::Tenants => Some(4),
            Self::Tenant(_) => Some(5),
            Self::Unknown => None,
        }
    }

    pub fn label(&self) -> &'static str {
        self.index().map_or(UNMATCHED, |i| ROUTES[i].template)
    }

    /// Every `/v1` path needs a token, the OpenAPI document aside; so does an unknown path
    /// under `/v1`, so that a missing token is a `401` before it is a `404`.
    fn needs_token(&self, path: &str) -> bool {
        match self {
            Self::Tenants | Self::Tenant(_) => true,
            Self::Unknown => path == "/v1" || path.starts_with("/v1/"),
            _ => false,
        }
    }
}

/// Answers one request. Never fails: every error becomes a problem response.
pub async fn handle(
    app: Arc<App>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let started = Instant::now();
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| valid_request_id(v.as_bytes()))
        .map_or_else(|| app.request_ids.next_id(), str::to_owned);
    let method = request.method().clone();
    // A `Uri` shares its bytes: this clone copies no path.
    let uri = request.uri().clone();
    let path = uri.path();
    let target = Target::parse(path);
    let mut response = match dispatch(&app, target, path, request).await {
        Ok(response) => response,
        Err(error) => {
            if let Some(cause) = error.log_cause() {
                // A 500 is a bug; a 503 is the database's state, to be watched, not paged on.
                let level = if matches!(error, ApiError::Internal(_)) {
                    log::Level::Error
                } else {
                    log::Level::Warn
                };
                let status = error.status().as_u16();
                log::log!(level, "{request_id}: {status} {}: {cause}", error.code());
            }
            error.into_response(&request_id)
        }
    };
    response.headers_mut().insert(
        "x-request-id",
        HeaderValue::from_str(&request_id).expect("request ids are visible ASCII"),
    );
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    app.metrics.observe(target.index(), status, elapsed);
    log::info!(
        target: "tenantd::access",
        "{method} {} {status} {:.3}ms {request_id}",
        target.label(),
        elapsed.as_secs_f64() * 1e3,
    );
    Ok(response)
}

/// Authentication first (`401`, `403`), then the route (`404`, `405`), then the handler.
async fn dispatch(
    app: &App,
    target: Target<'_>,
    path: &str,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    if target.needs_token(path) {
        let principal = auth::authenticate(request.headers(), &app.admin_token, &app.store).await?;
        auth::authorize(&principal, request.method(), &target)?;
    }
    match (request.method(), target) {
        // Liveness: answers while the process runs.
        (&Method::GET, Target::Healthz) => Ok(handlers::healthz()),
        // Readiness: answers when the database does.
        (&Method::GET, Target::Readyz) => handlers::readyz(app).await,
        // Prometheus text exposition.
        (&Method::GET, Target::Metrics) => Ok(handlers::metrics(app)),
        // The API's own description.
        (&Method::GET, Target::OpenApi) => Ok(handlers::openapi()),
        // Provision a tenant.
        (&Method::POST, Target::Tenants) => handlers::create_tenant(app, request).await,
        // Read a tenant's overview.
        (&Method::GET, Target::Tenant(id)) => handlers::get_tenant(app, id).await,
        // Tombstone a tenant.
        (&Method::DELETE, Target::Tenant(id)) => handlers::tombstone_tenant(app, id).await,
        // No such path.
        (_, Target::Unknown) => Err(ApiError::RouteNotFound),
        // A known path with another method.
        (_, known) => Err(ApiError::MethodNotAllowed {
            allow: ROUTES[known.index().expect("a known target has a route")].allow,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_targets() {
        let cases = [
            ("/healthz", Target::Healthz),
            ("/v1/tenants", Target::Tenants),
            ("/v1/tenants/ten_X", Target::Tenant("ten_X")),
            ("/v1/tenants/", Target::Unknown),
            ("/v1/tenants/a/b", Target::Unknown),
            ("/v1/tenants//", Target::Unknown),
            ("/healthz/", Target::Unknown),
            ("/", Target::Unknown),
        ];
        for (path, want) in cases {
            assert_eq!(Target::parse(path), want, "{path}");
        }
    }

    #[test]
    fn labels_come_from_the_route_table() {
        assert_eq!(Target::Tenant("x").label(), "/v1/tenants/{id}");
        assert_eq!(Target::Unknown.label(), UNMATCHED);
        for (i, route) in ROUTES.iter().enumerate() {
            let target = Target::parse(if route.template.contains('{') {
                "/v1/tenants/x"
            } else {
                route.template
            });
            assert_eq!(target.index(), Some(i), "{}", route.template);
        }
    }

    #[test]
    fn tokens_are_needed_under_v1_only() {
        assert!(Target::parse("/v1/nope").needs_token("/v1/nope"));
        assert!(Target::parse("/v1").needs_token("/v1"));
        assert!(!Target::parse("/v1/openapi.json").needs_token("/v1/openapi.json"));
        assert!(!Target::parse("/v1x").needs_token("/v1x"));
        assert!(!Target::parse("/healthz").needs_token("/healthz"));
    }

    /// Every routed path and method is in the OpenAPI document, and the document has nothing
    /// the router lacks.
    #[test]
    fn the_openapi_document_and_the_router_agree() {
        let doc: serde_json::Value =
            serde_json::from_str(handlers::OPENAPI_JSON).expect("openapi.json is JSON");
        let documented: std::collections::BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .expect("path item")
                    .keys()
                    .filter(|k| {
                        [
                            "get", "put", "post", "delete", "patch", "head", "options", "trace",
                        ]
                        .contains(&k.as_str())
                    })
                    .map(move |method| (path.clone(), method.to_uppercase()))
            })
            .collect();
        let routed: std::collections::BTreeSet<(String, String)> = ROUTES
            .iter()
            .flat_map(|r| {
                r.allow
                    .split(", ")
                    .map(move |m| (r.template.to_owned(), m.to_owned()))
            })
            .collect();
        assert_eq!(documented, routed);
        assert!(
            doc["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.1"))
        );
    }
}
