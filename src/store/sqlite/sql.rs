//! The store's SQL seam ([`Sql`]) on a SQLite connection: statements are prepared once and
//! cached by the connection, amounts are bound as the text their columns hold.

use std::borrow::Cow;

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, ToSql, params_from_iter};

use crate::store::StoreError;
use crate::store::rows::TextRow;
use crate::store::sql::{self, Param, Row, RowError, Sql};

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Param::Null => ToSqlOutput::Owned(Value::Null),
            Param::Text(text) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
            Param::Int(n) => ToSqlOutput::Owned(Value::Integer(n)),
            Param::Bytes(bytes) => ToSqlOutput::Borrowed(ValueRef::Blob(bytes)),
            Param::Amount(amount) => ToSqlOutput::Owned(Value::Text(amount.to_string())),
        })
    }
}

/// A SQLite row as the commands read it.
struct SqliteRow<'a, 'stmt>(&'a rusqlite::Row<'stmt>);

impl SqliteRow<'_, '_> {
    fn value(&self, i: usize) -> Result<ValueRef<'_>, RowError> {
        self.0
            .get_ref(i)
            .map_err(|e| RowError::Read(format!("column {i}: {e}")))
    }
}

impl TextRow for SqliteRow<'_, '_> {
    type Error = RowError;

    fn column(&self, i: usize) -> Result<Option<Cow<'_, str>>, RowError> {
        match self.value(i)?.as_str_or_null() {
            Ok(text) => Ok(text.map(Cow::Borrowed)),
            Err(e) => Err(self.corrupt(i, format!("not text: {e}"))),
        }
    }

    fn blob(&self, i: usize) -> Result<Option<Cow<'_, [u8]>>, RowError> {
        match self.value(i)?.as_blob_or_null() {
            Ok(bytes) => Ok(bytes.map(Cow::Borrowed)),
            Err(e) => Err(self.corrupt(i, format!("not bytes: {e}"))),
        }
    }

    fn corrupt(&self, i: usize, what: String) -> RowError {
        RowError::Corrupt(format!("column {i}: {what}"))
    }

    fn len(&self) -> usize {
        self.0.as_ref().column_count()
    }
}

/// Test and debug builds: fails if SQLite has prepared `stmt` again since its first run. It
/// does so at every run of a statement whose plan it takes to depend on a bound value (see
/// `store::queries` for the shapes, and the cast that avoids them), which costs more than the
/// query itself. The store changes no schema while it serves, so a count here is always that.
fn assert_prepared_once(stmt: &rusqlite::CachedStatement<'_>, sql: &str) {
    debug_assert_eq!(
        stmt.get_status(rusqlite::StatementStatus::RePrepare),
        0,
        "SQLite prepares this statement again at every run: {sql}"
    );
}

impl Sql for Connection {
    /// The rows every `INSERT`, `UPDATE` and `DELETE` of the connection changed (triggers'
    /// included): a statement that fails changes none (SQLite rolls it back alone).
    fn touched(&self) -> u64 {
        self.total_changes()
    }

    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        let mut stmt = self.prepare_cached(sql)?;
        let changed = stmt.execute(params_from_iter(params.iter()))?;
        assert_prepared_once(&stmt, sql);
        Ok(changed)
    }

    /// The rows of [`Sql::for_each_row`], each read with `read`, kept in order.
    fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut found = Vec::new();
        self.for_each_row(sql, params, |row| {
            found.push(read(row)?);
            Ok::<(), StoreError>(())
        })?;
        Ok(found)
    }

    fn for_each_row<E: From<StoreError>>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut f: impl FnMut(&Row<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut stmt = self.prepare_cached(sql).map_err(StoreError::from)?;
        let mut rows = stmt
            .query(params_from_iter(params.iter()))
            .map_err(StoreError::from)?;
        while let Some(row) = rows.next().map_err(StoreError::from)? {
            f(&SqliteRow(row))?;
        }
        drop(rows);
        assert_prepared_once(&stmt, sql);
        Ok(())
    }

    fn run(&mut self, sql: &str) -> Result<(), StoreError> {
        let mut stmt = self.prepare_cached(sql)?;
        stmt.execute([])?;
        assert_prepared_once(&stmt, sql);
        Ok(())
    }

    /// A read transaction, rolled back at the end; a panic in `read` ends it too before it
    /// goes on, so a reader is never left holding an old snapshot.
    fn in_snapshot<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.is_autocommit() {
            return read(self);
        }
        self.run("BEGIN")?;
        sql::ended(self, read, |db| db.run("ROLLBACK"))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::sql::Param;

    #[test]
    fn many_rows_a_statement_are_inserted_in_order_whatever_their_number() {
        let many = crate::store::write::many::ManyRows::new("INSERT INTO t (n, sq) VALUES ", 2);
        for count in [0usize, 1, 2, 3, 63, 64, 65, 130, 1000] {
            let mut db = rusqlite::Connection::open_in_memory().expect("a database");
            db.execute_batch("CREATE TABLE t (i INTEGER PRIMARY KEY, n INTEGER, sq INTEGER)")
                .expect("the table");
            let rows: Vec<i64> = (0..i64::try_from(count).expect("small")).collect();
            let before = db.total_changes();
            many.insert(&mut db, &rows, |n| [Param::Int(*n), Param::Int(n * n)])
                .expect("inserted");
            assert_eq!(db.total_changes() - before, count as u64);
            let stored: Vec<(i64, i64)> = db
                .prepare("SELECT n, sq FROM t ORDER BY i")
                .expect("a query")
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .expect("rows")
                .map(|r| r.expect("a row"))
                .collect();
            let wanted: Vec<(i64, i64)> = rows.iter().map(|n| (*n, n * n)).collect();
            assert_eq!(stored, wanted, "{count} rows");
        }
    }
}
