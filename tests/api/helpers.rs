//! Shared machinery of the black-box tests.
//!
//! Every test starts the real `tenantd` binary on port 0 with a fresh database in its own
//! temporary directory, talks HTTP/1.1 to it over a hand-written client (so a test sees the
//! exact bytes the server sends), and checks the SQLite file on its own, without trusting
//! the service.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

/// The binary under test, built by Cargo for this test target.
pub const BIN: &str = env!("CARGO_BIN_EXE_tenantd");

/// How long a server may take to print its `listening on` line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one read or write on a test connection may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping server or a command-line run may take to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// The contract's body limit.
pub const BODY_BYTES_MAX: usize = 65_536;

/// `u128::MAX` in decimal, the largest amount the contract accepts.
pub const U128_MAX: &str = "340282366920938463463374607431768211455";

/// The `prev_hash` of the first audit event.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The marker of the start-up line that names the bound address.
pub const LISTENING_MARKER: &str = "listening on http://";

/// Variables that configure tenantd; they are removed from every child so the developer's
/// own environment cannot change a test.
const TENANTD_ENV_VARS: &[&str] = &[
    "ADMIN_TOKEN",
    "TENANTD_ADMIN_TOKEN_FILE",
    "TENANTD_LISTEN",
    "TENANTD_DB",
    "TENANTD_PUBLIC_URL",
    "RUST_LOG",
];

/// The log of one or more server runs: every stderr line, in order.
pub type LogBuffer = Arc<Mutex<Vec<String>>>;

// ---------------------------------------------------------------------------------------
// Randomness and small encodings.
// ---------------------------------------------------------------------------------------

/// Bytes from the OS random source, for tokens and unique names.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom is readable");
    buf
}

/// Lowercase hex of some bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` random bytes in lowercase hex (2n characters).
pub fn random_hex(n: usize) -> String {
    hex(&random_bytes(n))
}

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", random_hex(6))
}

/// A fresh 64-character admin token.
pub fn random_admin_token() -> String {
    random_hex(32)
}

/// The SHA-256 of some bytes.
pub fn sha256(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).iter().copied().collect()
}

/// Lowercase hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256(bytes))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as i64
}

/// A tiny deterministic generator (xorshift64*), seeded by the caller, for test timing.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

// ---------------------------------------------------------------------------------------
// Shapes the contract fixes.
// ---------------------------------------------------------------------------------------

/// Crockford's base32 alphabet, as used by ULIDs.
pub const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// `ten_` followed by 26 upper-case Crockford characters that fit 128 bits.
pub fn is_tenant_id(s: &str) -> bool {
    let Some(ulid) = s.strip_prefix("ten_") else {
        return false;
    };
    ulid.len() == 26 && ulid.chars().all(|c| CROCKFORD.contains(c)) && ulid.as_bytes()[0] <= b'7'
}

/// The 48-bit millisecond time at the front of a tenant id's ULID.
pub fn ulid_ms(id: &str) -> i64 {
    let ulid = id.strip_prefix("ten_").expect("a tenant id");
    let mut value: i64 = 0;
    for c in ulid[..10].chars() {
        let digit = CROCKFORD.find(c).expect("a Crockford character") as i64;
        value = value * 32 + digit;
    }
    value
}

/// RFC 3339, UTC, millisecond precision, `Z` suffix: `2026-11-22T10:00:00.123Z`.
pub fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 24 {
        return false;
    }
    let digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22];
    digits.iter().all(|&i| b[i].is_ascii_digit())
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z'
        && timestamp_ms_checked(s).is_some()
}

fn timestamp_ms_checked(s: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let (y2, m2) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms)
}

/// Milliseconds since the epoch of a contract timestamp.
pub fn timestamp_ms(s: &str) -> i64 {
    timestamp_ms_checked(s).unwrap_or_else(|| panic!("{s:?} is not a contract timestamp"))
}

/// An environment variable name as the contract allows: `^[A-Z][A-Z0-9_]*$`.
pub fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('A'..='Z'))
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The JSON text of a create request.
pub fn tenant_body(name: &str, amount: &str) -> String {
    json!({ "name": name, "opening_deposit_atomic": amount }).to_string()
}

/// The RFC 9110 reason phrase the problem `title` must carry.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => panic!("no reason phrase listed for {status}"),
    }
}

// ---------------------------------------------------------------------------------------
// The HTTP/1.1 client.
// ---------------------------------------------------------------------------------------

/// One HTTP response, as received.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the response if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.describe()))
    }

    /// A one-line summary for assertion messages.
    pub fn describe(&self) -> String {
        let mut text = self.text();
        if text.len() > 600 {
            let mut cut = 600;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        format!(
            "status {} headers {:?} body {text}",
            self.status, self.headers
        )
    }
}

/// Builds the bytes of a request. `Host` and `Connection: close` are always sent;
/// `Content-Length` is added for a body unless the caller set it or `Transfer-Encoding`.
pub fn build_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::new();
    write!(
        out,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n"
    )
    .expect("writing to a Vec");
    for (name, value) in headers {
        write!(out, "{name}: {value}\r\n").expect("writing to a Vec");
    }
    let framed = headers.iter().any(|(n, _)| {
        n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
    });
    if let Some(body) = body
        && !framed
    {
        write!(out, "Content-Length: {}\r\n", body.len()).expect("writing to a Vec");
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
    out
}

/// Sends raw bytes and returns everything that came back until the server closed the
/// connection. Large requests are written from a second thread, so a response sent before
/// the server read the whole request (a `413`, a `401`) is still received.
pub fn try_raw(addr: &str, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let writer = if bytes.len() > 16 * 1024 {
        let mut w = stream.try_clone()?;
        let owned = bytes.to_vec();
        Some(thread::spawn(move || {
            // The server may close early on purpose; a failed write is then expected.
            let _ = w.write_all(&owned);
        }))
    } else {
        stream.write_all(bytes)?;
        None
    };
    let mut received = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let result = loop {
        match stream.read(&mut chunk) {
            Ok(0) => break Ok(()),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        }
    };
    if let Some(w) = writer {
        // Unblock a writer stuck on a full socket before joining it.
        let _ = stream.shutdown(std::net::Shutdown::Both);
        let _ = w.join();
    }
    match result {
        Ok(()) => Ok(received),
        // A reset after a complete response still leaves the response usable.
        Err(_) if !received.is_empty() => Ok(received),
        Err(e) => Err(e),
    }
}

/// Like [`try_raw`], panicking on a transport error.
pub fn raw(addr: &str, bytes: &[u8]) -> Vec<u8> {
    try_raw(addr, bytes).unwrap_or_else(|e| panic!("raw exchange with {addr} failed: {e}"))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

fn decode_chunked(mut body: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = find(body, b"\r\n").ok_or_else(|| invalid("truncated chunk size"))?;
        let line = std::str::from_utf8(&body[..line_end]).map_err(|_| invalid("chunk size"))?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("chunk size"))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "truncated chunk",
            ));
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// Parses a complete response. A response cut short is an error, so a client killed
/// mid-response never counts as acknowledged.
pub fn parse_response(bytes: &[u8], head_request: bool) -> io::Result<Response> {
    let head_end = find(bytes, b"\r\n\r\n").ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "no complete response head in {:?}",
                String::from_utf8_lossy(bytes)
            ),
        )
    })?;
    let head = String::from_utf8_lossy(&bytes[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &bytes[head_end + 4..];
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let body = if head_request || status == 204 || status == 304 {
        Vec::new()
    } else if get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        decode_chunked(rest)?
    } else if let Some(len) = get("content-length") {
        let len: usize = len.parse().map_err(|_| invalid("bad content-length"))?;
        if rest.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "truncated body",
            ));
        }
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// One request on a fresh connection; a transport error or a truncated response is `Err`.
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<Response> {
    let bytes = build_request(addr, method, path, headers, body);
    let received = try_raw(addr, &bytes)?;
    parse_response(&received, method.eq_ignore_ascii_case("HEAD"))
}

/// One request on a fresh connection, panicking on a transport error.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Response {
    try_request(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr} failed: {e}"))
}

/// `POST /v1/tenants` of `name` with an opening deposit of 1, on a fresh connection; for
/// threads, which hold an address and an `Authorization` value rather than a `TestApp`.
pub fn try_post_tenant(addr: &str, auth: &str, name: &str) -> io::Result<Response> {
    let body = tenant_body(name, "1");
    try_request(
        addr,
        "POST",
        "/v1/tenants",
        &[
            ("Authorization", auth),
            ("Content-Type", "application/json"),
        ],
        Some(body.as_bytes()),
    )
}

/// [`try_post_tenant`], panicking on a transport error.
pub fn post_tenant(addr: &str, auth: &str, name: &str) -> Response {
    try_post_tenant(addr, auth, name)
        .unwrap_or_else(|e| panic!("POST /v1/tenants on {addr} failed: {e}"))
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

// ---------------------------------------------------------------------------------------
// Problem bodies.
// ---------------------------------------------------------------------------------------

/// Checks one RFC 9457 error response against the contract and returns its body.
pub fn assert_problem(resp: &Response, status: u16, code: &str, ctx: &str) -> Value {
    assert_eq!(
        resp.status,
        status,
        "{ctx}: expected status {status} ({code}), got {}",
        resp.describe()
    );
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type
            .to_ascii_lowercase()
            .starts_with("application/problem+json"),
        "{ctx}: an error must be application/problem+json, got {content_type:?}"
    );
    let body = resp.json();
    assert_eq!(body["type"], "about:blank", "{ctx}: problem type; {body}");
    assert_eq!(
        body["title"],
        reason_phrase(status),
        "{ctx}: problem title is the RFC 9110 phrase; {body}"
    );
    assert_eq!(
        body["status"], status,
        "{ctx}: problem status member; {body}"
    );
    assert_eq!(body["code"], code, "{ctx}: problem code; {body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        !detail.trim().is_empty(),
        "{ctx}: detail must be a non-empty sentence; {body}"
    );
    let request_id = resp.header("x-request-id").unwrap_or_default();
    assert!(
        !request_id.is_empty(),
        "{ctx}: every response carries X-Request-Id; {}",
        resp.describe()
    );
    assert_eq!(
        body["request_id"], request_id,
        "{ctx}: request_id in the body equals the X-Request-Id header"
    );
    if code == "validation_failed" {
        let errors = body["errors"].as_array();
        assert!(
            errors.is_some_and(|e| !e.is_empty()),
            "{ctx}: validation_failed lists its errors; {body}"
        );
    } else {
        assert!(
            body.get("errors").is_none(),
            "{ctx}: only validation_failed carries errors; {body}"
        );
    }
    if status == 401 {
        assert_eq!(
            resp.header("www-authenticate"),
            Some("Bearer realm=\"tenantd\""),
            "{ctx}: 401 carries WWW-Authenticate"
        );
    }
    if status == 405 {
        assert!(
            resp.header("allow").is_some(),
            "{ctx}: 405 carries Allow; {}",
            resp.describe()
        );
    }
    if status == 408 {
        assert!(
            resp.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "{ctx}: 408 carries Connection: close; {}",
            resp.describe()
        );
    }
    if status == 503 {
        assert_eq!(
            resp.header("retry-after"),
            Some("1"),
            "{ctx}: 503 carries Retry-After: 1"
        );
    }
    body
}

/// The `field` members of a validation problem's `errors`, sorted, after checking every
/// entry has a non-empty message.
pub fn error_fields(body: &Value, ctx: &str) -> Vec<String> {
    let errors = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: no errors array in {body}"));
    let mut fields: Vec<String> = errors
        .iter()
        .map(|e| {
            let message = e["message"].as_str().unwrap_or_default();
            assert!(
                !message.trim().is_empty(),
                "{ctx}: every error entry has a message; {e}"
            );
            e["field"]
                .as_str()
                .unwrap_or_else(|| panic!("{ctx}: error entry without field: {e}"))
                .to_owned()
        })
        .collect();
    fields.sort();
    fields
}

/// The set of methods of an `Allow` header, sorted.
pub fn allow_set(resp: &Response) -> Vec<String> {
    let mut methods: Vec<String> = resp
        .header("allow")
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .collect();
    methods.sort();
    methods
}

// ---------------------------------------------------------------------------------------
// Running the binary.
// ---------------------------------------------------------------------------------------

/// A `tenantd` command with a clean environment: no tenantd variable of the caller's,
/// `RUST_LOG=info`, working directory `cwd`.
pub fn tenantd_command(cwd: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    for var in TENANTD_ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "info").current_dir(cwd);
    cmd
}

/// Waits at most `timeout` for a child to exit; kills it and returns `None` if it does not.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait().expect("try_wait on a child") {
            Some(status) => return Some(status),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// What a command-line run of `tenantd` did.
#[derive(Debug)]
pub struct CliOutput {
    /// The exit code; `None` if it had to be killed or died of a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tenantd` with `args` and extra `envs` in `cwd`, bounded by `timeout`.
pub fn run_cli_in(
    cwd: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
    timeout: Duration,
) -> CliOutput {
    let mut cmd = tenantd_command(cwd);
    cmd.args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning tenantd");
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = wait_exit(&mut child, timeout);
    CliOutput {
        code: status.and_then(|s| s.code()),
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
    }
}

/// Runs `tenantd` with `args` in a throw-away directory.
pub fn run_cli(args: &[&str]) -> CliOutput {
    let dir = TempDir::new().expect("a temporary directory");
    run_cli_in(dir.path(), args, &[], EXIT_TIMEOUT)
}

/// `tenantd audit verify --db PATH`.
pub fn audit_verify(db: &Path) -> CliOutput {
    let db = db.to_str().expect("a UTF-8 path");
    run_cli(&["audit", "verify", "--db", db])
}

/// `tenantd backup --db DB --to TO`.
pub fn backup(db: &Path, to: &Path) -> CliOutput {
    let db = db.to_str().expect("a UTF-8 path");
    let to = to.to_str().expect("a UTF-8 path");
    run_cli(&["backup", "--db", db, "--to", to])
}

/// A running server: the child, its address and the log it writes.
pub struct Server {
    pub child: Child,
    pub addr: String,
}

/// Starts `cmd` with stderr captured into `log`, and waits for its `listening on` line.
/// Panics with the captured log if it exits or stays silent.
pub fn start_server(mut cmd: Command, log: &LogBuffer) -> Server {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let first_line = log.lock().expect("log lock").len();
    let mut child = cmd.spawn().expect("spawning tenantd serve");
    let stderr = child.stderr.take().expect("piped stderr");
    let sink = Arc::clone(log);
    thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    sink.lock().expect("log lock").push(text);
                }
            }
        }
    });
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        let found = log.lock().expect("log lock")[first_line..]
            .iter()
            .find_map(|l| l.split(LISTENING_MARKER).nth(1).map(str::to_owned));
        if let Some(rest) = found {
            let addr = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_owned();
            return Server { child, addr };
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            thread::sleep(Duration::from_millis(100));
            panic!(
                "tenantd exited ({status}) before listening; log:\n{}",
                log.lock().expect("log lock").join("\n")
            );
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tenantd printed no {LISTENING_MARKER:?} line within {STARTUP_TIMEOUT:?}; log:\n{}",
                log.lock().expect("log lock").join("\n")
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Writes `contents` to `path` with mode 0600.
pub fn write_private(path: &Path, contents: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("creating a private file");
    f.write_all(contents.as_bytes())
        .expect("writing a private file");
}

/// The permission bits of a file.
pub fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The `-wal` file beside a database.
pub fn wal_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// Opens a database read-only for independent checks.
pub fn open_ro(path: &Path) -> Connection {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap_or_else(|e| panic!("opening {} read-only: {e}", path.display()));
    conn.busy_timeout(Duration::from_secs(5))
        .expect("setting a busy timeout");
    conn
}

/// Opens a database read-write (for tampering and locking tests only).
pub fn open_rw(path: &Path) -> Connection {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap_or_else(|e| panic!("opening {} read-write: {e}", path.display()));
    conn.busy_timeout(Duration::from_secs(5))
        .expect("setting a busy timeout");
    conn
}

/// `SELECT count(*) ...` or any query with one integer result.
pub fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |row| row.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// One row of `audit_events`, as stored.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub seq: i64,
    pub occurred_at: String,
    pub actor: String,
    pub action: String,
    pub tenant_id: String,
    pub payload: String,
    pub prev_hash: String,
    pub hash: String,
}

impl AuditRow {
    /// The hash the contract defines for this row, computed here.
    pub fn expected_hash(&self) -> String {
        let text = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.prev_hash,
            self.seq,
            self.occurred_at,
            self.actor,
            self.action,
            self.tenant_id,
            self.payload
        );
        sha256_hex(text.as_bytes())
    }
}

/// Every audit row, in `seq` order.
pub fn audit_rows(conn: &Connection) -> Vec<AuditRow> {
    let mut stmt = conn
        .prepare(
            "SELECT seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash \
             FROM audit_events ORDER BY seq",
        )
        .expect("preparing the audit query");
    stmt.query_map([], |r| {
        Ok(AuditRow {
            seq: r.get(0)?,
            occurred_at: r.get(1)?,
            actor: r.get(2)?,
            action: r.get(3)?,
            tenant_id: r.get(4)?,
            payload: r.get(5)?,
            prev_hash: r.get(6)?,
            hash: r.get(7)?,
        })
    })
    .expect("querying audit_events")
    .collect::<Result<Vec<_>, _>>()
    .expect("reading audit_events")
}

/// Checks the whole chain from the file alone: gapless `seq` from 1, genesis, links and
/// hashes. Returns the head hash.
pub fn assert_chain_valid(rows: &[AuditRow], ctx: &str) -> String {
    let mut prev = GENESIS_HASH.to_owned();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row.seq,
            i as i64 + 1,
            "{ctx}: seq is gapless from 1; {row:?}"
        );
        assert_eq!(
            row.prev_hash, prev,
            "{ctx}: prev_hash links to the row before; {row:?}"
        );
        assert!(
            row.hash.len() == 64
                && row
                    .hash
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{ctx}: hash is 64 lowercase hex; {row:?}"
        );
        assert_eq!(
            row.hash,
            row.expected_hash(),
            "{ctx}: hash of seq {} recomputed independently",
            row.seq
        );
        prev = row.hash.clone();
    }
    prev
}

/// Every byte of a database file and its `-wal`, for searching secrets in them.
pub fn db_bytes(db: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(db).unwrap_or_default();
    bytes.extend(std::fs::read(wal_path(db)).unwrap_or_default());
    bytes
}

/// The names of the files in `dir` whose bytes contain `needle`; with a database there,
/// that covers the file, its `-wal` and its `-shm`.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut holding: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .filter(|path| contains_bytes(&std::fs::read(path).unwrap_or_default(), needle))
        .map(|path| {
            path.file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    holding.sort();
    holding
}

/// Whether `needle` occurs in `haystack`.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && find(haystack, needle).is_some()
}

// ---------------------------------------------------------------------------------------
// The app under test.
// ---------------------------------------------------------------------------------------

/// Options for [`TestApp`]: extra flags and environment.
#[derive(Default)]
pub struct AppBuilder {
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl AppBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a flag (or a flag's value) after the standard ones.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    /// Sets an environment variable of the server.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.envs.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the server on a fresh database.
    pub fn spawn(self) -> TestApp {
        let dir = TempDir::new().expect("a temporary directory");
        let admin_token = random_admin_token();
        let token_path = dir.path().join("admin-token");
        write_private(&token_path, &format!("{admin_token}\n"));
        let db_path = dir.path().join("tenantd.db");
        let mut args = vec![
            "serve".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--db".to_owned(),
            db_path.to_str().expect("a UTF-8 path").to_owned(),
            "--admin-token-file".to_owned(),
            token_path.to_str().expect("a UTF-8 path").to_owned(),
        ];
        args.extend(self.args);
        let mut app = TestApp {
            addr: String::new(),
            admin_token,
            db_path,
            log: Arc::new(Mutex::new(Vec::new())),
            child: None,
            args,
            envs: self.envs,
            dir,
        };
        app.start();
        app
    }
}

/// Starts a server with the standard flags on a fresh database.
pub fn spawn_app() -> TestApp {
    AppBuilder::new().spawn()
}

/// A running (or stopped) `tenantd serve` on its own temporary directory.
pub struct TestApp {
    /// `IP:PORT` the server listens on, as its log line said.
    pub addr: String,
    pub admin_token: String,
    pub db_path: PathBuf,
    /// Every stderr line of every run of this app.
    pub log: LogBuffer,
    pub child: Option<Child>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    /// Declared last: dropped after the child is killed.
    pub dir: TempDir,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl TestApp {
    /// Starts the server (again) with the same flags on the same database.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the server is already running");
        let mut cmd = tenantd_command(self.dir.path());
        cmd.args(&self.args);
        cmd.envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let server = start_server(cmd, &self.log);
        self.addr = server.addr;
        self.child = Some(server.child);
    }

    /// The process id of the running server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running server").id()
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("a running server");
        child.kill().expect("sending SIGKILL");
        child.wait().expect("reaping the server");
    }

    /// Sends a signal by name (`TERM`, `INT`) with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("running kill(1)");
        assert!(status.success(), "kill -{name} failed: {status}");
    }

    /// SIGTERM, then waits (bounded) for the exit and returns its status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        let mut child = self.child.take().expect("a running server");
        wait_exit(&mut child, EXIT_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "tenantd did not exit within {EXIT_TIMEOUT:?} of SIGTERM; log:\n{}",
                self.log_text()
            )
        })
    }

    /// Stops gracefully (asserting exit code 0) and starts again on the same database.
    pub fn restart(&mut self) {
        let status = self.terminate();
        assert_eq!(status.code(), Some(0), "graceful stop exits 0");
        self.start();
    }

    /// Every captured log line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// The captured log as one text.
    pub fn log_text(&self) -> String {
        self.log_lines().join("\n")
    }

    /// How many log lines were captured so far; with [`TestApp::wait_for_log_since`] it
    /// looks only at what a later run printed.
    pub fn log_len(&self) -> usize {
        self.log.lock().expect("log lock").len()
    }

    /// Waits up to `timeout` for a log line matching `pred`.
    pub fn wait_for_log(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        self.wait_for_log_since(0, timeout, pred)
    }

    /// Waits up to `timeout` for a log line matching `pred` among the lines from index
    /// `first` on.
    pub fn wait_for_log_since(
        &self,
        first: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.log.lock().expect("log lock")[first..]
                .iter()
                .find(|l| pred(l))
                .cloned();
            if found.is_some() {
                return found;
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// `Bearer <admin token>`.
    pub fn admin(&self) -> String {
        bearer(&self.admin_token)
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        request(&self.addr, method, path, headers, body)
    }

    /// Raw bytes in, raw bytes out.
    pub fn raw(&self, bytes: &[u8]) -> Vec<u8> {
        raw(&self.addr, bytes)
    }

    /// `GET path` without credentials.
    pub fn get_path(&self, path: &str) -> Response {
        self.request("GET", path, &[], None)
    }

    /// `POST /v1/tenants` as admin with a JSON body text and extra headers.
    pub fn post_tenants(&self, body: &str, extra: &[(&str, &str)]) -> Response {
        let auth = self.admin();
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.extend_from_slice(extra);
        self.request("POST", "/v1/tenants", &headers, Some(body.as_bytes()))
    }

    /// Creates a tenant as admin.
    pub fn create(&self, name: &str, amount: &str) -> Response {
        self.post_tenants(&tenant_body(name, amount), &[])
    }

    /// Creates a tenant as admin with an `Idempotency-Key`.
    pub fn create_with_key(&self, name: &str, amount: &str, key: &str) -> Response {
        self.post_tenants(&tenant_body(name, amount), &[("Idempotency-Key", key)])
    }

    /// Creates a tenant and asserts `201`; returns the body.
    pub fn create_ok(&self, name: &str, amount: &str) -> Value {
        let resp = self.create(name, amount);
        assert_eq!(resp.status, 201, "creating {name:?}: {}", resp.describe());
        resp.json()
    }

    /// `GET /v1/tenants/<id>` with a token (or none).
    pub fn get(&self, id: &str, token: Option<&str>) -> Response {
        let auth = token.map(bearer);
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        self.request("GET", &format!("/v1/tenants/{id}"), &headers, None)
    }

    /// `GET /v1/tenants/<id>` as admin.
    pub fn get_admin(&self, id: &str) -> Response {
        self.get(id, Some(&self.admin_token))
    }

    /// `DELETE /v1/tenants/<id>` as admin.
    pub fn delete(&self, id: &str) -> Response {
        let auth = self.admin();
        self.request(
            "DELETE",
            &format!("/v1/tenants/{id}"),
            &[("Authorization", auth.as_str())],
            None,
        )
    }

    /// A read-only connection to the server's database.
    pub fn db(&self) -> Connection {
        open_ro(&self.db_path)
    }

    /// Rows in `tenants`.
    pub fn tenant_count(&self) -> i64 {
        count(&self.db(), "SELECT count(*) FROM tenants")
    }

    /// Rows in `audit_events`.
    pub fn audit_count(&self) -> i64 {
        count(&self.db(), "SELECT count(*) FROM audit_events")
    }

    /// `GET /metrics` text.
    pub fn metrics(&self) -> String {
        let resp = self.get_path("/metrics");
        assert_eq!(resp.status, 200, "GET /metrics: {}", resp.describe());
        resp.text()
    }
}

/// The sidecar token of a create response.
pub fn tenant_token(created: &Value) -> String {
    created["sidecar_config_env"]["TENANTD_TENANT_TOKEN"]
        .as_str()
        .unwrap_or_else(|| panic!("no TENANTD_TENANT_TOKEN in {created}"))
        .to_owned()
}

/// The id of a tenant body.
pub fn tenant_id(body: &Value) -> String {
    body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {body}"))
        .to_owned()
}
