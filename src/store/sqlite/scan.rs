//! The verifier's streaming reads of every stored row, and SQLite rows read as text.
//!
//! A row that breaks a rule of its type (a bad amount, an unknown state) is reported as a
//! conversion failure naming what is wrong: a bug, or a row edited behind the service's back.

use std::borrow::Cow;

use rusqlite::types::Type;
use rusqlite::{Connection, Row};

use super::super::rows::{self, TextRow};
use crate::audit::VerifyError;
use crate::domain::{Budget, LedgerEntry, Reservation, Tenant};

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

fn reservation_from_row(row: &Row<'_>) -> rusqlite::Result<Reservation> {
    rows::reservation(row)
}

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<LedgerEntry> {
    rows::entry(row)
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
