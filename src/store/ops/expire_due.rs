//! Every expiry due now, recorded at once: the tests' clock does not move by itself, so the
//! writer does not wake to record them. Compiled into test builds only.

use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{EXPIRE_SWEEP_MAX, StoreError};

/// Records every expiry due now; answers how many.
#[derive(Debug)]
pub(crate) struct ExpireDue;

impl WriteOp for ExpireDue {
    type Output = usize;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<usize, StoreError> {
        let now = w.now();
        let mut swept = 0;
        loop {
            let round = w.sweep(now, EXPIRE_SWEEP_MAX)?;
            swept += round.found - round.failed;
            if round.found < EXPIRE_SWEEP_MAX || round.failed > 0 {
                return Ok(swept);
            }
        }
    }
}
