//! The webhook flags (`--webhook-*`), flattened into `serve`'s command line, and the
//! [`WebhookConfig`] the sender is started with.

use std::time::Duration;

use clap::Args;
use clap::builder::RangedU64ValueParser;

/// How events are delivered to webhook endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// One attempt's whole time: connect, TLS, request, status line.
    pub timeout: Duration,
    /// The waits before the 2nd, 3rd, … attempt; after the last the delivery fails.
    pub retry_schedule: Vec<Duration>,
    /// An endpoint is disabled after this many failed attempts in a row.
    pub disable_after: u32,
    /// Whether `http://` endpoint URLs are taken.
    pub allow_http: bool,
    /// Whether loopback, private, link-local and unique-local addresses may be delivered to.
    pub allow_private: bool,
    /// Extra authorities for `https://` endpoints (a PEM file), beside the roots compiled in.
    pub ca_file: Option<String>,
}

/// The most waits a retry schedule lists.
pub const RETRY_SCHEDULE_MAX: usize = 20;

/// The longest wait of a retry schedule: a week.
pub const RETRY_WAIT_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The webhook flags as clap reads them; the fields' names are clap's ids.
#[derive(Args, Debug)]
pub(crate) struct WebhookArgs {
    /// Seconds one webhook attempt may take, all told (1 to 60)
    ///
    /// Connecting, TLS, sending the event and reading the status line; an attempt that takes
    /// longer fails as "timed out".
    #[arg(
        long,
        next_line_help = true,
        value_name = "SECONDS",
        env = "TENANTD_WEBHOOK_TIMEOUT",
        hide_env_values = true,
        default_value_t = 10,
        value_parser = RangedU64ValueParser::<u64>::new().range(1..=60)
    )]
    webhook_timeout: u64,

    /// The waits before a webhook's 2nd, 3rd, … attempt, comma-separated
    ///
    /// Each a whole number with a unit: ms, s, m or h (at most 20 waits, each at most 7 days).
    /// Each wait counts from the end of the failed attempt, give or take 10 % at random; after
    /// the last wait's attempt fails, the delivery is "failed".
    #[arg(
        long,
        next_line_help = true,
        value_name = "LIST",
        env = "TENANTD_WEBHOOK_RETRY_SCHEDULE",
        hide_env_values = true,
        default_value = "5s,30s,2m,10m,1h,4h,8h",
        value_parser = retry_schedule
    )]
    webhook_retry_schedule: RetrySchedule,

    /// Failed webhook attempts in a row after which an endpoint is disabled (1 to 1000000)
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        env = "TENANTD_WEBHOOK_DISABLE_AFTER",
        hide_env_values = true,
        default_value_t = 100,
        value_parser = RangedU64ValueParser::<u32>::new().range(1..=1_000_000)
    )]
    webhook_disable_after: u32,

    /// Take http:// webhook URLs (demos and tests); otherwise https:// only
    #[arg(
        long,
        env = "TENANTD_WEBHOOK_ALLOW_HTTP",
        hide_env_values = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    webhook_allow_http: bool,

    /// Deliver webhooks to loopback, private, link-local and unique-local addresses
    ///
    /// Without it, an endpoint's host is resolved at every attempt and such an address fails
    /// the attempt without a connection (cloud metadata addresses included).
    #[arg(
        long,
        env = "TENANTD_WEBHOOK_ALLOW_PRIVATE",
        hide_env_values = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    webhook_allow_private: bool,

    /// PEM file of extra authorities trusted for https:// webhook endpoints
    ///
    /// For endpoints whose certificates a private authority signed; they are trusted beside
    /// the Mozilla roots compiled in.
    #[arg(
        long,
        next_line_help = true,
        value_name = "FILE",
        env = "TENANTD_WEBHOOK_CA_FILE",
        hide_env_values = true,
        value_parser = ca_file
    )]
    webhook_ca_file: Option<String>,
}

impl WebhookArgs {
    /// The sender's settings; every flag was checked as clap read it.
    pub(crate) fn config(self) -> WebhookConfig {
        WebhookConfig {
            timeout: Duration::from_secs(self.webhook_timeout),
            retry_schedule: self.webhook_retry_schedule.0,
            disable_after: self.webhook_disable_after,
            allow_http: self.webhook_allow_http,
            allow_private: self.webhook_allow_private,
            ca_file: self.webhook_ca_file,
        }
    }
}

/// A parsed `--webhook-retry-schedule`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RetrySchedule(Vec<Duration>);

/// Reads a retry schedule: waits such as `5s`, `200ms`, `2m`, `1h`, comma-separated.
fn retry_schedule(raw: &str) -> Result<RetrySchedule, String> {
    let waits = raw
        .split(',')
        .map(|wait| {
            let digits = wait.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let unit = &wait[digits.len()..];
            let n: u64 = digits
                .parse()
                .ok()
                .filter(|_| !digits.starts_with('+'))
                .ok_or_else(|| format!("{wait:?} is not a whole number with a unit"))?;
            let duration = match unit {
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                "m" => Duration::from_secs(n.saturating_mul(60)),
                "h" => Duration::from_secs(n.saturating_mul(3600)),
                _ => return Err(format!("{wait:?} needs a unit: ms, s, m or h")),
            };
            if duration.is_zero() || duration > RETRY_WAIT_MAX {
                return Err(format!("{wait:?} must be more than 0 and at most 7 days"));
            }
            Ok(duration)
        })
        .collect::<Result<Vec<_>, String>>()?;
    if waits.len() > RETRY_SCHEDULE_MAX {
        return Err(format!("at most {RETRY_SCHEDULE_MAX} waits"));
    }
    Ok(RetrySchedule(waits))
}

/// The authorities' file, read now so that a wrong path or a file without a certificate stops
/// the start; the sender's client reads it again when it starts.
fn ca_file(path: &str) -> Result<String, String> {
    crate::crypto::tls_roots(Some(path)).map(|_| path.to_owned())
}
