//! `POST …/credits` and `POST …/debits`: money into or out of an open budget, with its
//! ledger entry.

use crate::audit::{Actor, AuditEvent};
use crate::domain::{BudgetId, LedgerEntry, Movement, TenantId};
use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{Keyed, StoreError, Written};

/// A credit or a debit.
#[derive(Debug)]
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

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let MoveBudget {
            tenant,
            budget: id,
            movement,
            actor,
            keyed,
        } = self;
        w.keyed(keyed, |w| {
            let now = w.now();
            let mut budget = w.open_budget(&tenant, id.as_ref(), now)?;
            let amount = movement.amount;
            budget.figures = budget.figures.moved(movement.direction, amount.get())?;
            w.write_figures(&budget)?;
            let kind = movement.direction.entry_kind();
            let entry = w.append_entry(&budget, kind, amount, None, movement.memo.clone(), now)?;
            let event = AuditEvent::BudgetMoved {
                tenant: tenant.clone(),
                budget: budget.id.clone(),
                direction: movement.direction,
                amount,
                memo: movement.memo.clone(),
            };
            w.record(now, &actor, &event)?;
            Ok(entry)
        })
    }
}
