//! Writes of one tenant sent at once pile into batches that mix spends, refused spends and
//! other commands. A batch keeps its spends' figures, entries and audit rows and writes them
//! together, before its `COMMIT` and before any other command of the batch
//! (`write::keeping`): every figure must end as the acknowledged writes say, every entry and
//! audit row must be there, and the chain must verify, on both backends.

use super::ops::{BatchItem, CreateBudget, MoveBudget, SendBatch};
use super::test_stores::{create_tenant, fresh, on_each_backend};
use super::{ListQuery, Store, StoreError};
use crate::audit::Actor;
use crate::domain::{Atomic, Direction, Movement, Name, NewBudget, Unit};

/// Writes sent at once: a charge, a credit, a debit, a child budget's create and a batch of
/// two charges in turn (a batch keeps its own writes, and starts with none kept).
const WRITES: usize = 250;

/// Each kind's share of [`WRITES`].
const EACH: usize = WRITES / 5;

fn movement(direction: Direction, amount: u128) -> Movement {
    Movement {
        direction,
        amount: Atomic::new(amount),
        memo: None,
    }
}

/// Sends the writes at once and checks what they left.
async fn scene(store: Store) {
    let (tenant, budget) = create_tenant(&store, "mixed", 1_000_000).await;
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
                0 => {
                    drop(fresh(store.write(moved(Direction::Charge, 3)).await));
                    // Refused in the middle of a batch that keeps what its spends wrote:
                    // it leaves nothing, and takes nothing kept before it with it.
                    let refused = store.write(moved(Direction::Charge, 1 << 40)).await;
                    assert!(
                        matches!(refused, Err(StoreError::InsufficientFunds(..))),
                        "{refused:?}"
                    );
                }
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
    // Room for every write at once: they queue behind one another into batches.
    on_each_backend("keeping", 2 * WRITES, scene, |postgres, path| {
        let (head, _) = super::verify_audit(path).expect("the chain verifies");
        // The tenant's creation, then one audit row a write (two a batch).
        assert_eq!(head.seq, 1 + 6 * EACH as i64, "postgres: {postgres}");
    });
}
