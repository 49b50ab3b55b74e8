//! `POST /v1/tenants/<id>/batch`: many spends of one tenant in one command, so in one
//! transaction and one durable write. Each operation is the single call's own operation
//! ([`MoveBudget`], [`Reserve`], [`SettleReservation`]) run in a savepoint of its own, in
//! order, each seeing the ones before it: what it writes (its audit row, entries, events)
//! and what it answers are the single call's by construction.
//!
//! - Not atomic: an operation refused (a `404`, a `409`) is rolled back alone and the next
//!   runs. Most are refused before they write: the operations run without a savepoint each
//!   unless one was refused after it wrote ([`run_all`]).
//! - Atomic: every operation is tried the same way inside one more savepoint, which is rolled
//!   back, key and all, when any of them was refused: nothing is applied or recorded.
//!
//! A failure of the database itself (not a refusal) fails the whole command, which is then
//! rolled back as any command is: a batch is never applied in part for want of a disk.

use crate::audit::Actor;
use crate::domain::{
    BudgetId, LedgerEntry, Movement, NewReservation, Reservation, ReservationId, Settle, TenantId,
    Unit,
};
use crate::store::ops::{MoveBudget, Reserve, SettleReservation};
use crate::store::sql::Sql;
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{Keyed, StoreError, Written, queries, run_guarded};

/// Operations in one batch, at most.
pub(crate) const BATCH_OPERATIONS_MAX: usize = 1_000;

/// One operation of a batch, as the handler parsed it.
#[derive(Debug, Clone)]
pub(crate) enum BatchItem {
    /// A charge, credit or debit (`budget` is `None` when the id could not be one).
    Move {
        budget: Option<BudgetId>,
        movement: Movement,
    },
    /// A reservation.
    Reserve(NewReservation),
    /// A commit, release or extend (`reservation` is `None` when the id could not be one).
    Settle {
        reservation: Option<ReservationId>,
        settle: Settle,
    },
    /// Refused before the store (its body, or who asks): it runs nothing, and fails an atomic
    /// batch.
    Refused,
}

/// What one operation of a batch came to.
#[derive(Debug, Clone)]
pub(crate) enum ItemResult {
    /// A charge, credit or debit applied: its entry.
    Entry(LedgerEntry),
    /// A reservation made or settled.
    Reservation(Reservation),
    /// Refused by the store, as the single call would be; for a shortfall, the unit of the
    /// level that is short, when it has one other than `atomic`.
    Refused(StoreError, Option<Unit>),
    /// Refused before the store ([`BatchItem::Refused`]).
    RefusedBefore,
}

impl ItemResult {
    /// Whether the operation was applied.
    pub(crate) fn applied(&self) -> bool {
        matches!(self, Self::Entry(_) | Self::Reservation(_))
    }
}

/// What a batch came to: each operation's result in order, and whether any is applied (an
/// atomic batch with a refusal applies none).
#[derive(Debug, Clone)]
pub(crate) struct BatchOutcome {
    /// One per operation, in order.
    pub(crate) results: Vec<ItemResult>,
    /// `false` for an atomic batch that was rolled back.
    pub(crate) applied: bool,
}

/// A batch of one tenant's operations.
#[derive(Debug, Clone)]
pub(crate) struct SendBatch {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// The operations, in order.
    pub(crate) items: Vec<BatchItem>,
    /// All or nothing.
    pub(crate) atomic: bool,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key the whole batch is bound to, if any (an atomic batch rolled back binds none).
    pub(crate) keyed: Option<Keyed<BatchOutcome>>,
}

impl WriteOp for SendBatch {
    type Output = Written<BatchOutcome>;

    // Its operations keep what they write for one another; what an atomic batch rolled back
    // must not outlive it.
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Forgets;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let SendBatch {
            tenant,
            items,
            atomic,
            actor,
            keyed,
        } = self;
        w.lock_tenant(&tenant)?;
        let mut rolled_back = None;
        let batch = |w: &mut WriterState<D>| {
            w.keyed(keyed, |w| {
                if !queries::tenants::tenant_exists(w.db(), &tenant)? {
                    return Err(StoreError::TenantNotFound);
                }
                let results = run_all(w, &tenant, &items, &actor)?;
                if atomic && !results.iter().all(ItemResult::applied) {
                    rolled_back = Some(results);
                    // Rolls the savepoint back; the refusals are answered below.
                    return Err(StoreError::Internal(
                        "an atomic batch is rolled back".into(),
                    ));
                }
                Ok(BatchOutcome {
                    results,
                    applied: true,
                })
            })
        };
        let written = w.keeping_budgets(&tenant, |w| {
            if atomic {
                w.guarded(true, batch)
            } else {
                batch(w)
            }
        });
        match rolled_back {
            Some(results) => Ok(Written::Fresh(BatchOutcome {
                results,
                applied: false,
            })),
            None => written,
        }
    }
}

/// Runs `items` in order, each seeing the ones before it. First without a savepoint an
/// operation ([`Pace::Fast`]): most refusals come before their operation writes anything, and
/// a savepoint an operation copies every page it touches into the savepoint's journal (a
/// sixth of a charge's cost). Should an operation be refused after it wrote (a hold it found
/// due, recorded before the refusal), that attempt is rolled back whole and the batch runs
/// again with a savepoint an operation ([`Pace::Careful`]), as the single calls run.
fn run_all<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    items: &[BatchItem],
    actor: &Actor,
) -> Result<Vec<ItemResult>, StoreError> {
    let mut wrote_then_refused = false;
    let fast = w.guarded(true, |w| {
        let ran = run_items(w, tenant, items, actor, Pace::Fast);
        wrote_then_refused = matches!(ran, Err(Stop::WroteThenRefused));
        ran.map_err(Stop::into_error)
    });
    if !wrote_then_refused {
        return fast;
    }
    // What the attempt left of the budgets was rolled back with it.
    w.forget_ahead(Some(tenant));
    run_items(w, tenant, items, actor, Pace::Careful).map_err(Stop::into_error)
}

/// How a batch's operations run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Without a savepoint each: an operation refused having written stops the attempt.
    Fast,
    /// Each in a savepoint of its own, rolled back alone when it is refused.
    Careful,
}

/// Why a batch's run of its operations stopped.
enum Stop {
    /// An operation was refused after it wrote: run again with [`Pace::Careful`].
    WroteThenRefused,
    /// A failure of the database (not a refusal): the whole batch fails.
    Failed(StoreError),
}

impl Stop {
    fn into_error(self) -> StoreError {
        match self {
            Self::WroteThenRefused => {
                StoreError::Internal("a batch's operation wrote before it was refused".into())
            }
            Self::Failed(e) => e,
        }
    }
}

/// Runs `items` in order at `pace`; a failure of the database (not a refusal) ends the batch.
fn run_items<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    items: &[BatchItem],
    actor: &Actor,
    pace: Pace,
) -> Result<Vec<ItemResult>, Stop> {
    let mut results = Vec::with_capacity(items.len());
    for item in items {
        if matches!(item, BatchItem::Refused) {
            results.push(ItemResult::RefusedBefore);
            continue;
        }
        let ran = match pace {
            Pace::Careful => w.guarded(true, |w| run_item(w, tenant, item.clone(), actor)),
            Pace::Fast => {
                let (before, touched) = (w.snapshot(), w.db_ref().touched());
                let ran = run_guarded(|| run_item(w, tenant, item.clone(), actor));
                w.command_ended(ran.is_ok());
                match ran {
                    Err(refusal) if refusal.is_refusal() && w.db_ref().touched() != touched => {
                        return Err(Stop::WroteThenRefused);
                    }
                    Err(refusal) => {
                        w.restore(before);
                        Err(refusal)
                    }
                    ok => ok,
                }
            }
        };
        if let Some(poisoned) = w.poisoned() {
            return Err(Stop::Failed(poisoned.clone()));
        }
        results.push(match ran {
            Ok(done) => done,
            Err(refusal) if refusal.is_refusal() => {
                let unit = short_unit(w, tenant, &refusal).map_err(Stop::Failed)?;
                ItemResult::Refused(refusal, unit)
            }
            Err(failure) => return Err(Stop::Failed(failure)),
        });
    }
    Ok(results)
}

/// Runs one operation as its single call's operation runs.
fn run_item<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    item: BatchItem,
    actor: &Actor,
) -> Result<ItemResult, StoreError> {
    let written = match item {
        BatchItem::Move { budget, movement } => MoveBudget {
            tenant: tenant.clone(),
            budget,
            movement,
            actor: actor.clone(),
            keyed: None,
        }
        .run(w)?
        .map(ItemResult::Entry),
        BatchItem::Reserve(reservation) => Reserve {
            tenant: tenant.clone(),
            reservation,
            actor: actor.clone(),
            keyed: None,
        }
        .run(w)?
        .map(ItemResult::Reservation),
        BatchItem::Settle {
            reservation,
            settle,
        } => SettleReservation {
            tenant: tenant.clone(),
            reservation,
            settle,
            actor: actor.clone(),
            keyed: None,
        }
        .run(w)?
        .map(ItemResult::Reservation),
        BatchItem::Refused => return Ok(ItemResult::RefusedBefore),
    };
    match written {
        Written::Fresh(done) => Ok(done),
        Written::Replayed(_) => Err(StoreError::Internal(
            "an operation of a batch has no key of its own".into(),
        )),
    }
}

/// The unit of the level a shortfall names, when it is not the default: the single call's
/// problem says the amount in it ([`crate::handlers`]' `shortfall`). Read in the batch's
/// transaction, so that a kept answer says it too.
fn short_unit<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    refusal: &StoreError,
) -> Result<Option<Unit>, StoreError> {
    let StoreError::InsufficientFunds(_, Some(short)) = refusal else {
        return Ok(None);
    };
    let unit = w.stored_budget(tenant, Some(short))?.unit;
    Ok((unit != Unit::atomic()).then_some(unit))
}
