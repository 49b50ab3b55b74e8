//! `tenantd backup`: a consistent, self-contained copy of the database, taken while the
//! server runs.
//!
//! `VACUUM INTO` copies one read snapshot (WAL lets the writer go on meanwhile) into a new
//! file that needs no `-wal` beside it. The copy is written under a temporary name, stripped
//! of the idempotency records (they hold tenant tokens in plain text, and a backup outlives
//! their 24 hours), checked (integrity and audit chain), fsynced, and only then linked to its
//! final name, so a half-written backup never carries the name of a good one. A restored
//! backup therefore replays no earlier `Idempotency-Key`. The source's WAL is synced after the
//! copy, so a backup never holds a commit that the server had not yet made durable.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::open;
use crate::store::BackupSummary as Summary;
use crate::store::verify;

/// Writes the backup of `db_path` to the new file `to`.
pub(super) fn run(db_path: &Path, to: &Path) -> Result<Summary, String> {
    if to.exists() {
        return Err(format!(
            "{} exists; a backup never overwrites a file, choose a new name",
            to.display()
        ));
    }
    let source = open::open_reader(db_path).map_err(|e| format!("{}: {e}", db_path.display()))?;
    let partial = partial_path(to)?;
    remove_stale_partials(to);
    let result = write_checked(&source, db_path, &partial, to);
    if result.is_err() {
        let _ = fs::remove_file(&partial);
    }
    result
}

/// Removes what an earlier backup to the same name left behind when it was killed between
/// the copy and the scrub: such a file may still hold idempotency records.
fn remove_stale_partials(to: &Path) {
    let (Some(dir), Some(name)) = (to.parent(), to.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut prefix = name.to_os_string();
    prefix.push(".partial-");
    let prefix = prefix.to_string_lossy().into_owned();
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            match fs::remove_file(entry.path()) {
                Ok(()) => log::warn!(
                    "removed {}, left by an interrupted backup",
                    entry.path().display()
                ),
                Err(e) => log::warn!("cannot remove {}: {e}", entry.path().display()),
            }
        }
    }
}

fn partial_path(to: &Path) -> Result<PathBuf, String> {
    let name = to
        .file_name()
        .ok_or_else(|| format!("{} does not name a file", to.display()))?;
    let mut partial = name.to_os_string();
    partial.push(format!(".partial-{}", std::process::id()));
    Ok(to.with_file_name(partial))
}

fn write_checked(
    source: &rusqlite::Connection,
    source_path: &Path,
    partial: &Path,
    to: &Path,
) -> Result<Summary, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", partial.display());
    // Created empty with mode 0600 first: VACUUM INTO fills an empty file and keeps its mode.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(partial)
        .map_err(|e| at(&e))?;
    let target = partial
        .to_str()
        .ok_or_else(|| format!("{} is not a UTF-8 path", partial.display()))?;
    source
        .execute("VACUUM INTO ?1", [target])
        .map_err(|e| at(&e))?;
    // The snapshot was taken inside `VACUUM INTO`: every frame it read is in the WAL by now.
    open::sync_wal(source_path)?;
    scrub(partial).map_err(|e| at(&e))?;
    let summary = check(partial).map_err(|e| at(&e))?;
    open::publish(partial, to)?;
    Ok(summary)
}

/// Erases the idempotency records from the copy, leaving no trace of them in the file: the
/// copy is in rollback-journal mode, the rows are deleted with `secure_delete`, and `VACUUM`
/// rebuilds the file without the freed pages.
fn scrub(copy: &Path) -> Result<(), String> {
    let conn =
        rusqlite::Connection::open_with_flags(copy, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| e.to_string())?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))
        .map_err(|e| e.to_string())?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(format!("the copy stays in {mode} mode"));
    }
    conn.execute_batch(
        "PRAGMA secure_delete = ON;
         DELETE FROM idempotency_keys;
         VACUUM;",
    )
    .map_err(|e| e.to_string())
}

/// Opens the copy on its own and checks it as a restore would.
fn check(copy: &Path) -> Result<Summary, String> {
    let mut conn = open::open_reader(copy).map_err(|e| e.to_string())?;
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if integrity != "ok" {
        return Err(format!("the copy fails its integrity check: {integrity}"));
    }
    let head = verify::verify(&mut conn).map_err(|e| e.to_string())?;
    let kept: i64 = conn
        .query_row("SELECT count(*) FROM idempotency_keys", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if kept != 0 {
        return Err(format!("the copy still holds {kept} idempotency records"));
    }
    let tenants: i64 = conn
        .query_row("SELECT count(*) FROM tenants", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    Ok(Summary {
        tenants: tenants.unsigned_abs(),
        head,
    })
}
