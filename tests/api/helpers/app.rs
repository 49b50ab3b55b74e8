//! A server under test: started on port 0 with a fresh database (a SQLite file in its own
//! temporary directory, or a PostgreSQL database of its own when `TENANTD_TEST_BACKEND` says
//! `postgres`), its log captured, stopped by signal or killed, and requests to it.

use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::cli::{CliOutput, EXIT_TIMEOUT, run_cli, tenantd_command, wait_exit};
use super::db::{AuditRow, count, db_bytes, open_ro, open_rw};
use super::files::write_private;
use super::pg::{Backend, TestDb, pg_dump, psql_execute, psql_rows};
use super::rand::random_admin_token;
use crate::wire::{self, Conn, Response};

/// How long a server may take to print its `listening on` line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The marker of the start-up line that names the bound address.
pub const LISTENING_MARKER: &str = "listening on http://";

/// How often a wait for a log line looks again.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The log of one or more server runs: every stderr line, in order.
pub type LogBuffer = Arc<Mutex<Vec<String>>>;

/// The JSON text of a create request.
pub fn tenant_body(name: &str, amount: &str) -> String {
    json!({ "name": name, "opening_deposit_atomic": amount }).to_string()
}

/// A create body padded with spaces (JSON white space) to `len` bytes.
pub fn padded_body(name: &str, len: usize) -> Vec<u8> {
    let mut body = tenant_body(name, "1").into_bytes();
    assert!(
        body.len() <= len,
        "the padding target is larger than the body"
    );
    body.resize(len, b' ');
    body
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// One API request on a fresh connection to `addr`, the way every POST helper sends it; it
/// takes an address, so a thread can call it without a [`TestApp`]. After `Host` and
/// `Connection: close` come `Authorization: auth`, then `Content-Type: application/json` if
/// there is a body text, then `Idempotency-Key: key` if given, then `extra` in the order
/// given; the body is framed by a `Content-Length`. `Err` for a transport error or a response
/// cut short, which a test of a server going away expects. A test of the request's own shape
/// (no credential, another media type, framing, bytes that are not UTF-8) uses
/// [`TestApp::request`] or `tests/wire/` instead.
pub fn try_send(
    addr: &str,
    method: &str,
    path: &str,
    auth: &str,
    body: Option<&str>,
    key: Option<&str>,
    extra: &[(&str, &str)],
) -> io::Result<Response> {
    let mut headers = vec![("Authorization", auth)];
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    headers.extend(key.map(|k| ("Idempotency-Key", k)));
    headers.extend_from_slice(extra);
    wire::try_request(addr, method, path, &headers, body.map(str::as_bytes))
}

/// [`try_send`], panicking on a transport error.
pub fn send(
    addr: &str,
    method: &str,
    path: &str,
    auth: &str,
    body: Option<&str>,
    key: Option<&str>,
    extra: &[(&str, &str)],
) -> Response {
    try_send(addr, method, path, auth, body, key, extra)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr} failed: {e}"))
}

/// A running server: the child, its address and the log it writes.
pub struct Server {
    /// The server process.
    pub child: Child,
    /// `IP:PORT` the server listens on, as its log line said.
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
        thread::sleep(POLL_INTERVAL);
    }
}

/// Options for [`TestApp`]: extra flags and environment.
#[derive(Default)]
pub struct AppBuilder {
    args: Vec<String>,
    envs: Vec<(String, String)>,
    /// Set by [`AppBuilder::sqlite`]; otherwise `TENANTD_TEST_BACKEND` decides.
    backend: Option<Backend>,
    /// Set by [`AppBuilder::without_admin_token`].
    no_admin_token: bool,
}

impl AppBuilder {
    /// The standard flags only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a flag (or a flag's value) after the standard ones.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    /// Runs on a SQLite file whatever `TENANTD_TEST_BACKEND` says: for tests whose subject is
    /// a SQLite file made by the server (the source of a copy to PostgreSQL).
    pub fn sqlite(mut self) -> Self {
        self.backend = Some(Backend::Sqlite);
        self
    }

    /// Starts without `--admin-token-file` (the token is still made and written, unused):
    /// for a server whose admins come from the identity provider.
    pub fn without_admin_token(mut self) -> Self {
        self.no_admin_token = true;
        self
    }

    /// Sets an environment variable of the server.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.envs.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the server on a fresh database: a SQLite file in a new temporary directory, or
    /// a new PostgreSQL database when `TENANTD_TEST_BACKEND=postgres`.
    pub fn spawn(self) -> TestApp {
        let dir = TempDir::new().expect("a temporary directory");
        let admin_token = random_admin_token();
        let token_path = dir.path().join("admin-token");
        write_private(&token_path, &format!("{admin_token}\n"));
        let db_path = dir.path().join("tenantd.db");
        let pg = match self.backend.unwrap_or_else(Backend::from_env) {
            Backend::Sqlite => None,
            Backend::Postgres => Some(TestDb::new()),
        };
        let db_arg = match &pg {
            Some(db) => db.url.clone(),
            None => db_path.to_str().expect("a UTF-8 path").to_owned(),
        };
        let mut args = vec![
            "serve".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--db".to_owned(),
            db_arg,
        ];
        if !self.no_admin_token {
            args.push("--admin-token-file".to_owned());
            args.push(token_path.to_str().expect("a UTF-8 path").to_owned());
        }
        args.extend(self.args);
        let mut app = TestApp {
            addr: String::new(),
            admin_token,
            db_path,
            log: Arc::new(Mutex::new(Vec::new())),
            child: None,
            args,
            envs: self.envs,
            pg,
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

/// A running (or stopped) `tenantd serve` on its own temporary directory and database.
pub struct TestApp {
    /// `IP:PORT` the server listens on, as its log line said.
    pub addr: String,
    /// The admin token, as written to the token file.
    pub admin_token: String,
    /// The server's SQLite file; on PostgreSQL, where it would be (nothing is there): see
    /// [`TestApp::db_arg`].
    pub db_path: PathBuf,
    /// Every stderr line of every run of this app.
    pub log: LogBuffer,
    /// The running process; `None` once stopped or killed.
    pub child: Option<Child>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    /// The PostgreSQL database, on that backend; dropped after the child is killed.
    pg: Option<TestDb>,
    /// The temporary directory of the database and the token file. Declared last: dropped
    /// after the child is killed.
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
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `Bearer <admin token>`.
    pub fn admin(&self) -> String {
        bearer(&self.admin_token)
    }

    /// One request on a fresh connection (`Host` and `Connection: close` are added, and a
    /// `Content-Length` for a body unless `headers` frame it); panics on a transport error.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        wire::request(&self.addr, method, path, headers, body)
    }

    /// Raw bytes in, raw bytes out: everything the server sent until it closed.
    pub fn raw(&self, bytes: &[u8]) -> Vec<u8> {
        wire::raw(&self.addr, bytes)
    }

    /// Sends `HEAD path` on a connection of its own and reads to the close. Returns the
    /// response and how many bytes the server sent after its head: there must be none.
    pub fn head_on_own_connection(&self, path: &str, auth: Option<&str>) -> (Response, usize) {
        let mut headers = vec![("Host", self.addr.as_str()), ("Connection", "close")];
        headers.extend(auth.map(|auth| ("Authorization", auth)));
        let bytes = self.raw(&wire::request_bytes(
            "HEAD",
            path,
            wire::HTTP_11,
            &headers,
            None,
        ));
        let frame = wire::parse_frame(&bytes, true, true)
            .unwrap_or_else(|e| panic!("HEAD {path}: no complete response ({e})"))
            .expect("a response delimited by the close");
        let resp = Response::from_frame(&bytes, &frame).expect("a well-formed response");
        (resp, bytes.len() - frame.len)
    }

    /// A new connection to the server, for keep-alive, pipelining or a request sent in parts.
    pub fn conn(&self) -> Conn {
        Conn::open(&self.addr)
    }

    /// `GET path` without credentials.
    pub fn get_path(&self, path: &str) -> Response {
        self.request("GET", path, &[], None)
    }

    /// `POST /v1/tenants` as admin of a JSON body text, with an `Idempotency-Key` if given.
    pub fn post_tenants(&self, body: &str, key: Option<&str>) -> Response {
        let (addr, admin) = (&self.addr, self.admin());
        send(addr, "POST", "/v1/tenants", &admin, Some(body), key, &[])
    }

    /// Creates a tenant as admin.
    pub fn create(&self, name: &str, amount: &str) -> Response {
        self.post_tenants(&tenant_body(name, amount), None)
    }

    /// Creates a tenant as admin with an `Idempotency-Key`.
    pub fn create_with_key(&self, name: &str, amount: &str, key: &str) -> Response {
        self.post_tenants(&tenant_body(name, amount), Some(key))
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
        let path = format!("/v1/tenants/{id}");
        send(&self.addr, "DELETE", &path, &self.admin(), None, None, &[])
    }

    /// The backend the server runs on.
    pub fn backend(&self) -> Backend {
        if self.pg.is_some() {
            Backend::Postgres
        } else {
            Backend::Sqlite
        }
    }

    /// What the server was given as `--db`: the SQLite file's path, or the PostgreSQL URL
    /// (which holds a password: never put it in a message).
    pub fn db_arg(&self) -> String {
        match &self.pg {
            Some(db) => db.url.clone(),
            None => self.db_path.to_str().expect("a UTF-8 path").to_owned(),
        }
    }

    /// `tenantd audit verify --db <the server's database>`.
    pub fn audit_verify(&self) -> CliOutput {
        run_cli(&["audit", "verify", "--db", &self.db_arg()])
    }

    /// A read-only connection to the server's SQLite file. SQLite only: a test that reads
    /// the store on either backend uses [`TestApp::rows`] or [`TestApp::count`].
    pub fn db(&self) -> Connection {
        self.assert_sqlite("TestApp::db");
        open_ro(&self.db_path)
    }

    /// Panics unless the server runs on SQLite: `what` needs the file itself.
    pub fn assert_sqlite(&self, what: &str) {
        assert!(
            self.pg.is_none(),
            "{what} reads the SQLite file, and this server runs on PostgreSQL: such a test \
             belongs in SQLITE_ONLY_TESTS (Makefile)"
        );
    }

    /// The rows of a query on the server's database, read on its own (not through the
    /// service): each column as text, `None` for NULL. Integers and amounts come out in
    /// decimal on both backends; write SQL both understand, and select no BLOB (`bytea`).
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        match &self.pg {
            Some(db) => psql_rows(&db.url, sql),
            None => sqlite_rows(&self.db(), sql),
        }
    }

    /// The rows of a query whose columns are never NULL, each column as text.
    pub fn text_rows(&self, sql: &str) -> Vec<Vec<String>> {
        self.rows(sql)
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|v| v.unwrap_or_else(|| panic!("a NULL in {sql}")))
                    .collect()
            })
            .collect()
    }

    /// `SELECT count(*) ...` or any query with one integer result, on either backend.
    pub fn count(&self, sql: &str) -> i64 {
        match &self.pg {
            Some(_) => {
                let rows = self.text_rows(sql);
                let [row] = rows.as_slice() else {
                    panic!("{sql}: one row expected, got {rows:?}");
                };
                row[0]
                    .parse()
                    .unwrap_or_else(|e| panic!("{sql}: an integer expected ({e}): {row:?}"))
            }
            None => count(&self.db(), sql),
        }
    }

    /// Runs a statement behind the service's back (for tampering tests) on either backend
    /// and returns how many rows it changed; `Err` with the database's refusal.
    pub fn execute(&self, sql: &str) -> Result<usize, String> {
        match &self.pg {
            Some(db) => psql_execute(&db.url, sql),
            None => open_rw(&self.db_path)
                .execute(sql, [])
                .map_err(|e| e.to_string()),
        }
    }

    /// Drops a trigger of `table` (so a test can tamper with what it guards) on either
    /// backend.
    pub fn drop_trigger(&self, trigger: &str, table: &str) {
        let sql = match &self.pg {
            Some(_) => format!("DROP TRIGGER {trigger} ON {table}"),
            None => format!("DROP TRIGGER {trigger}"),
        };
        self.execute(&sql)
            .unwrap_or_else(|e| panic!("dropping trigger {trigger}: {e}"));
    }

    /// Every audit row, in `seq` order, on either backend.
    pub fn audit_rows(&self) -> Vec<AuditRow> {
        self.text_rows(
            "SELECT seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash \
             FROM audit_events ORDER BY seq",
        )
        .into_iter()
        .map(|row| {
            let [
                seq,
                occurred_at,
                actor,
                action,
                tenant_id,
                payload,
                prev_hash,
                hash,
            ] = <[String; 8]>::try_from(row).expect("eight columns");
            AuditRow {
                seq: seq.parse().expect("seq is an integer"),
                occurred_at,
                actor,
                action,
                tenant_id,
                payload,
                prev_hash,
                hash,
            }
        })
        .collect()
    }

    /// Everything the database holds, for searching secrets in it: on SQLite the bytes of
    /// the file and its `-wal` (free pages included), on PostgreSQL the text of every row of
    /// every table (`pg_dump --data-only`; dead row versions are not in it).
    pub fn db_contents(&self) -> Vec<u8> {
        match &self.pg {
            Some(db) => pg_dump(&db.url),
            None => db_bytes(&self.db_path),
        }
    }

    /// Rows in `tenants`.
    pub fn tenant_count(&self) -> i64 {
        self.count("SELECT count(*) FROM tenants")
    }

    /// Rows in `audit_events`.
    pub fn audit_count(&self) -> i64 {
        self.count("SELECT count(*) FROM audit_events")
    }

    /// `GET /metrics` text.
    pub fn metrics(&self) -> String {
        let resp = self.get_path("/metrics");
        assert_eq!(resp.status, 200, "GET /metrics: {}", resp.describe());
        resp.text()
    }
}

/// The rows of a query on a SQLite connection, as [`TestApp::rows`] gives them.
fn sqlite_rows(conn: &Connection, sql: &str) -> Vec<Vec<Option<String>>> {
    use rusqlite::types::ValueRef;
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let columns = stmt.column_count();
    stmt.query_map([], |row| {
        (0..columns)
            .map(|i| {
                Ok(match row.get_ref(i)? {
                    ValueRef::Null => None,
                    ValueRef::Integer(n) => Some(n.to_string()),
                    ValueRef::Real(x) => Some(x.to_string()),
                    ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Some(super::shapes::hex(b)),
                })
            })
            .collect()
    })
    .and_then(|rows| rows.collect())
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
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
