//! What is read of tenants: one with its default budget, whether it exists or is active, what
//! its token must match, and a page of them.

use std::collections::HashMap;

use super::page;
use crate::domain::{Tenant, TenantId, TenantState};
use crate::store::rows::{self, budget_renewal_join, tenant_columns};
use crate::store::sql::{Row, RowError, Sql, text};
use crate::store::{Credential, ListQuery, Page, StoreError};

/// Tenants joined to their default budgets (and the budgets' renewals).
pub(super) const TENANTS_JOINED: &str = concat!(
    "tenants t JOIN budgets b ON b.tenant_id = t.id AND b.id = 'bud_' || substr(t.id, 5)",
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
        |row| credential_at(row, 0),
    )
}

/// The tenants of a list and what their tokens are checked against (PostgreSQL only).
pub(crate) const CREDENTIALS: &str = concat!(
    "SELECT t.id, t.token_hash, t.state FROM ",
    super::listed_ids!("?1"),
    " CROSS JOIN LATERAL (SELECT id, token_hash, state FROM tenants WHERE id = w.id LIMIT 1) t"
);

/// What the tokens of tenants `ids` are checked against, in their order (`None` for no such
/// tenant): on PostgreSQL in one statement, so that the checks waiting together take one
/// round trip; on SQLite, whose reads are in the process, one query each.
pub(crate) fn credentials<D: Sql>(
    db: &mut D,
    ids: &[TenantId],
) -> Result<Vec<Option<Credential>>, StoreError> {
    // A tenant id is a ULID after its prefix: it never holds the list's comma.
    if !(D::SHARED && ids.len() > 1) {
        return ids.iter().map(|id| credential(db, id)).collect();
    }
    let list = ids
        .iter()
        .map(TenantId::as_str)
        .collect::<Vec<_>>()
        .join(",");
    let found: HashMap<String, Credential> = db
        .query(CREDENTIALS, &[list.as_str().into()], |row| {
            Ok((text(row, 0)?.into_owned(), credential_at(row, 1)?))
        })?
        .into_iter()
        .collect();
    Ok(ids
        .iter()
        .map(|id| found.get(id.as_str()).copied())
        .collect())
}

/// The credential in columns `i` (the token's hash) and `i + 1` (the tenant's state).
pub(crate) fn credential_at(row: &Row<'_>, i: usize) -> Result<Credential, RowError> {
    let hash = row
        .blob(i)?
        .ok_or_else(|| row.corrupt(i, "a NULL token hash".into()))?;
    let token_hash: [u8; 32] = hash
        .as_ref()
        .try_into()
        .map_err(|_| row.corrupt(i, "a token hash that is not 32 bytes".into()))?;
    Ok(Credential {
        token_hash,
        active: text(row, i + 1)? == TenantState::Active.name(),
    })
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
