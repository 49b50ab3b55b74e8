//! `DELETE /v1/tenants/<id>`: every open budget closed (its holds released), the token
//! revoked and the name freed. A tombstoned tenant is answered as it is.

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{Tenant, TenantId, TenantState};
use crate::store::sql::{Param, Sql};
use crate::store::write::WriteOp;
use crate::store::write::state::WriterState;
use crate::store::{StoreError, queries};

/// A tenant's tombstone.
#[derive(Debug, Clone)]
pub(crate) struct TombstoneTenant {
    /// Which tenant.
    pub(crate) id: TenantId,
    /// Who asks.
    pub(crate) actor: Actor,
}

impl WriteOp for TombstoneTenant {
    type Output = Tenant;

    fn tenant(&self) -> Option<&TenantId> {
        Some(&self.id)
    }

    fn run<D: Sql>(self, w: &mut WriterState<D>) -> Result<Tenant, StoreError> {
        let TombstoneTenant { id, actor } = self;
        w.lock_tenant(&id)?;
        let tenant = queries::tenants::tenant(w.db(), &id)?.ok_or(StoreError::TenantNotFound)?;
        if tenant.state != TenantState::Active {
            return Ok(tenant);
        }
        let now = w.now();
        // The deepest first: a budget's holds return on its ancestors while they are open.
        for budget in queries::budgets::closing_order(w.db(), &id)? {
            let mut budget = w.stored_budget(&id, Some(&budget))?;
            w.catch_up_budget(&mut budget, now)?;
            w.close(&mut budget, now)?;
        }
        let state = TenantState::Tombstoned { at: now };
        w.db().send(
            "UPDATE tenants SET state = ?2, tombstoned_at = ?3 WHERE id = ?1",
            &[
                id.as_str().into(),
                state.name().into(),
                Param::Text(&now.to_string()),
            ],
        )?;
        w.record(now, &actor, &rules::tombstone(&id))?;
        // Its token is revoked for the batch's later commands too.
        w.forget_credential(&id);
        w.counts().tenant_moved(&state);
        let tenant = queries::tenants::tenant(w.db(), &id)?
            .ok_or_else(|| StoreError::Internal(format!("tenant {id} vanished")))?;
        w.publish_tenant_tombstoned(now, &tenant)?;
        Ok(tenant)
    }
}
