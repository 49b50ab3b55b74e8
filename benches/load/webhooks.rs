//! Webhooks: the spend path with and without ten enabled endpoints subscribed to everything
//! (charges and reserve+commit cycles write no events, so they should not notice), then
//! deliveries to a receiver of the generator's own that answers `200` at once, fed by credits
//! at a fixed pace (each credit's event goes to all ten endpoints) while charges run beside
//! them. The deliveries' rate and their latency from the event's writing (its id's
//! millisecond) to the receiver reading it are in the notes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::args::Args;
use crate::client::Stop;
use crate::report::Row;
use crate::server::Server;
use crate::spend::{
    Plan, SPREAD_BUDGETS, measure_charges, measure_credits, measure_cycles, plans, spend_rows,
};
use crate::wire;
use crate::workloads::seed;

/// Endpoints subscribed to every event, all to the one receiver.
const ENDPOINTS: usize = 10;

/// Credits a second that feed the deliveries (each event goes to every endpoint).
const CREDITS_PER_S: u64 = 250;

/// Connections that credit at that pace; the others charge.
const CREDITING_CONNECTIONS: u64 = 5;

/// How long the deliveries may trail the last credit before the row gives up on them.
const DRAIN_MAX: Duration = Duration::from_secs(60);

/// The largest request head and body the receiver reads.
const REQUEST_BYTES_MAX: usize = 64 * 1024;

/// What the receiver saw.
#[derive(Default)]
struct Received {
    /// Requests read, in all.
    count: AtomicU64,
    /// Whether latencies are being recorded.
    measuring: AtomicBool,
    /// Requests read while measuring.
    measured: AtomicU64,
    /// Milliseconds from an event's writing to its delivery, while measuring.
    latency_ms: Mutex<Option<Histogram<u64>>>,
}

/// The rows and notes of the group.
pub(crate) async fn measure(args: &Args) -> Result<(Vec<Row>, Vec<String>), String> {
    let received = Arc::new(Received::default());
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("the receiver cannot listen: {e}"))?;
    let url = format!(
        "http://{}/hook",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let receiver = tokio::spawn(receive(listener, Arc::clone(&received)));

    eprintln!("server: the spend path beside {ENDPOINTS} webhook endpoints, then deliveries");
    let flags = ["--webhook-allow-http", "--webhook-allow-private"];
    let server = Server::start(args, &flags)?;
    let spread = Arc::new(seed(&server, args, 0, SPREAD_BUDGETS).await?);
    let mut rows = Vec::new();
    let none = format!("{SPREAD_BUDGETS} budgets, no endpoint");
    rows.extend(measure_charges(args, &server, &none, &spread).await?.0);
    rows.extend(measure_cycles(args, &server, &none, &spread).await?.0);
    rows.extend(measure_credits(args, &server, &none, &spread).await?.0);
    let auth = format!("Bearer {}", server.token);
    for _ in 0..ENDPOINTS {
        let body = format!(r#"{{"url":"{url}"}}"#);
        let resp = wire::request(
            &server.addr(0).to_string(),
            "POST",
            "/v1/webhook-endpoints",
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ],
            Some(body.as_bytes()),
        );
        if resp.status != 201 {
            return Err(format!("an endpoint was not made: {}", resp.status));
        }
    }
    let ten = format!("{SPREAD_BUDGETS} budgets, {ENDPOINTS} endpoints");
    rows.extend(measure_charges(args, &server, &ten, &spread).await?.0);
    rows.extend(measure_cycles(args, &server, &ten, &spread).await?.0);

    // Deliveries: paced credits on a few connections, charges on the rest.
    let before = received.count.load(Ordering::Relaxed);
    *received.latency_ms.lock().expect("not poisoned") =
        Some(Histogram::new_with_bounds(1, 3_600_000, 3).map_err(|e| e.to_string())?);
    received.measuring.store(true, Ordering::Relaxed);
    let auth: Arc<str> = auth.into();
    let pace = Duration::from_micros(1_000_000 * CREDITING_CONNECTIONS / CREDITS_PER_S);
    let crediting = usize::try_from(CREDITING_CONNECTIONS).unwrap_or(1);
    let mut mixed = plans(
        crediting,
        || Plan::Credit {
            auth: Arc::clone(&auth),
            pace: Some(pace),
        },
        None,
    );
    mixed.extend(plans(
        args.connections.saturating_sub(crediting).max(1),
        || Plan::Charge,
        None,
    ));
    let started = Instant::now();
    let stop = Stop::At(started + args.duration);
    let name = format!("credits at {CREDITS_PER_S}/s beside, {ENDPOINTS} endpoints");
    let (_, mixed_rows) = spend_rows(&server, &spread, mixed, stop, &name).await?;
    let window = started.elapsed();
    let in_window = received.count.load(Ordering::Relaxed) - before;
    rows.extend(mixed_rows);
    let credits = rows
        .last()
        .filter(|r| r.name.starts_with("POST credit"))
        .map_or(0, |r| r.tally.requests);
    let expected = before + credits * ENDPOINTS as u64;
    let drained = Instant::now();
    while received.count.load(Ordering::Relaxed) < expected && drained.elapsed() < DRAIN_MAX {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    received.measuring.store(false, Ordering::Relaxed);
    let trail = drained.elapsed();
    let got = received.count.load(Ordering::Relaxed) - before;
    let hist = received
        .latency_ms
        .lock()
        .expect("not poisoned")
        .take()
        .ok_or("no latencies")?;
    server.stop();
    receiver.abort();
    let mut notes = vec![format!(
        "webhooks: {got} of {} deliveries received ({} events × {ENDPOINTS} endpoints); \
         {:.0} deliveries/s during the {:.1} s of credits and charges, the last {:.2} s after \
         them; from event written to delivery received p50 {} ms, p99 {} ms, max {} ms",
        credits * ENDPOINTS as u64,
        credits,
        in_window as f64 / window.as_secs_f64(),
        window.as_secs_f64(),
        trail.as_secs_f64(),
        hist.value_at_quantile(0.50),
        hist.value_at_quantile(0.99),
        hist.max(),
    )];
    if got < credits * ENDPOINTS as u64 {
        notes.push(format!(
            "webhooks: {} deliveries did not arrive within {} s",
            credits * ENDPOINTS as u64 - got,
            DRAIN_MAX.as_secs()
        ));
    }
    Ok((rows, notes))
}

/// Accepts deliveries: reads each request whole, answers `200` at once and closes.
async fn receive(listener: TcpListener, received: Arc<Received>) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(4096);
            let mut chunk = [0u8; 4096];
            let id = loop {
                let Ok(n) = stream.read(&mut chunk).await else {
                    return;
                };
                if n == 0 || buf.len() > REQUEST_BYTES_MAX {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(id) = whole_request(&buf) {
                    break id;
                }
            };
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            received.count.fetch_add(1, Ordering::Relaxed);
            if received.measuring.load(Ordering::Relaxed) {
                received.measured.fetch_add(1, Ordering::Relaxed);
                if let Some(written) = id {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    if let Some(h) = received.latency_ms.lock().expect("not poisoned").as_mut() {
                        h.saturating_record(now.saturating_sub(written).max(1));
                    }
                }
            }
        });
    }
}

/// When `buf` holds a whole request (its head and `content-length` bytes of body): the
/// millisecond its `webhook-id` (an event id, a ULID) was made, if it has one.
fn whole_request(buf: &[u8]) -> Option<Option<u64>> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    let length: usize = header("content-length").and_then(|v| v.parse().ok())?;
    if buf.len() < end + length {
        return None;
    }
    Some(
        header("webhook-id")
            .and_then(|id| id.strip_prefix("evt_"))
            .and_then(ulid_ms),
    )
}

/// The millisecond a ULID's text holds (its first ten Crockford base32 characters).
fn ulid_ms(text: &str) -> Option<u64> {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    text.get(..10)?.bytes().try_fold(0u64, |ms, c| {
        let digit = ALPHABET.iter().position(|a| *a == c)? as u64;
        Some(ms * 32 + digit)
    })
}
