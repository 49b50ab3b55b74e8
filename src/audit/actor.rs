//! Who acts: the actors the chain's `actor` column names, and the sets of them that may record
//! an action (each family says, per action, which set).

/// Who made a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// The admin token.
    Admin,
    /// A tenant token.
    Tenant,
    /// The service itself: an expiry.
    System,
    /// An identity of the identity provider: `oidc:` and its `sub`, as the column holds it.
    Identity(std::sync::Arc<str>),
}

impl Actor {
    /// The actor of the identity provider's identity `sub`.
    pub(crate) fn identity(sub: &str) -> Self {
        Self::Identity(format!("oidc:{sub}").into())
    }

    /// The `actor` column's text: borrowed for the fixed words, copied for an identity's.
    pub(crate) fn text(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Self::Admin => "admin".into(),
            Self::Tenant => "tenant".into(),
            Self::System => "system".into(),
            Self::Identity(actor) => actor.to_string().into(),
        }
    }
}

/// The actors the contract names: `admin`, `tenant`, `system` and `oidc:<sub>`.
pub(super) fn is_known_actor(actor: &str) -> bool {
    matches!(actor, "admin" | "tenant" | "system")
        || actor
            .strip_prefix("oidc:")
            .is_some_and(|sub| !sub.is_empty())
}

/// Who may record an action. The admin token and an identity record everything but what time
/// does; a tenant token only spends; the system only records what time does and disables an
/// endpoint that keeps failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorders {
    /// The admin token or an identity: a change of what exists.
    Admin,
    /// The admin token, an identity or a tenant token: a spend.
    AdminOrTenant,
    /// The admin token, an identity or the system: an endpoint disabled.
    AdminOrSystem,
    /// The system alone: an expiry, a period's boundary.
    System,
}

impl Recorders {
    /// Whether `actor`, a known actor's text, is one of these.
    pub(super) fn include(self, actor: &str) -> bool {
        match actor {
            "system" => matches!(self, Self::System | Self::AdminOrSystem),
            "tenant" => self == Self::AdminOrTenant,
            _ => self != Self::System,
        }
    }
}
