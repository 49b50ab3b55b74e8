//! Settlements of one tenant sent at once, mixed with charges on the same budget. On
//! PostgreSQL a batch reads the reservations its settlements name in its first round trip
//! (`write::ahead`): a second settlement of a reservation in the same batch, and a charge
//! before it on the same budget, must be seen as they are, not as the batch began.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ops::{CreateTenant, MoveBudget, Reserve, SettleReservation};
use super::{Store, StoreConfig, StoreError, Written};
use crate::audit::Actor;
use crate::domain::{
    Atomic, Direction, Movement, Name, NewReservation, NewTenant, Settle, TenantId, Ttl,
};

/// Holds made first; each is then committed twice at once, with a charge between.
const HOLDS: usize = 40;

/// Each hold's amount.
const HOLD: u128 = 10;

/// What each commit of a hold spends of it.
const SPENT: u128 = 7;

fn fresh<T>(written: Result<Written<T>, StoreError>) -> T {
    match written {
        Ok(Written::Fresh(value)) => value,
        other => panic!("a fresh write, not {:?}", other.err()),
    }
}

/// Makes the holds, sends their commits and the charges at once, and checks what they left.
async fn scene(store: &Store) {
    let created = fresh(
        store
            .write(CreateTenant {
                tenant: NewTenant {
                    name: Name::parse("settled").expect("a name"),
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
    let budget = created.tenant.budget.id.clone();
    let mut holds = Vec::with_capacity(HOLDS);
    for _ in 0..HOLDS {
        let hold = NewReservation {
            budget_text: budget.as_str().to_owned(),
            amount: Atomic::new(HOLD),
            ttl: Ttl::default_hold(),
            memo: None,
        };
        let reserve = Reserve {
            tenant: tenant.clone(),
            reservation: hold,
            actor: Actor::Admin,
            keyed: None,
        };
        holds.push(fresh(store.write(reserve).await).id);
    }
    let mut sent = tokio::task::JoinSet::new();
    for id in holds {
        for n in 0..3 {
            let (store, tenant, budget, id) =
                (store.clone(), tenant.clone(), budget.clone(), id.clone());
            sent.spawn(async move {
                if n == 1 {
                    let charge = MoveBudget {
                        tenant,
                        budget: Some(budget),
                        movement: Movement {
                            direction: Direction::Charge,
                            amount: Atomic::new(1),
                            memo: None,
                        },
                        actor: Actor::Admin,
                        keyed: None,
                    };
                    fresh(store.write(charge).await);
                    return None;
                }
                let commit = SettleReservation {
                    tenant,
                    reservation: Some(id),
                    settle: Settle::Commit(Atomic::new(SPENT)),
                    actor: Actor::Admin,
                    keyed: None,
                };
                Some(store.write(commit).await.map(|_| ()))
            });
        }
    }
    let (mut committed, mut refused) = (0, 0);
    while let Some(done) = sent.join_next().await {
        match done.expect("a write ran") {
            None => {}
            Some(Ok(())) => committed += 1,
            Some(Err(StoreError::ReservationNotActive("committed"))) => refused += 1,
            Some(Err(e)) => panic!("a commit failed otherwise: {e:?}"),
        }
    }
    assert_eq!(
        (committed, refused),
        (HOLDS, HOLDS),
        "one commit of each hold, once"
    );
    let read = store
        .budget(tenant, Some(budget))
        .await
        .expect("the budget is read");
    let holds = HOLDS as u128;
    assert_eq!(
        read.figures.spent,
        holds * (SPENT + 1),
        "every commit and charge"
    );
    assert_eq!(read.figures.reserved, 0, "every hold settled, once");
}

#[test]
fn settlements_read_ahead_see_what_their_batch_did_before_them() {
    static DATABASES: AtomicU64 = AtomicU64::new(0);
    for postgres in [false, true] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scratch;
        let path = if postgres {
            let n = DATABASES.fetch_add(1, Ordering::Relaxed);
            scratch = super::postgres::scratch::Scratch::from_env(&format!("settle_ahead_{n}"));
            std::path::PathBuf::from(&scratch.url)
        } else {
            dir.path().join("settle-ahead.db")
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let (store, threads) = Store::open(StoreConfig {
                queue_depth: 4 * HOLDS,
                ..StoreConfig::for_tests(path.clone())
            })
            .expect("the store opens");
            scene(&store).await;
            threads.shutdown().await.expect("the store stops");
        });
        let (head, _) = super::verify_audit(&path).expect("the chain verifies");
        // The tenant's creation, each hold, its one commit and its charge.
        assert_eq!(head.seq, 1 + 3 * HOLDS as i64, "postgres: {postgres}");
    }
}
