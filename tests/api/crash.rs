//! `kill -9` at a random instant under load loses no acknowledged write and leaves a chain
//! that verifies, cycle after cycle on the same database.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::helpers::*;

const CYCLES: usize = 3;
const CLIENTS: usize = 8;
const KILL_AFTER_MS_MIN: u64 = 200;
const KILL_AFTER_MS_MAX: u64 = 1500;

/// The seed: `CRASH_SEED` to replay a run, else the clock.
fn seed() -> u64 {
    std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ms() as u64)
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_create() {
    let seed = seed();
    println!("crash test seed: {seed} (rerun with CRASH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let mut app = spawn_app();
    let mut acknowledged: Vec<(String, String)> = Vec::new();

    for cycle in 0..CYCLES {
        let acked = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let acked = Arc::clone(&acked);
                let stop = Arc::clone(&stop);
                let addr = app.addr.clone();
                let auth = app.admin();
                thread::spawn(move || {
                    let mut i = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let name = format!("crash-{cycle}-{client}-{i}");
                        i += 1;
                        let body = tenant_body(&name, "1");
                        let result = try_request(
                            &addr,
                            "POST",
                            "/v1/tenants",
                            &[
                                ("Authorization", auth.as_str()),
                                ("Content-Type", "application/json"),
                            ],
                            Some(body.as_bytes()),
                        );
                        match result {
                            Ok(resp) if resp.status == 201 => {
                                let Ok(created) =
                                    serde_json::from_slice::<serde_json::Value>(&resp.body)
                                else {
                                    continue;
                                };
                                let id = created["id"].as_str().unwrap_or_default().to_owned();
                                acked.lock().expect("acked lock").push((id, name));
                            }
                            Ok(resp) => {
                                panic!("an unexpected answer under load: {}", resp.describe())
                            }
                            // The server is gone: this client is done.
                            Err(_) => break,
                        }
                    }
                })
            })
            .collect();

        let delay = rng.range(KILL_AFTER_MS_MIN, KILL_AFTER_MS_MAX);
        thread::sleep(Duration::from_millis(delay));
        app.kill();
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.join().expect("a load client panicked");
        }
        let acked = std::mem::take(&mut *acked.lock().expect("acked lock"));
        println!(
            "cycle {cycle}: killed after {delay} ms, {} creates acknowledged",
            acked.len()
        );
        assert!(
            !acked.is_empty(),
            "cycle {cycle}: some creates were acknowledged before the kill"
        );
        acknowledged.extend(acked);

        app.start();
        for (id, name) in &acknowledged {
            let resp = app.get_admin(id);
            assert_eq!(
                resp.status,
                200,
                "cycle {cycle} (seed {seed}): acknowledged tenant {id} survives kill -9: {}",
                resp.describe()
            );
            assert_eq!(
                resp.json()["name"],
                name.as_str(),
                "cycle {cycle} (seed {seed}): tenant {id} keeps its name"
            );
        }
        let verify = audit_verify(&app.db_path);
        assert_eq!(
            verify.code,
            Some(0),
            "cycle {cycle} (seed {seed}): the chain verifies after kill -9: {verify:?}"
        );
        let db = app.db();
        let tenants = count(&db, "SELECT count(*) FROM tenants");
        let events = count(&db, "SELECT count(*) FROM audit_events");
        assert_eq!(
            tenants, events,
            "cycle {cycle} (seed {seed}): one audit event per tenant, none lost, none extra"
        );
        assert!(
            tenants >= acknowledged.len() as i64,
            "cycle {cycle} (seed {seed}): at least every acknowledged tenant is stored"
        );
    }
}
