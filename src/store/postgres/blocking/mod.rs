//! A PostgreSQL connection for the store's threads: the [`Sql`] seam run synchronously.
//!
//! The store's writer and readers are plain threads. Each holds a [`Blocking`]: a
//! `tokio_postgres` client with a current-thread runtime of its own, on which every statement
//! is run to its end (`block_on`); the connection's task runs whenever a statement does.
//!
//! This file holds the connection and the seam; the rest is split by concern:
//!
//! - `connection.rs`: connecting, the session's bounds, a closed connection replaced, and
//!   statements prepared once;
//! - `pipeline.rs`: statements sent together and answered in one round trip;
//! - `errors.rs`: the server's errors as the store's;
//! - [`super::codec`]: parameters encoded as the server's types, and rows decoded;
//! - `tests.rs`: the connection as a whole, against a live server.

mod connection;
mod errors;
mod pipeline;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use futures_core::Stream;
use tokio_postgres::{Client, Statement};

use self::errors::store_error;
use self::pipeline::{Answer, Last, PIPELINE_MAX, Pending};
use super::codec::bound;
use crate::store::StoreError;
use crate::store::sql::{self, Param, Row, RowError, Sql};

/// A PostgreSQL connection used synchronously, from one thread, with its prepared statements.
pub(crate) struct Blocking {
    /// The client; its connection's task runs on `runtime`.
    client: Client,
    /// The statements prepared so far, by the SQL as the caller gave it (with `?N`).
    statements: HashMap<String, Statement>,
    /// The runtime every statement is run on, and the connection's task with it.
    runtime: tokio::runtime::Runtime,
    /// Where to connect again, for a connection that may be replaced between two statements
    /// when it is found closed (a reader's); `None` for the writer's, which is replaced
    /// only between transactions, by the writer.
    reconnect: Option<String>,
    /// Inside [`Sql::in_snapshot`]: the connection is not replaced until the snapshot ends.
    in_snapshot: bool,
    /// Statements sent ([`Sql::send`]) and not yet run: they go to the server together with
    /// the next statement that must be answered, in one round trip.
    pending: Vec<Pending>,
    /// Set when a statement sent failed ([`Sql::take_send_failure`]).
    send_failed: bool,
    /// What the statements sent with [`Blocking::send_kept`] answered.
    kept: Vec<String>,
    /// Moves with every statement that may change the transaction and every one that fails
    /// ([`Sql::touched`]).
    touched: u64,
}

impl Sql for Blocking {
    const SHARED: bool = true;

    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        self.flush()?;
        self.touched += 1;
        let statement = self.statement(sql)?;
        let changed = self
            .runtime
            .block_on(self.client.execute(&statement, &bound(params)))
            .map_err(|e| store_error(&e))?;
        usize::try_from(changed)
            .map_err(|_| StoreError::Internal(format!("{changed} rows changed")))
    }

    fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
    ) -> Result<Vec<T>, StoreError> {
        let rows = self.retried(|db| {
            let statement = db.statement(sql)?;
            match db.round_trip(Last::Query(&statement, params))? {
                Answer::Rows(rows) => Ok(rows),
                _ => Err(StoreError::Internal("a query answered no rows".into())),
            }
        })?;
        rows.iter()
            .map(|row| read(row).map_err(StoreError::from))
            .collect()
    }

    /// Streams the rows through a portal (`query_raw`): each is taken as it arrives, and `f`
    /// runs between two of them, outside the runtime, so it may use another connection.
    fn for_each_row<E: From<StoreError>>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut f: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.flush()?;
        let rows = self.retried(|db| {
            let statement = db.statement(sql)?;
            db.runtime
                .block_on(db.client.query_raw(&statement, params.iter()))
                .map_err(|e| store_error(&e))
        })?;
        let mut rows = std::pin::pin!(rows);
        while let Some(row) = self
            .runtime
            .block_on(std::future::poll_fn(|cx| rows.as_mut().poll_next(cx)))
        {
            f(&row.map_err(|e| store_error(&e))?)?;
        }
        Ok(())
    }

    fn send(&mut self, sql: &str, params: &[Param<'_>]) -> Result<(), StoreError> {
        self.pend(sql, params, false)?;
        if self.pending.len() >= PIPELINE_MAX {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.round_trip(Last::Nothing).map(drop)
    }

    fn run(&mut self, sql: &str) -> Result<(), StoreError> {
        self.batch(sql)
    }

    fn query_each(
        &mut self,
        queries: &[(&str, &[Param<'_>])],
        mut read: impl FnMut(usize, &Row<'_>) -> Result<(), RowError>,
    ) -> Result<(), StoreError> {
        let lists = self.retried(|db| {
            let statements = queries
                .iter()
                .map(|&(sql, params)| Ok((db.statement(sql)?, params)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            match db.round_trip(Last::Queries(statements))? {
                Answer::Lists(lists) => Ok(lists),
                _ => Err(StoreError::Internal("queries answered no rows".into())),
            }
        })?;
        for (i, rows) in lists.iter().enumerate() {
            for row in rows {
                read(i, row)?;
            }
        }
        Ok(())
    }

    fn take_send_failure(&mut self) -> bool {
        std::mem::take(&mut self.send_failed)
    }

    fn touched(&self) -> u64 {
        self.touched
    }

    /// A read-only transaction at `REPEATABLE READ` (one snapshot for all its statements),
    /// ended whatever happens, a panic in `read` included.
    fn in_snapshot<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.in_snapshot {
            return read(self);
        }
        self.retried(|db| db.batch("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"))?;
        self.in_snapshot = true;
        sql::ended(self, read, |db| {
            db.in_snapshot = false;
            db.batch("ROLLBACK")
        })
    }
}
