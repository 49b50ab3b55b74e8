//! The purge: idempotency records (which hold tenant tokens) erased once their replay window
//! is over. Run by the server every minute, not by a request.

use crate::store::StoreError;
use crate::store::sql::Sql;
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};

/// Erases the idempotency records older than the replay window; answers how many.
#[derive(Debug, Clone)]
pub(crate) struct PurgeExpired;

impl WriteOp for PurgeExpired {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = usize;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<usize, StoreError> {
        w.purge_expired()
    }
}
