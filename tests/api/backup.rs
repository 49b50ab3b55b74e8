//! `tenantd backup` while the server takes writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use crate::helpers::*;

#[test]
fn a_backup_taken_while_serving_is_consistent_and_self_contained() {
    let app = spawn_app();
    let acknowledged: Vec<(String, String)> = (0..20)
        .map(|i| {
            let name = format!("before-backup-{i}");
            (tenant_id(&app.create_ok(&name, "1")), name)
        })
        .collect();

    // A writer keeps creating while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let addr = app.addr.clone();
        let auth = app.admin();
        thread::spawn(move || {
            let mut created = 0usize;
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let body = tenant_body(&format!("during-backup-{i}"), "1");
                i += 1;
                let resp = request(
                    &addr,
                    "POST",
                    "/v1/tenants",
                    &[
                        ("Authorization", auth.as_str()),
                        ("Content-Type", "application/json"),
                    ],
                    Some(body.as_bytes()),
                );
                assert_eq!(
                    resp.status,
                    201,
                    "a create during the backup: {}",
                    resp.describe()
                );
                created += 1;
            }
            created
        })
    };
    thread::sleep(Duration::from_millis(100));

    let out_dir = TempDir::new().expect("a directory for the backup");
    let target = out_dir.path().join("backup.db");
    let db = app.db_path.to_str().expect("a UTF-8 path");
    let to = target.to_str().expect("a UTF-8 path");
    let backup = run_cli(&["backup", "--db", db, "--to", to]);
    thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let during = writer.join().expect("the writer thread");

    assert_eq!(backup.code, Some(0), "backup while serving: {backup:?}");
    assert!(
        !backup.stdout.trim().is_empty(),
        "backup prints a one-line summary: {backup:?}"
    );
    assert!(during > 0, "the writer created tenants during the backup");

    let entries: Vec<String> = std::fs::read_dir(out_dir.path())
        .expect("listing the backup directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        entries,
        ["backup.db"],
        "the backup is one file, with no -wal or -shm beside it"
    );
    assert_eq!(file_mode(&target), 0o600, "the backup file has mode 0600");

    let verify = audit_verify(&target);
    assert_eq!(
        verify.code,
        Some(0),
        "the backup's chain verifies: {verify:?}"
    );

    let conn = open_ro(&target);
    for (id, name) in &acknowledged {
        let stored: String = conn
            .query_row("SELECT name FROM tenants WHERE id = ?1", [id], |r| r.get(0))
            .unwrap_or_else(|e| panic!("tenant {id} acknowledged before the backup is in it: {e}"));
        assert_eq!(&stored, name, "tenant {id} has its name in the backup");
    }
    let tenants = count(&conn, "SELECT count(*) FROM tenants");
    let events = count(&conn, "SELECT count(*) FROM audit_events");
    assert_eq!(
        tenants, events,
        "the backup is one consistent state: one event per tenant"
    );
    let rows = audit_rows(&conn);
    let head = assert_chain_valid(&rows, "the backup");
    assert!(
        verify.stdout.contains(&head),
        "audit verify on the backup names its head {head}: {verify:?}"
    );
}

#[test]
fn a_backup_never_overwrites_an_existing_file() {
    let app = spawn_app();
    app.create_ok("precious", "1");
    let target = app.dir.path().join("existing.db");
    std::fs::write(&target, b"keep me").expect("writing the existing file");
    let backup = run_cli(&[
        "backup",
        "--db",
        app.db_path.to_str().expect("a UTF-8 path"),
        "--to",
        target.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(
        backup.code,
        Some(1),
        "backup to an existing file is refused: {backup:?}"
    );
    assert!(
        !backup.stderr.trim().is_empty(),
        "the refusal says why: {backup:?}"
    );
    assert_eq!(
        std::fs::read(&target).expect("reading the existing file"),
        b"keep me",
        "the existing file is untouched"
    );
}
