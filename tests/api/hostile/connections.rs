//! Hostile connections: heads sent a byte at a time (slowloris), a thousand idle
//! connections, and keep-alive connections answered from a request's head while its body is
//! still on its way.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::wire::{HTTP_11, IO_TIMEOUT, chunked, parse_response};

/// The header-read limit of the slowloris test, in milliseconds.
const HEADER_READ_TIMEOUT_MS: u64 = 1000;

/// When a connection held up by the header-read limit may be closed: about the limit, with
/// margin for the timers and a busy machine.
const CUT_OFF_WINDOW: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(900)..=Duration::from_millis(2000);

/// The slowest a request of another client may be while slow clients hang on: half the
/// limit, so a request that waited for them would take longer; the margin is for a busy
/// 2-core machine running other tests beside this one.
const OTHER_CLIENT_LATENCY_MAX: Duration = Duration::from_millis(HEADER_READ_TIMEOUT_MS / 2);

/// The gap between two bytes of a slow client's head.
const SLOW_BYTE_GAP: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------------------
// Slowloris.
// ---------------------------------------------------------------------------------------

/// What became of a client that sent its head one byte at a time.
#[derive(Debug)]
struct Slowloris {
    /// From connect to the server's close; `None` if it never closed.
    cut_after: Option<Duration>,
    bytes_sent: usize,
    answer: Vec<u8>,
}

fn slowloris(addr: &str, gap: Duration, give_up: Duration) -> Slowloris {
    let mut reader =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    let started = Instant::now();
    let mut writer = reader.try_clone().expect("cloning the stream");
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    let padding = "s".repeat(200);
    let head = request_with_host(
        "GET",
        "/healthz",
        HTTP_11,
        &[("X-Slow", padding.as_bytes())],
        None,
    );
    let sender = thread::spawn(move || {
        let mut sent = 0;
        for byte in &head {
            if stop.load(Ordering::SeqCst) || writer.write_all(&[*byte]).is_err() {
                break;
            }
            sent += 1;
            thread::sleep(gap);
        }
        sent
    });
    reader
        .set_read_timeout(Some(give_up))
        .expect("a read timeout");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let cut_after = loop {
        match reader.read(&mut chunk) {
            Ok(0) => break Some(started.elapsed()),
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break None;
            }
            Err(_) => break Some(started.elapsed()),
        }
    };
    done.store(true, Ordering::SeqCst);
    let bytes_sent = sender.join().expect("the slow sender");
    Slowloris {
        cut_after,
        bytes_sent,
        answer,
    }
}

#[test]
fn a_slowloris_head_is_cut_off_while_others_are_served() {
    let _serial = serial();
    let started = Instant::now();
    let app = AppBuilder::new()
        .arg("--header-read-timeout-ms")
        .arg(&HEADER_READ_TIMEOUT_MS.to_string())
        .spawn();
    let existing = tenant_id(&app.create_ok(&unique("slow-existing"), "1"));
    const SLOW_CLIENTS: usize = 10;
    let slow: Vec<_> = (0..SLOW_CLIENTS)
        .map(|_| {
            let addr = app.addr.clone();
            thread::spawn(move || slowloris(&addr, SLOW_BYTE_GAP, Duration::from_secs(5)))
        })
        .collect();

    // Meanwhile another client is served as usual.
    let mut latencies: Vec<(&str, Duration)> = Vec::new();
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        let t = Instant::now();
        let resp = app.get_path("/healthz");
        latencies.push(("GET /healthz", t.elapsed()));
        assert_eq!(resp.status, 200, "healthz during the slowloris");
        let t = Instant::now();
        let resp = app.get_admin(&existing);
        latencies.push(("GET tenant", t.elapsed()));
        assert_eq!(resp.status, 200, "a read during the slowloris");
        let t = Instant::now();
        let resp = app.create(&unique("during-slowloris"), "1");
        latencies.push(("create", t.elapsed()));
        assert_eq!(
            resp.status,
            201,
            "a create during the slowloris: {}",
            resp.describe()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let results: Vec<Slowloris> = slow
        .into_iter()
        .map(|h| h.join().expect("a slow client"))
        .collect();
    let limit = Duration::from_millis(HEADER_READ_TIMEOUT_MS);
    for (i, r) in results.iter().enumerate() {
        let ctx = format!("slow client {i}");
        let cut = r
            .cut_after
            .unwrap_or_else(|| panic!("{ctx}: never cut off ({} bytes sent)", r.bytes_sent));
        assert!(
            CUT_OFF_WINDOW.contains(&cut),
            "{ctx}: cut off after {cut:?}, expected about {limit:?} (within {CUT_OFF_WINDOW:?}); {r:?}"
        );
        if !r.answer.is_empty() {
            let resp = parse_response(&r.answer, false).expect("a complete answer");
            assert_bare(&resp, &[408], &ctx);
        }
    }
    let (worst_label, worst) = latencies
        .iter()
        .copied()
        .max_by_key(|(_, d)| *d)
        .expect("some requests");
    assert!(
        worst < OTHER_CLIENT_LATENCY_MAX,
        "every request of the other client completes in < {OTHER_CLIENT_LATENCY_MAX:?} while \
         slow clients hang on; the slowest was {worst_label} in {worst:?}"
    );

    // An idle keep-alive connection and a silent one are closed by the same timer.
    let mut idle = Conn::open(&app.addr);
    idle.send(&request_with_host("GET", "/healthz", HTTP_11, &[], None));
    let resp = answer(&mut idle, IO_TIMEOUT).expect("an answer");
    assert_eq!(resp.status, 200);
    let t = Instant::now();
    assert!(
        idle.closes_within(Duration::from_secs(3)) && idle.unread().is_empty(),
        "an idle keep-alive connection is closed"
    );
    let idle_cut = t.elapsed();
    let t = Instant::now();
    let mut silent = Conn::open(&app.addr);
    assert!(
        silent.closes_within(Duration::from_secs(3)),
        "a connection that never sends a byte is closed"
    );
    let silent_cut = t.elapsed();
    let silent_answer = String::from_utf8_lossy(silent.unread()).into_owned();
    for (what, cut) in [("idle keep-alive", idle_cut), ("silent", silent_cut)] {
        assert!(
            CUT_OFF_WINDOW.contains(&cut),
            "{what} connection closed after {cut:?}, expected about {limit:?} \
             (within {CUT_OFF_WINDOW:?})"
        );
    }
    assert!(
        silent_answer.is_empty() || silent_answer.starts_with("HTTP/1.1 408"),
        "a silent connection gets nothing or a bare 408: {silent_answer:?}"
    );

    assert_still_serves(&app, "slowloris");
    let cuts: Vec<Duration> = results.iter().filter_map(|r| r.cut_after).collect();
    let answered_408 = results.iter().filter(|r| !r.answer.is_empty()).count();
    println!(
        "hostile: slowloris (1 byte / {}, --header-read-timeout-ms {HEADER_READ_TIMEOUT_MS}): {SLOW_CLIENTS} slow clients cut off after {}–{} ({} with a bare 408, the rest closed silently, {}–{} bytes sent); meanwhile {} requests of another client, slowest {} ({worst_label}); idle keep-alive closed after {}, silent connection after {} ({} total)",
        millis(SLOW_BYTE_GAP),
        millis(*cuts.iter().min().expect("cuts")),
        millis(*cuts.iter().max().expect("cuts")),
        answered_408,
        results.iter().map(|r| r.bytes_sent).min().unwrap_or(0),
        results.iter().map(|r| r.bytes_sent).max().unwrap_or(0),
        latencies.len(),
        millis(worst),
        millis(idle_cut),
        millis(silent_cut),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// A thousand idle connections.
// ---------------------------------------------------------------------------------------

/// A connect slower than this was most likely a SYN dropped from a full accept backlog, which
/// costs 1 s.
const STALLED_CONNECT: Duration = Duration::from_millis(500);

/// The slowest a request may be among the idle connections.
const AMONG_IDLE_LATENCY_MAX: Duration = Duration::from_millis(500);

/// The server's resident memory with the idle connections open, at most.
const AMONG_IDLE_RSS_KIB_MAX: u64 = 128 * 1024;

/// Opens `n` connections that send nothing; returns them with the slowest connect and how
/// many connects were stalled (slower than [`STALLED_CONNECT`]).
fn open_idle_connections(addr: &str, n: usize) -> (Vec<TcpStream>, Duration, usize) {
    let mut slowest = Duration::ZERO;
    let mut stalled = 0;
    let streams = (0..n)
        .map(|i| {
            let t = Instant::now();
            let stream = TcpStream::connect(addr)
                .unwrap_or_else(|e| panic!("opening idle connection {i} of {n}: {e}"));
            let took = t.elapsed();
            slowest = slowest.max(took);
            if took > STALLED_CONNECT {
                stalled += 1;
            }
            stream
        })
        .collect();
    (streams, slowest, stalled)
}

/// The server's resident memory, from `/proc/<pid>/status`.
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// `tenantd_http_connections_open`, the scrape's own connection included.
fn connections_open(app: &TestApp) -> u64 {
    let text = app.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix("tenantd_http_connections_open "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no tenantd_http_connections_open in:\n{text}"))
}

fn wait_for_connections(app: &TestApp, timeout: Duration, pred: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + timeout;
    loop {
        let open = connections_open(app);
        if pred(open) || Instant::now() >= deadline {
            return open;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_thousand_idle_connections_do_not_starve_new_clients() {
    let _serial = serial();
    let started = Instant::now();
    const IDLE: u64 = 1000;
    // Idle connections outlive the test's measurements (the default is 10 s).
    let app = AppBuilder::new()
        .arg("--header-read-timeout-ms")
        .arg("60000")
        .spawn();
    let rss_before = vm_rss_kib(app.pid());
    let baseline = connections_open(&app);
    assert_eq!(baseline, 1, "only the scrape's own connection at first");

    let t = Instant::now();
    let (idle, slowest_connect, stalled_connects) = open_idle_connections(&app.addr, IDLE as usize);
    let opened_in = t.elapsed();
    let open = wait_for_connections(&app, Duration::from_secs(10), |n| n > IDLE);
    assert_eq!(
        open,
        IDLE + 1,
        "the gauge counts the {IDLE} idle connections and the scrape's own"
    );

    let t = Instant::now();
    let health = app.get_path("/healthz");
    let health_took = t.elapsed();
    assert_eq!(health.status, 200, "healthz among {IDLE} idle connections");
    let t = Instant::now();
    let created = app.create(&unique("among-idle"), "1");
    let create_took = t.elapsed();
    assert_eq!(
        created.status,
        201,
        "a create among {IDLE} idle connections: {}",
        created.describe()
    );
    for (what, took) in [("GET /healthz", health_took), ("a create", create_took)] {
        assert!(
            took < AMONG_IDLE_LATENCY_MAX,
            "{what} among {IDLE} idle connections took {took:?}, over {AMONG_IDLE_LATENCY_MAX:?}"
        );
    }
    let rss = vm_rss_kib(app.pid());
    assert!(
        rss < AMONG_IDLE_RSS_KIB_MAX,
        "the server's memory stays bounded with {IDLE} idle connections: VmRSS {rss} KiB, \
         at most {AMONG_IDLE_RSS_KIB_MAX} KiB"
    );
    // The idle connections were not dropped meanwhile.
    let still_open = idle
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).expect("non-blocking");
            let mut byte = [0u8; 1];
            let open =
                matches!((&**s).read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock);
            s.set_nonblocking(false).expect("blocking");
            open
        })
        .count();
    assert_eq!(still_open, IDLE as usize, "every idle connection is held");

    drop(idle);
    let t = Instant::now();
    let after = wait_for_connections(&app, Duration::from_secs(10), |n| n <= 1);
    let fell_in = t.elapsed();
    assert_eq!(
        after, 1,
        "the gauge falls back once the idle connections go"
    );
    assert_still_serves(&app, &format!("{IDLE} idle connections"));
    println!(
        "hostile: {IDLE} idle connections: opened in {} (slowest connect {}, {stalled_connects} over {}), gauge {open} (+1 = the scrape), GET /healthz {}, create {}, VmRSS {} KiB → {} KiB (+{} KiB, {:.1} KiB per connection); gauge back to {after} {} after closing ({} total)",
        millis(opened_in),
        millis(slowest_connect),
        millis(STALLED_CONNECT),
        millis(health_took),
        millis(create_took),
        rss_before,
        rss,
        rss.saturating_sub(rss_before),
        rss.saturating_sub(rss_before) as f64 / IDLE as f64,
        millis(fell_in),
        millis(started.elapsed())
    );
}

// ---------------------------------------------------------------------------------------
// Answers decided from the head while the body is still on its way.
// ---------------------------------------------------------------------------------------

/// The pause between a request's head and its body: long enough for the server to decide
/// its answer from the head alone before the body arrives.
const BODY_DELAY: Duration = Duration::from_millis(50);

/// The body-read limit of the test whose bodies cannot be read and dropped, in milliseconds.
const DRAIN_TIMEOUT_MS: u64 = 3000;

/// How much earlier than the limit an answer that waited for it may come: the timers of the
/// server and of the test do not start at the same instant.
const DRAIN_TIMER_SLACK: Duration = Duration::from_millis(50);

/// How soon a body that is not worth waiting for must be answered: well within
/// [`DRAIN_TIMEOUT_MS`], so that an answer that waited for the limit fails.
const UNDRAINED_ANSWER_WITHIN: Duration = Duration::from_millis(DRAIN_TIMEOUT_MS / 2);

/// One request whose answer the server can decide from its head alone.
struct EarlyAnswer<'a> {
    msg: &'a str,
    method: &'a str,
    path: String,
    headers: Vec<(&'a str, &'a [u8])>,
    body: Vec<u8>,
    status: u16,
    code: &'a str,
}

/// The head of a request and its body, split at the blank line.
fn head_and_body(bytes: &[u8]) -> (&[u8], &[u8]) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a request has a blank line")
        + 4;
    bytes.split_at(end)
}

#[test]
fn an_answer_given_before_the_body_arrived_leaves_the_connection_usable() {
    let started = Instant::now();
    let app = spawn_app();
    let auth = app.admin();
    let created = app.create_ok(&unique("early-owner"), "1");
    let own = bearer(&tenant_token(&created));
    let body = tenant_body(&unique("early"), "1").into_bytes();
    let json: (&str, &[u8]) = ("Content-Type", b"application/json");
    let rows = [
        EarlyAnswer {
            msg: "401: a create with a bad token",
            method: "POST",
            path: "/v1/tenants".to_owned(),
            headers: vec![("Authorization", b"Bearer not-a-token"), json],
            body: body.clone(),
            status: 401,
            code: "unauthorized",
        },
        EarlyAnswer {
            msg: "401: a create with a bad token and a chunked body",
            method: "POST",
            path: "/v1/tenants".to_owned(),
            headers: vec![
                ("Authorization", b"Bearer not-a-token"),
                json,
                ("Transfer-Encoding", b"chunked"),
            ],
            body: chunked(&body, 16),
            status: 401,
            code: "unauthorized",
        },
        EarlyAnswer {
            msg: "403: a tenant token on the admin's create",
            method: "POST",
            path: "/v1/tenants".to_owned(),
            headers: vec![("Authorization", own.as_bytes()), json],
            body: body.clone(),
            status: 403,
            code: "forbidden",
        },
        EarlyAnswer {
            msg: "404: an unknown path under /v1 with the admin token",
            method: "POST",
            path: "/v1/nope".to_owned(),
            headers: vec![("Authorization", auth.as_bytes()), json],
            body: body.clone(),
            status: 404,
            code: "not_found",
        },
        EarlyAnswer {
            msg: "405: PUT on the tenants collection",
            method: "PUT",
            path: "/v1/tenants".to_owned(),
            headers: vec![("Authorization", auth.as_bytes()), json],
            body: body.clone(),
            status: 405,
            code: "method_not_allowed",
        },
        EarlyAnswer {
            msg: "404 from a handler that reads no body: DELETE of an unknown tenant",
            method: "DELETE",
            path: "/v1/tenants/ten_00000000000000000000000000".to_owned(),
            headers: vec![("Authorization", auth.as_bytes()), json],
            body: body.clone(),
            status: 404,
            code: "tenant_not_found",
        },
    ];
    let follow_up = request_with_host(
        "GET",
        "/healthz",
        HTTP_11,
        &[("X-Request-Id", b"follow-up"), ("Connection", b"close")],
        None,
    );
    for row in &rows {
        let ctx = format!("{} ({} {})", row.msg, row.method, row.path);
        let before = written(&app);
        let mut headers = row.headers.clone();
        headers.push(("X-Request-Id", b"early"));
        let bytes = request_with_host(row.method, &row.path, HTTP_11, &headers, Some(&row.body));
        let (head, body) = head_and_body(&bytes);
        let mut conn = Conn::open(&app.addr);
        conn.send(head);
        thread::sleep(BODY_DELAY);
        conn.send(body);
        let resp = answer(&mut conn, IO_TIMEOUT)
            .unwrap_or_else(|| panic!("{ctx}: no answer; got {:?}", lossy_head(conn.unread())));
        assert_problem(&resp, row.status, row.code, &ctx);
        assert_eq!(resp.header("x-request-id"), Some("early"), "{ctx}");
        assert!(
            resp.header("connection").is_none(),
            "{ctx}: a body within the bound is read and dropped, so the connection stays \
             open: {}",
            resp.describe()
        );
        let sent = conn.try_send(&follow_up);
        let next = answer(&mut conn, IO_TIMEOUT);
        let next = next.unwrap_or_else(|| {
            panic!(
                "{ctx}: the server closed the connection after an answer without \
                 Connection: close, so the next request on it failed (write: {sent:?})"
            )
        });
        assert_eq!(
            next.status,
            200,
            "{ctx}: the next request: {}",
            next.describe()
        );
        assert_eq!(
            next.header("x-request-id"),
            Some("follow-up"),
            "{ctx}: the next answer is the next request's: {}",
            next.describe()
        );
        assert_closed(&mut conn, &ctx);
        assert_nothing_written(&app, before, &ctx);
    }
    assert_still_serves(&app, "answers before the body");
    println!(
        "hostile: answers decided before the body ({} later): {} cases (401, 401 chunked, 403, \
         404, 405, a handler's 404), each followed by GET /healthz 200 on the same connection \
         ({} total)",
        millis(BODY_DELAY),
        rows.len(),
        millis(started.elapsed())
    );
}

/// A request answered `401` from its head, whose body the server cannot read and drop first.
struct Undrainable<'a> {
    msg: &'a str,
    headers: Vec<(&'a str, &'a [u8])>,
    /// The part of the body sent right after the head.
    sent: &'a [u8],
    /// Whether the answer waits for the body-read limit.
    waits: bool,
}

#[test]
fn an_answer_before_a_body_that_cannot_be_dropped_says_connection_close() {
    let started = Instant::now();
    let app = AppBuilder::new()
        .arg("--body-read-timeout-ms")
        .arg(&DRAIN_TIMEOUT_MS.to_string())
        .spawn();
    let json: (&str, &[u8]) = ("Content-Type", b"application/json");
    let bad: (&str, &[u8]) = ("Authorization", b"Bearer not-a-token");
    let rows = [
        Undrainable {
            msg: "a body over the size bound",
            headers: vec![bad, json, ("Content-Length", b"70000")],
            sent: b"",
            waits: false,
        },
        Undrainable {
            msg: "a client waiting for 100 Continue",
            headers: vec![
                bad,
                json,
                ("Content-Length", b"30"),
                ("Expect", b"100-continue"),
            ],
            sent: b"",
            waits: false,
        },
        Undrainable {
            msg: "a client that said Connection: close",
            headers: vec![
                bad,
                json,
                ("Content-Length", b"30"),
                ("Connection", b"close"),
            ],
            sent: b"",
            waits: false,
        },
        Undrainable {
            msg: "a body that stops arriving",
            headers: vec![bad, json, ("Content-Length", b"30")],
            sent: b"{\"name\":",
            waits: true,
        },
    ];
    let mut took = Vec::new();
    for Undrainable {
        msg,
        headers,
        sent,
        waits,
    } in &rows
    {
        let ctx = format!("401 before {msg}");
        let bytes = request_with_host("POST", "/v1/tenants", HTTP_11, headers, None);
        let mut conn = Conn::open(&app.addr);
        let t = Instant::now();
        conn.send(&bytes);
        conn.send(sent);
        let resp = answer(&mut conn, IO_TIMEOUT)
            .unwrap_or_else(|| panic!("{ctx}: no answer; got {:?}", lossy_head(conn.unread())));
        let elapsed = t.elapsed();
        assert_problem(&resp, 401, "unauthorized", &ctx);
        assert_close_header(&resp, &ctx);
        assert_closed(&mut conn, &ctx);
        let limit = Duration::from_millis(DRAIN_TIMEOUT_MS);
        if *waits {
            assert!(
                elapsed >= limit - DRAIN_TIMER_SLACK,
                "{ctx}: the body had until --body-read-timeout-ms ({limit:?}) to arrive, \
                 answered after {elapsed:?}"
            );
        } else {
            assert!(
                elapsed < UNDRAINED_ANSWER_WITHIN,
                "{ctx}: answered at once, not after waiting for the body: {elapsed:?}"
            );
        }
        took.push(format!("{msg}: 401+close in {}", millis(elapsed)));
    }
    assert_still_serves(&app, "answers before bodies that cannot be dropped");
    println!(
        "hostile: answers before bodies that cannot be dropped (--body-read-timeout-ms \
         {DRAIN_TIMEOUT_MS}): {} ({} total)",
        took.join(", "),
        millis(started.elapsed())
    );
}
