//! Queries shared by the writer, the readers and the credential check of every backend, each
//! returning domain values.
//!
//! A row that breaks a rule of its type (a bad amount, an unknown state) is an internal error
//! naming what is wrong: a bug, or a row edited behind the service's back.
//!
//! Some bound values are written `CAST(?1 AS TEXT)` rather than `?1`. SQLite's planner takes
//! a bare parameter compared for equality in a join, or beside an `ORDER BY` it can satisfy
//! from an index (and a bare `LIMIT ?`), as a hint that the value may change the plan: it then
//! prepares the statement again each time a new value is bound, which costs more than the
//! query. The cast leaves the plan and the result as they were (every such column is text)
//! and the statement prepared once; test builds check that every statement is
//! (`sqlite::sql`). PostgreSQL reads the cast as the parameter's type.
//!
//! | file | what it reads |
//! |---|---|
//! | [`tenants`] | tenants, their tokens |
//! | [`budgets`] | budgets, their entries and statements |
//! | [`reservations`] | reservations |
//! | [`due`] | the expiries and boundaries due, the latest ids |
//! | [`levels`] | SQLite's entries on the levels above a spend, and their sweep |
//! | [`events`] | events |
//! | [`webhooks`] | webhook endpoints and deliveries |
//! | [`page`] | one page of any list |
//! | [`reads`] | the reader threads' reads, each one of the above |

/// The ids that parameter `$p` lists, joined by commas, as the rows of `w(id)` (PostgreSQL
/// only). A statement finds each one's row with a `LATERAL` subquery that has a `LIMIT`:
/// such a subquery is planned on its own, as the inner side of a nested loop, so each id is
/// looked up by its key whatever the tables' statistics say. Written as `id = ANY(…)` or as
/// a join, the plan a writer's connection prepared early and kept read whole tables, several
/// a batch: on 1,000 tenants and budgets, where a hash join or a scan is the cheaper plan on
/// paper, those scans took more of PostgreSQL's time than any other statement.
macro_rules! listed_ids {
    ($p:literal) => {
        concat!(
            "unnest(string_to_array(CAST(",
            $p,
            " AS TEXT), ',')) AS w(id)"
        )
    };
}
pub(crate) use listed_ids;

pub(crate) mod budgets;
pub(crate) mod due;
mod events;
pub(crate) mod levels;
mod page;
pub(crate) mod reads;
pub(crate) mod reservations;
pub(crate) mod tenants;
pub(crate) mod webhooks;

use crate::domain::TenantId;
use crate::store::StoreError;
use crate::store::sql::{Row, RowError, Sql};

/// The row of tenant `tenant` that `sql` finds by `id` (`?1`, the tenant's id `?2`), as
/// `read` reads it; for none (or no id), `missing` if the tenant exists, else
/// `tenant_not_found`.
fn of_tenant<T>(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&str>,
    missing: StoreError,
    sql: &str,
    read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
) -> Result<T, StoreError> {
    if let Some(id) = id
        && let Some(found) = db.query_opt(sql, &[id.into(), tenant.as_str().into()], read)?
    {
        return Ok(found);
    }
    Err(not_found(db, tenant, missing)?)
}

/// `missing` if the tenant exists, else `tenant_not_found`.
fn not_found(
    db: &mut impl Sql,
    tenant: &TenantId,
    missing: StoreError,
) -> Result<StoreError, StoreError> {
    Ok(if tenants::tenant_exists(db, tenant)? {
        missing
    } else {
        StoreError::TenantNotFound
    })
}
