//! The period family: `budget.updated`, which sets a budget's period policy and alert
//! thresholds, and `budget.period_reset`, which the system records at a period's boundary.
//! The policy's and the thresholds' payload members are here too, since a created tenant or
//! budget carries them as well.

use serde::{Deserialize, Serialize};

use super::foreign;
use super::payload::{Text, amount, from_json, id, row_tenant, time, to_json};
use crate::audit::actor::Recorders;
use crate::audit::replay::Replay;
use crate::domain::rules;
use crate::domain::{
    Atomic, AuditEvent, BudgetId, Cadence, EntryKind, Interval, Policy, TenantId, Thresholds,
    Timestamp, Zone,
};

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
pub(super) struct RenewalPayload<'a> {
    #[serde(borrow)]
    period: Option<PolicyPayload<'a>>,
    #[serde(borrow)]
    alert_thresholds_atomic: Vec<Text<'a>>,
}

/// The payload of `budget.updated`.
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

/// The payload of `budget.period_reset`.
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
pub(super) fn renewal_payload<'a>(
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
pub(super) fn renewal(
    raw: Option<RenewalPayload<'_>>,
) -> Result<(Option<Policy>, Thresholds), String> {
    match raw {
        None => Ok((None, Thresholds::default())),
        Some(r) => Ok((
            r.period.map(policy).transpose()?,
            thresholds(r.alert_thresholds_atomic)?,
        )),
    }
}

/// The `action` column's text.
pub(super) fn action(event: &AuditEvent) -> &'static str {
    match event {
        AuditEvent::BudgetUpdated { .. } => "budget.updated",
        AuditEvent::BudgetPeriodReset { .. } => "budget.period_reset",
        other => foreign(other),
    }
}

/// The tenant concerned.
pub(super) fn tenant_id(event: &AuditEvent) -> &TenantId {
    match event {
        AuditEvent::BudgetUpdated { tenant, .. } | AuditEvent::BudgetPeriodReset { tenant, .. } => {
            tenant
        }
        other => foreign(other),
    }
}

/// The payload.
pub(super) fn payload(event: &AuditEvent) -> String {
    match event {
        AuditEvent::BudgetUpdated {
            id,
            policy,
            thresholds,
            ..
        } => to_json(&UpdatedPayload {
            id: id.as_str().into(),
            period: policy.as_ref().map(policy_payload),
            alert_thresholds_atomic: thresholds_payload(thresholds),
        }),
        AuditEvent::BudgetPeriodReset {
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
        other => foreign(other),
    }
}

/// The event of an `action` row of this family, or `None` for another family's action.
pub(super) fn parse(
    action: &str,
    tenant_id: &str,
    payload: &str,
) -> Option<Result<AuditEvent, String>> {
    let read = match action {
        "budget.updated" => updated,
        "budget.period_reset" => reset,
        _ => return None,
    };
    Some(row_tenant(tenant_id).and_then(|tenant| read(action, tenant, payload)))
}

fn updated(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: UpdatedPayload<'_> = from_json(action, payload)?;
    Ok(AuditEvent::BudgetUpdated {
        id: id(&p.id, BudgetId::parse)?,
        policy: p.period.map(policy).transpose()?,
        thresholds: thresholds(p.alert_thresholds_atomic)?,
        tenant,
    })
}

fn reset(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: ResetPayload<'_> = from_json(action, payload)?;
    let kind = match EntryKind::parse(&p.kind) {
        Some(kind @ (EntryKind::Refill | EntryKind::Forfeit)) => kind,
        _ => return Err(format!("a reset of kind {:?}", p.kind)),
    };
    Ok(AuditEvent::BudgetPeriodReset {
        budget: id(&p.budget_id, BudgetId::parse)?,
        started_at: time(&p.period_started_at)?,
        kind,
        amount: amount(&p.amount_atomic)?,
        tenant,
    })
}

/// Who may record it: a boundary is the system's alone.
pub(super) fn recorders(event: &AuditEvent) -> Recorders {
    match event {
        AuditEvent::BudgetUpdated { .. } => Recorders::Admin,
        AuditEvent::BudgetPeriodReset { .. } => Recorders::System,
        other => foreign(other),
    }
}

/// What it does on replay: an update that changes the policy ends the current period and
/// begins one under the new policy; a boundary ends the period and begins the next as its
/// rule says.
pub(super) fn replay(r: &mut Replay, at: Timestamp, event: AuditEvent) -> Result<(), String> {
    match event {
        AuditEvent::BudgetUpdated {
            ref tenant,
            ref id,
            ref policy,
            ref thresholds,
        } => {
            let b = r.open_budget(tenant, id)?;
            b.on_time(id, at)?;
            let before = (b.policy.as_ref().map(|(p, _)| p), &b.thresholds);
            let recorded = rules::update(tenant, id, before, (policy.clone(), thresholds.clone()));
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
            let b = r.open_budget(tenant, budget)?;
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
            r.take(budget, reset.change, &event, started_at)?;
            let b = r.budgets.get_mut(budget).expect("checked above");
            b.end_period(started_at, closing);
            b.begin_period(started_at, carried_in)?;
        }
        other => foreign(&other),
    }
    Ok(())
}
