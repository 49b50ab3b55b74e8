//! Queries shared by the writer and the readers.

use rusqlite::{Connection, OptionalExtension};
use subtle::ConstantTimeEq;

use super::StoreError;
use crate::domain::{Atomic, TenantId};
use crate::views::{Budget, Tenant, TenantState};

/// SQLite's own clock, so no calendar code is needed here: RFC 3339, UTC, milliseconds.
pub fn now(conn: &Connection) -> rusqlite::Result<String> {
    conn.prepare_cached("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")?
        .query_row([], |row| row.get(0))
}

pub fn tenant(conn: &Connection, id: &TenantId) -> Result<Option<Tenant>, StoreError> {
    let row: Option<[String; 6]> = conn
        .prepare_cached(
            "SELECT name, state, opening_deposit_atomic, balance_atomic, created_at, \
             coalesce(tombstoned_at, '') FROM tenants WHERE id = ?1",
        )?
        .query_row([id.as_str()], |row| {
            Ok([
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ])
        })
        .optional()?;
    let Some([name, state, deposit, balance, created_at, tombstoned_at]) = row else {
        return Ok(None);
    };
    let corrupt = |what: &str| StoreError::Internal(format!("tenant {id} has a bad {what}"));
    let state = TenantState::parse(&state).ok_or_else(|| corrupt("state"))?;
    Ok(Some(Tenant {
        id: id.clone(),
        name,
        state,
        created_at,
        tombstoned_at: (state == TenantState::Tombstoned).then_some(tombstoned_at),
        budget: Budget {
            opening_deposit_atomic: Atomic::parse(&deposit)
                .map_err(|_| corrupt("opening deposit"))?,
            balance_atomic: Atomic::parse(&balance).map_err(|_| corrupt("balance"))?,
        },
    }))
}

/// True when `id` is an active tenant whose stored token hash is `hash`, compared in
/// constant time. A tombstoned tenant's token matches nothing: tombstoning revokes it.
pub fn token_matches(
    conn: &Connection,
    id: &TenantId,
    hash: &[u8; 32],
) -> Result<bool, StoreError> {
    let stored: Option<Vec<u8>> = conn
        .prepare_cached("SELECT token_hash FROM tenants WHERE id = ?1 AND state = 'active'")?
        .query_row([id.as_str()], |row| row.get(0))
        .optional()?;
    Ok(stored.is_some_and(|stored| bool::from(stored.as_slice().ct_eq(&hash[..]))))
}
