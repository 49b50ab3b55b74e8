//! The rate-limit flags (`--rate-limit*`), flattened into `serve`'s command line, and the
//! [`RateLimitConfig`] the limiter is made from.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::Args;
use clap::builder::RangedU64ValueParser;

/// The most requests a rate may name, per second or per minute.
pub const RATE_COUNT_MAX: u32 = 1_000_000;

/// The largest burst.
pub const BURST_MAX: u32 = 1_000_000;

/// A principal's sustained rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests…
    pub count: u32,
    /// … per this.
    pub per: Per,
}

/// The unit of a [`Rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Second,
    Minute,
}

impl Rate {
    /// The time one request's worth of a bucket takes to come back.
    pub fn interval(self) -> Duration {
        let unit = match self.per {
            Per::Second => Duration::from_secs(1),
            Per::Minute => Duration::from_secs(60),
        };
        unit / self.count
    }

    /// The default burst: twice the rate per second, rounded down, at least 1.
    fn default_burst(self) -> NonZeroU32 {
        let twice = match self.per {
            Per::Second => self.count.saturating_mul(2),
            Per::Minute => self.count / 30,
        };
        NonZeroU32::new(twice.clamp(1, BURST_MAX)).expect("at least 1")
    }
}

/// How requests are limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// Each principal's sustained rate; `None`: no limit.
    pub rate: Option<Rate>,
    /// How many requests may come at once.
    pub burst: NonZeroU32,
    /// Whether the admin is counted too.
    pub admin: bool,
}

/// The rate-limit flags as clap reads them; the fields' names are clap's ids.
#[derive(Args, Debug)]
pub(crate) struct RateLimitArgs {
    /// Each principal's sustained rate: N/s or N/m (1 to 1000000), or off
    ///
    /// Every /v1 request of a tenant token, of an identity of the identity provider, and of
    /// the admin with --rate-limit-admin counts; one over the limit gets 429 rate_limited
    /// with Retry-After. Per instance: N instances behind a balancer allow N times the rate.
    #[arg(
        long,
        next_line_help = true,
        value_name = "RATE",
        env = "TENANTD_RATE_LIMIT",
        hide_env_values = true,
        default_value = "off",
        value_parser = rate
    )]
    rate_limit: Limit,

    /// How many requests a principal may send at once (1 to 1000000)
    ///
    /// By default twice the rate per second, rounded down, at least 1.
    #[arg(
        long,
        next_line_help = true,
        value_name = "N",
        env = "TENANTD_RATE_LIMIT_BURST",
        hide_env_values = true,
        value_parser = RangedU64ValueParser::<u32>::new().range(1..=u64::from(BURST_MAX))
    )]
    rate_limit_burst: Option<u32>,

    /// Count the admin's requests too (by default the admin is not limited)
    #[arg(
        long,
        env = "TENANTD_RATE_LIMIT_ADMIN",
        hide_env_values = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    rate_limit_admin: bool,
}

impl RateLimitArgs {
    /// The limiter's settings; every flag was checked as clap read it.
    pub(crate) fn config(self) -> RateLimitConfig {
        let rate = self.rate_limit.0;
        let burst = self
            .rate_limit_burst
            .and_then(NonZeroU32::new)
            .or_else(|| rate.map(Rate::default_burst))
            .unwrap_or(NonZeroU32::MIN);
        RateLimitConfig {
            rate,
            burst,
            admin: self.rate_limit_admin,
        }
    }
}

/// A parsed `--rate-limit`: a rate, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limit(Option<Rate>);

/// Reads `N/s`, `N/m` or `off`.
fn rate(raw: &str) -> Result<Limit, String> {
    if raw == "off" {
        return Ok(Limit(None));
    }
    let refused = || format!("must be N/s or N/m with N from 1 to {RATE_COUNT_MAX}, or off");
    let (count, unit) = raw.split_once('/').ok_or_else(refused)?;
    let per = match unit {
        "s" => Per::Second,
        "m" => Per::Minute,
        _ => return Err(refused()),
    };
    let count: u32 = count
        .parse()
        .ok()
        .filter(|n| (1..=RATE_COUNT_MAX).contains(n) && !count.starts_with('+'))
        .ok_or_else(refused)?;
    Ok(Limit(Some(Rate { count, per })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_others_are_refused() {
        assert_eq!(rate("off"), Ok(Limit(None)));
        assert_eq!(
            rate("200/s"),
            Ok(Limit(Some(Rate {
                count: 200,
                per: Per::Second
            })))
        );
        assert_eq!(
            rate("30/m").map(|l| l.0.map(Rate::interval)),
            Ok(Some(Duration::from_secs(2)))
        );
        for bad in [
            "",
            "0/s",
            "-1/s",
            "+5/s",
            "5",
            "5/h",
            "5/S",
            "1000001/s",
            "5 /s",
            "on",
            "Off",
        ] {
            assert!(rate(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn the_default_burst_is_twice_the_rate_per_second_at_least_one() {
        let burst = |count, per| Rate { count, per }.default_burst().get();
        assert_eq!(burst(200, Per::Second), 400);
        assert_eq!(burst(1, Per::Second), 2);
        assert_eq!(burst(600, Per::Minute), 20);
        assert_eq!(burst(45, Per::Minute), 1);
        assert_eq!(burst(10, Per::Minute), 1);
        assert_eq!(burst(RATE_COUNT_MAX, Per::Second), BURST_MAX);
    }
}
