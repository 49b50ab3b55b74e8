//! One connection's requests: a keep-alive socket, each request sent and its whole response
//! read before the next, the latency recorded; and the tally of statuses a phase keeps.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire;

/// Largest response the client accepts; tenantd's are far smaller.
const RESPONSE_BYTES_MAX: usize = 1 << 20;

/// Latencies above this are recorded as this (the histogram's range).
pub(crate) const LATENCY_US_MAX: u64 = 60_000_000;

/// Bytes a connection reads from its socket at a time.
pub(crate) const READ_CHUNK_BYTES: usize = 8192;

/// The `Host` header of every request.
pub(crate) const HOST: (&str, &str) = ("Host", "bench");

/// The clock's nanoseconds since the epoch: a seed, and a run's mark in the names it makes.
pub(crate) fn seed_from_clock() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(1)
}

/// The targets a connection picks from at random: `count` of them, the first at `first`,
/// then every `stride`th.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pick {
    pub(crate) first: usize,
    pub(crate) stride: usize,
    pub(crate) count: usize,
}

impl Pick {
    /// Every one of `targets`.
    pub(crate) fn all(targets: usize) -> Pick {
        Pick {
            first: 0,
            stride: 1,
            count: targets,
        }
    }

    /// The index of a target picked at random.
    pub(crate) fn next(&self, rng: &mut u64) -> usize {
        self.first + self.stride * (next(rng) % self.count as u64) as usize
    }
}

/// xorshift64*: plenty for picking ids.
pub(crate) fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// When a phase ends: at a time, or after a number of requests shared by all connections.
#[derive(Clone)]
pub(crate) enum Stop {
    At(Instant),
    After(Arc<AtomicU64>),
}

impl Stop {
    pub(crate) fn take(&self) -> bool {
        match self {
            Stop::At(t) => Instant::now() < *t,
            Stop::After(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }
}

/// What a phase's requests answered: how many, how many failed (any non-2xx) and with
/// which statuses.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) statuses: Vec<(u16, u64)>,
    /// The tenants created, when collected.
    pub(crate) paths: Vec<Seeded>,
}

impl Tally {
    pub(crate) fn count(&mut self, status: u16) {
        self.requests += 1;
        if !(200..300).contains(&status) {
            self.errors += 1;
            match self.statuses.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => self.statuses.push((status, 1)),
            }
        }
    }

    pub(crate) fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        self.errors += other.errors;
        for (status, n) in other.statuses {
            match self.statuses.iter_mut().find(|(s, _)| *s == status) {
                Some((_, m)) => *m += n,
                None => self.statuses.push((status, n)),
            }
        }
        self.paths.extend(other.paths);
    }
}

/// An empty latency histogram: microseconds from 1 to [`LATENCY_US_MAX`], three significant
/// digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
}

/// A keep-alive connection to the server, with Nagle's algorithm off.
pub(crate) async fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(stream)
}

/// Sends `request` and reads its response into `buf`: the response's place there, and the
/// microseconds from the first byte sent to the last byte read.
pub(crate) async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> Result<(wire::Frame, u64), String> {
    let started = Instant::now();
    stream.write_all(request).await.map_err(|e| e.to_string())?;
    let frame = read_response(stream, buf).await?;
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok((frame, micros))
}

/// Writes a `POST` of the JSON `body` to `path` with the `Authorization` value `auth` into
/// `request` (emptied first), and exchanges it on `stream` ([`exchange`]).
pub(crate) async fn post_json(
    stream: &mut TcpStream,
    (request, buf): (&mut Vec<u8>, &mut Vec<u8>),
    path: &str,
    auth: &str,
    body: &[u8],
) -> Result<(wire::Frame, u64), String> {
    let headers = [
        HOST,
        ("Authorization", auth),
        ("Content-Type", "application/json"),
    ];
    request.clear();
    wire::write_request(request, "POST", path, wire::HTTP_11, &headers, Some(body));
    exchange(stream, request, buf).await
}

/// Reads until a whole response lies at the front of `buf`, and locates it there.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<wire::Frame, String> {
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    loop {
        if let Some(frame) = wire::parse_frame(buf, false, false).map_err(|e| e.to_string())? {
            return Ok(frame);
        }
        if buf.len() > RESPONSE_BYTES_MAX {
            return Err(format!("a response longer than {RESPONSE_BYTES_MAX} bytes"));
        }
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(match wire::parse_frame(buf, false, true) {
                Err(e) => format!("the server closed the connection: {e}"),
                Ok(_) => "the server closed the connection".into(),
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A tenant the seeding made: its path and its own `Authorization` value.
pub(crate) struct Seeded {
    /// `/v1/tenants/<id>`.
    pub(crate) path: String,
    /// `/v1/tenants/<id>/budgets/<its default budget>`.
    pub(crate) budget_path: String,
    /// Its default budget's id.
    pub(crate) budget_id: String,
    /// `Bearer <its tenant token>`.
    pub(crate) auth: String,
}

/// The tenant a create's body describes.
pub(crate) fn tenant_path(body: &[u8]) -> Option<Seeded> {
    let created: serde_json::Value = serde_json::from_slice(body).ok()?;
    let token = created["sidecar_config_env"]["TENANTD_TENANT_TOKEN"].as_str()?;
    let path = format!("/v1/tenants/{}", created["id"].as_str()?);
    let budget_id = created["budget"]["id"].as_str()?.to_owned();
    Some(Seeded {
        budget_path: format!("{path}/budgets/{budget_id}"),
        budget_id,
        path,
        auth: format!("Bearer {token}"),
    })
}
