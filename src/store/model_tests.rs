//! A model-based property test of the store: random sequences of budget creates (with or
//! without a period, at the top of their tenant's tree or under one of its budgets, up to
//! four levels; sometimes under a closed budget, one at the fourth level, another tenant's or
//! none), credits, debits, charges, reservations, commits, releases, extends, `PATCH`es of
//! the period, closes, tombstones and sweeps, with the clock moved forward by hand, run
//! against the real store (SQLite, and PostgreSQL) and against a model written here from the
//! contract. After every step the outcome must match the model's (the same success or the
//! same refusal, a shortfall naming the same level with the same figure), every budget's
//! figures, parent and current period, at every level, must match and keep the invariant,
//! and every reservation's recorded state must match; at the end the audit chain must replay
//! to the stored rows.
//!
//! The tree (revision 4): a spend (a hold, the part of a commit above its hold, a charge) must
//! fit its budget and every ancestor, and moves each alike, as a hold's end (a commit, a
//! release, an expiry, a close, a tombstone) does; credits, debits, opening deposits, refills
//! and forfeits move their own budget only; a refusal names the nearest level that is short.
//!
//! Half the sequences move the clock by up to 2.5 s, with fixed periods of a few seconds;
//! the other half jump it by up to three days from just before Europe's and Chile's
//! daylight-saving changes of 2027, with daily, weekly and monthly periods in four zones and
//! fixed periods of one to seven days, so many boundaries fall between two steps. When more
//! are due at a step than a batch's sweep records (`BOUNDARY_SWEEP_MAX`), a sweep of its own
//! records them before the step.
//!
//! The model records, before each write, every expiry and boundary due, in the order they fell
//! due, across every level: a hold whose time was up by a boundary returns before it, on its
//! budget and on each ancestor, so an ancestor's boundary counts every hold under it that ran
//! out by then returned. (The writer records them at the start of each batch, and each step
//! here is a batch of one.) The model finds a calendar boundary by walking local dates one day
//! at a time, apart from `domain::period`'s way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;

use super::ops::{
    BudgetPatch, CloseBudget, CreateBudget, CreateTenant, ExpireDue, MoveBudget, Reserve,
    SettleReservation, TombstoneTenant, UpdateBudget,
};
use super::{BOUNDARY_SWEEP_MAX, Clock, Store, StoreConfig, StoreError, Written};
use crate::audit::Actor;
use crate::domain::{
    Atomic, BudgetId, Cadence, Direction, Interval, Movement, Name, NewBudget, NewReservation,
    NewTenant, PARENT_UNKNOWN, Policy, ReservationId, Settle, TenantId, Ttl, Unit, Zone,
};

/// Steps in one sequence, at most.
const STEPS_MAX: usize = 48;

/// Sequences run; each step is a committed transaction, so a few hundred milliseconds each.
const CASES: u32 = 128;

/// The clock's start: 2026-11-23T00:00:00.000Z.
const START_MS: u64 = 1_795_392_000_000;

/// The clock's start for the sequences that jump: 2027-03-20T00:00:00.000Z, a week before
/// Europe's change to summer time (28 March) and a fortnight before Chile's to winter time
/// (4 April), with April's month boundary between.
const JUMP_START_MS: u64 = 1_805_500_800_000;

/// The zones of the calendar periods: no change, Europe's at 02:00, Chile's at midnight
/// itself (midnight happens twice in April), and Lord Howe's half hour.
const ZONES: [&str; 4] = [
    "UTC",
    "Europe/Berlin",
    "America/Santiago",
    "Australia/Lord_Howe",
];

/// Which of the `n` things that exist when a step runs it picks: `n` times the fraction
/// `self.0 / 2^64`, as `proptest::sample::Index` picks, and made by hand where a test needs
/// one sequence exactly.
#[derive(Debug, Clone, Copy)]
struct Pick(u64);

impl Pick {
    /// The pick of the `i`th of `n`.
    fn at(i: u64, n: u64) -> Self {
        Self(((u128::from(i) << 64) / u128::from(n)) as u64 + 1)
    }

    fn index(&self, n: usize) -> usize {
        ((n as u128 * u128::from(self.0)) >> 64) as usize
    }
}

fn pick() -> impl Strategy<Value = Pick> {
    any::<u64>().prop_map(Pick)
}

/// A period policy a step asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeriodSpec {
    /// `every_seconds`.
    Fixed(u32),
    /// `day`, `week` or `month` (0, 1, 2) in `ZONES[zone]`.
    Calendar(usize, usize),
}

/// A period policy with its allowance and rollover cap.
type PolicySpec = (PeriodSpec, u128, u128);

/// The levels a tree may have: a budget and at most three ancestors.
const LEVELS_MAX: usize = 4;

/// What the model expects a `parent_id` at the fourth level to be told: the store's wording
/// is its own, so any `BadParent` but [`PARENT_UNKNOWN`]'s reads as this ([`same_outcome`]).
const TOO_DEEP: &str = "a fifth level";

/// Where a step puts a new budget.
#[derive(Debug, Clone)]
enum ParentPick {
    /// At the top of its tenant's tree.
    Top,
    /// Under one of its tenant's budgets, whatever its state and level.
    Own(Pick),
    /// Under the latest of its tenant's deepest open budgets (at the top when none is open):
    /// the tree grows to four levels, then a fifth is tried.
    Deepest,
    /// Under another tenant's budget.
    Other(Pick),
    /// Under an id that names no budget.
    Unknown,
}

/// One step of a sequence. Indexes pick among what exists when the step runs.
#[derive(Debug, Clone)]
enum Step {
    CreateBudget(Pick, u128, Option<PolicySpec>, ParentPick),
    Credit(Pick, u128),
    Debit(Pick, u128),
    Charge(Pick, u128),
    Patch(Pick, Option<PolicySpec>),
    Reserve(Pick, u128, u32),
    Commit(Pick, u128),
    Release(Pick),
    Extend(Pick, u32),
    Close(Pick),
    Tombstone(Pick),
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

/// A policy: fixed periods of 1 to 4 s when the clock creeps, of one to seven days or calendar
/// periods when it jumps.
fn policy(jumps: bool) -> impl Strategy<Value = PolicySpec> {
    let period = if jumps {
        prop_oneof![
            1 => prop::sample::select(vec![86_400u32, 2 * 86_400, 7 * 86_400]).prop_map(PeriodSpec::Fixed),
            3 => (0usize..3, 0..ZONES.len()).prop_map(|(i, z)| PeriodSpec::Calendar(i, z)),
        ]
        .boxed()
    } else {
        (1u32..5).prop_map(PeriodSpec::Fixed).boxed()
    };
    let allowance = prop_oneof![4 => 0u128..40, 1 => (u128::MAX - 30)..=u128::MAX];
    (period, allowance, 0u128..30)
}

fn parent_pick() -> impl Strategy<Value = ParentPick> {
    prop_oneof![
        2 => Just(ParentPick::Top),
        4 => pick().prop_map(ParentPick::Own),
        5 => Just(ParentPick::Deepest),
        1 => pick().prop_map(ParentPick::Other),
        1 => Just(ParentPick::Unknown),
    ]
}

fn step(jumps: bool) -> impl Strategy<Value = Step> {
    let ttl = 1u32..4;
    let advance = if jumps { 0u64..259_200_000 } else { 0u64..2500 };
    // Creates often enough for trees of four levels; a tombstone, which ends its tenant's
    // tree, seldom enough that most sequences keep both.
    prop_oneof![
        8 => (
            pick(),
            amount(),
            prop::option::weighted(0.6, policy(jumps)),
            parent_pick(),
        )
            .prop_map(|(i, a, p, parent)| Step::CreateBudget(i, a, p, parent)),
        3 => (pick(), amount()).prop_map(|(i, a)| Step::Credit(i, a)),
        3 => (pick(), 0u128..25).prop_map(|(i, a)| Step::Debit(i, a)),
        5 => (pick(), 0u128..25).prop_map(|(i, a)| Step::Charge(i, a)),
        2 => (pick(), prop::option::weighted(0.8, policy(jumps)))
            .prop_map(|(i, p)| Step::Patch(i, p)),
        9 => (pick(), 0u128..25, ttl.clone()).prop_map(|(i, a, t)| Step::Reserve(i, a, t)),
        5 => (pick(), 0u128..30).prop_map(|(i, a)| Step::Commit(i, a)),
        3 => pick().prop_map(Step::Release),
        2 => (pick(), ttl).prop_map(|(i, t)| Step::Extend(i, t)),
        2 => pick().prop_map(Step::Close),
        1 => pick().prop_map(Step::Tombstone),
        5 => advance.prop_map(Step::Advance),
        1 => Just(Step::Sweep),
    ]
}

/// A budget as the contract says it moves.
#[derive(Debug, Clone)]
struct ModelBudget {
    tenant: usize,
    /// The budget above it, fixed for its life.
    parent: Option<usize>,
    credited: u128,
    debited: u128,
    spent: u128,
    reserved: u128,
    open: bool,
    period: Option<ModelPeriod>,
}

/// A budget's policy, when it was set, and where its current period starts and ends.
#[derive(Debug, Clone)]
struct ModelPeriod {
    policy: PolicySpec,
    anchor_ms: u64,
    started_ms: u64,
    ends_ms: u64,
}

impl ModelPeriod {
    /// A period of `policy` set at `now_ms`.
    fn starting(policy: PolicySpec, now_ms: u64) -> Self {
        Self {
            policy,
            anchor_ms: now_ms,
            started_ms: now_ms,
            ends_ms: next_boundary(policy.0, now_ms, now_ms),
        }
    }
}

impl ModelBudget {
    fn new(
        tenant: usize,
        parent: Option<usize>,
        deposit: u128,
        period: Option<ModelPeriod>,
    ) -> Self {
        Self {
            tenant,
            parent,
            credited: deposit,
            debited: 0,
            spent: 0,
            reserved: 0,
            open: true,
            period,
        }
    }

    fn available(&self) -> u128 {
        self.credited - self.debited - self.spent - self.reserved
    }

    /// The boundary of the current period: `a` available, `min(a, rollover)` carried, the
    /// new period starting with the allowance and the carry (a refill adds what fits).
    fn reset(&mut self) {
        let a = self.available();
        let period = self.period.as_mut().expect("a budget with a period");
        let (spec, allowance, rollover) = period.policy;
        let target = allowance.saturating_add(a.min(rollover));
        period.started_ms = period.ends_ms;
        period.ends_ms = next_boundary(spec, period.anchor_ms, period.ends_ms);
        if target >= a {
            self.credited += (target - a).min(u128::MAX - self.credited);
        } else {
            self.debited += a - target;
        }
    }
}

/// The first boundary of `spec` after `after_ms`, for a period set at `anchor_ms`: a fixed
/// period's by arithmetic; a calendar period's by walking the local dates from the day before
/// `after_ms`, one at a time, to the first qualifying midnight after it (a midnight a
/// daylight-saving change skips or repeats read as jiff's `compatible` reads it).
fn next_boundary(spec: PeriodSpec, anchor_ms: u64, after_ms: u64) -> u64 {
    use jiff::ToSpan;
    match spec {
        PeriodSpec::Fixed(seconds) => {
            let every = u64::from(seconds) * 1000;
            anchor_ms + (after_ms.saturating_sub(anchor_ms) / every + 1) * every
        }
        PeriodSpec::Calendar(interval, zone) => {
            let tz = jiff::tz::TimeZone::get(ZONES[zone]).expect("a known zone");
            let after = jiff::Timestamp::from_millisecond(after_ms as i64).expect("in range");
            let mut date = after
                .to_zoned(tz.clone())
                .date()
                .yesterday()
                .expect("a date");
            loop {
                let qualifies = match interval {
                    0 => true,
                    1 => date.weekday() == jiff::civil::Weekday::Monday,
                    _ => date.day() == 1,
                };
                if qualifies {
                    let midnight = tz
                        .to_ambiguous_zoned(date.to_datetime(jiff::civil::Time::midnight()))
                        .compatible()
                        .expect("a midnight")
                        .timestamp();
                    if midnight > after {
                        return midnight.as_millisecond() as u64;
                    }
                }
                date = date.checked_add(1.day()).expect("a date");
            }
        }
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

/// How a spend, or a hold's end, moves each level it reaches, alike.
#[derive(Debug, Clone, Copy)]
enum Lift {
    /// A hold taken: `reserved` grows.
    Hold(u128),
    /// A hold of `held` committed for `spent`: the whole hold leaves `reserved`, and `spent`
    /// grows by what was committed.
    Commit { held: u128, spent: u128 },
    /// A hold returned: a release, an expiry, a close, a tombstone.
    Return(u128),
    /// A charge: `spent` grows.
    Spend(u128),
}

impl Model {
    /// `budget` and its ancestors, nearest first: the levels a spend on it moves.
    fn levels(&self, budget: usize) -> Vec<usize> {
        let mut levels = vec![budget];
        while let Some(parent) = self.budgets[levels[levels.len() - 1]].parent {
            levels.push(parent);
        }
        levels
    }

    /// Every expiry and boundary due at `now_ms`, in the order they fell due: an expiry
    /// before a boundary at the same instant (a hold that ran out by a boundary returns
    /// before it), so a boundary counts returned every hold, at its level or under it, whose
    /// time was up by then, and held every other.
    fn catch_up(&mut self, now_ms: u64) {
        loop {
            let expiry = (0..self.reservations.len())
                .filter(|&r| self.reservations[r].state == "active")
                .map(|r| (self.reservations[r].expires_ms, r))
                .filter(|&(at, _)| at <= now_ms)
                .min();
            let boundary = (0..self.budgets.len())
                .filter(|&b| self.budgets[b].open)
                .filter_map(|b| self.budgets[b].period.as_ref().map(|p| (p.ends_ms, b)))
                .filter(|&(at, _)| at <= now_ms)
                .min();
            match (expiry, boundary) {
                (Some((expires_ms, r)), _) if boundary.is_none_or(|(at, _)| expires_ms <= at) => {
                    self.reservations[r].state = "expired";
                    let (budget, hold) = (self.reservations[r].budget, self.reservations[r].amount);
                    self.lift(budget, Lift::Return(hold));
                }
                (_, Some((_, budget))) => self.budgets[budget].reset(),
                _ => return,
            }
        }
    }

    /// Moves `budget` and every ancestor alike.
    fn lift(&mut self, budget: usize, lift: Lift) {
        for level in self.levels(budget) {
            let b = &mut self.budgets[level];
            match lift {
                Lift::Hold(amount) => b.reserved += amount,
                Lift::Commit { held, spent } => {
                    b.reserved -= held;
                    b.spent += spent;
                }
                Lift::Return(held) => b.reserved -= held,
                Lift::Spend(amount) => b.spent += amount,
            }
        }
    }

    /// Closes `budget` (a close, or a tombstone): its active holds return at every level.
    fn close(&mut self, budget: usize) {
        for r in 0..self.reservations.len() {
            if self.reservations[r].budget == budget && self.reservations[r].state == "active" {
                self.reservations[r].state = "released";
                self.lift(budget, Lift::Return(self.reservations[r].amount));
            }
        }
        self.budgets[budget].open = false;
    }

    fn has_open_children(&self, budget: usize) -> bool {
        self.budgets
            .iter()
            .any(|b| b.open && b.parent == Some(budget))
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

    /// The refusal of `amount` out of `budget` alone (a debit), if short.
    fn short_here(&self, ids: &[BudgetId], budget: usize, amount: u128) -> Option<StoreError> {
        let available = self.budgets[budget].available();
        (amount > available).then(|| {
            StoreError::InsufficientFunds(Atomic::new(available), Some(ids[budget].clone()))
        })
    }

    /// The refusal of a spend of `amount` on `budget`, if it or an ancestor is short: the
    /// nearest that is, with what it has available.
    fn short(&self, ids: &[BudgetId], budget: usize, amount: u128) -> Option<StoreError> {
        self.levels(budget)
            .into_iter()
            .find_map(|level| self.short_here(ids, level, amount))
    }

    /// Where a new budget of `tenant` goes for `pick`: its parent in the model, the id sent,
    /// and the refusal the parent earns, if any.
    fn parent_for(
        &self,
        ids: &[BudgetId],
        tenant: usize,
        pick: &ParentPick,
    ) -> (Option<usize>, Option<BudgetId>, Option<StoreError>) {
        let of = |own: bool| -> Vec<usize> {
            (0..self.budgets.len())
                .filter(|&b| (self.budgets[b].tenant == tenant) == own)
                .collect()
        };
        let under = |parent: usize| {
            let refusal = if !self.budgets[parent].open {
                Some(StoreError::BudgetClosed)
            } else if self.levels(parent).len() >= LEVELS_MAX {
                Some(StoreError::BadParent(TOO_DEEP))
            } else {
                None
            };
            (Some(parent), Some(ids[parent].clone()), refusal)
        };
        let unknown = |id: BudgetId| (None, Some(id), Some(StoreError::BadParent(PARENT_UNKNOWN)));
        match pick {
            ParentPick::Top => (None, None, None),
            ParentPick::Own(i) => {
                let own = of(true);
                under(own[i.index(own.len())])
            }
            ParentPick::Deepest => of(true)
                .into_iter()
                .filter(|&b| self.budgets[b].open)
                .max_by_key(|&b| (self.levels(b).len(), b))
                .map_or((None, None, None), under),
            ParentPick::Other(i) => {
                let other = of(false);
                unknown(ids[other[i.index(other.len())]].clone())
            }
            ParentPick::Unknown => unknown(BudgetId::from_ulid(ulid::Ulid(1))),
        }
    }

    /// How many boundaries of open budgets are due at `now_ms`.
    fn boundaries_due(&self, now_ms: u64) -> usize {
        self.budgets
            .iter()
            .filter(|b| b.open)
            .filter_map(|b| b.period.as_ref())
            .map(|p| {
                let (mut ends_ms, mut due) = (p.ends_ms, 0);
                while ends_ms <= now_ms {
                    due += 1;
                    ends_ms = next_boundary(p.policy.0, p.anchor_ms, ends_ms);
                }
                due
            })
            .sum()
    }
}

/// Whether the store's outcome is the model's: the same, a `BadParent` other than
/// [`PARENT_UNKNOWN`]'s reading as [`TOO_DEEP`].
fn same_outcome(expected: &Outcome, got: &Outcome) -> bool {
    match (expected, got) {
        (Err(StoreError::BadParent(TOO_DEEP)), Err(StoreError::BadParent(why))) => {
            *why != PARENT_UNKNOWN
        }
        _ => expected == got,
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
            if model.boundaries_due(now_ms) > BOUNDARY_SWEEP_MAX {
                // More than the batch's sweep records: a sweep of its own records them all.
                self.store
                    .write(ExpireDue)
                    .await
                    .map_err(|e| format!("{e:?}"))?;
            }
            model.catch_up(now_ms);
        }
        let pick = |i: &Pick, n: usize| (n > 0).then(|| i.index(n));
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
            Step::CreateBudget(i, deposit, spec, pick) => {
                let tenant = i.index(model.tenants_active.len());
                let (parent, parent_id, refusal) = model.parent_for(&self.budgets, tenant, pick);
                let expected = if !model.tenants_active[tenant] {
                    Err(StoreError::TenantTombstoned)
                } else {
                    refusal.map_or(Ok(()), Err)
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
                                policy: spec.map(policy_of),
                                thresholds: crate::domain::Thresholds::default(),
                                parent: parent_id,
                            },
                            actor: Actor::Admin,
                            keyed: None,
                        })
                        .await,
                );
                let got = got.map(|budget| {
                    self.budgets.push(budget.id);
                    let period = spec.map(|p| ModelPeriod::starting(p, now_ms));
                    model
                        .budgets
                        .push(ModelBudget::new(tenant, parent, *deposit, period));
                });
                (expected, got)
            }
            Step::Credit(i, amount) | Step::Debit(i, amount) | Step::Charge(i, amount) => {
                let budget = i.index(model.budgets.len());
                let direction = match step {
                    Step::Credit(..) => Direction::Credit,
                    Step::Debit(..) => Direction::Debit,
                    _ => Direction::Charge,
                };
                let expected = match model.budget_refusal(budget) {
                    Some(e) => Err(e),
                    None if *amount == 0 => return Ok(()),
                    None if direction == Direction::Credit => {
                        let b = &mut model.budgets[budget];
                        match b.credited.checked_add(*amount) {
                            Some(c) => {
                                b.credited = c;
                                Ok(())
                            }
                            None => Err(StoreError::AmountOverflow),
                        }
                    }
                    None if direction == Direction::Debit => {
                        match model.short_here(&self.budgets, budget, *amount) {
                            Some(e) => Err(e),
                            None => {
                                model.budgets[budget].debited += amount;
                                Ok(())
                            }
                        }
                    }
                    None => match model.short(&self.budgets, budget, *amount) {
                        Some(e) => Err(e),
                        None => {
                            model.lift(budget, Lift::Spend(*amount));
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
                                direction,
                                amount: Atomic::new(*amount),
                                memo: None,
                            },
                            actor: if direction == Direction::Charge {
                                Actor::Tenant
                            } else {
                                Actor::Admin
                            },
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
                    .or_else(|| model.short(&self.budgets, budget, *amount))
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
                    model.lift(budget, Lift::Hold(*amount));
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
                            match model.short(&self.budgets, r.budget, excess) {
                                Some(e) => Err(e),
                                None => {
                                    let held = r.amount;
                                    let spent = spent.get();
                                    model.lift(r.budget, Lift::Commit { held, spent });
                                    model.reservations[index].state = "committed";
                                    Ok(())
                                }
                            }
                        }
                        Settle::Release => {
                            model.lift(r.budget, Lift::Return(r.amount));
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
            Step::Patch(i, spec) => {
                let budget = i.index(model.budgets.len());
                let expected = match model.budget_refusal(budget) {
                    Some(e) => Err(e),
                    None => {
                        let b = &mut model.budgets[budget];
                        if b.period.as_ref().map(|p| p.policy) != *spec {
                            b.period = spec.map(|p| ModelPeriod::starting(p, now_ms));
                        }
                        Ok(())
                    }
                };
                let tenant = model.budgets[budget].tenant;
                let got = self
                    .store
                    .write(UpdateBudget {
                        tenant: self.tenants[tenant].clone(),
                        budget: Some(self.budgets[budget].clone()),
                        patch: BudgetPatch {
                            policy: Some(spec.map(policy_of)),
                            thresholds: None,
                        },
                        actor: Actor::Admin,
                    })
                    .await
                    .map(|_| ());
                (expected, got)
            }
            Step::Close(i) => {
                let budget = i.index(model.budgets.len());
                let tenant = model.budgets[budget].tenant;
                let expected = if !model.tenants_active[tenant] {
                    Err(StoreError::TenantTombstoned)
                } else if !model.budgets[budget].open {
                    Ok(())
                } else if model.has_open_children(budget) {
                    Err(StoreError::BudgetHasOpenChildren)
                } else {
                    model.close(budget);
                    Ok(())
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
                    // The deepest first, each returning its holds on its ancestors.
                    let mut open: Vec<usize> = (0..model.budgets.len())
                        .filter(|&b| model.budgets[b].tenant == tenant && model.budgets[b].open)
                        .collect();
                    open.sort_by_key(|&b| std::cmp::Reverse(model.levels(b).len()));
                    for budget in open {
                        model.close(budget);
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
        if !same_outcome(&expected, &got) {
            return Err(format!(
                "{step:?}: the model says {expected:?}, the store {got:?}"
            ));
        }
        self.compare(model).await
    }

    /// Every budget's figures and parent and every reservation's state, as stored, against
    /// the model; and the model against itself: what a budget reserves is what the active
    /// holds on it and on the budgets under it hold.
    async fn compare(&self, model: &Model) -> Result<(), String> {
        for (i, m) in model.budgets.iter().enumerate() {
            let held: u128 = model
                .reservations
                .iter()
                .filter(|r| r.state == "active" && model.levels(r.budget).contains(&i))
                .map(|r| r.amount)
                .sum();
            if held != m.reserved {
                return Err(format!(
                    "the model's budget {i} reserves {}, its holds and those under it {held}",
                    m.reserved
                ));
            }
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
            let parent = m.parent.map(|p| &self.budgets[p]);
            if stored.parent_id.as_ref() != parent {
                return Err(format!(
                    "budget {i}: parent stored {:?}, model {parent:?}",
                    stored.parent_id
                ));
            }
            let current = stored
                .current
                .as_ref()
                .map(|c| (c.started_at.unix_ms(), c.ends_at.unix_ms()));
            let period = m.period.as_ref().filter(|_| m.open);
            if current != period.map(|p| (p.started_ms, p.ends_ms)) {
                return Err(format!(
                    "budget {i}: current period stored {current:?}, model {period:?}"
                ));
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

/// The store's policy for `spec`.
fn policy_of((spec, allowance, rollover): PolicySpec) -> Policy {
    let cadence = match spec {
        PeriodSpec::Fixed(seconds) => Cadence::fixed(seconds).expect("a length"),
        PeriodSpec::Calendar(interval, zone) => Cadence::Calendar {
            interval: Interval::parse(["day", "week", "month"][interval]).expect("an interval"),
            zone: Zone::parse(ZONES[zone]).expect("a zone"),
        },
    };
    Policy {
        cadence,
        allowance: Atomic::new(allowance),
        rollover_max: Atomic::new(rollover),
    }
}

/// Runs `steps` on a fresh store with two tenants (their default budgets with `deposits` and
/// the periods of `defaults`), the clock starting at `start_ms`; the first error, if any.
fn run_sequence(
    backend: Backend,
    start_ms: u64,
    deposits: (u128, u128),
    defaults: (Option<PolicySpec>, Option<PolicySpec>),
    steps: &[Step],
) -> Result<(), String> {
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
    let clock = Arc::new(AtomicU64::new(start_ms));
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
        let tenants = [(deposits.0, defaults.0), (deposits.1, defaults.1)];
        for (n, (deposit, spec)) in tenants.into_iter().enumerate() {
            let created = fresh(
                harness
                    .store
                    .write(CreateTenant {
                        tenant: NewTenant {
                            name: Name::parse(&format!("t{n}")).expect("a name"),
                            opening_deposit: Atomic::new(deposit),
                            policy: spec.map(policy_of),
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
            let period = spec.map(|p| ModelPeriod::starting(p, start_ms));
            model
                .budgets
                .push(ModelBudget::new(n, None, deposit, period));
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
        (jumps, defaults, steps) in any::<bool>().prop_flat_map(|jumps| {
            let default = || prop::option::weighted(0.5, policy(jumps));
            (
                Just(jumps),
                (default(), default()),
                prop::collection::vec(step(jumps), 1..STEPS_MAX),
            )
        }),
    ) {
        let start = if jumps { JUMP_START_MS } else { START_MS };
        if let Err(e) = run_sequence(Backend::Sqlite, start, deposits, defaults, &steps) {
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
        (jumps, defaults, steps) in any::<bool>().prop_flat_map(|jumps| {
            let default = || prop::option::weighted(0.5, policy(jumps));
            (
                Just(jumps),
                (default(), default()),
                prop::collection::vec(step(jumps), 1..STEPS_MAX),
            )
        }),
    ) {
        let start = if jumps { JUMP_START_MS } else { START_MS };
        if let Err(e) = run_sequence(Backend::Postgres, start, deposits, defaults, &steps) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// A sequence the PostgreSQL run once found: a sweep that records two expiries in one tree,
/// a top budget's own and then its grandchild's, whose return reaches the top budget again.
/// The batch had read the top budget ahead before the sweep; the grandchild's return must move
/// the top budget as the first expiry left it, not as it was read.
#[test]
fn a_sweep_returns_two_holds_on_one_ancestor() {
    let calendar = |interval, allowance, rollover| {
        Some((PeriodSpec::Calendar(interval, 1), allowance, rollover))
    };
    let steps = [
        Step::Reserve(Pick::at(1, 2), 20, 2),
        Step::CreateBudget(Pick::at(1, 2), 20, calendar(0, 14, 8), ParentPick::Deepest),
        Step::CreateBudget(Pick::at(1, 2), 7, calendar(1, 4, 0), ParentPick::Deepest),
        Step::CreateBudget(Pick::at(0, 2), 21, None, ParentPick::Deepest),
        Step::Reserve(Pick::at(3, 5), 5, 3),
        Step::Advance(153_433_842),
        Step::Charge(Pick::at(3, 5), 8),
    ];
    for backend in [Backend::Sqlite, Backend::Postgres] {
        if let Err(e) = run_sequence(backend, JUMP_START_MS, (5, 25), (None, None), &steps) {
            panic!("{backend:?}: {e}");
        }
    }
}

/// A child's hold that ran out before its parent's boundary returns on the parent before it:
/// the parent (an allowance of 10 every 2 s, nothing carried) renews to 10 available, where
/// counting the hold still held at its boundary would credit 5 more.
#[test]
fn a_hold_that_ran_out_returns_on_its_parent_before_the_parents_boundary() {
    let steps = [
        Step::CreateBudget(Pick::at(0, 2), 10, None, ParentPick::Deepest),
        Step::Reserve(Pick::at(2, 3), 5, 1),
        Step::Advance(2500),
        Step::Sweep,
    ];
    let defaults = (Some((PeriodSpec::Fixed(2), 10, 0)), None);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        if let Err(e) = run_sequence(backend, START_MS, (10, 0), defaults, &steps) {
            panic!("{backend:?}: {e}");
        }
    }
}
