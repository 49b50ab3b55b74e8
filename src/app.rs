//! What every request handler shares.

use crate::auth::{AdminTokenHash, Credentials};
use crate::console::Console;
use crate::ids::RequestIds;
use crate::metrics::Metrics;
use crate::oidc::Oidc;
use crate::server::Limits;
use crate::store::Store;

/// The state of a running service, shared by every connection behind an `Arc`. Its fields
/// are set once at start-up; what changes (counters, the store's queues) changes inside.
pub(crate) struct App {
    /// The database.
    pub(crate) store: Store,
    /// The HTTP layer's bounds; handlers need the body read timeout.
    pub(crate) limits: Limits,
    /// The admin token's hash; `None` when the identity provider alone makes admins.
    pub(crate) admin_token: Option<AdminTokenHash>,
    /// The identity provider whose access tokens are taken, when one is configured.
    pub(crate) oidc: Option<Oidc>,
    /// The URL handed to sidecars as `TENANTD_URL`; shared, since every keyed create's
    /// rendering holds it.
    pub(crate) public_url: std::sync::Arc<str>,
    /// Request counters and durations.
    pub(crate) metrics: std::sync::Arc<Metrics>,
    /// The ids of requests that came without a valid one.
    pub(crate) request_ids: RequestIds,
    /// Whether `http://` webhook URLs are taken (`--webhook-allow-http`).
    pub(crate) webhook_allow_http: bool,
    /// The web console, unless `--no-console`.
    pub(crate) console: Option<Console>,
    /// Each principal's token bucket, unless `--rate-limit off`.
    pub(crate) rate_limits: Option<std::sync::Arc<crate::ratelimit::Limiter>>,
}

impl App {
    /// What a request's bearer token is checked against.
    pub(crate) fn credentials(&self) -> Credentials<'_> {
        Credentials {
            admin: self.admin_token.as_ref(),
            oidc: self.oidc.as_ref(),
            store: &self.store,
        }
    }
}
