//! Domain types, parsed once at the edge and trusted everywhere after.
//!
//! Each newtype has a private field and is built only by its `parse`, so a handler or the
//! store never sees a name, an amount or a key that broke a rule of the contract. A parse
//! error is a short phrase that completes the sentence "<field> ...", ready to be reported
//! in a problem body's `errors` list.

use std::fmt;

/// The most characters (Unicode scalar values) a tenant name may have.
pub const NAME_CHARS_MAX: usize = 200;

/// The most bytes an `Idempotency-Key` may have.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 255;

/// The most bytes a client-chosen `X-Request-Id` may have before it is replaced.
pub const REQUEST_ID_BYTES_MAX: usize = 128;

/// A tenant's name: 1 to 200 characters, no control characters, no white space at either
/// end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantName(String);

impl TenantName {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        let chars = raw.chars().count();
        if chars == 0 {
            return Err("must not be empty");
        }
        if chars > NAME_CHARS_MAX {
            return Err("must be at most 200 characters long");
        }
        // `char::is_control` is exactly Unicode's `Cc` category, C1 controls included.
        if raw.chars().any(char::is_control) {
            return Err("must not contain control characters");
        }
        if raw.starts_with(char::is_whitespace) || raw.ends_with(char::is_whitespace) {
            return Err("must not begin or end with white space");
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An amount in atomic units: an unsigned 128-bit integer, written as decimal digits.
///
/// It never passes through a float or a signed type, so every value up to `u128::MAX`
/// survives a round trip exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Atomic(u128);

impl Atomic {
    /// Parses `^(0|[1-9][0-9]*)$` up to `u128::MAX`; a sign, a point, an exponent, white space
    /// and leading zeros are all refused.
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        if raw.is_empty() {
            return Err("must not be empty");
        }
        if !raw.bytes().all(|b| b.is_ascii_digit()) {
            return Err("must hold only the decimal digits 0 to 9");
        }
        if raw.len() > 1 && raw.starts_with('0') {
            return Err("must not have leading zeros");
        }
        raw.parse::<u128>()
            .map(Self)
            .map_err(|_| "must be at most 340282366920938463463374607431768211455")
    }

    pub fn get(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Atomic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A tenant id: `ten_` and a ULID in canonical (upper-case Crockford base32) form.
///
/// Only the canonical form is accepted, so one tenant has exactly one spelling and a lookup
/// is a byte-wise match.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(String);

/// The prefix of every tenant id.
pub const TENANT_ID_PREFIX: &str = "ten_";

impl TenantId {
    pub fn parse(raw: &str) -> Option<Self> {
        let ulid = raw.strip_prefix(TENANT_ID_PREFIX)?;
        crate::ids::ulid_decode(ulid)?;
        Some(Self(raw.to_owned()))
    }

    /// Wraps an id this process generated; only `ids` builds new ones.
    pub(crate) fn from_generated(id: String) -> Self {
        debug_assert!(
            Self::parse(&id).is_some(),
            "generated id {id} is not canonical"
        );
        Self(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// True for the bytes RFC 9110 calls visible ASCII (`VCHAR`): `!` to `~`.
pub fn is_visible_ascii(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

/// An `Idempotency-Key`: 1 to 255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: &[u8]) -> Result<Self, &'static str> {
        if raw.is_empty() || raw.len() > IDEMPOTENCY_KEY_BYTES_MAX {
            return Err("Idempotency-Key must be 1 to 255 characters long");
        }
        if !raw.iter().copied().all(is_visible_ascii) {
            return Err("Idempotency-Key must hold only visible ASCII characters");
        }
        // All bytes are ASCII, so this cannot fail.
        let key = std::str::from_utf8(raw).expect("visible ASCII is UTF-8");
        Ok(Self(key.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Returns the client's `X-Request-Id` when it is 1 to 128 visible ASCII characters.
pub fn valid_request_id(raw: &[u8]) -> Option<&str> {
    if raw.is_empty() || raw.len() > REQUEST_ID_BYTES_MAX {
        return None;
    }
    if !raw.iter().copied().all(is_visible_ascii) {
        return None;
    }
    std::str::from_utf8(raw).ok()
}

/// A validated create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTenant {
    pub name: TenantName,
    pub opening_deposit: Atomic,
}

impl NewTenant {
    /// What makes two create requests "the same body" for idempotency: the parsed values,
    /// so white space and member order do not matter. Names hold no control characters, so
    /// the newline cannot be forged from inside a name.
    pub fn fingerprint(&self) -> [u8; 32] {
        crate::ids::sha256(format!("{}\n{}", self.name.as_str(), self.opening_deposit).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_every_rule() {
        let cases: &[(&str, Result<(), &str>)] = &[
            ("acme-prod", Ok(())),
            ("a", Ok(())),
            ("Ünïcödé 名前", Ok(())),
            ("inner  space", Ok(())),
            ("", Err("must not be empty")),
            (" lead", Err("must not begin or end with white space")),
            ("trail ", Err("must not begin or end with white space")),
            (
                "trail\u{3000}",
                Err("must not begin or end with white space"),
            ),
            ("\u{a0}nbsp", Err("must not begin or end with white space")),
            ("nul\0inside", Err("must not contain control characters")),
            ("line\nbreak", Err("must not contain control characters")),
            (
                "c1\u{85}control",
                Err("must not contain control characters"),
            ),
            ("del\u{7f}", Err("must not contain control characters")),
        ];
        for (raw, want) in cases {
            let got = TenantName::parse(raw).map(|_| ());
            assert_eq!(&got, want, "name {raw:?}");
        }
    }

    #[test]
    fn name_length_counts_characters_not_bytes() {
        assert!(TenantName::parse(&"é".repeat(200)).is_ok());
        assert!(TenantName::parse(&"é".repeat(201)).is_err());
        assert!(TenantName::parse(&"x".repeat(200)).is_ok());
        assert!(TenantName::parse(&"x".repeat(201)).is_err());
    }

    #[test]
    fn amounts_parse_exactly_or_not_at_all() {
        let max = "340282366920938463463374607431768211455";
        assert_eq!(Atomic::parse("0").map(Atomic::get), Ok(0));
        assert_eq!(Atomic::parse("1000").map(Atomic::get), Ok(1000));
        assert_eq!(Atomic::parse(max).map(Atomic::get), Ok(u128::MAX));
        assert_eq!(Atomic::parse(max).expect("max").to_string(), max);
        let refused = [
            "",
            "00",
            "01",
            "+1",
            "-1",
            "1.0",
            "1e3",
            " 1",
            "1 ",
            "0x10",
            "١",
            "340282366920938463463374607431768211456",
            "99999999999999999999999999999999999999999",
        ];
        for raw in refused {
            assert!(
                Atomic::parse(raw).is_err(),
                "amount {raw:?} must be refused"
            );
        }
    }

    #[test]
    fn tenant_ids_accept_only_the_canonical_form() {
        assert!(TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").is_some());
        for raw in [
            "",
            "ten_",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "ten_01arz3ndektsv4rrffq69g5fav",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FA",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAVX",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAU",
            "ten_81ARZ3NDEKTSV4RRFFQ69G5FAV",
            "ten_../../etc/passwd",
        ] {
            assert!(TenantId::parse(raw).is_none(), "id {raw:?} must be refused");
        }
    }

    #[test]
    fn idempotency_keys_are_visible_ascii_up_to_255() {
        assert!(IdempotencyKey::parse(b"k").is_ok());
        assert!(IdempotencyKey::parse(&[b'a'; 255]).is_ok());
        assert!(IdempotencyKey::parse(&[b'a'; 256]).is_err());
        assert!(IdempotencyKey::parse(b"").is_err());
        assert!(IdempotencyKey::parse(b"has space").is_err());
        assert!(IdempotencyKey::parse(b"tab\t").is_err());
        assert!(IdempotencyKey::parse("é".as_bytes()).is_err());
    }

    #[test]
    fn request_ids_are_kept_only_when_valid() {
        assert_eq!(valid_request_id(b"abc-123"), Some("abc-123"));
        assert_eq!(valid_request_id(&[b'r'; 129]), None);
        assert_eq!(valid_request_id(b""), None);
        assert_eq!(valid_request_id(b"a b"), None);
    }

    #[test]
    fn fingerprints_depend_on_parsed_values_only() {
        let a = NewTenant {
            name: TenantName::parse("x").expect("name"),
            opening_deposit: Atomic::parse("10").expect("amount"),
        };
        let b = NewTenant {
            opening_deposit: Atomic::parse("11").expect("amount"),
            ..a.clone()
        };
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
