//! The tenant family: `tenant.created`, which makes a tenant with its default budget, and
//! `tenant.tombstoned`, which closes every budget it has.

use serde::{Deserialize, Serialize};

use super::foreign;
use super::payload::{IdPayload, Text, amount, from_json, id_payload, row_tenant, to_json};
use super::period::{RenewalPayload, renewal, renewal_payload};
use crate::audit::actor::Recorders;
use crate::audit::replay::{Replay, ReplayedTenant};
use crate::domain::{AuditEvent, DEFAULT_BUDGET_NAME, Name, TenantId, Timestamp, Unit};

/// The payload of `tenant.created`: its revision-1 members, then a period or thresholds if
/// the default budget has them.
#[derive(Serialize, Deserialize)]
struct CreatedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    opening_deposit_atomic: Text<'a>,
    #[serde(borrow, flatten)]
    renewal: Option<RenewalPayload<'a>>,
}

/// The `action` column's text.
pub(super) fn action(event: &AuditEvent) -> &'static str {
    match event {
        AuditEvent::TenantCreated { .. } => "tenant.created",
        AuditEvent::TenantTombstoned { .. } => "tenant.tombstoned",
        other => foreign(other),
    }
}

/// The tenant concerned: the tenant itself.
pub(super) fn tenant_id(event: &AuditEvent) -> &TenantId {
    match event {
        AuditEvent::TenantCreated { id, .. } | AuditEvent::TenantTombstoned { id } => id,
        other => foreign(other),
    }
}

/// The payload.
pub(super) fn payload(event: &AuditEvent) -> String {
    match event {
        AuditEvent::TenantCreated {
            id,
            name,
            opening_deposit,
            policy,
            thresholds,
        } => to_json(&CreatedPayload {
            id: id.as_str().into(),
            name: name.as_str().into(),
            opening_deposit_atomic: opening_deposit.to_string().into(),
            renewal: renewal_payload(policy.as_ref(), thresholds),
        }),
        AuditEvent::TenantTombstoned { id } => id_payload(id.as_str()),
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
        "tenant.created" => created,
        "tenant.tombstoned" => tombstoned,
        _ => return None,
    };
    Some(row_tenant(tenant_id).and_then(|tenant| read(action, tenant, payload)))
}

fn created(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: CreatedPayload<'_> = from_json(action, payload)?;
    let (policy, thresholds) = renewal(p.renewal)?;
    Ok(AuditEvent::TenantCreated {
        id: own_tenant(&p.id, &tenant)?,
        name: Name::parse(&p.name).map_err(|e| format!("its name {e}"))?,
        opening_deposit: amount(&p.opening_deposit_atomic)?,
        policy,
        thresholds,
    })
}

fn tombstoned(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: IdPayload<'_> = from_json(action, payload)?;
    Ok(AuditEvent::TenantTombstoned {
        id: own_tenant(&p.id, &tenant)?,
    })
}

/// The payload's id, which must be the row's tenant.
fn own_tenant(raw: &str, tenant: &TenantId) -> Result<TenantId, String> {
    TenantId::parse(raw)
        .filter(|id| id == tenant)
        .ok_or_else(|| format!("the payload's id {raw:?} is not the row's tenant"))
}

/// Who may record it: the admin.
pub(super) fn recorders(event: &AuditEvent) -> Recorders {
    match event {
        AuditEvent::TenantCreated { .. } | AuditEvent::TenantTombstoned { .. } => Recorders::Admin,
        other => foreign(other),
    }
}

/// What it does on replay: a creation makes the tenant and its default budget; a tombstone
/// closes every budget still open, releasing their holds.
pub(super) fn replay(
    r: &mut Replay,
    seq: i64,
    at: Timestamp,
    event: AuditEvent,
) -> Result<(), String> {
    match event {
        AuditEvent::TenantCreated {
            id,
            name,
            opening_deposit,
            policy,
            thresholds,
        } => {
            if r.tenants.contains_key(&id) {
                return Err(format!("creates tenant {id} a second time"));
            }
            let budget = id.default_budget();
            r.new_budget(
                seq,
                &id,
                budget.clone(),
                Name::parse(DEFAULT_BUDGET_NAME).expect("a valid name"),
                Unit::atomic(),
                at,
                opening_deposit,
                (policy, thresholds),
                None,
            )?;
            r.tenants.insert(
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
            r.active_tenant(&id)?;
            for budget in r.closing_order(&id) {
                r.budgets[&budget].on_time(&budget, at)?;
                r.close(&budget, at)?;
            }
            let tenant = r.tenants.get_mut(&id).expect("checked above");
            tenant.tombstoned_at = Some(at);
        }
        other => foreign(&other),
    }
    Ok(())
}
