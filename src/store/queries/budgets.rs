//! What is read of budgets and their ledgers: one budget (to show, or to write), a tenant's
//! open budgets, pages of budgets, entries and period statements, and the figures as bound
//! parameters.

use super::levels;
use super::page;
use super::tenants;
use crate::domain::{
    Budget, BudgetId, EntryId, Figures, LedgerEntry, Statement, TenantId, TenantState,
};
use crate::store::rows::{
    self, Columns, ENTRY_COLUMNS, PERIOD_COLUMNS, budget_columns, budget_renewal_join,
};
use crate::store::sql::{Param, Row, RowError, Sql, text};
use crate::store::{ListQuery, Page, StoreError};

/// The budget `id` of tenant `tenant`: `budget_not_found` for none (or an id that is not one),
/// `tenant_not_found` when the tenant itself is unknown.
pub(crate) fn budget(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&BudgetId>,
) -> Result<Budget, StoreError> {
    super::of_tenant(
        db,
        tenant,
        id.map(BudgetId::as_str),
        StoreError::BudgetNotFound,
        concat!(
            "SELECT ",
            budget_columns!("budgets"),
            " FROM budgets",
            budget_renewal_join!("budgets"),
            " WHERE budgets.id = CAST(?1 AS TEXT) AND budgets.tenant_id = CAST(?2 AS TEXT)"
        ),
        |row| rows::budget(row, 0),
    )
}

/// The budget `id` of tenant `tenant`, as [`budget`] finds it, and whether the tenant is
/// active: what a write on a budget reads first, in one statement.
pub(crate) fn budget_to_write(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&BudgetId>,
) -> Result<(Budget, bool), StoreError> {
    super::of_tenant(
        db,
        tenant,
        id.map(BudgetId::as_str),
        StoreError::BudgetNotFound,
        concat!(
            "SELECT t.state, ",
            budget_columns!("b"),
            " FROM budgets b JOIN tenants t ON t.id = b.tenant_id",
            budget_renewal_join!("b"),
            " WHERE b.id = CAST(?1 AS TEXT) AND b.tenant_id = CAST(?2 AS TEXT)"
        ),
        budget_to_write_row,
    )
}

/// The budgets whose ids `?1` lists (joined by commas), those of the reservations `?2` lists,
/// and each one's ancestors (up to three levels,
/// [`ANCESTORS_MAX`](crate::domain::ANCESTORS_MAX)), each as [`budget_to_write`] reads one
/// ([`budget_to_write_row`]): what a batch reads ahead on PostgreSQL, whose SQL this is, so
/// that a spend's every level is read in the round trip that begins the batch. Each is
/// looked up by its key ([`listed_ids`](super::listed_ids)); a budget listed twice, or above
/// two listed, comes once for each.
pub(crate) const BUDGETS_TO_WRITE: &str = concat!(
    "WITH RECURSIVE up (id, depth) AS (SELECT w.id COLLATE \"C\", 0 FROM ",
    listed_ids!("?1"),
    " UNION ALL SELECT r.budget_id COLLATE \"C\", 0 FROM ",
    listed_ids!("?2"),
    " CROSS JOIN LATERAL (SELECT budget_id FROM reservations WHERE id = w.id LIMIT 1) r",
    " UNION ALL SELECT p.parent_id, up.depth + 1 FROM up",
    " CROSS JOIN LATERAL (SELECT parent_id FROM budgets WHERE id = up.id LIMIT 1) p",
    " WHERE p.parent_id IS NOT NULL AND up.depth < 3)",
    " SELECT t.state, ",
    budget_columns!("b"),
    " FROM up",
    " CROSS JOIN LATERAL (SELECT * FROM budgets WHERE id = up.id LIMIT 1) b",
    " CROSS JOIN LATERAL (SELECT state FROM tenants WHERE id = b.tenant_id LIMIT 1) t",
    " LEFT JOIN LATERAL (SELECT * FROM budget_renewals WHERE budget_id = b.id LIMIT 1) br",
    " ON true"
);

/// A row of [`budget_to_write`] or [`BUDGETS_TO_WRITE`]: the budget, and whether its tenant
/// is active.
pub(crate) fn budget_to_write_row(row: &Row<'_>) -> Result<(Budget, bool), RowError> {
    Ok((
        rows::budget(row, 1)?,
        text(row, 0)? == TenantState::Active.name(),
    ))
}

/// The ids of the tenant's open budgets in the order a tombstone closes them: the deepest
/// first, then by id (the audit replay closes them in this order too). The parent of an open
/// budget is open.
pub(crate) fn closing_order(
    db: &mut impl Sql,
    tenant: &TenantId,
) -> Result<Vec<BudgetId>, StoreError> {
    let open = db.query(
        "SELECT id, parent_id FROM budgets \
         WHERE tenant_id = CAST(?1 AS TEXT) AND state = 'open' ORDER BY id",
        &[tenant.as_str().into()],
        |row| {
            let parent = row
                .column(1)?
                .map(|raw| {
                    BudgetId::parse(&raw)
                        .ok_or_else(|| row.corrupt(1, format!("a bad budget id {raw:?}")))
                })
                .transpose()?;
            let id = Columns::new(row, 0).parse(0, "budget id", BudgetId::parse)?;
            Ok((id, parent))
        },
    )?;
    let parents: std::collections::HashMap<&BudgetId, &BudgetId> = open
        .iter()
        .filter_map(|(id, parent)| Some((id, parent.as_ref()?)))
        .collect();
    let depth = |id: &BudgetId| {
        let mut at = id;
        let mut depth = 0;
        while let Some(parent) = parents.get(at).copied() {
            depth += 1;
            at = parent;
            if depth > crate::domain::ANCESTORS_MAX {
                break;
            }
        }
        depth
    };
    let mut ordered: Vec<(usize, &BudgetId)> = open.iter().map(|(id, _)| (depth(id), id)).collect();
    ordered.sort_by(|(da, a), (db, b)| db.cmp(da).then(a.cmp(b)));
    Ok(ordered.into_iter().map(|(_, id)| id.clone()).collect())
}

/// Whether budget `id` has a child that is open.
pub(crate) fn has_open_children(db: &mut impl Sql, id: &BudgetId) -> Result<bool, StoreError> {
    Ok(db
        .query_opt(
            "SELECT id FROM budgets WHERE parent_id = CAST(?1 AS TEXT) AND state = 'open' LIMIT 1",
            &[id.as_str().into()],
            |_| Ok(()),
        )?
        .is_some())
}

/// The figures of `f` as the four stored columns' parameters, in order.
pub(crate) fn figure_params(f: &Figures) -> [Param<'static>; 4] {
    [
        Param::Amount(f.credited),
        Param::Amount(f.debited),
        Param::Amount(f.spent),
        Param::Amount(f.reserved),
    ]
}

/// A page of the tenant's budgets; `tenant_not_found` for an unknown tenant, read in the same
/// snapshot as the page.
pub(crate) fn list_budgets<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Budget>, StoreError> {
    db.in_snapshot(|db| {
        if !tenants::tenant_exists(db, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = concat!(
            "SELECT ",
            budget_columns!("budgets"),
            " FROM budgets",
            budget_renewal_join!("budgets")
        );
        let mut filters = vec![("budgets.tenant_id", tenant.as_str())];
        if let Some(parent) = &query.parent_id {
            filters.push(("budgets.parent_id", parent));
        }
        page::page(
            db,
            select,
            "budgets.id",
            "budgets.state",
            &filters,
            query,
            |row| rows::budget(row, 0),
        )
    })
}

/// A page of a budget's ledger entries: on SQLite, its own and its levels' merged
/// ([`levels`]).
pub(crate) fn list_entries<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    budget_id: Option<&BudgetId>,
    query: &ListQuery,
) -> Result<Page<LedgerEntry>, StoreError> {
    db.in_snapshot(|db| {
        let budget = budget(db, tenant, budget_id)?;
        if !D::SHARED {
            return levels::page(db, &budget.id, query);
        }
        let select = format!("SELECT {ENTRY_COLUMNS} FROM ledger_entries");
        let filters = [("budget_id", budget.id.as_str())];
        page::page(db, &select, "id", "kind", &filters, query, |row| {
            rows::entry(row)
        })
    })
}

/// One ledger entry of a budget: `entry_not_found` for none (or another budget's).
pub(crate) fn entry<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    budget_id: Option<&BudgetId>,
    id: Option<&EntryId>,
) -> Result<LedgerEntry, StoreError> {
    db.in_snapshot(|db| {
        let budget = budget(db, tenant, budget_id)?;
        let Some(id) = id else {
            return Err(StoreError::EntryNotFound);
        };
        db.query_opt(
            &format!(
                "SELECT {ENTRY_COLUMNS} FROM ledger_entries \
                 WHERE id = CAST(?1 AS TEXT) AND budget_id = CAST(?2 AS TEXT)"
            ),
            &[id.as_str().into(), budget.id.as_str().into()],
            |row| rows::entry(row),
        )?
        .ok_or(StoreError::EntryNotFound)
    })
}

/// A page of a budget's period statements, with the budget (a current period's totals are
/// the budget's less those it began with).
pub(crate) fn list_periods<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    budget_id: Option<&BudgetId>,
    query: &ListQuery,
) -> Result<(Budget, Page<Statement>), StoreError> {
    db.in_snapshot(|db| {
        let budget = budget(db, tenant, budget_id)?;
        let select = format!("SELECT {PERIOD_COLUMNS} FROM periods");
        let filters = [("budget_id", budget.id.as_str())];
        let page = page::page(db, &select, "id", "state", &filters, query, |row| {
            rows::statement(row)
        })?;
        Ok((budget, page))
    })
}
