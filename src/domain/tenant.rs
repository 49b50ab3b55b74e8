//! Tenants: their names, states and what a create asks for.

use super::budget::push_renewal;
use super::{Atomic, BodyFingerprint, Budget, Policy, TenantId, Thresholds, Timestamp};
use serde::{Serialize, Serializer};

/// The most characters (Unicode scalar values) a tenant name may have.
pub(crate) const NAME_CHARS_MAX: usize = 200;

/// A tenant's name: 1 to [`NAME_CHARS_MAX`] characters, no control characters, no white space
/// at either end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Name(String);

impl Name {
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

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A tenant's lifecycle: active, or tombstoned at a time that never changes again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TenantState {
    /// Its token works and its name is taken.
    Active,
    /// Final: its token is revoked, its name is free and its budgets are closed.
    Tombstoned { at: Timestamp },
}

impl TenantState {
    /// Every state's name, as the API and the database write it, in [`TenantState::slot`]
    /// order: the one list the filters, the counters and the metrics use.
    pub(crate) const NAMES: [&'static str; 2] = ["active", "tombstoned"];

    /// The state's place in [`TenantState::NAMES`].
    pub(crate) fn slot(&self) -> usize {
        match self {
            Self::Active => 0,
            Self::Tombstoned { .. } => 1,
        }
    }

    /// The state's name, as the API and the database write it.
    pub(crate) fn name(&self) -> &'static str {
        Self::NAMES[self.slot()]
    }

    /// When the tenant was tombstoned, if it was.
    pub(crate) fn tombstoned_at(&self) -> Option<Timestamp> {
        match self {
            Self::Active => None,
            Self::Tombstoned { at } => Some(*at),
        }
    }
}

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tenant {
    /// Its id, also the sort order of creation.
    pub(crate) id: TenantId,
    /// Unique among active tenants.
    pub(crate) name: Name,
    /// When it was created.
    pub(crate) created_at: Timestamp,
    /// Active or tombstoned.
    pub(crate) state: TenantState,
    /// Its default budget, made with it.
    pub(crate) budget: Budget,
}

/// A validated create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewTenant {
    /// The name asked for.
    pub(crate) name: Name,
    /// The opening deposit asked for.
    pub(crate) opening_deposit: Atomic,
    /// How its default budget renews, if it does.
    pub(crate) policy: Option<Policy>,
    /// Its default budget's alert thresholds.
    pub(crate) thresholds: Thresholds,
}

impl NewTenant {
    /// What makes two create requests "the same body": the parsed values, so white space and
    /// member order do not matter. Names hold no control characters, so the newline cannot be
    /// forged from inside a name. (Records bound before revision 2 hold this same form.)
    /// A period or thresholds, when given, are appended (`budget::push_renewal`).
    pub(crate) fn fingerprint(&self) -> BodyFingerprint {
        let mut text = format!("{}\n{}", self.name.as_str(), self.opening_deposit);
        push_renewal(&mut text, self.policy.as_ref(), &self.thresholds);
        BodyFingerprint::of(text.as_bytes())
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
            let got = Name::parse(raw).map(|_| ());
            assert_eq!(&got, want, "name {raw:?}");
        }
    }

    #[test]
    fn name_length_counts_characters_not_bytes() {
        assert!(Name::parse(&"é".repeat(NAME_CHARS_MAX)).is_ok());
        assert!(Name::parse(&"é".repeat(NAME_CHARS_MAX + 1)).is_err());
        assert!(Name::parse(&"x".repeat(NAME_CHARS_MAX)).is_ok());
        assert!(Name::parse(&"x".repeat(NAME_CHARS_MAX + 1)).is_err());
    }

    #[test]
    fn a_tombstone_carries_its_time() {
        let at = Timestamp::parse("2026-11-22T10:00:00.123Z").expect("time");
        let state = TenantState::Tombstoned { at };
        assert_eq!(state.name(), "tombstoned");
        assert_eq!(state.tombstoned_at(), Some(at));
        assert_eq!(TenantState::Active.tombstoned_at(), None);
    }

    #[test]
    fn fingerprints_depend_on_parsed_values_only() {
        let a = NewTenant {
            name: Name::parse("x").expect("name"),
            opening_deposit: Atomic::parse("10").expect("amount"),
            policy: None,
            thresholds: Thresholds::default(),
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
