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
                let name = format!("during-backup-{i}");
                i += 1;
                let body = tenant_body(&name, "1");
                let resp = send(&addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]);
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
    let backup = backup(&app.db_path, &target);
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
    let backup = backup(&app.db_path, &target);
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

#[test]
fn a_backup_holds_no_tenant_token_and_no_idempotency_record() {
    let app = spawn_app();
    let mut created: Vec<(String, String, String)> = Vec::new();
    for i in 0..6 {
        let name = format!("keyed-{i}");
        let resp = app.create_with_key(&name, "10", &format!("backup-key-{i}"));
        assert_eq!(resp.status, 201, "keyed create {i}: {}", resp.describe());
        let body = resp.json();
        created.push((tenant_id(&body), name, tenant_token(&body)));
    }
    for i in 0..2 {
        let name = format!("unkeyed-{i}");
        let body = app.create_ok(&name, "20");
        created.push((tenant_id(&body), name, tenant_token(&body)));
    }
    let tombstoned = created[0].0.clone();
    assert_eq!(app.delete(&tombstoned).status, 200, "tombstoning one");
    let live = db_bytes(&app.db_path);
    for (id, _, token) in &created[..6] {
        assert!(
            contains_bytes(&live, token.as_bytes()),
            "the live database keeps the token of keyed create {id} for replays (so the search \
             below can find one)"
        );
    }
    assert_eq!(
        count(&app.db(), "SELECT count(*) FROM idempotency_keys"),
        6,
        "the live database holds the six idempotency records"
    );

    let out_dir = TempDir::new().expect("a directory for the backup");
    let target = out_dir.path().join("backup.db");
    let backup = backup(&app.db_path, &target);
    assert_eq!(backup.code, Some(0), "backup while serving: {backup:?}");

    let bytes = std::fs::read(&target).expect("reading the backup");
    for (id, name, token) in &created {
        assert!(
            !contains_bytes(&bytes, token.as_bytes()),
            "the backup's bytes hold the plaintext token of {name} ({id})"
        );
        let secret = token.rsplit('_').next().expect("a token has parts");
        assert!(
            !contains_bytes(&bytes, secret.as_bytes()),
            "the backup's bytes hold the secret part of the token of {name} ({id})"
        );
    }
    assert_eq!(
        std::fs::read_dir(out_dir.path())
            .expect("listing the backup directory")
            .count(),
        1,
        "the backup is one file, with no -wal or -journal beside it that could hold a token"
    );

    let conn = open_ro(&target);
    assert_eq!(
        count(&conn, "SELECT count(*) FROM idempotency_keys"),
        0,
        "the backup's idempotency_keys table is empty"
    );
    assert_eq!(
        count(&conn, "SELECT count(*) FROM tenants"),
        created.len() as i64,
        "the backup holds every tenant"
    );
    for (id, name, token) in &created {
        let (stored_name, state, hash): (String, String, Vec<u8>) = conn
            .query_row(
                "SELECT name, state, token_hash FROM tenants WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap_or_else(|e| panic!("tenant {name} ({id}) is in the backup: {e}"));
        assert_eq!(&stored_name, name, "tenant {id} keeps its name");
        let expected = if *id == tombstoned {
            "tombstoned"
        } else {
            "active"
        };
        assert_eq!(state, expected, "tenant {name} keeps its state");
        assert_eq!(
            hash,
            sha256(token.as_bytes()),
            "tenant {name} keeps its token hash, so its token still works after a restore"
        );
    }
    let rows = audit_rows(&conn);
    assert_eq!(
        rows.len(),
        created.len() + 1,
        "the backup holds every audit event: {} creates and one tombstone",
        created.len()
    );
    let head = assert_chain_valid(&rows, "the backup");
    let live_rows = audit_rows(&app.db());
    assert_eq!(
        live_rows.last().map(|r| r.hash.as_str()),
        Some(head.as_str()),
        "the backup's chain ends at the live chain's head"
    );
    let actions: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.action.as_str(), r.tenant_id.as_str()))
        .collect();
    let mut expected: Vec<(&str, &str)> = created
        .iter()
        .map(|(id, _, _)| ("tenant.created", id.as_str()))
        .collect();
    expected.push(("tenant.tombstoned", tombstoned.as_str()));
    assert_eq!(actions, expected, "the backup's events in order");
    let verify = audit_verify(&target);
    assert_eq!(
        verify.code,
        Some(0),
        "the backup's chain verifies: {verify:?}"
    );
    drop(conn);

    // A server restored from the backup replays no key: the same key takes a new body.
    let mut restored = spawn_app();
    assert_eq!(
        restored.terminate().code(),
        Some(0),
        "stopping the fresh server"
    );
    for suffix in ["-wal", "-shm"] {
        let mut side = restored.db_path.as_os_str().to_owned();
        side.push(suffix);
        let _ = std::fs::remove_file(side);
    }
    std::fs::copy(&target, &restored.db_path).expect("restoring the backup");
    restored.start();
    let (id, name, token) = &created[1];
    let read = restored.get(id, Some(token));
    assert_eq!(
        read.status,
        200,
        "a restored tenant's token still reads it: {}",
        read.describe()
    );
    assert_eq!(read.json()["name"], name.as_str(), "the restored tenant");
    let again = restored.create_with_key("after-restore", "1", "backup-key-1");
    assert_eq!(
        again.status,
        201,
        "after a restore a key used before the backup binds anew (no mismatch, no replay): {}",
        again.describe()
    );
    assert_eq!(again.header("idempotent-replayed"), None, "not a replay");
    assert_ne!(
        tenant_id(&again.json()),
        *id,
        "a new tenant, not the one the key created before the backup"
    );
}
