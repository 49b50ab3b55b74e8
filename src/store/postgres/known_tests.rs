//! Spends on what a writer knows of the rows it wrote last (`write::known`): a batch of them
//! takes one round trip, a row another instance moved meanwhile fails the batch's guard and
//! the batch is sent again read ahead, and a tenant locked from outside holds its writes back
//! until the lock goes. Figures stay exact throughout, and the chain verifies.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::blocking::Blocking;
use super::scratch::Scratch;
use crate::audit::Actor;
use crate::domain::{Atomic, BudgetId, Direction, Movement, Name, NewTenant, TenantId, Thresholds};
use crate::domain::{EventTypes, NewEndpoint};
use crate::store::ops::{CreateEndpoint, CreateTenant, MoveBudget, Secret};
use crate::store::sql::{Param, Sql};
use crate::store::{Store, StoreConfig, Written};

/// Charges of 1 an instance makes before the other moves the budget.
const CHARGES: u128 = 6;

/// How long the outside session holds a tenant's row.
const HELD: Duration = Duration::from_millis(400);

async fn create(store: &Store, name: &str) -> (TenantId, BudgetId) {
    let created = store
        .write(CreateTenant {
            tenant: NewTenant {
                name: Name::parse(name).expect("a name"),
                opening_deposit: Atomic::new(1_000_000),
                policy: None,
                thresholds: Thresholds::default(),
            },
            actor: Actor::Admin,
            keyed: None,
        })
        .await;
    let Ok(Written::Fresh(created)) = created else {
        panic!("the tenant is created: {:?}", created.err());
    };
    (created.tenant.id.clone(), created.tenant.budget.id.clone())
}

/// Moves `amount` on `budget` in `direction`, as the admin; a panic unless it goes through.
async fn spend(
    store: &Store,
    (tenant, budget): (&TenantId, &BudgetId),
    direction: Direction,
    amount: u128,
) {
    let moved = store
        .write(MoveBudget {
            tenant: tenant.clone(),
            budget: Some(budget.clone()),
            movement: Movement {
                direction,
                amount: Atomic::new(amount),
                memo: None,
            },
            actor: Actor::Admin,
            keyed: None,
        })
        .await;
    assert!(
        matches!(moved, Ok(Written::Fresh(_))),
        "the {direction:?} goes through: {:?}",
        moved.err()
    );
}

async fn charge(store: &Store, tenant: &TenantId, budget: &BudgetId, amount: u128) {
    spend(store, (tenant, budget), Direction::Charge, amount).await;
}

async fn credit(store: &Store, tenant: &TenantId, budget: &BudgetId) {
    spend(store, (tenant, budget), Direction::Credit, 1).await;
}

/// Runs `sql` on a session of its own, on a thread of its own (its calls block), and the
/// first value of its first row.
async fn outside(url: &str, sql: String) -> Option<String> {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            let mut session = Blocking::connect(&url).expect("an outside session");
            session
                .query(&sql, &[], |row| {
                    Ok(crate::store::sql::text(row, 0)?.into_owned())
                })
                .expect("the statement runs")
                .into_iter()
                .next()
        })
        .join()
        .expect("the session ends")
    })
    .await
    .expect("the wait ends")
}

async fn spent(store: &Store, tenant: &TenantId, budget: &BudgetId) -> u128 {
    let read = store
        .budget(tenant.clone(), Some(budget.clone()))
        .await
        .expect("the budget is read");
    read.figures.spent
}

#[test]
fn spends_on_what_the_writer_knows_take_one_round_trip_and_see_every_other_write() {
    let db = Scratch::from_env("known");
    let config = || StoreConfig::for_tests(PathBuf::from(&db.url));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (a, threads_a) = Store::open(config()).expect("instance a opens");
        let (b, threads_b) = Store::open(config()).expect("instance b opens");
        let (tenant, budget) = create(&a, "known").await;
        for _ in 0..CHARGES {
            charge(&a, &tenant, &budget, 1).await;
        }
        let guarded = a.gauges().batches_guarded;
        assert!(
            guarded >= CHARGES as u64 - 1,
            "every charge after the first begins on what the writer knows: {guarded} did"
        );

        // Another instance moves the budget: the next charge's guard fails, and the charge is
        // sent again, read ahead, on figures that hold the other instance's charge.
        charge(&b, &tenant, &budget, 100).await;
        charge(&a, &tenant, &budget, 1).await;
        assert_eq!(spent(&a, &tenant, &budget).await, CHARGES + 100 + 1);
        assert_eq!(
            a.gauges().batches_guarded,
            guarded,
            "the batch whose guard failed committed read ahead"
        );
        // The tenant is doubted now: its writes are read ahead for a while.
        charge(&a, &tenant, &budget, 1).await;
        assert_eq!(a.gauges().batches_guarded, guarded);
        assert_eq!(spent(&b, &tenant, &budget).await, CHARGES + 100 + 2);

        // A tenant whose row an outside session holds: the charge on what the writer knows
        // cannot take the lock, and goes through once it is released.
        let (other, other_budget) = create(&a, "held").await;
        charge(&a, &other, &other_budget, 1).await;
        charge(&a, &other, &other_budget, 1).await;
        let before = a.gauges().batches_guarded;
        assert!(before > guarded, "the second charge began on what a knew");
        // A thread of its own: the session's calls block.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (url, id) = (db.url.clone(), other.clone());
        let release = std::thread::spawn(move || {
            let mut outside = Blocking::connect(&url).expect("an outside session");
            outside.run("BEGIN").expect("a transaction");
            outside
                .query(
                    "SELECT id FROM tenants WHERE id = ?1 FOR UPDATE",
                    &[Param::Text(id.as_str())],
                    |_| Ok(()),
                )
                .expect("the row is held");
            held_tx.send(Instant::now()).expect("the test waits");
            std::thread::sleep(HELD);
            outside.run("ROLLBACK").expect("the row is let go");
        });
        let held_at = tokio::task::spawn_blocking(move || held_rx.recv())
            .await
            .expect("the wait ends")
            .expect("the row is held");
        charge(&a, &other, &other_budget, 1).await;
        let waited = held_at.elapsed();
        release.join().expect("the outside session ends");
        assert!(
            waited >= HELD,
            "the charge went through while the row was held ({waited:?})"
        );
        assert_eq!(spent(&b, &other, &other_budget).await, 3);

        // Credits may write events, and creates do: their batches take the enabled webhook
        // endpoints from what the writer knows, once a batch read them.
        // (A tenant of its own: the one held is doubted for a while.)
        let (third, third_budget) = create(&a, "credited").await;
        credit(&a, &third, &third_budget).await;
        let before = a.gauges().batches_guarded;
        credit(&a, &third, &third_budget).await;
        assert_eq!(
            a.gauges().batches_guarded,
            before + 1,
            "a credit after one that read the endpoints"
        );
        // Creates name no tenant and take turns between the writers: two for each to read
        // the endpoints, two more on what each knows.
        for name in ["made 1", "made 2"] {
            create(&a, name).await;
        }
        let before = a.gauges().batches_guarded;
        for name in ["made 3", "made 4"] {
            create(&a, name).await;
        }
        assert_eq!(
            a.gauges().batches_guarded,
            before + 2,
            "creates after those that read the endpoints"
        );
        // An endpoint made through the other instance: the next credit's guard fails, and
        // the credit, sent again, writes a delivery for it.
        let made = b
            .write(CreateEndpoint {
                endpoint: NewEndpoint {
                    url: "https://a.example/".into(),
                    description: None,
                    event_types: EventTypes::All,
                    tenant_id: None,
                },
                secret: Secret([7; 32]),
                actor: Actor::Admin,
                keyed: None,
            })
            .await;
        let Ok(Written::Fresh(endpoint)) = made else {
            panic!("the endpoint is made: {:?}", made.err());
        };
        let endpoint = endpoint.id;
        credit(&a, &third, &third_budget).await;
        let deliveries = outside(
            &db.url,
            format!(
                "SELECT CAST(count(*) AS TEXT) FROM webhook_deliveries \
                 WHERE endpoint_id = '{endpoint}'"
            ),
        )
        .await;
        assert_eq!(
            deliveries.as_deref(),
            Some("1"),
            "the new endpoint takes the credit's event"
        );

        threads_a.shutdown().await.expect("a stops");
        threads_b.shutdown().await.expect("b stops");
    });
    let (head, _) =
        crate::store::verify_audit(&PathBuf::from(&db.url)).expect("the chain verifies");
    // Seven tenants made, every charge (the first's `CHARGES` and three more, the second's
    // three), the third's three credits, and the endpoint.
    assert_eq!(head.seq, 7 + (CHARGES as i64 + 3) + 3 + 3 + 1);
}
