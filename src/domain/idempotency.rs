//! What an `Idempotency-Key` binds: the key itself and the fingerprint of a request's body.

use crate::crypto::sha256;

use super::is_visible_ascii;

/// The most bytes an `Idempotency-Key` may have.
pub(crate) const IDEMPOTENCY_KEY_BYTES_MAX: usize = 255;

/// An `Idempotency-Key`: 1 to [`IDEMPOTENCY_KEY_BYTES_MAX`] visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parses the header's raw bytes; the error is the sentence a `400 invalid_header` says.
    pub(crate) fn parse(raw: &[u8]) -> Result<Self, &'static str> {
        if raw.is_empty() || raw.len() > IDEMPOTENCY_KEY_BYTES_MAX {
            return Err("Idempotency-Key must be 1 to 255 characters long");
        }
        if !raw.iter().copied().all(is_visible_ascii) {
            return Err("Idempotency-Key must hold only visible ASCII characters");
        }
        let key = std::str::from_utf8(raw).expect("visible ASCII is UTF-8");
        Ok(Self(key.to_owned()))
    }

    /// The key as sent.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// What makes two requests "the same body" for idempotency: the SHA-256 of the parsed values
/// in a fixed form, so white space and member order do not matter. Each request type says
/// what its form is; the method and the path are bound beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyFingerprint([u8; 32]);

impl BodyFingerprint {
    /// The fingerprint of a body's canonical form.
    pub(crate) fn of(canonical: &[u8]) -> Self {
        Self(sha256(canonical))
    }

    /// The 32 bytes, to store.
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_visible_ascii_up_to_the_bound() {
        assert!(IdempotencyKey::parse(b"k").is_ok());
        assert!(IdempotencyKey::parse(&[b'a'; IDEMPOTENCY_KEY_BYTES_MAX]).is_ok());
        assert!(IdempotencyKey::parse(&[b'a'; IDEMPOTENCY_KEY_BYTES_MAX + 1]).is_err());
        assert!(IdempotencyKey::parse(b"").is_err());
        assert!(IdempotencyKey::parse(b"has space").is_err());
        assert!(IdempotencyKey::parse(b"tab\t").is_err());
        assert!(IdempotencyKey::parse("é".as_bytes()).is_err());
    }

    #[test]
    fn fingerprints_are_the_sha256_of_the_canonical_form() {
        assert_eq!(BodyFingerprint::of(b"a"), BodyFingerprint::of(b"a"));
        assert_ne!(BodyFingerprint::of(b"a"), BodyFingerprint::of(b"b"));
        assert_eq!(BodyFingerprint::of(b"abc").as_bytes(), &sha256(b"abc"));
    }
}
