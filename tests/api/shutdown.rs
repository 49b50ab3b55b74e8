//! Graceful shutdown: SIGTERM under load drains, commits, checkpoints and exits 0; what the
//! grace does not finish is cut off, and the log says which happened.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::helpers::*;
use crate::wire::{HTTP_11, IO_TIMEOUT, parse_response, request_bytes};

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
                    let body = tenant_body(&name, "1");
                    let result =
                        try_send(&addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]);
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

    if app.backend() == Backend::Sqlite {
        let wal = wal_path(&app.db_path);
        let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        assert_eq!(
            wal_len,
            0,
            "the -wal file is checkpointed at shutdown ({})",
            wal.display()
        );
    }

    let acked = acked.lock().expect("acked lock").clone();
    assert!(
        !acked.is_empty(),
        "some creates were acknowledged before SIGTERM"
    );
    let stored: HashMap<String, String> = app
        .text_rows("SELECT id, name FROM tenants")
        .into_iter()
        .map(|row| (row[0].clone(), row[1].clone()))
        .collect();
    for (id, name) in &acked {
        let stored = stored
            .get(id)
            .unwrap_or_else(|| panic!("acknowledged tenant {id} is stored"));
        assert_eq!(stored, name, "tenant {id} has its name");
    }
    assert_eq!(
        app.tenant_count(),
        app.audit_count(),
        "one audit event per tenant"
    );
    let verify = app.audit_verify();
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

/// The grace of the cut-off test, in milliseconds.
const SHUTDOWN_GRACE_MS: u64 = 300;

/// How long after the grace a server may take to close what is left and exit.
const AFTER_GRACE: Duration = Duration::from_secs(5);

/// How long the server gets to take a request's head and start waiting for its body.
const IN_FLIGHT_SETTLE: Duration = Duration::from_millis(200);

/// Whether `line` says that `n` connections were cut off, in the exact phrase
/// `cut off 1 connection` or `cut off N connections`.
fn says_cut_off(line: &str, n: usize) -> bool {
    let phrase = if n == 1 {
        "cut off 1 connection".to_owned()
    } else {
        format!("cut off {n} connections")
    };
    line.match_indices(&phrase).any(|(at, _)| {
        !line[at + phrase.len()..].starts_with(|c: char| c.is_alphanumeric())
            && !line[..at].ends_with(|c: char| c.is_alphanumeric())
    })
}

/// A request whose body is still arriving when the grace ends is cut off: the connection is
/// closed without a `2xx`, nothing is written, the log says how many connections were cut
/// off, and the process still exits 0.
#[test]
fn sigterm_cuts_off_a_request_in_flight_after_the_grace_and_says_so() {
    const ANNOUNCED: usize = 100;
    const SENT: usize = 10;
    let mut app = AppBuilder::new()
        .arg("--shutdown-grace-ms")
        .arg(&SHUTDOWN_GRACE_MS.to_string())
        .arg("--body-read-timeout-ms")
        .arg("30000")
        .spawn();
    let auth = app.admin();
    let length = ANNOUNCED.to_string();
    let head = request_bytes(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &[
            ("Host", app.addr.as_str()),
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Content-Length", length.as_str()),
        ],
        None,
    );
    let body = padded_body("cut-off", ANNOUNCED);
    let mut conn = app.conn();
    conn.send(&head);
    conn.send(&body[..SENT]);
    thread::sleep(IN_FLIGHT_SETTLE);

    let grace = Duration::from_millis(SHUTDOWN_GRACE_MS);
    let signalled = Instant::now();
    app.signal("TERM");
    assert!(
        conn.closes_within(grace + AFTER_GRACE),
        "the connection of a request in flight ({SENT} of {ANNOUNCED} body bytes sent) is \
         closed within {:?} of SIGTERM (grace {grace:?}); log:\n{}",
        grace + AFTER_GRACE,
        app.log_text()
    );
    if !conn.unread().is_empty() {
        let answer = parse_response(conn.unread(), false);
        assert!(
            answer
                .as_ref()
                .is_ok_and(|resp| !(200..300).contains(&resp.status)),
            "a request cut off gets no 2xx: {answer:?}"
        );
    }
    let mut child = app.child.take().expect("a running server");
    let left = (grace + AFTER_GRACE).saturating_sub(signalled.elapsed());
    let status = wait_exit(&mut child, left).unwrap_or_else(|| {
        panic!(
            "tenantd did not exit within {:?} of SIGTERM (grace {grace:?}); log:\n{}",
            grace + AFTER_GRACE,
            app.log_text()
        )
    });
    assert_eq!(
        status.code(),
        Some(0),
        "a stop that cut a request off still exits 0; log:\n{}",
        app.log_text()
    );
    assert_eq!(app.tenant_count(), 0, "the request cut off wrote no tenant");
    assert_eq!(
        app.audit_count(),
        0,
        "the request cut off wrote no audit event"
    );
    let said = app.wait_for_log(AFTER_GRACE, |line| says_cut_off(line, 1));
    assert!(
        said.is_some(),
        "the log says `cut off 1 connection`; log:\n{}",
        app.log_text()
    );
}

/// How long a stop with nothing in flight may take, far below its grace.
const PROMPT_EXIT: Duration = Duration::from_secs(3);

/// With only an idle keep-alive connection, SIGTERM closes it and exits at once, long before
/// the grace, and the log says every connection is closed, cutting off none.
#[test]
fn sigterm_with_only_an_idle_connection_exits_at_once_and_says_every_connection_is_closed() {
    const GRACE_MS: u64 = 10_000;
    let mut app = AppBuilder::new()
        .arg("--shutdown-grace-ms")
        .arg(&GRACE_MS.to_string())
        .spawn();
    let mut idle = app.conn();
    idle.send(&request_bytes(
        "GET",
        "/healthz",
        HTTP_11,
        &[("Host", app.addr.as_str())],
        None,
    ));
    let resp = idle
        .response(IO_TIMEOUT)
        .expect("an answer on the kept connection");
    assert_eq!(resp.status, 200, "GET /healthz: {}", resp.describe());

    app.signal("TERM");
    let mut child = app.child.take().expect("a running server");
    let status = wait_exit(&mut child, PROMPT_EXIT).unwrap_or_else(|| {
        panic!(
            "tenantd did not exit within {PROMPT_EXIT:?} of SIGTERM with only an idle \
             connection open (grace {GRACE_MS} ms); log:\n{}",
            app.log_text()
        )
    });
    assert_eq!(status.code(), Some(0), "SIGTERM exits 0");
    assert!(
        idle.closes_within(IO_TIMEOUT),
        "the idle keep-alive connection is closed"
    );
    let said = app.wait_for_log(PROMPT_EXIT, |line| {
        line.contains("every connection is closed")
    });
    assert!(
        said.is_some(),
        "the log says `every connection is closed`; log:\n{}",
        app.log_text()
    );
    assert!(
        !app.log_text().contains("cut off"),
        "nothing was cut off, and the log does not say so; log:\n{}",
        app.log_text()
    );
}
