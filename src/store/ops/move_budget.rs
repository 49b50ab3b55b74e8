//! `POST …/credits`, `POST …/debits` and `POST /v1/tenants/<id>/charges`: money into, out of
//! or spent from an open budget, with its ledger entry.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{BudgetId, Direction, LedgerEntry, Movement, TenantId};
use crate::store::sql::Sql;
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{Keyed, StoreError, Written};

/// A credit, a debit or a charge.
#[derive(Debug, Clone)]
pub(crate) struct MoveBudget {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// Which budget (`None`: the path named none that could exist).
    pub(crate) budget: Option<BudgetId>,
    /// What to move.
    pub(crate) movement: Movement,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<LedgerEntry>>,
}

impl WriteOp for MoveBudget {
    type Output = Written<LedgerEntry>;

    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Keeps;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.tenant)
    }

    fn budget(&self) -> Option<&str> {
        self.budget.as_ref().map(BudgetId::as_str)
    }

    /// A credit or a debit writes its event; a charge, on the spend path, none.
    fn publishes(&self) -> bool {
        self.movement.direction != Direction::Charge
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let MoveBudget {
            tenant,
            budget: id,
            movement,
            actor,
            keyed,
        } = self;
        w.lock_tenant(&tenant)?;
        w.keyed(keyed, |w| {
            let now = w.now();
            let mut budget = w.open_budget(&tenant, id.as_ref(), now)?;
            let change = rules::move_funds(
                &tenant,
                &budget.id,
                budget.figures,
                movement.direction,
                movement.amount,
                movement.memo.as_ref(),
            )
            .map_err(|refusal| StoreError::from(refusal).short_on(&budget.id))?;
            let entry = w
                .apply(&mut budget, change, &actor, now)?
                .ok_or_else(|| StoreError::Internal("a movement without its entry".into()))?;
            w.keep_budget(budget);
            Ok(entry)
        })
    }
}
