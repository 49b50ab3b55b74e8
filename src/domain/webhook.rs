//! Webhook endpoints and their deliveries: where events are sent, which ones, and how each
//! event's delivery to an endpoint went. The URL's rules and the signing secret belong to the
//! sender (`crate::webhook`); here the URL is text already checked, and the store keeps the
//! secret's bytes.

use super::{EventId, EventType, Memo, TenantId, Timestamp};

/// Which events an endpoint takes: every type, or some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EventTypes {
    /// `["*"]`: every type, those added later included.
    All,
    /// These, in [`EventType::ALL`] order, none twice, at least one.
    Only(Vec<EventType>),
}

impl EventTypes {
    /// The types named by `names`: `["*"]` alone, or known names none twice. On a bad list, the
    /// index of the bad name (if one is) and why, completing "event_types …".
    pub(crate) fn parse(names: &[&str]) -> Result<Self, (Option<usize>, &'static str)> {
        if names.is_empty() {
            return Err((None, "must name at least one event type, or be [\"*\"]"));
        }
        if names == ["*"] {
            return Ok(Self::All);
        }
        let mut types = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if *name == "*" {
                return Err((Some(i), "must be alone: [\"*\"] takes every event type"));
            }
            let Some(kind) = EventType::parse(name) else {
                return Err((Some(i), "must be an event type"));
            };
            if types.contains(&kind) {
                return Err((Some(i), "must not name an event type twice"));
            }
            types.push(kind);
        }
        types.sort_unstable();
        Ok(Self::Only(types))
    }

    /// Whether an event of `kind` is taken.
    pub(crate) fn matches(&self, kind: EventType) -> bool {
        match self {
            Self::All => true,
            Self::Only(types) => types.contains(&kind),
        }
    }

    /// The names as the API shows them: `["*"]`, or the types in the contract's order.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        match self {
            Self::All => vec!["*"],
            Self::Only(types) => types.iter().map(|t| t.name()).collect(),
        }
    }

    /// The stored column: the names joined by commas.
    pub(crate) fn to_column(&self) -> String {
        self.names().join(",")
    }

    /// Reads what [`EventTypes::to_column`] writes, and nothing else.
    pub(crate) fn from_column(raw: &str) -> Option<Self> {
        let names: Vec<&str> = raw.split(',').collect();
        let types = Self::parse(&names).ok()?;
        (types.to_column() == raw).then_some(types)
    }
}

/// Why an endpoint is disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DisabledReason {
    /// By a `PATCH` with `"enabled": false`.
    Manual,
    /// After `--webhook-disable-after` failed attempts in a row.
    Failing,
}

impl DisabledReason {
    /// As the API writes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Failing => "failing",
        }
    }

    /// The reason named `raw`.
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        match raw {
            "manual" => Some(Self::Manual),
            "failing" => Some(Self::Failing),
            _ => None,
        }
    }
}

/// An endpoint's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndpointState {
    /// Events are delivered to it.
    Enabled,
    /// Nothing is delivered; its pending deliveries wait for it to be enabled again.
    Disabled(DisabledReason),
    /// Final: it answers to no call.
    Deleted,
}

impl EndpointState {
    /// As the API writes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Disabled(_) => "disabled",
            Self::Deleted => "deleted",
        }
    }

    /// Why it is disabled, if it is.
    pub(crate) fn reason(self) -> Option<DisabledReason> {
        match self {
            Self::Disabled(reason) => Some(reason),
            _ => None,
        }
    }
}

/// A webhook endpoint, as stored (its secret stays in the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Its id.
    pub(crate) id: super::EndpointId,
    /// Where events are POSTed, as given (checked when it was set).
    pub(crate) url: String,
    /// A memo of the operator's.
    pub(crate) description: Option<Memo>,
    /// Which events it takes.
    pub(crate) event_types: EventTypes,
    /// Only this tenant's events, if set.
    pub(crate) tenant_id: Option<TenantId>,
    /// Enabled, disabled or deleted.
    pub(crate) state: EndpointState,
    /// When it was made.
    pub(crate) created_at: Timestamp,
}

/// A new endpoint, as a create asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewEndpoint {
    /// Where.
    pub(crate) url: String,
    /// A memo.
    pub(crate) description: Option<Memo>,
    /// Which events.
    pub(crate) event_types: EventTypes,
    /// Only this tenant's.
    pub(crate) tenant_id: Option<TenantId>,
}

/// What a `PATCH` of an endpoint changes; an absent member (`None`) is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EndpointPatch {
    /// A new URL.
    pub(crate) url: Option<String>,
    /// A new memo (`Some(None)`: none).
    pub(crate) description: Option<Option<Memo>>,
    /// New types.
    pub(crate) event_types: Option<EventTypes>,
    /// A new tenant filter (`Some(None)`: every tenant).
    pub(crate) tenant_id: Option<Option<TenantId>>,
    /// Enabled or disabled.
    pub(crate) enabled: Option<bool>,
}

/// How a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeliveryState {
    /// An attempt is due or under way.
    Pending,
    /// An attempt succeeded.
    Succeeded,
    /// The schedule is spent (or a retried attempt failed).
    Failed,
}

impl DeliveryState {
    /// Every state's name, as the API writes them.
    pub(crate) const NAMES: [&'static str; 3] = ["pending", "succeeded", "failed"];

    /// As the API writes it.
    pub(crate) fn name(self) -> &'static str {
        Self::NAMES[self.slot()]
    }

    /// The state's place in [`DeliveryState::NAMES`].
    pub(crate) fn slot(self) -> usize {
        match self {
            Self::Pending => 0,
            Self::Succeeded => 1,
            Self::Failed => 2,
        }
    }

    /// The state named `raw`.
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        match raw {
            "pending" => Some(Self::Pending),
            "succeeded" => Some(Self::Succeeded),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// Its id.
    pub(crate) id: super::DeliveryId,
    /// To where.
    pub(crate) endpoint_id: super::EndpointId,
    /// Of what.
    pub(crate) event_id: EventId,
    /// The event's type.
    pub(crate) event_type: EventType,
    /// How it stands.
    pub(crate) state: DeliveryState,
    /// Attempts made so far.
    pub(crate) attempts: u32,
    /// When the last attempt ended.
    pub(crate) last_attempt_at: Option<Timestamp>,
    /// The last attempt's HTTP status, if it got one.
    pub(crate) last_status: Option<u16>,
    /// Why the last attempt failed: a short sentence, never a response body.
    pub(crate) last_error: Option<String>,
    /// When the next attempt is due (pending only).
    pub(crate) next_attempt_at: Option<Timestamp>,
    /// When an attempt succeeded.
    pub(crate) succeeded_at: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_parse_to_one_canonical_form() {
        assert_eq!(EventTypes::parse(&["*"]), Ok(EventTypes::All));
        let some = EventTypes::parse(&["budget.period_reset", "tenant.created"]).expect("valid");
        assert_eq!(some.names(), ["tenant.created", "budget.period_reset"]);
        assert_eq!(
            EventTypes::from_column(&some.to_column()),
            Some(some.clone())
        );
        assert_eq!(EventTypes::from_column("*"), Some(EventTypes::All));
        assert!(some.matches(EventType::TenantCreated));
        assert!(!some.matches(EventType::BudgetCredited));
        for (bad, at) in [
            (&[][..], None),
            (&["*", "tenant.created"][..], Some(0)),
            (&["tenant.created", "*"][..], Some(1)),
            (&["tenant.created", "tenant.created"][..], Some(1)),
            (&["budget.charged"][..], Some(0)),
        ] {
            assert_eq!(EventTypes::parse(bad).map_err(|e| e.0), Err(at), "{bad:?}");
        }
        // Only the canonical column reads back.
        assert_eq!(
            EventTypes::from_column("budget.period_reset,tenant.created"),
            None
        );
        assert_eq!(EventTypes::from_column(""), None);
    }
}
