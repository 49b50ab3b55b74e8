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

#[cfg(test)]
mod proptests;

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
    server::ensure_fd_limit(config.limits.max_connections);
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use super::*;
    use crate::config::ServeConfig;
    use crate::ids::sha256;

    const TOKEN: &str = "an-admin-token-for-the-fault-tests-0123456789";

    /// One request on a fresh connection; returns the status and the body.
    fn request(
        addr: std::net::SocketAddr,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let body = body.unwrap_or("");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        let status = answer[9..12].parse().expect("status");
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// A panic inside a store command answers that request `500` and nothing else: the
    /// writer lives on, the next request succeeds, and the chain has no gap.
    #[test]
    fn a_panic_in_the_writer_fails_one_request_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let config = ServeConfig {
            listen: addr,
            db: db.clone(),
            public_url: None,
            admin_token: AdminTokenHash(sha256(TOKEN.as_bytes())),
            limits: server::Limits {
                max_connections: 16,
                header_read_timeout: Duration::from_secs(5),
                body_read_timeout: Duration::from_secs(5),
                shutdown_grace: Duration::from_secs(5),
            },
            commit_batch_max: 8,
            store_queue_depth: 16,
            readers: 1,
            auth_queue_depth: 16,
            idempotency_ttl: store::IDEMPOTENCY_TTL_MAX,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = runtime.spawn(run(listener, config, async {
            let _ = stopped.await;
        }));

        let body = |name: &str| format!(r#"{{"name":"{name}","opening_deposit_atomic":"1"}}"#);
        let (status, problem) = request(
            addr,
            "POST",
            "/v1/tenants",
            Some(&body(store::FAULT_PANIC_NAME)),
        );
        assert_eq!(status, 500, "the faulty create: {problem}");
        assert!(problem.contains("\"code\":\"internal\""), "{problem}");
        assert!(
            !problem.contains("injected"),
            "a 500 says nothing of its cause: {problem}"
        );

        let (status, created) = request(addr, "POST", "/v1/tenants", Some(&body("after")));
        assert_eq!(status, 201, "the next create: {created}");
        let id = created
            .split("\"id\":\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("an id");
        let (status, read) = request(addr, "GET", &format!("/v1/tenants/{id}"), None);
        assert_eq!(status, 200, "{read}");

        let _ = stop.send(());
        runtime
            .block_on(server)
            .expect("the server task")
            .expect("a clean stop");
        let conn = db::open_reader(&db).expect("open");
        let head = audit::verify(&conn).expect("the chain verifies");
        assert_eq!(
            head.seq, 1,
            "one event: the faulty create left nothing behind"
        );
    }
}
