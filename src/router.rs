//! Routing: the route table, and the pipeline every request goes through (request id,
//! authentication, route, handler, metrics, access log).
//!
//! [`ROUTES`] is the one table of the API: a row per method and path template, with who may
//! call it and the handler that answers it, joined from the rows each resource keeps beside
//! its handlers (`handlers::route`). The path index (the metrics' labels), the `Allow`
//! header of each path and the check that the OpenAPI document agrees are derived from it.

use std::convert::Infallible;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request};

use crate::app::App;
use crate::auth::{self, Needs};
use crate::domain::valid_request_id;
use crate::handlers::route::{Access, Call, PARAMS_MAX, Params, Route};
use crate::handlers::{
    HttpResponse, batch, budgets, drop_unread_body, events, health, reservations, tenants, webhooks,
};
use crate::oidc::Permission;
use crate::problem::ApiError;
use crate::ratelimit::{self, Decision};

/// Every route: the API's one table, joined from each resource's rows (kept beside their
/// handlers), in this order. Rows of one path stand together, in the order their methods
/// are listed in `Allow`.
pub(crate) static ROUTES: LazyLock<Vec<&'static Route>> = LazyLock::new(|| {
    [
        health::ROUTES,
        tenants::ROUTES,
        budgets::ROUTES,
        reservations::ROUTES,
        batch::ROUTES,
        events::ROUTES,
        webhooks::ROUTES,
    ]
    .into_iter()
    .flatten()
    .collect()
});

/// A path template of the table, with what is derived from its rows.
#[derive(Debug)]
pub(crate) struct Path {
    /// The template, as the OpenAPI document writes it.
    pub(crate) template: &'static str,
    /// Its segments: `None` for a placeholder.
    segments: Vec<Option<&'static str>>,
    /// Its rows in [`ROUTES`].
    routes: Vec<usize>,
    /// The methods, as the `Allow` header lists them; `HEAD` wherever `GET` is.
    pub(crate) allow: String,
    /// Whether it needs no token (its rows are public).
    public: bool,
}

/// The table's paths, in the order they first appear in [`ROUTES`]: the index `/metrics`
/// counts by.
pub(crate) static PATHS: LazyLock<Vec<Path>> = LazyLock::new(|| {
    let mut paths: Vec<Path> = Vec::new();
    for (i, route) in ROUTES.iter().enumerate() {
        let at = match paths.iter().position(|p| p.template == route.template) {
            Some(at) => at,
            None => {
                let segments = route.template[1..]
                    .split('/')
                    .map(|s| (!s.starts_with('{')).then_some(s))
                    .collect();
                paths.push(Path {
                    template: route.template,
                    segments,
                    routes: Vec::new(),
                    allow: String::new(),
                    public: true,
                });
                paths.len() - 1
            }
        };
        let path = &mut paths[at];
        assert!(
            !matches!(route.access, Access::Tenant(_)) || path.segments.get(2) == Some(&None),
            "{} {}: a tenant's route names the tenant as its third segment",
            route.method,
            route.template
        );
        path.routes.push(i);
        path.public &= route.access == Access::Public;
        if !path.allow.is_empty() {
            path.allow.push_str(", ");
        }
        path.allow.push_str(route.method);
        if route.method == "GET" {
            path.allow.push_str(", HEAD");
        }
    }
    paths
});

/// The metric and log label of a request that matched no route; it keeps the label set
/// bounded whatever paths clients send.
pub(crate) const UNMATCHED: &str = "unmatched";

/// The metric and log label of the web console's files (see [`crate::console`]); its index
/// in [`route_labels`] is `PATHS.len()`.
pub(crate) const CONSOLE: &str = "/console/";

/// The label of each path in [`PATHS`] order, then [`CONSOLE`] and [`UNMATCHED`]: what
/// `/metrics` counts by.
pub(crate) fn route_labels() -> Vec<&'static str> {
    PATHS
        .iter()
        .map(|path| path.template)
        .chain([CONSOLE, UNMATCHED])
        .collect()
}

/// Whether `path` is the console's: `/console` or under `/console/`.
fn is_console(path: &str) -> bool {
    path == "/console" || path.starts_with(crate::console::PREFIX)
}

/// Segments of a path, at most (the longest template has six).
const SEGMENTS_MAX: usize = 8;

/// What a request's path matched: its index in [`PATHS`] and its placeholders' values. Ids
/// are as written, not yet parsed: an id that cannot exist is a `404` decided by the handler,
/// after the body's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    /// The index in [`PATHS`]; `None` for a path no template matches.
    pub(crate) index: Option<usize>,
    params: Params<'a>,
}

impl<'a> Target<'a> {
    /// Reads a path; only the exact spellings match (no percent-decoding, no trailing slash,
    /// no empty segment).
    pub(crate) fn parse(path: &'a str) -> Self {
        let unknown = Self {
            index: None,
            params: [""; PARAMS_MAX],
        };
        let Some(rest) = path.strip_prefix('/') else {
            return unknown;
        };
        let mut segments = [""; SEGMENTS_MAX];
        let mut count = 0;
        for segment in rest.split('/') {
            if segment.is_empty() || count == SEGMENTS_MAX {
                return unknown;
            }
            segments[count] = segment;
            count += 1;
        }
        let segments = &segments[..count];
        for (index, path) in PATHS.iter().enumerate() {
            if path.segments.len() != count {
                continue;
            }
            let mut params = [""; PARAMS_MAX];
            let mut n = 0;
            let matched = path
                .segments
                .iter()
                .zip(segments)
                .all(|(want, got)| match want {
                    Some(literal) => literal == got,
                    None => {
                        params[n] = got;
                        n += 1;
                        true
                    }
                });
            if matched {
                return Self {
                    index: Some(index),
                    params,
                };
            }
        }
        unknown
    }

    /// The matched path, if any.
    fn path(&self) -> Option<&'static Path> {
        self.index.map(|i| &PATHS[i])
    }

    /// The route's template, for the access log.
    pub(crate) fn label(&self) -> &'static str {
        self.path().map_or(UNMATCHED, |p| p.template)
    }

    /// The row of `method` (`HEAD` as `GET`) for this path, if it has one.
    fn route(&self, method: &Method) -> Option<&'static Route> {
        let method = if *method == Method::HEAD {
            "GET"
        } else {
            method.as_str()
        };
        let path = self.path()?;
        path.routes
            .iter()
            .map(|&i| ROUTES[i])
            .find(|r| r.method == method)
    }

    /// Who may call `route` (this path's row of the request's method, if it has one); `None`
    /// when no token is needed: a public path (whatever the method, which is then a `405`),
    /// or a path outside `/v1`. Every other `/v1` path
    /// needs a token, an unknown one too, so that a missing token is a `401` before it is a
    /// `404`. A method the table does not list needs what the path's writes need: `Manage`
    /// under a tenant, so a tenant token gets `403` for it, and the admin elsewhere.
    fn needs(&self, route: Option<&Route>, path: &str) -> Option<Needs<'a>> {
        let Some(matched) = self.path() else {
            return (path == "/v1" || path.starts_with("/v1/")).then_some(Needs::Admin);
        };
        if matched.public {
            return None;
        }
        let access = route.map_or_else(
            || match matched.segments.get(2) {
                Some(None) => Access::Tenant(Permission::Manage),
                _ => Access::Admin,
            },
            |r| r.access,
        );
        match access {
            Access::Public => None,
            Access::Tenant(permission) => Some(Needs::Tenant(self.params[0], permission)),
            Access::Admin => Some(Needs::Admin),
        }
    }
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
    let console = app.console.as_ref().filter(|_| is_console(path));
    let mut unread = Some(request);
    let mut limited = None;
    let answered = match console {
        Some(console) => {
            let request = unread.as_ref().expect("not yet taken");
            console.serve(&method, path, request.headers()).await
        }
        None => dispatch(&app, target, path, uri.query(), &mut unread, &mut limited).await,
    };
    let mut response = match answered {
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
    if let Some(limited) = limited {
        let headers = response.headers_mut();
        if let Some(policy) = limited.policy {
            headers.insert(RATELIMIT_POLICY, policy);
        }
        headers.insert(RATELIMIT, limited.limit);
    }
    response.headers_mut().insert(
        "x-request-id",
        HeaderValue::from_str(&request_id).expect("request ids are visible ASCII"),
    );
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    let (index, label) = match console {
        Some(_) => (Some(PATHS.len()), CONSOLE),
        None => (target.index, target.label()),
    };
    app.metrics.observe(index, status, elapsed);
    log::info!(
        target: "tenantd::access",
        "{method} {} {status} {:.3}ms {request_id}",
        label,
        elapsed.as_secs_f64() * 1e3,
    );
    Ok(response)
}

/// The draft's `RateLimit` header, on every answer to a counted principal.
const RATELIMIT: header::HeaderName = header::HeaderName::from_static("ratelimit");

/// The draft's `RateLimit-Policy` header, on a `429`.
const RATELIMIT_POLICY: header::HeaderName = header::HeaderName::from_static("ratelimit-policy");

/// Authentication first (`401`, the rate limit's `429`, `403`), then the route (`404`,
/// `405`), then the handler. The handlers that read a body take the request out of `unread`.
/// A counted request's rate-limit headers go to `limited`, for its answer whatever it is.
///
/// A tenant token on a route whose one effect is its write ([`Route::checked_by_its_write`])
/// is checked by that write where a check alone is a round trip of its own (PostgreSQL), and
/// not where rate limits count principals (a token must be proven before it is counted).
/// Until that check has passed nothing but a `401` answers ([`auth::confirm`]).
async fn dispatch(
    app: &App,
    target: Target<'_>,
    path: &str,
    query: Option<&str>,
    unread: &mut Option<Request<Incoming>>,
    limited: &mut Option<ratelimit::Headers>,
) -> Result<HttpResponse, ApiError> {
    let request = unread.as_ref().expect("handle passes the request in");
    // The row is looked up once: what it needs, then what answers it.
    let route = target.route(request.method());
    let (principal, check) = match target.needs(route, path) {
        Some(needs) => {
            let deferred = route.is_some_and(|r| r.checked_by_its_write)
                && app.rate_limits.is_none()
                && app.store.checks_tokens_with_writes();
            let (principal, check) =
                auth::authenticate(request.headers(), &app.credentials(), deferred).await?;
            // Counted once authenticated, before anything else is checked or read: a `403`
            // counts too.
            if let Some(limits) = &app.rate_limits {
                match limits.check(&principal) {
                    Decision::Uncounted => {}
                    Decision::Allowed(headers) => *limited = Some(headers),
                    Decision::Refused {
                        retry_after_s,
                        headers,
                        principal,
                    } => {
                        *limited = Some(headers);
                        app.metrics.rate_limited(principal);
                        return Err(ApiError::RateLimited { retry_after_s });
                    }
                }
            }
            (Some((principal, needs)), check)
        }
        None => (None, None),
    };
    let answer = async {
        if let Some((principal, needs)) = &principal {
            auth::authorize(principal, *needs)?;
        }
        let Some(matched) = target.path() else {
            return Err(ApiError::RouteNotFound);
        };
        let Some(route) = route else {
            return Err(ApiError::MethodNotAllowed {
                allow: matched.allow.as_str(),
            });
        };
        let call = Call {
            app,
            principal: principal.as_ref().map(|(principal, _)| principal),
            check: check.clone(),
            unread,
            params: target.params,
            query,
        };
        (route.handler)(call).await
    }
    .await;
    match &check {
        Some(check) => auth::confirm(&app.store, check, answer).await,
        None => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Permission::{Manage, Read, Spend};

    /// The index in [`PATHS`] of `template`.
    fn index(template: &str) -> Option<usize> {
        PATHS.iter().position(|p| p.template == template)
    }

    #[test]
    fn paths_map_to_templates_and_params() {
        let cases = [
            ("/healthz", Some("/healthz"), ["", "", ""]),
            ("/v1/tenants", Some("/v1/tenants"), ["", "", ""]),
            (
                "/v1/tenants/ten_X",
                Some("/v1/tenants/{id}"),
                ["ten_X", "", ""],
            ),
            (
                "/v1/tenants/ten_X/reservations/r/commit",
                Some("/v1/tenants/{id}/reservations/{reservation_id}/commit"),
                ["ten_X", "r", ""],
            ),
            (
                "/v1/tenants/ten_X/reservations/r/cancel",
                None,
                ["", "", ""],
            ),
            ("/v1/tenants/", None, ["", "", ""]),
            ("/v1/tenants/a/b", None, ["", "", ""]),
            ("/v1/tenants//", None, ["", "", ""]),
            ("/healthz/", None, ["", "", ""]),
            ("/", None, ["", "", ""]),
            ("*", None, ["", "", ""]),
            (
                "/v1/tenants/ten_X/budgets/b/entries/e",
                Some("/v1/tenants/{id}/budgets/{budget_id}/entries/{entry_id}"),
                ["ten_X", "b", "e"],
            ),
            (
                "/v1/tenants/a/budgets/b/entries/c/d/e/f",
                None,
                ["", "", ""],
            ),
        ];
        for (path, template, params) in cases {
            let target = Target::parse(path);
            assert_eq!(target.index, template.and_then(index), "{path}");
            assert_eq!(target.params, params, "{path}");
        }
    }

    #[test]
    fn labels_come_from_the_route_table() {
        assert_eq!(Target::parse("/v1/tenants/x").label(), "/v1/tenants/{id}");
        assert_eq!(Target::parse("/nope").label(), UNMATCHED);
        assert_eq!(route_labels().last(), Some(&UNMATCHED));
        for (i, path) in PATHS.iter().enumerate() {
            let concrete = path
                .template
                .replace("{id}", "x")
                .replace("{budget_id}", "b")
                .replace("{reservation_id}", "r")
                .replace("{entry_id}", "e")
                .replace("{event_id}", "v")
                .replace("{endpoint_id}", "w")
                .replace("{delivery_id}", "d");
            assert_eq!(Target::parse(&concrete).index, Some(i), "{}", path.template);
            assert_eq!(route_labels()[i], path.template);
        }
    }

    #[test]
    fn allow_lists_each_paths_methods_in_table_order() {
        let allow = |template| PATHS[index(template).expect("a path")].allow.as_str();
        assert_eq!(allow("/healthz"), "GET, HEAD");
        assert_eq!(allow("/v1/tenants"), "GET, HEAD, POST");
        assert_eq!(allow("/v1/tenants/{id}"), "GET, HEAD, DELETE");
        assert_eq!(
            allow("/v1/tenants/{id}/budgets/{budget_id}/credits"),
            "POST"
        );
        assert_eq!(
            allow("/v1/tenants/{id}/budgets/{budget_id}"),
            "GET, HEAD, DELETE, PATCH"
        );
        assert_eq!(allow("/v1/events/{event_id}"), "GET, HEAD");
        assert_eq!(
            allow("/v1/webhook-endpoints/{endpoint_id}"),
            "GET, HEAD, PATCH, DELETE"
        );
        assert_eq!(PATHS.len(), 28, "every path of the table once");
    }

    #[test]
    fn each_route_needs_its_permission() {
        let t = "ten_A";
        let budget = "/v1/tenants/ten_A/budgets/b";
        let reservation = "/v1/tenants/ten_A/reservations/r";
        let cases = [
            (Method::GET, "/v1/tenants/ten_A", Needs::Tenant(t, Read)),
            (Method::HEAD, "/v1/tenants/ten_A", Needs::Tenant(t, Read)),
            (
                Method::DELETE,
                "/v1/tenants/ten_A",
                Needs::Tenant(t, Manage),
            ),
            (Method::PUT, "/v1/tenants/ten_A", Needs::Tenant(t, Manage)),
            (
                Method::GET,
                "/v1/tenants/ten_A/budgets",
                Needs::Tenant(t, Read),
            ),
            (
                Method::POST,
                "/v1/tenants/ten_A/budgets",
                Needs::Tenant(t, Manage),
            ),
            (Method::GET, budget, Needs::Tenant(t, Read)),
            (Method::DELETE, budget, Needs::Tenant(t, Manage)),
            (
                Method::POST,
                "/v1/tenants/ten_A/budgets/b/credits",
                Needs::Tenant(t, Manage),
            ),
            (
                Method::POST,
                "/v1/tenants/ten_A/budgets/b/debits",
                Needs::Tenant(t, Manage),
            ),
            (
                Method::GET,
                "/v1/tenants/ten_A/budgets/b/entries",
                Needs::Tenant(t, Read),
            ),
            (
                Method::GET,
                "/v1/tenants/ten_A/budgets/b/entries/e",
                Needs::Tenant(t, Read),
            ),
            (
                Method::GET,
                "/v1/tenants/ten_A/budgets/b/periods",
                Needs::Tenant(t, Read),
            ),
            (Method::PATCH, budget, Needs::Tenant(t, Manage)),
            (
                Method::POST,
                "/v1/tenants/ten_A/charges",
                Needs::Tenant(t, Spend),
            ),
            (
                Method::GET,
                "/v1/tenants/ten_A/reservations",
                Needs::Tenant(t, Read),
            ),
            (
                Method::POST,
                "/v1/tenants/ten_A/reservations",
                Needs::Tenant(t, Spend),
            ),
            (Method::GET, reservation, Needs::Tenant(t, Read)),
            (Method::DELETE, reservation, Needs::Tenant(t, Manage)),
            (
                Method::POST,
                "/v1/tenants/ten_A/reservations/r/commit",
                Needs::Tenant(t, Spend),
            ),
            (
                Method::GET,
                "/v1/tenants/ten_A/reservations/r/extend",
                Needs::Tenant(t, Manage),
            ),
            (
                Method::GET,
                "/v1/tenants/ten_A/budgets/b/credits",
                Needs::Tenant(t, Manage),
            ),
            (Method::POST, "/v1/tenants", Needs::Admin),
            (Method::GET, "/v1/tenants", Needs::Admin),
            (Method::PUT, "/v1/tenants", Needs::Admin),
            (Method::GET, "/v1/nope", Needs::Admin),
        ];
        for (method, path, needs) in cases {
            let target = Target::parse(path);
            let needs_here = target.needs(target.route(&method), path);
            assert_eq!(needs_here, Some(needs), "{method} {path}");
        }
    }

    #[test]
    fn every_get_also_answers_head() {
        for path in PATHS.iter() {
            let methods: Vec<&str> = path.allow.split(", ").collect();
            assert_eq!(
                methods.contains(&"GET"),
                methods.contains(&"HEAD"),
                "{}",
                path.template
            );
        }
    }

    #[test]
    fn tokens_are_needed_under_v1_only() {
        fn needs(path: &str) -> Option<Needs<'_>> {
            let target = Target::parse(path);
            target.needs(target.route(&Method::GET), path)
        }
        assert_eq!(needs("/v1/nope"), Some(Needs::Admin));
        assert_eq!(needs("/v1"), Some(Needs::Admin));
        assert_eq!(needs("/v1/openapi.json"), None);
        assert_eq!(needs("/v1x"), None);
        assert_eq!(needs("/healthz"), None);
        assert_eq!(
            {
                let target = Target::parse("/healthz");
                target.needs(target.route(&Method::POST), "/healthz")
            },
            None,
            "a public path needs no token whatever the method"
        );
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
            .map(|r| (r.template.to_owned(), r.method.to_owned()))
            .collect();
        assert_eq!(documented, routed);
        assert_eq!(routed.len(), ROUTES.len(), "no row twice");
        assert!(
            doc["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.1"))
        );
    }
}
