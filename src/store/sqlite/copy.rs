//! The SQLite side of `tenantd copy`: a file read in one snapshot, or a new file written in
//! one transaction under a temporary name.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, ToSql};

use super::open;
use crate::audit::Head;
use crate::store::copy::{CHUNK_ROWS, Kind, Row, Table, Value};
use crate::store::verify;

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Text(text) => ValueRef::Text(text.as_bytes()),
            Value::Integer(n) => ValueRef::Integer(*n),
            Value::Bytes(bytes) => ValueRef::Blob(bytes),
        }))
    }
}

/// A database file, as a copy's source or target.
pub(in crate::store) struct File {
    conn: Connection,
    path: PathBuf,
    /// A target's temporary name, until it is committed.
    partial: Option<PathBuf>,
}

impl File {
    /// The file at `path`, read in one snapshot from now on; never written.
    pub(in crate::store) fn source(path: &Path) -> Result<Self, String> {
        let at = |e: String| format!("{}: {e}", path.display());
        let conn = open::open_reader(path).map_err(|e| at(e.to_string()))?;
        conn.execute_batch("BEGIN; SELECT count(*) FROM audit_events;")
            .map_err(|e| at(e.to_string()))?;
        // The snapshot is fixed now; syncing the WAL makes every commit it shows durable.
        open::sync_wal(path)?;
        Ok(Self {
            conn,
            path: path.to_owned(),
            partial: None,
        })
    }

    /// A new file at `path`, written under a temporary name until [`File::commit`]. An
    /// existing file is never overwritten.
    pub(in crate::store) fn create(path: &Path) -> Result<Self, String> {
        if path.exists() {
            return Err(format!(
                "{} exists; copy writes only a new file, choose a new name",
                path.display()
            ));
        }
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        // Made here, exclusively: a copy to the same name that is still running keeps its
        // files, and one that was killed left them for the user to look at and remove.
        if let Err(e) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&partial)
        {
            return Err(if e.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "{} exists: another copy to {} is running, or one was stopped midway \
                     (then remove it, and its -wal and -shm files)",
                    partial.display(),
                    path.display()
                )
            } else {
                format!("{}: {e}", partial.display())
            });
        }
        let at = |e: String| format!("{}: {e}", partial.display());
        let conn = open::open_writer(&partial).map_err(|e| at(e.to_string()))?;
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| at(e.to_string()))?;
        Ok(Self {
            conn,
            path: path.to_owned(),
            partial: Some(partial),
        })
    }

    pub(in crate::store) fn rows(
        &self,
        table: &Table,
        after: Option<&[Value]>,
    ) -> Result<Vec<Row>, String> {
        let columns: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
        let key = columns[..table.key].join(", ");
        let mut sql = format!("SELECT {} FROM {}", columns.join(", "), table.name);
        if after.is_some() {
            let marks: Vec<String> = (1..=table.key).map(|i| format!("?{i}")).collect();
            sql.push_str(&format!(" WHERE ({key}) > ({})", marks.join(", ")));
        }
        sql.push_str(&format!(" ORDER BY {key} LIMIT {CHUNK_ROWS}"));
        let failed = |e: rusqlite::Error| format!("{}: {}: {e}", self.path.display(), table.name);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(failed)?;
        let params = rusqlite::params_from_iter(after.unwrap_or(&[]));
        let mut rows = stmt.query(params).map_err(failed)?;
        let mut read = Vec::with_capacity(CHUNK_ROWS);
        while let Some(row) = rows.next().map_err(failed)? {
            let mut values = Vec::with_capacity(table.columns.len());
            for (i, (_, kind)) in table.columns.iter().enumerate() {
                let value = match kind {
                    Kind::Text | Kind::Amount => {
                        row.get::<_, Option<String>>(i).map(|v| v.map(Value::Text))
                    }
                    Kind::Integer => row.get::<_, Option<i64>>(i).map(|v| v.map(Value::Integer)),
                    Kind::Bytes => row
                        .get::<_, Option<Vec<u8>>>(i)
                        .map(|v| v.map(Value::Bytes)),
                };
                values.push(value.map_err(failed)?.unwrap_or(Value::Null));
            }
            read.push(values);
        }
        Ok(read)
    }

    pub(in crate::store) fn insert(&self, table: &Table, rows: &[Row]) -> Result<(), String> {
        let columns: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            table.name,
            columns.join(", "),
            marks.join(", ")
        );
        let failed = |e: rusqlite::Error| format!("{}: {}: {e}", self.path.display(), table.name);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(failed)?;
        for row in rows {
            stmt.execute(rusqlite::params_from_iter(row))
                .map_err(failed)?;
        }
        Ok(())
    }

    pub(in crate::store) fn count(&self, table: &Table) -> Result<u64, String> {
        self.conn
            .query_row(&format!("SELECT count(*) FROM {}", table.name), [], |row| {
                row.get::<_, i64>(0)
            })
            .map(i64::unsigned_abs)
            .map_err(|e| format!("{}: {}: {e}", self.path.display(), table.name))
    }

    /// Commits a target (once it has checked out), closes it self-contained (rollback-journal
    /// mode, no `-wal` beside it) and gives it its name.
    pub(in crate::store) fn commit(&mut self) -> Result<(), String> {
        let Some(partial) = self.partial.clone() else {
            return Err("only a copy's target is committed".into());
        };
        let at = |e: String| format!("{}: {e}", partial.display());
        self.conn
            .execute_batch("COMMIT")
            .map_err(|e| at(e.to_string()))?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))
            .map_err(|e| at(e.to_string()))?;
        if !mode.eq_ignore_ascii_case("delete") {
            return Err(at(format!("stays in {mode} mode")));
        }
        // Closed for good: the copy is checked before its commit, and read no more.
        let closed = Connection::open_in_memory().map_err(|e| e.to_string())?;
        std::mem::replace(&mut self.conn, closed)
            .close()
            .map_err(|(_, e)| at(e.to_string()))?;
        open::publish(&partial, &self.path)?;
        self.partial = None;
        Ok(())
    }

    pub(in crate::store) fn head(&self) -> Result<Head, String> {
        self.conn
            .query_row(
                "SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1",
                [],
                |row| {
                    Ok(Head {
                        seq: row.get(0)?,
                        hash: row.get(1)?,
                    })
                },
            )
            .optional()
            .map(|head| head.unwrap_or_else(Head::genesis))
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Verifies the chain as this file's open transaction (if any) sees it.
    pub(in crate::store) fn verify(&mut self) -> Result<Head, String> {
        verify::verify(&mut self.conn).map_err(|e| match &self.partial {
            Some(_) => format!("{}: {e}; nothing was kept", self.path.display()),
            None => format!("{}: {e}", self.path.display()),
        })
    }
}

impl Drop for File {
    /// A target given up before its commit leaves no file behind.
    fn drop(&mut self) {
        if let Some(partial) = &self.partial {
            for suffix in ["", "-wal", "-shm"] {
                let mut file = partial.as_os_str().to_owned();
                file.push(suffix);
                let _ = std::fs::remove_file(file);
            }
        }
    }
}
