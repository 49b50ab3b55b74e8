//! The shapes and bounds the contract fixes: ids, timestamps, environment names, and the
//! encodings the tests compare them with.

use std::time::{SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Every event type, in the contract's order (the order `event_types` is shown in): the
/// server's one list, which a unit test holds equal to the OpenAPI document's.
pub use tenantd::EVENT_TYPES;

/// The contract's body limit, in bytes.
pub const BODY_BYTES_MAX: usize = 65_536;

/// The longest tenant name the contract accepts, in Unicode scalar values.
pub const NAME_CHARS_MAX: usize = 200;

/// The longest `Idempotency-Key` the contract accepts, in (visible ASCII) bytes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 255;

/// The longest client `X-Request-Id` the service echoes, in (visible ASCII) bytes.
pub const REQUEST_ID_BYTES_MAX: usize = 128;

/// `u128::MAX` in decimal, the largest amount the contract accepts.
pub const U128_MAX: &str = "340282366920938463463374607431768211455";

/// Crockford's base32 alphabet, as used by ULIDs.
pub const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters of a ULID.
pub const ULID_CHARS: usize = 26;

/// The length of a contract timestamp: `2026-11-22T10:00:00.123Z`.
const TIMESTAMP_BYTES: usize = 24;

/// Lowercase hex of some bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of some bytes.
pub fn sha256(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).iter().copied().collect()
}

/// Lowercase hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256(bytes))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as i64
}

/// `ten_` followed by 26 upper-case Crockford characters that fit 128 bits.
pub fn is_tenant_id(s: &str) -> bool {
    let Some(ulid) = s.strip_prefix("ten_") else {
        return false;
    };
    ulid.len() == ULID_CHARS
        && ulid.chars().all(|c| CROCKFORD.contains(c))
        && ulid.as_bytes()[0] <= b'7'
}

/// The 48-bit millisecond time at the front of a tenant id's ULID.
pub fn ulid_ms(id: &str) -> i64 {
    let ulid = id.strip_prefix("ten_").expect("a tenant id");
    let mut value: i64 = 0;
    for c in ulid[..10].chars() {
        let digit = CROCKFORD.find(c).expect("a Crockford character") as i64;
        value = value * 32 + digit;
    }
    value
}

/// The instant of a contract timestamp: exactly RFC 3339 in UTC with millisecond precision
/// and a `Z` suffix (`2026-11-22T10:00:00.123Z`), and a real date and time of day. The shape
/// is checked byte by byte, since RFC 3339 parsers also take other offsets, precisions and
/// separators; the calendar is the crate's.
fn contract_timestamp(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() != TIMESTAMP_BYTES {
        return None;
    }
    let digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22];
    let shaped = digits.iter().all(|&i| b[i].is_ascii_digit())
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z';
    if !shaped {
        return None;
    }
    s.parse().ok()
}

/// RFC 3339, UTC, millisecond precision, `Z` suffix: `2026-11-22T10:00:00.123Z`.
pub fn is_timestamp(s: &str) -> bool {
    contract_timestamp(s).is_some()
}

/// Milliseconds since the epoch of a contract timestamp; anything else fails the test.
pub fn timestamp_ms(s: &str) -> i64 {
    contract_timestamp(s)
        .unwrap_or_else(|| panic!("{s:?} is not a contract timestamp"))
        .as_millisecond()
}

/// An environment variable name as the contract allows: `^[A-Z][A-Z0-9_]*$`.
pub fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('A'..='Z'))
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The smallest id of the same kind that sorts after `id` (its ULID plus one): an id that
/// names nothing, lying between `id` and the next one made after it.
pub fn id_after(id: &str) -> String {
    let (prefix, ulid) = id.split_at(id.len() - ULID_CHARS);
    let mut chars: Vec<char> = ulid.chars().collect();
    for c in chars.iter_mut().rev() {
        let pos = CROCKFORD.find(*c).expect("a Crockford character");
        if pos + 1 < CROCKFORD.len() {
            *c = char::from(CROCKFORD.as_bytes()[pos + 1]);
            return format!("{prefix}{}", chars.iter().collect::<String>());
        }
        *c = '0';
    }
    panic!("{id} is the largest id");
}

/// Asserts the members of `v` named in `expected` have those values.
pub fn assert_fields(v: &Value, expected: &[(&str, Value)], ctx: &str) {
    for (member, value) in expected {
        assert_eq!(&v[*member], value, "{ctx}: {member} in {v}");
    }
}
