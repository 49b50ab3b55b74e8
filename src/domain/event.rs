//! The changes of state the audit chain records, as data: what each transition of
//! [`super::rules`] says happened. How an event is written into the chain and read back
//! (its action name and canonical payload) is the `audit` module's.

use super::{Atomic, BudgetId, Direction, Memo, Name, ReservationId, TenantId, Timestamp, Unit};

/// A change of state, as the chain records it. Every event names its tenant (the row's
/// `tenant_id` column); the payload holds exactly the contract's members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuditEvent {
    /// A tenant and its default budget.
    TenantCreated {
        id: TenantId,
        name: Name,
        opening_deposit: Atomic,
    },
    /// A tombstone, with the releases and closures it implies.
    TenantTombstoned { id: TenantId },
    /// A budget.
    BudgetCreated {
        tenant: TenantId,
        id: BudgetId,
        name: Name,
        unit: Unit,
        opening_deposit: Atomic,
    },
    /// A budget closed, with the releases it implies.
    BudgetClosed { tenant: TenantId, id: BudgetId },
    /// A top-up (`budget.credited`) or a withdrawal (`budget.debited`).
    BudgetMoved {
        tenant: TenantId,
        budget: BudgetId,
        direction: Direction,
        amount: Atomic,
        memo: Option<Memo>,
    },
    /// A hold taken.
    ReservationCreated {
        tenant: TenantId,
        id: ReservationId,
        budget: BudgetId,
        amount: Atomic,
        expires_at: Timestamp,
    },
    /// A hold settled by spending `amount`.
    ReservationCommitted {
        tenant: TenantId,
        id: ReservationId,
        amount: Atomic,
    },
    /// A hold returned.
    ReservationReleased { tenant: TenantId, id: ReservationId },
    /// A hold made to last longer.
    ReservationExtended {
        tenant: TenantId,
        id: ReservationId,
        expires_at: Timestamp,
    },
    /// A hold whose time ran out.
    ReservationExpired { tenant: TenantId, id: ReservationId },
}
