//! Rate limits: every `/v1` request of a counted principal (a tenant token, an identity of
//! the identity provider, the admin with `--rate-limit-admin`) is counted against that
//! principal's token bucket, a GCRA per principal in this instance. A request over its limit
//! is refused with `429` right after authentication, before anything reads its body.
//!
//! Every answer to a counted principal carries `RateLimit: "default";r=<remaining>;t=<seconds>`
//! after the IETF draft *RateLimit header fields for HTTP*; a `429` adds `Retry-After` and
//! `RateLimit-Policy: "default";q=<burst>;w=<window>`.

pub(crate) mod flags;

use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use hyper::header::HeaderValue;

use crate::auth::Principal;
pub(crate) use flags::RateLimitConfig;

/// How often the buckets of principals that have not asked for a while (whose buckets are
/// full again) are dropped: the map holds the principals of the last minute or so, each
/// one a valid credential's holder.
pub(crate) const IDLE_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// A principal as its bucket is keyed: a tenant by its id's text after the prefix (a ULID's 26
/// characters), copied, so that counting a request neither parses nor allocates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Admin,
    Tenant([u8; ULID_CHARS]),
    Identity(std::sync::Arc<str>),
}

/// The characters of a ULID's text.
const ULID_CHARS: usize = 26;

/// The principals as `/metrics` labels their refusals, in the order of its counters.
pub(crate) const PRINCIPAL_LABELS: [&str; 3] = ["tenant", "identity", "admin"];

/// What the limit decided for one request.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Not counted: no header.
    Uncounted,
    /// Counted and let through, with its `RateLimit` value.
    Allowed(Headers),
    /// Over the limit: `429`.
    Refused {
        /// Whole seconds until one more request is allowed, at least 1.
        retry_after_s: u64,
        /// Its headers (`t` is `retry_after_s`).
        headers: Headers,
        /// The index of its principal in [`PRINCIPAL_LABELS`].
        principal: usize,
    },
}

/// The draft's header values for one answer.
#[derive(Debug, Clone)]
pub(crate) struct Headers {
    /// `RateLimit-Policy`, on a `429`.
    pub(crate) policy: Option<HeaderValue>,
    /// `RateLimit`.
    pub(crate) limit: HeaderValue,
}

/// The buckets of one instance.
pub(crate) struct Limiter {
    buckets: RateLimiter<
        Key,
        DashMapStateStore<Key, BuildKeyHasher>,
        DefaultClock,
        StateInformationMiddleware,
    >,
    /// `RateLimit-Policy`'s value, the same on every `429`.
    policy: HeaderValue,
    /// The time one request's worth of the bucket takes to come back.
    interval: Duration,
    /// Whether the admin is counted.
    admin: bool,
}

impl Limiter {
    /// The limiter `config` asks for; `None` when limits are off.
    pub(crate) fn new(config: &RateLimitConfig) -> Option<Self> {
        let rate = config.rate?;
        let interval = rate.interval();
        let quota = Quota::with_period(interval)?.allow_burst(config.burst);
        let window = ceil_seconds(interval * config.burst.get()).max(1);
        let policy = HeaderValue::from_str(&format!("\"default\";q={};w={window}", config.burst))
            .expect("digits and quotes");
        Some(Self {
            buckets: RateLimiter::dashmap_with_hasher(quota, BuildKeyHasher)
                .with_middleware::<StateInformationMiddleware>(),
            policy,
            interval,
            admin: config.admin,
        })
    }

    /// Counts one request of `principal`.
    pub(crate) fn check(&self, principal: &Principal) -> Decision {
        let (key, index) = match principal {
            Principal::Admin if !self.admin => return Decision::Uncounted,
            Principal::Admin => (Key::Admin, 2),
            Principal::Tenant(id) => (Key::Tenant(tenant_key(id)), 0),
            Principal::Identity(identity) => {
                (Key::Identity(std::sync::Arc::clone(&identity.sub)), 1)
            }
        };
        match self.buckets.check_key(&key) {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                // With some left, one more is allowed now; with none, within one interval.
                let t = if remaining > 0 {
                    0
                } else {
                    ceil_seconds(self.interval).max(1)
                };
                Decision::Allowed(self.headers(remaining, t, false))
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.buckets.clock().now());
                let retry_after_s = ceil_seconds(wait).max(1);
                Decision::Refused {
                    retry_after_s,
                    headers: self.headers(0, retry_after_s, true),
                    principal: index,
                }
            }
        }
    }

    /// Drops the buckets that are full again: a principal that comes back starts full, as
    /// it would have.
    pub(crate) fn forget_idle(&self) {
        self.buckets.retain_recent();
        self.buckets.shrink_to_fit();
    }

    /// The headers of an answer, `RateLimit-Policy` among them when `refused`.
    fn headers(&self, remaining: u32, t: u64, refused: bool) -> Headers {
        // Written by hand into the stack, then copied once: it is on every counted answer,
        // and `format!` costs more than the bucket's own decision.
        let mut value = [0u8; 64];
        let mut len = 0;
        for part in [
            b"\"default\";r=".as_slice(),
            decimal(u64::from(remaining)).as_ref(),
            b";t=",
            decimal(t).as_ref(),
        ] {
            value[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        Headers {
            policy: refused.then(|| self.policy.clone()),
            limit: HeaderValue::from_bytes(&value[..len]).expect("digits and quotes"),
        }
    }
}

/// Hashes the bucket keys: a multiply-and-rotate over 8-byte words (as rustc's `FxHasher`),
/// several times cheaper than the default SipHash on every counted request. Its weakness to
/// keys chosen to collide does not matter here: a key is a valid credential's principal (a
/// tenant id the server made, an identity the provider signed), never a value a client picks.
#[derive(Debug, Clone, Copy, Default)]
struct BuildKeyHasher;

impl std::hash::BuildHasher for BuildKeyHasher {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// The hasher of [`BuildKeyHasher`].
#[derive(Debug, Clone, Copy)]
struct KeyHasher(u64);

impl KeyHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let mut rest = [0u8; 8];
        rest[..words.remainder().len()].copy_from_slice(words.remainder());
        self.add(u64::from_le_bytes(rest));
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A tenant's bucket key: the ULID's characters of its id.
fn tenant_key(id: &crate::domain::TenantId) -> [u8; ULID_CHARS] {
    let text = id.as_str().as_bytes();
    let mut key = [0u8; ULID_CHARS];
    key.copy_from_slice(&text[text.len() - ULID_CHARS..]);
    key
}

/// `n` in decimal, at the end of a buffer of 20 digits.
struct Decimal {
    digits: [u8; 20],
    at: usize,
}

impl AsRef<[u8]> for Decimal {
    fn as_ref(&self) -> &[u8] {
        &self.digits[self.at..]
    }
}

/// `n` in decimal.
fn decimal(mut n: u64) -> Decimal {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Decimal { digits, at }
}

/// `d` in whole seconds, rounded up.
fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TenantId;
    use crate::ratelimit::flags::{Per, Rate};
    use std::num::NonZeroU32;

    fn limiter(count: u32, per: Per, burst: u32, admin: bool) -> Limiter {
        Limiter::new(&RateLimitConfig {
            rate: Some(Rate { count, per }),
            burst: NonZeroU32::new(burst).expect("a burst"),
            admin,
        })
        .expect("limits on")
    }

    fn tenant(n: u8) -> Principal {
        Principal::Tenant(TenantId::from_ulid(ulid::Ulid::from_parts(
            0,
            u128::from(n),
        )))
    }

    fn limit(decision: &Decision) -> String {
        match decision {
            Decision::Allowed(h) | Decision::Refused { headers: h, .. } => {
                h.limit.to_str().expect("ASCII").to_owned()
            }
            Decision::Uncounted => "uncounted".to_owned(),
        }
    }

    #[test]
    fn a_burst_passes_whole_and_the_next_is_refused_for_a_second() {
        let limits = limiter(2, Per::Second, 4, false);
        let one = tenant(1);
        let seen: Vec<String> = (0..4).map(|_| limit(&limits.check(&one))).collect();
        assert_eq!(
            seen,
            [
                "\"default\";r=3;t=0",
                "\"default\";r=2;t=0",
                "\"default\";r=1;t=0",
                "\"default\";r=0;t=1"
            ]
        );
        match limits.check(&one) {
            Decision::Refused {
                retry_after_s,
                headers,
                principal,
            } => {
                assert_eq!((retry_after_s, principal), (1, 0));
                assert_eq!(headers.policy.expect("a 429's"), "\"default\";q=4;w=2");
                assert_eq!(headers.limit, "\"default\";r=0;t=1");
            }
            other => panic!("the fifth is refused: {other:?}"),
        }
        // Another tenant has its own bucket.
        assert_eq!(limit(&limits.check(&tenant(2))), "\"default\";r=3;t=0");
    }

    #[test]
    fn a_rate_per_minute_announces_its_window_and_wait_in_whole_seconds() {
        let limits = limiter(30, Per::Minute, 1, false);
        let one = tenant(1);
        assert_eq!(limit(&limits.check(&one)), "\"default\";r=0;t=2");
        match limits.check(&one) {
            Decision::Refused {
                retry_after_s,
                headers,
                ..
            } => {
                assert_eq!(retry_after_s, 2, "30/m: one every 2 s");
                assert_eq!(headers.policy.expect("a 429's"), "\"default\";q=1;w=2");
            }
            other => panic!("the second is refused: {other:?}"),
        }
    }

    #[test]
    fn keys_hash_apart() {
        use std::hash::BuildHasher;
        let hashes: std::collections::BTreeSet<u64> = (0..1000u16)
            .map(|n| {
                let id = TenantId::from_ulid(ulid::Ulid::from_parts(1, u128::from(n)));
                BuildKeyHasher.hash_one(Key::Tenant(tenant_key(&id)))
            })
            .chain([BuildKeyHasher.hash_one(Key::Admin)])
            .collect();
        assert_eq!(
            hashes.len(),
            1001,
            "a thousand tenants and the admin hash apart"
        );
    }

    #[test]
    fn decimals_are_written_whole() {
        for n in [0, 7, 10, 1_000_000, u64::MAX] {
            assert_eq!(decimal(n).as_ref(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn the_admin_is_counted_only_when_asked() {
        assert!(matches!(
            limiter(1, Per::Second, 1, false).check(&Principal::Admin),
            Decision::Uncounted
        ));
        let counted = limiter(1, Per::Second, 1, true);
        assert!(matches!(
            counted.check(&Principal::Admin),
            Decision::Allowed(_)
        ));
        assert!(matches!(
            counted.check(&Principal::Admin),
            Decision::Refused { principal: 2, .. }
        ));
    }
}
