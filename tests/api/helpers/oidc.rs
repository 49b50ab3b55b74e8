//! A real OpenID Connect provider for the authentication tests: `tests/oidc/provider.mjs`
//! (the npm package `oidc-provider`, pinned in `tests/oidc/package-lock.json` and installed
//! by `make test`) on 127.0.0.1, started and stopped by the test that needs it.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long the provider may take to listen.
const PROVIDER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The audience the provider puts in access tokens, and the resource they are for.
pub const AUDIENCE: &str = "tenantd";

/// The admin scope the provider grants when asked.
pub const ADMIN_SCOPE: &str = "tenantd:admin";

/// The algorithms the contract allows, as the provider signs with them.
pub const ALGORITHMS: [&str; 4] = ["RS256", "PS256", "ES256", "EdDSA"];

fn provider_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

/// A port nobody listens on now, for a provider started later.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("the bound address").port()
}

/// A running provider; stopped when dropped (and by itself when this process goes away, as
/// its stdin closes).
pub struct IdentityProvider {
    child: Child,
    /// Held open: the provider stops when it closes.
    _stdin: ChildStdin,
    /// `127.0.0.1:PORT`: plain HTTP, for the tests' own calls.
    pub addr: String,
    /// The issuer URL, as tenantd is configured with it and tokens carry it.
    issuer: String,
}

/// A client registered at the provider.
#[derive(Debug, Clone)]
pub struct OidcClient {
    pub id: String,
    pub secret: String,
}

impl IdentityProvider {
    /// Starts a provider on a free port.
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    /// Starts a provider on `port`; panics with its output if it does not listen in time.
    pub fn start_on(port: u16) -> Self {
        let issuer = format!("http://127.0.0.1:{port}");
        Self::spawn(port, &[], issuer)
    }

    /// Starts a provider whose issuer is served over HTTPS with this certificate and key
    /// (PEM, for 127.0.0.1); the tests' own calls still go to a plain port.
    pub fn start_tls(cert: &Path, key: &Path) -> Self {
        let tls_port = free_port();
        let args = [
            "--tls-port".into(),
            tls_port.to_string().into(),
            "--cert".into(),
            cert.as_os_str().to_owned(),
            "--key".into(),
            key.as_os_str().to_owned(),
        ];
        Self::spawn(free_port(), &args, format!("https://127.0.0.1:{tls_port}"))
    }

    fn spawn(port: u16, args: &[std::ffi::OsString], issuer: String) -> Self {
        let dir = provider_dir();
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "the identity provider's packages are missing in {}: `make test` installs them \
             (npm ci --prefix tests/oidc)",
            dir.display()
        );
        let mut child = Command::new("node")
            .arg("provider.mjs")
            .arg("--port")
            .arg(port.to_string())
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting node tests/oidc/provider.mjs (is node installed?)");
        let stdin = child.stdin.take().expect("piped stdin");
        let log = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().expect("piped stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("piped stderr")),
        ] {
            let sink = Arc::clone(&log);
            thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    sink.lock().expect("log lock").push(line);
                }
            });
        }
        let marker = format!("listening on http://127.0.0.1:{port}");
        let deadline = Instant::now() + PROVIDER_START_TIMEOUT;
        loop {
            if log.lock().expect("log lock").iter().any(|l| l == &marker) {
                break;
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "the identity provider exited ({status}); output:\n{}",
                    log.lock().expect("log lock").join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "the identity provider did not listen within {PROVIDER_START_TIMEOUT:?}; output:\n{}",
                log.lock().expect("log lock").join("\n")
            );
            thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            _stdin: stdin,
            addr: format!("127.0.0.1:{port}"),
            issuer,
        }
    }

    /// The issuer URL, as tenantd is configured with it and tokens carry it.
    pub fn issuer(&self) -> String {
        self.issuer.clone()
    }

    /// The `--oidc-*` flags of a tenantd that takes this provider's tokens.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--oidc-issuer".into(),
            self.issuer(),
            "--oidc-audience".into(),
            AUDIENCE.into(),
        ]
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Value {
        let response = crate::wire::request(&self.addr, method, path, headers, body);
        assert_eq!(
            response.status,
            if path == "/reg" { 201 } else { 200 },
            "{method} {path} at the identity provider: {}",
            String::from_utf8_lossy(&response.body)
        );
        response.json()
    }

    /// `POST path` with a JSON body.
    fn post_json(&self, path: &str, body: &Value) -> Value {
        let body = body.to_string();
        self.call(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
    }

    /// Registers a client (RFC 7591) whose access tokens carry `permissions` in the
    /// `tenantd_permissions` claim and are signed with `algorithm`.
    pub fn register(&self, permissions: &[String], algorithm: &str) -> OidcClient {
        self.register_with(json!({
            "tenantd_permissions": permissions,
            "tenantd_alg": algorithm,
            "scope": ADMIN_SCOPE,
        }))
    }

    /// Registers a client with this metadata.
    pub fn register_with(&self, metadata: Value) -> OidcClient {
        let client = self.post_json("/reg", &metadata);
        OidcClient {
            id: client["client_id"].as_str().expect("client_id").to_owned(),
            secret: client["client_secret"]
                .as_str()
                .expect("client_secret")
                .to_owned(),
        }
    }

    /// An access token for `client` by the client-credentials grant, with `scope` if given.
    pub fn token(&self, client: &OidcClient, scope: Option<&str>) -> String {
        let mut form = "grant_type=client_credentials".to_owned();
        if let Some(scope) = scope {
            form.push_str("&scope=");
            form.push_str(&scope.replace(':', "%3A").replace(' ', "+"));
        }
        let auth = basic_auth(&client.id, &client.secret);
        let answer = self.call(
            "POST",
            "/token",
            &[
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Authorization", &auth),
            ],
            Some(form.as_bytes()),
        );
        answer["access_token"]
            .as_str()
            .expect("access_token")
            .to_owned()
    }

    /// A client with these permissions and its token: the usual pair.
    pub fn identity(&self, permissions: &[String], admin: bool) -> (OidcClient, String) {
        let client = self.register(permissions, "RS256");
        let token = self.token(&client, admin.then_some(ADMIN_SCOPE));
        (client, token)
    }

    /// A token the provider never issued (see `forge` in provider.mjs for the modes).
    pub fn forge(&self, mode: &str, header: Value, claims: Value) -> String {
        self.forge_with(json!({"mode": mode, "header": header, "claims": claims}))
    }

    /// [`IdentityProvider::forge`] with the whole request given.
    pub fn forge_with(&self, request: Value) -> String {
        let answer = self.post_json("/test/forge", &request);
        answer["token"].as_str().expect("a forged token").to_owned()
    }

    /// The kid of the provider's key for each algorithm.
    pub fn kids(&self) -> Value {
        self.call("GET", "/test/kids", &[], None)
    }

    /// Replaces every signing key with new ones under new kids.
    pub fn rotate(&self) {
        self.call("POST", "/test/rotate", &[], None);
    }

    /// How often the key set has been fetched.
    pub fn jwks_fetches(&self) -> u64 {
        self.call("GET", "/test/stats", &[], None)["jwks"]
            .as_u64()
            .expect("a count")
    }
}

impl Drop for IdentityProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Claims like the provider's own, for forged tokens: valid for five minutes from now.
pub fn claims_now(issuer: &str, sub: &str) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    json!({
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": sub,
        "iat": now,
        "exp": now + 300,
        "scope": ADMIN_SCOPE,
    })
}

/// `Basic` credentials (RFC 7617); client ids and secrets of the provider are base64url, so
/// they need no form-encoding first (RFC 6749, section 2.3.1).
fn basic_auth(id: &str, secret: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{id}:{secret}");
    let mut out = String::from("Basic ");
    for chunk in input.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs()
}
