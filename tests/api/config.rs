//! Configuration: the admin token's sources and rules, flags against environment, the
//! command line's help, version and refusals, and the database file's mode.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::helpers::*;

/// How long a refusing start-up may take before the test calls it a hang.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest `--idempotency-ttl-s`: one day.
const IDEMPOTENCY_TTL_S_MAX: u64 = 86_400;

/// The shortest `--body-read-timeout-ms`.
const BODY_READ_TIMEOUT_MS_MIN: u64 = 100;

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Runs `serve` on port 0 with a database in `dir` plus `extra` flags and `envs`; for
/// start-ups that must be refused.
fn serve_refused(dir: &TempDir, extra: &[&str], envs: &[(&str, &str)]) -> CliOutput {
    let db = dir.path().join("refused.db");
    let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--db", path_str(&db)];
    args.extend_from_slice(extra);
    run_cli_in(dir.path(), &args, envs, REFUSAL_TIMEOUT)
}

/// Starts `serve` with the given flags and environment and returns the running server.
fn serve_running(dir: &TempDir, args: &[&str], envs: &[(&str, &str)]) -> (Server, LogBuffer) {
    let mut cmd = tenantd_command(dir.path());
    cmd.args(args).envs(envs.iter().copied());
    let log: LogBuffer = Arc::new(Mutex::new(Vec::new()));
    let server = start_server(cmd, &log);
    (server, log)
}

/// Kills a server started by [`serve_running`] when dropped.
struct Running(Server);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

/// Creates a tenant with `token` and returns the status.
fn create_status(addr: &str, token: &str) -> u16 {
    let (auth, body) = (bearer(token), tenant_body(&unique("cfg"), "1"));
    send(addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]).status
}

fn assert_mentions_how_to_make_a_token(out: &CliOutput, ctx: &str) {
    let lower = out.stderr.to_ascii_lowercase();
    assert!(
        lower.contains("admin token"),
        "{ctx}: stderr mentions the admin token: {out:?}"
    );
    assert!(
        out.stderr.contains("/dev/urandom"),
        "{ctx}: stderr shows a command that makes a token: {out:?}"
    );
}

#[test]
fn start_up_is_refused_without_a_usable_admin_token() {
    let dir = TempDir::new().expect("a temporary directory");
    let write = |name: &str, contents: &str| {
        let p = dir.path().join(name);
        write_private(&p, contents);
        path_str(&p).to_owned()
    };
    let short = "s".repeat(31);
    let short_file = write("short", &format!("{short}\n"));
    let spaced_file = write("spaced", &format!("{}\n", "ab cd".repeat(8)));
    let empty_file = write("empty", "\n  \n");
    let missing_file = path_str(&dir.path().join("does-not-exist")).to_owned();
    let good_file = write("good", &random_admin_token());
    let valid_env_token = random_admin_token();

    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case<'_>> = vec![
        ("no token at all", vec![], vec![]),
        (
            "a 31-character token file",
            vec!["--admin-token-file", &short_file],
            vec![],
        ),
        (
            "a 31-character ADMIN_TOKEN",
            vec![],
            vec![("ADMIN_TOKEN", &short)],
        ),
        (
            "a token with inner spaces",
            vec!["--admin-token-file", &spaced_file],
            vec![],
        ),
        (
            "a token file of white space",
            vec!["--admin-token-file", &empty_file],
            vec![],
        ),
        (
            "a missing token file",
            vec!["--admin-token-file", &missing_file],
            vec![],
        ),
        (
            "both ADMIN_TOKEN and TENANTD_ADMIN_TOKEN_FILE",
            vec![],
            vec![
                ("ADMIN_TOKEN", &valid_env_token),
                ("TENANTD_ADMIN_TOKEN_FILE", &good_file),
            ],
        ),
    ];
    for (msg, extra, envs) in cases {
        let out = serve_refused(&dir, &extra, &envs);
        assert_eq!(
            out.code,
            Some(2),
            "{msg}: start-up stops with exit code 2: {out:?}"
        );
        if msg.contains("31") || msg == "no token at all" {
            assert_mentions_how_to_make_a_token(&out, msg);
        }
        if msg.contains("31") {
            assert!(
                !out.stderr.contains(&short),
                "{msg}: the refused token is not echoed: {out:?}"
            );
        }
    }
}

#[test]
fn a_token_of_exactly_32_characters_with_trailing_white_space_is_accepted() {
    let dir = TempDir::new().expect("a temporary directory");
    let token = random_hex(16);
    assert_eq!(token.len(), 32, "the test token is 32 characters");
    let file = dir.path().join("token");
    write_private(&file, &format!("{token} \t\n\n"));
    let db = dir.path().join("t.db");
    let (server, log) = serve_running(
        &dir,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--db",
            path_str(&db),
            "--admin-token-file",
            path_str(&file),
        ],
        &[],
    );
    let server = Running(server);
    assert_eq!(
        create_status(&server.0.addr, &token),
        201,
        "the trimmed 32-character token authorizes"
    );
    assert!(
        !log.lock()
            .expect("log lock")
            .iter()
            .any(|l| l.contains(&token)),
        "the token is in no log line"
    );
}

#[test]
fn admin_token_from_the_environment_and_flag_precedence() {
    let dir = TempDir::new().expect("a temporary directory");
    let env_token = random_admin_token();
    let file_token = random_admin_token();
    let file = dir.path().join("token");
    write_private(&file, &file_token);
    let env_file_token = random_admin_token();
    let env_file = dir.path().join("env-token");
    write_private(&env_file, &env_file_token);

    // ADMIN_TOKEN alone.
    let db = dir.path().join("env.db");
    let (server, _) = serve_running(
        &dir,
        &["serve", "--listen", "127.0.0.1:0", "--db", path_str(&db)],
        &[("ADMIN_TOKEN", &env_token)],
    );
    let server = Running(server);
    assert_eq!(
        create_status(&server.0.addr, &env_token),
        201,
        "ADMIN_TOKEN works"
    );
    drop(server);

    // TENANTD_ADMIN_TOKEN_FILE alone.
    let (server, _) = serve_running(
        &dir,
        &["serve", "--listen", "127.0.0.1:0", "--db", path_str(&db)],
        &[("TENANTD_ADMIN_TOKEN_FILE", path_str(&env_file))],
    );
    let server = Running(server);
    assert_eq!(
        create_status(&server.0.addr, &env_file_token),
        201,
        "TENANTD_ADMIN_TOKEN_FILE works"
    );
    drop(server);

    // The flag beats the environment.
    let (server, _) = serve_running(
        &dir,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--db",
            path_str(&db),
            "--admin-token-file",
            path_str(&file),
        ],
        &[("ADMIN_TOKEN", &env_token)],
    );
    let server = Running(server);
    assert_eq!(
        create_status(&server.0.addr, &file_token),
        201,
        "the flag's token works"
    );
    assert_eq!(
        create_status(&server.0.addr, &env_token),
        401,
        "the environment's token is ignored when the flag is given"
    );
}

#[test]
fn environment_variables_configure_listen_db_and_public_url_and_flags_beat_them() {
    let dir = TempDir::new().expect("a temporary directory");
    let token = random_admin_token();
    let env_db = dir.path().join("from-env.db");
    let flag_db = dir.path().join("from-flag.db");

    let (server, _) = serve_running(
        &dir,
        &["serve"],
        &[
            ("ADMIN_TOKEN", &token),
            ("TENANTD_LISTEN", "127.0.0.1:0"),
            ("TENANTD_DB", path_str(&env_db)),
            ("TENANTD_PUBLIC_URL", "https://env.example.com"),
        ],
    );
    let server = Running(server);
    let auth = bearer(&token);
    let (addr, body) = (&server.0.addr, tenant_body("env-configured", "1"));
    let resp = send(addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]);
    assert_eq!(
        resp.status,
        201,
        "a create on the env-configured server: {}",
        resp.describe()
    );
    assert_eq!(
        resp.json()["sidecar_config_env"]["TENANTD_URL"],
        "https://env.example.com",
        "TENANTD_PUBLIC_URL sets TENANTD_URL"
    );
    assert!(env_db.exists(), "TENANTD_DB chose the database file");
    drop(server);

    let (server, _) = serve_running(
        &dir,
        &[
            "serve",
            "--listen=127.0.0.1:0",
            "--db",
            path_str(&flag_db),
            "--public-url=https://flag.example.com",
        ],
        &[
            ("ADMIN_TOKEN", &token),
            ("TENANTD_LISTEN", "127.0.0.1:1"),
            ("TENANTD_DB", path_str(&env_db)),
            ("TENANTD_PUBLIC_URL", "https://env.example.com"),
        ],
    );
    let server = Running(server);
    assert!(
        !server.0.addr.ends_with(":1"),
        "--listen beats TENANTD_LISTEN: {}",
        server.0.addr
    );
    let (addr, body) = (&server.0.addr, tenant_body("flag-configured", "1"));
    let resp = send(addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]);
    assert_eq!(
        resp.status,
        201,
        "a create on the flag-configured server: {}",
        resp.describe()
    );
    assert_eq!(
        resp.json()["sidecar_config_env"]["TENANTD_URL"],
        "https://flag.example.com",
        "--public-url=VALUE beats TENANTD_PUBLIC_URL"
    );
    assert!(flag_db.exists(), "--db beats TENANTD_DB");
    drop(server);
    assert_eq!(
        count(&open_ro(&env_db), "SELECT count(*) FROM tenants"),
        1,
        "the second server did not write to the env's database"
    );
}

#[test]
fn help_lists_every_flag_and_version_prints_the_version() {
    for flag in ["--help", "-h"] {
        let out = run_cli(&[flag]);
        assert_eq!(out.code, Some(0), "{flag} exits 0: {out:?}");
        for needle in [
            "serve",
            "audit verify",
            "backup",
            "--to",
            "--listen",
            "--db",
            "--public-url",
            "--admin-token-file",
            "--max-connections",
            "--commit-batch-max",
            "--store-queue-depth",
            "--header-read-timeout-ms",
            "--body-read-timeout-ms",
            "--shutdown-grace-ms",
            "--idempotency-ttl-s",
            "--help",
            "--version",
            "ADMIN_TOKEN",
            "TENANTD_LISTEN",
            "TENANTD_DB",
            "TENANTD_PUBLIC_URL",
            "TENANTD_ADMIN_TOKEN_FILE",
        ] {
            assert!(
                out.stdout.contains(needle),
                "{flag} mentions {needle}: {}",
                out.stdout
            );
        }
    }
    for flag in ["--version", "-V"] {
        let out = run_cli(&[flag]);
        assert_eq!(out.code, Some(0), "{flag} exits 0: {out:?}");
        assert!(
            out.stdout.contains(env!("CARGO_PKG_VERSION")),
            "{flag} prints the crate version: {out:?}"
        );
    }
}

#[test]
fn bad_command_lines_exit_2() {
    let dir = TempDir::new().expect("a temporary directory");
    let token = dir.path().join("token");
    write_private(&token, &random_admin_token());
    let t = path_str(&token);
    let ttl_over = (IDEMPOTENCY_TTL_S_MAX + 1).to_string();
    let ttl_over_msg = format!("an idempotency TTL over its {IDEMPOTENCY_TTL_S_MAX} s maximum");
    let body_timeout_under = (BODY_READ_TIMEOUT_MS_MIN - 1).to_string();
    let body_timeout_under_msg =
        format!("a body read timeout under its {BODY_READ_TIMEOUT_MS_MIN} ms minimum");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("an unknown flag", vec!["--frobnicate"]),
        ("an unknown flag with a value", vec!["--frobnicate", "1"]),
        (
            "a flag without its value",
            vec!["--admin-token-file", t, "--max-connections"],
        ),
        (
            "a non-numeric bound",
            vec!["--admin-token-file", t, "--max-connections", "many"],
        ),
        (
            "a listen address that is no IP:port",
            vec!["--admin-token-file", t, "--listen", "localhost"],
        ),
        (
            "an idempotency TTL of 0",
            vec!["--admin-token-file", t, "--idempotency-ttl-s", "0"],
        ),
        (
            ttl_over_msg.as_str(),
            vec!["--admin-token-file", t, "--idempotency-ttl-s", &ttl_over],
        ),
        (
            body_timeout_under_msg.as_str(),
            vec![
                "--admin-token-file",
                t,
                "--body-read-timeout-ms",
                &body_timeout_under,
            ],
        ),
    ];
    for (msg, extra) in cases {
        let out = serve_refused(&dir, &extra, &[]);
        assert_eq!(out.code, Some(2), "{msg}: exit code 2: {out:?}");
        assert!(
            !out.stderr.trim().is_empty(),
            "{msg}: a message on stderr: {out:?}"
        );
    }
    let out = run_cli_in(dir.path(), &["frobnicate"], &[], REFUSAL_TIMEOUT);
    assert_eq!(out.code, Some(2), "an unknown subcommand exits 2: {out:?}");
}

#[test]
fn the_database_file_is_private() {
    let app = spawn_app();
    app.create_ok("private", "1");
    assert_eq!(
        file_mode(&app.db_path),
        0o600,
        "the database file has mode 0600"
    );
}

#[test]
fn a_client_that_never_finishes_its_headers_is_dropped() {
    let app = AppBuilder::new()
        .arg("--header-read-timeout-ms")
        .arg("300")
        .spawn();
    let mut stream = TcpStream::connect(&app.addr).expect("connecting");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .expect("sending half a head");
    let started = Instant::now();
    let mut buf = Vec::new();
    let result = stream.read_to_end(&mut buf);
    let took = started.elapsed();
    let timed_out = matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        || e.kind() == std::io::ErrorKind::TimedOut);
    assert!(
        !timed_out && took < Duration::from_secs(4),
        "the server closes a slow head after --header-read-timeout-ms (took {took:?}, {result:?})"
    );
    let ok = app.get_path("/healthz");
    assert_eq!(
        ok.status,
        200,
        "the server still serves others: {}",
        ok.describe()
    );
}

#[test]
fn a_port_in_use_is_reported_once_naming_the_address() {
    let app = spawn_app();
    let dir = TempDir::new().expect("a temporary directory");
    let db = dir.path().join("second.db");
    let token = random_admin_token();
    let args = ["serve", "--listen", &app.addr, "--db", path_str(&db)];
    let out = run_cli_in(
        dir.path(),
        &args,
        &[("ADMIN_TOKEN", &token)],
        REFUSAL_TIMEOUT,
    );
    assert_eq!(out.code, Some(1), "a second server on one port: {out:?}");
    let said = format!("cannot listen on {}", app.addr);
    assert_eq!(
        out.stderr.matches(&said).count(),
        1,
        "stderr says {said:?} once: {out:?}"
    );
    assert!(
        out.stderr.contains("already in use") && out.stderr.contains("--listen"),
        "stderr names what is wrong and what to do: {out:?}"
    );
}

#[test]
fn help_never_shows_a_variable_s_value() {
    let dir = TempDir::new().expect("a temporary directory");
    let secret = path_str(&dir.path().join("private-authorities.pem")).to_owned();
    let envs = [
        ("TENANTD_OIDC_CA_FILE", secret.as_str()),
        ("TENANTD_WEBHOOK_CA_FILE", secret.as_str()),
        ("TENANTD_DB", secret.as_str()),
    ];
    for args in [&["--help"][..], &["serve", "--help"], &["backup", "--help"]] {
        let out = run_cli_in(dir.path(), args, &envs, REFUSAL_TIMEOUT);
        assert_eq!(out.code, Some(0), "{args:?} exits 0: {out:?}");
        assert!(
            out.stdout.contains("TENANTD_OIDC_CA_FILE") || args[0] == "backup",
            "{args:?} names the variable: {}",
            out.stdout
        );
        assert!(
            !out.stdout.contains(&secret),
            "{args:?} shows no variable's value: {}",
            out.stdout
        );
    }
}

#[test]
fn the_db_help_says_which_commands_take_a_url() {
    for args in [
        &["serve", "--help"][..],
        &["audit", "verify", "--help"],
        &["backup", "--help"],
    ] {
        let out = run_cli(args);
        assert_eq!(out.code, Some(0), "{args:?} exits 0: {out:?}");
        assert!(
            out.stdout.contains(
                "The SQLite database file, or a postgres:// URL (`backup` takes a file only)"
            ),
            "{args:?}: --db takes a URL everywhere but backup: {}",
            out.stdout
        );
    }
    // What the help says of backup is what it does.
    let out = run_cli(&[
        "backup",
        "--db",
        "postgres://localhost/tenantd",
        "--to",
        "copy.db",
    ]);
    assert_eq!(out.code, Some(2), "backup of a URL is refused: {out:?}");
    assert!(out.stderr.contains("pg_dump"), "{out:?}");
}
