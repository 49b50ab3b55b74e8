//! `POST /v1/tenants`: a tenant, its default budget with the opening deposit, and its token.

use crate::audit::{Actor, AuditEvent};
use crate::domain::{
    Budget, BudgetState, DEFAULT_BUDGET_NAME, Figures, Name, NewTenant, Tenant, TenantId,
    TenantState, Unit,
};
use crate::ids::TenantToken;
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::write::{BudgetsAhead, WriteOp};
use crate::store::{Keyed, StoreError, Written};

/// A tenant create as the store receives it.
#[derive(Debug, Clone)]
pub(crate) struct CreateTenant {
    /// What to create.
    pub(crate) tenant: NewTenant,
    /// Who asks.
    pub(crate) actor: Actor,
    /// The key it is bound to, if any.
    pub(crate) keyed: Option<Keyed<Created>>,
}

/// A new tenant and its token. `Debug` never shows the token.
#[derive(Debug)]
pub(crate) struct Created {
    /// The tenant as stored.
    pub(crate) tenant: Tenant,
    /// Its token, whose plaintext leaves the process once, in the response.
    pub(crate) token: TenantToken,
}

impl WriteOp for CreateTenant {
    const BUDGETS_AHEAD: BudgetsAhead = BudgetsAhead::Untouched;

    type Output = Written<Created>;

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Self::Output, StoreError> {
        let CreateTenant {
            tenant,
            actor,
            keyed,
        } = self;
        w.keyed(keyed, |w| create(w, &tenant, &actor))
    }
}

fn create<D: Sql>(
    w: &mut WriterState<D>,
    new: &NewTenant,
    actor: &Actor,
) -> Result<Created, StoreError> {
    let now = w.now();
    let id = TenantId::from_ulid(w.next_ulid(now));
    let token = TenantToken::mint(&id);
    // A clash on the active tenants' names comes back as `TenantNameTaken`.
    w.db().send(
        "INSERT INTO tenants (id, name, state, opening_deposit_atomic, token_hash, \
         created_at, tombstoned_at) VALUES (?1, ?2, 'active', ?3, ?4, ?5, NULL)",
        &[
            id.as_str().into(),
            new.name.as_str().into(),
            new.opening_deposit.into(),
            Param::Bytes(&token.hash()[..]),
            Param::Text(&now.to_string()),
        ],
    )?;
    let mut budget = Budget {
        id: id.default_budget(),
        tenant_id: id.clone(),
        name: Name::parse(DEFAULT_BUDGET_NAME).expect("a valid name"),
        unit: Unit::atomic(),
        state: BudgetState::Open,
        created_at: now,
        opening_deposit: new.opening_deposit,
        figures: Figures::opening(new.opening_deposit),
        policy: new.policy.clone(),
        current: None,
        thresholds: new.thresholds.clone(),
        parent_id: None,
    };
    w.insert_budget(&mut budget)?;
    w.hold_new_tenant(&id);
    let event = AuditEvent::TenantCreated {
        id: id.clone(),
        name: new.name.clone(),
        opening_deposit: new.opening_deposit,
        policy: new.policy.clone(),
        thresholds: new.thresholds.clone(),
    };
    w.record(now, actor, &event)?;
    w.counts().tenant_created();
    let tenant = Tenant {
        id,
        name: new.name.clone(),
        created_at: now,
        state: TenantState::Active,
        budget,
    };
    w.publish_tenant_created(now, &tenant)?;
    #[cfg(test)]
    inject_faults(w, new.name.as_str());
    Ok(Created { tenant, token })
}

/// The test builds' fault hooks, keyed by the name of a tenant being created, run once its
/// row and its event are written: a panic (the savepoint must take both back), or a failure
/// of the batch whose `ROLLBACK` then fails too.
#[cfg(test)]
fn inject_faults<D: Sql>(w: &mut WriterState<D>, name: &str) {
    if name == crate::store::FAULT_PANIC_NAME {
        panic!("an injected fault");
    }
    if name == crate::store::FAULT_ROLLBACK_NAME {
        w.fail_next_rollback();
        w.poison(StoreError::Unavailable("an injected failure".into()));
    }
}
