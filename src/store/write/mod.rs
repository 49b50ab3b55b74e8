//! The write path, written once for every backend: the operations' trait, the queue's
//! commands, and the batch engine that runs them.
//!
//! A write operation is one type in a file of its own under [`super::ops`]: its fields are
//! its input, [`WriteOp::run`] is how it runs inside the writer's transaction, and
//! [`WriteOp::Output`] is what it answers. The handle queues it ([`super::Store::write`]);
//! the batch engine ([`batch`]) runs any operation through [`Job`], each in a savepoint of its
//! own, and answers it once its batch is settled. Nothing here lists the operations.
//!
//! | file | its one job |
//! |---|---|
//! | [`batch`] | the batch loop: one transaction a batch, sweeps first, answers after the commit |
//! | [`ahead`] | on PostgreSQL, a batch's tenants locked and budgets read in one round trip |
//! | [`state`] | what the writer keeps between commands: connection, head, ids, clock, counts |
//! | [`command`] | a command in a savepoint of its own, or in none where writes are deferred |
//! | [`keeping`] | a batch of operations run: what it keeps, and the budgets read through it |
//! | [`known`] | on PostgreSQL, what a writer wrote last: a batch on it takes one round trip |
//! | [`guard`] | the statements that guard such a batch, and what it takes and leaves |
//! | [`unwritten`] | a batch of operations' figures, entries and audit rows, written when it ends |
//! | [`many`] | inserts of many rows a statement |
//! | [`chain`] | appending to the audit chain and reading its head |
//! | [`idempotency`] | binding a write to its `Idempotency-Key`, replays, the purge |
//! | [`outbox`] | the events a change writes, in its transaction; thresholds crossed |
//! | [`subscribers`] | the enabled webhook endpoints, as the outbox decides which take an event |
//! | [`delta`] | what the open batch changed, counted as it runs |
//! | [`stats`] | the counters `/metrics` shows, changed only by committed batches |

pub(crate) mod ahead;
pub(crate) mod batch;
pub(crate) mod chain;
pub(crate) mod checked;
mod command;
pub(crate) mod delta;
pub(crate) mod guard;
mod idempotency;
mod keeping;
pub(crate) mod known;
pub(crate) mod many;
mod outbox;
pub(crate) mod state;
pub(crate) mod stats;
mod subscribers;
pub(crate) mod unwritten;

use std::time::Duration;

use super::StoreError;
use super::sql::Sql;
use crate::domain::{ReservationId, TenantId};
use state::WriterState;

/// The longest a writer sleeps before it looks at the clock again for due expiries.
pub(crate) const WAKE_INTERVAL_MAX: Duration = Duration::from_millis(500);

/// How long a writer waits before it tries again to record expiries after a failure.
pub(crate) const SWEEP_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where a command's answer goes.
pub(crate) type Reply<T> = tokio::sync::oneshot::Sender<Result<T, StoreError>>;

/// A finished command, waiting for its batch's commit to decide its answer.
pub(crate) type Finish = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// Answers `reply` with `result`, or with the batch's error if the batch did not commit.
pub(crate) fn finish<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Finish {
    Box::new(move |commit_error| {
        let answer = match commit_error {
            Some(e) => Err(e.clone()),
            None => result,
        };
        // The requester may have gone away; the outcome stands either way.
        let _ = reply.send(answer);
    })
}

/// A write operation: the type's fields are its input, [`WriteOp::run`] reads what it
/// changes, decides and writes, all on the writer's connection inside the batch's
/// transaction (in a savepoint of its own, which a failure or a panic rolls back alone). It
/// is `Clone` so that one that found its rows busy ([`StoreError::Busy`]) can be sent again.
pub(crate) trait WriteOp: Clone + Send + 'static {
    /// What a successful run answers.
    type Output: Send + 'static;

    /// Runs the operation inside the writer's transaction.
    fn run<D: Sql>(self, state: &mut WriterState<D>) -> Result<Self::Output, StoreError>;

    /// How it treats the budgets its batch read ahead ([`ahead`]).
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Forgets;

    /// The tenant it writes under, if it names one: an instance with several writers sends
    /// all of a tenant's writes to one of them ([`super::threads::Store::write`]).
    fn tenant(&self) -> Option<&TenantId> {
        None
    }

    /// The id of the budget it writes, as its request names it: read ahead with its batch
    /// ([`ahead`]).
    fn budget(&self) -> Option<&str> {
        None
    }

    /// The reservation it settles, as its request names it: read ahead with its batch, with
    /// its budget ([`ahead`]).
    fn reservation(&self) -> Option<&ReservationId> {
        None
    }

    /// Whether it may write an event other than a threshold's alert or a period's reset:
    /// where writers share the database, its batch then reads the enabled webhook endpoints
    /// with what it reads ahead ([`ahead`]), rather than in a round trip of their own.
    fn publishes(&self) -> bool {
        true
    }

    /// Whether it runs only once the tenant token it came with is checked
    /// ([`checked::Checked`]): its batch then reads the tenant's credential ahead.
    fn checks_token(&self) -> bool {
        false
    }
}

/// How an operation treats the budgets its batch read ahead ([`ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BudgetsAhead {
    /// It may change any budget of its tenant (of every tenant, if it names none): they are
    /// read again after it.
    Forgets,
    /// It takes the budget it writes from what was read ahead
    /// ([`state::WriterState::take_budget_ahead`]) and leaves what it wrote
    /// ([`state::WriterState::keep_budget`]).
    Keeps,
    /// It changes no budget.
    Untouched,
}

/// A queued operation with the channel its answer goes to, as the engine of a backend whose
/// connection is `D` runs it.
pub(crate) trait Job<D>: Send {
    /// Runs the operation (in a savepoint when `in_transaction`), and returns what answers it
    /// once the batch is settled.
    fn run(self: Box<Self>, state: &mut WriterState<D>, in_transaction: bool) -> Finish;

    /// Answers `error` without running: its batch failed before it.
    fn refuse(self: Box<Self>, error: StoreError) -> Finish;

    /// What it reads first, to be read ahead with its batch ([`ahead`]).
    fn wanted(&self) -> Option<ahead::Wanted<'_>>;
}

/// An operation and its reply channel: what a job object boxes.
pub(crate) struct Queued<O: WriteOp> {
    /// The operation.
    pub(crate) op: O,
    /// Where its answer goes.
    pub(crate) reply: Reply<O::Output>,
}

impl<D: Sql, O: WriteOp> Job<D> for Queued<O> {
    fn run(self: Box<Self>, state: &mut WriterState<D>, in_transaction: bool) -> Finish {
        let Queued { op, reply } = *self;
        if let Err(error) = state.before_command(O::BUDGETS_AHEAD == BudgetsAhead::Keeps) {
            return finish(reply, Err(error));
        }
        let forgets = (O::BUDGETS_AHEAD == BudgetsAhead::Forgets).then(|| op.tenant().cloned());
        if let Some(tenant) = &forgets {
            state.forget_ahead(tenant.as_ref());
        }
        let result = state.command(in_transaction, |state| op.run(state));
        // What it left on the way (the expiries and boundaries its catch-up recorded) may be
        // older than what it then changed.
        if let Some(tenant) = &forgets {
            state.forget_ahead(tenant.as_ref());
        }
        finish(reply, result)
    }

    fn refuse(self: Box<Self>, error: StoreError) -> Finish {
        finish(self.reply, Err(error))
    }

    fn wanted(&self) -> Option<ahead::Wanted<'_>> {
        let tenant = self.op.tenant();
        let publishes = self.op.publishes();
        (tenant.is_some() || publishes).then(|| ahead::Wanted {
            tenant,
            budget: self.op.budget(),
            reservation: self.op.reservation(),
            publishes,
            checks_token: self.op.checks_token(),
        })
    }
}

/// A job object the write queue can hold, made from any operation: `dyn Job<D>` for a queue
/// that one backend serves, or the store's `dyn AnyJob` (in the store's root), which every
/// backend can run. The engine is generic over it, so it names no backend.
pub(crate) trait Queueable {
    /// `op`, to be answered on `reply`, boxed as this job object.
    fn queue<O: WriteOp>(op: O, reply: Reply<O::Output>) -> Box<Self>;
}

impl<D: Sql> Queueable for dyn Job<D> {
    fn queue<O: WriteOp>(op: O, reply: Reply<O::Output>) -> Box<Self> {
        Box::new(Queued { op, reply })
    }
}

/// What the writer's queue holds; `J` is the job object its operations are boxed as
/// ([`Queueable`]).
pub(crate) enum WriteCommand<J: ?Sized> {
    /// A write operation.
    Op(Box<J>),
    /// Answers once a write transaction could begin: the readiness probe.
    CheckWritable(Reply<()>),
    /// Refuses new commands, finishes the queued ones, checkpoints and ends the thread.
    Shutdown,
}

impl<J: ?Sized + Queueable> WriteCommand<J> {
    /// `op`, to be answered on `reply`.
    pub(crate) fn op<O: WriteOp>(op: O, reply: Reply<O::Output>) -> Self {
        Self::Op(J::queue(op, reply))
    }
}

impl<J: ?Sized> WriteCommand<J> {
    /// Whether the command writes (and so needs a write transaction).
    pub(crate) fn writes(&self) -> bool {
        matches!(self, Self::Op(_))
    }
}
