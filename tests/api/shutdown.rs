//! Graceful shutdown: SIGTERM under load drains, commits, checkpoints and exits 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::helpers::*;

#[test]
fn sigterm_under_load_exits_0_with_every_acknowledged_create_stored() {
    let mut app = spawn_app();
    let acked = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let acked = Arc::clone(&acked);
            let stop = Arc::clone(&stop);
            let addr = app.addr.clone();
            let auth = app.admin();
            thread::spawn(move || {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("term-{client}-{i}");
                    i += 1;
                    let result = try_post_tenant(&addr, &auth, &name);
                    match result {
                        Ok(resp) if resp.status == 201 => {
                            let id = resp.json()["id"].as_str().unwrap_or_default().to_owned();
                            acked.lock().expect("acked lock").push((id, name));
                        }
                        // A refusal while draining is allowed; it acknowledges nothing.
                        Ok(resp) => assert_eq!(
                            resp.status,
                            503,
                            "only 503 may refuse a create while draining: {}",
                            resp.describe()
                        ),
                        // The listener is closed: this client is done.
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();

    thread::sleep(Duration::from_millis(400));
    let status = app.terminate();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().expect("a load client panicked");
    }
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM under load exits 0; log:\n{}",
        app.log_text()
    );

    let wal = wal_path(&app.db_path);
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        wal_len,
        0,
        "the -wal file is checkpointed at shutdown ({})",
        wal.display()
    );

    let acked = acked.lock().expect("acked lock").clone();
    assert!(
        !acked.is_empty(),
        "some creates were acknowledged before SIGTERM"
    );
    let db = open_ro(&app.db_path);
    for (id, name) in &acked {
        let stored: String = db
            .query_row("SELECT name FROM tenants WHERE id = ?1", [id], |r| r.get(0))
            .unwrap_or_else(|e| panic!("acknowledged tenant {id} is stored: {e}"));
        assert_eq!(&stored, name, "tenant {id} has its name");
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM tenants"),
        count(&db, "SELECT count(*) FROM audit_events"),
        "one audit event per tenant"
    );
    drop(db);
    let verify = audit_verify(&app.db_path);
    assert_eq!(
        verify.code,
        Some(0),
        "the chain verifies after shutdown: {verify:?}"
    );
}

#[test]
fn sigint_is_a_graceful_stop_too() {
    let mut app = spawn_app();
    app.create_ok("before-sigint", "1");
    app.signal("INT");
    let mut child = app.child.take().expect("a running server");
    let status = wait_exit(&mut child, EXIT_TIMEOUT).expect("tenantd exits after SIGINT");
    assert_eq!(status.code(), Some(0), "SIGINT exits 0");
}
