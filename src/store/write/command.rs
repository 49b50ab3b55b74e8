//! How a command runs inside its batch's transaction: in a savepoint of its own, rolled back
//! alone when it fails ([`WriterState::guarded`]), or, where the batch defers its writes, without
//! one ([`WriterState::command`]).

use super::state::WriterState;
use crate::store::sql::Sql;
use crate::store::{StoreError, run_guarded};

impl<D: Sql> WriterState<D> {
    /// Runs `op` inside a savepoint (for writes in a transaction), rolling it back alone when
    /// it fails or panics. A panic becomes [`StoreError::Internal`]; the thread lives on.
    pub(crate) fn guarded<T>(
        &mut self,
        savepoint: bool,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if savepoint {
            // Sent with the command's first statements, where the backend can.
            self.db.send("SAVEPOINT command", &[])?;
        }
        let before = self.snapshot();
        // The command's writes may still be on their way: their errors are its own. The
        // savepoint's end goes with them, in the same round trip where the backend can: a
        // write that fails leaves the savepoint to roll back to (the statements after it in
        // an aborted transaction do nothing).
        // Where the batch defers its writes ([`super::ahead::Ahead`]), they are not waited for
        // here.
        let deferred = self.ahead.deferred();
        let result = run_guarded(|| {
            op(self).and_then(|value| {
                if savepoint {
                    self.db.send("RELEASE command", &[])?;
                }
                if deferred {
                    return Ok(value);
                }
                self.db.flush().map(|()| value)
            })
        });
        self.ahead.command_ended(result.is_ok());
        let ended = if result.is_err() {
            // A command that failed before it waited for its writes: they run now, and are
            // rolled back with it below (their errors are the command's, already failed).
            if !deferred {
                let _ = self.db.flush();
            }
            self.restore(before);
            match (savepoint, deferred) {
                (false, _) => Ok(()),
                (true, false) => self
                    .db
                    .run("ROLLBACK TO command")
                    .and_then(|()| self.db.run("RELEASE command")),
                (true, true) => self
                    .db
                    .send("ROLLBACK TO command", &[])
                    .and_then(|()| self.db.send("RELEASE command", &[])),
            }
        } else {
            Ok(())
        };
        if deferred {
            if let Some(error) = self.deferred_failure(result.as_ref().err()) {
                self.poisoned = Some(error.clone());
                return Err(error);
            }
        } else {
            // A statement the command sent that failed is the command's own failure.
            self.db.take_send_failure();
        }
        if let Err(error) = ended {
            // The command's changes cannot be told apart from the batch's any more: the
            // whole batch must fail rather than commit them behind an error answer.
            self.poisoned = Some(error.clone());
            if result.is_ok() {
                return Err(error);
            }
        }
        result
    }

    /// Runs a command: in a savepoint of its own ([`WriterState::guarded`]), or, where its
    /// batch defers its writes ([`super::ahead::Ahead`]), without one. A command that fails
    /// there having left the transaction as it found it (nothing sent, no statement failed: a
    /// refusal decided before it wrote) fails alone; one that fails after it wrote fails its
    /// batch, which is sent again command by command ([`super::ahead::Ahead::failure`]).
    pub(crate) fn command<T>(
        &mut self,
        in_transaction: bool,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !(in_transaction && self.ahead.deferred()) {
            return self.guarded(in_transaction, op);
        }
        let before = self.snapshot();
        let touched = self.db.touched();
        let result = run_guarded(|| op(self));
        self.ahead.command_ended(result.is_ok());
        let Err(error) = result else {
            return match self.deferred_failure(None) {
                Some(failure) => {
                    self.poisoned = Some(failure.clone());
                    Err(failure)
                }
                None => result,
            };
        };
        self.restore(before);
        // Whether the statement that failed was this command's or one sent before it, there
        // is no savepoint to roll back to: the transaction is the batch's to give up.
        let sent_failed = self.db.take_send_failure();
        if self.db.touched() == touched {
            return Err(error);
        }
        let failure = self.ahead.failure(true, Some(&error)).unwrap_or(error);
        if sent_failed {
            log::debug!("a statement sent with a batch failed: {failure:?}");
        }
        self.poisoned = Some(failure.clone());
        Err(failure)
    }
}
