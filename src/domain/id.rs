//! Identifiers: a kind's prefix and a ULID in canonical (upper-case Crockford base32) form.
//!
//! Only the canonical form is accepted, so one resource has exactly one spelling and a lookup
//! is a byte-wise match. Each kind has its own type, so a budget id can never be passed where
//! a reservation id is expected.

use std::fmt;

use serde::{Serialize, Serializer};
use ulid::Ulid;

/// Defines an id type: `$prefix` followed by a canonical ULID.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(crate) struct $name(String);

        impl $name {
            /// What every id of this kind starts with.
            pub(crate) const PREFIX: &'static str = $prefix;

            /// Accepts the prefix and a canonical ULID, nothing else (no lower case, no
            /// `I`/`L`/`O` stand-ins, nothing past `7ZZ…Z`).
            pub(crate) fn parse(raw: &str) -> Option<Self> {
                canonical_ulid(raw, Self::PREFIX).map(|_| Self(raw.to_owned()))
            }

            /// The id of a ULID this process made.
            pub(crate) fn from_ulid(ulid: Ulid) -> Self {
                Self(format!("{}{ulid}", Self::PREFIX))
            }

            /// The ULID inside the id (not every kind needs it).
            #[allow(dead_code)]
            pub(crate) fn ulid(&self) -> Ulid {
                Ulid::from_string(&self.0[Self::PREFIX.len()..])
                    .expect("a parsed id holds a ULID")
            }

            /// The id as written.
            pub(crate) fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A tenant id: `ten_` and a ULID.
    TenantId,
    "ten_"
);

prefixed_id!(
    /// A budget id: `bud_` and a ULID. A tenant's default budget shares its tenant's ULID.
    BudgetId,
    "bud_"
);

prefixed_id!(
    /// A reservation id: `res_` and a ULID.
    ReservationId,
    "res_"
);

prefixed_id!(
    /// A ledger entry id: `ent_` and a ULID. A budget's opening deposit shares its budget's
    /// ULID.
    EntryId,
    "ent_"
);

prefixed_id!(
    /// A period id: `per_` and a ULID.
    PeriodId,
    "per_"
);

prefixed_id!(
    /// An event id: `evt_` and a ULID.
    EventId,
    "evt_"
);

prefixed_id!(
    /// A webhook endpoint id: `whe_` and a ULID.
    EndpointId,
    "whe_"
);

prefixed_id!(
    /// A webhook delivery id: `whd_` and a ULID.
    DeliveryId,
    "whd_"
);

impl TenantId {
    /// The id of the tenant's default budget.
    pub(crate) fn default_budget(&self) -> BudgetId {
        BudgetId::from_ulid(self.ulid())
    }
}

impl BudgetId {
    /// The id of the budget's opening-deposit entry.
    pub(crate) fn opening_entry(&self) -> EntryId {
        EntryId::from_ulid(self.ulid())
    }
}

/// The ULID of `raw` if it is `prefix` and a ULID in canonical form.
fn canonical_ulid(raw: &str, prefix: &str) -> Option<Ulid> {
    let text = raw.strip_prefix(prefix)?;
    let ulid = Ulid::from_string(text).ok()?;
    // Canonical: the decoder also takes lower case and look-alike letters, so the text must
    // be what the encoder writes (on the stack: no allocation per request).
    let mut canonical = [0u8; ulid::ULID_LEN];
    (ulid.array_to_str(&mut canonical) == text).then_some(ulid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_accept_only_the_canonical_form() {
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
            "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        ] {
            assert!(TenantId::parse(raw).is_none(), "id {raw:?} must be refused");
        }
    }

    #[test]
    fn kinds_do_not_mix() {
        let raw = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
        assert!(BudgetId::parse(&format!("bud_{raw}")).is_some());
        assert!(BudgetId::parse(&format!("res_{raw}")).is_none());
        assert!(ReservationId::parse(&format!("res_{raw}")).is_some());
        assert!(EntryId::parse(&format!("ent_{raw}")).is_some());
        let tenant = TenantId::parse(&format!("ten_{raw}")).expect("id");
        assert_eq!(tenant.default_budget().as_str(), format!("bud_{raw}"));
        assert_eq!(
            tenant.default_budget().opening_entry().as_str(),
            format!("ent_{raw}")
        );
    }
}
