//! Running the binary as a command: the environment it gets, bounded waits, and the
//! subcommands that need no server (`audit verify`, `backup`).

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test, built by Cargo for this test target.
pub const BIN: &str = env!("CARGO_BIN_EXE_tenantd");

/// How long a stopping server or a command-line run may take to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// How often a bounded wait looks again.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Variables that configure tenantd; they are removed from every child so the developer's
/// own environment cannot change a test.
const TENANTD_ENV_VARS: &[&str] = &[
    "ADMIN_TOKEN",
    "TENANTD_ADMIN_TOKEN_FILE",
    "TENANTD_LISTEN",
    "TENANTD_DB",
    "TENANTD_PUBLIC_URL",
    "TENANTD_OIDC_ISSUER",
    "TENANTD_OIDC_AUDIENCE",
    "TENANTD_OIDC_ADMIN_SCOPE",
    "TENANTD_OIDC_PERMISSIONS_CLAIM",
    "TENANTD_OIDC_CA_FILE",
    "TENANTD_EVENT_RETENTION",
    "TENANTD_WEBHOOK_TIMEOUT",
    "TENANTD_WEBHOOK_RETRY_SCHEDULE",
    "TENANTD_WEBHOOK_DISABLE_AFTER",
    "TENANTD_WEBHOOK_ALLOW_HTTP",
    "TENANTD_WEBHOOK_ALLOW_PRIVATE",
    "TENANTD_WEBHOOK_CA_FILE",
    "RUST_LOG",
];

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
            None => thread::sleep(POLL_INTERVAL),
        }
    }
}

/// What a command-line run of `tenantd` did.
#[derive(Debug)]
pub struct CliOutput {
    /// The exit code; `None` if it had to be killed or died of a signal.
    pub code: Option<i32>,
    /// Everything the run wrote to stdout.
    pub stdout: String,
    /// Everything the run wrote to stderr.
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
