//! Domain types, parsed once at the edge and trusted everywhere after.
//!
//! Each newtype has a private field and is built only by its `parse` (or, for values this
//! process makes, by a constructor of the module that makes them), so a handler or the store
//! never sees a name, an amount or a key that broke a rule of the contract. A parse error is
//! a short phrase that completes the sentence "<field> ...", ready to be reported in a
//! problem body's `errors` list.
//!
//! Nothing here knows HTTP, JSON bodies or SQL.

mod budget;
mod event;
mod id;
mod idempotency;
mod ledger;
mod money;
mod period;
mod policy;
mod reservation;
pub(crate) mod rules;
mod tenant;
mod time;
mod webhook;

pub(crate) use budget::{
    ANCESTORS_MAX, Budget, BudgetState, DEFAULT_BUDGET_NAME, Direction, Figures, Memo, Movement,
    NewBudget, PARENT_UNKNOWN, Refusal, Unit,
};
pub(crate) use event::{Event, EventType};
pub(crate) use id::{
    BudgetId, DeliveryId, EndpointId, EntryId, EventId, PeriodId, ReservationId, TenantId,
};
pub(crate) use idempotency::{BodyFingerprint, IdempotencyKey};
pub(crate) use ledger::{EntryKind, LedgerEntry};
pub(crate) use money::Atomic;
/// The console's period form states the same bound (checked by a test of `console`).
#[cfg(test)]
pub(crate) use period::EVERY_SECONDS_MAX;
pub(crate) use period::{Cadence, Interval, Zone};
pub(crate) use policy::{Closing, CurrentPeriod, Policy, Statement, Thresholds, period_totals};
pub(crate) use reservation::{
    NewReservation, Reservation, ReservationState, Settle, Ttl, whole_number,
};
pub(crate) use rules::AuditEvent;
pub(crate) use tenant::{NAME_CHARS_MAX, Name, NewTenant, Tenant, TenantState};
pub(crate) use time::Timestamp;
pub(crate) use webhook::{
    Delivery, DeliveryState, DisabledReason, Endpoint, EndpointPatch, EndpointState, EventTypes,
    NewEndpoint,
};

/// A page of a list, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page<T> {
    /// The items.
    pub(crate) items: Vec<T>,
    /// Whether more items follow the last one.
    pub(crate) has_more: bool,
}

/// The most bytes a client-chosen `X-Request-Id` may have before it is replaced.
pub(crate) const REQUEST_ID_BYTES_MAX: usize = 128;

/// True for the bytes RFC 9110 calls visible ASCII (`VCHAR`): `!` to `~`.
pub(crate) fn is_visible_ascii(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

/// Returns the client's `X-Request-Id` when it is 1 to [`REQUEST_ID_BYTES_MAX`] visible ASCII
/// characters; anything else is replaced by one of the server's, never refused.
pub(crate) fn valid_request_id(raw: &[u8]) -> Option<&str> {
    if raw.is_empty() || raw.len() > REQUEST_ID_BYTES_MAX {
        return None;
    }
    if !raw.iter().copied().all(is_visible_ascii) {
        return None;
    }
    std::str::from_utf8(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_kept_only_when_valid() {
        assert_eq!(valid_request_id(b"abc-123"), Some("abc-123"));
        assert_eq!(valid_request_id(&[b'r'; REQUEST_ID_BYTES_MAX + 1]), None);
        assert!(valid_request_id(&[b'r'; REQUEST_ID_BYTES_MAX]).is_some());
        assert_eq!(valid_request_id(b""), None);
        assert_eq!(valid_request_id(b"a b"), None);
    }
}
