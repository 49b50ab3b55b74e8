//! Identifiers and secrets: monotonic ULIDs, tenant tokens, request ids, SHA-256 and hex.
//!
//! Every random bit comes straight from the OS CSPRNG (`getrandom`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::domain::{TENANT_ID_PREFIX, TenantId};

/// Crockford's base32 alphabet, as ULIDs use it (no I, L, O, U).
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A ULID's length in characters.
const ULID_CHARS: usize = 26;

/// The 80 random bits of a ULID.
const ULID_RANDOM_MASK: u128 = (1 << 80) - 1;

/// The prefix of every tenant token, so a leaked one is recognisable (and greppable).
///
/// A tenant token is `tkn_<ULID of its tenant>_<64 hex>`: the first part says which tenant's
/// stored hash to compare with (a primary-key lookup, no index on secrets), the second is
/// 256 random bits. Only the SHA-256 of the whole token is stored.
pub const TENANT_TOKEN_PREFIX: &str = "tkn_";

/// Random bytes in a tenant token: 256 bits, twice the contract's minimum.
const TENANT_TOKEN_RANDOM_BYTES: usize = 32;

/// Fills `buf` from the OS CSPRNG.
///
/// # Panics
/// If the OS has no random source: the service cannot mint a safe id or token without one,
/// and this never happens on a Linux kernel since 3.17.
pub fn random_bytes(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the OS random source is available");
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Milliseconds since the Unix epoch by the system clock.
pub fn now_unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn ulid_encode(value: u128) -> String {
    let mut out = String::with_capacity(ULID_CHARS);
    for i in (0..ULID_CHARS).rev() {
        let digit = (value >> (5 * i)) & 0x1f;
        out.push(CROCKFORD[digit as usize] as char);
    }
    out
}

/// Decodes a canonical ULID (26 upper-case Crockford characters, at most `7ZZ…Z`).
pub fn ulid_decode(text: &str) -> Option<u128> {
    if text.len() != ULID_CHARS {
        return None;
    }
    let mut value: u128 = 0;
    for (i, c) in text.bytes().enumerate() {
        let digit = CROCKFORD.iter().position(|&d| d == c)? as u128;
        // The first character carries only the top 3 of 130 bits.
        if i == 0 && digit > 7 {
            return None;
        }
        value = (value << 5) | digit;
    }
    Some(value)
}

/// Makes tenant ids that never sort before an earlier one, even within a millisecond or when
/// the clock steps back: then the time part stays and the random part grows by a random
/// step of 1 to 2^32, so a neighbour's id is not one increment away from one's own.
#[derive(Debug, Default)]
pub struct IdGenerator {
    last: u128,
}

impl IdGenerator {
    /// Continues after `latest`, the greatest id already stored, so ids stay monotonic across
    /// restarts as well.
    pub fn after(latest: Option<&TenantId>) -> Self {
        let last = latest
            .and_then(|id| id.as_str().strip_prefix(TENANT_ID_PREFIX))
            .and_then(ulid_decode)
            .unwrap_or(0);
        Self { last }
    }

    pub fn next_id(&mut self, now_ms: u64) -> TenantId {
        let last_ms = (self.last >> 80) as u64;
        let mut random = [0u8; 16];
        random_bytes(&mut random[6..]);
        let fresh = u128::from_be_bytes(random) & ULID_RANDOM_MASK;
        let step = u128::from(u32::from_be_bytes([
            random[6], random[7], random[8], random[9],
        ])) + 1;
        let now_ms = u128::from(now_ms.min((1 << 48) - 1));
        self.last = if now_ms > u128::from(last_ms) {
            (now_ms << 80) | fresh
        } else if (self.last & ULID_RANDOM_MASK) + step <= ULID_RANDOM_MASK {
            self.last + step
        } else {
            // The random part is used up within this millisecond: borrow the next one. At the
            // very top of the 48-bit time range there is none; refuse rather than wrap to an
            // id that sorts first (a panic in the store is a 500, and the thread lives on).
            let next_ms = u128::from(last_ms) + 1;
            assert!(next_ms < 1 << 48, "the ULID space is exhausted");
            (next_ms << 80) | fresh
        };
        TenantId::from_generated(format!("{TENANT_ID_PREFIX}{}", ulid_encode(self.last)))
    }
}

/// A newly minted tenant token; the plaintext lives only as long as this value.
pub struct TenantToken {
    pub plaintext: String,
    pub hash: [u8; 32],
}

impl TenantToken {
    pub fn mint(tenant: &TenantId) -> Self {
        let mut random = [0u8; TENANT_TOKEN_RANDOM_BYTES];
        random_bytes(&mut random);
        let ulid = &tenant.as_str()[TENANT_ID_PREFIX.len()..];
        let plaintext = format!("{TENANT_TOKEN_PREFIX}{ulid}_{}", hex(&random));
        let hash = sha256(plaintext.as_bytes());
        Self { plaintext, hash }
    }

    /// The tenant a token claims to belong to, if it has a tenant token's shape. The claim is
    /// proven only by comparing the token's hash with the one stored for that tenant.
    pub fn tenant_of(token: &str) -> Option<TenantId> {
        let (ulid, secret) = token.strip_prefix(TENANT_TOKEN_PREFIX)?.split_once('_')?;
        let hex_digits = secret
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if secret.len() != 2 * TENANT_TOKEN_RANDOM_BYTES || !hex_digits {
            return None;
        }
        TenantId::parse(&format!("{TENANT_ID_PREFIX}{ulid}"))
    }
}

impl std::fmt::Debug for TenantToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TenantToken(<redacted>)")
    }
}

/// Makes request ids: a random per-process prefix and a counter, unique without a lock.
pub struct RequestIds {
    prefix: u64,
    counter: AtomicU64,
}

impl RequestIds {
    pub fn new() -> Self {
        let mut seed = [0u8; 8];
        random_bytes(&mut seed);
        Self {
            prefix: u64::from_be_bytes(seed),
            counter: AtomicU64::new(0),
        }
    }

    pub fn next_id(&self) -> String {
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
    fn ulids_round_trip() {
        for value in [0, 1, u128::MAX, 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef] {
            let text = ulid_encode(value);
            assert_eq!(text.len(), 26);
            assert_eq!(ulid_decode(&text), Some(value), "{text}");
        }
        assert_eq!(ulid_encode(u128::MAX), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(ulid_decode("8ZZZZZZZZZZZZZZZZZZZZZZZZZ"), None);
    }

    #[test]
    fn ids_are_monotonic_within_a_millisecond_and_when_the_clock_steps_back() {
        let mut generator = IdGenerator::default();
        let mut previous = generator.next_id(1_000);
        for now in [1_000, 1_000, 999, 0, 1_000, 1_001, 1_001] {
            let id = generator.next_id(now);
            assert!(id > previous, "{id} must sort after {previous}");
            previous = id;
        }
    }

    #[test]
    fn ids_continue_after_the_latest_stored_one() {
        let mut first = IdGenerator::default();
        let stored = first.next_id(5_000);
        let mut resumed = IdGenerator::after(Some(&stored));
        assert!(resumed.next_id(4_000) > stored);
    }

    #[test]
    fn ids_carry_the_time_in_their_first_48_bits() {
        let id = IdGenerator::default().next_id(1_469_918_176_385);
        assert!(id.as_str().starts_with("ten_01ARYZ6S41"), "{id}");
    }

    #[test]
    fn tokens_are_random_hashed_and_name_their_tenant() {
        let id = IdGenerator::default().next_id(1);
        let a = TenantToken::mint(&id);
        let b = TenantToken::mint(&id);
        assert_ne!(a.plaintext, b.plaintext);
        assert!(a.plaintext.starts_with(TENANT_TOKEN_PREFIX));
        assert_eq!(a.plaintext.len(), TENANT_TOKEN_PREFIX.len() + 26 + 1 + 64);
        assert_eq!(a.hash, sha256(a.plaintext.as_bytes()));
        assert!(!format!("{a:?}").contains(&a.plaintext));
        assert_eq!(TenantToken::tenant_of(&a.plaintext), Some(id));
    }

    #[test]
    fn malformed_tenant_tokens_name_no_tenant() {
        let id = IdGenerator::default().next_id(1);
        let good = TenantToken::mint(&id).plaintext;
        let ulid = &id.as_str()[4..];
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
    fn hex_and_sha256_match_known_values() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn request_ids_are_unique() {
        let ids = RequestIds::new();
        assert_ne!(ids.next_id(), ids.next_id());
    }
}
