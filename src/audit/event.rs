//! Who acts, and the typed events of the chain with their canonical payloads.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::domain::{
    Atomic, AuditEvent, BudgetId, Direction, Memo, Name, ReservationId, TenantId, Timestamp, Unit,
};

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

/// A payload member: borrowed when it is read back, owned when it is written.
type Text<'a> = Cow<'a, str>;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantCreatedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    opening_deposit_atomic: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetCreatedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    unit: Text<'a>,
    #[serde(borrow)]
    opening_deposit_atomic: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MovedPayload<'a> {
    #[serde(borrow)]
    budget_id: Text<'a>,
    #[serde(borrow)]
    amount_atomic: Text<'a>,
    #[serde(borrow)]
    memo: Option<Text<'a>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReservedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    budget_id: Text<'a>,
    #[serde(borrow)]
    amount_atomic: Text<'a>,
    #[serde(borrow)]
    expires_at: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommittedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    amount_atomic: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    expires_at: Text<'a>,
}

fn to_json(payload: &impl Serialize) -> String {
    serde_json::to_string(payload).expect("an audit payload always serializes")
}

impl AuditEvent {
    /// The `action` column's text.
    pub(crate) fn action(&self) -> &'static str {
        match self {
            Self::TenantCreated { .. } => "tenant.created",
            Self::TenantTombstoned { .. } => "tenant.tombstoned",
            Self::BudgetCreated { .. } => "budget.created",
            Self::BudgetClosed { .. } => "budget.closed",
            Self::BudgetMoved {
                direction: Direction::Credit,
                ..
            } => "budget.credited",
            Self::BudgetMoved {
                direction: Direction::Debit,
                ..
            } => "budget.debited",
            Self::ReservationCreated { .. } => "reservation.created",
            Self::ReservationCommitted { .. } => "reservation.committed",
            Self::ReservationReleased { .. } => "reservation.released",
            Self::ReservationExtended { .. } => "reservation.extended",
            Self::ReservationExpired { .. } => "reservation.expired",
        }
    }

    /// The tenant concerned: the `tenant_id` column.
    pub(crate) fn tenant_id(&self) -> &TenantId {
        match self {
            Self::TenantCreated { id, .. } | Self::TenantTombstoned { id } => id,
            Self::BudgetCreated { tenant, .. }
            | Self::BudgetClosed { tenant, .. }
            | Self::BudgetMoved { tenant, .. }
            | Self::ReservationCreated { tenant, .. }
            | Self::ReservationCommitted { tenant, .. }
            | Self::ReservationReleased { tenant, .. }
            | Self::ReservationExtended { tenant, .. }
            | Self::ReservationExpired { tenant, .. } => tenant,
        }
    }

    /// The payload: compact JSON, the contract's members in its order, amounts as strings,
    /// non-ASCII characters unescaped.
    pub(crate) fn payload(&self) -> String {
        let id = |id: &str| to_json(&IdPayload { id: id.into() });
        match self {
            Self::TenantCreated {
                id,
                name,
                opening_deposit,
            } => to_json(&TenantCreatedPayload {
                id: id.as_str().into(),
                name: name.as_str().into(),
                opening_deposit_atomic: opening_deposit.to_string().into(),
            }),
            Self::TenantTombstoned { id: tenant } => id(tenant.as_str()),
            Self::BudgetCreated {
                id,
                name,
                unit,
                opening_deposit,
                ..
            } => to_json(&BudgetCreatedPayload {
                id: id.as_str().into(),
                name: name.as_str().into(),
                unit: unit.as_str().into(),
                opening_deposit_atomic: opening_deposit.to_string().into(),
            }),
            Self::BudgetClosed { id: budget, .. } => id(budget.as_str()),
            Self::BudgetMoved {
                budget,
                amount,
                memo,
                ..
            } => to_json(&MovedPayload {
                budget_id: budget.as_str().into(),
                amount_atomic: amount.to_string().into(),
                memo: memo.as_ref().map(|m| m.as_str().into()),
            }),
            Self::ReservationCreated {
                id,
                budget,
                amount,
                expires_at,
                ..
            } => to_json(&ReservedPayload {
                id: id.as_str().into(),
                budget_id: budget.as_str().into(),
                amount_atomic: amount.to_string().into(),
                expires_at: expires_at.to_string().into(),
            }),
            Self::ReservationCommitted { id, amount, .. } => to_json(&CommittedPayload {
                id: id.as_str().into(),
                amount_atomic: amount.to_string().into(),
            }),
            Self::ReservationReleased { id: r, .. } | Self::ReservationExpired { id: r, .. } => {
                id(r.as_str())
            }
            Self::ReservationExtended { id, expires_at, .. } => to_json(&ExtendedPayload {
                id: id.as_str().into(),
                expires_at: expires_at.to_string().into(),
            }),
        }
    }

    /// Reads an event back from a row's `action`, `tenant_id` and `payload`. Anything but the
    /// canonical payload of a known action, about that row's tenant, is refused: two texts
    /// never stand for one event.
    pub(crate) fn parse(action: &str, tenant_id: &str, payload: &str) -> Result<Self, String> {
        let tenant = TenantId::parse(tenant_id)
            .ok_or_else(|| format!("the row's tenant_id {tenant_id:?} is not a tenant id"))?;
        let bad = |e: serde_json::Error| format!("a {action} payload that does not parse: {e}");
        let event = match action {
            "tenant.created" => {
                let p: TenantCreatedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::TenantCreated {
                    id: own_tenant(&p.id, &tenant)?,
                    name: Name::parse(&p.name).map_err(|e| format!("its name {e}"))?,
                    opening_deposit: amount(&p.opening_deposit_atomic)?,
                }
            }
            "tenant.tombstoned" => {
                let p: IdPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::TenantTombstoned {
                    id: own_tenant(&p.id, &tenant)?,
                }
            }
            "budget.created" => {
                let p: BudgetCreatedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::BudgetCreated {
                    id: id(&p.id, BudgetId::parse)?,
                    name: Name::parse(&p.name).map_err(|e| format!("its name {e}"))?,
                    unit: Unit::parse(&p.unit).map_err(|e| format!("its unit {e}"))?,
                    opening_deposit: amount(&p.opening_deposit_atomic)?,
                    tenant,
                }
            }
            "budget.closed" => {
                let p: IdPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::BudgetClosed {
                    id: id(&p.id, BudgetId::parse)?,
                    tenant,
                }
            }
            "budget.credited" | "budget.debited" => {
                let p: MovedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                let budget = id(&p.budget_id, BudgetId::parse)?;
                let amount = amount(&p.amount_atomic)?;
                let memo = p
                    .memo
                    .map(|m| Memo::parse(&m).map_err(|e| format!("its memo {e}")))
                    .transpose()?;
                let direction = if action == "budget.credited" {
                    Direction::Credit
                } else {
                    Direction::Debit
                };
                Self::BudgetMoved {
                    tenant,
                    budget,
                    direction,
                    amount,
                    memo,
                }
            }
            "reservation.created" => {
                let p: ReservedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::ReservationCreated {
                    id: id(&p.id, ReservationId::parse)?,
                    budget: id(&p.budget_id, BudgetId::parse)?,
                    amount: amount(&p.amount_atomic)?,
                    expires_at: time(&p.expires_at)?,
                    tenant,
                }
            }
            "reservation.committed" => {
                let p: CommittedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::ReservationCommitted {
                    id: id(&p.id, ReservationId::parse)?,
                    amount: amount(&p.amount_atomic)?,
                    tenant,
                }
            }
            "reservation.released" | "reservation.expired" => {
                let p: IdPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                let id = id(&p.id, ReservationId::parse)?;
                if action == "reservation.released" {
                    Self::ReservationReleased { tenant, id }
                } else {
                    Self::ReservationExpired { tenant, id }
                }
            }
            "reservation.extended" => {
                let p: ExtendedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::ReservationExtended {
                    id: id(&p.id, ReservationId::parse)?,
                    expires_at: time(&p.expires_at)?,
                    tenant,
                }
            }
            other => return Err(format!("unknown action {other:?}")),
        };
        if event.payload() != payload {
            return Err("the payload is not in its canonical form".into());
        }
        Ok(event)
    }
}

fn own_tenant(raw: &str, tenant: &TenantId) -> Result<TenantId, String> {
    TenantId::parse(raw)
        .filter(|id| id == tenant)
        .ok_or_else(|| format!("the payload's id {raw:?} is not the row's tenant"))
}

fn id<T>(raw: &str, parse: impl FnOnce(&str) -> Option<T>) -> Result<T, String> {
    parse(raw).ok_or_else(|| format!("a bad id {raw:?}"))
}

fn amount(raw: &str) -> Result<Atomic, String> {
    Atomic::parse(raw).map_err(|e| format!("an amount that {e}"))
}

fn time(raw: &str) -> Result<Timestamp, String> {
    Timestamp::parse(raw).ok_or_else(|| format!("a bad timestamp {raw:?}"))
}
