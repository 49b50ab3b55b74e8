//! tenantd: a REST control plane that provisions tenants and their budgets, on one SQLite
//! file or a PostgreSQL database shared by any number of instances.
//!
//! # Layout
//!
//! A request flows one way: `server` → `router` → `handlers` → `store` → `audit`.
//!
//! | module | its one job |
//! |---|---|
//! | [`config`] | flags and environment, validated once into a [`config::Command`] |
//! | `server` | accept loop, connection bound, timeouts, graceful shutdown |
//! | `router` | the route table; request id, authentication, dispatch, access log |
//! | `handlers` | one function per endpoint, a file per resource: request → domain → store → response |
//! | `auth` | bearer extraction, constant-time admin check, tenant and access tokens, `Principal` |
//! | `ratelimit` | per-principal token buckets (GCRA), their flags, and the draft's `RateLimit` headers |
//! | `console` | the web console's files, embedded, served with a strict CSP, ETags and gzip |
//! | `oidc` | the identity provider's access tokens: discovery, cached keys, claim checks |
//! | `webhook` | delivery: signing secrets and signatures, endpoint URLs, the SSRF guard, one bounded attempt, the sender |
//! | `domain` | newtypes parsed at the edge: names, amounts, ids, keys, times; tenants, budgets, reservations, entries |
//! | `views` | the JSON a client sees: the handlers' answers and the events' `data` |
//! | `problem` | the one HTTP error type, rendered as RFC 9457 problem details |
//! | `store` | the handle handlers call; its threads, queries, write path, `audit verify` and `copy`, written once for both backends |
//! | `store::ops` | the write operations, one type a file, each run in the writer's transaction |
//! | `store::write` | the batch engine, the writer's state, the audit chain's append, idempotency, counters |
//! | `store::sqlite` | the SQLite backend: writer (group commit), syncer, checkpoints, migrations, backup, its side of `copy` |
//! | `store::postgres` | the PostgreSQL backend: writer locking each tenant's row, chainer, `numeric` amounts, TLS, schema, its side of `copy` |
//! | `audit` | the chain's link hashes; each event's payload and replay; verification as a fold over rows |
//! | `app` | what every handler shares |
//! | `ids` | monotonic tenant ids, tenant tokens, request ids |
//! | `crypto` | SHA-256, hex, the OS random source, the roots TLS clients trust |
//! | `metrics` | lock-free counters and the Prometheus text format |
//! | `fuzzing` | what the fuzz target drives; not a stable interface |
//! | `layout` | tests only: the house's shape (no file over 600 lines, no import cycle in any folder, who names `rusqlite`, this table) |
//! | `proptests` | tests only: property tests of every parser at the edge and of the id generator |
//!
//! Modules import one another along that flow and never back: inside every folder, files
//! name one another in one direction only (`layout` reads the paths and checks it).

mod app;
mod audit;
mod auth;
pub mod config;
mod console;
mod crypto;
mod domain;
mod handlers;
mod ids;
mod metrics;
mod oidc;
mod problem;
mod ratelimit;
mod router;
mod server;
mod store;
mod views;
mod webhook;

#[cfg(test)]
mod layout;
#[cfg(test)]
mod proptests;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::app::App;
use crate::config::ServeConfig;
use crate::console::Console;
use crate::ids::RequestIds;
use crate::metrics::Metrics;
use crate::oidc::Oidc;
use crate::store::{Store, StoreConfig};

/// How often expired idempotency records and old events are erased.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);

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
    let (store, store_threads) = Store::open(StoreConfig {
        path: config.db.clone(),
        queue_depth: config.store_queue_depth,
        credential_queue_depth: config.auth_queue_depth,
        commit_batch_max: config.commit_batch_max,
        readers: config.readers,
        pg_writers: config.pg_writers,
        idempotency_ttl: config.idempotency_ttl,
        clock: store::Clock::System,
    })
    .map_err(|e| {
        format!(
            "cannot open the database {}: {e}",
            store::describe(&config.db)
        )
    })?;
    let oidc = config.oidc.clone().map(Oidc::start).transpose()?;
    let metrics = Arc::new(Metrics::new(router::route_labels()));
    let app = Arc::new(App {
        store,
        limits: config.limits,
        admin_token: config.admin_token,
        oidc,
        public_url: public_url.into(),
        metrics: Arc::clone(&metrics),
        request_ids: RequestIds::new(),
        webhook_allow_http: config.webhooks.allow_http,
        console: Console::new(&config.console, config.oidc.as_ref()),
        rate_limits: ratelimit::Limiter::new(&config.rate_limits).map(Arc::new),
    });
    server::ensure_fd_limit(config.limits.max_connections);
    let purger = tokio::spawn(purge_expired(app.store.clone(), config.event_retention));
    let idle_buckets = app.rate_limits.clone().map(|limits| {
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(ratelimit::IDLE_SWEEP_INTERVAL);
            loop {
                interval.tick().await;
                limits.forget_idle();
            }
        })
    });
    // On SQLite this process is the file's one writer: every lease from before is its own.
    let takes_all = store::postgres_url(&config.db).is_none();
    let sender = webhook::send::start(
        app.store.clone(),
        config.webhooks.clone(),
        Arc::clone(&metrics),
        sender_name(),
        takes_all,
    )?;
    log::info!(
        "listening on http://{bound} (database {})",
        store::describe(&config.db)
    );
    let handler = move |request| router::handle(Arc::clone(&app), request);
    server::serve(listener, config.limits, metrics, handler, shutdown).await;
    purger.abort();
    if let Some(task) = idle_buckets {
        task.abort();
    }
    // Attempts cut off here were not recorded: they are made again after a restart.
    sender.abort();
    store_threads.shutdown().await
}

/// A name for this instance in the webhook endpoints' leases: random, so two instances never
/// share one.
fn sender_name() -> String {
    let mut random = [0u8; 8];
    crypto::random_bytes(&mut random);
    format!("instance_{}", crypto::hex(&random))
}

/// Erases idempotency records (which hold tenant tokens) once their window is over, and
/// events older than `event_retention`: at start-up and then every
/// [`PURGE_INTERVAL`].
async fn purge_expired(store: Store, event_retention: Duration) {
    let mut interval = tokio::time::interval(PURGE_INTERVAL);
    loop {
        interval.tick().await;
        match store.write(store::ops::PurgeExpired).await {
            Ok(0) => {}
            Ok(n) => log::info!("erased {n} expired idempotency records"),
            Err(e) => log::warn!("could not erase expired idempotency records: {e:?}"),
        }
        let mut erased = 0;
        loop {
            let retention = event_retention;
            match store.write(store::ops::PurgeEvents { retention }).await {
                Ok(n) => {
                    erased += n;
                    if n < store::EVENT_PURGE_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    log::warn!("could not erase events past their retention: {e:?}");
                    break;
                }
            }
        }
        if erased > 0 {
            log::info!("erased {erased} events past their retention");
        }
    }
}

/// Why `tenantd audit verify` did not say ok.
#[derive(Debug)]
pub enum AuditVerifyError {
    /// `--db` names a file that is not there: a mistake in the command, as a bad flag is.
    NoDatabase(String),
    /// The database does not verify, or could not be read.
    Failed(String),
}

impl std::fmt::Display for AuditVerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoDatabase(why) | Self::Failed(why) => f.write_str(why),
        }
    }
}

/// What `tenantd audit verify` found in a database whose chain verifies.
#[derive(Debug)]
pub struct AuditVerified {
    /// The events replayed.
    pub events: i64,
    /// The head's hash, once every event is in the chain.
    pub head: String,
    /// How many of the events still waited for their place in the chain (PostgreSQL, where
    /// instances chain the rows after their change commits): replayed after it, in the order
    /// they will be linked.
    pub pending: usize,
}

/// `tenantd audit verify`: replays the audit chain of the database at `db` and compares it
/// with the stored rows.
pub fn audit_verify(db: &Path) -> Result<AuditVerified, AuditVerifyError> {
    // A file that is not there is said once, as what is wrong, before a backend opens it.
    if store::postgres_url(db).is_none() && matches!(db.try_exists(), Ok(false)) {
        return Err(AuditVerifyError::NoDatabase(format!(
            "no database at {}: the file does not exist",
            db.display()
        )));
    }
    store::verify_audit(db)
        .map(|(head, pending)| AuditVerified {
            events: head.seq,
            head: head.hash,
            pending,
        })
        .map_err(AuditVerifyError::Failed)
}

/// `tenantd copy`: the whole database at `from` into the empty `to` (each a SQLite file or a
/// PostgreSQL URL), its progress told to `progress`. On success, a summary of what the copy
/// holds.
pub fn copy(from: &Path, to: &Path, progress: impl FnMut(&str)) -> Result<String, String> {
    store::copy(from, to, progress).map(|copied| {
        let rows: Vec<String> = copied
            .rows
            .iter()
            .map(|(table, n)| format!("{n} {table}"))
            .collect();
        format!(
            "copied: {}; audit chain verified, head {} (seq {}); content digest {}",
            rows.join(", "),
            copied.head.hash,
            copied.head.seq,
            copied.digest
        )
    })
}

/// `tenantd backup`: writes a consistent, verified copy of the database at `db` to the new
/// file `to`. On success, a line that says what the copy holds.
pub fn backup(db: &Path, to: &Path) -> Result<String, String> {
    store::backup(db, to).map(|summary| {
        format!(
            "backup written to {}: {} tenants, {} audit events, head {}",
            to.display(),
            summary.tenants,
            summary.head.seq,
            summary.head.hash
        )
    })
}

/// The event types the API writes, in the contract's order: the one list of
/// `domain::event`, for the black-box tests and the tools outside the crate.
pub const EVENT_TYPES: &[&str] = &domain::EventType::NAMES;

/// What the fuzz target drives: the request parsing below the socket, and the shapes it
/// checks against. Not a stable interface.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::auth::{TOKEN_BYTES_MAX, bearer_token};
    pub use crate::handlers::BODY_BYTES_MAX;
    pub use crate::handlers::tenants::{CreateRequest, create_request};
    pub use crate::problem::{ApiError, FieldError};

    /// The longest `X-Request-Id` kept.
    pub const REQUEST_ID_BYTES_MAX: usize = crate::domain::REQUEST_ID_BYTES_MAX;

    /// Whether `text` is a canonical tenant id.
    pub fn is_tenant_id(text: &str) -> bool {
        crate::domain::TenantId::parse(text).is_some()
    }

    /// The value of a canonical ULID's text.
    pub fn ulid_value(text: &str) -> Option<u128> {
        crate::domain::TenantId::parse(&format!("ten_{text}")).map(|id| id.ulid().0)
    }

    /// `X-Request-Id` as the service keeps it, or `None` if it replaces it.
    pub fn valid_request_id(raw: &[u8]) -> Option<&str> {
        crate::domain::valid_request_id(raw)
    }

    /// Whether `name` is a valid tenant name.
    pub fn is_tenant_name(name: &str) -> bool {
        crate::domain::Name::parse(name).is_ok()
    }

    /// The value of an amount, if `raw` is a valid one.
    pub fn atomic(raw: &str) -> Option<u128> {
        crate::domain::Atomic::parse(raw).ok().map(|a| a.get())
    }

    /// Whether `raw` is a valid `Idempotency-Key`.
    pub fn is_idempotency_key(raw: &[u8]) -> bool {
        crate::domain::IdempotencyKey::parse(raw).is_ok()
    }

    /// The tenant a token claims to belong to, if it has a tenant token's shape.
    pub fn token_tenant(token: &str) -> Option<String> {
        crate::ids::TenantToken::tenant_of(token).map(|id| id.as_str().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use super::*;
    use crate::auth::AdminTokenHash;
    use crate::config::ServeConfig;

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
            admin_token: Some(AdminTokenHash::of(TOKEN)),
            oidc: None,
            limits: server::Limits {
                max_connections: 16,
                workers: 1,
                header_read_timeout: Duration::from_secs(5),
                body_read_timeout: Duration::from_secs(5),
                shutdown_grace: Duration::from_secs(5),
            },
            commit_batch_max: 8,
            store_queue_depth: 16,
            readers: 1,
            pg_writers: store::PG_WRITERS_DEFAULT,
            auth_queue_depth: 16,
            idempotency_ttl: store::IDEMPOTENCY_TTL_MAX,
            event_retention: Duration::from_secs(86_400),
            webhooks: webhook::flags::WebhookConfig {
                timeout: Duration::from_secs(10),
                retry_schedule: vec![Duration::from_secs(5)],
                disable_after: 100,
                allow_http: false,
                allow_private: false,
                ca_file: None,
            },
            rate_limits: ratelimit::RateLimitConfig {
                rate: None,
                burst: std::num::NonZeroU32::MIN,
                admin: false,
            },
            console: console::ConsoleConfig::default(),
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
        let verified = audit_verify(&db).expect("the chain verifies");
        assert_eq!(
            verified.events, 1,
            "one event: the faulty create left nothing behind"
        );
    }
}
