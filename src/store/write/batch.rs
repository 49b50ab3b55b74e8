//! The batch engine: a backend's writer runs commands in batches, one transaction a batch.
//! Each operation runs inside a savepoint of its own ([`WriterState::guarded`]); the writer
//! commits, then answers: a command's [`Finish`] waits for the batch's outcome.

use std::time::{Duration, Instant};

use super::ahead::Wanted;
use super::delta::Delta;
use super::state::WriterState;
use super::{Finish, Job, SWEEP_RETRY_AFTER, WriteCommand, finish};
use crate::audit::Head;
use crate::store::sql::Sql;
use crate::store::{BOUNDARY_SWEEP_MAX, EXPIRE_SWEEP_MAX, StoreError, run_guarded};

/// A backend's writer, as the batch loop ([`run`]) and [`run_batch`] drive it: what differs
/// between the backends is how a transaction begins, commits and fails.
pub(crate) trait Batches {
    /// The writer's connection.
    type Db: Sql;
    /// The writer's state.
    fn state(&mut self) -> &mut WriterState<Self::Db>;
    /// Commands in one batch, at most.
    fn batch_max(&self) -> usize;
    /// How long a batch whose first commands are in may wait for the clients the batch
    /// before answered ([`fill`], [`fill_wanted`]); `None` where a batch begins with what is
    /// queued.
    fn fill_wait(&self) -> Option<Duration> {
        None
    }
    /// Readies the connection for a batch, and begins its write transaction if `writes`,
    /// with the chain's head known for sure and what its commands read first read ahead
    /// where the backend does ([`WriterState::read_ahead`]).
    fn begin(&mut self, writes: bool, wanted: &[Wanted<'_>]) -> Result<(), StoreError>;
    /// After a command of a write transaction: the error, if the database itself ended the
    /// transaction meanwhile.
    fn lost_transaction(&mut self) -> Option<StoreError>;
    /// Proves a write could begin (the readiness probe); `in_transaction` when one has.
    fn check_writable(&mut self, in_transaction: bool) -> Result<(), StoreError>;
    /// Ends a transaction that must not commit.
    fn rollback(&mut self);
    /// Commits the batch whose chain began at `head_before`; `Ok` when it is in the
    /// database, whatever `COMMIT` itself reported.
    fn commit(&mut self, head_before: &Head) -> Result<(), StoreError>;
    /// After a batch that committed `commands` writes, which changed `delta`.
    fn committed(&mut self, delta: &Delta, commands: usize);
    /// After a batch that did not commit (its head and soonest expiry already reset).
    fn failed(&mut self);
    /// Ends the writer once the last batch has run.
    fn close(self);

    /// Answers a batch's commands once `outcome` is settled. By default at once: the commit
    /// was durable when it returned.
    fn answer(&mut self, answers: Vec<Finish>, outcome: Result<(), StoreError>) {
        answer_all(answers, &outcome);
    }
}

/// Waits until `deadline` for commands from `queue` until `batch` holds `want`, or one it
/// takes `ends` the writer.
///
/// A backend whose every batch costs much beside its commands (PostgreSQL: a transaction's
/// statements, its `COMMIT`, its round trips) loses most when batches shrink. A batch begins
/// as soon as its writer is free, with what is queued then; that is what came while the
/// batch before ran, while the clients that batch answered are still on their way back with
/// their next requests. [`run`] waits for them too ([`fill_wanted`]).
pub(crate) fn fill<T>(
    batch: &mut Vec<T>,
    queue: &flume::Receiver<T>,
    want: usize,
    deadline: Instant,
    ends: impl Fn(&T) -> bool,
) {
    while batch.len() < want {
        match queue.recv_deadline(deadline) {
            Ok(command) => {
                let last = ends(&command);
                batch.push(command);
                if last {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// How many commands a batch waits for ([`fill`]): the `answered` of the batch before, whose
/// clients come back (a keep-alive connection sends its next request when it has its
/// answer), and the `queued` while that batch ran, which are here already; at most `max`.
///
/// Waiting only for as many as the batch before held, a batch of the queued alone was
/// complete at once, and the clients coming back missed it and waited a whole batch for the
/// next: with PostgreSQL 1 ms away, one writer's batches held 18 of 32 clients, and each
/// write waited for one and a half batches (`docs/decisions.md`). A lone client never waits:
/// nothing was queued while its batch ran, and its batch held one command.
pub(crate) fn fill_wanted(answered: usize, queued: usize, max: usize) -> usize {
    answered.saturating_add(queued).min(max)
}

/// Answers every command of a batch whose outcome is `outcome`.
pub(crate) fn answer_all(answers: Vec<Finish>, outcome: &Result<(), StoreError>) {
    for done in answers {
        done(outcome.as_ref().err());
    }
}

/// Runs a batch in one transaction and answers every command once it is settled. When the
/// transaction cannot begin, is ended by the database itself, or a savepoint cannot be closed
/// cleanly, no further command of the batch runs and every command is answered with the
/// error: nothing runs outside the transaction.
pub(crate) fn run_batch<W: Batches, J: ?Sized + Job<W::Db>>(
    writer: &mut W,
    batch: &mut Vec<WriteCommand<J>>,
) {
    // Expiries and boundaries that are due are recorded first, in the batch's transaction; a
    // sweep that leaves more due leaves `next_expiry` or `next_boundary` due, so the next
    // batch sweeps again at once.
    let sweep = writer.state().sweep_due();
    let writes = batch.iter().filter(|c| c.writes()).count() + usize::from(sweep);
    writer.state().begin_ahead();
    // Read ahead only where writers share the database: nothing to collect for SQLite's one.
    let wanted: Vec<Wanted<'_>> = if <W::Db as Sql>::SHARED {
        batch
            .iter()
            .filter_map(|command| match command {
                WriteCommand::Op(job) => job.wanted(),
                _ => None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut failed = writer.begin(writes > 0, &wanted).err();
    drop(wanted);
    // Taken once the head is known for sure: `begin` may have read it again.
    let before = writer.state().snapshot();
    let mut finished: Vec<Finish> = Vec::with_capacity(batch.len());
    if sweep && failed.is_none() {
        failed = sweep_in_batch(writer.state());
    }
    for command in batch.drain(..) {
        let done: Finish = match (command, &failed) {
            (WriteCommand::Op(job), Some(_)) => job.refuse(StoreError::Internal("not run".into())),
            (WriteCommand::Op(job), None) => job.run(writer.state(), writes > 0),
            (WriteCommand::CheckWritable(reply), Some(_)) => {
                finish(reply, Err(StoreError::Internal("not run".into())))
            }
            // A prober that has given up needs no lock taken for it.
            (WriteCommand::CheckWritable(reply), None) if reply.is_closed() => Box::new(|_| {}),
            (WriteCommand::CheckWritable(reply), None) => {
                finish(reply, run_guarded(|| writer.check_writable(writes > 0)))
            }
            (WriteCommand::Shutdown, _) => Box::new(|_| {}),
        };
        finished.push(done);
        if failed.is_some() {
            continue;
        }
        if let Some(error) = writer.state().take_poisoned() {
            failed = Some(error);
        } else if writes > 0 {
            failed = writer.lost_transaction();
        }
    }
    // What the batch's spends kept goes with its `COMMIT` (PostgreSQL, [`WriterState::end_kept`]).
    if failed.is_none() && writes > 0 {
        failed = writer.state().end_kept().err();
    }
    let outcome = match failed {
        Some(error) => {
            writer.rollback();
            Err(error)
        }
        None if writes > 0 => writer.commit(before.head()),
        None => Ok(()),
    };
    let delta = writer.state().take_counts();
    if outcome.is_ok() && !<W::Db as Sql>::SHARED {
        writer.state().carry_ahead();
    }
    match &outcome {
        Ok(()) if writes > 0 => writer.committed(&delta, writes),
        Ok(()) => {}
        Err(e) => {
            let state = writer.state();
            // A sweep alone that fails (a read-only or full database) is retried after a
            // pause, not in a busy loop, and logged with it.
            if sweep {
                state.retry_sweep_later(SWEEP_RETRY_AFTER);
            }
            if !finished.is_empty() || sweep {
                log::warn!(
                    "a batch of {} commands{} did not commit: {e:?}",
                    finished.len(),
                    if sweep { " and the sweep" } else { "" }
                );
            }
            state.restore_after_failed_batch(before);
            writer.failed();
        }
    }
    writer.answer(finished, outcome);
}

/// Records the due expiries and boundaries inside the batch's transaction, in a savepoint; a
/// sweep that fails (or leaves some failed) is tried again after [`SWEEP_RETRY_AFTER`]. The
/// error that poisons the batch, if any.
fn sweep_in_batch<D: Sql>(state: &mut WriterState<D>) -> Option<StoreError> {
    let now = state.now();
    let failed = state.guarded(true, |w| {
        let mut failed = 0;
        if w.next_expiry() <= now {
            failed += w.sweep(now, EXPIRE_SWEEP_MAX)?.failed;
        }
        if w.next_boundary() <= now {
            failed += w.sweep_boundaries(now, BOUNDARY_SWEEP_MAX)?.failed;
        }
        Ok(failed)
    });
    match failed {
        Ok(0) => state.sweep_succeeded(),
        Ok(_) => state.retry_sweep_later(SWEEP_RETRY_AFTER),
        Err(e) => {
            log::warn!("expiries and boundaries could not be recorded now: {e:?}");
            state.retry_sweep_later(SWEEP_RETRY_AFTER);
        }
    }
    state.take_poisoned()
}

/// Runs batches until a `Shutdown` has been taken and the queue is empty, or every sender
/// is gone; then closes the writer.
///
/// It blocks for one command, then takes whatever else is already queued, up to the batch's
/// bound. Where the backend says so ([`Batches::fill_wait`]), it then waits a moment for the
/// clients the batch before answered to come back ([`fill`], [`fill_wanted`]). It runs the
/// lot as one batch.
pub(crate) fn run<W: Batches, J: ?Sized + Job<W::Db>>(
    mut writer: W,
    queue: &flume::Receiver<WriteCommand<J>>,
) {
    let mut batch = Vec::with_capacity(writer.batch_max());
    let mut stopping = false;
    // Commands in the batch before, and those queued when it was answered ([`fill_wanted`]).
    let mut before = 0;
    let mut queued = 0;
    loop {
        if !stopping {
            match writer.state().wait(queue) {
                Ok(Some(first)) => batch.push(first),
                // An expiry is due: the batch below records it.
                Ok(None) => {}
                Err(()) => break,
            }
        }
        while batch.len() < writer.batch_max() {
            match queue.try_recv() {
                Ok(command) => batch.push(command),
                Err(_) => break,
            }
        }
        if let Some(wait) = writer.fill_wait() {
            let want = fill_wanted(before, queued, writer.batch_max());
            let ends = |c: &WriteCommand<J>| matches!(c, WriteCommand::Shutdown);
            if !stopping && !batch.is_empty() && !batch.iter().any(ends) {
                fill(&mut batch, queue, want, Instant::now() + wait, ends);
            }
            if !batch.is_empty() {
                before = batch.len();
            }
        }
        if batch.is_empty() && (stopping || !writer.state().sweep_due()) {
            if stopping {
                break;
            }
            continue;
        }
        // After the marker, what is still queued runs, and then the thread ends.
        stopping |= batch.iter().any(|c| matches!(c, WriteCommand::Shutdown));
        run_batch(&mut writer, &mut batch);
        queued = queue.len();
    }
    writer.close();
}

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::{Duration, Instant};

    use super::{fill, fill_wanted};

    /// Far longer than any wait below is allowed to take on a loaded machine.
    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn a_batch_already_as_large_as_wanted_does_not_wait() {
        let (_tx, rx) = flume::unbounded::<u32>();
        let mut batch = vec![1, 2, 3];
        let started = Instant::now();
        fill(&mut batch, &rx, 3, started + LONG, |_| false);
        assert_eq!(batch, [1, 2, 3]);
        assert!(started.elapsed() < LONG / 2, "took {:?}", started.elapsed());
    }

    #[test]
    fn a_batch_takes_what_arrives_until_it_holds_as_many_as_wanted() {
        let (tx, rx) = flume::unbounded::<u32>();
        let sender = thread::spawn(move || {
            for i in 2..=6 {
                thread::sleep(Duration::from_millis(5));
                tx.send(i).expect("the batch is still filling");
            }
        });
        let mut batch = vec![1];
        let started = Instant::now();
        fill(&mut batch, &rx, 4, started + LONG, |_| false);
        assert_eq!(batch, [1, 2, 3, 4], "it stops at the size wanted");
        assert!(started.elapsed() < LONG / 2, "took {:?}", started.elapsed());
        sender.join().expect("the sender");
        assert_eq!(
            rx.try_iter().collect::<Vec<_>>(),
            [5, 6],
            "the rest stays queued"
        );
    }

    #[test]
    fn a_batch_waits_no_longer_than_its_deadline() {
        let (tx, rx) = flume::unbounded::<u32>();
        tx.send(2).expect("queued");
        let mut batch = vec![1];
        let wait = Duration::from_millis(50);
        let started = Instant::now();
        fill(&mut batch, &rx, 8, started + wait, |_| false);
        let took = started.elapsed();
        assert_eq!(batch, [1, 2], "what came is taken");
        assert!(took >= wait, "it waited out its deadline: {took:?}");
        assert!(took < LONG / 2, "and then went: {took:?}");
        drop(tx);
    }

    #[test]
    fn a_command_that_ends_the_writer_ends_the_wait() {
        let (tx, rx) = flume::unbounded::<u32>();
        for i in [2, 0, 3] {
            tx.send(i).expect("queued");
        }
        let mut batch = vec![1];
        let started = Instant::now();
        fill(&mut batch, &rx, 8, started + LONG, |&c| c == 0);
        assert_eq!(batch, [1, 2, 0], "nothing after the end is taken");
        assert!(started.elapsed() < LONG / 2, "took {:?}", started.elapsed());
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn a_batch_waits_for_the_clients_answered_and_for_those_queued_meanwhile() {
        assert_eq!(
            fill_wanted(18, 14, 256),
            32,
            "everyone of a closed loop of 32"
        );
        assert_eq!(fill_wanted(1, 0, 256), 1, "a lone client waits for no one");
        assert_eq!(fill_wanted(0, 0, 256), 0, "after a sweep alone, nothing");
        assert_eq!(
            fill_wanted(200, 100, 256),
            256,
            "never more than a batch holds"
        );
        assert_eq!(fill_wanted(usize::MAX, 1, 8), 8);
    }

    #[test]
    fn a_closed_queue_ends_the_wait() {
        let (tx, rx) = flume::unbounded::<u32>();
        drop(tx);
        let mut batch = vec![1];
        let started = Instant::now();
        fill(&mut batch, &rx, 8, started + LONG, |_| false);
        assert_eq!(batch, [1]);
        assert!(started.elapsed() < LONG / 2, "took {:?}", started.elapsed());
    }
}
