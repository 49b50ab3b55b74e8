//! The seam between the store's operations and a database: statements with parameters, rows
//! as text.
//!
//! The write operations ([`super::ops`]) and the queries ([`super::queries`]) are written once, in
//! the SQL both backends speak, with numbered parameters (`?1`, `?2`, …). A backend implements
//! [`Sql`] on its connection: SQLite binds amounts as the text its columns hold; PostgreSQL
//! rewrites the numbers to `$1`, `$2`, … and binds amounts as `numeric`. Rows come back through
//! [`TextRow`], so both backends are read by the same readers ([`super::rows`]). The
//! command-line tools are written once over the same seam (`audit verify` in [`super::verify`],
//! `tenantd copy` in [`super::copy`]): they stream whole tables ([`Sql::for_each_row`]).
//!
//! A backend reports a clash on the two unique names it keeps as the refusal itself
//! ([`StoreError::TenantNameTaken`], [`StoreError::BudgetNameTaken`]), so a command needs no
//! backend's error codes.

use std::borrow::Cow;
use std::panic::{self, AssertUnwindSafe};

use super::StoreError;
use super::rows::TextRow;
use crate::domain::Atomic;

/// A statement's parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param<'a> {
    /// NULL.
    Null,
    /// Text.
    Text(&'a str),
    /// A 64-bit integer.
    Int(i64),
    /// Bytes (a hash, a fingerprint).
    Bytes(&'a [u8]),
    /// An amount: text in SQLite, `numeric(39,0)` in PostgreSQL.
    Amount(u128),
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(text: &'a str) -> Self {
        Self::Text(text)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(text: &'a String) -> Self {
        Self::Text(text)
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        Self::Bytes(bytes)
    }
}

impl From<i64> for Param<'_> {
    fn from(n: i64) -> Self {
        Self::Int(n)
    }
}

impl From<Atomic> for Param<'_> {
    fn from(amount: Atomic) -> Self {
        Self::Amount(amount.get())
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Self::Null, Into::into)
    }
}

/// A row that cannot be read: unreadable (the connection, a type the query did not expect),
/// or holding what its type does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowError {
    /// The column could not be read at all.
    Read(String),
    /// The column holds what its type does not allow: a bug, or a row edited behind the
    /// service's back.
    Corrupt(String),
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read(what) => write!(f, "a row cannot be read: {what}"),
            Self::Corrupt(what) => write!(f, "a stored row is corrupt: {what}"),
        }
    }
}

impl From<RowError> for StoreError {
    fn from(e: RowError) -> Self {
        Self::Internal(e.to_string())
    }
}

/// A row as the commands read it.
pub(crate) type Row<'r> = dyn TextRow<Error = RowError> + 'r;

/// A connection the commands and queries run on.
pub(crate) trait Sql {
    /// Whether writers on other connections share this database (PostgreSQL, with any number
    /// of instances): a write then takes its tenant's row lock before it reads
    /// ([`crate::store::write::state::WriterState::lock_tenant`]), and its audit row waits in
    /// `audit_pending` for the chainer. SQLite's one writer does neither: it links each row
    /// into the chain inside the change's transaction.
    const SHARED: bool = false;

    /// Runs one statement; how many rows it changed.
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError>;

    /// Runs one query and reads each of its rows with `read`, in order.
    fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
    ) -> Result<Vec<T>, StoreError>;

    /// Runs one query and hands each of its rows to `f` as it is read, keeping none: a table
    /// of a million rows is read in the memory of one (`audit verify` and `tenantd copy` read
    /// whole tables so). The first error, the database's or that of `f`, ends it.
    fn for_each_row<E: From<StoreError>>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E>;

    /// Sends one statement whose outcome is known at the next [`Sql::flush`], query or run,
    /// whichever comes first; its error, if any, comes back there. A backend may send several
    /// in one round trip; one without that runs it at once.
    fn send(&mut self, sql: &str, params: &[Param<'_>]) -> Result<(), StoreError> {
        self.execute(sql, params).map(drop)
    }

    /// Waits for every statement sent: the first error among them.
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Runs a statement that takes no parameters and returns no rows (`BEGIN`, `SAVEPOINT`).
    fn run(&mut self, sql: &str) -> Result<(), StoreError>;

    /// Runs `queries` in order, after the statements sent, and hands each row to `read` with
    /// the index of its query. A backend that can runs them all in one round trip; the first
    /// error ends it.
    fn query_each(
        &mut self,
        queries: &[(&str, &[Param<'_>])],
        mut read: impl FnMut(usize, &Row<'_>) -> Result<(), RowError>,
    ) -> Result<(), StoreError> {
        for (i, (sql, params)) in queries.iter().enumerate() {
            self.query(sql, params, |row| read(i, row))?;
        }
        Ok(())
    }

    /// Whether a statement sent ([`Sql::send`]) failed since this was last asked; cleared.
    /// Its error came back from the flush, query or run that carried it, as the error of
    /// whatever asked; this tells that it was a statement sent earlier that failed.
    fn take_send_failure(&mut self) -> bool {
        false
    }

    /// A count that moves with every statement that may change the transaction (sent, run
    /// or executed) and with every statement that fails: a command that leaves it where it
    /// was left the transaction as it found it. Counted by a backend whose batches run
    /// commands without savepoints ([`crate::store::write::ahead`]), and by any whose batch
    /// of operations runs them so (`ops::batch`).
    fn touched(&self) -> u64 {
        0
    }

    /// Runs `read` in one read-only snapshot of the database (or inside the transaction
    /// already open), so that its queries see one instant. The snapshot ends whatever
    /// happens.
    fn in_snapshot<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;

    /// The first row of a query, if it has one.
    fn query_opt<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
    ) -> Result<Option<T>, StoreError> {
        Ok(self.query(sql, params, read)?.into_iter().next())
    }
}

/// Column `i` of `row` as text, or a corrupt-row error when it is NULL.
pub(crate) fn text<'r>(row: &'r Row<'_>, i: usize) -> Result<Cow<'r, str>, RowError> {
    row.column(i)?
        .ok_or_else(|| row.corrupt(i, "a NULL where a value belongs".into()))
}

/// Runs `read` on `db`, then `end` whatever happens: a panic in `read` goes on once `end` has
/// run. The error of `read` comes first, then that of `end`.
pub(crate) fn ended<D, T>(
    db: &mut D,
    read: impl FnOnce(&mut D) -> Result<T, StoreError>,
    end: impl FnOnce(&mut D) -> Result<(), StoreError>,
) -> Result<T, StoreError> {
    let result = panic::catch_unwind(AssertUnwindSafe(|| read(db)));
    let ended = end(db);
    match result {
        Ok(result) => {
            let value = result?;
            ended?;
            Ok(value)
        }
        Err(panic) => panic::resume_unwind(panic),
    }
}
