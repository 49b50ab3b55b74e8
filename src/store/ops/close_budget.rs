//! `DELETE /v1/tenants/<id>/budgets/<bid>`: the budget's holds released and the budget
//! frozen for good. A closed budget is answered as it is.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{Budget, BudgetId, TenantId};
use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{StoreError, queries};

/// A budget's close.
#[derive(Debug, Clone)]
pub(crate) struct CloseBudget {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// Which budget (`None`: the path named none that could exist).
    pub(crate) budget: Option<BudgetId>,
    /// Who asks.
    pub(crate) actor: Actor,
}

impl WriteOp for CloseBudget {
    type Output = Budget;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Budget, StoreError> {
        let CloseBudget {
            tenant,
            budget: id,
            actor,
        } = self;
        w.lock_tenant(&tenant)?;
        let (mut budget, active) = w.stored_budget_to_write(&tenant, id.as_ref())?;
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if !budget.is_open() {
            return Ok(budget);
        }
        // Under the tenant's lock no child opens or closes meanwhile.
        if queries::budgets::has_open_children(w.db(), &budget.id)? {
            return Err(StoreError::BudgetHasOpenChildren);
        }
        let now = w.now();
        w.catch_up_budget(&mut budget, now)?;
        w.close(&mut budget, now)?;
        w.record(now, &actor, &rules::close(&tenant, &budget.id))?;
        w.publish_budget_closed(now, &budget)?;
        Ok(budget)
    }
}
