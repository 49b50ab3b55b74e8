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

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use super::rows::{
    self, Columns, DELIVERY_COLUMNS, ENDPOINT_COLUMNS, ENTRY_COLUMNS, EVENT_COLUMNS,
    PERIOD_COLUMNS, RESERVATION_COLUMNS, RESERVATION_WIDTH, budget_columns, budget_renewal_join,
    reservation_columns, tenant_columns,
};
use super::sql::{Param, Row, RowError, Sql, text};
use super::{Credential, ListQuery, Page, StoreError};
use crate::domain::{
    Budget, BudgetId, Delivery, DeliveryId, Endpoint, EndpointId, EntryId, Event, EventId, Figures,
    LedgerEntry, Reservation, ReservationId, Statement, Tenant, TenantId, TenantState, Timestamp,
};

/// Tenants joined to their default budgets (and the budgets' renewals).
const TENANTS_JOINED: &str = concat!(
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

/// The budget `id` of tenant `tenant`: `budget_not_found` for none (or an id that is not one),
/// `tenant_not_found` when the tenant itself is unknown.
pub(crate) fn budget(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&BudgetId>,
) -> Result<Budget, StoreError> {
    of_tenant(
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
    of_tenant(
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
        |row| {
            Ok((
                rows::budget(row, 1)?,
                text(row, 0)? == TenantState::Active.name(),
            ))
        },
    )
}

/// The reservation `id` of tenant `tenant`, as [`budget`] finds a budget.
pub(crate) fn reservation(
    db: &mut impl Sql,
    tenant: &TenantId,
    id: Option<&ReservationId>,
) -> Result<Reservation, StoreError> {
    of_tenant(
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
    of_tenant(
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
             JOIN budgets b ON b.id = r.budget_id",
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
    Ok(if tenant_exists(db, tenant)? {
        missing
    } else {
        StoreError::TenantNotFound
    })
}

/// The active reservations of `budget` whose time is up at `now`, soonest first.
pub(crate) fn due_in_budget(
    db: &mut impl Sql,
    budget: &BudgetId,
    now: Timestamp,
) -> Result<Vec<Reservation>, StoreError> {
    db.query(
        &format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations \
             WHERE budget_id = CAST(?1 AS TEXT) AND state = 'active' AND expires_at <= ?2 \
             ORDER BY expires_at, id"
        ),
        &[budget.as_str().into(), Param::Text(&now.to_string())],
        |row| rows::reservation(row),
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

/// Up to `limit` active reservations, of any budget, whose time is up at `now`, soonest first.
pub(crate) fn due(
    db: &mut impl Sql,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Reservation>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.query(
        &format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations \
             WHERE state = 'active' AND expires_at <= ?1 ORDER BY expires_at \
             LIMIT CAST(?2 AS BIGINT)"
        ),
        &[Param::Text(&now.to_string()), limit.into()],
        |row| rows::reservation(row),
    )
}

/// When the soonest active reservation expires, if any is active.
pub(crate) fn next_expiry(db: &mut impl Sql) -> Result<Option<Timestamp>, StoreError> {
    let soonest = db.query_opt(
        "SELECT min(expires_at) FROM reservations WHERE state = 'active'",
        &[],
        |row| {
            row.column(0)?
                .map(|raw| {
                    Timestamp::parse(&raw)
                        .ok_or_else(|| row.corrupt(0, format!("a bad expires_at {raw:?}")))
                })
                .transpose()
        },
    )?;
    Ok(soonest.flatten())
}

/// Up to `limit` open budgets whose period ended by `now`, soonest first: their tenants and
/// ids.
pub(crate) fn due_boundaries(
    db: &mut impl Sql,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<(TenantId, BudgetId)>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.query(
        "SELECT b.tenant_id, b.id FROM budget_renewals r JOIN budgets b ON b.id = r.budget_id \
         WHERE r.period_ends_at IS NOT NULL AND r.period_ends_at <= ?1 \
         ORDER BY r.period_ends_at LIMIT CAST(?2 AS BIGINT)",
        &[Param::Text(&now.to_string()), limit.into()],
        |row| {
            let c = Columns::new(row, 0);
            Ok((
                c.parse(0, "tenant id", TenantId::parse)?,
                c.parse(1, "budget id", BudgetId::parse)?,
            ))
        },
    )
}

/// When the soonest current period of an open budget ends, if any has one.
pub(crate) fn next_boundary(db: &mut impl Sql) -> Result<Option<Timestamp>, StoreError> {
    let soonest = db.query_opt(
        "SELECT min(period_ends_at) FROM budget_renewals WHERE period_ends_at IS NOT NULL",
        &[],
        |row| {
            row.column(0)?
                .map(|raw| {
                    Timestamp::parse(&raw)
                        .ok_or_else(|| row.corrupt(0, format!("a bad period_ends_at {raw:?}")))
                })
                .transpose()
        },
    )?;
    Ok(soonest.flatten())
}

/// The ids of the tenant's open budgets.
pub(crate) fn open_budgets(
    db: &mut impl Sql,
    tenant: &TenantId,
) -> Result<Vec<BudgetId>, StoreError> {
    db.query(
        "SELECT id FROM budgets WHERE tenant_id = CAST(?1 AS TEXT) AND state = 'open' ORDER BY id",
        &[tenant.as_str().into()],
        |row| Columns::new(row, 0).parse(0, "budget id", BudgetId::parse),
    )
}

/// The greatest ULID of any id stored, so that new ids sort after every one of them.
pub(crate) fn latest_ulid(db: &mut impl Sql) -> Result<Option<ulid::Ulid>, StoreError> {
    Ok(latest_and_soonest(db)?.ulid)
}

/// What a writer must know after another wrote, in one statement: the greatest ULID of any
/// id stored, when the soonest active reservation expires, and when the soonest period ends.
pub(crate) struct Latest {
    /// The greatest ULID of any id stored.
    pub(crate) ulid: Option<ulid::Ulid>,
    /// The soonest expiry of an active reservation.
    pub(crate) expiry: Option<Timestamp>,
    /// The soonest end of an open budget's period.
    pub(crate) boundary: Option<Timestamp>,
}

/// See [`Latest`].
pub(crate) fn latest_and_soonest(db: &mut impl Sql) -> Result<Latest, StoreError> {
    let found = db.query_opt(
        "SELECT (SELECT max(id) FROM tenants), (SELECT max(id) FROM budgets), \
         (SELECT max(id) FROM reservations), (SELECT max(id) FROM ledger_entries), \
         (SELECT max(id) FROM periods), (SELECT max(id) FROM events), \
         (SELECT min(expires_at) FROM reservations WHERE state = 'active'), \
         (SELECT min(period_ends_at) FROM budget_renewals WHERE period_ends_at IS NOT NULL)",
        &[],
        |row| {
            let mut latest = None;
            for i in 0..6 {
                let ulid = row
                    .column(i)?
                    .as_deref()
                    .and_then(|id| id.get(4..))
                    .and_then(|text| ulid::Ulid::from_string(text).ok());
                latest = latest.max(ulid);
            }
            let time = |i: usize| {
                row.column(i)?
                    .map(|raw| {
                        Timestamp::parse(&raw)
                            .ok_or_else(|| row.corrupt(i, format!("a bad instant {raw:?}")))
                    })
                    .transpose()
            };
            Ok(Latest {
                ulid: latest,
                expiry: time(6)?,
                boundary: time(7)?,
            })
        },
    )?;
    Ok(found.unwrap_or(Latest {
        ulid: None,
        expiry: None,
        boundary: None,
    }))
}

/// One page of a list: `WHERE <filters> AND id > after ORDER BY id LIMIT limit + 1`, in one
/// statement, so the page is one snapshot.
///
/// A `state` filter (`state_column`, if the query has one) is written into the SQL as a
/// literal, so that the database can use the partial indexes on one state (the query's states
/// come from a fixed list, never from the client's text).
fn page<T>(
    db: &mut impl Sql,
    select: &str,
    id_column: &str,
    state_column: &str,
    filters: &[(&str, &str)],
    query: &ListQuery,
    read: impl FnMut(&super::sql::Row<'_>) -> Result<T, RowError>,
) -> Result<Page<T>, StoreError> {
    let mut sql = select.to_owned();
    let mut params: Vec<Param<'_>> = Vec::with_capacity(filters.len() + 2);
    let mut clause = " WHERE";
    if let Some(state) = query.state {
        debug_assert!(
            state
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_'),
            "{state}"
        );
        let _ = write!(sql, "{clause} {state_column} = '{state}'");
        clause = " AND";
    }
    // Only events have `created_at` among the lists' filters; text order is time order.
    let created_after = query.created_after.map(|at| at.to_string());
    // Only tenants have a name among the lists' filters. Both sides in lower case: SQLite's
    // `lower` and PostgreSQL's under `COLLATE "C"` fold ASCII letters only, so both backends
    // match alike.
    let pattern = query.name_contains.as_deref().map(like_pattern);
    // Each condition on a text parameter: left side, operator, what follows the parameter.
    let texts = filters
        .iter()
        .map(|(column, value)| (*column, " = ", " AS TEXT)", *value))
        .chain(
            created_after
                .as_deref()
                .map(|at| ("created_at", " > ", " AS TEXT)", at)),
        )
        .chain(
            pattern
                .as_deref()
                .map(|pattern| ("lower(t.name)", " LIKE ", " AS TEXT) ESCAPE '\\'", pattern)),
        );
    for (left, operator, after, value) in texts {
        params.push(Param::Text(value));
        let n = params.len();
        let _ = write!(sql, "{clause} {left}{operator}CAST(?{n}{after}");
        clause = " AND";
    }
    let n = params.len();
    let _ = write!(
        sql,
        "{clause} {id} > ?{} ORDER BY {id} LIMIT CAST(?{} AS BIGINT)",
        n + 1,
        n + 2,
        id = id_column,
    );
    params.push(Param::Text(query.after.as_deref().unwrap_or("")));
    params.push(Param::Int(
        i64::try_from(query.limit).unwrap_or(i64::MAX - 1) + 1,
    ));
    let mut items = db.query(&sql, &params, read)?;
    let has_more = items.len() > query.limit;
    items.truncate(query.limit);
    Ok(Page { items, has_more })
}

/// A `LIKE` pattern that matches any text holding `text`: its `%`, `_` and backslashes escaped.
fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// A page of tenants.
pub(crate) fn list_tenants(
    db: &mut impl Sql,
    query: &ListQuery,
) -> Result<Page<Tenant>, StoreError> {
    let select = format!("SELECT {} FROM {TENANTS_JOINED}", tenant_columns!());
    page(db, &select, "t.id", "t.state", &[], query, |row| {
        rows::tenant(row)
    })
}

/// A page of the tenant's budgets; `tenant_not_found` for an unknown tenant, read in the same
/// snapshot as the page.
pub(crate) fn list_budgets<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Budget>, StoreError> {
    db.in_snapshot(|db| {
        if !tenant_exists(db, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = concat!(
            "SELECT ",
            budget_columns!("budgets"),
            " FROM budgets",
            budget_renewal_join!("budgets")
        );
        let filters = [("budgets.tenant_id", tenant.as_str())];
        page(
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

/// A page of a budget's ledger entries.
pub(crate) fn list_entries<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    budget_id: Option<&BudgetId>,
    query: &ListQuery,
) -> Result<Page<LedgerEntry>, StoreError> {
    db.in_snapshot(|db| {
        let budget = budget(db, tenant, budget_id)?;
        let select = format!("SELECT {ENTRY_COLUMNS} FROM ledger_entries");
        let filters = [("budget_id", budget.id.as_str())];
        page(db, &select, "id", "kind", &filters, query, |row| {
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
        let page = page(db, &select, "id", "state", &filters, query, |row| {
            rows::statement(row)
        })?;
        Ok((budget, page))
    })
}

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
    page(db, &select, "id", "type", &filters, query, |row| {
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
        if !tenant_exists(db, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = format!("SELECT {EVENT_COLUMNS} FROM events");
        let filters = [("tenant_id", tenant.as_str())];
        page(db, &select, "id", "type", &filters, query, |row| {
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

/// The webhook endpoint `id`: `webhook_endpoint_not_found` for none, or a deleted one.
pub(crate) fn endpoint(db: &mut impl Sql, id: Option<&EndpointId>) -> Result<Endpoint, StoreError> {
    let Some(id) = id else {
        return Err(StoreError::EndpointNotFound);
    };
    db.query_opt(
        &format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
             WHERE id = CAST(?1 AS TEXT) AND state <> 'deleted'"
        ),
        &[id.as_str().into()],
        |row| rows::endpoint(row),
    )?
    .ok_or(StoreError::EndpointNotFound)
}

/// A page of webhook endpoints, deleted ones left out.
pub(crate) fn list_endpoints(
    db: &mut impl Sql,
    query: &ListQuery,
) -> Result<Page<Endpoint>, StoreError> {
    let mut items = db.query(
        &format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
             WHERE state <> 'deleted' AND id > ?1 ORDER BY id LIMIT CAST(?2 AS BIGINT)"
        ),
        &[
            Param::Text(query.after.as_deref().unwrap_or("")),
            Param::Int(i64::try_from(query.limit).unwrap_or(i64::MAX - 1) + 1),
        ],
        |row| rows::endpoint(row),
    )?;
    let has_more = items.len() > query.limit;
    items.truncate(query.limit);
    Ok(Page { items, has_more })
}

/// A page of an endpoint's deliveries, with its `state` and `event_id` filters.
pub(crate) fn list_deliveries<D: Sql>(
    db: &mut D,
    endpoint_id: Option<&EndpointId>,
    query: &ListQuery,
) -> Result<Page<Delivery>, StoreError> {
    db.in_snapshot(|db| {
        let endpoint = endpoint(db, endpoint_id)?;
        let select = format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries");
        let mut filters = vec![("endpoint_id", endpoint.id.as_str())];
        if let Some(event) = &query.event_id {
            filters.push(("event_id", event));
        }
        page(db, &select, "id", "state", &filters, query, |row| {
            rows::delivery(row)
        })
    })
}

/// The delivery `id` of `endpoint`: `delivery_not_found` for none (or another endpoint's).
pub(crate) fn delivery(
    db: &mut impl Sql,
    endpoint: &EndpointId,
    id: Option<&DeliveryId>,
) -> Result<Delivery, StoreError> {
    let Some(id) = id else {
        return Err(StoreError::DeliveryNotFound);
    };
    db.query_opt(
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE id = CAST(?1 AS TEXT) AND endpoint_id = CAST(?2 AS TEXT)"
        ),
        &[id.as_str().into(), endpoint.as_str().into()],
        |row| rows::delivery(row),
    )?
    .ok_or(StoreError::DeliveryNotFound)
}

/// An endpoint this instance sends to, with what signs its attempts.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Sending {
    /// Which.
    pub(crate) id: EndpointId,
    /// Where.
    pub(crate) url: String,
    /// The secret's bytes.
    pub(crate) secret: [u8; 32],
    /// The secret it replaced, while that still signs beside it.
    pub(crate) previous: Option<[u8; 32]>,
}

impl std::fmt::Debug for Sending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sending")
            .field("id", &self.id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// What the sender reads at each turn: the enabled endpoints whose lease `owner` holds at
/// `now`, and whether any enabled endpoint is held by no one (its lease is to be taken).
pub(crate) fn sending(
    db: &mut impl Sql,
    owner: &str,
    now: Timestamp,
) -> Result<(Vec<Sending>, bool), StoreError> {
    let now = now.to_string();
    let rows = db.query(
        "SELECT id, url, secret, CASE WHEN previous_until > ?2 THEN previous_secret END, \
         CASE WHEN lease_owner = ?1 AND lease_until > ?2 THEN 'mine' \
              WHEN lease_owner IS NULL OR lease_until <= ?2 THEN 'free' ELSE 'held' END \
         FROM webhook_endpoints WHERE state = 'enabled' ORDER BY id",
        &[owner.into(), Param::Text(&now)],
        |row| {
            let key = |i: usize| -> Result<Option<[u8; 32]>, RowError> {
                match row.blob(i)? {
                    None => Ok(None),
                    Some(bytes) => bytes
                        .as_ref()
                        .try_into()
                        .map(Some)
                        .map_err(|_| row.corrupt(i, "a secret that is not 32 bytes".into())),
                }
            };
            let c = Columns::new(row, 0);
            let sending = Sending {
                id: c.parse(0, "endpoint id", EndpointId::parse)?,
                url: c.text(1)?.into_owned(),
                secret: key(2)?.ok_or_else(|| row.corrupt(2, "no secret".into()))?,
                previous: key(3)?,
            };
            Ok((sending, c.text(4)?.into_owned()))
        },
    )?;
    let free = rows.iter().any(|(_, lease)| lease == "free");
    let mine = rows
        .into_iter()
        .filter(|(_, lease)| lease == "mine")
        .map(|(s, _)| s)
        .collect();
    Ok((mine, free))
}

/// A delivery whose attempt is due, with its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    /// Which delivery.
    pub(crate) delivery: DeliveryId,
    /// Its event, as stored.
    pub(crate) event: Event,
}

/// Up to `limit` deliveries of `endpoint` due at `now`, soonest first, with their events.
pub(crate) fn due_deliveries(
    db: &mut impl Sql,
    endpoint: &EndpointId,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Due>, StoreError> {
    db.query(
        "SELECT d.id, e.id, e.type, e.created_at, e.tenant_id, e.data \
         FROM webhook_deliveries d JOIN events e ON e.id = d.event_id \
         WHERE d.endpoint_id = ?1 AND d.state = 'pending' AND d.next_attempt_at <= ?2 \
         ORDER BY d.next_attempt_at LIMIT CAST(?3 AS BIGINT)",
        &[
            endpoint.as_str().into(),
            Param::Text(&now.to_string()),
            Param::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
        ],
        |row| {
            let c = Columns::new(row, 0);
            Ok(Due {
                delivery: c.parse(0, "delivery id", DeliveryId::parse)?,
                event: rows::event_at(row, 1)?,
            })
        },
    )
}

/// The age of the oldest pending delivery's event at `now`, if any is pending.
pub(crate) fn oldest_pending(
    db: &mut impl Sql,
    now: Timestamp,
) -> Result<Option<Duration>, StoreError> {
    let oldest = db.query_opt(
        "SELECT min(event_id) FROM webhook_deliveries WHERE state = 'pending'",
        &[],
        |row| Ok(row.column(0)?.map(Cow::into_owned)),
    )?;
    Ok(oldest
        .flatten()
        .and_then(|id| EventId::parse(&id))
        .map(|id| {
            let written = id.ulid().timestamp_ms();
            Duration::from_millis(now.unix_ms().saturating_sub(written))
        }))
}

/// A page of the tenant's reservations.
pub(crate) fn list_reservations<D: Sql>(
    db: &mut D,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Reservation>, StoreError> {
    db.in_snapshot(|db| {
        if !tenant_exists(db, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = format!("SELECT {RESERVATION_COLUMNS} FROM reservations");
        let mut filters = vec![("tenant_id", tenant.as_str())];
        if let Some(budget) = &query.budget_id {
            filters.push(("budget_id", budget));
        }
        page(db, &select, "id", "state", &filters, query, |row| {
            rows::reservation(row)
        })
    })
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

/// The figures of `f` as the four stored columns' parameters, in order.
pub(crate) fn figure_params(f: &Figures) -> [Param<'static>; 4] {
    [
        Param::Amount(f.credited),
        Param::Amount(f.debited),
        Param::Amount(f.spent),
        Param::Amount(f.reserved),
    ]
}

/// The reads a reader thread answers, on any backend's connection.
pub(crate) trait Reads: Send {
    /// A tenant, with its default budget.
    fn tenant(&mut self, id: &TenantId) -> Result<Tenant, StoreError>;
    /// A budget of a tenant.
    fn budget(&mut self, tenant: &TenantId, id: Option<&BudgetId>) -> Result<Budget, StoreError>;
    /// A reservation of a tenant.
    fn reservation(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Result<Reservation, StoreError>;
    /// A page of tenants.
    fn list_tenants(&mut self, query: &ListQuery) -> Result<Page<Tenant>, StoreError>;
    /// A page of a tenant's budgets.
    fn list_budgets(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Budget>, StoreError>;
    /// A page of a budget's ledger entries.
    fn list_entries(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<Page<LedgerEntry>, StoreError>;
    /// A page of a tenant's reservations.
    fn list_reservations(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Reservation>, StoreError>;
    /// One ledger entry of a budget.
    fn entry(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        id: Option<&EntryId>,
    ) -> Result<LedgerEntry, StoreError>;
    /// A page of a budget's period statements, with the budget.
    fn list_periods(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<(Budget, Page<Statement>), StoreError>;
    /// A page of events.
    fn list_events(&mut self, query: &ListQuery) -> Result<Page<Event>, StoreError>;
    /// One webhook endpoint.
    fn endpoint(&mut self, id: Option<&EndpointId>) -> Result<Endpoint, StoreError>;
    /// The endpoints `owner` sends to, and whether one is held by no one.
    fn sending(&mut self, owner: &str, now: Timestamp) -> Result<(Vec<Sending>, bool), StoreError>;
    /// An endpoint's due deliveries.
    fn due_deliveries(
        &mut self,
        endpoint: &EndpointId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError>;
    /// How long the oldest pending delivery has waited.
    fn oldest_pending(&mut self, now: Timestamp) -> Result<Option<Duration>, StoreError>;
    /// A page of webhook endpoints.
    fn list_endpoints(&mut self, query: &ListQuery) -> Result<Page<Endpoint>, StoreError>;
    /// A page of an endpoint's deliveries.
    fn list_deliveries(
        &mut self,
        endpoint: Option<&EndpointId>,
        query: &ListQuery,
    ) -> Result<Page<Delivery>, StoreError>;
    /// A page of a tenant's events.
    fn list_tenant_events(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Event>, StoreError>;
    /// One event.
    fn event(&mut self, id: Option<&EventId>) -> Result<Event, StoreError>;
    /// What a token of the tenant must match.
    fn credential(&mut self, id: &TenantId) -> Result<Option<Credential>, StoreError>;
}

impl<D: Sql + Send> Reads for D {
    fn tenant(&mut self, id: &TenantId) -> Result<Tenant, StoreError> {
        tenant(self, id)?.ok_or(StoreError::TenantNotFound)
    }

    fn budget(&mut self, tenant: &TenantId, id: Option<&BudgetId>) -> Result<Budget, StoreError> {
        budget(self, tenant, id)
    }

    fn reservation(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Result<Reservation, StoreError> {
        reservation(self, tenant, id)
    }

    fn list_tenants(&mut self, query: &ListQuery) -> Result<Page<Tenant>, StoreError> {
        list_tenants(self, query)
    }

    fn list_budgets(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Budget>, StoreError> {
        list_budgets(self, tenant, query)
    }

    fn list_entries(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<Page<LedgerEntry>, StoreError> {
        list_entries(self, tenant, budget, query)
    }

    fn list_reservations(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Reservation>, StoreError> {
        list_reservations(self, tenant, query)
    }

    fn entry(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        id: Option<&EntryId>,
    ) -> Result<LedgerEntry, StoreError> {
        entry(self, tenant, budget, id)
    }

    fn list_periods(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<(Budget, Page<Statement>), StoreError> {
        list_periods(self, tenant, budget, query)
    }

    fn list_events(&mut self, query: &ListQuery) -> Result<Page<Event>, StoreError> {
        list_events(self, query)
    }

    fn endpoint(&mut self, id: Option<&EndpointId>) -> Result<Endpoint, StoreError> {
        endpoint(self, id)
    }

    fn sending(&mut self, owner: &str, now: Timestamp) -> Result<(Vec<Sending>, bool), StoreError> {
        sending(self, owner, now)
    }

    fn due_deliveries(
        &mut self,
        endpoint: &EndpointId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        due_deliveries(self, endpoint, now, limit)
    }

    fn oldest_pending(&mut self, now: Timestamp) -> Result<Option<Duration>, StoreError> {
        oldest_pending(self, now)
    }

    fn list_endpoints(&mut self, query: &ListQuery) -> Result<Page<Endpoint>, StoreError> {
        list_endpoints(self, query)
    }

    fn list_deliveries(
        &mut self,
        endpoint: Option<&EndpointId>,
        query: &ListQuery,
    ) -> Result<Page<Delivery>, StoreError> {
        list_deliveries(self, endpoint, query)
    }

    fn list_tenant_events(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Event>, StoreError> {
        list_tenant_events(self, tenant, query)
    }

    fn event(&mut self, id: Option<&EventId>) -> Result<Event, StoreError> {
        event(self, id)
    }

    fn credential(&mut self, id: &TenantId) -> Result<Option<Credential>, StoreError> {
        credential(self, id)
    }
}
