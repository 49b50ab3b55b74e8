//! Many connections charging and reserving from one budget whose one-second periods pass
//! while they spend: no period is overspent, every boundary is recorded once with its
//! refill or forfeit, and every acknowledged spend is in the ledger.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

/// Concurrent clients.
const THREADS: usize = 12;

/// How long they spend: three boundaries or more pass meanwhile.
const SPEND_FOR: Duration = Duration::from_millis(3500);

/// Each period's allowance; nothing rolls over.
const ALLOWANCE: u128 = 40;

/// What the clients did, as the server acknowledged it.
#[derive(Debug, Default)]
struct Acked {
    charged: u128,
    charges: usize,
    committed: u128,
    refused: usize,
}

#[test]
fn spending_while_boundaries_pass_never_overspends_a_period_and_loses_no_refill() {
    let app = spawn_app();
    let s = Scene::new(&app, "busy", "0");
    let created = s.post_budget(&json!({
        "name": "per-second", "opening_deposit_atomic": ALLOWANCE.to_string(),
        "period": { "every_seconds": 1, "allowance_atomic": ALLOWANCE.to_string() }
    }));
    let b = assert_created(&created, &budgets_path(&s.tid), "a one-second budget");
    let s = Arc::new(s.on(&id_of(&b)));
    let created_ms = timestamp_ms(str_of(&b, "created_at"));

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..THREADS)
        .map(|n| {
            let (addr, tid, bid, token) = (
                s.app.addr.clone(),
                s.tid.clone(),
                s.bid.clone(),
                s.token.clone(),
            );
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut acked = Acked::default();
                let mut round = 0u128;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    if (round + n as u128).is_multiple_of(2) {
                        let body = json!({"budget_id": bid, "amount_atomic": "1"}).to_string();
                        let path = format!("/v1/tenants/{tid}/charges");
                        let resp = send(&addr, "POST", &path, &token, Some(&body), None, &[]);
                        match resp.status {
                            201 => {
                                acked.charged += 1;
                                acked.charges += 1;
                            }
                            409 => acked.refused += 1,
                            _ => panic!("a charge: {}", resp.describe()),
                        }
                        continue;
                    }
                    let body = reserve_body(&bid, "2", Some(60)).to_string();
                    let path = reservations_path(&tid);
                    let held = send(&addr, "POST", &path, &token, Some(&body), None, &[]);
                    match held.status {
                        201 => {}
                        409 => {
                            acked.refused += 1;
                            continue;
                        }
                        _ => panic!("a reserve: {}", held.describe()),
                    }
                    // Commit 1 (within the hold) or 3 (above it, out of what is available).
                    let spend = if round.is_multiple_of(3) { 3 } else { 1 };
                    let rid = id_of(&held.json());
                    let path = reservation_path(&tid, &rid, "commit");
                    let body = amount_body(&spend.to_string()).to_string();
                    let resp = send(&addr, "POST", &path, &token, Some(&body), None, &[]);
                    match resp.status {
                        200 => acked.committed += spend,
                        409 => {
                            acked.refused += 1;
                            let path = reservation_path(&tid, &rid, "release");
                            let resp = send(&addr, "POST", &path, &token, None, None, &[]);
                            assert_eq!(resp.status, 200, "a release: {}", resp.describe());
                        }
                        _ => panic!("a commit: {}", resp.describe()),
                    }
                }
                acked
            })
        })
        .collect();
    let started = Instant::now();
    thread::sleep(SPEND_FOR);
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<Acked> = clients
        .into_iter()
        .map(|c| c.join().expect("a client panicked"))
        .collect();
    let spent_for = started.elapsed();
    // Let the sweep record the boundary that passed last.
    thread::sleep(Duration::from_millis(1500));

    let charged: u128 = acked.iter().map(|a| a.charged).sum();
    let committed: u128 = acked.iter().map(|a| a.committed).sum();
    let charges: usize = acked.iter().map(|a| a.charges).sum();
    assert!(charges > 0, "some charges went through: {acked:?}");
    assert!(
        acked.iter().map(|a| a.refused).sum::<usize>() > 0,
        "the allowance ran short within a period: {acked:?}"
    );

    let b = s.admin().budget();
    assert_eq!(
        amount(&b, "spent_atomic"),
        charged + committed,
        "every acknowledged spend: {b}"
    );
    assert_eq!(amount(&b, "reserved_atomic"), 0, "every hold settled: {b}");
    // The ledger and the statements as of one moment: read again until no boundary was
    // recorded between the reads.
    let (now_ms, entries, periods) = loop {
        let now_ms = now_ms();
        let entries = s.entries();
        let periods = list_all(&app, &app.admin(), &s.bpath("periods"));
        if s.entries().len() == entries.len() {
            break (now_ms, entries, periods);
        }
    };
    let figures = replay(&entries, "the ledger of the budget");
    assert_eq!(figures.spent, charged + committed);
    let kinds = |kind: &str| entries.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(kinds("charge"), charges, "one entry a charge");

    // Each boundary once, on its second, leaving exactly the allowance available.
    let resets: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "refill" || e["kind"] == "forfeit")
        .collect();
    let due = ((now_ms - created_ms) / 1000) as usize;
    assert!(
        resets.len() == due || resets.len() + 1 == due,
        "{} boundaries recorded, {due} passed ({spent_for:?} of spending)",
        resets.len()
    );
    for (i, reset) in resets.iter().enumerate() {
        assert_eq!(
            timestamp_ms(str_of(reset, "occurred_at")),
            created_ms + 1000 * (i as i64 + 1),
            "boundary {i} on its second: {reset}"
        );
        assert_eq!(
            amount(reset, "available_atomic"),
            ALLOWANCE,
            "boundary {i}: {reset}"
        );
    }

    // The statements chain, and no period spent more than it had (the holds in flight at
    // its start, at most 2 a client, settle in it).
    assert_eq!(
        periods.len(),
        resets.len() + 1,
        "a period a boundary, and the first"
    );
    for pair in periods.windows(2) {
        assert_eq!(pair[0]["ends_at"], pair[1]["started_at"], "{pair:?}");
        assert_eq!(pair[0]["state"], "closed");
    }
    for p in &periods {
        let had = amount(p, "opening_available_atomic") + amount(p, "credited_atomic");
        assert!(
            amount(p, "spent_atomic") <= had + 2 * THREADS as u128,
            "{p}"
        );
        if p["state"] == "closed" {
            assert_eq!(
                amount(p, "forfeited_atomic"),
                amount(p, "closing_available_atomic")
            );
            assert_eq!(amount(p, "carried_out_atomic"), 0);
        }
    }
    let verified = app.audit_verify();
    assert_eq!(verified.code, Some(0), "{verified:?}");
}
