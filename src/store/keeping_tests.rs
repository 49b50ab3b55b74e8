//! Writes of one tenant sent at once pile into batches that mix spends with other commands.
//! On PostgreSQL a batch keeps its spends' figures, entries and audit rows and writes them
//! together, before its `COMMIT` and before any other command of the batch
//! (`write::keeping`): every figure must end as the acknowledged writes say, every entry and
//! audit row must be there, and the chain must verify, on both backends.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ops::{BatchItem, CreateBudget, CreateTenant, MoveBudget, SendBatch};
use super::{ListQuery, Store, StoreConfig, StoreError, Written};
use crate::audit::Actor;
use crate::domain::{
    Atomic, BudgetId, Direction, Movement, Name, NewBudget, NewTenant, TenantId, Unit,
};

/// Writes sent at once: a charge, a credit, a debit, a child budget's create and a batch of
/// two charges in turn (a batch keeps its own writes, and starts with none kept).
const WRITES: usize = 250;

/// Each kind's share of [`WRITES`].
const EACH: usize = WRITES / 5;

fn fresh<T>(written: Result<Written<T>, StoreError>) -> T {
    match written {
        Ok(Written::Fresh(value)) => value,
        other => panic!("a fresh write, not {:?}", other.err()),
    }
}

fn movement(direction: Direction, amount: u128) -> Movement {
    Movement {
        direction,
        amount: Atomic::new(amount),
        memo: None,
    }
}

/// Sends the writes at once and checks what they left.
async fn scene(store: &Store) {
    let created = fresh(
        store
            .write(CreateTenant {
                tenant: NewTenant {
                    name: Name::parse("mixed").expect("a name"),
                    opening_deposit: Atomic::new(1_000_000),
                    policy: None,
                    thresholds: crate::domain::Thresholds::default(),
                },
                actor: Actor::Admin,
                keyed: None,
            })
            .await,
    );
    let tenant: TenantId = created.tenant.id.clone();
    let budget: BudgetId = created.tenant.budget.id.clone();
    let mut sent = tokio::task::JoinSet::new();
    for n in 0..WRITES {
        let (store, tenant, budget) = (store.clone(), tenant.clone(), budget.clone());
        sent.spawn(async move {
            let moved = |direction, amount| MoveBudget {
                tenant: tenant.clone(),
                budget: Some(budget.clone()),
                movement: movement(direction, amount),
                actor: Actor::Admin,
                keyed: None,
            };
            match n % 5 {
                0 => drop(fresh(store.write(moved(Direction::Charge, 3)).await)),
                1 => drop(fresh(store.write(moved(Direction::Credit, 5)).await)),
                2 => drop(fresh(store.write(moved(Direction::Debit, 7)).await)),
                3 => {
                    let charge = || BatchItem::Move {
                        budget: Some(budget.clone()),
                        movement: movement(Direction::Charge, 11),
                    };
                    let outcome = fresh(
                        store
                            .write(SendBatch {
                                tenant,
                                items: vec![charge(), charge()],
                                atomic: false,
                                actor: Actor::Admin,
                                keyed: None,
                            })
                            .await,
                    );
                    assert!(outcome.applied, "the batch's charges fit");
                }
                _ => {
                    let child = NewBudget {
                        name: Name::parse(&format!("child-{n}")).expect("a name"),
                        unit: Unit::atomic(),
                        opening_deposit: Atomic::new(0),
                        policy: None,
                        thresholds: crate::domain::Thresholds::default(),
                        parent: Some(budget.clone()),
                    };
                    fresh(
                        store
                            .write(CreateBudget {
                                tenant,
                                budget: child,
                                actor: Actor::Admin,
                                keyed: None,
                            })
                            .await,
                    );
                }
            }
        });
    }
    while let Some(done) = sent.join_next().await {
        done.expect("a write ran");
    }
    let each = EACH as u128;
    let read = store
        .budget(tenant.clone(), Some(budget.clone()))
        .await
        .expect("the budget is read");
    assert_eq!(read.figures.spent, (3 + 2 * 11) * each, "every charge");
    assert_eq!(read.figures.credited, 1_000_000 + 5 * each, "every credit");
    assert_eq!(read.figures.debited, 7 * each, "every debit");
    let mut entries = Vec::new();
    let mut query = ListQuery::first(1000);
    loop {
        let page = store
            .list_entries(tenant.clone(), Some(budget.clone()), query.clone())
            .await
            .expect("the entries are read");
        entries.extend(page.items);
        if !page.has_more {
            break;
        }
        query.after = entries.last().map(|e| e.id.as_str().to_owned());
    }
    assert_eq!(
        entries.len(),
        1 + 5 * EACH,
        "the opening entry and one a movement"
    );
    let children = store
        .list_budgets(tenant.clone(), ListQuery::first(1000))
        .await
        .expect("the budgets are read");
    assert_eq!(children.items.len(), 1 + EACH, "every child created");
}

#[test]
fn spends_mixed_with_other_writes_in_one_batch_leave_every_figure_and_row() {
    static DATABASES: AtomicU64 = AtomicU64::new(0);
    for postgres in [false, true] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scratch;
        let path = if postgres {
            let n = DATABASES.fetch_add(1, Ordering::Relaxed);
            scratch = super::postgres::scratch::Scratch::from_env(&format!("keeping_{n}"));
            std::path::PathBuf::from(&scratch.url)
        } else {
            dir.path().join("keeping.db")
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            // Room for every write at once: they queue behind one another into batches.
            let (store, threads) = Store::open(StoreConfig {
                queue_depth: 2 * WRITES,
                ..StoreConfig::for_tests(path.clone())
            })
            .expect("the store opens");
            scene(&store).await;
            threads.shutdown().await.expect("the store stops");
        });
        let (head, _) = super::verify_audit(&path).expect("the chain verifies");
        // The tenant's creation, then one audit row a write (two a batch).
        assert_eq!(head.seq, 1 + 6 * EACH as i64, "postgres: {postgres}");
    }
}
