//! Opening the SQLite file: creation with mode 0600, the durability pragmas, and migrations.
//!
//! `schema.sql` holds every migration in order, each starting with a line
//! `-- migration N: …`; applying migration `N` takes the schema to version `N`. A new version
//! appends a section; a released section never changes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// How long a statement waits for a lock held by another connection or process before it
/// gives up (and the request gets `503`).
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_millis(1000);

/// Bytes of WAL file kept after the log is reset; more is truncated.
pub(super) const WAL_BYTES_KEPT: i64 = 64 * 1024 * 1024;

/// Every migration, in order, as one file.
const SCHEMA: &str = include_str!("../../../schema.sql");

/// The line that starts each migration in [`SCHEMA`].
const MIGRATION_MARKER: &str = "\n-- migration ";

/// The migrations, in order: `MIGRATIONS[i]` takes the schema to version `i + 1`.
pub(super) static MIGRATIONS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| {
        // Each section runs from its marker line to the next one; what comes before the first
        // marker is the file's own header comment.
        let starts: Vec<usize> = SCHEMA
            .match_indices(MIGRATION_MARKER)
            .map(|(at, _)| at + 1)
            .collect();
        let ends = starts.iter().skip(1).copied().chain([SCHEMA.len()]);
        starts
            .iter()
            .zip(ends)
            .map(|(&start, end)| &SCHEMA[start..end])
            .collect()
    });

/// The schema version this build writes and reads.
pub(super) fn schema_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Why the file could not be opened.
#[derive(Debug)]
pub(super) enum OpenError {
    /// The file system refused, said in a sentence.
    Io(String),
    /// SQLite refused.
    Sqlite(rusqlite::Error),
    /// The file was written by a newer tenantd.
    TooNew {
        /// Its schema version.
        found: i64,
    },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(cause) => f.write_str(cause),
            Self::Sqlite(e) => write!(f, "{e}"),
            Self::TooNew { found } => write!(
                f,
                "the database has schema version {found}, newer than this tenantd's {}; \
                 run a newer tenantd",
                schema_version()
            ),
        }
    }
}

impl From<rusqlite::Error> for OpenError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

/// Opens (creating if need be) the database for writing, and migrates it.
pub(super) fn open_writer(path: &Path) -> Result<Connection, OpenError> {
    create_private(path)?;
    align_journal_modes(path);
    open_writer_connection(path).map_err(|e| match e {
        OpenError::Sqlite(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen) => {
            OpenError::Io(format!(
                "{e}: its directory must be writable for the -wal and -shm files \
                 (is the file system read-only or full?)"
            ))
        }
        other => other,
    })
}

fn open_writer_connection(path: &Path) -> Result<Connection, OpenError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    configure_writer(&conn, path)?;
    migrate(&conn)?;
    Ok(conn)
}

/// Opens the writer's connection again, after the one before it had to be given up: only the
/// file that is already there, at exactly this build's schema version, and nothing is
/// created or migrated (a file replaced or removed meanwhile is an error, not a new start).
pub(super) fn reopen_writer(path: &Path) -> Result<Connection, OpenError> {
    let conn = open_existing(path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    let version = user_version(&conn)?;
    if version != schema_version() {
        return Err(OpenError::Io(format!(
            "{}: schema version {version} where {} was open; not reopening",
            path.display(),
            schema_version()
        )));
    }
    configure_writer(&conn, path)?;
    Ok(conn)
}

/// The writer's pragmas: the lock wait, WAL, durable commits, erasure that leaves no trace.
fn configure_writer(conn: &Connection, path: &Path) -> Result<(), OpenError> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // WAL lets readers work beside the writer; FULL makes every commit durable on return
    // (migrations included). Once serving, the writer leaves that sync to its sync thread
    // (`synchronous = NORMAL`, see the writer).
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Io(format!(
            "{}: cannot switch to WAL mode (got {mode})",
            path.display()
        )));
    }
    // secure_delete overwrites what is deleted, so an erased idempotency record (which holds
    // a tenant token) does not linger in a free page of the file.
    // temp_store = MEMORY keeps each command's savepoint journal in memory: by default it
    // spills to a temporary file past 64 KiB, which a batch of commands does, and every page
    // a savepoint saves is then written to disk once more.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;
         PRAGMA secure_delete = ON;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -{WRITER_CACHE_KIB};"
    ))?;
    conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
    // A WAL emptied by a checkpoint is cut back to this size rather than kept at its peak.
    conn.query_row(
        &format!("PRAGMA journal_size_limit = {WAL_BYTES_KEPT}"),
        [],
        |_| Ok(()),
    )?;
    Ok(())
}

/// Page cache of the write connection, in KiB: room for the pages one batch of writes
/// changes. A batch of 1,000 charges over 1,000 budgets changes a leaf of the entries' index
/// for nearly every one; with SQLite's default 2 MiB those spill to the WAL before the commit
/// (and are written twice) and are read back.
pub(super) const WRITER_CACHE_KIB: i64 = 8192;

/// Prepared statements the write connection keeps, the least used given up past it: every
/// statement the writer runs, with each size of the many-row inserts of a batch's entries and
/// audit rows (`store::write::many`). At rusqlite's default of 16 a batch of spends pushed
/// statements out that the next command prepared again.
pub(super) const WRITER_STATEMENTS: usize = 128;

/// Page cache of each read connection, in KiB. It holds the interior pages of the tenants
/// table up to a few million tenants, so a read of a cold tenant costs one page from the OS
/// (its leaf) rather than two or three.
pub(super) const READER_CACHE_KIB: i64 = 4096;

/// Opens an existing database for reading only; it is never created here.
pub(super) fn open_reader(path: &Path) -> Result<Connection, OpenError> {
    let conn = open_existing(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.execute_batch(&format!("PRAGMA cache_size = -{READER_CACHE_KIB};"))?;
    Ok(conn)
}

/// The path of the WAL beside the database at `db`.
pub(super) fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Makes every frame written to the WAL of the database at `db` so far durable: what a read
/// snapshot taken before the call can show. A running server answers a write only once its
/// frames are synced, but commits them (and makes them visible) first, so a snapshot taken
/// from another process may hold a commit a power loss would still take back. A copy of such a
/// snapshot calls this before it is kept. No WAL (no server has written since the last clean
/// close) needs no sync.
pub(super) fn sync_wal(db: &Path) -> Result<(), String> {
    let wal = wal_path(db);
    match File::open(&wal) {
        Ok(file) => file
            .sync_data()
            .map_err(|e| format!("{}: {e}", wal.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", wal.display())),
    }
}

/// Opens an existing database for checkpoints: writable, never created.
pub(super) fn open_checkpointer(path: &Path) -> Result<Connection, OpenError> {
    let conn = open_existing(path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    conn.execute_batch("PRAGMA synchronous = FULL;")?;
    Ok(conn)
}

fn open_existing(path: &Path, access: OpenFlags) -> Result<Connection, OpenError> {
    if !path.exists() {
        return Err(OpenError::Io(format!("{}: no such file", path.display())));
    }
    let conn = Connection::open_with_flags(
        path,
        access | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let version = user_version(&conn)?;
    if version > schema_version() {
        return Err(OpenError::TooNew { found: version });
    }
    Ok(conn)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
}

/// Brings the schema to [`schema_version()`], each step in its own transaction.
fn migrate(conn: &Connection) -> Result<(), OpenError> {
    let found = user_version(conn)?;
    if found > schema_version() {
        return Err(OpenError::TooNew { found });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = index as i64 + 1;
        if found > 0 {
            // An upgrade may copy whole tables: say so before it starts.
            log::info!(
                "migrating the database schema from version {} to {version}",
                version - 1
            );
        }
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {version};\nCOMMIT;"
        ))
        .inspect_err(|_| {
            // Leave no transaction open behind a failed step.
            let _ = conn.execute_batch("ROLLBACK");
        })?;
        log::info!("database schema migrated to version {version}");
    }
    Ok(())
}

/// Creates `path` with mode 0600 if it does not exist, and makes its directory entry
/// durable. SQLite gives its `-wal` and `-shm` files the same mode.
fn create_private(path: &Path) -> Result<(), OpenError> {
    let io_error = |e: io::Error| OpenError::Io(format!("{}: {e}", path.display()));
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => {
            file.sync_all().map_err(io_error)?;
            sync_parent_dir(path).map_err(io_error)?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)
                .map_err(io_error)?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                log::warn!(
                    "{} has mode {:o}; it holds token hashes, consider chmod 600",
                    path.display(),
                    mode & 0o777
                );
            }
        }
        Err(e) => return Err(io_error(e)),
    }
    Ok(())
}

/// Gives leftover `-wal` and `-shm` files the database file's mode. SQLite creates them with
/// the database's mode, so a run on a read-only database file leaves read-only ones behind,
/// and they would keep the database read-only after its own write permission is back.
fn align_journal_modes(path: &Path) {
    let Ok(mode) = std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777) else {
        return;
    };
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        let side = Path::new(&side);
        let Ok(meta) = std::fs::metadata(side) else {
            continue;
        };
        if meta.permissions().mode() & 0o777 != mode
            && let Err(e) = std::fs::set_permissions(side, std::fs::Permissions::from_mode(mode))
        {
            log::warn!("{}: cannot set mode {mode:o}: {e}", side.display());
        }
    }
}

/// Fsyncs the directory holding `path`, so a new file's name survives a crash.
pub(super) fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Gives the finished file `partial` its name `to`: fsynced, hard-linked (a link, unlike a
/// rename, fails rather than replace a file that appeared at the name meanwhile), the
/// temporary name removed, and the directory fsynced.
pub(super) fn publish(partial: &Path, to: &Path) -> Result<(), String> {
    let at = |path: &Path, e: io::Error| format!("{}: {e}", path.display());
    File::open(partial)
        .and_then(|f| f.sync_all())
        .map_err(|e| at(partial, e))?;
    std::fs::hard_link(partial, to).map_err(|e| at(to, e))?;
    std::fs::remove_file(partial).map_err(|e| at(partial, e))?;
    sync_parent_dir(to).map_err(|e| at(to, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_is_synced_when_there_is_one_and_its_absence_is_no_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        assert_eq!(sync_wal(&path), Ok(()), "no WAL: nothing to sync");
        let conn = open_writer(&path).expect("open");
        assert!(wal_path(&path).exists(), "a writer keeps its WAL");
        assert_eq!(sync_wal(&path), Ok(()));
        drop(conn);
    }

    #[test]
    fn a_new_database_is_private_migrated_and_durable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let conn = open_writer(&path).expect("open");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(user_version(&conn).expect("version"), schema_version());
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("pragma");
        assert_eq!(sync, 2, "synchronous must be FULL");
        drop(conn);
        // A second open finds the schema in place and applies nothing again.
        let conn = open_writer(&path).expect("reopen");
        assert_eq!(user_version(&conn).expect("version"), schema_version());
    }

    /// Migration 12 indexes the levels' entries already written in `ledger_levels` and sets
    /// the sweep's mark to the last entry, so that none is in the tail.
    #[test]
    fn migration_12_indexes_the_levels_entries_already_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        for (index, sql) in MIGRATIONS.iter().enumerate().take(11) {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {};", index + 1))
                .expect("a migration before 12");
        }
        // `audit verify` reads a file of version 11 as it is, without the index.
        let mut reading = Connection::open(dir.path().join("t.db")).expect("open");
        crate::store::verify::verify(&mut reading).expect("a file of version 11 verifies");
        let entry = |id: &str, budget: &str, via: Option<&str>| {
            conn.execute(
                "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, occurred_at, \
                 balance_atomic, available_atomic, via_budget_id) \
                 VALUES (?1, ?2, 'charge', '1', '2026-12-01T00:00:00Z', '9', '9', ?3)",
                rusqlite::params![id, budget, via],
            )
            .expect("an entry");
        };
        entry("ent_1", "bud_key", None);
        entry("ent_2", "bud_team", Some("bud_key"));
        entry("ent_3", "bud_org", Some("bud_key"));
        entry("ent_4", "bud_org", None);
        migrate(&conn).expect("migration 12");
        let levels: Vec<(String, String)> = conn
            .prepare("SELECT budget_id, entry_id FROM ledger_levels")
            .expect("prepare")
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        let pair = |b: &str, e: &str| (b.to_owned(), e.to_owned());
        assert_eq!(
            levels,
            [pair("bud_org", "ent_3"), pair("bud_team", "ent_2")]
        );
        let through: String = conn
            .query_row("SELECT through FROM ledger_levels_swept", [], |r| r.get(0))
            .expect("the mark");
        assert_eq!(through, "ent_4");
    }

    #[test]
    fn sqlite_is_built_as_the_cargo_config_asks() {
        // `.cargo/config.toml`: no memory statistics (a global mutex on each allocation) and
        // 400 lookaside slots a connection. A build that lost those flags is slower, not wrong,
        // so only this notices.
        let conn = Connection::open_in_memory().expect("a database");
        let mut options = conn.prepare("PRAGMA compile_options").expect("prepare");
        let options: Vec<String> = options
            .query_map([], |row| row.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("options");
        for wanted in ["DEFAULT_MEMSTATUS=0", "DEFAULT_LOOKASIDE=1200,400"] {
            assert!(
                options.iter().any(|o| o == wanted),
                "{wanted} not among {options:?}"
            );
        }
    }

    #[test]
    fn a_database_from_a_newer_version_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let conn = open_writer(&path).expect("open");
        conn.execute_batch("PRAGMA user_version = 99")
            .expect("bump");
        drop(conn);
        assert!(matches!(
            open_writer(&path),
            Err(OpenError::TooNew { found: 99 })
        ));
    }

    #[test]
    fn the_schema_refuses_erasing_and_rewriting_history() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = open_writer(&dir.path().join("t.db")).expect("open");
        conn.execute_batch(
            "INSERT INTO tenants VALUES ('ten_A', 'a', 'active', '1', zeroblob(32), 't', NULL);",
        )
        .expect("insert");
        conn.execute_batch(&format!(
            "INSERT INTO audit_events VALUES (1, 't', 'admin', 'tenant.created', 'ten_A', '{{}}', \
             '{}', 'h')",
            crate::audit::GENESIS_HASH
        ))
        .expect("append");
        for sql in [
            "DELETE FROM tenants",
            "UPDATE tenants SET name = 'b'",
            "UPDATE audit_events SET actor = 'x'",
            "DELETE FROM audit_events",
            "INSERT INTO audit_events VALUES (5, 't', 'admin', 'a', 'ten_A', '{}', 'x', 'y')",
        ] {
            assert!(conn.execute_batch(sql).is_err(), "{sql} must be refused");
        }
        conn.execute_batch("UPDATE tenants SET state = 'tombstoned', tombstoned_at = 't'")
            .expect("tombstoning is allowed");
        for sql in [
            "UPDATE tenants SET state = 'active', tombstoned_at = NULL",
            "UPDATE tenants SET tombstoned_at = 'u'",
        ] {
            assert!(
                conn.execute_batch(sql).is_err(),
                "a tombstone is final: {sql}"
            );
        }
        for bad in [
            "''",
            "'1a'",
            "'-1'",
            "'1 '",
            "'1234567890123456789012345678901234567890'",
        ] {
            let sql = format!(
                "INSERT INTO tenants VALUES ('ten_B', 'b', 'active', {bad}, '1', zeroblob(32), 't', NULL)"
            );
            assert!(
                conn.execute_batch(&sql).is_err(),
                "amount {bad} must be refused"
            );
        }
    }
}
