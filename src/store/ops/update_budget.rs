//! `PATCH /v1/tenants/<id>/budgets/<bid>`: a budget's period policy and alert thresholds
//! set, changed or cleared. A new or changed period starts now; the one it replaces ends
//! now, without a refill or a forfeit.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{Atomic, Budget, BudgetId, Policy, TenantId, Thresholds};
use crate::store::StoreError;
use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;

/// What a `PATCH` may change; an absent member (`None`) is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BudgetPatch {
    /// The new policy (`Some(None)`: none).
    pub(crate) policy: Option<Option<Policy>>,
    /// The new thresholds (empty: none).
    pub(crate) thresholds: Option<Thresholds>,
}

/// A `PATCH` of a budget.
#[derive(Debug, Clone)]
pub(crate) struct UpdateBudget {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// Which budget (`None`: the path named none that could exist).
    pub(crate) budget: Option<BudgetId>,
    /// What to change.
    pub(crate) patch: BudgetPatch,
    /// Who asks.
    pub(crate) actor: Actor,
}

impl WriteOp for UpdateBudget {
    type Output = Budget;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let UpdateBudget {
            tenant,
            budget: id,
            patch,
            actor,
        } = self;
        w.lock_tenant(&tenant)?;
        let now = w.now();
        let mut budget = w.open_budget(&tenant, id.as_ref(), now)?;
        let policy = patch.policy.unwrap_or_else(|| budget.policy.clone());
        let thresholds = patch
            .thresholds
            .unwrap_or_else(|| budget.thresholds.clone());
        let before = (budget.policy.as_ref(), &budget.thresholds);
        let Some(event) = rules::update(
            &tenant,
            &budget.id,
            before,
            (policy.clone(), thresholds.clone()),
        ) else {
            return Ok(budget);
        };
        if policy != budget.policy {
            w.end_period(&mut budget, now)?;
            w.write_policy(&budget, policy.as_ref(), now)?;
            budget.policy = policy.clone();
            if let Some(policy) = &policy {
                w.begin_period(&mut budget, policy, now, now, Atomic::new(0))?;
            }
        }
        if thresholds != budget.thresholds {
            budget.thresholds = thresholds;
            w.write_thresholds(&budget)?;
        }
        w.record(now, &actor, &event)?;
        w.publish_budget_updated(now, &budget)?;
        Ok(budget)
    }
}
