//! What is read of events: one, and pages of every tenant's or of one tenant's.

use super::page;
use super::tenants;
use crate::domain::{Event, EventId, TenantId};
use crate::store::rows::{self, EVENT_COLUMNS};
use crate::store::sql::Sql;
use crate::store::{ListQuery, Page, StoreError};

/// A page of events, of every tenant or of the query's `tenant_id`, with its type (`state`)
/// and `created_after` filters.
pub(crate) fn list_events(db: &mut impl Sql, query: &ListQuery) -> Result<Page<Event>, StoreError> {
    let select = format!("SELECT {EVENT_COLUMNS} FROM events");
    let filters: Vec<(&str, &str)> = query
        .tenant_id
        .as_deref()
        .map(|tenant| ("tenant_id", tenant))
        .into_iter()
        .collect();
    page::page(db, &select, "id", "type", &filters, query, |row| {
        rows::event(row)
    })
}

/// A page of the tenant's events: `tenant_not_found` for an unknown tenant.
pub(crate) fn list_tenant_events<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Event>, StoreError> {
    db.in_snapshot(|db| {
        if !tenants::tenant_exists(db, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = format!("SELECT {EVENT_COLUMNS} FROM events");
        let filters = [("tenant_id", tenant.as_str())];
        page::page(db, &select, "id", "type", &filters, query, |row| {
            rows::event(row)
        })
    })
}

/// One event: `event_not_found` for none (or one erased past its retention).
pub(crate) fn event(db: &mut impl Sql, id: Option<&EventId>) -> Result<Event, StoreError> {
    let Some(id) = id else {
        return Err(StoreError::EventNotFound);
    };
    db.query_opt(
        &format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = CAST(?1 AS TEXT)"),
        &[id.as_str().into()],
        |row| rows::event(row),
    )?
    .ok_or(StoreError::EventNotFound)
}
