//! Settlements of one tenant sent at once, mixed with charges on the same budget. On
//! PostgreSQL a batch reads the reservations its settlements name in its first round trip
//! (`write::ahead`): a second settlement of a reservation in the same batch, and a charge
//! before it on the same budget, must be seen as they are, not as the batch began.

use super::ops::{MoveBudget, Reserve, SettleReservation};
use super::test_stores::{create_tenant, fresh, on_each_backend};
use super::{Store, StoreError};
use crate::audit::Actor;
use crate::domain::{Atomic, Direction, Movement, NewReservation, Settle, Ttl};

/// Holds made first; each is then committed twice at once, with a charge between.
const HOLDS: usize = 40;

/// Each hold's amount.
const HOLD: u128 = 10;

/// What each commit of a hold spends of it.
const SPENT: u128 = 7;

/// Makes the holds, sends their commits and the charges at once, and checks what they left.
async fn scene(store: Store) {
    let (tenant, budget) = create_tenant(&store, "settled", 1_000_000).await;
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
    on_each_backend("settle_ahead", 4 * HOLDS, scene, |postgres, path| {
        let (head, _) = super::verify_audit(path).expect("the chain verifies");
        // The tenant's creation, each hold, its one commit and its charge.
        assert_eq!(head.seq, 1 + 3 * HOLDS as i64, "postgres: {postgres}");
    });
}
