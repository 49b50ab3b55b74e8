//! Randomness: tokens and names from the OS, and a seeded generator for test timing.

use std::io::Read;

use super::shapes::{CROCKFORD, ULID_CHARS, hex};

/// Bytes from the OS random source, for tokens and unique names.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom is readable");
    buf
}

/// `n` random bytes in lowercase hex (2n characters).
pub fn random_hex(n: usize) -> String {
    hex(&random_bytes(n))
}

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", random_hex(6))
}

/// A fresh 64-character admin token.
pub fn random_admin_token() -> String {
    random_hex(32)
}

/// A ULID of random bits that fits 128 bits (its first character is at most `7`), in the
/// contract's upper-case Crockford base32: the shape of an id no tenant need have.
pub fn random_ulid() -> String {
    let alphabet = CROCKFORD.as_bytes();
    random_bytes(ULID_CHARS)
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let choices = if i == 0 { 8 } else { alphabet.len() };
            char::from(alphabet[usize::from(*b) % choices])
        })
        .collect()
}

/// A tiny deterministic generator (xorshift64*), seeded by the caller, for test timing.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (a zero seed, which xorshift cannot leave, becomes 1).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// The number in environment variable `name` (a crash loop's cycles or seed), or `default`
/// where it is unset or not a number.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
