//! Connecting, the session's bounds, and the statements a connection keeps: a reader's
//! connection found closed is replaced between two statements, and a statement is prepared
//! once, then kept.
//!
//! The commands' SQL numbers its parameters as SQLite does (`?1`, `?2`, …); a statement is
//! rewritten to PostgreSQL's `$1`, `$2`, … before it is prepared.

use std::collections::HashMap;

use tokio_postgres::Statement;

use super::Blocking;
use super::errors::store_error;
use crate::store::StoreError;
use crate::store::postgres;
use crate::store::sql::Sql;

/// The bounds of every store connection's session: a transaction left idle (its instance hung
/// or cut off mid-batch) is ended by the server after 10 s, so no instance holds a tenant's
/// lock longer; a statement waits 200 ms at most for a lock (a writer takes its tenants'
/// without waiting at all, and another session may hold a row longer: the command then fails
/// [`StoreError::Busy`], its savepoint is rolled back, the rest of its batch goes on, and it
/// is sent again); no statement runs longer than 30 s.
///
/// And each prepared statement keeps the one plan made for any parameters. Left to choose,
/// the server planned a statement that looks up a list of ids (`queries::listed_ids`) again
/// at every run, as the list's length made a plan for those values cheaper on paper: a tenth
/// of PostgreSQL's time under charges went to planning. Every statement of the writers and
/// the chainer finds its rows by a key.
const SESSION_BOUNDS: &str = "SET idle_in_transaction_session_timeout = '10s'; \
     SET lock_timeout = '200ms'; SET statement_timeout = '30s'; \
     SET plan_cache_mode = force_generic_plan";

/// Turns [`Blocking::closed_now`] gives the connection's task.
const CLOSED_TURNS: usize = 4;

impl Blocking {
    /// Connects to the database at `url` (see [`postgres::connect`]), for the store's threads.
    pub(crate) fn connect(url: &str) -> Result<Self, String> {
        let mut db = Self::connect_for_tool(url)?;
        db.batch(SESSION_BOUNDS)
            .map_err(|e| format!("cannot set the session's bounds: {e:?}"))?;
        Ok(db)
    }

    /// Connects to the database at `url` for a command-line tool (`audit verify`, `tenantd
    /// copy`): without the store's session bounds, because a tool reads a whole database in one
    /// transaction, for as long as the database is large (a copy's source waits, idle, while
    /// its target is read back), and waits for a lock as long as another session holds it.
    pub(crate) fn connect_for_tool(url: &str) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime for PostgreSQL: {e}"))?;
        let client = runtime.block_on(postgres::connect(url))?;
        Ok(Self {
            client,
            statements: HashMap::new(),
            runtime,
            reconnect: None,
            in_snapshot: false,
            pending: Vec::new(),
            send_failed: false,
            kept: Vec::new(),
            touched: 0,
        })
    }

    /// Connects to the database at `url` for reads: a connection found closed before a
    /// statement is replaced, so that a reader outlives a restart or a fail-over of the
    /// server (the read that finds it broken fails).
    pub(crate) fn connect_for_reads(url: &str) -> Result<Self, String> {
        let mut db = Self::connect(url)?;
        db.reconnect = Some(url.to_owned());
        Ok(db)
    }

    /// Applies the schema where it is missing (see [`postgres::create_schema`]).
    pub(crate) fn create_schema(&mut self) -> Result<(), String> {
        self.runtime
            .block_on(postgres::create_schema(&mut self.client))
    }

    /// Succeeds when the database holds this build's schema (see [`postgres::expect_schema`]).
    pub(crate) fn expect_schema(&mut self) -> Result<(), String> {
        self.runtime.block_on(postgres::expect_schema(&self.client))
    }

    /// Replaces the connection with a new one to `url`, dropping what was prepared on the
    /// old one. A transaction open on the old one is rolled back by the server.
    pub(crate) fn reconnect(&mut self, url: &str) -> Result<(), StoreError> {
        let client = self
            .runtime
            .block_on(postgres::connect(url))
            .map_err(StoreError::Unavailable)?;
        self.client = client;
        self.statements.clear();
        // What was sent on the old connection died with its transaction.
        self.pending.clear();
        self.kept.clear();
        self.batch(SESSION_BOUNDS)
    }

    /// Whether the connection is gone, so that the thread connects anew. A connection the
    /// server ended while nothing ran is noticed by the next statement, which fails
    /// [`StoreError::Unavailable`].
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Whether the connection is gone, as far as it can tell now: its task is given a few
    /// turns to read what the server sent while nothing ran (the error a session is ended
    /// with, or the connection's end). A batch sent whole in one round trip asks this first,
    /// since it could not be sent again once its outcome is in doubt.
    pub(crate) fn closed_now(&mut self) -> bool {
        for _ in 0..CLOSED_TURNS {
            if self.client.is_closed() {
                return true;
            }
            self.runtime.block_on(tokio::task::yield_now());
        }
        self.client.is_closed()
    }

    /// Runs `op`, and once more on a new connection when a reader's connection turns out
    /// closed as it runs (the server restarted, or failed over, while it was idle). Only
    /// outside a snapshot: a statement of a snapshot never moves to another connection.
    pub(super) fn retried<T>(
        &mut self,
        mut op: impl FnMut(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match op(self) {
            Err(StoreError::Unavailable(_))
                if self.reconnect.is_some() && !self.in_snapshot && self.client.is_closed() =>
            {
                self.reconnect_if_closed()?;
                op(self)
            }
            result => result,
        }
    }

    /// Replaces a reader's connection that is found closed.
    fn reconnect_if_closed(&mut self) -> Result<(), StoreError> {
        match self.reconnect.clone() {
            Some(url) if self.client.is_closed() => self.reconnect(&url),
            _ => Ok(()),
        }
    }

    /// The statement for `sql`, prepared on first use.
    pub(super) fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if !self.in_snapshot {
            self.reconnect_if_closed()?;
        }
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        // The statements sent go first: one of them may end a failed command
        // (`ROLLBACK TO`), and the server prepares nothing in a transaction that failed.
        self.flush()?;
        let statement = self
            .runtime
            .block_on(self.client.prepare(&numbered(sql)))
            .map_err(|e| store_error(&e))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// `sql` with its numbered parameters as PostgreSQL writes them: each `?` followed by
/// digits, outside a string literal, becomes `$` (`?12` is `$12`). Any other `?` (an
/// operator) is left alone.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // A doubled quote inside a literal closes and reopens it: the same either way.
            '\'' => quoted = !quoted,
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_become_dollars_outside_literals() {
        for (sql, pg) in [
            ("SELECT ?1", "SELECT $1"),
            (
                "UPDATE t SET a = ?12 WHERE b = ?2",
                "UPDATE t SET a = $12 WHERE b = $2",
            ),
            ("SELECT ?1||?2", "SELECT $1||$2"),
            ("SELECT '?1', ?1", "SELECT '?1', $1"),
            ("SELECT 'it''s ?1', ?3", "SELECT 'it''s ?1', $3"),
            ("SELECT '', ?1, '?2'", "SELECT '', $1, '?2'"),
            ("SELECT j ? 'k', ?a, ?", "SELECT j ? 'k', ?a, ?"),
            ("SELECT ?", "SELECT ?"),
            ("SELECT 'é?1', ?1 -- ü", "SELECT 'é?1', $1 -- ü"),
            ("", ""),
        ] {
            assert_eq!(numbered(sql), pg, "{sql}");
        }
    }
}
