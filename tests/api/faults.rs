//! Storage faults: a full disk, read-only storage, and a database locked by another process.
//!
//! The disk is a small tmpfs mounted for the test, so "full" is the file system's own
//! ENOSPC, not a simulation; the read-only database is a file the server's (unprivileged)
//! user may not write. Both need root to set up, as CI has. The lock is taken by the test's
//! own SQLite connection, and needs nothing.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::helpers::*;
use crate::wire::{Response, request};

/// Creates a full-disk test tries before it gives up waiting for the disk to fill.
const FILL_CREATES_MAX: usize = 20_000;

/// A tmpfs of a fixed size, unmounted when dropped.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = TempDir::new().expect("a mount point");
        let out = run(Command::new("mount").args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0755"),
            "tenantd-test",
            path_str(dir.path()),
        ]));
        assert!(
            out.status.success(),
            "mounting a {size} tmpfs needs root (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, options: &str) {
        let out = run(Command::new("mount").args([
            "-o",
            &format!("remount,{options}"),
            path_str(self.path()),
        ]));
        assert!(
            out.status.success(),
            "remount,{options}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = run(Command::new("umount").arg("-l").arg(self.path()));
    }
}

/// A database on a tmpfs of `size`, with its admin token kept off that disk.
struct Disk {
    disk: Tmpfs,
    _outside: TempDir,
    token: String,
    token_file: PathBuf,
    db: PathBuf,
    log: LogBuffer,
}

impl Disk {
    fn new(size: &str) -> Self {
        let disk = Tmpfs::mount(size);
        let outside = TempDir::new().expect("a token directory");
        let token = random_admin_token();
        let token_file = outside.path().join("token");
        write_private(&token_file, &token);
        let db = disk.path().join("tenantd.db");
        Self {
            disk,
            _outside: outside,
            token,
            token_file,
            db,
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl Disk {
    /// A server on this disk's database, as root.
    fn serve(&self) -> Running {
        serve(&[], &self.db, &self.token_file, &self.log)
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("running a system command")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// A server that is killed if the test ends without stopping it (a failed assertion, say).
struct Running(Server);

impl std::ops::Deref for Running {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

/// A server on `db` with the admin token in `token_file`, started through `prefix` (for
/// example `setpriv` to drop root), its stderr in `log`.
fn serve(prefix: &[&str], db: &Path, token_file: &Path, log: &LogBuffer) -> Running {
    let mut cmd = match prefix.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(BIN);
            cmd
        }
        None => Command::new(BIN),
    };
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .arg("--admin-token-file")
        .arg(token_file)
        .env_remove("ADMIN_TOKEN")
        .env_remove("TENANTD_ADMIN_TOKEN_FILE")
        .env("RUST_LOG", "info");
    Running(start_server(cmd, log))
}

fn stop(server: &mut Running) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(server.0.child.id().to_string())
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = wait_exit(&mut server.0.child, Duration::from_secs(20)).expect("a timely exit");
    assert_eq!(
        exit.code(),
        Some(0),
        "a graceful stop exits 0 after the fault"
    );
}

/// Creates a tenant of `name` with a deposit of 1000 through `addr`, as `token`'s holder.
fn create(addr: &str, token: &str, name: &str) -> Response {
    let (auth, body) = (bearer(token), tenant_body(name, "1000"));
    send(addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[])
}

fn read(addr: &str, token: &str, id: &str) -> Response {
    request(
        addr,
        "GET",
        &format!("/v1/tenants/{id}"),
        &[("Authorization", &bearer(token))],
        None,
    )
}

/// Fills the file system holding `dir` to the last byte with one file, and returns it.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = File::create(&path).expect("the filler file");
    let block = vec![0xa5u8; 64 * 1024];
    let mut size = block.len();
    loop {
        match file.write(&block[..size]) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::StorageFull && size > 1 => size /= 2,
            Err(e) if e.kind() == ErrorKind::StorageFull => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    let _ = file.sync_all();
    path
}

/// Checks the database after a fault: every acknowledged tenant is there, nothing that was
/// refused is, every tenant has exactly its one creation event, and the chain verifies.
fn assert_nothing_lost(db: &Path, acknowledged: &[(String, String)], refused: &[String]) {
    let verify = audit_verify(db);
    assert_eq!(verify.code, Some(0), "audit verify: {verify:?}");
    let conn = open_ro(db);
    for (id, name) in acknowledged {
        let stored: String = conn
            .query_row("SELECT name FROM tenants WHERE id = ?1", [id], |r| r.get(0))
            .unwrap_or_else(|e| panic!("acknowledged tenant {id} is missing: {e}"));
        assert_eq!(&stored, name, "tenant {id} keeps its name");
    }
    for name in refused {
        let n = count(
            &conn,
            &format!("SELECT count(*) FROM tenants WHERE name = '{name}'"),
        );
        assert_eq!(n, 0, "the refused create {name:?} left nothing behind");
    }
    let orphans = count(
        &conn,
        "SELECT count(*) FROM tenants t WHERE (SELECT count(*) FROM audit_events a \
         WHERE a.tenant_id = t.id AND a.action = 'tenant.created') != 1",
    );
    assert_eq!(orphans, 0, "every tenant has exactly one creation event");
    let events = count(&conn, "SELECT count(*) FROM audit_events");
    let tenants = count(&conn, "SELECT count(*) FROM tenants");
    assert_eq!(events, tenants, "no event without its tenant");
}

/// A full disk: writes get `503 unavailable` with `Retry-After`, reads go on, and writes
/// succeed again once room returns, with nothing half-written and the chain intact.
#[test]
fn a_full_disk_refuses_writes_keeps_reads_and_recovers() {
    let fs = Disk::new("2m");
    let mut server = fs.serve();
    let (disk, token, db, log) = (&fs.disk, fs.token.clone(), fs.db.clone(), &fs.log);
    let addr = server.addr.clone();

    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let name = format!("before-full-{i}");
        let response = create(&addr, &token, &name);
        assert_eq!(response.status, 201, "{}", response.describe());
        acknowledged.push((tenant_id(&response.json()), name));
    }

    let filler = fill(disk.path());
    let mut refused = Vec::new();
    let mut full = None;
    for i in 0..FILL_CREATES_MAX {
        let name = format!("while-full-{i}");
        let response = create(&addr, &token, &name);
        match response.status {
            201 => acknowledged.push((tenant_id(&response.json()), name)),
            503 => {
                refused.push(name);
                full = Some(response);
                break;
            }
            other => panic!(
                "a create on a full disk answered {other}: {}",
                response.describe()
            ),
        }
    }
    let full =
        full.unwrap_or_else(|| panic!("the disk filled up within {FILL_CREATES_MAX} creates"));
    assert_problem(&full, 503, "unavailable", "a create on a full disk");
    assert_eq!(
        full.header("retry-after"),
        Some(RETRY_AFTER_S),
        "503 says when to retry"
    );

    for (id, name) in acknowledged.iter().take(3) {
        let response = read(&addr, &token, id);
        assert_eq!(
            response.status,
            200,
            "a read while the disk is full: {}",
            response.describe()
        );
        assert_eq!(response.json()["name"], name.as_str());
    }
    let health = request(&addr, "GET", "/healthz", &[], None);
    assert_eq!(health.status, 200, "the process lives on");

    fs::remove_file(&filler).expect("making room");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut recovered = false;
    let mut attempt = 0;
    while Instant::now() < deadline && !recovered {
        let name = format!("after-room-{attempt}");
        attempt += 1;
        let response = create(&addr, &token, &name);
        match response.status {
            201 => {
                acknowledged.push((tenant_id(&response.json()), name));
                recovered = true;
            }
            503 => {
                refused.push(name);
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!(
                "a create after room returned answered {other}: {}",
                response.describe()
            ),
        }
    }
    assert!(
        recovered,
        "writes succeed again within 10 s of room returning; log:\n{}",
        log.lock().expect("log").join("\n")
    );

    eprintln!(
        "full disk: {} creates acknowledged, {} refused with 503, writes back after {attempt} attempts",
        acknowledged.len(),
        refused.len()
    );
    stop(&mut server);
    assert_nothing_lost(&db, &acknowledged, &refused);
}

/// A database file the server may only read: it starts, serves reads, and refuses every
/// write with `503` (no crash); given its write permission back, it takes writes again.
#[test]
fn a_read_only_database_file_serves_reads_and_refuses_writes() {
    let dir = TempDir::new().expect("a data directory");
    let token = random_admin_token();
    let token_file = dir.path().join("token");
    write_private(&token_file, &token);
    let db = dir.path().join("tenantd.db");
    // Root ignores file modes, so the server runs as `nobody`, owning its directory.
    let out = run(Command::new("chown").args(["-R", "nobody:nogroup", path_str(dir.path())]));
    assert!(
        out.status.success(),
        "chown: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let as_nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
    ];
    let log: LogBuffer = Arc::new(Mutex::new(Vec::new()));

    let mut server = serve(&as_nobody, &db, &token_file, &log);
    let response = create(&server.addr, &token, "written-before");
    assert_eq!(response.status, 201, "{}", response.describe());
    let mut acknowledged = vec![(tenant_id(&response.json()), "written-before".to_owned())];
    stop(&mut server);

    fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o400))
        .expect("chmod 0400");
    let mut server = serve(&as_nobody, &db, &token_file, &log);
    let addr = server.addr.clone();
    let id = acknowledged[0].0.clone();
    let id = id.as_str();
    let response = read(&addr, &token, id);
    assert_eq!(
        response.status,
        200,
        "a read of a read-only database: {}",
        response.describe()
    );
    let refused = create(&addr, &token, "refused-read-only");
    assert_problem(
        &refused,
        503,
        "unavailable",
        "a create on a read-only database",
    );
    assert_eq!(refused.header("retry-after"), Some(RETRY_AFTER_S));
    let tombstone = request(
        &addr,
        "DELETE",
        &format!("/v1/tenants/{id}"),
        &[("Authorization", &bearer(&token))],
        None,
    );
    assert_problem(
        &tombstone,
        503,
        "unavailable",
        "a tombstone on a read-only database",
    );
    stop(&mut server);

    fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod 0600");
    let mut server = serve(&as_nobody, &db, &token_file, &log);
    let response = create(&server.addr, &token, "written-after");
    assert_eq!(
        response.status,
        201,
        "writes resume: {}",
        response.describe()
    );
    acknowledged.push((tenant_id(&response.json()), "written-after".to_owned()));
    let still = read(&server.addr, &token, id);
    assert_eq!(
        still.json()["state"],
        "active",
        "the refused tombstone changed nothing"
    );
    stop(&mut server);
    assert_nothing_lost(&db, &acknowledged, &["refused-read-only".to_owned()]);
}

/// A read-only file system at start-up: the kernel refuses to remount a file system
/// read-only under open files, so this is where it meets the server. It refuses to start
/// with a message that names the problem (exit 1), and leaves the data as it was.
#[test]
fn a_read_only_file_system_at_start_up_is_refused_cleanly() {
    let fs = Disk::new("4m");
    let mut server = fs.serve();
    let (disk, token, db) = (&fs.disk, fs.token.clone(), fs.db.clone());
    let response = create(&server.addr, &token, "on-a-disk");
    assert_eq!(response.status, 201, "{}", response.describe());
    let acknowledged = vec![(tenant_id(&response.json()), "on-a-disk".to_owned())];
    stop(&mut server);

    disk.remount("ro");
    let out = run(Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .arg("--admin-token-file")
        .arg(&fs.token_file)
        .env("RUST_LOG", "info"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a refused start exits 1: {stderr}"
    );
    assert!(
        stderr.contains("read-only") && stderr.contains(path_str(&db)),
        "the message names the file and the likely cause: {stderr}"
    );
    disk.remount("rw");
    assert_nothing_lost(&db, &acknowledged, &[]);
}

#[test]
fn a_locked_database_gives_503_with_retry_after() {
    /// How long the test's own connection holds the write lock: three times the server's 1 s
    /// busy timeout, so a server that waited that long would succeed and fail this test. The
    /// margin is wide on purpose: SQLite counts its busy wait in the sleeps it asks for, not
    /// in the time that passes, so on a loaded machine the real wait runs past 1 s, and the
    /// request itself may reach the writer late.
    const LOCK_HELD: Duration = Duration::from_secs(3);

    let app = spawn_app();
    app.create_ok("before-the-lock", "1");
    let events_before = app.audit_count();
    let tenants_before = app.tenant_count();

    // Another process (here: the test) takes the write lock and drops it from its own
    // thread after LOCK_HELD, while the create below is waiting for it.
    let (locked_tx, locked_rx) = mpsc::channel::<()>();
    let (released_tx, released_rx) = mpsc::channel::<()>();
    let db_path = app.db_path.clone();
    let holder = thread::spawn(move || {
        let locker = open_rw(&db_path);
        locker
            .execute_batch("BEGIN EXCLUSIVE")
            .expect("taking the write lock from the test");
        locked_tx
            .send(())
            .expect("telling the test the lock is held");
        thread::sleep(LOCK_HELD);
        locker
            .execute_batch("ROLLBACK")
            .expect("releasing the lock");
        drop(locker);
        let _ = released_tx.send(());
    });
    locked_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the test's connection took the write lock within 10 s");

    let key = format!("locked-key-{}", random_hex(4));
    let started = Instant::now();
    let resp = app.create_with_key("during-the-lock", "1", &key);
    let answered = Instant::now();

    released_rx
        .recv_timeout(LOCK_HELD + Duration::from_secs(10))
        .expect("the holding thread released the lock");
    holder.join().expect("the lock-holding thread");

    assert_problem(
        &resp,
        503,
        "unavailable",
        "a keyed create while another process holds the write lock for 3 s",
    );
    assert_eq!(
        resp.header("retry-after"),
        Some(RETRY_AFTER_S),
        "the 503 says when to retry: {}",
        resp.describe()
    );
    let waited = answered - started;
    assert!(
        waited >= Duration::from_millis(900),
        "the server waits about 1 s for the lock before giving up (waited {waited:?})"
    );
    let db = app.db();
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tenants WHERE name = 'during-the-lock'"
        ),
        0,
        "the refused create wrote no tenant row"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM tenants"),
        tenants_before,
        "the refused create wrote no row at all"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM audit_events"),
        events_before,
        "the refused create appended no audit event"
    );
    assert_eq!(
        db.query_row(
            "SELECT count(*) FROM idempotency_keys WHERE key = ?1",
            [&key],
            |r| r.get::<_, i64>(0)
        )
        .expect("counting the key's records"),
        0,
        "the refused create bound its Idempotency-Key to nothing"
    );
    drop(db);

    let retry = app.create_with_key("during-the-lock", "1", &key);
    assert_eq!(
        retry.status,
        201,
        "a retry with the same key and body once the lock is gone creates: {}",
        retry.describe()
    );
    assert_eq!(
        retry.header("idempotent-replayed"),
        None,
        "the retry is a first create, not a replay of the 503: {}",
        retry.describe()
    );
    assert_eq!(
        app.tenant_count(),
        tenants_before + 1,
        "the retry made exactly one tenant"
    );
    assert_eq!(
        app.audit_count(),
        events_before + 1,
        "the retry appended exactly one audit event"
    );
}
