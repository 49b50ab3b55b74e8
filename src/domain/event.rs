//! Events: what happened, for other systems to hear (as webhooks) or to poll. An event is
//! written in the transaction of the change it reports; its `data` is the JSON the API would
//! answer for the objects it names right after that change, kept as written.

use super::{EventId, TenantId, Timestamp};

/// Declares [`EventType`] from one list: each kind's variant, its name as the API writes it,
/// and its meaning. [`EventType::ALL`], [`EventType::NAMES`], the `/metrics` counters, the
/// list filters, the OpenAPI check and the black-box tests all follow this list, so a new
/// kind is one line here (and its `data` in `views::EventData`).
macro_rules! event_types {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// The kinds of event, in the contract's order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(crate) enum EventType {
            $($(#[doc = $doc])* $variant,)*
        }

        /// How many kinds there are.
        const EVENT_TYPES: usize = [$($name),*].len();

        impl EventType {
            /// Every kind, in [`EventType::NAMES`] order.
            pub(crate) const ALL: [Self; EVENT_TYPES] = [$(Self::$variant),*];

            /// Every kind's name, as the API writes it.
            pub(crate) const NAMES: [&'static str; EVENT_TYPES] = [$($name),*];
        }
    };
}

event_types! {
    /// A tenant was created (with its default budget).
    TenantCreated = "tenant.created",
    /// A tenant was tombstoned (with its budgets closed and holds released).
    TenantTombstoned = "tenant.tombstoned",
    /// A budget was made beside a tenant's default one.
    BudgetCreated = "budget.created",
    /// A budget's period or thresholds changed.
    BudgetUpdated = "budget.updated",
    /// A budget was closed.
    BudgetClosed = "budget.closed",
    /// The admin credited a budget.
    BudgetCredited = "budget.credited",
    /// The admin debited a budget.
    BudgetDebited = "budget.debited",
    /// A movement took a budget's available amount to or below one of its thresholds.
    BudgetAvailableLow = "budget.available_low",
    /// A budget's period reached its boundary.
    BudgetPeriodReset = "budget.period_reset",
    /// A reservation ran out of time.
    ReservationExpired = "reservation.expired",
}

impl EventType {
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

    /// The OpenAPI document lists the same kinds in the same order, and its event schemas
    /// take every kind once.
    #[test]
    fn the_openapi_document_lists_every_kind() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../openapi.json")).expect("openapi.json is JSON");
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["EventType"]["enum"],
            serde_json::json!(EventType::NAMES)
        );
        let one_of = schemas["Event"]["oneOf"]
            .as_array()
            .expect("Event is a oneOf");
        let typed: Vec<&str> = one_of
            .iter()
            .flat_map(|variant| {
                let name = variant["$ref"].as_str().expect("a $ref");
                let name = name.rsplit('/').next().expect("a schema's name");
                let types = schemas[name]["properties"]["type"]["enum"].as_array();
                let types = types.unwrap_or_else(|| panic!("{name} lists its types"));
                types.iter().map(|ty| ty.as_str().expect("a type's name"))
            })
            .collect();
        assert_eq!(
            typed,
            EventType::NAMES,
            "the event schemas cover every kind once, in order"
        );
    }
}
