//! What the writer reads of time: the expiries and period boundaries due, the soonest of
//! each, and the greatest id and time another instance may have written.

use crate::domain::{BudgetId, Reservation, TenantId, Timestamp};
use crate::store::StoreError;
use crate::store::rows::{self, Columns, RESERVATION_COLUMNS};
use crate::store::sql::{Param, Sql};

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

/// Every active reservation of `tenant` whose time is up at `now`, soonest first (then by id).
/// Found through the index of every active reservation by expiry: what is due is what the
/// sweeps have not recorded yet, a few rows of any tenant.
pub(crate) fn due_in_tenant(
    db: &mut impl Sql,
    tenant: &TenantId,
    now: Timestamp,
) -> Result<Vec<Reservation>, StoreError> {
    db.query(
        &format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations \
             WHERE state = 'active' AND expires_at <= ?2 AND tenant_id = CAST(?1 AS TEXT) \
             ORDER BY expires_at, id"
        ),
        &[tenant.as_str().into(), Param::Text(&now.to_string())],
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

/// The open budgets of `tenant` whose period ended by `now`, with the end of that period,
/// soonest first (then by id); found, as [`due_in_tenant`]'s rows are, through what is due.
pub(crate) fn boundaries_in_tenant(
    db: &mut impl Sql,
    tenant: &TenantId,
    now: Timestamp,
) -> Result<Vec<(Timestamp, BudgetId)>, StoreError> {
    db.query(
        "SELECT r.period_ends_at, b.id FROM budget_renewals r JOIN budgets b ON b.id = r.budget_id \
         WHERE r.period_ends_at IS NOT NULL AND r.period_ends_at <= ?2 \
         AND b.tenant_id = CAST(?1 AS TEXT) ORDER BY r.period_ends_at, b.id",
        &[tenant.as_str().into(), Param::Text(&now.to_string())],
        |row| {
            let c = Columns::new(row, 0);
            Ok((
                c.parse(0, "period_ends_at", Timestamp::parse)?,
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

/// The greatest ULID of any id stored, so that new ids sort after every one of them.
pub(crate) fn latest_ulid(db: &mut impl Sql) -> Result<Option<ulid::Ulid>, StoreError> {
    greatest_ulid(db)
}

/// The greatest ULID of any id stored.
fn greatest_ulid(db: &mut impl Sql) -> Result<Option<ulid::Ulid>, StoreError> {
    let found = db.query_opt(
        "SELECT (SELECT max(id) FROM tenants), (SELECT max(id) FROM budgets), \
         (SELECT max(id) FROM reservations), (SELECT max(id) FROM ledger_entries), \
         (SELECT max(id) FROM periods), (SELECT max(id) FROM events)",
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
            Ok(latest)
        },
    )?;
    Ok(found.flatten())
}
