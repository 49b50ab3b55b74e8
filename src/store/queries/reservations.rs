//! What is read of reservations: one (to show, or to settle), those of a budget that are
//! active or due, and a page of them.

use super::page;
use super::tenants;
use crate::domain::{Budget, BudgetId, Reservation, ReservationId, TenantId, TenantState};
use crate::store::rows::{
    self, RESERVATION_COLUMNS, RESERVATION_WIDTH, budget_columns, budget_renewal_join,
    reservation_columns,
};
use crate::store::sql::{Sql, text};
use crate::store::{ListQuery, Page, StoreError};

/// The reservations whose ids `?1` lists (joined by commas), each looked up by its key
/// ([`listed_ids`](super::listed_ids)): what a batch of settlements reads ahead on PostgreSQL,
/// with their budgets ([`super::budgets::BUDGETS_TO_WRITE`]).
pub(crate) const RESERVATIONS_TO_SETTLE: &str = concat!(
    "SELECT ",
    reservation_columns!("r"),
    " FROM ",
    super::listed_ids!("?1"),
    " CROSS JOIN LATERAL (SELECT * FROM reservations WHERE id = w.id LIMIT 1) r"
);

/// The reservation `id` of tenant `tenant`, as [`budget`] finds a budget.
pub(crate) fn reservation(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&ReservationId>,
) -> Result<Reservation, StoreError> {
    super::of_tenant(
        db,
        tenant,
        id.map(ReservationId::as_str),
        StoreError::ReservationNotFound,
        concat!(
            "SELECT ",
            reservation_columns!("reservations"),
            " FROM reservations WHERE id = ?1 AND tenant_id = ?2"
        ),
        |row| rows::reservation(row),
    )
}

/// The reservation `id` of tenant `tenant`, as [`reservation`] finds it, whether the tenant
/// is active, and the reservation's budget: what a settlement reads first, in one statement.
pub(crate) fn reservation_to_settle(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&ReservationId>,
) -> Result<(Reservation, bool, Budget), StoreError> {
    super::of_tenant(
        db,
        tenant,
        id.map(ReservationId::as_str),
        StoreError::ReservationNotFound,
        concat!(
            "SELECT ",
            reservation_columns!("r"),
            ", t.state, ",
            budget_columns!("b"),
            " FROM reservations r JOIN tenants t ON t.id = r.tenant_id \
             JOIN budgets b ON b.tenant_id = r.tenant_id AND b.id = r.budget_id",
            budget_renewal_join!("b"),
            " WHERE r.id = CAST(?1 AS TEXT) AND r.tenant_id = CAST(?2 AS TEXT)"
        ),
        |row| {
            Ok((
                rows::reservation(row)?,
                text(row, RESERVATION_WIDTH)? == TenantState::Active.name(),
                rows::budget(row, RESERVATION_WIDTH + 1)?,
            ))
        },
    )
}

/// Every active reservation of `budget`.
pub(crate) fn active_in_budget(
    db: &mut impl Sql,
    budget: &BudgetId,
) -> Result<Vec<Reservation>, StoreError> {
    db.query(
        &format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations \
             WHERE budget_id = CAST(?1 AS TEXT) AND state = 'active' ORDER BY expires_at, id"
        ),
        &[budget.as_str().into()],
        |row| rows::reservation(row),
    )
}

/// A page of the tenant's reservations.
pub(crate) fn list_reservations<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Reservation>, StoreError> {
    db.in_snapshot(|db| {
        if !tenants::tenant_exists(db, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = format!("SELECT {RESERVATION_COLUMNS} FROM reservations");
        let mut filters = vec![("tenant_id", tenant.as_str())];
        if let Some(budget) = &query.budget_id {
            filters.push(("budget_id", budget));
        }
        page::page(db, &select, "id", "state", &filters, query, |row| {
            rows::reservation(row)
        })
    })
}
