//! What several operations write alike, as methods of the writer's state, a file a job:
//!
//! | file | what it holds |
//! |---|---|
//! | [`catch_up`] | the checks before a budget moves, its due expiries and boundaries recorded first, and the sweeps |
//! | [`periods`] | a period's boundary, its begin and its end |
//! | [`movements`] | a rule's decision applied: figures, entries, a reservation's state, a budget closed |
//! | [`budgets`] | a new budget's rows, its period policy and its alert thresholds |

mod budgets;
mod catch_up;
mod movements;
mod periods;

use crate::domain::Refusal;
use crate::store::StoreError;

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::InsufficientFunds { available } => Self::InsufficientFunds(available, None),
            Refusal::Overflow => Self::AmountOverflow,
            Refusal::Corrupt => Self::Internal("a stored budget breaks the invariant".into()),
            Refusal::NotActive { state } => Self::ReservationNotActive(state),
            Refusal::NotDue => Self::Internal("an expiry before the hold's time".into()),
        }
    }
}
