//! A batch's operations leave what the same operations sent one by one leave, where the batch
//! cannot take its fast path: an operation refused after its catch-up recorded what the
//! batch's sweep left due (`ops::batch` then runs the batch again with a savepoint an
//! operation, as single calls run). On both backends, figures and entries compared level by
//! level.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ops::{BatchItem, CreateBudget, ItemResult, MoveBudget, SendBatch};
use super::test_stores::{create_tenant, fresh};
use super::{Clock, ListQuery, Store, StoreConfig};
use crate::audit::Actor;
use crate::domain::{
    Atomic, BudgetId, Cadence, Direction, Movement, Name, NewBudget, Policy, Unit,
};
use crate::store::BOUNDARY_SWEEP_MAX;

/// 2026-11-24T00:00:00Z.
const START_MS: u64 = 1_795_392_000_000;

fn charge(budget: &BudgetId, amount: u128) -> BatchItem {
    BatchItem::Move {
        budget: Some(budget.clone()),
        movement: Movement {
            direction: Direction::Charge,
            amount: Atomic::new(amount),
            memo: None,
        },
    }
}

/// What an operation came to, as a word: `ok`, or the refusal's name.
fn outcome(result: &ItemResult) -> String {
    match result {
        ItemResult::Entry(_) | ItemResult::Reservation(_) => "ok".into(),
        ItemResult::Refused(e, _) => format!("{e:?}"),
        ItemResult::RefusedBefore => "refused before".into(),
    }
}

/// Runs the scene on `backend`, the operations in one batch or one by one; each operation's
/// outcome, then each level's figures and entries (kind and amount, in order).
fn scene(postgres: bool, batched: bool) -> Vec<String> {
    static DATABASES: AtomicU64 = AtomicU64::new(0);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let scratch;
    let path = if postgres {
        let n = DATABASES.fetch_add(1, Ordering::Relaxed);
        scratch = super::postgres::scratch::Scratch::from_env(&format!("batch_{n}_{batched}"));
        std::path::PathBuf::from(&scratch.url)
    } else {
        dir.path().join("batch.db")
    };
    let clock = Arc::new(AtomicU64::new(START_MS));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(async {
            let (store, threads) = Store::open(StoreConfig {
                clock: Clock::Manual(Arc::clone(&clock)),
                ..StoreConfig::for_tests(path.clone())
            })
            .expect("the store opens");
            let (tenant, org) = create_tenant(&store, "t", 100).await;
            // More boundaries due than a batch's sweep records, each before the key's: the sweep
            // leaves the key's for the first operation's catch-up. (No hold is due: a tenant with
            // one has all its budgets caught up by the sweep.)
            for n in 0..BOUNDARY_SWEEP_MAX + 10 {
                fresh(
                    store
                        .write(CreateBudget {
                            tenant: tenant.clone(),
                            budget: NewBudget {
                                name: Name::parse(&format!("filler-{n}")).expect("a name"),
                                unit: Unit::atomic(),
                                opening_deposit: Atomic::new(0),
                                policy: Some(Policy {
                                    cadence: Cadence::fixed(1).expect("a length"),
                                    allowance: Atomic::new(1),
                                    rollover_max: Atomic::new(0),
                                }),
                                thresholds: crate::domain::Thresholds::default(),
                                parent: None,
                            },
                            actor: Actor::Admin,
                            keyed: None,
                        })
                        .await,
                );
            }
            clock.fetch_add(500, Ordering::SeqCst);
            let key = fresh(
                store
                    .write(CreateBudget {
                        tenant: tenant.clone(),
                        budget: NewBudget {
                            name: Name::parse("key").expect("a name"),
                            unit: Unit::atomic(),
                            opening_deposit: Atomic::new(100),
                            // 100 a second, nothing carried.
                            policy: Some(Policy {
                                cadence: Cadence::fixed(1).expect("a length"),
                                allowance: Atomic::new(100),
                                rollover_max: Atomic::new(0),
                            }),
                            thresholds: crate::domain::Thresholds::default(),
                            parent: Some(org.clone()),
                        },
                        actor: Actor::Admin,
                        keyed: None,
                    })
                    .await,
            )
            .id;
            // The key's boundaries are recorded by the first operation's catch-up, which is still
            // refused: 150 is more than the key's 100 a period.
            clock.fetch_add(3_000, Ordering::SeqCst);
            let items = vec![
                charge(&key, 150),
                charge(&key, 30),
                charge(&org, 50),
                charge(&key, 1),
            ];
            let mut seen: Vec<String> = if batched {
                let outcome_of = fresh(
                    store
                        .write(SendBatch {
                            tenant: tenant.clone(),
                            items,
                            atomic: false,
                            actor: Actor::Tenant,
                            keyed: None,
                        })
                        .await,
                );
                assert!(outcome_of.applied);
                outcome_of.results.iter().map(outcome).collect()
            } else {
                let mut seen = Vec::new();
                for item in items {
                    let BatchItem::Move { budget, movement } = item else {
                        unreachable!("charges only");
                    };
                    let written = store
                        .write(MoveBudget {
                            tenant: tenant.clone(),
                            budget,
                            movement,
                            actor: Actor::Tenant,
                            keyed: None,
                        })
                        .await;
                    seen.push(match written {
                        Ok(_) => "ok".into(),
                        Err(e) => format!("{e:?}"),
                    });
                }
                seen
            };
            for budget in [&key, &org] {
                let b = store
                    .budget(tenant.clone(), Some(budget.clone()))
                    .await
                    .expect("the budget");
                seen.push(format!("{:?}", b.figures));
                let entries = store
                    .list_entries(tenant.clone(), Some(budget.clone()), ListQuery::first(100))
                    .await
                    .expect("the entries");
                for e in entries.items {
                    seen.push(format!("{:?} {}", e.kind, e.amount));
                }
            }
            threads.shutdown().await.expect("the store stops");
            // The two stores' ids differ: each level by its name.
            seen.iter()
                .map(|line| {
                    line.replace(key.as_str(), "key")
                        .replace(org.as_str(), "org")
                })
                .collect::<Vec<_>>()
        })
        .into_iter()
        .chain(std::iter::once(
            super::verify_audit(&path)
                .map(|_| "verified".to_owned())
                .unwrap_or_else(|e| format!("audit verify: {e}")),
        ))
        .collect()
}

#[test]
fn an_operation_refused_after_it_recorded_an_expiry_leaves_what_its_single_call_leaves() {
    for postgres in [false, true] {
        let one_by_one = scene(postgres, false);
        let batched = scene(postgres, true);
        assert!(
            one_by_one[0].starts_with("InsufficientFunds(Atomic(100), Some(BudgetId(\"key\"))"),
            "{one_by_one:?}"
        );
        assert_eq!(one_by_one[1..4], ["ok", "ok", "ok"], "{one_by_one:?}");
        assert_eq!(one_by_one, batched, "postgres {postgres}");
        let resets = one_by_one
            .iter()
            .filter(|l| l.starts_with("Refill"))
            .count()
            + one_by_one
                .iter()
                .filter(|l| l.starts_with("Forfeit"))
                .count();
        assert!(resets > 0, "{one_by_one:?}");
        assert_eq!(one_by_one.last().map(String::as_str), Some("verified"));
    }
}
