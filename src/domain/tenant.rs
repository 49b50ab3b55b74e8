//! Tenants: their ids, names, states and what a create asks for.

use std::fmt;

use serde::{Serialize, Serializer};
use ulid::Ulid;

use super::{Atomic, BodyFingerprint};

/// The most characters (Unicode scalar values) a tenant name may have.
pub(crate) const NAME_CHARS_MAX: usize = 200;

/// The prefix of every tenant id.
pub(crate) const TENANT_ID_PREFIX: &str = "ten_";

/// A tenant id: `ten_` and a ULID in canonical (upper-case Crockford base32) form.
///
/// Only the canonical form is accepted, so one tenant has exactly one spelling and a lookup
/// is a byte-wise match.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TenantId(String);

impl TenantId {
    /// Accepts `ten_` and a canonical ULID, nothing else (no lower case, no `I`/`L`/`O`
    /// stand-ins, nothing past `7ZZ…Z`).
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        let text = raw.strip_prefix(TENANT_ID_PREFIX)?;
        let ulid = Ulid::from_string(text).ok()?;
        // Canonical: the decoder also takes lower case and look-alike letters, so the text
        // must be what the encoder writes (on the stack: no allocation per request).
        let mut canonical = [0u8; ulid::ULID_LEN];
        (ulid.array_to_str(&mut canonical) == text).then(|| Self(raw.to_owned()))
    }

    /// The id of a ULID this process made.
    pub(crate) fn from_ulid(ulid: Ulid) -> Self {
        Self(format!("{TENANT_ID_PREFIX}{ulid}"))
    }

    /// The ULID inside the id.
    pub(crate) fn ulid(&self) -> Ulid {
        Ulid::from_string(&self.0[TENANT_ID_PREFIX.len()..]).expect("a parsed id holds a ULID")
    }

    /// The id as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for TenantId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A tenant's name: 1 to [`NAME_CHARS_MAX`] characters, no control characters, no white space
/// at either end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TenantName(String);

impl TenantName {
    /// Checks every rule of the contract; the error names the first one broken.
    pub(crate) fn parse(raw: &str) -> Result<Self, &'static str> {
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

    /// The name as given.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for TenantName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A tenant's lifecycle: active, or tombstoned at a time that never changes again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TenantState {
    /// Its token works and its name is taken.
    Active,
    /// Final: its token is revoked and its name is free; `at` is when (RFC 3339, UTC, ms).
    Tombstoned { at: String },
}

impl TenantState {
    /// The state's name, as the API and the database write it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Tombstoned { .. } => "tombstoned",
        }
    }

    /// When the tenant was tombstoned, if it was.
    pub(crate) fn tombstoned_at(&self) -> Option<&str> {
        match self {
            Self::Active => None,
            Self::Tombstoned { at } => Some(at),
        }
    }
}

/// The one budget a tenant has had since revision 1: its opening deposit and its balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TenantBudget {
    /// What the tenant was created with.
    pub(crate) opening_deposit: Atomic,
    /// What is left.
    pub(crate) balance: Atomic,
}

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tenant {
    /// Its id, also the sort order of creation.
    pub(crate) id: TenantId,
    /// Unique among active tenants.
    pub(crate) name: TenantName,
    /// When it was created (RFC 3339, UTC, ms).
    pub(crate) created_at: String,
    /// Active or tombstoned.
    pub(crate) state: TenantState,
    /// Its budget.
    pub(crate) budget: TenantBudget,
}

/// A validated create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewTenant {
    /// The name asked for.
    pub(crate) name: TenantName,
    /// The opening deposit asked for.
    pub(crate) opening_deposit: Atomic,
}

impl NewTenant {
    /// What makes two create requests "the same body": the parsed values, so white space and
    /// member order do not matter. Names hold no control characters, so the newline cannot be
    /// forged from inside a name. (Records bound before revision 2 hold this same form.)
    pub(crate) fn fingerprint(&self) -> BodyFingerprint {
        BodyFingerprint::of(format!("{}\n{}", self.name.as_str(), self.opening_deposit).as_bytes())
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
        assert!(TenantName::parse(&"é".repeat(NAME_CHARS_MAX)).is_ok());
        assert!(TenantName::parse(&"é".repeat(NAME_CHARS_MAX + 1)).is_err());
        assert!(TenantName::parse(&"x".repeat(NAME_CHARS_MAX)).is_ok());
        assert!(TenantName::parse(&"x".repeat(NAME_CHARS_MAX + 1)).is_err());
    }

    #[test]
    fn tenant_ids_accept_only_the_canonical_form() {
        let good = TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("canonical");
        assert_eq!(TenantId::from_ulid(good.ulid()), good);
        for raw in [
            "",
            "ten_",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "ten_01arz3ndektsv4rrffq69g5fav",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FA",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAVX",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAU",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAI",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAL",
            "ten_01ARZ3NDEKTSV4RRFFQ69G5FAO",
            "ten_81ARZ3NDEKTSV4RRFFQ69G5FAV",
            "ten_../../etc/passwd",
        ] {
            assert!(TenantId::parse(raw).is_none(), "id {raw:?} must be refused");
        }
    }

    #[test]
    fn a_tombstone_carries_its_time() {
        let state = TenantState::Tombstoned {
            at: "2026-11-22T10:00:00.123Z".into(),
        };
        assert_eq!(state.name(), "tombstoned");
        assert_eq!(state.tombstoned_at(), Some("2026-11-22T10:00:00.123Z"));
        assert_eq!(TenantState::Active.tombstoned_at(), None);
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
        assert_eq!(a.fingerprint(), BodyFingerprint::of(b"x\n10"));
    }
}
