//! Who acts, and each event of the chain: its action name, its canonical payload, how it is
//! read back, and what it does when the chain is replayed. An event's variant and the rule
//! that records it are in `domain::rules`; everything the audit chain does with it is here.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::replay::{
    Replay, ReplayedEndpoint, ReplayedReservation, ReplayedTenant, entry_digest, is_allowed_hold,
    not_active,
};
use crate::domain::rules::{self, Change, EndpointChange, Settlement};
use crate::domain::{
    Atomic, AuditEvent, BudgetId, Cadence, DEFAULT_BUDGET_NAME, Direction, EndpointId, EntryKind,
    EventTypes, Interval, Memo, Name, Policy, Refusal, ReservationId, ReservationState, TenantId,
    Thresholds, Timestamp, Unit, Zone,
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

/// A period policy as the budget shows it. Unknown members are caught by the canonical
/// form's check, as everywhere.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyPayload<'a> {
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    interval: Option<Text<'a>>,
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    time_zone: Option<Text<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    every_seconds: Option<u32>,
    #[serde(borrow)]
    allowance_atomic: Text<'a>,
    #[serde(borrow)]
    rollover_max_atomic: Text<'a>,
}

/// The members a created budget's payload gains when it has a period or thresholds, after
/// its revision-2 members. (A payload with `flatten` cannot deny unknown members; the
/// canonical form's check refuses them.)
#[derive(Serialize, Deserialize)]
struct RenewalPayload<'a> {
    #[serde(borrow)]
    period: Option<PolicyPayload<'a>>,
    #[serde(borrow)]
    alert_thresholds_atomic: Vec<Text<'a>>,
}

#[derive(Serialize, Deserialize)]
struct TenantCreatedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    opening_deposit_atomic: Text<'a>,
    #[serde(borrow, flatten)]
    renewal: Option<RenewalPayload<'a>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdatedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    period: Option<PolicyPayload<'a>>,
    #[serde(borrow)]
    alert_thresholds_atomic: Vec<Text<'a>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetPayload<'a> {
    #[serde(borrow)]
    budget_id: Text<'a>,
    #[serde(borrow)]
    period_started_at: Text<'a>,
    #[serde(borrow)]
    kind: Text<'a>,
    #[serde(borrow)]
    amount_atomic: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    url: Text<'a>,
    #[serde(borrow)]
    event_types: Vec<Text<'a>>,
    #[serde(borrow)]
    tenant_id: Option<Text<'a>>,
    enabled: bool,
}

#[derive(Serialize, Deserialize)]
struct BudgetCreatedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    unit: Text<'a>,
    #[serde(borrow)]
    opening_deposit_atomic: Text<'a>,
    #[serde(borrow, flatten)]
    renewal: Option<RenewalPayload<'a>>,
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

fn policy_payload(policy: &Policy) -> PolicyPayload<'_> {
    let (interval, time_zone, every_seconds) = match &policy.cadence {
        Cadence::Calendar { interval, zone } => {
            (Some(interval.name().into()), Some(zone.name().into()), None)
        }
        Cadence::Fixed { every_seconds } => (None, None, Some(*every_seconds)),
    };
    PolicyPayload {
        interval,
        time_zone,
        every_seconds,
        allowance_atomic: policy.allowance.to_string().into(),
        rollover_max_atomic: policy.rollover_max.to_string().into(),
    }
}

fn thresholds_payload(thresholds: &Thresholds) -> Vec<Text<'static>> {
    thresholds
        .amounts()
        .iter()
        .map(|a| a.to_string().into())
        .collect()
}

/// The members a created budget's payload gains, only when it has a period or thresholds.
fn renewal_payload<'a>(
    policy: Option<&'a Policy>,
    thresholds: &Thresholds,
) -> Option<RenewalPayload<'a>> {
    if policy.is_none() && thresholds.is_empty() {
        return None;
    }
    Some(RenewalPayload {
        period: policy.map(policy_payload),
        alert_thresholds_atomic: thresholds_payload(thresholds),
    })
}

fn policy(p: PolicyPayload<'_>) -> Result<Policy, String> {
    let cadence = match (p.interval, p.time_zone, p.every_seconds) {
        (Some(interval), Some(zone), None) => Cadence::Calendar {
            interval: Interval::parse(&interval).map_err(|e| format!("its interval {e}"))?,
            zone: Zone::parse(&zone).map_err(|e| format!("its time zone {e}"))?,
        },
        (None, None, Some(seconds)) => {
            Cadence::fixed(seconds).map_err(|e| format!("its every_seconds {e}"))?
        }
        _ => return Err("a period that is neither calendar nor fixed".into()),
    };
    Ok(Policy {
        cadence,
        allowance: amount(&p.allowance_atomic)?,
        rollover_max: amount(&p.rollover_max_atomic)?,
    })
}

fn thresholds(raw: Vec<Text<'_>>) -> Result<Thresholds, String> {
    let amounts = raw
        .iter()
        .map(|a| amount(a))
        .collect::<Result<Vec<_>, _>>()?;
    Thresholds::new(amounts).map_err(|e| format!("its thresholds {e}"))
}

/// A created budget's period and thresholds, as its payload has them.
fn renewal(raw: Option<RenewalPayload<'_>>) -> Result<(Option<Policy>, Thresholds), String> {
    match raw {
        None => Ok((None, Thresholds::default())),
        Some(r) => Ok((
            r.period.map(policy).transpose()?,
            thresholds(r.alert_thresholds_atomic)?,
        )),
    }
}

impl AuditEvent {
    /// The `action` column's text.
    pub(crate) fn action(&self) -> &'static str {
        match self {
            Self::TenantCreated { .. } => "tenant.created",
            Self::TenantTombstoned { .. } => "tenant.tombstoned",
            Self::BudgetCreated { .. } => "budget.created",
            Self::BudgetClosed { .. } => "budget.closed",
            Self::BudgetUpdated { .. } => "budget.updated",
            Self::BudgetPeriodReset { .. } => "budget.period_reset",
            Self::BudgetMoved {
                direction: Direction::Credit,
                ..
            } => "budget.credited",
            Self::BudgetMoved {
                direction: Direction::Debit,
                ..
            } => "budget.debited",
            Self::BudgetMoved {
                direction: Direction::Charge,
                ..
            } => "budget.charged",
            Self::ReservationCreated { .. } => "reservation.created",
            Self::ReservationCommitted { .. } => "reservation.committed",
            Self::ReservationReleased { .. } => "reservation.released",
            Self::ReservationExtended { .. } => "reservation.extended",
            Self::ReservationExpired { .. } => "reservation.expired",
            Self::WebhookEndpoint { change, .. } | Self::WebhookEndpointId { change, .. } => {
                match change {
                    EndpointChange::Created => "webhook_endpoint.created",
                    EndpointChange::Updated => "webhook_endpoint.updated",
                    EndpointChange::Deleted => "webhook_endpoint.deleted",
                    EndpointChange::SecretRotated => "webhook_endpoint.secret_rotated",
                }
            }
        }
    }

    /// The tenant concerned: the `tenant_id` column. A webhook endpoint's event names the
    /// tenant the endpoint is limited to, if it is (the column is then empty).
    pub(crate) fn tenant_id(&self) -> Option<&TenantId> {
        Some(match self {
            Self::WebhookEndpoint { tenant, .. } | Self::WebhookEndpointId { tenant, .. } => {
                return tenant.as_ref();
            }
            Self::TenantCreated { id, .. } | Self::TenantTombstoned { id } => id,
            Self::BudgetCreated { tenant, .. }
            | Self::BudgetClosed { tenant, .. }
            | Self::BudgetUpdated { tenant, .. }
            | Self::BudgetPeriodReset { tenant, .. }
            | Self::BudgetMoved { tenant, .. }
            | Self::ReservationCreated { tenant, .. }
            | Self::ReservationCommitted { tenant, .. }
            | Self::ReservationReleased { tenant, .. }
            | Self::ReservationExtended { tenant, .. }
            | Self::ReservationExpired { tenant, .. } => tenant,
        })
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
                policy,
                thresholds,
            } => to_json(&TenantCreatedPayload {
                id: id.as_str().into(),
                name: name.as_str().into(),
                opening_deposit_atomic: opening_deposit.to_string().into(),
                renewal: renewal_payload(policy.as_ref(), thresholds),
            }),
            Self::TenantTombstoned { id: tenant } => id(tenant.as_str()),
            Self::BudgetCreated {
                id,
                name,
                unit,
                opening_deposit,
                policy,
                thresholds,
                ..
            } => to_json(&BudgetCreatedPayload {
                id: id.as_str().into(),
                name: name.as_str().into(),
                unit: unit.as_str().into(),
                opening_deposit_atomic: opening_deposit.to_string().into(),
                renewal: renewal_payload(policy.as_ref(), thresholds),
            }),
            Self::BudgetClosed { id: budget, .. } => id(budget.as_str()),
            Self::BudgetUpdated {
                id,
                policy,
                thresholds,
                ..
            } => to_json(&UpdatedPayload {
                id: id.as_str().into(),
                period: policy.as_ref().map(policy_payload),
                alert_thresholds_atomic: thresholds_payload(thresholds),
            }),
            Self::BudgetPeriodReset {
                budget,
                started_at,
                kind,
                amount,
                ..
            } => to_json(&ResetPayload {
                budget_id: budget.as_str().into(),
                period_started_at: started_at.to_string().into(),
                kind: kind.name().into(),
                amount_atomic: amount.to_string().into(),
            }),
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
            Self::WebhookEndpoint {
                id,
                url,
                event_types,
                tenant,
                enabled,
                ..
            } => to_json(&EndpointPayload {
                id: id.as_str().into(),
                url: url.as_str().into(),
                event_types: event_types.names().into_iter().map(Cow::Borrowed).collect(),
                tenant_id: tenant.as_ref().map(|t| t.as_str().into()),
                enabled: *enabled,
            }),
            Self::WebhookEndpointId { id: endpoint, .. } => id(endpoint.as_str()),
        }
    }

    /// Reads an event back from a row's `action`, `tenant_id` and `payload`. Anything but the
    /// canonical payload of a known action, about that row's tenant, is refused: two texts
    /// never stand for one event.
    pub(crate) fn parse(action: &str, tenant_id: &str, payload: &str) -> Result<Self, String> {
        let bad = |e: serde_json::Error| format!("a {action} payload that does not parse: {e}");
        if let Some(change) = endpoint_change(action) {
            let row_tenant = match tenant_id {
                "" => None,
                raw => Some(id(raw, TenantId::parse)?),
            };
            let event = Self::parse_endpoint(change, payload, row_tenant).map_err(bad)??;
            if event.tenant_id().map_or("", TenantId::as_str) != tenant_id {
                return Err(format!(
                    "the row's tenant_id {tenant_id:?} is not the endpoint's tenant"
                ));
            }
            if event.payload() != payload {
                return Err("the payload is not in its canonical form".into());
            }
            return Ok(event);
        }
        let tenant = TenantId::parse(tenant_id)
            .ok_or_else(|| format!("the row's tenant_id {tenant_id:?} is not a tenant id"))?;
        let event = match action {
            "tenant.created" => {
                let p: TenantCreatedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                let (policy, thresholds) = renewal(p.renewal)?;
                Self::TenantCreated {
                    id: own_tenant(&p.id, &tenant)?,
                    name: Name::parse(&p.name).map_err(|e| format!("its name {e}"))?,
                    opening_deposit: amount(&p.opening_deposit_atomic)?,
                    policy,
                    thresholds,
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
                let (policy, thresholds) = renewal(p.renewal)?;
                Self::BudgetCreated {
                    id: id(&p.id, BudgetId::parse)?,
                    name: Name::parse(&p.name).map_err(|e| format!("its name {e}"))?,
                    unit: Unit::parse(&p.unit).map_err(|e| format!("its unit {e}"))?,
                    opening_deposit: amount(&p.opening_deposit_atomic)?,
                    policy,
                    thresholds,
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
            "budget.updated" => {
                let p: UpdatedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                Self::BudgetUpdated {
                    id: id(&p.id, BudgetId::parse)?,
                    policy: p.period.map(policy).transpose()?,
                    thresholds: thresholds(p.alert_thresholds_atomic)?,
                    tenant,
                }
            }
            "budget.period_reset" => {
                let p: ResetPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                let kind = match EntryKind::parse(&p.kind) {
                    Some(kind @ (EntryKind::Refill | EntryKind::Forfeit)) => kind,
                    _ => return Err(format!("a reset of kind {:?}", p.kind)),
                };
                Self::BudgetPeriodReset {
                    budget: id(&p.budget_id, BudgetId::parse)?,
                    started_at: time(&p.period_started_at)?,
                    kind,
                    amount: amount(&p.amount_atomic)?,
                    tenant,
                }
            }
            "budget.credited" | "budget.debited" | "budget.charged" => {
                let p: MovedPayload<'_> = serde_json::from_str(payload).map_err(bad)?;
                let budget = id(&p.budget_id, BudgetId::parse)?;
                let amount = amount(&p.amount_atomic)?;
                let memo = p
                    .memo
                    .map(|m| Memo::parse(&m).map_err(|e| format!("its memo {e}")))
                    .transpose()?;
                let direction = match action {
                    "budget.credited" => Direction::Credit,
                    "budget.debited" => Direction::Debit,
                    _ => Direction::Charge,
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

/// The change a `webhook_endpoint.*` action names.
fn endpoint_change(action: &str) -> Option<EndpointChange> {
    Some(match action {
        "webhook_endpoint.created" => EndpointChange::Created,
        "webhook_endpoint.updated" => EndpointChange::Updated,
        "webhook_endpoint.deleted" => EndpointChange::Deleted,
        "webhook_endpoint.secret_rotated" => EndpointChange::SecretRotated,
        _ => return None,
    })
}

impl AuditEvent {
    /// A webhook endpoint's event from its payload (the row's `tenant_id` is checked by the
    /// caller). The outer error: a payload that does not parse; the inner: one that breaks a
    /// rule.
    fn parse_endpoint(
        change: EndpointChange,
        payload: &str,
        row_tenant: Option<TenantId>,
    ) -> Result<Result<Self, String>, serde_json::Error> {
        let endpoint = |raw: &str| id(raw, EndpointId::parse);
        let tenant = |raw: Option<&str>| raw.map(|t| id(t, TenantId::parse)).transpose();
        Ok(match change {
            EndpointChange::Created | EndpointChange::Updated => {
                let p: EndpointPayload<'_> = serde_json::from_str(payload)?;
                let names: Vec<&str> = p.event_types.iter().map(|n| n.as_ref()).collect();
                (|| {
                    Ok(Self::WebhookEndpoint {
                        change,
                        id: endpoint(&p.id)?,
                        url: p.url.clone().into_owned(),
                        event_types: EventTypes::parse(&names)
                            .map_err(|(_, e)| format!("its event_types {e}"))?,
                        tenant: tenant(p.tenant_id.as_deref())?,
                        enabled: p.enabled,
                    })
                })()
            }
            EndpointChange::Deleted | EndpointChange::SecretRotated => {
                let p: IdPayload<'_> = serde_json::from_str(payload)?;
                endpoint(&p.id).map(|id| Self::WebhookEndpointId {
                    change,
                    id,
                    tenant: row_tenant,
                })
            }
        })
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

impl AuditEvent {
    /// Whether `actor` may record this event: only the system expires holds and records a
    /// period's boundary, and does nothing else; a tenant token only reserves, settles its
    /// reservations and charges; the admin (and an identity) does all but the system's.
    pub(super) fn may_be_recorded_by(&self, actor: &str) -> bool {
        let by_time = matches!(
            self,
            Self::ReservationExpired { .. } | Self::BudgetPeriodReset { .. }
        );
        let spending = matches!(
            self,
            Self::ReservationCreated { .. }
                | Self::ReservationCommitted { .. }
                | Self::ReservationReleased { .. }
                | Self::ReservationExtended { .. }
                | Self::BudgetMoved {
                    direction: Direction::Charge,
                    ..
                }
        );
        // The system disables an endpoint that keeps failing.
        let by_system = matches!(
            self,
            Self::WebhookEndpoint {
                change: EndpointChange::Updated,
                enabled: false,
                ..
            }
        );
        match actor {
            "system" => by_time || by_system,
            "tenant" => spending,
            _ => !by_time,
        }
    }
}

/// What each event does when `audit verify` replays the chain: it runs the rule the writer
/// ran (`domain::rules`) on the state the events before it left, and the event the rule
/// records must be the event recorded. Written here, beside each event's payload, so that an
/// event is described in one file.
impl Replay {
    /// Applies the event of row `seq`, which occurred `at`.
    pub(super) fn apply(
        &mut self,
        seq: i64,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<(), String> {
        match event {
            AuditEvent::WebhookEndpoint {
                change,
                id,
                url,
                event_types,
                tenant,
                enabled,
            } => {
                let known = self.endpoints.get(&id).filter(|e| !e.deleted);
                match (change, known) {
                    (EndpointChange::Created, None) if !self.endpoints.contains_key(&id) => {}
                    (EndpointChange::Created, _) => {
                        return Err(format!("creates webhook endpoint {id} a second time"));
                    }
                    (_, None) => {
                        return Err(format!("changes webhook endpoint {id}, which is not there"));
                    }
                    (_, Some(_)) => {}
                }
                self.endpoints.insert(
                    id,
                    ReplayedEndpoint {
                        seq,
                        url,
                        event_types,
                        tenant,
                        enabled,
                        deleted: false,
                        stored: false,
                    },
                );
            }
            AuditEvent::WebhookEndpointId { change, id, tenant } => {
                let Some(endpoint) = self.endpoints.get_mut(&id).filter(|e| !e.deleted) else {
                    return Err(format!("changes webhook endpoint {id}, which is not there"));
                };
                if endpoint.tenant != tenant {
                    return Err(format!("names webhook endpoint {id} with another tenant"));
                }
                endpoint.deleted = change == EndpointChange::Deleted;
            }
            AuditEvent::TenantCreated {
                id,
                name,
                opening_deposit,
                policy,
                thresholds,
            } => {
                if self.tenants.contains_key(&id) {
                    return Err(format!("creates tenant {id} a second time"));
                }
                let budget = id.default_budget();
                self.new_budget(
                    seq,
                    &id,
                    budget.clone(),
                    Name::parse(DEFAULT_BUDGET_NAME).expect("a valid name"),
                    Unit::atomic(),
                    at,
                    opening_deposit,
                    (policy, thresholds),
                )?;
                self.tenants.insert(
                    id,
                    ReplayedTenant {
                        created_seq: seq,
                        created_at: at,
                        name,
                        tombstoned_at: None,
                        budgets: vec![budget],
                        stored: false,
                    },
                );
            }
            AuditEvent::TenantTombstoned { id } => {
                let budgets = self.active_tenant(&id)?.budgets.clone();
                for budget in budgets {
                    if self.budgets[&budget].closed_at.is_none() {
                        self.budgets[&budget].on_time(&budget, at)?;
                        self.close(&budget, at)?;
                    }
                }
                let tenant = self.tenants.get_mut(&id).expect("checked above");
                tenant.tombstoned_at = Some(at);
            }
            AuditEvent::BudgetCreated {
                tenant,
                id,
                name,
                unit,
                opening_deposit,
                policy,
                thresholds,
            } => {
                self.active_tenant(&tenant)?;
                let taken = self
                    .budgets
                    .values()
                    .any(|b| b.tenant == tenant && b.closed_at.is_none() && b.name == name);
                if taken {
                    return Err(format!("budget {id} takes the name of an open budget"));
                }
                self.new_budget(
                    seq,
                    &tenant,
                    id.clone(),
                    name,
                    unit,
                    at,
                    opening_deposit,
                    (policy, thresholds),
                )?;
                let owner = self.tenants.get_mut(&tenant).expect("checked above");
                owner.budgets.push(id);
            }
            AuditEvent::BudgetClosed { tenant, id } => {
                self.open_budget(&tenant, &id)?.on_time(&id, at)?;
                self.close(&id, at)?;
            }
            AuditEvent::BudgetUpdated {
                ref tenant,
                ref id,
                ref policy,
                ref thresholds,
            } => {
                let b = self.open_budget(tenant, id)?;
                b.on_time(id, at)?;
                let before = (b.policy.as_ref().map(|(p, _)| p), &b.thresholds);
                let recorded =
                    rules::update(tenant, id, before, (policy.clone(), thresholds.clone()));
                if recorded.as_ref() != Some(&event) {
                    return Err(format!(
                        "records an update of budget {id} that changes nothing"
                    ));
                }
                if b.policy.as_ref().map(|(p, _)| p) != policy.as_ref() {
                    let closing = rules::end_period(b.figures)
                        .map_err(|_| format!("budget {id} breaks the invariant"))?;
                    b.end_period(at, closing);
                    b.policy = policy.clone().map(|p| (p, at));
                    b.begin_period(at, Atomic::new(0))?;
                }
                b.thresholds = thresholds.clone();
            }
            AuditEvent::BudgetPeriodReset {
                ref tenant,
                ref budget,
                started_at,
                ..
            } => {
                let b = self.open_budget(tenant, budget)?;
                let (Some((policy, _)), Some(ends_at)) = (&b.policy, b.ends_at()) else {
                    return Err(format!("resets budget {budget}, which has no period"));
                };
                if started_at != ends_at || at < started_at {
                    return Err(format!(
                        "resets budget {budget} at {started_at}, where its period ends at {ends_at}"
                    ));
                }
                let reset = rules::period_reset(tenant, budget, b.figures, policy, started_at)
                    .map_err(|_| format!("budget {budget} breaks the invariant"))?;
                let (closing, carried_in) = (reset.closing, reset.carried_in);
                self.take(budget, reset.change, &event, started_at)?;
                let b = self.budgets.get_mut(budget).expect("checked above");
                b.end_period(started_at, closing);
                b.begin_period(started_at, carried_in)?;
            }
            AuditEvent::BudgetMoved {
                ref tenant,
                ref budget,
                direction,
                amount,
                ref memo,
            } => {
                if amount.get() == 0 {
                    return Err("moves a budget by 0".into());
                }
                let b = self.open_budget(tenant, budget)?;
                b.on_time(budget, at)?;
                let figures = b.figures;
                let change =
                    rules::move_funds(tenant, budget, figures, direction, amount, memo.as_ref())
                        .map_err(|_| format!("a {direction} that budget {budget} cannot take"))?;
                self.take(budget, change, &event, at)?;
            }
            AuditEvent::ReservationCreated {
                ref tenant,
                ref id,
                ref budget,
                amount,
                expires_at,
            } => {
                if self.reservations.contains_key(id)
                    || amount.get() == 0
                    || !is_allowed_hold(at, expires_at)
                {
                    return Err(format!("a reservation {id} that cannot be made"));
                }
                let b = self.open_budget(tenant, budget)?;
                b.on_time(budget, at)?;
                let figures = b.figures;
                let change = rules::reserve(tenant, budget, figures, id, amount, expires_at)
                    .map_err(|_| format!("reservation {id} overspends budget {budget}"))?;
                self.take(budget, change, &event, at)?;
                let b = self.budgets.get_mut(budget).expect("checked above");
                b.active.insert(id.clone());
                self.reservations.insert(
                    id.clone(),
                    ReplayedReservation {
                        created_seq: seq,
                        tenant: tenant.clone(),
                        budget: budget.clone(),
                        amount,
                        created_at: at,
                        expires_at,
                        state: ReservationState::Active,
                        stored: false,
                    },
                );
            }
            AuditEvent::ReservationCommitted {
                ref tenant,
                ref id,
                amount,
            } => self.settle(tenant, id, Settlement::Commit(amount), &event, at)?,
            AuditEvent::ReservationReleased { ref tenant, ref id } => {
                self.settle(tenant, id, Settlement::Release, &event, at)?;
            }
            AuditEvent::ReservationExtended {
                ref tenant,
                ref id,
                expires_at,
            } => {
                self.own_reservation(tenant, id)?;
                if !is_allowed_hold(at, expires_at) {
                    return Err(match self.reservations[id].hold(id).ended_at(at) {
                        None => format!("extends reservation {id} by a TTL out of range"),
                        Some(state) => not_active(id, &state),
                    });
                }
                self.settle(tenant, id, Settlement::Extend(expires_at), &event, at)?;
            }
            AuditEvent::ReservationExpired { ref tenant, ref id } => {
                let r = self.own_reservation(tenant, id)?;
                let (budget, expires_at) = (r.budget.clone(), r.expires_at);
                let b = self.open_budget(tenant, &budget)?;
                // An expiry is recorded before the boundary that follows it, in the period
                // it fell in.
                if b.ends_at().is_some_and(|ends_at| expires_at > ends_at) {
                    return Err(format!(
                        "expires reservation {id} after its budget's boundary was due"
                    ));
                }
                let figures = b.figures;
                let expired = rules::expire(figures, &self.reservations[id].hold(id), at).map_err(
                    |refusal| match refusal {
                        Refusal::NotDue => format!("expires reservation {id} before its time"),
                        Refusal::NotActive { .. } => format!("settles reservation {id} twice"),
                        _ => format!("budget {budget} returns more than it holds"),
                    },
                )?;
                self.take(&budget, expired.change, &event, at)?;
                self.end_hold(id, expired.state);
            }
        }
        Ok(())
    }

    /// Takes what a rule decided for `budget` if it recorded exactly `event`: the figures,
    /// and the entry the ledger must show next.
    fn take(
        &mut self,
        budget: &BudgetId,
        change: Change,
        event: &AuditEvent,
        at: Timestamp,
    ) -> Result<(), String> {
        if change.event != *event {
            return Err(format!(
                "records {:?} where its rule records {:?}",
                event, change.event
            ));
        }
        let b = self
            .budgets
            .get_mut(budget)
            .expect("a budget checked by the caller");
        if let Some(draft) = change.entry {
            b.figures = change.figures;
            b.ledger = entry_digest(
                &b.ledger,
                draft.kind,
                draft.amount,
                draft.reservation.as_ref(),
                draft.memo.as_ref(),
                at,
            );
        }
        Ok(())
    }

    /// A commit, a release or an extend of tenant `tenant`'s reservation `id`, by the rule
    /// the writer runs, which must record `event`.
    fn settle(
        &mut self,
        tenant: &TenantId,
        id: &ReservationId,
        settlement: Settlement,
        event: &AuditEvent,
        at: Timestamp,
    ) -> Result<(), String> {
        let budget = self.own_reservation(tenant, id)?.budget.clone();
        if let Some(state) = self.reservations[id].hold(id).ended_at(at) {
            return Err(not_active(id, &state));
        }
        let b = self.open_budget(tenant, &budget)?;
        b.on_time(&budget, at)?;
        let figures = b.figures;
        let settled = rules::settle(figures, &self.reservations[id].hold(id), settlement, at)
            .map_err(|_| match settlement {
                Settlement::Commit(_) => format!("the commit of {id} overspends budget {budget}"),
                Settlement::Release | Settlement::Extend(_) => {
                    format!("budget {budget} returns more than it holds")
                }
            })?;
        self.take(&budget, settled.change, event, at)?;
        if settled.state == ReservationState::Active {
            self.reservations
                .get_mut(id)
                .expect("checked above")
                .expires_at = settled.expires_at;
        } else {
            self.end_hold(id, settled.state);
        }
        Ok(())
    }
}
