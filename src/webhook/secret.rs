//! An endpoint's signing secret and the `webhook-signature` header made with it.
//!
//! A secret is 32 random bytes. Its text, `whsec_` and the standard base64 (with padding) of
//! the bytes, is what Standard Webhooks libraries take to verify a delivery; the service shows
//! it once, when an endpoint is created and when its secret is rotated, and nowhere else: the
//! type has no `Display` and no `Serialize`, and its `Debug` prints no byte of it.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

/// The length of a secret: 256 bits, as much as HMAC-SHA256 can use (the specification asks
/// for at least 24 bytes).
pub(crate) const SECRET_BYTES: usize = 32;

/// What a secret's text starts with, so that people and libraries recognise it.
pub(crate) const SECRET_PREFIX: &str = "whsec_";

/// The version identifier of a symmetric (HMAC-SHA256) signature.
const SIGNATURE_VERSION: &str = "v1";

/// An endpoint's signing secret.
#[derive(Clone)]
pub(crate) struct Secret([u8; SECRET_BYTES]);

impl Secret {
    /// A new secret from the OS random source.
    pub(crate) fn generate() -> Self {
        let mut bytes = [0u8; SECRET_BYTES];
        crate::crypto::random_bytes(&mut bytes);
        Self(bytes)
    }

    /// The secret whose bytes are `bytes`, as the store keeps them; `None` unless there are
    /// exactly [`SECRET_BYTES`].
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The secret's text as [`reveal`](Self::reveal) writes it; `None` for anything else
    /// (another prefix, base64 without its padding, a key of another length). The tests read
    /// back what they were shown with it.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let encoded = text.strip_prefix(SECRET_PREFIX)?;
        Self::from_bytes(&STANDARD.decode(encoded).ok()?)
    }

    /// The raw bytes, to store.
    pub(crate) fn as_bytes(&self) -> &[u8; SECRET_BYTES] {
        &self.0
    }

    /// The secret's text: `whsec_` and the standard base64 (with padding) of its bytes. The
    /// one way to see it, for the answer to a create or a rotation, which shows it once.
    pub(crate) fn reveal(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(self.0))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The signature of one attempt: `v1,` and the base64 of HMAC-SHA256, keyed with `secret`,
/// over `msg_id "." timestamp "." body`.
pub(crate) fn signature(secret: &Secret, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    sign(secret.as_bytes(), msg_id, timestamp, body)
}

/// The `webhook-signature` header: the signature with the `current` secret, then, during the
/// grace period after a rotation, a space and the signature with the `previous` one, so a
/// receiver that still holds the old secret keeps verifying.
pub(crate) fn signature_header(
    current: &Secret,
    previous: Option<&Secret>,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    let mut header = signature(current, msg_id, timestamp, body);
    if let Some(previous) = previous {
        header.push(' ');
        header.push_str(&signature(previous, msg_id, timestamp, body));
    }
    header
}

/// [`signature`] with any key: the specification's test vectors use 24-byte keys.
fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    format!("{SIGNATURE_VERSION},{}", STANDARD.encode(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference vector of the Standard Webhooks libraries.
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TIMESTAMP: i64 = 1_614_265_330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_reference_vector_signs_as_published() {
        let key = STANDARD
            .decode(
                VECTOR_SECRET
                    .strip_prefix(SECRET_PREFIX)
                    .expect("the prefix"),
            )
            .expect("base64");
        assert_eq!(key.len(), 24, "the reference secret is 24 bytes");
        assert_eq!(
            sign(&key, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY),
            VECTOR_SIGNATURE
        );
        assert!(
            Secret::parse(VECTOR_SECRET).is_none(),
            "a secret here is 32 bytes, never 24"
        );
    }

    #[test]
    fn a_signature_depends_on_every_part() {
        let secret = Secret::from_bytes(&[7; SECRET_BYTES]).expect("32 bytes");
        let base = signature(&secret, "evt_1", 10, b"{}");
        assert!(base.starts_with("v1,"), "{base}");
        assert_eq!(base.len(), "v1,".len() + 44, "base64 of 32 bytes: {base}");
        for (other, part) in [
            (signature(&secret, "evt_2", 10, b"{}"), "the id"),
            (signature(&secret, "evt_1", 11, b"{}"), "the timestamp"),
            (signature(&secret, "evt_1", 10, b"{ }"), "the body"),
            (
                signature(
                    &Secret::from_bytes(&[8; 32]).expect("32"),
                    "evt_1",
                    10,
                    b"{}",
                ),
                "the secret",
            ),
        ] {
            assert_ne!(base, other, "{part} changes the signature");
        }
    }

    #[test]
    fn reveal_and_parse_round_trip() {
        let secret = Secret::generate();
        let text = secret.reveal();
        assert!(text.starts_with("whsec_"), "{text}");
        assert_eq!(text.len(), "whsec_".len() + 44, "padded base64: {text}");
        assert!(
            text.ends_with('='),
            "32 bytes end in one padding sign: {text}"
        );
        let parsed = Secret::parse(&text).expect("its own text parses");
        assert_eq!(parsed.as_bytes(), secret.as_bytes());
        let stored = Secret::from_bytes(secret.as_bytes()).expect("32 bytes");
        assert_eq!(stored.reveal(), text);
        assert_ne!(
            Secret::generate().as_bytes(),
            secret.as_bytes(),
            "two secrets differ"
        );
    }

    #[test]
    fn only_32_bytes_and_the_exact_text_make_a_secret() {
        assert!(Secret::from_bytes(&[1; 31]).is_none());
        assert!(Secret::from_bytes(&[1; 33]).is_none());
        assert!(Secret::from_bytes(&[]).is_none());
        let text = Secret::from_bytes(&[1; 32]).expect("32").reveal();
        let unpadded = text.trim_end_matches('=');
        for (bad, why) in [
            (&text["whsec_".len()..], "no prefix"),
            (unpadded, "no padding"),
            (&text.replacen("whsec_", "whsk_", 1), "another prefix"),
            ("whsec_", "nothing after the prefix"),
            ("whsec_!!!!", "not base64"),
        ] {
            assert!(Secret::parse(bad).is_none(), "{why}: {bad}");
        }
    }

    #[test]
    fn two_signatures_are_separated_by_one_space() {
        let current = Secret::from_bytes(&[1; 32]).expect("32");
        let previous = Secret::from_bytes(&[2; 32]).expect("32");
        let one = signature_header(&current, None, "evt_1", 5, b"{}");
        assert_eq!(one, signature(&current, "evt_1", 5, b"{}"));
        let two = signature_header(&current, Some(&previous), "evt_1", 5, b"{}");
        assert_eq!(
            two,
            format!(
                "{} {}",
                signature(&current, "evt_1", 5, b"{}"),
                signature(&previous, "evt_1", 5, b"{}")
            )
        );
        assert_eq!(two.matches(' ').count(), 1, "{two}");
    }

    #[test]
    fn debug_prints_no_byte_of_the_secret() {
        let secret = Secret::from_bytes(&[0xAB; 32]).expect("32");
        let shown = format!("{secret:?} {secret:#?}");
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        let text = secret.reveal();
        assert!(!shown.contains(&text[6..]), "{shown}");
        assert!(!shown.contains("171"), "no decimal bytes: {shown}");
        assert!(
            !shown.to_lowercase().contains("ab"),
            "no hex bytes: {shown}"
        );
    }
}
