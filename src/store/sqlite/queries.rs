//! Queries shared by the writer, the readers and the verifier, each returning domain values.

use rusqlite::{Connection, OptionalExtension, Row};

use super::super::{Credential, StoreError};
use crate::audit::VerifyError;
use crate::domain::{Atomic, Tenant, TenantBudget, TenantId, TenantName, TenantState};

/// SQLite's own clock, so no calendar code is needed here: RFC 3339, UTC, milliseconds.
pub(super) fn now(conn: &Connection) -> rusqlite::Result<String> {
    conn.prepare_cached("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")?
        .query_row([], |row| row.get(0))
}

/// The columns [`tenant_from_row`] reads, in its order, after the id.
macro_rules! tenant_columns {
    () => {
        "name, state, opening_deposit_atomic, balance_atomic, created_at, tombstoned_at"
    };
}

/// The tenant `id` from a row of [`tenant_columns`] starting at column `at`; a row that breaks
/// a rule is a bug (or tampering), reported by what is wrong. Columns that are only parsed are
/// read in place, without a copy.
fn tenant_from_row(
    id: TenantId,
    row: &Row<'_>,
    at: usize,
) -> rusqlite::Result<Result<Tenant, String>> {
    let text = |i: usize| row.get_ref(at + i).and_then(|v| Ok(v.as_str()?));
    let corrupt = |what: &str| format!("tenant {id} has a bad {what}");
    let name = match TenantName::parse(text(0)?) {
        Ok(name) => name,
        Err(_) => return Ok(Err(corrupt("name"))),
    };
    let state = match (text(1)?, row.get::<_, Option<String>>(at + 5)?) {
        ("active", None) => TenantState::Active,
        ("tombstoned", Some(at)) => TenantState::Tombstoned { at },
        _ => return Ok(Err(corrupt("state"))),
    };
    let (Ok(opening_deposit), Ok(balance)) = (Atomic::parse(text(2)?), Atomic::parse(text(3)?))
    else {
        return Ok(Err(corrupt("amount")));
    };
    Ok(Ok(Tenant {
        name,
        created_at: row.get(at + 4)?,
        state,
        budget: TenantBudget {
            opening_deposit,
            balance,
        },
        id,
    }))
}

/// The tenant with this id, if there is one.
pub(super) fn tenant(conn: &Connection, id: &TenantId) -> Result<Option<Tenant>, StoreError> {
    let found = conn
        .prepare_cached(concat!(
            "SELECT ",
            tenant_columns!(),
            " FROM tenants WHERE id = ?1"
        ))?
        .query_row([id.as_str()], |row| tenant_from_row(id.clone(), row, 0))
        .optional()?;
    found.transpose().map_err(StoreError::Internal)
}

/// Streams every tenant, in id order, into `check`; a row that cannot be read as a tenant is
/// passed on as what is wrong with it.
pub(super) fn for_each_tenant(
    conn: &Connection,
    mut check: impl FnMut(Result<Tenant, String>) -> Result<(), VerifyError>,
) -> Result<(), VerifyError> {
    let read = |e: rusqlite::Error| VerifyError::Read(e.to_string());
    let mut stmt = conn
        .prepare(concat!(
            "SELECT id, ",
            tenant_columns!(),
            " FROM tenants ORDER BY id"
        ))
        .map_err(read)?;
    let mut rows = stmt.query([]).map_err(read)?;
    while let Some(row) = rows.next().map_err(read)? {
        let raw_id = row
            .get_ref(0)
            .and_then(|v| Ok(v.as_str()?))
            .map_err(|e| VerifyError::Read(e.to_string()))?;
        let Some(id) = TenantId::parse(raw_id) else {
            check(Err(format!("a tenant row has a bad id {raw_id:?}")))?;
            continue;
        };
        match tenant_from_row(id, row, 1) {
            Ok(tenant) => check(tenant)?,
            Err(
                e @ (rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::FromSqlConversionFailure(..)),
            ) => {
                check(Err(format!("a tenant row cannot be read: {e}")))?;
            }
            Err(e) => return Err(read(e)),
        }
    }
    Ok(())
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
