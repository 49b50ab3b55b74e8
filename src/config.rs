//! The command line and the environment, validated once into a [`Command`].
//!
//! Every error here is a usage error: `main` prints it and exits with code 2.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::auth::{AdminTokenHash, TOKEN_BYTES_MAX};
use crate::domain::is_visible_ascii;
use crate::server::{self, Limits};
use crate::store;

/// The shortest admin token accepted.
pub const ADMIN_TOKEN_CHARS_MIN: usize = 32;

pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
pub const DB_DEFAULT: &str = "./tenantd.db";

/// How to make a good admin token, for the error that asks for one.
pub const MAKE_A_TOKEN: &str = "make one with:\n\
    \x20   umask 077; head -c 32 /dev/urandom | od -An -vtx1 | tr -d ' \\n' > admin.token\n\
    then start with:\n\
    \x20   tenantd serve --admin-token-file admin.token\n\
    (or set TENANTD_ADMIN_TOKEN_FILE=admin.token, or ADMIN_TOKEN to the token itself)";

pub const USAGE: &str = "\
tenantd: a REST control plane that provisions tenants and their budgets, on one SQLite file.

USAGE:
    tenantd [serve] [OPTIONS]                 serve the HTTP API (the default)
    tenantd audit verify [--db PATH]          check the audit chain; exit 0 if it verifies, 1 if not
    tenantd backup [--db PATH] --to FILE      write a consistent copy of the database, also while serving
    tenantd --help | --version

SERVE OPTIONS (a flag beats its environment variable):
    --listen ADDR              IP address and port to listen on       [env TENANTD_LISTEN]
                               default 127.0.0.1:8080; port 0 picks a free port
    --db PATH                  the SQLite database, created (mode 0600) if missing
                                                                      [env TENANTD_DB] default ./tenantd.db
    --public-url URL           the URL sidecars reach this service at, handed to them as TENANTD_URL
                                                                      [env TENANTD_PUBLIC_URL]
                               default http:// + the bound listen address
    --admin-token-file PATH    file holding the admin bearer token (trailing white space is trimmed)
                                                                      [env TENANTD_ADMIN_TOKEN_FILE]
                               or ADMIN_TOKEN=<the token itself>; at least 32 visible ASCII characters
    --max-connections N        connections served at once, default 1024 (1..=65536)
    --commit-batch-max N       writes committed in one transaction, at most; default 256 (1..=4096)
    --store-queue-depth N      store commands that may wait; beyond, requests get 503; default 1024
    --readers N                threads answering reads, each with a read-only connection;
                               default one per core, at most 4 (1..=64)
    --header-read-timeout-ms N time to send a request head, and idle keep-alive limit; default 10000
    --body-read-timeout-ms N   time to send a request body once the head is in (408 after); default 10000
    --shutdown-grace-ms N      time in-flight requests get after SIGTERM/SIGINT; default 10000
    --idempotency-ttl-s N      how long an Idempotency-Key replays its answer; default 86400 (1..=86400)

AUDIT VERIFY / BACKUP OPTIONS:
    --db PATH                  the database to read                   [env TENANTD_DB] default ./tenantd.db
    --to FILE                  (backup) the new file; an existing file is never overwritten

ENVIRONMENT:
    RUST_LOG                   log level and filters, default info (one access-log line per request)

EXIT CODES:
    0 success; 1 a runtime failure (or a chain that does not verify); 2 a usage or configuration error
";

/// What the process was asked to do.
#[derive(Debug)]
pub enum Command {
    Serve(Box<ServeConfig>),
    AuditVerify { db: PathBuf },
    Backup { db: PathBuf, to: PathBuf },
    Help,
    Version,
}

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub db: PathBuf,
    /// `None`: `http://` and the address actually bound.
    pub public_url: Option<String>,
    pub admin_token: AdminTokenHash,
    pub limits: Limits,
    pub commit_batch_max: usize,
    pub store_queue_depth: usize,
    pub readers: usize,
    pub idempotency_ttl: Duration,
}

/// A usage or configuration error, said in a sentence.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn error(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

const SERVE_FLAGS: &[&str] = &[
    "listen",
    "db",
    "public-url",
    "admin-token-file",
    "max-connections",
    "commit-batch-max",
    "store-queue-depth",
    "readers",
    "header-read-timeout-ms",
    "body-read-timeout-ms",
    "shutdown-grace-ms",
    "idempotency-ttl-s",
];

/// Parses the arguments (without the program name), reading the environment through `env`.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Command, ConfigError> {
    let args = args
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| error(format!("argument {a:?} is not UTF-8")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help);
    }
    if args.iter().any(|a| a == "--version" || a == "-V") {
        return Ok(Command::Version);
    }
    let env = |name: &str| -> Result<Option<String>, ConfigError> {
        env(name)
            .map(|v| {
                v.into_string()
                    .map_err(|_| error(format!("{name} is not UTF-8")))
            })
            .transpose()
    };
    match args.first().map(String::as_str) {
        Some("help") => Ok(Command::Help),
        Some("audit") => match args.get(1).map(String::as_str) {
            Some("verify") => {
                let flags = flags(&args[2..], &["db"], "audit verify")?;
                Ok(Command::AuditVerify {
                    db: db_path(&flags, &env)?,
                })
            }
            _ => Err(error(
                "`tenantd audit` takes one subcommand: `tenantd audit verify`",
            )),
        },
        Some("backup") => {
            let flags = flags(&args[1..], &["db", "to"], "backup")?;
            let to = flags
                .get("to")
                .ok_or_else(|| error("`tenantd backup` needs --to FILE"))?;
            Ok(Command::Backup {
                db: db_path(&flags, &env)?,
                to: PathBuf::from(to),
            })
        }
        Some("serve") => serve(&flags(&args[1..], SERVE_FLAGS, "serve")?, &env),
        Some(other) if !other.starts_with('-') => Err(error(format!(
            "unknown command `{other}`; the commands are serve, audit verify and backup"
        ))),
        _ => serve(&flags(&args, SERVE_FLAGS, "serve")?, &env),
    }
}

type Env<'a> = dyn Fn(&str) -> Result<Option<String>, ConfigError> + 'a;

/// Reads `--name VALUE` and `--name=VALUE` pairs, refusing unknown and repeated flags.
fn flags(
    args: &[String],
    allowed: &[&'static str],
    command: &str,
) -> Result<HashMap<&'static str, String>, ConfigError> {
    let mut found = HashMap::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(error(format!(
                "unexpected argument `{arg}` for `tenantd {command}`"
            )));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag, None),
        };
        let Some(&name) = allowed.iter().find(|&&a| a == name) else {
            return Err(error(format!(
                "unknown option `--{name}` for `tenantd {command}`; see tenantd --help"
            )));
        };
        let value = match inline {
            Some(value) => value,
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| error(format!("--{name} needs a value")))?,
        };
        if found.insert(name, value).is_some() {
            return Err(error(format!("--{name} is given twice")));
        }
    }
    Ok(found)
}

/// A flag's value, else its environment variable's.
fn setting(
    flags: &HashMap<&'static str, String>,
    flag: &str,
    var: &str,
    env: &Env<'_>,
) -> Result<Option<String>, ConfigError> {
    match flags.get(flag) {
        Some(value) => Ok(Some(value.clone())),
        None => env(var),
    }
}

fn db_path(flags: &HashMap<&'static str, String>, env: &Env<'_>) -> Result<PathBuf, ConfigError> {
    let db = setting(flags, "db", "TENANTD_DB", env)?.unwrap_or_else(|| DB_DEFAULT.into());
    if db.is_empty() {
        return Err(error("--db must not be empty"));
    }
    Ok(PathBuf::from(db))
}

fn number(
    flags: &HashMap<&'static str, String>,
    flag: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    let Some(raw) = flags.get(flag) else {
        return Ok(default);
    };
    raw.parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            error(format!(
                "--{flag} must be a whole number from {} to {}, not `{raw}`",
                range.start(),
                range.end()
            ))
        })
}

fn serve(flags: &HashMap<&'static str, String>, env: &Env<'_>) -> Result<Command, ConfigError> {
    let listen_raw =
        setting(flags, "listen", "TENANTD_LISTEN", env)?.unwrap_or_else(|| LISTEN_DEFAULT.into());
    let listen: SocketAddr = listen_raw.parse().map_err(|_| {
        error(format!(
            "--listen must be an IP address and port such as 127.0.0.1:8080, not `{listen_raw}`"
        ))
    })?;
    let public_url = setting(flags, "public-url", "TENANTD_PUBLIC_URL", env)?
        .map(|url| check_public_url(&url).map(|()| url))
        .transpose()?;
    let duration_ms = |flag: &str, default: Duration, range| {
        number(flags, flag, default.as_millis() as u64, range).map(Duration::from_millis)
    };
    let limits = Limits {
        max_connections: number(
            flags,
            "max-connections",
            server::MAX_CONNECTIONS_DEFAULT as u64,
            1..=65_536,
        )? as usize,
        header_read_timeout: duration_ms(
            "header-read-timeout-ms",
            server::HEADER_READ_TIMEOUT_DEFAULT,
            100..=600_000,
        )?,
        body_read_timeout: duration_ms(
            "body-read-timeout-ms",
            server::BODY_READ_TIMEOUT_DEFAULT,
            100..=600_000,
        )?,
        shutdown_grace: duration_ms(
            "shutdown-grace-ms",
            server::SHUTDOWN_GRACE_DEFAULT,
            0..=600_000,
        )?,
    };
    Ok(Command::Serve(Box::new(ServeConfig {
        listen,
        db: db_path(flags, env)?,
        public_url,
        admin_token: admin_token(flags, env)?,
        limits,
        commit_batch_max: number(
            flags,
            "commit-batch-max",
            store::COMMIT_BATCH_MAX_DEFAULT as u64,
            1..=4096,
        )? as usize,
        store_queue_depth: number(
            flags,
            "store-queue-depth",
            store::QUEUE_DEPTH_DEFAULT as u64,
            1..=1_000_000,
        )? as usize,
        readers: number(flags, "readers", store::readers_default() as u64, 1..=64)? as usize,
        idempotency_ttl: Duration::from_secs(number(
            flags,
            "idempotency-ttl-s",
            store::IDEMPOTENCY_TTL_MAX.as_secs(),
            1..=store::IDEMPOTENCY_TTL_MAX.as_secs(),
        )?),
    })))
}

/// The URL goes unchanged into every sidecar's environment, so it must be one line of
/// visible characters.
fn check_public_url(url: &str) -> Result<(), ConfigError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let has_host = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
    if has_host && url.bytes().all(is_visible_ascii) {
        Ok(())
    } else {
        Err(error(format!(
            "--public-url must be an http:// or https:// URL without spaces or control characters, not {url:?}"
        )))
    }
}

fn admin_token(
    flags: &HashMap<&'static str, String>,
    env: &Env<'_>,
) -> Result<AdminTokenHash, ConfigError> {
    let token = if let Some(path) = flags.get("admin-token-file") {
        read_token_file(Path::new(path))?
    } else {
        match (env("ADMIN_TOKEN")?, env("TENANTD_ADMIN_TOKEN_FILE")?) {
            (Some(_), Some(_)) => {
                return Err(error(
                    "both ADMIN_TOKEN and TENANTD_ADMIN_TOKEN_FILE are set; set only one",
                ));
            }
            (Some(token), None) => token,
            (None, Some(path)) => read_token_file(Path::new(&path))?,
            (None, None) => return Err(error(format!("no admin token was given; {MAKE_A_TOKEN}"))),
        }
    };
    check_admin_token(&token)?;
    Ok(AdminTokenHash::of(&token))
}

fn read_token_file(path: &Path) -> Result<String, ConfigError> {
    let raw = std::fs::read_to_string(path).map_err(|e| {
        error(format!(
            "cannot read the admin token file {}: {e}; {MAKE_A_TOKEN}",
            path.display()
        ))
    })?;
    Ok(raw.trim_end().to_owned())
}

/// The token's own characters are never part of an error.
fn check_admin_token(token: &str) -> Result<(), ConfigError> {
    let chars = token.chars().count();
    if chars < ADMIN_TOKEN_CHARS_MIN {
        return Err(error(format!(
            "the admin token has {chars} characters; it needs at least {ADMIN_TOKEN_CHARS_MIN}; {MAKE_A_TOKEN}"
        )));
    }
    if token.len() > TOKEN_BYTES_MAX || !token.bytes().all(is_visible_ascii) {
        return Err(error(format!(
            "the admin token must be at most {TOKEN_BYTES_MAX} visible ASCII characters, \
             without spaces; {MAKE_A_TOKEN}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn parse_with(args: &[&str], env: &[(&str, &str)]) -> Result<Command, ConfigError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parse(args.iter().map(OsString::from), |k| {
            env.get(k).map(OsString::from)
        })
    }

    fn serve_config(args: &[&str], env: &[(&str, &str)]) -> ServeConfig {
        match parse_with(args, env) {
            Ok(Command::Serve(config)) => *config,
            other => panic!("{args:?}: expected serve, got {other:?}"),
        }
    }

    #[test]
    fn defaults_apply_with_only_a_token() {
        let config = serve_config(&[], &[("ADMIN_TOKEN", TOKEN)]);
        assert_eq!(config.listen, LISTEN_DEFAULT.parse().expect("addr"));
        assert_eq!(config.db, PathBuf::from(DB_DEFAULT));
        assert_eq!(config.public_url, None);
        assert!(config.admin_token.same_as(&AdminTokenHash::of(TOKEN)));
        assert_eq!(config.idempotency_ttl, Duration::from_secs(86_400));
    }

    #[test]
    fn a_flag_beats_its_environment_variable() {
        let env = [
            ("ADMIN_TOKEN", TOKEN),
            ("TENANTD_LISTEN", "127.0.0.1:1"),
            ("TENANTD_DB", "env.db"),
        ];
        let config = serve_config(&["serve", "--listen", "127.0.0.1:2", "--db=flag.db"], &env);
        assert_eq!(config.listen.port(), 2);
        assert_eq!(config.db, PathBuf::from("flag.db"));
        let config = serve_config(&[], &env);
        assert_eq!(config.listen.port(), 1);
        assert_eq!(config.db, PathBuf::from("env.db"));
    }

    #[test]
    fn a_token_file_is_trimmed_and_beats_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("t");
        let other = "z".repeat(40);
        std::fs::write(&file, format!("{other}\n")).expect("write");
        let path = file.to_str().expect("utf-8");
        let config = serve_config(&["--admin-token-file", path], &[("ADMIN_TOKEN", TOKEN)]);
        assert!(config.admin_token.same_as(&AdminTokenHash::of(&other)));
        let config = serve_config(&[], &[("TENANTD_ADMIN_TOKEN_FILE", path)]);
        assert!(config.admin_token.same_as(&AdminTokenHash::of(&other)));
    }

    #[test]
    fn bad_configurations_are_refused_with_a_reason() {
        let short = "x".repeat(31);
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case<'_>] = &[
            (&[], &[], "no admin token"),
            (&[], &[("ADMIN_TOKEN", &short)], "at least 32"),
            (
                &[],
                &[("ADMIN_TOKEN", "has a space in it 0123456789abcdef")],
                "visible ASCII",
            ),
            (
                &[],
                &[("ADMIN_TOKEN", TOKEN), ("TENANTD_ADMIN_TOKEN_FILE", "x")],
                "only one",
            ),
            (
                &["--admin-token-file", "/nonexistent/t"],
                &[],
                "cannot read",
            ),
            (
                &["--listen", "localhost"],
                &[("ADMIN_TOKEN", TOKEN)],
                "--listen",
            ),
            (
                &["--bogus", "1"],
                &[("ADMIN_TOKEN", TOKEN)],
                "unknown option",
            ),
            (&["--db"], &[("ADMIN_TOKEN", TOKEN)], "needs a value"),
            (
                &["--db", "a", "--db", "b"],
                &[("ADMIN_TOKEN", TOKEN)],
                "twice",
            ),
            (
                &["--public-url", "ftp://x"],
                &[("ADMIN_TOKEN", TOKEN)],
                "--public-url",
            ),
            (
                &["--public-url", "http://a b"],
                &[("ADMIN_TOKEN", TOKEN)],
                "--public-url",
            ),
            (
                &["--commit-batch-max", "0"],
                &[("ADMIN_TOKEN", TOKEN)],
                "1 to 4096",
            ),
            (
                &["--idempotency-ttl-s", "86401"],
                &[("ADMIN_TOKEN", TOKEN)],
                "86400",
            ),
            (&["frobnicate"], &[], "unknown command"),
            (&["audit"], &[], "audit verify"),
            (&["backup"], &[], "--to"),
        ];
        for (args, env, want) in cases {
            match parse_with(args, env) {
                Err(ConfigError(message)) => {
                    assert!(
                        message.contains(want),
                        "{args:?}: {message:?} lacks {want:?}"
                    );
                    assert!(!message.contains(&short) && !message.contains(TOKEN));
                }
                Ok(other) => panic!("{args:?} {env:?}: expected an error, got {other:?}"),
            }
        }
    }

    #[test]
    fn short_public_urls_are_fine() {
        let config = serve_config(&["--public-url", "http://x"], &[("ADMIN_TOKEN", TOKEN)]);
        assert_eq!(config.public_url.as_deref(), Some("http://x"));
    }

    #[test]
    fn the_other_commands_parse() {
        assert!(matches!(parse_with(&["--help"], &[]), Ok(Command::Help)));
        assert!(matches!(
            parse_with(&["serve", "-h"], &[]),
            Ok(Command::Help)
        ));
        assert!(matches!(
            parse_with(&["--version"], &[]),
            Ok(Command::Version)
        ));
        match parse_with(&["audit", "verify", "--db", "x.db"], &[]) {
            Ok(Command::AuditVerify { db }) => assert_eq!(db, PathBuf::from("x.db")),
            other => panic!("{other:?}"),
        }
        match parse_with(&["backup", "--to", "b.db"], &[("TENANTD_DB", "e.db")]) {
            Ok(Command::Backup { db, to }) => {
                assert_eq!(db, PathBuf::from("e.db"));
                assert_eq!(to, PathBuf::from("b.db"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_help_names_every_serve_flag() {
        for flag in SERVE_FLAGS {
            assert!(
                USAGE.contains(&format!("--{flag}")),
                "--help lacks --{flag}"
            );
        }
    }
}
