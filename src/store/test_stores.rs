//! What the store's tests that run on both backends share: a store of each in turn, a tenant
//! made in it, and a write's value.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::ops::CreateTenant;
use super::{Store, StoreConfig, StoreError, Written};
use crate::audit::Actor;
use crate::domain::{Atomic, BudgetId, Name, NewTenant, TenantId, Thresholds};

/// The value of a write that ran afresh; a panic for anything else.
pub(crate) fn fresh<T>(written: Result<Written<T>, StoreError>) -> T {
    match written {
        Ok(Written::Fresh(value)) => value,
        other => panic!("a fresh write, not {:?}", other.err()),
    }
}

/// Creates tenant `name` with `deposit` on its default budget, as the admin: the tenant's id
/// and that budget's.
pub(crate) async fn create_tenant(
    store: &Store,
    name: &str,
    deposit: u128,
) -> (TenantId, BudgetId) {
    let created = fresh(
        store
            .write(CreateTenant {
                tenant: NewTenant {
                    name: Name::parse(name).expect("a name"),
                    opening_deposit: Atomic::new(deposit),
                    policy: None,
                    thresholds: Thresholds::default(),
                },
                actor: Actor::Admin,
                keyed: None,
            })
            .await,
    );
    (created.tenant.id.clone(), created.tenant.budget.id.clone())
}

/// A runtime of two workers, as the stores of these tests run on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Runs `scene` on a store of each backend in turn, SQLite then a scratch PostgreSQL
/// database (`name` tells the databases apart), each opened with a queue of `queue_depth` on
/// a runtime of two workers. Once the store has stopped, `check` looks at the database (its
/// file, or its URL) while it still exists, told whether it is PostgreSQL's.
pub(super) fn on_each_backend<F, Fut>(
    name: &str,
    queue_depth: usize,
    scene: F,
    check: impl Fn(bool, &Path),
) where
    F: Fn(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    static DATABASES: AtomicU64 = AtomicU64::new(0);
    for postgres in [false, true] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scratch;
        let path = if postgres {
            let n = DATABASES.fetch_add(1, Ordering::Relaxed);
            scratch = super::postgres::scratch::Scratch::from_env(&format!("{name}_{n}"));
            PathBuf::from(&scratch.url)
        } else {
            dir.path().join(format!("{name}.db"))
        };
        let runtime = runtime();
        runtime.block_on(async {
            let (store, threads) = Store::open(StoreConfig {
                queue_depth,
                ..StoreConfig::for_tests(path.clone())
            })
            .expect("the store opens");
            scene(store.clone()).await;
            threads.shutdown().await.expect("the store stops");
        });
        check(postgres, &path);
    }
}
