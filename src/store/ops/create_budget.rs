//! `POST /v1/tenants/<id>/budgets`: a further budget of an active tenant, with its opening
//! deposit.

use crate::audit::{Actor, AuditEvent};
use crate::domain::{
    ANCESTORS_MAX, Budget, BudgetId, BudgetState, Figures, NewBudget, PARENT_UNKNOWN, TenantId,
};
use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{Keyed, StoreError, Written};

/// A budget create.
#[derive(Debug, Clone)]
pub(crate) struct CreateBudget {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// What to create.
    pub(crate) budget: NewBudget,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Budget>>,
}

impl WriteOp for CreateBudget {
    type Output = Written<Budget>;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let CreateBudget {
            tenant,
            budget: new,
            actor,
            keyed,
        } = self;
        w.lock_tenant(&tenant)?;
        w.keyed(keyed, |w| {
            w.active_tenant(&tenant)?;
            if let Some(parent) = &new.parent {
                check_parent(w, &tenant, parent)?;
            }
            let now = w.now();
            let mut budget = Budget {
                id: BudgetId::from_ulid(w.next_ulid(now)),
                tenant_id: tenant.clone(),
                name: new.name.clone(),
                unit: new.unit.clone(),
                state: BudgetState::Open,
                created_at: now,
                opening_deposit: new.opening_deposit,
                figures: Figures::opening(new.opening_deposit),
                policy: new.policy.clone(),
                current: None,
                thresholds: new.thresholds.clone(),
                parent_id: new.parent.clone(),
            };
            w.insert_budget(&mut budget)?;
            let event = AuditEvent::BudgetCreated {
                tenant: tenant.clone(),
                id: budget.id.clone(),
                name: budget.name.clone(),
                unit: budget.unit.clone(),
                opening_deposit: budget.opening_deposit,
                policy: budget.policy.clone(),
                thresholds: budget.thresholds.clone(),
                parent: budget.parent_id.clone(),
            };
            w.record(now, &actor, &event)?;
            w.publish_budget_created(now, &budget)?;
            Ok(budget)
        })
    }
}

/// Checks that `parent` may be a new budget's parent: an open budget of `tenant` with at most
/// [`ANCESTORS_MAX`]` - 1` ancestors (`422` naming `parent_id`, or `409 budget_closed`).
/// Under the tenant's lock, nothing of this changes before the budget is written.
fn check_parent<D: Sql>(
    w: &mut WriterState<D>,
    tenant: &TenantId,
    parent: &BudgetId,
) -> Result<(), StoreError> {
    let unknown = |e| match e {
        StoreError::BudgetNotFound => StoreError::BadParent(PARENT_UNKNOWN),
        e => e,
    };
    let mut above = w.stored_budget(tenant, Some(parent)).map_err(unknown)?;
    if !above.is_open() {
        return Err(StoreError::BudgetClosed);
    }
    // The parent's own ancestors: with ANCESTORS_MAX of them, the new budget would be a level
    // too deep.
    for _ in 0..ANCESTORS_MAX {
        let Some(next) = above.parent_id.take() else {
            return Ok(());
        };
        above = w.stored_budget(tenant, Some(&next)).map_err(unknown)?;
    }
    Err(StoreError::BadParent(TOO_DEEP))
}

/// What a `parent_id` that would make a fifth level is told.
const TOO_DEEP: &str = "names a budget at the fourth level: a tree has at most four levels";
