//! `POST /v1/tenants/<id>/charges`: a spend without a hold, checked and taken in one step.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{BudgetId, LedgerEntry, Memo, TenantId};
use crate::store::sql::Sql;
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{Keyed, StoreError, Written};

/// A charge.
#[derive(Debug)]
pub(crate) struct Charge {
    /// Whose.
    pub(crate) tenant: TenantId,
    /// Which budget (`None`: the body named none that could exist).
    pub(crate) budget: Option<BudgetId>,
    /// How much, at least 1.
    pub(crate) amount: crate::domain::Atomic,
    /// A note, if one was given.
    pub(crate) memo: Option<Memo>,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<LedgerEntry>>,
}

impl WriteOp for Charge {
    type Output = Written<LedgerEntry>;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let Charge {
            tenant,
            budget: id,
            amount,
            memo,
            actor,
            keyed,
        } = self;
        w.keyed(keyed, |w| {
            let now = w.now();
            let mut budget = w.open_budget(&tenant, id.as_ref(), now)?;
            let change = rules::charge(&tenant, &budget.id, budget.figures, amount, memo.as_ref())?;
            w.apply(&mut budget, change, &actor, now)?
                .ok_or_else(|| StoreError::Internal("a charge without its entry".into()))
        })
    }
}
