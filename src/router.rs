//! Routing: the table of paths, and the pipeline every request goes through (request id,
//! authentication, route, handler, metrics, access log).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request};

use crate::app::App;
use crate::auth::{self, Needs};
use crate::domain::Direction;
use crate::domain::valid_request_id;
use crate::handlers::reservations::Action;
use crate::handlers::{HttpResponse, budgets, drop_unread_body, health, reservations, tenants};
use crate::oidc::Permission;
use crate::problem::ApiError;

/// A routed path and the methods it answers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RouteSpec {
    /// The path as the OpenAPI document writes it.
    pub(crate) template: &'static str,
    /// The methods, as the `Allow` header lists them; `HEAD` wherever `GET` is.
    pub(crate) allow: &'static str,
}

/// Every routed path: the source of `Allow` headers, metric labels and the check that the
/// OpenAPI document and the router agree.
pub(crate) const ROUTES: [RouteSpec; 16] = [
    RouteSpec {
        template: "/healthz",
        allow: "GET, HEAD",
    },
    RouteSpec {
        template: "/readyz",
        allow: "GET, HEAD",
    },
    RouteSpec {
        template: "/metrics",
        allow: "GET, HEAD",
    },
    RouteSpec {
        template: "/v1/openapi.json",
        allow: "GET, HEAD",
    },
    RouteSpec {
        template: "/v1/tenants",
        allow: "GET, HEAD, POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}",
        allow: "GET, HEAD, DELETE",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/budgets",
        allow: "GET, HEAD, POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/budgets/{budget_id}",
        allow: "GET, HEAD, DELETE",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/budgets/{budget_id}/credits",
        allow: "POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/budgets/{budget_id}/debits",
        allow: "POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/budgets/{budget_id}/entries",
        allow: "GET, HEAD",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/reservations",
        allow: "GET, HEAD, POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/reservations/{reservation_id}",
        allow: "GET, HEAD",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/reservations/{reservation_id}/commit",
        allow: "POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/reservations/{reservation_id}/release",
        allow: "POST",
    },
    RouteSpec {
        template: "/v1/tenants/{id}/reservations/{reservation_id}/extend",
        allow: "POST",
    },
];

/// The metric and log label of a request that matched no route; it keeps the label set
/// bounded whatever paths clients send.
pub(crate) const UNMATCHED: &str = "unmatched";

/// The label of each route slot in [`ROUTES`] order, then [`UNMATCHED`]: what `/metrics`
/// counts by.
pub(crate) fn route_labels() -> Vec<&'static str> {
    ROUTES
        .iter()
        .map(|route| route.template)
        .chain([UNMATCHED])
        .collect()
}

/// What a request's path names. Ids are as written, not yet parsed: an id that cannot exist
/// is a `404` decided by the handler, after the body's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// `/healthz`.
    Healthz,
    /// `/readyz`.
    Readyz,
    /// `/metrics`.
    Metrics,
    /// `/v1/openapi.json`.
    OpenApi,
    /// `/v1/tenants`.
    Tenants,
    /// `/v1/tenants/<id>`.
    Tenant(&'a str),
    /// `/v1/tenants/<id>/budgets`.
    Budgets(&'a str),
    /// `/v1/tenants/<id>/budgets/<bid>`.
    Budget(&'a str, &'a str),
    /// `/v1/tenants/<id>/budgets/<bid>/credits`.
    Credits(&'a str, &'a str),
    /// `/v1/tenants/<id>/budgets/<bid>/debits`.
    Debits(&'a str, &'a str),
    /// `/v1/tenants/<id>/budgets/<bid>/entries`.
    Entries(&'a str, &'a str),
    /// `/v1/tenants/<id>/reservations`.
    Reservations(&'a str),
    /// `/v1/tenants/<id>/reservations/<rid>`.
    Reservation(&'a str, &'a str),
    /// `/v1/tenants/<id>/reservations/<rid>/commit`, `…/release` or `…/extend`.
    Settle(&'a str, &'a str, Action),
    /// Any other path.
    Unknown,
}

impl<'a> Target<'a> {
    /// Reads a path; only the exact spellings match (no percent-decoding, no trailing slash,
    /// no empty segment).
    pub(crate) fn parse(path: &'a str) -> Self {
        match path {
            "/healthz" => return Self::Healthz,
            "/readyz" => return Self::Readyz,
            "/metrics" => return Self::Metrics,
            "/v1/openapi.json" => return Self::OpenApi,
            "/v1/tenants" => return Self::Tenants,
            _ => {}
        }
        let Some(rest) = path.strip_prefix("/v1/tenants/") else {
            return Self::Unknown;
        };
        let mut segments = rest.split('/');
        let mut next = || segments.next();
        let parts = [next(), next(), next(), next(), next()];
        if parts.iter().flatten().any(|s| s.is_empty()) {
            return Self::Unknown;
        }
        match parts {
            [Some(id), None, ..] => Self::Tenant(id),
            [Some(id), Some("budgets"), None, ..] => Self::Budgets(id),
            [Some(id), Some("budgets"), Some(b), None, _] => Self::Budget(id, b),
            [Some(id), Some("budgets"), Some(b), Some("credits"), None] => Self::Credits(id, b),
            [Some(id), Some("budgets"), Some(b), Some("debits"), None] => Self::Debits(id, b),
            [Some(id), Some("budgets"), Some(b), Some("entries"), None] => Self::Entries(id, b),
            [Some(id), Some("reservations"), None, ..] => Self::Reservations(id),
            [Some(id), Some("reservations"), Some(r), None, _] => Self::Reservation(id, r),
            [Some(id), Some("reservations"), Some(r), Some(action), None] => match action {
                "commit" => Self::Settle(id, r, Action::Commit),
                "release" => Self::Settle(id, r, Action::Release),
                "extend" => Self::Settle(id, r, Action::Extend),
                _ => Self::Unknown,
            },
            _ => Self::Unknown,
        }
    }

    /// The index of this target in [`ROUTES`]; `None` for an unknown path.
    pub(crate) fn index(&self) -> Option<usize> {
        Some(match self {
            Self::Healthz => 0,
            Self::Readyz => 1,
            Self::Metrics => 2,
            Self::OpenApi => 3,
            Self::Tenants => 4,
            Self::Tenant(_) => 5,
            Self::Budgets(_) => 6,
            Self::Budget(..) => 7,
            Self::Credits(..) => 8,
            Self::Debits(..) => 9,
            Self::Entries(..) => 10,
            Self::Reservations(_) => 11,
            Self::Reservation(..) => 12,
            Self::Settle(_, _, Action::Commit) => 13,
            Self::Settle(_, _, Action::Release) => 14,
            Self::Settle(_, _, Action::Extend) => 15,
            Self::Unknown => return None,
        })
    }

    /// The route's template, for the access log.
    pub(crate) fn label(&self) -> &'static str {
        self.index().map_or(UNMATCHED, |i| ROUTES[i].template)
    }

    /// Every `/v1` path needs a token, the OpenAPI document aside; so does an unknown path
    /// under `/v1`, so that a missing token is a `401` before it is a `404`.
    fn needs_token(&self, path: &str) -> bool {
        match self {
            Self::Healthz | Self::Readyz | Self::Metrics | Self::OpenApi => false,
            Self::Unknown => path == "/v1" || path.starts_with("/v1/"),
            _ => true,
        }
    }

    /// What the principal must have for `method` here. Under a tenant's path, the reads of
    /// the endpoint table need `Read`; reserving and settling need `Spend` (what a tenant
    /// token may do); the rest (budgets, credits, debits, closing, tombstoning, and methods
    /// the table does not list) needs `Manage`, so a tenant token gets `403` for them. The tenants collection and paths outside the endpoint table need the admin.
    fn needs(&self, method: &Method) -> Needs<'a> {
        let read = is_read(method);
        let post = *method == Method::POST;
        let (id, permission) = match *self {
            Self::Tenant(id)
            | Self::Budgets(id)
            | Self::Budget(id, _)
            | Self::Entries(id, _)
            | Self::Reservations(id)
            | Self::Reservation(id, _)
                if read =>
            {
                (id, Permission::Read)
            }
            Self::Reservations(id) | Self::Settle(id, ..) if post => (id, Permission::Spend),
            Self::Tenant(id)
            | Self::Budgets(id)
            | Self::Budget(id, _)
            | Self::Credits(id, _)
            | Self::Debits(id, _)
            | Self::Entries(id, _)
            | Self::Reservations(id)
            | Self::Reservation(id, _)
            | Self::Settle(id, ..) => (id, Permission::Manage),
            Self::Healthz
            | Self::Readyz
            | Self::Metrics
            | Self::OpenApi
            | Self::Tenants
            | Self::Unknown => return Needs::Admin,
        };
        Needs::Tenant(id, permission)
    }
}

/// `GET`, or `HEAD`, which is answered wherever `GET` is, with the same status and headers
/// (the HTTP layer leaves the body out).
fn is_read(method: &Method) -> bool {
    *method == Method::GET || *method == Method::HEAD
}

/// Answers one request. Never fails: every error becomes a problem response.
pub(crate) async fn handle(
    app: Arc<App>,
    request: Request<Incoming>,
) -> Result<HttpResponse, Infallible> {
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
    let mut unread = Some(request);
    let mut response = match dispatch(&app, target, path, &mut unread).await {
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
    // A request no handler took still has its body on the wire; it goes before the answer
    // does, or the answer must say that the connection ends with it.
    if let Some(request) = unread
        && !drop_unread_body(request, app.limits.body_read_timeout).await
    {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
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

/// Hands the request to a handler that reads its body; a request left in `unread` has its
/// body dropped by [`handle`].
fn take(unread: &mut Option<Request<Incoming>>) -> Request<Incoming> {
    unread.take().expect("one handler takes a request, once")
}

/// Authentication first (`401`, `403`), then the route (`404`, `405`), then the handler.
/// The handlers that read a body [`take`] the request out of `unread`.
async fn dispatch(
    app: &App,
    target: Target<'_>,
    path: &str,
    unread: &mut Option<Request<Incoming>>,
) -> Result<HttpResponse, ApiError> {
    let request = unread.as_ref().expect("handle passes the request in");
    let principal = if target.needs_token(path) {
        let principal = auth::authenticate(request.headers(), &app.credentials()).await?;
        auth::authorize(&principal, target.needs(request.method()))?;
        Some(principal)
    } else {
        None
    };
    let method = request.method();
    let query = request.uri().query().map(str::to_owned);
    let query = query.as_deref();
    match (target, principal.as_ref()) {
        // Liveness: answers while the process runs.
        (Target::Healthz, _) if is_read(method) => Ok(health::healthz()),
        // Readiness: answers when a write could begin.
        (Target::Readyz, _) if is_read(method) => health::readyz(app).await,
        // Prometheus text exposition.
        (Target::Metrics, _) if is_read(method) => Ok(health::metrics(app)),
        // The API's own description.
        (Target::OpenApi, _) if is_read(method) => Ok(health::openapi()),
        // Provision a tenant.
        (Target::Tenants, Some(who)) if method == Method::POST => {
            tenants::create(app, who, take(unread)).await
        }
        // List tenants.
        (Target::Tenants, Some(_)) if is_read(method) => tenants::list(app, query).await,
        // Read a tenant's overview.
        (Target::Tenant(id), Some(_)) if is_read(method) => tenants::get(app, id).await,
        // Tombstone a tenant.
        (Target::Tenant(id), Some(who)) if method == Method::DELETE => {
            tenants::tombstone(app, who, id).await
        }
        // Create a budget.
        (Target::Budgets(id), Some(who)) if method == Method::POST => {
            budgets::create(app, who, take(unread), id).await
        }
        // List a tenant's budgets.
        (Target::Budgets(id), Some(_)) if is_read(method) => budgets::list(app, id, query).await,
        // Read a budget.
        (Target::Budget(id, b), Some(_)) if is_read(method) => budgets::get(app, id, b).await,
        // Close a budget.
        (Target::Budget(id, b), Some(who)) if method == Method::DELETE => {
            budgets::close(app, who, id, b).await
        }
        // Top a budget up.
        (Target::Credits(id, b), Some(who)) if method == Method::POST => {
            budgets::movement(app, who, take(unread), (id, b), Direction::Credit).await
        }
        // Withdraw from a budget.
        (Target::Debits(id, b), Some(who)) if method == Method::POST => {
            budgets::movement(app, who, take(unread), (id, b), Direction::Debit).await
        }
        // A budget's ledger.
        (Target::Entries(id, b), Some(_)) if is_read(method) => {
            budgets::entries(app, (id, b), query).await
        }
        // Reserve.
        (Target::Reservations(id), Some(who)) if method == Method::POST => {
            reservations::create(app, who, take(unread), id).await
        }
        // List a tenant's reservations.
        (Target::Reservations(id), Some(_)) if is_read(method) => {
            reservations::list(app, id, query).await
        }
        // Read a reservation.
        (Target::Reservation(id, r), Some(_)) if is_read(method) => {
            reservations::get(app, id, r).await
        }
        // Commit, release or extend a reservation.
        (Target::Settle(id, r, action), Some(who)) if method == Method::POST => {
            reservations::settle(app, who, take(unread), (id, r), action).await
        }
        // No such path.
        (Target::Unknown, _) => Err(ApiError::RouteNotFound),
        // A known path with another method.
        (known, _) => Err(ApiError::MethodNotAllowed {
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
            let path = route
                .template
                .replace("{id}", "x")
                .replace("{budget_id}", "b")
                .replace("{reservation_id}", "r");
            let target = Target::parse(&path);
            assert_eq!(target.index(), Some(i), "{}", route.template);
        }
    }

    #[test]
    fn each_route_needs_its_permission() {
        use Permission::{Manage, Read, Spend};
        let t = "ten_A";
        let cases = [
            (Method::GET, Target::Tenant(t), Needs::Tenant(t, Read)),
            (Method::HEAD, Target::Tenant(t), Needs::Tenant(t, Read)),
            (Method::DELETE, Target::Tenant(t), Needs::Tenant(t, Manage)),
            (Method::PUT, Target::Tenant(t), Needs::Tenant(t, Manage)),
            (Method::GET, Target::Budgets(t), Needs::Tenant(t, Read)),
            (Method::POST, Target::Budgets(t), Needs::Tenant(t, Manage)),
            (Method::GET, Target::Budget(t, "b"), Needs::Tenant(t, Read)),
            (
                Method::DELETE,
                Target::Budget(t, "b"),
                Needs::Tenant(t, Manage),
            ),
            (
                Method::POST,
                Target::Credits(t, "b"),
                Needs::Tenant(t, Manage),
            ),
            (
                Method::POST,
                Target::Debits(t, "b"),
                Needs::Tenant(t, Manage),
            ),
            (Method::GET, Target::Entries(t, "b"), Needs::Tenant(t, Read)),
            (Method::GET, Target::Reservations(t), Needs::Tenant(t, Read)),
            (
                Method::POST,
                Target::Reservations(t),
                Needs::Tenant(t, Spend),
            ),
            (
                Method::GET,
                Target::Reservation(t, "r"),
                Needs::Tenant(t, Read),
            ),
            (
                Method::DELETE,
                Target::Reservation(t, "r"),
                Needs::Tenant(t, Manage),
            ),
            (
                Method::POST,
                Target::Settle(t, "r", Action::Commit),
                Needs::Tenant(t, Spend),
            ),
            (
                Method::GET,
                Target::Settle(t, "r", Action::Extend),
                Needs::Tenant(t, Manage),
            ),
            (
                Method::GET,
                Target::Credits(t, "b"),
                Needs::Tenant(t, Manage),
            ),
            (Method::POST, Target::Tenants, Needs::Admin),
            (Method::GET, Target::Tenants, Needs::Admin),
            (Method::GET, Target::Unknown, Needs::Admin),
        ];
        for (method, target, needs) in cases {
            assert_eq!(target.needs(&method), needs, "{method} {target:?}");
        }
    }

    #[test]
    fn every_get_also_answers_head() {
        for route in &ROUTES {
            let methods: Vec<&str> = route.allow.split(", ").collect();
            assert_eq!(
                methods.contains(&"GET"),
                methods.contains(&"HEAD"),
                "{}",
                route.template
            );
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
            serde_json::from_str(health::OPENAPI_JSON).expect("openapi.json is JSON");
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
                    .filter(|m| *m != "HEAD")
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
