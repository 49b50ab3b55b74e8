//! The server's errors as the store's: a clash on the two unique names is the refusal itself
//! ([`StoreError::TenantNameTaken`], [`StoreError::BudgetNameTaken`]); a connection that is
//! gone, a server that is shutting down, full or read-only, and a cancelled statement are
//! [`StoreError::Unavailable`]; a command that lost a race for a row (a lock not granted, a
//! deadlock, a serialization failure) is [`StoreError::Busy`], to be sent again; anything else
//! is [`StoreError::Internal`].

use tokio_postgres::error::SqlState;

use crate::store::StoreError;
use crate::store::postgres::explain;

/// The store's error for `e`: a clash on a unique name as its refusal, what the database
/// cannot take now as [`StoreError::Unavailable`], anything else as [`StoreError::Internal`].
pub(super) fn store_error(e: &tokio_postgres::Error) -> StoreError {
    if let Some(code) = e.code() {
        if *code == SqlState::UNIQUE_VIOLATION {
            match e.as_db_error().and_then(|d| d.constraint()) {
                Some("tenants_active_name") => return StoreError::TenantNameTaken,
                Some("budgets_open_name") => return StoreError::BudgetNameTaken,
                _ => {}
            }
        }
        if busy(code.code()) || moved(e) {
            return StoreError::Busy(explain(e));
        }
        if unavailable(code.code()) {
            return StoreError::Unavailable(explain(e));
        }
    }
    if e.is_closed() || broken(e) {
        return StoreError::Unavailable(explain(e));
    }
    StoreError::Internal(explain(e))
}

/// Whether SQLSTATE `code` says the statement lost a race with another transaction, and
/// would run if sent again: a serialization failure (40001), a deadlock (40P01), a lock not
/// available (55P03: `NOWAIT`, or `lock_timeout` run out).
fn busy(code: &str) -> bool {
    matches!(code, "40001" | "40P01" | "55P03")
}

/// Whether `e` is a guard's of a batch begun on what its writer knew, which found a row
/// another writer moved (`write::known`): the batch is sent again.
fn moved(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|d| d.message().contains(crate::store::write::guard::MOVED))
}

/// Whether SQLSTATE `code` says the database cannot take the statement now, though it may
/// later or elsewhere: the connection (class 08), a shutdown or a start (57P01, 57P02,
/// 57P03), resources (class 53), a read-only server (25006), a cancelled statement (57014).
fn unavailable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(code, "57P01" | "57P02" | "57P03" | "25006" | "57014")
}

/// Whether `e` comes from the connection's socket (reset, cut short): the connection is
/// broken, as good as closed.
fn broken(e: &tokio_postgres::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(inner) = cause {
        if inner.is::<std::io::Error>() {
            return true;
        }
        cause = inner.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_that_mean_later_are_told_apart() {
        for code in [
            "08000", "08006", "57P01", "57P02", "57P03", "53100", "53300", "25006", "57014",
        ] {
            assert!(unavailable(code) && !busy(code), "{code}");
        }
        for code in ["40001", "40P01", "55P03"] {
            assert!(busy(code) && !unavailable(code), "{code}");
        }
        for code in [
            "23505", "23000", "42601", "25P02", "22003", "XX000", "57000",
        ] {
            assert!(!unavailable(code) && !busy(code), "{code}");
        }
    }
}
