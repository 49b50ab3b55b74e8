//! The SQLite side of `tenantd copy`: a file opened as the source, in one read snapshot, or a
//! new file made as the target, written in one transaction under a temporary name and given
//! its own only once the copy has checked out. The rows themselves are moved by the copy,
//! through the seam (`store::copy`).

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::open;

/// The file at `path`, read in one snapshot from now on; never written.
pub(in crate::store) fn source(path: &Path) -> Result<Connection, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let conn = open::open_reader(path).map_err(|e| at(e.to_string()))?;
    conn.execute_batch("BEGIN; SELECT count(*) FROM audit_events;")
        .map_err(|e| at(e.to_string()))?;
    // The snapshot is fixed now; syncing the WAL makes every commit it shows durable.
    open::sync_wal(path)?;
    Ok(conn)
}

/// A copy's new file: the name it gets, and the temporary name it is written under until
/// [`File::commit`]. A file given up before then is removed, with its `-wal` and `-shm`.
pub(in crate::store) struct File {
    path: PathBuf,
    /// The temporary name, until the file is committed.
    partial: Option<PathBuf>,
}

impl File {
    /// A new file at `path`, written under a temporary name until [`File::commit`], and its
    /// connection, in a write transaction. An existing file is never overwritten.
    pub(in crate::store) fn create(path: &Path) -> Result<(Connection, Self), String> {
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
        let file = Self {
            path: path.to_owned(),
            partial: Some(partial),
        };
        Ok((conn, file))
    }

    /// Commits the file's transaction on `conn` (once the copy has checked out), closes it
    /// self-contained (rollback-journal mode, no `-wal` beside it) and gives it its name.
    pub(in crate::store) fn commit(mut self, conn: &mut Connection) -> Result<(), String> {
        let Some(partial) = self.partial.clone() else {
            return Err("the copy is committed already".into());
        };
        let at = |e: String| format!("{}: {e}", partial.display());
        conn.execute_batch("COMMIT")
            .map_err(|e| at(e.to_string()))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))
            .map_err(|e| at(e.to_string()))?;
        if !mode.eq_ignore_ascii_case("delete") {
            return Err(at(format!("stays in {mode} mode")));
        }
        // Closed for good: the copy is checked before its commit, and read no more.
        let closed = Connection::open_in_memory().map_err(|e| e.to_string())?;
        std::mem::replace(conn, closed)
            .close()
            .map_err(|(_, e)| at(e.to_string()))?;
        open::publish(&partial, &self.path)?;
        self.partial = None;
        Ok(())
    }
}

impl Drop for File {
    /// A file given up before its commit leaves nothing behind.
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
