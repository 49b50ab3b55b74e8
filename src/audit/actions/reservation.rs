//! The reservation family: a hold taken (`reservation.created`), settled by a commit or a
//! release, made to last longer (`reservation.extended`), or run out of time
//! (`reservation.expired`, the system's).

use serde::{Deserialize, Serialize};

use super::foreign;
use super::payload::{
    IdPayload, Text, amount, from_json, id, id_payload, row_tenant, time, to_json,
};
use crate::audit::actor::Recorders;
use crate::audit::replay::{Replay, ReplayedReservation};
use crate::domain::rules::{self, Settlement};
use crate::domain::{
    AuditEvent, BudgetId, Refusal, ReservationId, ReservationState, TenantId, Timestamp,
};

/// The payload of `reservation.created`.
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

/// The payload of `reservation.committed`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommittedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    amount_atomic: Text<'a>,
}

/// The payload of `reservation.extended`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendedPayload<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    expires_at: Text<'a>,
}

/// The `action` column's text.
pub(super) fn action(event: &AuditEvent) -> &'static str {
    match event {
        AuditEvent::ReservationCreated { .. } => "reservation.created",
        AuditEvent::ReservationCommitted { .. } => "reservation.committed",
        AuditEvent::ReservationReleased { .. } => "reservation.released",
        AuditEvent::ReservationExtended { .. } => "reservation.extended",
        AuditEvent::ReservationExpired { .. } => "reservation.expired",
        other => foreign(other),
    }
}

/// The tenant concerned: the hold's.
pub(super) fn tenant_id(event: &AuditEvent) -> &TenantId {
    match event {
        AuditEvent::ReservationCreated { tenant, .. }
        | AuditEvent::ReservationCommitted { tenant, .. }
        | AuditEvent::ReservationReleased { tenant, .. }
        | AuditEvent::ReservationExtended { tenant, .. }
        | AuditEvent::ReservationExpired { tenant, .. } => tenant,
        other => foreign(other),
    }
}

/// The payload.
pub(super) fn payload(event: &AuditEvent) -> String {
    match event {
        AuditEvent::ReservationCreated {
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
        AuditEvent::ReservationCommitted { id, amount, .. } => to_json(&CommittedPayload {
            id: id.as_str().into(),
            amount_atomic: amount.to_string().into(),
        }),
        AuditEvent::ReservationReleased { id, .. } | AuditEvent::ReservationExpired { id, .. } => {
            id_payload(id.as_str())
        }
        AuditEvent::ReservationExtended { id, expires_at, .. } => to_json(&ExtendedPayload {
            id: id.as_str().into(),
            expires_at: expires_at.to_string().into(),
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
        "reservation.created" => created,
        "reservation.committed" => committed,
        "reservation.released" | "reservation.expired" => ended,
        "reservation.extended" => extended,
        _ => return None,
    };
    Some(row_tenant(tenant_id).and_then(|tenant| read(action, tenant, payload)))
}

fn created(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: ReservedPayload<'_> = from_json(action, payload)?;
    Ok(AuditEvent::ReservationCreated {
        id: id(&p.id, ReservationId::parse)?,
        budget: id(&p.budget_id, BudgetId::parse)?,
        amount: amount(&p.amount_atomic)?,
        expires_at: time(&p.expires_at)?,
        tenant,
    })
}

fn committed(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: CommittedPayload<'_> = from_json(action, payload)?;
    Ok(AuditEvent::ReservationCommitted {
        id: id(&p.id, ReservationId::parse)?,
        amount: amount(&p.amount_atomic)?,
        tenant,
    })
}

/// A release or an expiry, which name the hold alone.
fn ended(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: IdPayload<'_> = from_json(action, payload)?;
    let id = id(&p.id, ReservationId::parse)?;
    Ok(if action == "reservation.released" {
        AuditEvent::ReservationReleased { tenant, id }
    } else {
        AuditEvent::ReservationExpired { tenant, id }
    })
}

fn extended(action: &str, tenant: TenantId, payload: &str) -> Result<AuditEvent, String> {
    let p: ExtendedPayload<'_> = from_json(action, payload)?;
    Ok(AuditEvent::ReservationExtended {
        id: id(&p.id, ReservationId::parse)?,
        expires_at: time(&p.expires_at)?,
        tenant,
    })
}

/// Who may record it: a hold and its settling are spends, which a tenant token makes too; an
/// expiry is the system's alone.
pub(super) fn recorders(event: &AuditEvent) -> Recorders {
    match event {
        AuditEvent::ReservationExpired { .. } => Recorders::System,
        AuditEvent::ReservationCreated { .. }
        | AuditEvent::ReservationCommitted { .. }
        | AuditEvent::ReservationReleased { .. }
        | AuditEvent::ReservationExtended { .. } => Recorders::AdminOrTenant,
        other => foreign(other),
    }
}

/// Whether a hold from `at` to `expires_at` lasts a whole number of seconds the contract
/// allows (1 to 86,400).
fn is_allowed_hold(at: Timestamp, expires_at: Timestamp) -> bool {
    let held = expires_at.unix_ms().saturating_sub(at.unix_ms());
    expires_at > at && held.is_multiple_of(1000) && (1000..=86_400_000).contains(&held)
}

/// Why a change of reservation `id` could not be made: it had ended (in `state`).
fn not_active(id: &ReservationId, state: &ReservationState) -> String {
    if matches!(state, ReservationState::Expired { .. }) {
        format!("acts on reservation {id} after it expired")
    } else {
        format!("settles reservation {id} twice")
    }
}

/// What it does on replay: each runs the writer's rule on the hold and its budget as the
/// events before it left them.
pub(super) fn replay(
    r: &mut Replay,
    seq: i64,
    at: Timestamp,
    event: AuditEvent,
) -> Result<(), String> {
    match event {
        AuditEvent::ReservationCreated {
            ref tenant,
            ref id,
            ref budget,
            amount,
            expires_at,
        } => {
            if r.reservations.contains_key(id)
                || amount.get() == 0
                || !is_allowed_hold(at, expires_at)
            {
                return Err(format!("a reservation {id} that cannot be made"));
            }
            let b = r.open_budget(tenant, budget)?;
            b.on_time(budget, at)?;
            let figures = b.figures;
            let change = rules::reserve(tenant, budget, figures, id, amount, expires_at)
                .map_err(|_| format!("reservation {id} overspends budget {budget}"))?;
            r.take(budget, change, &event, at)?;
            let b = r.budgets.get_mut(budget).expect("checked above");
            b.active.insert(id.clone());
            r.reservations.insert(
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
        } => settle(r, tenant, id, Settlement::Commit(amount), &event, at)?,
        AuditEvent::ReservationReleased { ref tenant, ref id } => {
            settle(r, tenant, id, Settlement::Release, &event, at)?;
        }
        AuditEvent::ReservationExtended {
            ref tenant,
            ref id,
            expires_at,
        } => {
            r.own_reservation(tenant, id)?;
            if !is_allowed_hold(at, expires_at) {
                return Err(match r.reservations[id].hold(id).ended_at(at) {
                    None => format!("extends reservation {id} by a TTL out of range"),
                    Some(state) => not_active(id, &state),
                });
            }
            settle(r, tenant, id, Settlement::Extend(expires_at), &event, at)?;
        }
        AuditEvent::ReservationExpired { ref tenant, ref id } => {
            let held = r.own_reservation(tenant, id)?;
            let (budget, expires_at) = (held.budget.clone(), held.expires_at);
            // An expiry is recorded in the period it fell in, on its budget and on every
            // ancestor: after the boundaries before it, before those after it.
            for level in std::iter::once(budget.clone()).chain(r.ancestors(&budget)) {
                if let Some(b) = r.budgets.get(&level) {
                    b.in_period(&level, expires_at)
                        .map_err(|e| format!("expires reservation {id}: {e}"))?;
                }
            }
            let figures = r.open_budget(tenant, &budget)?.figures;
            let expired =
                rules::expire(figures, &r.reservations[id].hold(id), at).map_err(|refusal| {
                    match refusal {
                        Refusal::NotDue => format!("expires reservation {id} before its time"),
                        Refusal::NotActive { .. } => format!("settles reservation {id} twice"),
                        _ => format!("budget {budget} returns more than it holds"),
                    }
                })?;
            r.take(&budget, expired.change, &event, at)?;
            r.end_hold(id, expired.state);
        }
        other => foreign(&other),
    }
    Ok(())
}

/// A commit, a release or an extend of tenant `tenant`'s reservation `id`, by the rule
/// the writer runs, which must record `event`.
fn settle(
    r: &mut Replay,
    tenant: &TenantId,
    id: &ReservationId,
    settlement: Settlement,
    event: &AuditEvent,
    at: Timestamp,
) -> Result<(), String> {
    let budget = r.own_reservation(tenant, id)?.budget.clone();
    if let Some(state) = r.reservations[id].hold(id).ended_at(at) {
        return Err(not_active(id, &state));
    }
    let b = r.open_budget(tenant, &budget)?;
    b.on_time(&budget, at)?;
    let figures = b.figures;
    let settled =
        rules::settle(figures, &r.reservations[id].hold(id), settlement, at).map_err(|_| {
            match settlement {
                Settlement::Commit(_) => format!("the commit of {id} overspends budget {budget}"),
                Settlement::Release | Settlement::Extend(_) => {
                    format!("budget {budget} returns more than it holds")
                }
            }
        })?;
    r.take(&budget, settled.change, event, at)?;
    if settled.state == ReservationState::Active {
        r.reservations
            .get_mut(id)
            .expect("checked above")
            .expires_at = settled.expires_at;
    } else {
        r.end_hold(id, settled.state);
    }
    Ok(())
}
