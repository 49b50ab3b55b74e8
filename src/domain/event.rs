//! Events: what happened, for other systems to hear (as webhooks) or to poll. An event is
//! written in the transaction of the change it reports; its `data` is the JSON the API would
//! answer for the objects it names right after that change, kept as written.

use super::{EventId, TenantId, Timestamp};

/// The kinds of event, in the contract's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum EventType {
    /// A tenant was created (with its default budget).
    TenantCreated,
    /// A tenant was tombstoned (with its budgets closed and holds released).
    TenantTombstoned,
    /// A budget was made beside a tenant's default one.
    BudgetCreated,
    /// A budget's period or thresholds changed.
    BudgetUpdated,
    /// A budget was closed.
    BudgetClosed,
    /// The admin credited a budget.
    BudgetCredited,
    /// The admin debited a budget.
    BudgetDebited,
    /// A movement took a budget's available amount to or below one of its thresholds.
    BudgetAvailableLow,
    /// A budget's period reached its boundary.
    BudgetPeriodReset,
    /// A reservation ran out of time.
    ReservationExpired,
}

impl EventType {
    /// Every kind, in [`EventType::NAMES`] order.
    pub(crate) const ALL: [Self; 10] = [
        Self::TenantCreated,
        Self::TenantTombstoned,
        Self::BudgetCreated,
        Self::BudgetUpdated,
        Self::BudgetClosed,
        Self::BudgetCredited,
        Self::BudgetDebited,
        Self::BudgetAvailableLow,
        Self::BudgetPeriodReset,
        Self::ReservationExpired,
    ];

    /// Every kind's name, as the API writes it.
    pub(crate) const NAMES: [&'static str; 10] = [
        "tenant.created",
        "tenant.tombstoned",
        "budget.created",
        "budget.updated",
        "budget.closed",
        "budget.credited",
        "budget.debited",
        "budget.available_low",
        "budget.period_reset",
        "reservation.expired",
    ];

    /// The kind's place in [`EventType::ALL`].
    pub(crate) fn slot(self) -> usize {
        self as usize
    }

    /// The kind's name.
    pub(crate) fn name(self) -> &'static str {
        Self::NAMES[self.slot()]
    }

    /// The kind named `raw`, exactly as [`EventType::name`] writes it.
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        let slot = Self::NAMES.iter().position(|name| *name == raw)?;
        Some(Self::ALL[slot])
    }
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// Its id; ids sort by the time they were written.
    pub(crate) id: EventId,
    /// What happened.
    pub(crate) kind: EventType,
    /// When it was written: the instant of its change.
    pub(crate) created_at: Timestamp,
    /// The tenant concerned.
    pub(crate) tenant_id: TenantId,
    /// The objects it names, as JSON text, exactly as the API showed them then.
    pub(crate) data: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_agree() {
        for (slot, kind) in EventType::ALL.into_iter().enumerate() {
            assert_eq!(kind.slot(), slot);
            assert_eq!(EventType::parse(kind.name()), Some(kind));
        }
        assert_eq!(EventType::parse("budget.charged"), None);
        assert_eq!(EventType::parse("Tenant.Created"), None);
        assert_eq!(EventType::parse("*"), None);
    }
}
