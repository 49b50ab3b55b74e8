//! What is read of tenants: one with its default budget, whether it exists or is active, what
//! its token must match, and a page of them.

use super::page;
use crate::domain::{Tenant, TenantId, TenantState};
use crate::store::rows::{self, budget_renewal_join, tenant_columns};
use crate::store::sql::{Sql, text};
use crate::store::{Credential, ListQuery, Page, StoreError};

/// Tenants joined to their default budgets (and the budgets' renewals).
pub(super) const TENANTS_JOINED: &str = concat!(
    "tenants t JOIN budgets b ON b.id = 'bud_' || substr(t.id, 5)",
    budget_renewal_join!("b")
);

/// The tenant with this id, if there is one, with its default budget.
pub(crate) fn tenant(db: &mut impl Sql, id: &TenantId) -> Result<Option<Tenant>, StoreError> {
    db.query_opt(
        &format!(
            "SELECT {} FROM {TENANTS_JOINED} WHERE t.id = CAST(?1 AS TEXT)",
            tenant_columns!()
        ),
        &[id.as_str().into()],
        |row| rows::tenant(row),
    )
}

/// Whether the tenant is active; `None` for no such tenant.
pub(crate) fn tenant_active(db: &mut impl Sql, id: &TenantId) -> Result<Option<bool>, StoreError> {
    db.query_opt(
        "SELECT state FROM tenants WHERE id = ?1",
        &[id.as_str().into()],
        |row| Ok(text(row, 0)? == TenantState::Active.name()),
    )
}

/// Whether a tenant has this id.
pub(crate) fn tenant_exists(db: &mut impl Sql, id: &TenantId) -> Result<bool, StoreError> {
    Ok(db
        .query_opt(
            "SELECT 1 FROM tenants WHERE id = ?1",
            &[id.as_str().into()],
            |_| Ok(()),
        )?
        .is_some())
}

/// What a token of tenant `id` is checked against, if the tenant exists.
pub(crate) fn credential(
    db: &mut impl Sql,
    id: &TenantId,
) -> Result<Option<Credential>, StoreError> {
    db.query_opt(
        "SELECT token_hash, state FROM tenants WHERE id = ?1",
        &[id.as_str().into()],
        |row| {
            let hash = row
                .blob(0)?
                .ok_or_else(|| row.corrupt(0, "a NULL token hash".into()))?;
            let token_hash: [u8; 32] = hash
                .as_ref()
                .try_into()
                .map_err(|_| row.corrupt(0, format!("tenant {id} has a bad token hash")))?;
            Ok(Credential {
                token_hash,
                active: text(row, 1)? == TenantState::Active.name(),
            })
        },
    )
}

/// A page of tenants.
pub(crate) fn list_tenants(
    db: &mut impl Sql,
    query: &ListQuery,
) -> Result<Page<Tenant>, StoreError> {
    let select = format!("SELECT {} FROM {TENANTS_JOINED}", tenant_columns!());
    page::page(db, &select, "t.id", "t.state", &[], query, |row| {
        rows::tenant(row)
    })
}
