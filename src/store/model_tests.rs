//! A model-based property test of the store: random sequences of budget creates, credits,
//! debits, reservations, commits, releases, extends, closes, tombstones and expiry sweeps,
//! with the clock moved forward by hand, run against the real store (SQLite, and PostgreSQL)
//! and against a model written here from the contract. After every step the outcome must
//! match the model's (the same success or the same refusal), every budget's figures must
//! match and keep the invariant, and every reservation's recorded state must match; at the
//! end the audit chain must replay to the stored rows.
//!
//! The model expires every reservation whose time is up before each write: the writer
//! records due expiries at the start of each batch, and each step here is a batch of one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::sample::Index;

use super::ops::{
    CloseBudget, CreateBudget, CreateTenant, ExpireDue, MoveBudget, Reserve, SettleReservation,
    TombstoneTenant,
};
use super::{Clock, Store, StoreConfig, StoreError, Written};
use crate::audit::Actor;
use crate::domain::{
    Atomic, BudgetId, Direction, Movement, Name, NewBudget, NewReservation, NewTenant,
    ReservationId, Settle, TenantId, Ttl, Unit,
};

/// Steps in one sequence, at most.
const STEPS_MAX: usize = 48;

/// Sequences run; each step is a committed transaction, so a few hundred milliseconds each.
const CASES: u32 = 128;

/// The clock's start: 2026-11-23T00:00:00.000Z.
const START_MS: u64 = 1_795_392_000_000;

/// One step of a sequence. Indexes pick among what exists when the step runs.
#[derive(Debug, Clone)]
enum Step {
    CreateBudget(Index, u128),
    Credit(Index, u128),
    Debit(Index, u128),
    Reserve(Index, u128, u32),
    Commit(Index, u128),
    Release(Index),
    Extend(Index, u32),
    Close(Index),
    Tombstone(Index),
    Advance(u64),
    Sweep,
}

fn amount() -> impl Strategy<Value = u128> {
    prop_oneof![
        8 => 0u128..25,
        1 => Just(u128::MAX),
        1 => (u128::MAX - 30)..=u128::MAX,
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let ttl = 1u32..4;
    prop_oneof![
        1 => (any::<Index>(), amount()).prop_map(|(i, a)| Step::CreateBudget(i, a)),
        2 => (any::<Index>(), amount()).prop_map(|(i, a)| Step::Credit(i, a)),
        2 => (any::<Index>(), 0u128..25).prop_map(|(i, a)| Step::Debit(i, a)),
        5 => (any::<Index>(), 0u128..25, ttl.clone()).prop_map(|(i, a, t)| Step::Reserve(i, a, t)),
        3 => (any::<Index>(), 0u128..30).prop_map(|(i, a)| Step::Commit(i, a)),
        2 => any::<Index>().prop_map(Step::Release),
        1 => (any::<Index>(), ttl).prop_map(|(i, t)| Step::Extend(i, t)),
        1 => any::<Index>().prop_map(Step::Close),
        1 => any::<Index>().prop_map(Step::Tombstone),
        3 => (0u64..2500).prop_map(Step::Advance),
        1 => Just(Step::Sweep),
    ]
}

/// A budget as the contract says it moves.
#[derive(Debug, Clone)]
struct ModelBudget {
    tenant: usize,
    credited: u128,
    debited: u128,
    spent: u128,
    reserved: u128,
    open: bool,
}

impl ModelBudget {
    fn available(&self) -> u128 {
        self.credited - self.debited - self.spent - self.reserved
    }
}

#[derive(Debug, Clone)]
struct ModelReservation {
    budget: usize,
    amount: u128,
    expires_ms: u64,
    state: &'static str,
}

/// What a step is expected to do: succeed, or be refused with this error.
type Outcome = Result<(), StoreError>;

#[derive(Debug, Default)]
struct Model {
    tenants_active: Vec<bool>,
    budgets: Vec<ModelBudget>,
    reservations: Vec<ModelReservation>,
}

impl Model {
    /// Every active reservation whose time is up at `now_ms` expires.
    fn expire_due(&mut self, now_ms: u64) {
        for r in &mut self.reservations {
            if r.state == "active" && r.expires_ms <= now_ms {
                r.state = "expired";
                self.budgets[r.budget].reserved -= r.amount;
            }
        }
    }

    fn release_all(&mut self, budget: usize) {
        for r in &mut self.reservations {
            if r.budget == budget && r.state == "active" {
                r.state = "released";
                self.budgets[budget].reserved -= r.amount;
            }
        }
    }

    /// `404`s aside (the steps name only what exists), the refusals of a write on a budget.
    fn budget_refusal(&self, budget: usize) -> Option<StoreError> {
        let b = &self.budgets[budget];
        if !self.tenants_active[b.tenant] {
            Some(StoreError::TenantTombstoned)
        } else if !b.open {
            Some(StoreError::BudgetClosed)
        } else {
            None
        }
    }

    fn short(&self, budget: usize, amount: u128) -> Option<StoreError> {
        let available = self.budgets[budget].available();
        (amount > available).then(|| StoreError::InsufficientFunds(Atomic::new(available)))
    }
}

/// The store, its ids, and the clock the test moves.
struct Harness {
    store: Store,
    clock: Arc<AtomicU64>,
    tenants: Vec<TenantId>,
    budgets: Vec<BudgetId>,
    reservations: Vec<ReservationId>,
}

fn fresh<T>(written: Result<Written<T>, StoreError>) -> Result<T, StoreError> {
    match written? {
        Written::Fresh(value) => Ok(value),
        Written::Replayed(_) => panic!("no key was sent, so nothing replays"),
    }
}

impl Harness {
    async fn run(&mut self, model: &mut Model, step: &Step) -> Result<(), String> {
        let now_ms = self.clock.load(Ordering::SeqCst);
        if !matches!(step, Step::Advance(_)) {
            model.expire_due(now_ms);
        }
        let pick = |i: &Index, n: usize| (n > 0).then(|| i.index(n));
        let (expected, got): (Outcome, Outcome) = match step {
            Step::Advance(ms) => {
                self.clock.fetch_add(*ms, Ordering::SeqCst);
                return Ok(());
            }
            Step::Sweep => {
                let swept = self
                    .store
                    .write(ExpireDue)
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                if swept != 0 {
                    return Err(format!("{swept} expiries left for the sweep after a write"));
                }
                (Ok(()), Ok(()))
            }
            Step::CreateBudget(i, deposit) => {
                let tenant = i.index(model.tenants_active.len());
                let expected = if model.tenants_active[tenant] {
                    Ok(())
                } else {
                    Err(StoreError::TenantTombstoned)
                };
                let got = fresh(
                    self.store
                        .write(CreateBudget {
                            tenant: self.tenants[tenant].clone(),
                            budget: NewBudget {
                                name: Name::parse(&format!("b{}", self.budgets.len()))
                                    .expect("a name"),
                                unit: Unit::atomic(),
                                opening_deposit: Atomic::new(*deposit),
                                policy: None,
                                thresholds: crate::domain::Thresholds::default(),
                            },
                            actor: Actor::Admin,
                            keyed: None,
                        })
                        .await,
                );
                let got = got.map(|budget| {
                    self.budgets.push(budget.id);
                    model.budgets.push(ModelBudget {
                        tenant,
                        credited: *deposit,
                        debited: 0,
                        spent: 0,
                        reserved: 0,
                        open: true,
                    });
                });
                (expected, got)
            }
            Step::Credit(i, amount) | Step::Debit(i, amount) => {
                let budget = i.index(model.budgets.len());
                let credit = matches!(step, Step::Credit(..));
                let expected = match model.budget_refusal(budget) {
                    Some(e) => Err(e),
                    None if *amount == 0 => return Ok(()),
                    None if credit => {
                        let b = &mut model.budgets[budget];
                        match b.credited.checked_add(*amount) {
                            Some(c) => {
                                b.credited = c;
                                Ok(())
                            }
                            None => Err(StoreError::AmountOverflow),
                        }
                    }
                    None => match model.short(budget, *amount) {
                        Some(e) => Err(e),
                        None => {
                            model.budgets[budget].debited += amount;
                            Ok(())
                        }
                    },
                };
                let got = fresh(
                    self.store
                        .write(MoveBudget {
                            tenant: self.tenants[model.budgets[budget].tenant].clone(),
                            budget: Some(self.budgets[budget].clone()),
                            movement: Movement {
                                direction: if credit {
                                    Direction::Credit
                                } else {
                                    Direction::Debit
                                },
                                amount: Atomic::new(*amount),
                                memo: None,
                            },
                            actor: Actor::Admin,
                            keyed: None,
                        })
                        .await,
                )
                .map(|_| ());
                (expected, got)
            }
            Step::Reserve(i, amount, ttl) => {
                let budget = i.index(model.budgets.len());
                if *amount == 0 {
                    return Ok(());
                }
                let expected = match model
                    .budget_refusal(budget)
                    .or_else(|| model.short(budget, *amount))
                {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
                let got = fresh(
                    self.store
                        .write(Reserve {
                            tenant: self.tenants[model.budgets[budget].tenant].clone(),
                            reservation: NewReservation {
                                budget_text: self.budgets[budget].to_string(),
                                amount: Atomic::new(*amount),
                                ttl: Ttl::parse(&ttl.to_string()).expect("a ttl"),
                                memo: None,
                            },
                            actor: Actor::Tenant,
                            keyed: None,
                        })
                        .await,
                );
                let got = got.map(|r| {
                    self.reservations.push(r.id);
                    model.budgets[budget].reserved += amount;
                    model.reservations.push(ModelReservation {
                        budget,
                        amount: *amount,
                        expires_ms: now_ms + u64::from(*ttl) * 1000,
                        state: "active",
                    });
                });
                (expected, got)
            }
            Step::Commit(i, _) | Step::Release(i) | Step::Extend(i, _) => {
                let Some(index) = pick(i, model.reservations.len()) else {
                    return Ok(());
                };
                let r = model.reservations[index].clone();
                let tenant = model.budgets[r.budget].tenant;
                let tenant_active = model.tenants_active[tenant];
                let settle = match step {
                    Step::Commit(_, spent) => Settle::Commit(Atomic::new(*spent)),
                    Step::Release(_) => Settle::Release,
                    Step::Extend(_, ttl) => {
                        Settle::Extend(Ttl::parse(&ttl.to_string()).expect("a ttl"))
                    }
                    _ => unreachable!(),
                };
                let expected = if !tenant_active {
                    Err(StoreError::TenantTombstoned)
                } else if r.state != "active" {
                    Err(StoreError::ReservationNotActive(r.state))
                } else {
                    match settle {
                        Settle::Commit(spent) => {
                            let excess = spent.get().saturating_sub(r.amount);
                            match model.short(r.budget, excess) {
                                Some(e) => Err(e),
                                None => {
                                    let b = &mut model.budgets[r.budget];
                                    b.reserved -= r.amount;
                                    b.spent += spent.get();
                                    model.reservations[index].state = "committed";
                                    Ok(())
                                }
                            }
                        }
                        Settle::Release => {
                            model.budgets[r.budget].reserved -= r.amount;
                            model.reservations[index].state = "released";
                            Ok(())
                        }
                        Settle::Extend(ttl) => {
                            model.reservations[index].expires_ms =
                                now_ms + u64::from(ttl.seconds()) * 1000;
                            Ok(())
                        }
                    }
                };
                let got = fresh(
                    self.store
                        .write(SettleReservation {
                            tenant: self.tenants[tenant].clone(),
                            reservation: Some(self.reservations[index].clone()),
                            settle,
                            actor: Actor::Tenant,
                            keyed: None,
                        })
                        .await,
                )
                .map(|_| ());
                (expected, got)
            }
            Step::Close(i) => {
                let budget = i.index(model.budgets.len());
                let tenant = model.budgets[budget].tenant;
                let expected = if model.tenants_active[tenant] {
                    if model.budgets[budget].open {
                        model.release_all(budget);
                        model.budgets[budget].open = false;
                    }
                    Ok(())
                } else {
                    Err(StoreError::TenantTombstoned)
                };
                let got = self
                    .store
                    .write(CloseBudget {
                        tenant: self.tenants[tenant].clone(),
                        budget: Some(self.budgets[budget].clone()),
                        actor: Actor::Admin,
                    })
                    .await
                    .map(|_| ());
                (expected, got)
            }
            Step::Tombstone(i) => {
                let tenant = i.index(model.tenants_active.len());
                if model.tenants_active[tenant] {
                    for budget in 0..model.budgets.len() {
                        if model.budgets[budget].tenant == tenant && model.budgets[budget].open {
                            model.release_all(budget);
                            model.budgets[budget].open = false;
                        }
                    }
                    model.tenants_active[tenant] = false;
                }
                let got = self
                    .store
                    .write(TombstoneTenant {
                        id: self.tenants[tenant].clone(),
                        actor: Actor::Admin,
                    })
                    .await
                    .map(|_| ());
                (Ok(()), got)
            }
        };
        if expected != got {
            return Err(format!(
                "{step:?}: the model says {expected:?}, the store {got:?}"
            ));
        }
        self.compare(model).await
    }

    /// Every budget's figures and every reservation's state, as stored, against the model.
    async fn compare(&self, model: &Model) -> Result<(), String> {
        for (i, m) in model.budgets.iter().enumerate() {
            let tenant = self.tenants[m.tenant].clone();
            let stored = self
                .store
                .budget(tenant, Some(self.budgets[i].clone()))
                .await
                .map_err(|e| format!("{e:?}"))?;
            let f = stored.figures;
            let got = (f.credited, f.debited, f.spent, f.reserved, stored.is_open());
            let want = (m.credited, m.debited, m.spent, m.reserved, m.open);
            if got != want {
                return Err(format!("budget {i}: stored {got:?}, model {want:?}"));
            }
            if f.available().is_none() {
                return Err(format!("budget {i} breaks the invariant: {f:?}"));
            }
        }
        for (i, m) in model.reservations.iter().enumerate() {
            let tenant = self.tenants[model.budgets[m.budget].tenant].clone();
            let stored = self
                .store
                .reservation(tenant, Some(self.reservations[i].clone()))
                .await
                .map_err(|e| format!("{e:?}"))?;
            if stored.state.name() != m.state
                || stored.expires_at.unix_ms() != m.expires_ms
                || stored.amount.get() != m.amount
            {
                return Err(format!("reservation {i}: stored {stored:?}, model {m:?}"));
            }
        }
        Ok(())
    }
}

/// Sequences run on PostgreSQL, where each step costs a few round trips more.
const POSTGRES_CASES: u32 = 24;

/// Which backend a sequence runs on.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Runs `steps` on a fresh store with two tenants; the first error, if any.
fn run_sequence(backend: Backend, deposits: (u128, u128), steps: &[Step]) -> Result<(), String> {
    static DATABASES: AtomicU64 = AtomicU64::new(0);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let scratch;
    let path = match backend {
        Backend::Sqlite => dir.path().join("model.db"),
        Backend::Postgres => {
            let n = DATABASES.fetch_add(1, Ordering::Relaxed);
            scratch = super::postgres::scratch::Scratch::from_env(&format!("model_{n}"));
            std::path::PathBuf::from(&scratch.url)
        }
    };
    let clock = Arc::new(AtomicU64::new(START_MS));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (store, threads) = Store::open(StoreConfig {
            queue_depth: 16,
            credential_queue_depth: 16,
            clock: Clock::Manual(Arc::clone(&clock)),
            ..StoreConfig::for_tests(path.clone())
        })
        .expect("the store opens");
        let mut harness = Harness {
            store,
            clock,
            tenants: Vec::new(),
            budgets: Vec::new(),
            reservations: Vec::new(),
        };
        let mut model = Model::default();
        for (n, deposit) in [deposits.0, deposits.1].into_iter().enumerate() {
            let created = fresh(
                harness
                    .store
                    .write(CreateTenant {
                        tenant: NewTenant {
                            name: Name::parse(&format!("t{n}")).expect("a name"),
                            opening_deposit: Atomic::new(deposit),
                            policy: None,
                            thresholds: crate::domain::Thresholds::default(),
                        },
                        actor: Actor::Admin,
                        keyed: None,
                    })
                    .await,
            )
            .expect("a tenant");
            harness.tenants.push(created.tenant.id.clone());
            harness.budgets.push(created.tenant.budget.id.clone());
            model.tenants_active.push(true);
            model.budgets.push(ModelBudget {
                tenant: n,
                credited: deposit,
                debited: 0,
                spent: 0,
                reserved: 0,
                open: true,
            });
        }
        let mut outcome = Ok(());
        for (n, step) in steps.iter().enumerate() {
            if let Err(e) = harness.run(&mut model, step).await {
                outcome = Err(format!("step {n}: {e}"));
                break;
            }
        }
        threads.shutdown().await.expect("the store stops");
        outcome
    })?;
    super::verify_audit(&path)
        .map(|_| ())
        .map_err(|e| format!("audit verify: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The store moves money exactly as the contract's model does, never breaks the
    /// invariant, and its chain replays to its rows.
    #[test]
    fn the_store_follows_the_model(
        deposits in (0u128..60, 0u128..60),
        steps in prop::collection::vec(step(), 1..STEPS_MAX),
    ) {
        if let Err(e) = run_sequence(Backend::Sqlite, deposits, &steps) {
            return Err(TestCaseError::fail(e));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: POSTGRES_CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The same on PostgreSQL: the commands are the same code, the SQL and the writer's
    /// transactions are the backend's own.
    #[test]
    fn the_postgres_store_follows_the_model(
        deposits in (0u128..60, 0u128..60),
        steps in prop::collection::vec(step(), 1..STEPS_MAX),
    ) {
        if let Err(e) = run_sequence(Backend::Postgres, deposits, &steps) {
            return Err(TestCaseError::fail(e));
        }
    }
}
