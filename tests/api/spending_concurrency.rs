//! Races on one budget: many connections reserving its last funds at once, then commits
//! below and above their holds racing debits. The budget is never overspent: credited ≥
//! debited + spent + reserved in its figures and in its ledger.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::thread;

use serde_json::Value;

use crate::helpers::*;
use crate::wire::Response;

/// Reservations the budget can hold at once.
const N: usize = 50;

/// The amount of each reservation.
const A: u128 = 7;

/// Concurrent clients, each request on a connection of its own.
const THREADS: usize = 32;

/// Reserve requests racing for the `N` holds.
const ATTEMPTS: usize = 3 * N;

/// Commits asking for more than their hold, which need the excess to be available.
const OVER_COMMITS: usize = 5;

/// Debits racing the commits.
const DEBITS: usize = 4;

/// The amount of each debit.
const DEBIT: u128 = 10;

/// One request of the second race.
#[derive(Clone, Debug)]
enum Job {
    /// A commit of a reservation (its id) with an amount.
    Commit(String, u128),
    /// A debit of an amount.
    Debit(u128),
}

/// Runs `jobs` on `THREADS` threads released together by a barrier, each request on its
/// own connection (`send_one` gets the job and the thread's number); returns every job
/// with its response.
fn race<T: Clone + Send + Sync + 'static>(
    jobs: Vec<T>,
    send_one: impl Fn(&T, usize) -> Response + Send + Sync + 'static,
) -> Vec<(T, Response)> {
    let barrier = Arc::new(Barrier::new(THREADS));
    let jobs = Arc::new(jobs);
    let send_one = Arc::new(send_one);
    let handles: Vec<_> = (0..THREADS)
        .map(|thread_no| {
            let (barrier, jobs) = (Arc::clone(&barrier), Arc::clone(&jobs));
            let send_one = Arc::clone(&send_one);
            thread::spawn(move || {
                barrier.wait();
                let mine = (thread_no..jobs.len()).step_by(THREADS);
                let answered = mine.map(|i| (jobs[i].clone(), send_one(&jobs[i], thread_no)));
                answered.collect::<Vec<_>>()
            })
        })
        .collect();
    let joined = handles
        .into_iter()
        .map(|h| h.join().expect("a racing client panicked"));
    joined.flatten().collect()
}

#[test]
fn racing_reservations_never_overspend_and_commits_keep_the_invariant() {
    let app = spawn_app();
    let funded = A * N as u128;
    let s = Scene::new(&app, "racer", "1").new_budget("contested", &funded.to_string());
    let auths = [s.token.clone(), app.admin()];

    // Phase 1: 3N reserves of A, half with the tenant token, for N holds' worth of funds.
    let (addr, path) = (app.addr.clone(), reservations_path(&s.tid));
    let body = reserve_body(&s.bid, &A.to_string(), None).to_string();
    let reserving = auths.clone();
    let answers = race((0..ATTEMPTS).collect(), move |_, thread_no| {
        let auth = &reserving[thread_no % 2];
        send(&addr, "POST", &path, auth, Some(&body), None, &[])
    });
    assert_eq!(answers.len(), ATTEMPTS, "every reserve was answered");
    let statuses: Vec<u16> = answers.iter().map(|(_, r)| r.status).collect();
    let granted: Vec<Value> = answers
        .iter()
        .filter(|(_, r)| r.status == 201)
        .map(|(_, r)| r.json())
        .collect();
    assert_eq!(
        granted.len(),
        N,
        "exactly {N} reserves fit; statuses: {statuses:?}"
    );
    for (_, resp) in answers.iter().filter(|(_, r)| r.status != 201) {
        assert_insufficient(resp, 0, "a reserve that lost the race");
    }
    let ids: BTreeSet<String> = granted.iter().map(id_of).collect();
    assert_eq!(ids.len(), N, "{N} distinct reservations");
    s.expect([funded, 0, 0, funded], "after the reserve race");
    assert_eq!(
        s.budget()["available_atomic"],
        "0",
        "nothing is left available"
    );
    let reserves = s.kinds().iter().filter(|k| *k == "reserve").count();
    assert_eq!(reserves, N, "one reserve entry per hold");
    assert_eq!(
        audit_of(&app, "reservation.created").len(),
        N,
        "one event per hold"
    );

    // Phase 2: every hold committed at once, a few above their amount, racing debits.
    let seed = now_ms().unsigned_abs();
    let mut rng = Rng::new(seed);
    let mut jobs: Vec<Job> = ids
        .iter()
        .enumerate()
        .map(|(i, rid)| {
            let over = i < OVER_COMMITS;
            let asked = if over {
                A + 1 + u128::from(rng.range(0, 9))
            } else {
                u128::from(rng.range(0, 7))
            };
            Job::Commit(rid.clone(), asked)
        })
        .collect();
    for i in 0..DEBITS {
        jobs.insert(i * jobs.len() / DEBITS, Job::Debit(DEBIT));
    }
    let (addr, tid, bid) = (app.addr.clone(), s.tid.clone(), s.bid.clone());
    let results = race(jobs, move |job, thread_no| {
        let (path, asked, auth) = match job {
            Job::Commit(rid, asked) => {
                (reservation_path(&tid, rid, "commit"), asked, thread_no % 2)
            }
            Job::Debit(asked) => (budget_path(&tid, &bid, "debits"), asked, 1),
        };
        let body = amount_body(&asked.to_string()).to_string();
        send(&addr, "POST", &path, &auths[auth], Some(&body), None, &[])
    });

    let (mut spent, mut debited, mut still_held) = (0u128, 0u128, 0u128);
    for (job, resp) in &results {
        let ctx = format!("{job:?} (seed {seed})");
        match job {
            Job::Commit(rid, asked) if resp.status == 200 => {
                let done = resp.json();
                let expected = [
                    ("state", Value::from("committed")),
                    ("committed_atomic", Value::from(asked.to_string())),
                ];
                assert_fields(&done, &expected, &ctx);
                assert_eq!(
                    s.reservation(rid)["state"],
                    "committed",
                    "{ctx}: reads committed"
                );
                spent += asked;
            }
            Job::Commit(rid, asked) => {
                assert!(
                    *asked > A,
                    "{ctx}: a commit within its hold succeeds: {}",
                    resp.describe()
                );
                let body = assert_conflict(resp, "insufficient_funds", &ctx);
                let available = amount(&body, "available_atomic");
                assert!(
                    available < asked - A,
                    "{ctx}: the excess was not available: {body}"
                );
                assert_eq!(
                    s.reservation(rid)["state"],
                    "active",
                    "{ctx}: the hold stays active"
                );
                still_held += A;
            }
            Job::Debit(asked) if resp.status == 201 => debited += asked,
            Job::Debit(asked) => {
                let body = assert_conflict(resp, "insufficient_funds", &ctx);
                let available = amount(&body, "available_atomic");
                assert!(
                    available < *asked,
                    "{ctx}: the debit was not available: {body}"
                );
            }
        }
    }
    let shown = s.figures();
    let expected = Figures::new(funded, debited, spent, still_held);
    assert_eq!(
        shown, expected,
        "the figures sum the answered movements (seed {seed})"
    );
    let used = shown.debited + shown.spent + shown.reserved;
    assert!(
        shown.credited >= used,
        "credited ≥ debited + spent + reserved: {shown:?}"
    );
    let replayed = replay(&s.entries(), &format!("the raced ledger (seed {seed})"));
    assert_eq!(
        replayed, shown,
        "the ledger replays to the figures (seed {seed})"
    );
    let used = replayed.debited + replayed.spent + replayed.reserved;
    assert!(
        replayed.credited >= used,
        "the ledger keeps the invariant: {replayed:?}"
    );
}
