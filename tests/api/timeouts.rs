//! Bodies that stop arriving or arrive too slowly: a `408` once `--body-read-timeout-ms` has
//! passed, a limit on the whole body rather than on each pause.

use std::time::{Duration, Instant};

use crate::helpers::*;
use crate::wire::{HTTP_11, IO_TIMEOUT, Response, parse_response, request_bytes};

/// The body-read limit of the `408` tests, in milliseconds.
const BODY_READ_TIMEOUT_MS: u64 = 600;

/// The server's body-read limit when no flag sets it.
const BODY_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// How much earlier than the limit a `408` may come: the timers of the server and of the test
/// do not start at the same instant.
const TIMER_SLACK: Duration = Duration::from_millis(50);

/// How soon after the limit the `408` must come, with room for a busy machine, yet well
/// below the default limit it rules out.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

fn slow_body_app() -> TestApp {
    AppBuilder::new()
        .arg("--body-read-timeout-ms")
        .arg(&BODY_READ_TIMEOUT_MS.to_string())
        .spawn()
}

/// Sends the head of an admin create announcing `content_length` bytes, then `pieces` with
/// `gap` between them (stopping early if the server answers), then waits for the answer.
/// Returns the answer and the time from the end of the head to the answer's end.
fn trickled_post(
    app: &TestApp,
    content_length: usize,
    pieces: &[&[u8]],
    gap: Duration,
) -> (Response, Duration) {
    let mut conn = app.conn();
    let auth = app.admin();
    let length = content_length.to_string();
    let head = request_bytes(
        "POST",
        "/v1/tenants",
        HTTP_11,
        &[
            ("Host", app.addr.as_str()),
            ("Connection", "close"),
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Content-Length", length.as_str()),
        ],
        None,
    );
    conn.send(&head);
    let started = Instant::now();
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            // The pause between pieces is spent listening, so an early answer stops the
            // sending rather than racing it.
            conn.fill(Instant::now() + gap);
            if conn.is_closed() || !conn.unread().is_empty() {
                break;
            }
        }
        if conn.try_send(piece).is_err() {
            break;
        }
    }
    let received = conn.read_to_close(IO_TIMEOUT).unwrap_or_else(|e| {
        panic!(
            "no answer within {IO_TIMEOUT:?} of the end of the body ({e}); sent {} of {content_length} bytes",
            pieces.iter().map(|p| p.len()).sum::<usize>()
        )
    });
    let took = started.elapsed();
    let resp = parse_response(&received, false).unwrap_or_else(|e| {
        panic!(
            "no complete answer to a slow POST ({e}): {:?}",
            String::from_utf8_lossy(&received)
        )
    });
    (resp, took)
}

#[test]
fn a_body_that_stops_arriving_is_408_request_timeout() {
    const ANNOUNCED: usize = 50;
    const SENT: usize = 20;
    let app = slow_body_app();
    let body = padded_body("unfinished", ANNOUNCED);
    let (resp, took) = trickled_post(&app, ANNOUNCED, &[&body[..SENT]], Duration::ZERO);
    assert_problem(
        &resp,
        408,
        "request_timeout",
        &format!("Content-Length: {ANNOUNCED} with only {SENT} bytes of the body sent"),
    );
    let limit = Duration::from_millis(BODY_READ_TIMEOUT_MS);
    assert!(
        took >= limit - TIMER_SLACK,
        "the 408 waits for --body-read-timeout-ms ({limit:?}) first (took {took:?})"
    );
    assert!(
        took < ANSWER_WITHIN,
        "the 408 comes within {ANSWER_WITHIN:?} of the end of the head, soon after \
         --body-read-timeout-ms ({limit:?}), not after the default \
         {BODY_READ_TIMEOUT_DEFAULT:?} (took {took:?})"
    );
    assert_eq!(app.tenant_count(), 0, "the unfinished body created nothing");
    let ok = app.create("after-the-timeout", "1");
    assert_eq!(
        ok.status,
        201,
        "the server still serves others: {}",
        ok.describe()
    );
}

#[test]
fn the_body_read_timeout_bounds_the_whole_body_not_each_pause() {
    const BODY_BYTES: usize = 100;
    let app = slow_body_app();
    let limit = Duration::from_millis(BODY_READ_TIMEOUT_MS);

    // Five pieces 40 ms apart: slow, but complete well within the limit.
    let (piece_bytes, gap) = (20, Duration::from_millis(40));
    let body = padded_body("slow-but-complete", BODY_BYTES);
    let pieces: Vec<&[u8]> = body.chunks(piece_bytes).collect();
    let (resp, took) = trickled_post(&app, body.len(), &pieces, gap);
    assert_eq!(
        resp.status,
        201,
        "a body sent in {} pieces {gap:?} apart over {took:?}, within the {limit:?} limit: {}",
        pieces.len(),
        resp.describe()
    );
    assert_eq!(
        resp.json()["name"],
        "slow-but-complete",
        "the trickled body"
    );

    // Ten pieces 100 ms apart: no pause reaches the limit, the whole body does.
    let (piece_bytes, gap) = (10, Duration::from_millis(100));
    let body = padded_body("too-slow-overall", BODY_BYTES);
    let pieces: Vec<&[u8]> = body.chunks(piece_bytes).collect();
    let (resp, took) = trickled_post(&app, body.len(), &pieces, gap);
    assert_problem(
        &resp,
        408,
        "request_timeout",
        &format!(
            "a body in {} pieces {gap:?} apart, over a {limit:?} limit",
            pieces.len()
        ),
    );
    assert!(
        took < ANSWER_WITHIN,
        "the 408 comes within {ANSWER_WITHIN:?}, soon after the limit (took {took:?})"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM tenants WHERE name = 'too-slow-overall'"),
        0,
        "the timed-out body created nothing"
    );
}
