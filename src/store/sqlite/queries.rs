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

/// The columns [`tenant_from_row`] reads, in its order.
const TENANT_COLUMNS: &str =
    "id, name, state, opening_deposit_atomic, balance_atomic, created_at, tombstoned_at";

/// A stored tenant row as a domain value; a row that breaks a rule is a bug (or tampering),
/// reported by what is wrong.
fn tenant_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Tenant, String>> {
    let id: String = row.get(0)?;
    let name: String = row.get(1)?;
    let state: String = row.get(2)?;
    let deposit: String = row.get(3)?;
    let balance: String = row.get(4)?;
    let created_at: String = row.get(5)?;
    let tombstoned_at: Option<String> = row.get(6)?;
    let corrupt = |what: &str| format!("tenant {id:?} has a bad {what}");
    let parsed = (|| {
        let state = match (state.as_str(), tombstoned_at) {
            ("active", None) => TenantState::Active,
            ("tombstoned", Some(at)) => TenantState::Tombstoned { at },
            _ => return Err(corrupt("state")),
        };
        Ok(Tenant {
            id: TenantId::parse(&id).ok_or_else(|| corrupt("id"))?,
            name: TenantName::parse(&name).map_err(|_| corrupt("name"))?,
            created_at,
            state,
            budget: TenantBudget {
                opening_deposit: Atomic::parse(&deposit).map_err(|_| corrupt("deposit"))?,
                balance: Atomic::parse(&balance).map_err(|_| corrupt("balance"))?,
            },
        })
    })();
    Ok(parsed)
}

/// The tenant with this id, if there is one.
pub(super) fn tenant(conn: &Connection, id: &TenantId) -> Result<Option<Tenant>, StoreError> {
    let found = conn
        .prepare_cached(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"
        ))?
        .query_row([id.as_str()], tenant_from_row)
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
        .prepare(&format!("SELECT {TENANT_COLUMNS} FROM tenants ORDER BY id"))
        .map_err(read)?;
    let mut rows = stmt.query([]).map_err(read)?;
    while let Some(row) = rows.next().map_err(read)? {
        match tenant_from_row(row) {
            Ok(tenant) => check(tenant)?,
            Err(e @ rusqlite::Error::InvalidColumnType(..)) => {
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
