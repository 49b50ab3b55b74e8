//! The command line and the environment, declared once with clap and validated once into a
//! [`Command`].
//!
//! This file holds the command line's shape: the subcommands, `--db`, `--listen`,
//! `--public-url` and the admin token. Each subsystem declares its own flags beside its code
//! (`oidc::flags`, `server::LimitArgs`, `store::flags`, `webhook::flags`, `console::flags`),
//! with their checks, and `serve`'s flags flatten them in, so this file only assembles them.
//! The dependency goes one way: from here to each subsystem.
//!
//! Each flag names its environment variable (clap reads it, and a flag beats it), its range
//! and its default beside its help text, so `--help`, the checks and the defaults cannot
//! drift apart. The admin token itself is the one setting that is no flag: it comes from
//! `ADMIN_TOKEN` (so it never shows in `ps`) or from a file, and is resolved after clap.
//!
//! Every [`ConfigError::Invalid`] is a usage error: `main` prints it on stderr and exits with
//! code 2. `--help` and `--version` arrive as [`ConfigError::Shown`]: stdout, exit code 0.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::auth::{ADMIN_TOKEN_BYTES_MAX, AdminTokenHash};
use crate::console::ConsoleConfig;
use crate::console::flags::ConsoleArgs;
use crate::domain::is_visible_ascii;
#[cfg(test)]
use crate::oidc::ADMIN_SCOPE_DEFAULT;
use crate::oidc::OidcConfig;
use crate::oidc::flags::OidcArgs;
use crate::ratelimit::flags::{RateLimitArgs, RateLimitConfig};
#[cfg(test)]
use crate::server::{self, millis};
use crate::server::{LimitArgs, Limits};
use crate::store;
use crate::store::flags::StoreArgs;
use crate::webhook::flags::{WebhookArgs, WebhookConfig};

/// The shortest admin token accepted: 32 characters of hex are 128 bits, beyond guessing.
pub const ADMIN_TOKEN_CHARS_MIN: usize = 32;

/// Where `serve` listens unless told otherwise: loopback only, so a first run exposes nothing.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";

/// The database every command uses unless told otherwise: beside where it is started.
pub const DB_DEFAULT: &str = "./tenantd.db";

/// How to make a good admin token, for the error that asks for one.
pub const MAKE_A_TOKEN: &str = "make one with:\n\
    \x20   umask 077; head -c 32 /dev/urandom | od -An -vtx1 | tr -d ' \\n' > admin.token\n\
    then start with:\n\
    \x20   tenantd serve --admin-token-file admin.token\n\
    (or set TENANTD_ADMIN_TOKEN_FILE=admin.token, or ADMIN_TOKEN to the token itself;\n\
    with --oidc-issuer and --oidc-audience, the identity provider's admin scope can stand in \
    for it)";

/// The forms of the command line, shown first in `--help` and under every usage error.
const USAGE: &str = "\
tenantd [serve] [OPTIONS]
       tenantd audit verify [--db PATH]
       tenantd backup [--db PATH] --to FILE
       tenantd copy --from SRC --to DST
       tenantd --help | --version";

/// What the option list cannot say: the variable without a flag, logging, and exit codes.
const AFTER_HELP: &str = "\
Environment:
  ADMIN_TOKEN   the admin token itself, when no token file is given; it is never a flag, so
                it does not show in `ps`. --admin-token-file beats it; setting both it and
                TENANTD_ADMIN_TOKEN_FILE is an error
  RUST_LOG      log level and filters, default info: one access-log line per request

Exit codes:
  0  success
  1  a runtime failure, or an audit chain that does not verify
  2  a usage or configuration error";

/// The help wraps to the terminal, but no wider than this: long lines are hard to read.
const HELP_COLUMNS_MAX: usize = 100;

/// What the process was asked to do.
#[derive(Debug)]
pub enum Command {
    /// Serve the HTTP API: the default when no subcommand is given.
    Serve(Box<ServeConfig>),
    /// Check the audit chain of `db`; needs no admin token, as it only reads.
    AuditVerify { db: PathBuf },
    /// Copy `db` to the new file `to`, also while a server writes to it.
    Backup { db: PathBuf, to: PathBuf },
    /// Copy the whole database `from` into the empty `to` (files or PostgreSQL URLs).
    Copy { from: PathBuf, to: PathBuf },
}

/// Everything `serve` needs, checked: the rest of the code never sees a raw flag.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The address to bind; port 0 lets the kernel pick, which the tests rely on.
    pub listen: SocketAddr,
    /// The SQLite file, created (mode 0600) if missing.
    pub db: PathBuf,
    /// The URL handed to sidecars as `TENANTD_URL`; `None`: `http://` and the address actually
    /// bound, which is right unless a proxy or another name stands in front.
    pub public_url: Option<String>,
    /// Only the token's hash is kept, so the token cannot leak from memory dumps or logs.
    /// `None` only with an identity provider, whose admin scope then makes admins.
    pub admin_token: Option<AdminTokenHash>,
    /// The identity provider whose access tokens are taken, if any.
    pub oidc: Option<OidcConfig>,
    /// Connection bound and timeouts of the accept loop.
    pub limits: Limits,
    /// Writes committed in one transaction at most: more amortises the fsync, fewer bounds
    /// the latency of the first write in a batch.
    pub commit_batch_max: usize,
    /// Store commands that may wait per queue; beyond, requests get `503` instead of memory
    /// growing without bound.
    pub store_queue_depth: usize,
    /// Threads answering reads, each with its own read-only connection, so reads do not wait
    /// behind writes.
    pub readers: usize,
    /// Writer connections on PostgreSQL; a tenant's writes all go to one of them.
    pub pg_writers: usize,
    /// Tenant-token checks that may wait for the credential lookup; beyond, a check waits up
    /// to its timeout instead of being refused.
    pub auth_queue_depth: usize,
    /// How long an `Idempotency-Key` replays its first answer.
    pub idempotency_ttl: Duration,
    /// Events older than this are erased.
    pub event_retention: Duration,
    /// How events are delivered to webhook endpoints.
    pub webhooks: WebhookConfig,
    /// Each principal's rate limit.
    pub rate_limits: RateLimitConfig,
    /// The web console under `/console/`.
    pub console: ConsoleConfig,
}

/// Why [`parse`] gave no [`Command`]. Help and the version are no failure, but clap reports
/// them the same way as errors, and so does this type, so `main` has one place to print.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `--help`, `-h`, `help`, `--version` or `-V`: print the text on stdout and exit 0.
    Shown(String),
    /// A usage or configuration error, ending in a newline: print it on stderr and exit 2.
    Invalid(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Shown(text) | ConfigError::Invalid(text) => f.write_str(text),
        }
    }
}

impl From<clap::Error> for ConfigError {
    /// Renders clap's report as plain text: it goes to logs and tests as often as to a terminal.
    fn from(e: clap::Error) -> Self {
        let text = e.render().to_string();
        match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ConfigError::Shown(text),
            _ => ConfigError::Invalid(text),
        }
    }
}

/// A configuration error of ours, worded like clap's.
fn invalid(message: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("error: {message}\n"))
}

/// Parses the arguments (without the program name). Clap reads the `TENANTD_*` variables
/// of the flags itself; `env` supplies `ADMIN_TOKEN`, which belongs to no flag, so that the
/// token rules can be tested without touching the process environment.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Command, ConfigError> {
    let argv = std::iter::once(OsString::from("tenantd")).chain(args);
    let matches = Cli::command().try_get_matches_from(argv)?;
    let cli = Cli::from_arg_matches(&matches)?;
    match cli.command {
        None => serve(cli.serve, &matches, &env),
        Some(Sub::Serve(args)) => {
            let matches = matches
                .subcommand_matches("serve")
                .expect("clap matched the serve subcommand");
            serve(args, matches, &env)
        }
        Some(Sub::Audit {
            command: AuditCommand::Verify(DbArg { db }),
        }) => Ok(Command::AuditVerify { db }),
        Some(Sub::Backup(BackupArgs {
            db: DbArg { db },
            to,
        })) => {
            if store::postgres_url(&db).is_some() {
                return Err(invalid(
                    "backup copies a SQLite file; back a PostgreSQL database up with pg_dump \
                     (or the provider's snapshots and point-in-time recovery)",
                ));
            }
            Ok(Command::Backup { db, to })
        }
        Some(Sub::Copy(CopyArgs { from, to })) => Ok(Command::Copy { from, to }),
    }
}

/// The whole command line. The serve flags are flattened into the top level as well, so
/// `tenantd --listen …` serves and `tenantd --help` shows them.
#[derive(Parser, Debug)]
#[command(
    name = "tenantd",
    version,
    about,
    override_usage = USAGE,
    after_help = AFTER_HELP,
    max_term_width = HELP_COLUMNS_MAX,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once at start-up; the serve flags are the command line's bulk"
)]
enum Sub {
    /// Serve the HTTP API (the default: `tenantd --listen ADDR` serves too)
    ///
    /// SIGTERM or SIGINT stops accepting, lets in-flight requests finish within the grace
    /// period, lets the store finish its queue, and exits 0.
    #[command(after_help = AFTER_HELP, max_term_width = HELP_COLUMNS_MAX)]
    Serve(ServeArgs),
    /// Check the audit chain: `tenantd audit verify` exits 0 if it verifies, 1 if not
    #[command(max_term_width = HELP_COLUMNS_MAX)]
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Write a consistent, self-contained copy of the database, also while serving
    ///
    /// The copy needs no -wal file; its integrity and its audit chain are checked before
    /// `backup` exits 0.
    #[command(max_term_width = HELP_COLUMNS_MAX)]
    Backup(BackupArgs),
    /// Copy a whole database into an empty one, SQLite or PostgreSQL, either way
    ///
    /// The source is read in one snapshot and never written; the target (a new file, or a
    /// PostgreSQL database without tenantd data) is written in one transaction, read back and
    /// compared, and its audit chain verified before it is committed: a copy that fails keeps
    /// nothing. Progress goes to stderr.
    #[command(max_term_width = HELP_COLUMNS_MAX)]
    Copy(CopyArgs),
}

#[derive(Args, Debug)]
struct CopyArgs {
    /// The database to copy: a SQLite file, or a postgres:// URL
    #[arg(long, next_line_help = true, value_name = "SRC", value_parser = db_path)]
    from: PathBuf,
    /// The database to fill: a new SQLite file (never overwritten), or a postgres:// URL of
    /// a database that holds no tenantd data (its schema is made if missing)
    #[arg(long, next_line_help = true, value_name = "DST", value_parser = db_path)]
    to: PathBuf,
}

#[derive(Subcommand, Debug)]
enum AuditCommand {
    /// Walk the audit chain and check that it accounts for every tenant
    ///
    /// Exits 0 and prints `ok: N events, head HASH`, or exits 1 naming the first bad event
    /// (or the tenant whose event is missing).
    #[command(max_term_width = HELP_COLUMNS_MAX)]
    Verify(DbArg),
}

#[derive(Args, Debug)]
struct BackupArgs {
    #[command(flatten)]
    db: DbArg,
    /// The new file; an existing file is never overwritten
    #[arg(long, next_line_help = true, value_name = "FILE")]
    to: PathBuf,
}

/// `--db`, the one flag every command has.
#[derive(Args, Debug)]
struct DbArg {
    /// The SQLite database file, or a postgres:// URL (`backup` takes a file only)
    ///
    /// `serve` creates the file, with mode 0600, if it is missing; `audit verify` and `backup`
    /// only read it. A URL takes libpq's parameters, `sslmode` (disable, prefer, require,
    /// verify-ca, verify-full) and `sslrootcert` among them.
    #[arg(
        long,
        next_line_help = true,
        value_name = "PATH",
        env = "TENANTD_DB",
        hide_env_values = true,
        default_value = DB_DEFAULT,
        value_parser = db_path
    )]
    db: PathBuf,
}

#[derive(Args, Debug)]
#[command(next_help_heading = "Serve options (a flag beats its environment variable)")]
struct ServeArgs {
    /// IP address and port to listen on
    ///
    /// Port 0 picks a free port; the "listening on" log line names it.
    #[arg(
        long,
        next_line_help = true,
        value_name = "ADDR",
        env = "TENANTD_LISTEN",
        hide_env_values = true,
        default_value = LISTEN_DEFAULT,
        value_parser = listen_addr
    )]
    listen: SocketAddr,

    #[command(flatten)]
    db: DbArg,

    /// The URL sidecars reach this service at
    ///
    /// Handed to sidecars as TENANTD_URL, exactly as given: http:// or https://, visible
    /// characters only. By default http:// and the address actually bound.
    #[arg(
        long,
        next_line_help = true,
        value_name = "URL",
        env = "TENANTD_PUBLIC_URL",
        hide_env_values = true,
        value_parser = public_url
    )]
    public_url: Option<String>,

    /// Admin token file (or ADMIN_TOKEN: the token itself)
    ///
    /// At least 32 visible ASCII characters; trailing white space is trimmed. This flag
    /// beats both ADMIN_TOKEN and TENANTD_ADMIN_TOKEN_FILE. Without any of the three, serve
    /// refuses to start and says how to make a token.
    #[arg(
        long,
        next_line_help = true,
        value_name = "PATH",
        env = "TENANTD_ADMIN_TOKEN_FILE",
        hide_env_values = true
    )]
    admin_token_file: Option<PathBuf>,

    #[command(flatten)]
    oidc: OidcArgs,

    #[command(flatten)]
    limits: LimitArgs,

    #[command(flatten)]
    store: StoreArgs,

    #[command(flatten)]
    webhooks: WebhookArgs,

    #[command(flatten)]
    rate_limits: RateLimitArgs,

    #[command(flatten)]
    console: ConsoleArgs,
}

/// Clap's id of `--admin-token-file` (its field's name), to ask where its value came from.
const ADMIN_TOKEN_FILE_ID: &str = "admin_token_file";

/// Builds the checked configuration; `matches` tell where `--admin-token-file` came from.
fn serve(
    args: ServeArgs,
    matches: &ArgMatches,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Command, ConfigError> {
    let token_file = match (
        args.admin_token_file,
        matches.value_source(ADMIN_TOKEN_FILE_ID),
    ) {
        (Some(path), Some(ValueSource::EnvVariable)) => TokenFile::Variable(path),
        (Some(path), _) => TokenFile::Flag(path),
        (None, _) => TokenFile::Absent,
    };
    let oidc = args.oidc.config().map_err(invalid)?;
    let store = args.store.settings();
    Ok(Command::Serve(Box::new(ServeConfig {
        listen: args.listen,
        db: args.db.db,
        public_url: args.public_url,
        admin_token: admin_token(token_file, env, oidc.is_some())?,
        oidc,
        limits: args.limits.limits(),
        commit_batch_max: store.commit_batch_max,
        store_queue_depth: store.queue_depth,
        readers: store.readers,
        pg_writers: store.pg_writers,
        auth_queue_depth: store.credential_queue_depth,
        idempotency_ttl: store.idempotency_ttl,
        event_retention: store.event_retention,
        webhooks: args.webhooks.config(),
        rate_limits: args.rate_limits.config(),
        console: args.console.config(),
    })))
}

/// `--listen` takes an address, never a name: resolving one could pick an interface nobody
/// meant to expose.
fn listen_addr(raw: &str) -> Result<SocketAddr, String> {
    raw.parse()
        .map_err(|_| "must be an IP address and port such as 127.0.0.1:8080".to_owned())
}

/// An empty path would be a confusing SQLite "temporary database", gone at exit.
fn db_path(raw: &str) -> Result<PathBuf, String> {
    if raw.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(PathBuf::from(raw))
    }
}

/// The URL goes unchanged into every sidecar's environment, so it must be one line of
/// visible characters.
fn public_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let has_host = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
    if has_host && url.bytes().all(is_visible_ascii) {
        Ok(url.to_owned())
    } else {
        Err("must be an http:// or https:// URL without spaces or control characters".to_owned())
    }
}

/// Where `--admin-token-file` came from, which decides how it ranks against `ADMIN_TOKEN`.
#[derive(Debug)]
enum TokenFile {
    /// The flag: it beats both variables.
    Flag(PathBuf),
    /// `TENANTD_ADMIN_TOKEN_FILE`: an error beside `ADMIN_TOKEN`, as neither is plainly meant.
    Variable(PathBuf),
    /// Neither: `ADMIN_TOKEN` must hold the token.
    Absent,
}

/// Finds the admin token and keeps only its hash. Without one, serve refuses to start unless
/// an identity provider (`with_oidc`) makes admins.
fn admin_token(
    file: TokenFile,
    env: &dyn Fn(&str) -> Option<OsString>,
    with_oidc: bool,
) -> Result<Option<AdminTokenHash>, ConfigError> {
    let from_env = env("ADMIN_TOKEN")
        .map(|v| {
            v.into_string()
                .map_err(|_| invalid(format!("ADMIN_TOKEN is not UTF-8; {MAKE_A_TOKEN}")))
        })
        .transpose()?;
    let token = match (file, from_env) {
        (TokenFile::Flag(path), _) => read_token_file(&path)?,
        (TokenFile::Variable(_), Some(_)) => {
            return Err(invalid(
                "both ADMIN_TOKEN and TENANTD_ADMIN_TOKEN_FILE are set; set only one",
            ));
        }
        (TokenFile::Variable(path), None) => read_token_file(&path)?,
        (TokenFile::Absent, Some(token)) => token,
        (TokenFile::Absent, None) if with_oidc => return Ok(None),
        (TokenFile::Absent, None) => {
            return Err(invalid(format!("no admin token was given; {MAKE_A_TOKEN}")));
        }
    };
    check_admin_token(&token)?;
    Ok(Some(AdminTokenHash::of(&token)))
}

/// Reads a token file; editors add a final newline, so trailing white space is trimmed.
fn read_token_file(path: &Path) -> Result<String, ConfigError> {
    let raw = std::fs::read_to_string(path).map_err(|e| {
        invalid(format!(
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
        return Err(invalid(format!(
            "the admin token has {chars} characters; it needs at least {ADMIN_TOKEN_CHARS_MIN}; {MAKE_A_TOKEN}"
        )));
    }
    if token.len() > ADMIN_TOKEN_BYTES_MAX || !token.bytes().all(is_visible_ascii) {
        return Err(invalid(format!(
            "the admin token must be at most {ADMIN_TOKEN_BYTES_MAX} visible ASCII characters, \
             without spaces; {MAKE_A_TOKEN}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    /// The variables clap reads from the process itself; set, they would change what these
    /// tests see, and the tests never set them.
    const FLAG_VARIABLES: &[&str] = &[
        "TENANTD_LISTEN",
        "TENANTD_DB",
        "TENANTD_PUBLIC_URL",
        "TENANTD_ADMIN_TOKEN_FILE",
        "TENANTD_OIDC_ISSUER",
        "TENANTD_OIDC_AUDIENCE",
        "TENANTD_OIDC_ADMIN_SCOPE",
        "TENANTD_OIDC_PERMISSIONS_CLAIM",
    ];

    /// Parses `args` with `ADMIN_TOKEN` (the only injected variable) set to `admin_token`.
    fn parse_with(args: &[&str], admin_token: Option<&str>) -> Result<Command, ConfigError> {
        for var in FLAG_VARIABLES {
            assert!(
                std::env::var_os(var).is_none(),
                "unset {var} to run these tests: they check the defaults"
            );
        }
        parse(args.iter().map(OsString::from), |name| {
            (name == "ADMIN_TOKEN")
                .then(|| admin_token.map(OsString::from))
                .flatten()
        })
    }

    fn serve_config(args: &[&str]) -> ServeConfig {
        match parse_with(args, Some(TOKEN)) {
            Ok(Command::Serve(config)) => *config,
            other => panic!("{args:?}: expected serve, got {other:?}"),
        }
    }

    fn error_text(args: &[&str], admin_token: Option<&str>) -> String {
        match parse_with(args, admin_token) {
            Err(ConfigError::Invalid(text)) => text,
            other => panic!("{args:?}: expected a usage error, got {other:?}"),
        }
    }

    /// The top-level help, as `tenantd --help` prints it.
    fn help() -> String {
        match parse_with(&["--help"], None) {
            Err(ConfigError::Shown(text)) => text,
            other => panic!("--help: expected the help text, got {other:?}"),
        }
    }

    #[test]
    fn every_setting_has_its_default() {
        let config = serve_config(&[]);
        type Row = (&'static str, bool);
        let rows: &[Row] = &[
            (
                "listen",
                config.listen == LISTEN_DEFAULT.parse().expect("the default is an address"),
            ),
            ("db", config.db == Path::new(DB_DEFAULT)),
            ("public URL: the bound address", config.public_url.is_none()),
            (
                "admin token from ADMIN_TOKEN",
                config
                    .admin_token
                    .is_some_and(|h| h.same_as(&AdminTokenHash::of(TOKEN))),
            ),
            ("no identity provider", config.oidc.is_none()),
            (
                "admin scope",
                matches!(Cli::command().try_get_matches_from(["tenantd"]).ok()
                    .and_then(|m| m.get_one::<String>("oidc_admin_scope").cloned()),
                    Some(scope) if scope == ADMIN_SCOPE_DEFAULT),
            ),
            (
                "max connections",
                config.limits.max_connections == server::MAX_CONNECTIONS_DEFAULT,
            ),
            (
                "workers",
                config.limits.workers == server::workers_default(),
            ),
            (
                "header read timeout",
                config.limits.header_read_timeout == server::HEADER_READ_TIMEOUT_DEFAULT,
            ),
            (
                "body read timeout",
                config.limits.body_read_timeout == server::BODY_READ_TIMEOUT_DEFAULT,
            ),
            (
                "shutdown grace",
                config.limits.shutdown_grace == server::SHUTDOWN_GRACE_DEFAULT,
            ),
            (
                "commit batch",
                config.commit_batch_max == store::COMMIT_BATCH_MAX_DEFAULT,
            ),
            (
                "store queue depth",
                config.store_queue_depth == store::QUEUE_DEPTH_DEFAULT,
            ),
            ("readers", config.readers == store::readers_default()),
            (
                "PostgreSQL writers",
                config.pg_writers == store::PG_WRITERS_DEFAULT,
            ),
            (
                "auth queue depth",
                config.auth_queue_depth == store::QUEUE_DEPTH_DEFAULT,
            ),
            (
                "idempotency TTL",
                config.idempotency_ttl == store::IDEMPOTENCY_TTL_MAX,
            ),
            (
                "event retention",
                config.event_retention == Duration::from_secs(30 * 86_400),
            ),
        ];
        for (what, holds) in rows {
            assert!(holds, "the default {what}: {config:?}");
        }
    }

    #[test]
    fn numeric_flags_take_their_whole_range_and_nothing_beyond() {
        type Read = fn(&ServeConfig) -> u64;
        let rows: &[(&str, u64, u64, Read)] = &[
            ("--max-connections", 1, 65_536, |c| {
                c.limits.max_connections as u64
            }),
            ("--workers", 1, 256, |c| c.limits.workers as u64),
            ("--commit-batch-max", 1, 4096, |c| c.commit_batch_max as u64),
            ("--store-queue-depth", 1, 1_000_000, |c| {
                c.store_queue_depth as u64
            }),
            ("--readers", 1, 64, |c| c.readers as u64),
            ("--pg-writers", 1, 16, |c| c.pg_writers as u64),
            ("--auth-queue-depth", 1, 1_000_000, |c| {
                c.auth_queue_depth as u64
            }),
            ("--header-read-timeout-ms", 100, 600_000, |c| {
                millis(c.limits.header_read_timeout)
            }),
            ("--body-read-timeout-ms", 100, 600_000, |c| {
                millis(c.limits.body_read_timeout)
            }),
            ("--shutdown-grace-ms", 0, 600_000, |c| {
                millis(c.limits.shutdown_grace)
            }),
            ("--idempotency-ttl-s", 1, 86_400, |c| {
                c.idempotency_ttl.as_secs()
            }),
            ("--event-retention", 1, 3650, |c| {
                c.event_retention.as_secs() / 86_400
            }),
        ];
        for &(flag, min, max, read) in rows {
            for n in [min, max] {
                let config = serve_config(&[flag, &n.to_string()]);
                assert_eq!(read(&config), n, "{flag} {n} is taken as given");
            }
            let config = serve_config(&[&format!("{flag}={max}")]);
            assert_eq!(read(&config), max, "{flag}={max} is taken as given");
            let outside = [min.checked_sub(1), Some(max + 1)];
            for n in outside.into_iter().flatten() {
                let text = error_text(&[flag, &n.to_string()], Some(TOKEN));
                assert!(
                    text.contains(flag) && text.contains(&format!("{min}..={max}")),
                    "{flag} {n} is refused naming the flag and its range: {text}"
                );
            }
            for bad in ["many", "-1", "1.5", ""] {
                let text = error_text(&[&format!("{flag}={bad}")], Some(TOKEN));
                assert!(text.contains(flag), "{flag} {bad:?} is refused: {text}");
            }
        }
    }

    #[test]
    fn the_commands_parse() {
        type Row = (&'static str, &'static [&'static str], &'static str);
        let rows: &[Row] = &[
            (
                "no subcommand serves",
                &[],
                "serve 127.0.0.1:8080 ./tenantd.db",
            ),
            (
                "serve flags without the subcommand",
                &["--listen", "127.0.0.1:2", "--db=a.db"],
                "serve 127.0.0.1:2 a.db",
            ),
            (
                "serve by name",
                &["serve"],
                "serve 127.0.0.1:8080 ./tenantd.db",
            ),
            (
                "serve by name with flags",
                &["serve", "--listen=[::1]:3", "--db", "b.db"],
                "serve [::1]:3 b.db",
            ),
            (
                "audit verify on the default database",
                &["audit", "verify"],
                "verify ./tenantd.db",
            ),
            (
                "audit verify with --db",
                &["audit", "verify", "--db", "x.db"],
                "verify x.db",
            ),
            (
                "backup of the default database",
                &["backup", "--to", "b.db"],
                "backup ./tenantd.db b.db",
            ),
            (
                "backup with --db, in either order",
                &["backup", "--to=b.db", "--db", "a.db"],
                "backup a.db b.db",
            ),
        ];
        for (what, args, want) in rows {
            // Only serve needs the token; the others must parse without it.
            let token = (args
                .first()
                .is_none_or(|a| *a == "serve" || a.starts_with('-')))
            .then_some(TOKEN);
            let got = match parse_with(args, token) {
                Ok(Command::Serve(c)) => format!("serve {} {}", c.listen, c.db.display()),
                Ok(Command::AuditVerify { db }) => format!("verify {}", db.display()),
                Ok(Command::Backup { db, to }) => {
                    format!("backup {} {}", db.display(), to.display())
                }
                Ok(Command::Copy { from, to }) => {
                    format!("copy {} {}", from.display(), to.display())
                }
                Err(e) => format!("error {e}"),
            };
            assert_eq!(&got, want, "{what}: {args:?}");
        }
    }

    #[test]
    fn help_and_version_are_shown_not_refused() {
        let version = env!("CARGO_PKG_VERSION");
        type Row = (&'static [&'static str], &'static str);
        let rows: &[Row] = &[
            (&["--help"], "--admin-token-file"),
            (&["-h"], "--admin-token-file"),
            (&["help"], "--admin-token-file"),
            (&["serve", "--help"], "--admin-token-file"),
            (&["audit", "verify", "--help"], "--db"),
            (&["backup", "-h"], "--to"),
            (&["--version"], version),
            (&["-V"], version),
        ];
        for (args, want) in rows {
            match parse_with(args, None) {
                Err(ConfigError::Shown(text)) => {
                    assert!(text.contains(want), "{args:?} shows {want:?}: {text}")
                }
                other => panic!("{args:?}: expected text to show, got {other:?}"),
            }
        }
    }

    #[test]
    fn bad_command_lines_are_refused_with_a_reason() {
        type Row = (&'static str, &'static [&'static str], &'static str);
        let rows: &[Row] = &[
            ("an unknown flag", &["--bogus", "1"], "--bogus"),
            ("a flag without its value", &["--db"], "--db"),
            ("a flag given twice", &["--db", "a", "--db", "b"], "--db"),
            ("an empty --db", &["--db", ""], "must not be empty"),
            ("a host name", &["--listen", "localhost:80"], "--listen"),
            ("no port", &["--listen", "127.0.0.1"], "IP address and port"),
            ("not http", &["--public-url", "ftp://x"], "--public-url"),
            ("a space", &["--public-url", "http://a b"], "--public-url"),
            ("no host", &["--public-url", "https:///x"], "--public-url"),
            ("an unknown subcommand", &["frobnicate"], "frobnicate"),
            ("audit without verify", &["audit"], "verify"),
            ("backup without --to", &["backup"], "--to"),
            (
                "a serve flag on backup",
                &["backup", "--to", "b", "--readers", "2"],
                "--readers",
            ),
            (
                "a subcommand after serve flags",
                &["--readers", "2", "serve"],
                "serve",
            ),
            (
                "an issuer without an audience",
                &["--oidc-issuer", "https://id.example.com"],
                "--oidc-audience",
            ),
            (
                "an audience without an issuer",
                &["--oidc-audience", "tenantd"],
                "--oidc-issuer",
            ),
            (
                "a plain-http issuer off loopback",
                &[
                    "--oidc-issuer",
                    "http://id.example.com",
                    "--oidc-audience",
                    "a",
                ],
                "https:// unless its host is a loopback address",
            ),
            (
                "an issuer that is no URL",
                &["--oidc-issuer", "id.example.com", "--oidc-audience", "a"],
                "--oidc-issuer",
            ),
            (
                "an empty audience",
                &[
                    "--oidc-issuer",
                    "https://id.example.com",
                    "--oidc-audience",
                    "",
                ],
                "--oidc-audience",
            ),
            (
                "an admin scope with a space",
                &["--oidc-admin-scope", "a b"],
                "--oidc-admin-scope",
            ),
        ];
        for (what, args, want) in rows {
            let text = error_text(args, Some(TOKEN));
            assert!(
                text.contains(want),
                "{what}: {args:?}: {text:?} lacks {want:?}"
            );
            assert!(!text.contains(TOKEN), "{what}: the token is in {text:?}");
        }
    }

    #[test]
    fn an_identity_provider_makes_the_admin_token_optional() {
        let args = [
            "--oidc-issuer",
            "http://127.0.0.1:9000/realms/x",
            "--oidc-audience",
            "tenantd",
            "--oidc-permissions-claim",
            "https://tenantd.example.com/permissions",
        ];
        let config = match parse_with(&args, None) {
            Ok(Command::Serve(config)) => config,
            other => panic!("serve with an issuer and no admin token: {other:?}"),
        };
        assert!(config.admin_token.is_none());
        assert_eq!(
            config.oidc,
            Some(OidcConfig {
                issuer: "http://127.0.0.1:9000/realms/x".into(),
                audience: "tenantd".into(),
                admin_scope: ADMIN_SCOPE_DEFAULT.into(),
                permissions_claim: "https://tenantd.example.com/permissions".into(),
                ca_file: None,
            })
        );
        let with_token = match parse_with(&args, Some(TOKEN)) {
            Ok(Command::Serve(config)) => config,
            other => panic!("serve with an issuer and an admin token: {other:?}"),
        };
        assert!(
            with_token.admin_token.is_some(),
            "a given token keeps working"
        );
    }

    #[test]
    fn short_public_urls_are_fine() {
        let config = serve_config(&["--public-url", "http://x"]);
        assert_eq!(config.public_url.as_deref(), Some("http://x"));
    }

    #[test]
    fn the_admin_token_rules() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let write = |name: &str, contents: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, contents).expect("writing a token file");
            path
        };
        let file_token = "f".repeat(40);
        let good = write("good", &format!("{file_token} \t\n\n"));
        let short = "s".repeat(ADMIN_TOKEN_CHARS_MIN - 1);
        let short_file = write("short", &format!("{short}\n"));
        let blank = write("blank", "\n  \n");
        let spaced = "ab cd".repeat(8);
        let long = "x".repeat(ADMIN_TOKEN_BYTES_MAX + 1);
        let missing = dir.path().join("missing");
        let secrets = [TOKEN, &file_token, &short, &spaced, &long];

        type Row<'a> = (
            &'a str,
            TokenFile,
            Option<&'a str>,
            Result<&'a str, &'a str>,
        );
        let rows: Vec<Row<'_>> = vec![
            (
                "ADMIN_TOKEN alone",
                TokenFile::Absent,
                Some(TOKEN),
                Ok(TOKEN),
            ),
            (
                "the flag, trimmed",
                TokenFile::Flag(good.clone()),
                None,
                Ok(&file_token),
            ),
            (
                "the flag beats ADMIN_TOKEN",
                TokenFile::Flag(good.clone()),
                Some(TOKEN),
                Ok(&file_token),
            ),
            (
                "TENANTD_ADMIN_TOKEN_FILE alone",
                TokenFile::Variable(good.clone()),
                None,
                Ok(&file_token),
            ),
            (
                "both variables",
                TokenFile::Variable(good.clone()),
                Some(TOKEN),
                Err("set only one"),
            ),
            ("none at all", TokenFile::Absent, None, Err("/dev/urandom")),
            (
                "one character short",
                TokenFile::Absent,
                Some(&short),
                Err("at least 32"),
            ),
            (
                "a short file",
                TokenFile::Flag(short_file),
                None,
                Err("/dev/urandom"),
            ),
            (
                "a file of white space",
                TokenFile::Flag(blank),
                None,
                Err("has 0 characters"),
            ),
            (
                "inner spaces",
                TokenFile::Absent,
                Some(&spaced),
                Err("visible ASCII"),
            ),
            (
                "longer than a bearer token may be",
                TokenFile::Absent,
                Some(&long),
                Err("at most 4096"),
            ),
            (
                "a missing file",
                TokenFile::Flag(missing),
                None,
                Err("cannot read the admin token file"),
            ),
        ];
        for (what, file, env_token, want) in rows {
            let env = |name: &str| {
                (name == "ADMIN_TOKEN")
                    .then(|| env_token.map(OsString::from))
                    .flatten()
            };
            match (admin_token(file, &env, false), want) {
                (Ok(hash), Ok(token)) => {
                    assert!(
                        hash.is_some_and(|h| h.same_as(&AdminTokenHash::of(token))),
                        "{what}: the right token"
                    )
                }
                (Err(ConfigError::Invalid(text)), Err(reason)) => {
                    assert!(text.contains(reason), "{what}: {text:?} lacks {reason:?}");
                    for secret in secrets {
                        assert!(!text.contains(secret), "{what}: a token is in {text:?}");
                    }
                }
                (got, _) => panic!(
                    "{what}: expected {want:?}, got {:?}",
                    got.map(|_| "a token")
                ),
            }
        }
    }

    #[test]
    fn serve_needs_a_token_and_the_other_commands_do_not() {
        let text = error_text(&["serve"], None);
        assert!(
            text.contains("no admin token"),
            "serve without a token: {text}"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("token");
        std::fs::write(&file, "t".repeat(ADMIN_TOKEN_CHARS_MIN)).expect("writing a token file");
        let path = file.to_str().expect("a UTF-8 path");
        let config = match parse_with(&["--admin-token-file", path], Some(TOKEN)) {
            Ok(Command::Serve(config)) => config,
            other => panic!("serve with a token file: {other:?}"),
        };
        assert!(
            config
                .admin_token
                .is_some_and(|h| h.same_as(&AdminTokenHash::of(&"t".repeat(ADMIN_TOKEN_CHARS_MIN)))),
            "--admin-token-file beats ADMIN_TOKEN"
        );
    }

    #[test]
    fn the_help_names_every_flag_variable_and_command() {
        let help = help();
        let serve = ServeArgs::augment_args(clap::Command::new("serve"));
        let mut wanted: Vec<String> = serve
            .get_arguments()
            .flat_map(|arg| {
                let long = arg.get_long().map(|l| format!("--{l}"));
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                long.into_iter().chain(env)
            })
            .collect();
        assert!(
            wanted.len() >= 17,
            "the serve flags and variables: {wanted:?}"
        );
        wanted.extend(
            [
                "serve",
                "audit verify",
                "backup",
                "--to",
                "--help",
                "--version",
                "ADMIN_TOKEN",
                "RUST_LOG",
                "Exit codes",
            ]
            .map(String::from),
        );
        for want in wanted {
            assert!(help.contains(&want), "--help lacks {want}:\n{help}");
        }
    }

    #[test]
    fn the_declaration_is_consistent() {
        Cli::command().debug_assert();
        let serve = ServeArgs::augment_args(clap::Command::new("serve"));
        let token_file = serve
            .get_arguments()
            .find(|arg| arg.get_id() == ADMIN_TOKEN_FILE_ID)
            .expect("ADMIN_TOKEN_FILE_ID names an argument");
        assert_eq!(
            token_file.get_env().and_then(|e| e.to_str()),
            Some("TENANTD_ADMIN_TOKEN_FILE"),
            "ADMIN_TOKEN_FILE_ID names --admin-token-file"
        );
    }
}
