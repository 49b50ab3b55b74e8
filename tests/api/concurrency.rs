//! Races: many connections creating the same name, or sending the same idempotency key,
//! at the same instant.

use std::sync::{Arc, Barrier};
use std::thread;

use crate::helpers::*;
use crate::wire::Response;

const THREADS: usize = 24;

/// Sends `THREADS` copies of one create at once, released together by a barrier.
fn race(app: &TestApp, body: String, key: Option<&str>) -> Vec<Response> {
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let addr = app.addr.clone();
            let auth = app.admin();
            let body = body.clone();
            let key = key.map(str::to_owned);
            thread::spawn(move || {
                barrier.wait();
                let key = key.as_deref();
                send(&addr, "POST", "/v1/tenants", &auth, Some(&body), key, &[])
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a racing client panicked"))
        .collect()
}

#[test]
fn racing_creates_of_one_name_make_exactly_one_tenant() {
    let app = spawn_app();
    let responses = race(&app, tenant_body("contested", "1"), None);
    let created: Vec<&Response> = responses.iter().filter(|r| r.status == 201).collect();
    assert_eq!(
        created.len(),
        1,
        "exactly one racing create wins; statuses: {:?}",
        responses.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for resp in responses.iter().filter(|r| r.status != 201) {
        assert_problem(resp, 409, "tenant_name_taken", "a losing racer");
    }
    assert_eq!(
        app.count("SELECT count(*) FROM tenants WHERE name = 'contested' AND state = 'active'"),
        1,
        "exactly one active row holds the name"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM tenants WHERE name = 'contested'"),
        1,
        "no other row was written"
    );
    assert_eq!(app.audit_count(), 1, "exactly one audit event");
}

#[test]
fn racing_creates_with_one_key_make_one_tenant_and_identical_answers() {
    let app = spawn_app();
    let responses = race(&app, tenant_body("same-key", "5"), Some("racing-key"));
    for resp in &responses {
        assert_eq!(
            resp.status,
            201,
            "every same-key racer gets 201: {}",
            resp.describe()
        );
    }
    let first = &responses[0].body;
    for resp in &responses {
        assert_eq!(
            &resp.body, first,
            "every racer gets the same body byte for byte"
        );
    }
    let originals = responses
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(
        originals, 1,
        "exactly one answer is the original; the rest say Idempotent-Replayed"
    );
    for resp in responses
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_some())
    {
        assert_eq!(
            resp.header("idempotent-replayed"),
            Some("true"),
            "the replay marker"
        );
    }
    assert_eq!(app.tenant_count(), 1, "exactly one tenant");
    assert_eq!(app.audit_count(), 1, "exactly one audit event");
}
