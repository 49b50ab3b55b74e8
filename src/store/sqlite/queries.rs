//! Queries shared by the writer, the readers and the verifier, each returning domain values.
//!
//! A row that breaks a rule of its type (a bad amount, an unknown state) is reported as a
//! conversion failure naming what is wrong: a bug, or a row edited behind the service's back.

use std::borrow::Cow;
use std::fmt::Write as _;

use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, ToSql};

use super::super::rows::{
    self, Columns, ENTRY_COLUMNS, RESERVATION_COLUMNS, TextRow, budget_columns, tenant_columns,
};
use super::super::{Credential, ListQuery, Page, StoreError};
use crate::audit::VerifyError;
use crate::domain::{
    Budget, BudgetId, Figures, LedgerEntry, Reservation, ReservationId, Tenant, TenantId, Timestamp,
};

/// A row that cannot be read as its type: column `at`, and what is wrong.
fn corrupt(at: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(at, Type::Text, what.into())
}

/// True for the errors [`corrupt`] makes and for a column of the wrong type.
pub(super) fn is_corrupt_row(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..) | rusqlite::Error::InvalidColumnType(..)
    )
}

impl TextRow for Row<'_> {
    type Error = rusqlite::Error;

    fn column(&self, i: usize) -> rusqlite::Result<Option<Cow<'_, str>>> {
        match self.get_ref(i)?.as_str_or_null() {
            Ok(text) => Ok(text.map(Cow::Borrowed)),
            Err(e) => Err(corrupt(i, format!("not text: {e}"))),
        }
    }

    fn blob(&self, i: usize) -> rusqlite::Result<Option<Cow<'_, [u8]>>> {
        match self.get_ref(i)?.as_blob_or_null() {
            Ok(bytes) => Ok(bytes.map(Cow::Borrowed)),
            Err(e) => Err(corrupt(i, format!("not bytes: {e}"))),
        }
    }

    fn corrupt(&self, i: usize, what: String) -> rusqlite::Error {
        corrupt(i, what)
    }

    fn len(&self) -> usize {
        self.as_ref().column_count()
    }
}

fn budget_from_row(row: &Row<'_>, at: usize) -> rusqlite::Result<Budget> {
    rows::budget(row, at)
}

fn tenant_from_row(row: &Row<'_>) -> rusqlite::Result<Tenant> {
    rows::tenant(row)
}

fn reservation_from_row(row: &Row<'_>) -> rusqlite::Result<Reservation> {
    rows::reservation(row)
}

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<LedgerEntry> {
    rows::entry(row)
}

/// Tenants joined to their default budgets.
const TENANTS_JOINED: &str = "tenants t JOIN budgets b ON b.id = 'bud_' || substr(t.id, 5)";

/// Maps a row error to the store's: a corrupt row is a bug (or tampering), not a refusal.
fn internal(e: rusqlite::Error) -> StoreError {
    if is_corrupt_row(&e) {
        StoreError::Internal(format!("a stored row cannot be read: {e}"))
    } else {
        e.into()
    }
}

/// The tenant with this id, if there is one, with its default budget.
pub(super) fn tenant(conn: &Connection, id: &TenantId) -> Result<Option<Tenant>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM {TENANTS_JOINED} WHERE t.id = ?1",
        tenant_columns!()
    ))?
    .query_row([id.as_str()], tenant_from_row)
    .optional()
    .map_err(internal)
}

/// Whether the tenant is active; `None` for no such tenant.
pub(super) fn tenant_active(conn: &Connection, id: &TenantId) -> Result<Option<bool>, StoreError> {
    let state: Option<String> = conn
        .prepare_cached("SELECT state FROM tenants WHERE id = ?1")?
        .query_row([id.as_str()], |row| row.get(0))
        .optional()?;
    Ok(state.map(|s| s == "active"))
}

/// Whether a tenant has this id.
pub(super) fn tenant_exists(conn: &Connection, id: &TenantId) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM tenants WHERE id = ?1")?
        .exists([id.as_str()])?)
}

/// The budget `id` of tenant `tenant`: `budget_not_found` for none (or an id that is not one),
/// `tenant_not_found` when the tenant itself is unknown.
pub(super) fn budget(
    conn: &Connection,
    tenant: &TenantId,
    id: Option<&BudgetId>,
) -> Result<Budget, StoreError> {
    if let Some(id) = id {
        let found = conn
            .prepare_cached(concat!(
                "SELECT ",
                budget_columns!("budgets"),
                " FROM budgets WHERE id = ?1 AND tenant_id = ?2"
            ))?
            .query_row([id.as_str(), tenant.as_str()], |row| {
                budget_from_row(row, 0)
            })
            .optional()
            .map_err(internal)?;
        if let Some(budget) = found {
            return Ok(budget);
        }
    }
    Err(not_found(conn, tenant, StoreError::BudgetNotFound)?)
}

/// The reservation `id` of tenant `tenant`, as [`budget`] finds a budget.
pub(super) fn reservation(
    conn: &Connection,
    tenant: &TenantId,
    id: Option<&ReservationId>,
) -> Result<Reservation, StoreError> {
    if let Some(id) = id {
        let found = conn
            .prepare_cached(&format!(
                "SELECT {RESERVATION_COLUMNS} FROM reservations WHERE id = ?1 AND tenant_id = ?2"
            ))?
            .query_row([id.as_str(), tenant.as_str()], reservation_from_row)
            .optional()
            .map_err(internal)?;
        if let Some(reservation) = found {
            return Ok(reservation);
        }
    }
    Err(not_found(conn, tenant, StoreError::ReservationNotFound)?)
}

/// `missing` if the tenant exists, else `tenant_not_found`.
fn not_found(
    conn: &Connection,
    tenant: &TenantId,
    missing: StoreError,
) -> Result<StoreError, StoreError> {
    Ok(if tenant_exists(conn, tenant)? {
        missing
    } else {
        StoreError::TenantNotFound
    })
}

/// The active reservations of `budget` whose time is up at `now`, soonest first.
pub(super) fn due_in_budget(
    conn: &Connection,
    budget: &BudgetId,
    now: Timestamp,
) -> Result<Vec<Reservation>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RESERVATION_COLUMNS} FROM reservations \
         WHERE budget_id = ?1 AND state = 'active' AND expires_at <= ?2 \
         ORDER BY expires_at, id"
    ))?;
    let rows = stmt.query_map([budget.as_str(), &now.to_string()], reservation_from_row)?;
    rows.collect::<rusqlite::Result<_>>().map_err(internal)
}

/// Every active reservation of `budget`.
pub(super) fn active_in_budget(
    conn: &Connection,
    budget: &BudgetId,
) -> Result<Vec<Reservation>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RESERVATION_COLUMNS} FROM reservations \
         WHERE budget_id = ?1 AND state = 'active' ORDER BY expires_at, id"
    ))?;
    let rows = stmt.query_map([budget.as_str()], reservation_from_row)?;
    rows.collect::<rusqlite::Result<_>>().map_err(internal)
}

/// Up to `limit` active reservations, of any budget, whose time is up at `now`, soonest first.
pub(super) fn due(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Reservation>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RESERVATION_COLUMNS} FROM reservations \
         WHERE state = 'active' AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2"
    ))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map((now.to_string(), limit), reservation_from_row)?;
    rows.collect::<rusqlite::Result<_>>().map_err(internal)
}

/// When the soonest active reservation expires, if any is active.
pub(super) fn next_expiry(conn: &Connection) -> Result<Option<Timestamp>, StoreError> {
    let soonest: Option<String> = conn
        .prepare_cached("SELECT min(expires_at) FROM reservations WHERE state = 'active'")?
        .query_row([], |row| row.get(0))?;
    soonest
        .map(|raw| {
            Timestamp::parse(&raw)
                .ok_or_else(|| StoreError::Internal(format!("a bad expires_at {raw:?}")))
        })
        .transpose()
}

/// The ids of the tenant's open budgets.
pub(super) fn open_budgets(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Vec<BudgetId>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM budgets WHERE tenant_id = ?1 AND state = 'open' ORDER BY id",
    )?;
    let rows = stmt.query_map([tenant.as_str()], |row| {
        Columns::new(row, 0).parse(0, "budget id", BudgetId::parse)
    })?;
    rows.collect::<rusqlite::Result<_>>().map_err(internal)
}

/// The greatest ULID of any id stored, so that new ids sort after every one of them.
pub(super) fn latest_ulid(conn: &Connection) -> rusqlite::Result<Option<ulid::Ulid>> {
    let mut latest = None;
    for table in ["tenants", "budgets", "reservations", "ledger_entries"] {
        let max: Option<String> =
            conn.query_row(&format!("SELECT max(id) FROM {table}"), [], |row| {
                row.get(0)
            })?;
        let ulid = max
            .as_deref()
            .and_then(|id| id.get(4..))
            .and_then(|text| ulid::Ulid::from_string(text).ok());
        latest = latest.max(ulid);
    }
    Ok(latest)
}

/// One page of a list: `WHERE <filters> AND id > after ORDER BY id LIMIT limit + 1`, in one
/// statement, so the page is one snapshot.
///
/// A `state` filter (`state_column`, if the query has one) is written into the SQL as a
/// literal, so that SQLite can use the partial indexes on one state (the query's states come
/// from a fixed list, never from the client's text).
fn page<T>(
    conn: &Connection,
    select: &str,
    id_column: &str,
    state_column: &str,
    filters: &[(&str, &dyn ToSql)],
    query: &ListQuery,
    read: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Page<T>, StoreError> {
    let mut sql = select.to_owned();
    let mut params: Vec<&dyn ToSql> = Vec::with_capacity(filters.len() + 2);
    let mut clause = " WHERE";
    if let Some(state) = query.state {
        debug_assert!(state.bytes().all(|b| b.is_ascii_lowercase()), "{state}");
        let _ = write!(sql, "{clause} {state_column} = '{state}'");
        clause = " AND";
    }
    for (column, value) in filters {
        let _ = write!(sql, "{clause} {column} = ?{}", params.len() + 1);
        clause = " AND";
        params.push(*value);
    }
    let after = query.after.as_deref().unwrap_or("");
    let n = params.len();
    let _ = write!(
        sql,
        "{clause} {id} > ?{} ORDER BY {id} LIMIT ?{}",
        n + 1,
        n + 2,
        id = id_column,
    );
    params.push(&after);
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX) + 1;
    params.push(&limit);
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut items = stmt
        .query_map(params.as_slice(), read)?
        .collect::<rusqlite::Result<Vec<T>>>()
        .map_err(internal)?;
    let has_more = items.len() > query.limit;
    items.truncate(query.limit);
    Ok(Page { items, has_more })
}

/// A page of tenants.
pub(super) fn list_tenants(
    conn: &Connection,
    query: &ListQuery,
) -> Result<Page<Tenant>, StoreError> {
    let select = format!("SELECT {} FROM {TENANTS_JOINED}", tenant_columns!());
    page(
        conn,
        &select,
        "t.id",
        "t.state",
        &[],
        query,
        tenant_from_row,
    )
}

/// A page of the tenant's budgets; `tenant_not_found` for an unknown tenant, read in the same
/// snapshot as the page.
pub(super) fn list_budgets(
    conn: &Connection,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Budget>, StoreError> {
    in_snapshot(conn, || {
        if !tenant_exists(conn, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = concat!("SELECT ", budget_columns!("budgets"), " FROM budgets");
        let tenant_text = tenant.as_str();
        let filters: Vec<(&str, &dyn ToSql)> = vec![("tenant_id", &tenant_text)];
        page(conn, select, "id", "state", &filters, query, |row| {
            budget_from_row(row, 0)
        })
    })
}

/// A page of a budget's ledger entries.
pub(super) fn list_entries(
    conn: &Connection,
    tenant: &TenantId,
    budget_id: Option<&BudgetId>,
    query: &ListQuery,
) -> Result<Page<LedgerEntry>, StoreError> {
    in_snapshot(conn, || {
        let budget = budget(conn, tenant, budget_id)?;
        let select = format!("SELECT {ENTRY_COLUMNS} FROM ledger_entries");
        let budget_text = budget.id.as_str();
        let filters: Vec<(&str, &dyn ToSql)> = vec![("budget_id", &budget_text)];
        page(conn, &select, "id", "kind", &filters, query, entry_from_row)
    })
}

/// A page of the tenant's reservations.
pub(super) fn list_reservations(
    conn: &Connection,
    tenant: &TenantId,
    query: &ListQuery,
) -> Result<Page<Reservation>, StoreError> {
    in_snapshot(conn, || {
        if !tenant_exists(conn, tenant)? {
            return Err(StoreError::TenantNotFound);
        }
        let select = format!("SELECT {RESERVATION_COLUMNS} FROM reservations");
        let tenant_text = tenant.as_str();
        let mut filters: Vec<(&str, &dyn ToSql)> = vec![("tenant_id", &tenant_text)];
        if let Some(budget) = &query.budget_id {
            filters.push(("budget_id", budget));
        }
        page(
            conn,
            &select,
            "id",
            "state",
            &filters,
            query,
            reservation_from_row,
        )
    })
}

/// Runs `read` inside one read transaction, so that what it reads is one snapshot. The
/// transaction ends whatever happens, a panic in `read` included (its guard rolls it back), so
/// a reader is never left holding an old snapshot.
fn in_snapshot<T>(
    conn: &Connection,
    read: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    if !conn.is_autocommit() {
        return read();
    }
    let snapshot = conn.unchecked_transaction()?;
    let result = read();
    snapshot.rollback()?;
    result
}

/// Streams every row of `sql` into `check`, each read by `read`; a row that cannot be read is
/// passed on as what is wrong with it.
fn for_each<T>(
    conn: &Connection,
    sql: &str,
    read: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
    mut check: impl FnMut(Result<T, String>) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    let failed = |e: rusqlite::Error| VerifyError::Read(e.to_string());
    let mut stmt = conn.prepare(sql).map_err(failed)?;
    let mut rows = stmt.query([]).map_err(failed)?;
    while let Some(row) = rows.next().map_err(failed)? {
        match read(row) {
            Ok(item) => check(Ok(item))?,
            Err(e) if is_corrupt_row(&e) => check(Err(format!("a row cannot be read: {e}")))?,
            Err(e) => return Err(failed(e)),
        }
    }
    Ok(())
}

/// Streams every tenant, in id order.
pub(super) fn for_each_tenant(
    conn: &Connection,
    check: impl FnMut(Result<Tenant, String>) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    for_each(
        conn,
        rows::EVERY_TENANT,
        |row| rows::tenant_with_deposit(row),
        check,
    )
}

/// Streams every budget, in id order.
pub(super) fn for_each_budget(
    conn: &Connection,
    check: impl FnMut(Result<Budget, String>) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    for_each(
        conn,
        rows::EVERY_BUDGET,
        |row| budget_from_row(row, 0),
        check,
    )
}

/// Streams every reservation, in id order.
pub(super) fn for_each_reservation(
    conn: &Connection,
    check: impl FnMut(Result<Reservation, String>) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    for_each(conn, rows::EVERY_RESERVATION, reservation_from_row, check)
}

/// Streams every ledger entry, by budget and then in order.
pub(super) fn for_each_entry(
    conn: &Connection,
    check: impl FnMut(Result<LedgerEntry, String>) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    for_each(conn, rows::EVERY_ENTRY, entry_from_row, check)
}

/// What a token of tenant `id` is checked against, if the tenant exists.
pub(super) fn credential(
    conn: &Connection,
    id: &TenantId,
) -> Result<Option<Credential>, StoreError> {
    let found: Option<(Vec<u8>, String)> = conn
        .prepare_cached("SELECT token_hash, state FROM tenants WHERE id = ?1")?
        .query_row([id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((hash, state)) = found else {
        return Ok(None);
    };
    let token_hash: [u8; 32] = hash
        .try_into()
        .map_err(|_| StoreError::Internal(format!("tenant {id} has a bad token hash")))?;
    Ok(Some(Credential {
        token_hash,
        active: state == "active",
    }))
}

/// The figures of `f` as the four stored columns, in order.
pub(super) fn figure_texts(f: &Figures) -> [String; 4] {
    [
        f.credited.to_string(),
        f.debited.to_string(),
        f.spent.to_string(),
        f.reserved.to_string(),
    ]
}
