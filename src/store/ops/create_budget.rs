//! `POST /v1/tenants/<id>/budgets`: a further budget of an active tenant, with its opening
//! deposit.

use crate::audit::{Actor, AuditEvent};
use crate::domain::{Budget, BudgetId, BudgetState, Figures, NewBudget, TenantId};
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
            };
            w.record(now, &actor, &event)?;
            w.publish_budget_created(now, &budget)?;
            Ok(budget)
        })
    }
}
