//! Identifiers and secrets this process makes: monotonic tenant ids, tenant tokens and
//! request ids.
//!
//! Every random bit comes straight from the OS CSPRNG; the ULID text codec is the `ulid`
//! crate's, the monotonic policy is ours.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ulid::Ulid;

use crate::crypto::{hex, random_bytes, sha256};
use crate::domain::TenantId;

/// The 80 random bits of a ULID.
const ULID_RANDOM_MASK: u128 = (1 << 80) - 1;

/// The first millisecond past the 48-bit time range of a ULID.
const ULID_MS_END: u128 = 1 << 48;

/// The prefix of every tenant token, so a leaked one is recognisable (and greppable).
///
/// A tenant token is `tkn_<ULID of its tenant>_<64 hex>`: the first part says which tenant's
/// stored hash to compare with (a primary-key lookup, no index on secrets), the second is
/// 256 random bits. Only the SHA-256 of the whole token is stored.
pub(crate) const TENANT_TOKEN_PREFIX: &str = "tkn_";

/// Random bytes in a tenant token: 256 bits, twice the contract's minimum.
const TENANT_TOKEN_RANDOM_BYTES: usize = 32;

/// Milliseconds since the Unix epoch by the system clock.
pub(crate) fn now_unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Makes ULIDs (for ids of every kind) that never sort before an earlier one, even within a millisecond or when
/// the clock steps back: then the time part stays and the random part grows by a random
/// step of 1 to 2^32, so a neighbour's id is not one increment away from one's own.
#[derive(Debug, Default)]
pub(crate) struct IdGenerator {
    last: u128,
    random: RandomPool,
}

/// Bytes the OS random source gives [`RandomPool`] at a time: the random parts of 100 ids.
const RANDOM_POOL_BYTES: usize = 1000;

/// Random bytes taken from the OS [`RANDOM_POOL_BYTES`] at a time: a system call an id made a
/// twentieth of a batched charge's time on the writer. Ids are not secrets; what the pool
/// holds is what the ids made next will show.
#[derive(Debug, Default)]
struct RandomPool {
    bytes: Vec<u8>,
    /// The first byte not given out yet.
    at: usize,
}

impl RandomPool {
    /// Fills `out` with bytes no id has shown yet.
    fn fill(&mut self, out: &mut [u8]) {
        if self.at + out.len() > self.bytes.len() {
            self.bytes.resize(RANDOM_POOL_BYTES.max(out.len()), 0);
            random_bytes(&mut self.bytes);
            self.at = 0;
        }
        let end = self.at + out.len();
        out.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
    }
}

impl IdGenerator {
    /// Continues after `latest`, the greatest id already stored, so ids stay monotonic across
    /// restarts as well.
    pub(crate) fn after(latest: Option<Ulid>) -> Self {
        Self {
            last: latest.map_or(0, |ulid| ulid.0),
            random: RandomPool::default(),
        }
    }

    /// The last id made or skipped past (`None` before the first).
    pub(crate) fn last(&self) -> Option<Ulid> {
        (self.last != 0).then_some(Ulid(self.last))
    }

    /// Makes the next id sort after `latest` as well (an id another writer stored).
    pub(crate) fn skip_past(&mut self, latest: Option<Ulid>) {
        self.last = self.last.max(latest.map_or(0, |ulid| ulid.0));
    }

    /// The next id, for a clock reading of `now_ms`.
    ///
    /// # Panics
    /// At the very top of the 48-bit time range, where no id sorts after the last one: it
    /// refuses rather than wrap to an id that sorts first (a panic in the store is a 500, and
    /// the thread lives on).
    pub(crate) fn next(&mut self, now_ms: u64) -> Ulid {
        let last_ms = self.last >> 80;
        let mut random = [0u8; 16];
        self.random.fill(&mut random[6..]);
        let fresh = u128::from_be_bytes(random) & ULID_RANDOM_MASK;
        let step = u128::from(u32::from_be_bytes([
            random[6], random[7], random[8], random[9],
        ])) + 1;
        let now_ms = u128::from(now_ms).min(ULID_MS_END - 1);
        self.last = if now_ms > last_ms {
            (now_ms << 80) | fresh
        } else if (self.last & ULID_RANDOM_MASK) + step <= ULID_RANDOM_MASK {
            self.last + step
        } else {
            // The random part is used up within this millisecond: borrow the next one.
            let next_ms = last_ms + 1;
            assert!(next_ms < ULID_MS_END, "the ULID space is exhausted");
            (next_ms << 80) | fresh
        };
        Ulid(self.last)
    }
}

/// A newly minted tenant token; the plaintext lives only as long as this value, and its
/// `Debug` never shows it.
pub(crate) struct TenantToken {
    plaintext: String,
    hash: [u8; 32],
}

impl TenantToken {
    /// A fresh token for `tenant`.
    pub(crate) fn mint(tenant: &TenantId) -> Self {
        let mut random = [0u8; TENANT_TOKEN_RANDOM_BYTES];
        random_bytes(&mut random);
        let ulid = &tenant.as_str()[TenantId::PREFIX.len()..];
        let plaintext = format!("{TENANT_TOKEN_PREFIX}{ulid}_{}", hex(&random));
        let hash = sha256(plaintext.as_bytes());
        Self { plaintext, hash }
    }

    /// The token itself, to hand to the tenant's sidecar once.
    pub(crate) fn plaintext(&self) -> &str {
        &self.plaintext
    }

    /// The SHA-256 that is stored and compared.
    pub(crate) fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// The tenant a token claims to belong to, if it has a tenant token's shape. The claim is
    /// proven only by comparing the token's hash with the one stored for that tenant.
    pub(crate) fn tenant_of(token: &str) -> Option<TenantId> {
        let (ulid, secret) = token.strip_prefix(TENANT_TOKEN_PREFIX)?.split_once('_')?;
        let hex_digits = secret
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if secret.len() != 2 * TENANT_TOKEN_RANDOM_BYTES || !hex_digits {
            return None;
        }
        TenantId::parse(&format!("{}{ulid}", TenantId::PREFIX))
    }
}

impl std::fmt::Debug for TenantToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TenantToken(<redacted>)")
    }
}

/// Makes request ids: a random per-process prefix and a counter, unique without a lock.
pub(crate) struct RequestIds {
    prefix: u64,
    counter: AtomicU64,
}

impl RequestIds {
    /// A generator with a fresh random prefix.
    pub(crate) fn new() -> Self {
        let mut seed = [0u8; 8];
        random_bytes(&mut seed);
        Self {
            prefix: u64::from_be_bytes(seed),
            counter: AtomicU64::new(0),
        }
    }

    /// The next id: `req_` and 24 hex digits.
    pub(crate) fn next_id(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("req_{:016x}{n:08x}", self.prefix)
    }
}

impl Default for RequestIds {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_pool_gives_each_byte_once_and_refills() {
        let mut pool = RandomPool::default();
        let mut seen = Vec::new();
        for _ in 0..(RANDOM_POOL_BYTES / 10) * 3 + 7 {
            let mut part = [0u8; 10];
            pool.fill(&mut part);
            seen.push(part);
        }
        let distinct: std::collections::HashSet<_> = seen.iter().collect();
        assert_eq!(distinct.len(), seen.len(), "no random part is given twice");
        let mut big = vec![0u8; RANDOM_POOL_BYTES + 1];
        pool.fill(&mut big);
        assert!(
            big.iter().any(|&b| b != 0),
            "a request above the pool's size is filled"
        );
    }

    #[test]
    fn ids_are_monotonic_within_a_millisecond_and_when_the_clock_steps_back() {
        let mut generator = IdGenerator::default();
        let mut previous = TenantId::from_ulid(generator.next(1_000));
        for now in [1_000, 1_000, 999, 0, 1_000, 1_001, 1_001] {
            let id = TenantId::from_ulid(generator.next(now));
            assert!(id > previous, "{id} must sort after {previous}");
            previous = id;
        }
    }

    #[test]
    fn ids_continue_after_the_latest_stored_one() {
        let mut first = IdGenerator::default();
        let stored = TenantId::from_ulid(first.next(5_000));
        let mut resumed = IdGenerator::after(Some(stored.ulid()));
        assert!(TenantId::from_ulid(resumed.next(4_000)) > stored);
    }

    #[test]
    fn ids_carry_the_time_in_their_first_48_bits() {
        let id = TenantId::from_ulid(IdGenerator::default().next(1_469_918_176_385));
        assert!(id.as_str().starts_with("ten_01ARYZ6S41"), "{id}");
    }

    #[test]
    fn tokens_are_random_hashed_and_name_their_tenant() {
        let id = TenantId::from_ulid(IdGenerator::default().next(1));
        let a = TenantToken::mint(&id);
        let b = TenantToken::mint(&id);
        assert_ne!(a.plaintext(), b.plaintext());
        assert!(a.plaintext().starts_with(TENANT_TOKEN_PREFIX));
        assert_eq!(
            a.plaintext().len(),
            TENANT_TOKEN_PREFIX.len() + 26 + 1 + 2 * TENANT_TOKEN_RANDOM_BYTES
        );
        assert_eq!(a.hash(), &sha256(a.plaintext().as_bytes()));
        assert!(!format!("{a:?}").contains(a.plaintext()));
        assert_eq!(TenantToken::tenant_of(a.plaintext()), Some(id));
    }

    #[test]
    fn malformed_tenant_tokens_name_no_tenant() {
        let id = TenantId::from_ulid(IdGenerator::default().next(1));
        let good = TenantToken::mint(&id).plaintext().to_owned();
        let ulid = &id.as_str()[TenantId::PREFIX.len()..];
        for bad in [
            String::new(),
            "tkn_".into(),
            format!("tkn_{ulid}"),
            format!("tkn_{ulid}_"),
            format!("tkn_{ulid}_{}", "A".repeat(64)),
            format!("tkn_{ulid}_{}", "a".repeat(63)),
            format!("tkn_{}_{}", ulid.to_lowercase(), "a".repeat(64)),
            good.replacen("tkn_", "tok_", 1),
            format!("{good}0"),
        ] {
            assert_eq!(TenantToken::tenant_of(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn request_ids_are_unique() {
        let ids = RequestIds::new();
        assert_ne!(ids.next_id(), ids.next_id());
    }
}
