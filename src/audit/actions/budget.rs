//! The budget family: `budget.created` and `budget.closed`, which make and close a budget, and
//! `budget.credited`, `budget.debited` and `budget.charged`, which move its funds without a
//! hold.

use serde::{Deserialize, Serialize};

use super::foreign;
use super::payload::{IdPayload, Text, amount, from_json, id, id_payload, row_tenant, to_json};
use super::period::{RenewalPayload, renewal, renewal_payload};
use crate::audit::actor::Recorders;
use crate::audit::replay::Replay;
use crate::domain::rules;
use crate::domain::{AuditEvent, BudgetId, Direction, Memo, Name, TenantId, Timestamp, Unit};

/// The payload of `budget.created`: its revision-2 members, then a period or thresholds if it
/// has them.
#[derive(Serialize, Deserialize)]
struct CreatedPayload<'a> {
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
    /// Only when it has a parent (revision 4).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    parent_id: Option<Text<'a>>,
}

/// The payload of a credit, a debit or a charge.
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

/// The `action` column's text.
pub(super) fn action(event: &AuditEvent) -> &'static str {
    match event {
        AuditEvent::BudgetCreated { .. } => "budget.created",
        AuditEvent::BudgetClosed { .. } => "budget.closed",
        AuditEvent::BudgetMoved { direction, .. } => match direction {
            Direction::Credit => "budget.credited",
            Direction::Debit => "budget.debited",
            Direction::Charge => "budget.charged",
        },
        other => foreign(other),
    }
}

/// The tenant concerned: the budget's.
pub(super) fn tenant_id(event: &AuditEvent) -> &TenantId {
    match event {
        AuditEvent::BudgetCreated { tenant, .. }
        | AuditEvent::BudgetClosed { tenant, .. }
        | AuditEvent::BudgetMoved { tenant, .. } => tenant,
        other => foreign(other),
    }
}

/// The payload.
pub(super) fn payload(event: &AuditEvent) -> String {
    match event {
        AuditEvent::BudgetCreated {
            id,
            name,
            unit,
            opening_deposit,
            policy,
            thresholds,
            parent,
            ..
        } => to_json(&CreatedPayload {
            id: id.as_str().into(),
            name: name.as_str().into(),
            unit: unit.as_str().into(),
            opening_deposit_atomic: opening_deposit.to_string().into(),
            renewal: renewal_payload(policy.as_ref(), thresholds),
            parent_id: parent.as_ref().map(|p| p.as_str().into()),
        }),
        AuditEvent::BudgetClosed { id, .. } => id_payload(id.as_str()),
        AuditEvent::BudgetMoved {
            budget,
            amount,
            memo,
            ..
        } => to_json(&MovedPayload {
            budget_id: budget.as_str().into(),
            amount_atomic: amount.to_string().into(),
            memo: memo.as_ref().map(|m| m.as_str().into()),
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
        "budget.created" => created,
        "budget.closed" => closed,
        "budget.credited" | "budget.debited" | "budget.charged" => moved,
        _ => return None,
    };
    Some(row_tenant(tenant_id).and_then(|tenant| read(action, tenant, payload)))
}

fn created(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: CreatedPayload<'_> = from_json(action, payload)?;
    let (policy, thresholds) = renewal(p.renewal)?;
    Ok(AuditEvent::BudgetCreated {
        id: id(&p.id, BudgetId::parse)?,
        name: Name::parse(&p.name).map_err(|e| format!("its name {e}"))?,
        unit: Unit::parse(&p.unit).map_err(|e| format!("its unit {e}"))?,
        opening_deposit: amount(&p.opening_deposit_atomic)?,
        policy,
        thresholds,
        parent: p
            .parent_id
            .map(|raw| id(&raw, BudgetId::parse))
            .transpose()?,
        tenant,
    })
}

fn closed(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: IdPayload<'_> = from_json(action, payload)?;
    Ok(AuditEvent::BudgetClosed {
        id: id(&p.id, BudgetId::parse)?,
        tenant,
    })
}

fn moved(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: MovedPayload<'_> = from_json(action, payload)?;
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
    Ok(AuditEvent::BudgetMoved {
        tenant,
        budget,
        direction,
        amount,
        memo,
    })
}

/// Who may record it: a charge is a spend, which a tenant token makes too; the rest is the
/// admin's.
pub(super) fn recorders(event: &AuditEvent) -> Recorders {
    match event {
        AuditEvent::BudgetMoved {
            direction: Direction::Charge,
            ..
        } => Recorders::AdminOrTenant,
        AuditEvent::BudgetCreated { .. }
        | AuditEvent::BudgetClosed { .. }
        | AuditEvent::BudgetMoved { .. } => Recorders::Admin,
        other => foreign(other),
    }
}

/// What it does on replay: a creation makes the budget under an active tenant, with a name no
/// open budget of it has; a closing releases its holds; a move runs the writer's rule.
pub(super) fn replay(
    r: &mut Replay,
    seq: i64,
    at: Timestamp,
    event: AuditEvent,
) -> Result<(), String> {
    match event {
        AuditEvent::BudgetCreated {
            tenant,
            id,
            name,
            unit,
            opening_deposit,
            policy,
            thresholds,
            parent,
        } => {
            r.active_tenant(&tenant)?;
            let taken = r
                .budgets
                .values()
                .any(|b| b.tenant == tenant && b.closed_at.is_none() && b.name == name);
            if taken {
                return Err(format!("budget {id} takes the name of an open budget"));
            }
            r.new_budget(
                seq,
                &tenant,
                id.clone(),
                name,
                unit,
                at,
                opening_deposit,
                (policy, thresholds),
                parent,
            )?;
            let owner = r.tenants.get_mut(&tenant).expect("checked above");
            owner.budgets.push(id);
        }
        AuditEvent::BudgetClosed { tenant, id } => {
            r.open_budget(&tenant, &id)?.on_time(&id, at)?;
            r.close(&id, at)?;
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
            let b = r.open_budget(tenant, budget)?;
            b.on_time(budget, at)?;
            let figures = b.figures;
            let change =
                rules::move_funds(tenant, budget, figures, direction, amount, memo.as_ref())
                    .map_err(|_| format!("a {direction} that budget {budget} cannot take"))?;
            r.take(budget, change, &event, at)?;
        }
        other => foreign(&other),
    }
    Ok(())
}
