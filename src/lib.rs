//! tenantd: a REST control plane that provisions tenants and their budgets, on one SQLite
//! file.
//!
//! # Layout
//!
//! A request flows one way: `server` → `router` → `handlers` → `store` → `audit`.
//!
//! | module | its one job |
//! |---|---|
//! | [`config`] | flags and environment, validated once into a [`config::Command`] |
//! | [`server`] | accept loop, connection bound, header timeout, graceful shutdown |
//! | [`router`] | the route table; request id, authentication, dispatch, access log |
//! | [`handlers`] | one function per endpoint: request → domain types → store → response |
//! | [`auth`] | bearer extraction, constant-time admin check, tenant-token scope |
//! | [`domain`] | newtypes parsed at the edge: names, amounts, ids, keys |
//! | [`views`] | the JSON a client sees of a tenant |
//! | [`problem`] | the one HTTP error type, rendered as RFC 9457 problem details |
//! | [`store`] | the SQLite thread: typed commands, group commit, savepoints |
//! | [`audit`] | the hash chain: link hashes, appending, verification |
//! | [`db`] | opening the file: mode 0600, pragmas, migrations |
//! | [`ids`] | ULIDs, tokens, request ids, SHA-256 and hex |
//! | [`metrics`] | lock-free counters and the Prometheus text format |
//! | [`backup`] | a consistent copy of a live database |

pub mod audit;
pub mod auth;
pub mod backup;
pub mod config;
pub mod db;
pub mod domain;
pub mod handlers;
pub mod ids;
pub mod metrics;
pub mod problem;
pub mod router;
pub mod server;
pub mod store;
pub mod views;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::auth::AdminTokenHash;
use crate::config::ServeConfig;
use crate::ids::RequestIds;
use crate::metrics::Metrics;
use crate::store::{Store, StoreConfig};

/// How often expired idempotency records are erased.
pub const IDEMPOTENCY_PURGE_INTERVAL: Duration = Duration::from_secs(60);

/// What every request handler shares.
pub struct App {
    pub store: Store,
    pub limits: server::Limits,
    pub admin_token: AdminTokenHash,
    pub metrics: Metrics,
    pub request_ids: RequestIds,
}

/// Serves the API on `listener` until `shutdown` resolves, then drains connections, lets the
/// store finish its queue and checkpoint, and returns.
pub async fn run(
    listener: TcpListener,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let public_url = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{bound}"));
    let (store, store_thread) = Store::open(StoreConfig {
        path: config.db.clone(),
        queue_depth: config.store_queue_depth,
        commit_batch_max: config.commit_batch_max,
        readers: config.readers,
        idempotency_ttl: config.idempotency_ttl,
        public_url,
    })
    .map_err(|e| format!("cannot open the database {}: {e}", config.db.display()))?;
    let app = Arc::new(App {
        store,
        limits: config.limits,
        admin_token: config.admin_token,
        metrics: Metrics::default(),
        request_ids: RequestIds::new(),
    });
    let purger = tokio::spawn(purge_expired(app.store.clone()));
    log::info!(
        "listening on http://{bound} (database {})",
        config.db.display()
    );
    server::serve(listener, Arc::clone(&app), config.limits, shutdown).await;
    purger.abort();
    store_thread.shutdown().await
}

/// Erases idempotency records (which hold tenant tokens) once their window is over: at
/// start-up and then every [`IDEMPOTENCY_PURGE_INTERVAL`].
async fn purge_expired(store: Store) {
    let mut interval = tokio::time::interval(IDEMPOTENCY_PURGE_INTERVAL);
    loop {
        interval.tick().await;
        match store.purge_expired().await {
            Ok(0) => {}
            Ok(n) => log::info!("erased {n} expired idempotency records"),
            Err(e) => log::warn!("could not erase expired idempotency records: {e:?}"),
        }
    }
}
