//! Every expiry and period boundary due now, recorded at once: the tests' clock does not move
//! by itself, so the writer does not wake to record them. Compiled into test builds only.

use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{BOUNDARY_SWEEP_MAX, EXPIRE_SWEEP_MAX, StoreError};

/// Records every expiry and boundary due now; answers how many.
#[derive(Debug, Clone)]
pub(crate) struct ExpireDue;

impl WriteOp for ExpireDue {
    type Output = usize;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<usize, StoreError> {
        let now = w.now();
        let mut swept = 0;
        loop {
            let expiries = w.sweep(now, EXPIRE_SWEEP_MAX)?;
            let boundaries = w.sweep_boundaries(now, BOUNDARY_SWEEP_MAX)?;
            swept += expiries.found - expiries.failed + boundaries.found;
            let more = expiries.found == EXPIRE_SWEEP_MAX || boundaries.found == BOUNDARY_SWEEP_MAX;
            if !more || expiries.failed + boundaries.failed > 0 {
                return Ok(swept);
            }
        }
    }
}
