//! Why a store command did not succeed: refusals the API answers, and failures of the
//! database.

use crate::domain::{Atomic, BudgetId};

/// Why a command did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreError {
    /// No tenant has this id.
    TenantNotFound,
    /// The tenant has no budget with this id.
    BudgetNotFound,
    /// The tenant has no reservation with this id.
    ReservationNotFound,
    /// The budget has no ledger entry with this id.
    EntryNotFound,
    /// No event has this id (or it was erased past its retention).
    EventNotFound,
    /// No webhook endpoint has this id, or it is deleted.
    EndpointNotFound,
    /// The endpoint has no delivery with this id.
    DeliveryNotFound,
    /// The endpoint is disabled: a delivery cannot be retried now.
    EndpointDisabled,
    /// A webhook endpoint names a tenant that does not exist.
    UnknownTenantFilter,
    /// An active tenant already has this name.
    TenantNameTaken,
    /// An open budget of the tenant already has this name.
    BudgetNameTaken,
    /// The tenant is tombstoned: nothing under it moves.
    TenantTombstoned,
    /// The budget is closed: it never moves again.
    BudgetClosed,
    /// The reservation is not active; the state a write sees (`expired` once its time is up,
    /// recorded or not).
    ReservationNotActive(&'static str),
    /// The movement needs more than is available on the budget or on one of its ancestors:
    /// what is available on the nearest that is short, and which it is (`None` until the
    /// operation names it: [`StoreError::short_on`]).
    InsufficientFunds(Atomic, Option<BudgetId>),
    /// A budget with an open child cannot close.
    BudgetHasOpenChildren,
    /// A new budget's `parent_id` names no budget that may be its parent: why.
    BadParent(&'static str),
    /// A credit would carry `credited` past `u128`.
    AmountOverflow,
    /// The key is bound to another method, path or body.
    IdempotencyMismatch,
    /// The queue is full: the caller should retry shortly.
    QueueFull,
    /// The database cannot take the command now (full, read-only, locked, closed). The text
    /// is for the log only.
    Unavailable(String),
    /// Another writer holds a row the command needs (a lock not granted at once or within the
    /// session's `lock_timeout`, a deadlock, a serialization failure): nothing of the command
    /// was done, and it may be sent again at once. [`threads::Store::write`] sends it again
    /// for a while before it answers [`StoreError::Unavailable`]. The text is for the log only.
    Busy(String),
    /// A bug: a panic in a command or data that breaks an invariant. For the log only.
    Internal(String),
    /// The tenant token a write came with is not its tenant's, or the tenant is tombstoned
    /// ([`super::write::checked::Checked`]): nothing was done.
    Unauthenticated,
}

impl StoreError {
    /// A shortfall that names no budget yet names `budget`; any other error as it is.
    pub(crate) fn short_on(self, budget: &BudgetId) -> Self {
        match self {
            Self::InsufficientFunds(available, None) => {
                Self::InsufficientFunds(available, Some(budget.clone()))
            }
            other => other,
        }
    }

    /// Whether this is a refusal the API answers with its own status (a `404`, a `409`),
    /// rather than a failure of the database or of the server.
    pub(crate) fn is_refusal(&self) -> bool {
        !matches!(
            self,
            Self::QueueFull | Self::Unavailable(_) | Self::Busy(_) | Self::Internal(_)
        )
    }
}

impl std::fmt::Display for StoreError {
    /// What went wrong, for the log and the command-line tools, never for a client: the
    /// database's own words for what it could not do, a refusal's name otherwise.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unavailable(cause) | Self::Busy(cause) | Self::Internal(cause) => {
                f.write_str(cause)
            }
            refusal => write!(f, "{refusal:?}"),
        }
    }
}
