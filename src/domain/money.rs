//! Amounts of money in atomic units.

use std::fmt;

use serde::{Serialize, Serializer};

/// An amount in atomic units: an unsigned 128-bit integer, written as decimal digits.
///
/// It never passes through a float or a signed type, so every value up to `u128::MAX`
/// survives a round trip exactly. It serializes as a JSON string, so that no client's JSON
/// parser rounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Atomic(u128);

impl Atomic {
    /// The amount `value`.
    pub(crate) const fn new(value: u128) -> Self {
        Self(value)
    }

    /// Parses `^(0|[1-9][0-9]*)$` up to `u128::MAX`; a sign, a point, an exponent, white space
    /// and leading zeros are all refused.
    pub(crate) fn parse(raw: &str) -> Result<Self, &'static str> {
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

    /// The amount as a number, for checked arithmetic.
    pub(crate) fn get(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Atomic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Atomic {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn amounts_serialize_as_json_strings() {
        let max = Atomic::parse("340282366920938463463374607431768211455").expect("max");
        assert_eq!(
            serde_json::to_string(&max).expect("json"),
            "\"340282366920938463463374607431768211455\""
        );
    }
}
