//! Values on the wire, both ways: the store's parameters ([`Param`]) encoded in binary as the
//! type the server inferred for them asks, and the rows read back as text ([`TextRow`]).
//!
//! Amounts go out as `numeric`, built digit group by digit group from the integer, and come
//! back in decimal from the same binary form ([`Decimal`]), never through a float or an `i64`.
//! The encoder and the decoder live together so that the one form is written and read in one
//! place, and a test can send every amount out and read it back.

use std::borrow::Cow;

use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};

use super::explain;
use crate::store::rows::TextRow;
use crate::store::sql::{Param, RowError};

/// A parameter's encoding error, as `tokio_postgres` takes it.
pub(super) type BindError = Box<dyn std::error::Error + Sync + Send>;

/// The parameters as `tokio_postgres` takes them.
pub(super) fn bound<'p>(params: &'p [Param<'_>]) -> Vec<&'p (dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// The kinds of column a parameter can be sent for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// `text`, `varchar`, `char`, `name`, or a type the server left unknown.
    Text,
    /// `numeric`.
    Numeric,
    /// `bigint`.
    Int8,
    /// `integer`.
    Int4,
    /// `smallint`.
    Int2,
    /// `bytea`.
    Bytea,
    /// Anything else: no parameter is sent for it.
    Other,
}

impl Target {
    /// The kind of `ty`; a domain's is its base type's (an amount column is of the domain
    /// `tenantd_atomic`, over `numeric`).
    fn of(ty: &Type) -> Self {
        if let Kind::Domain(base) = ty.kind() {
            return Self::of(base);
        }
        match ty {
            t if [
                Type::TEXT,
                Type::VARCHAR,
                Type::BPCHAR,
                Type::NAME,
                Type::UNKNOWN,
            ]
            .contains(t) =>
            {
                Self::Text
            }
            t if *t == Type::NUMERIC => Self::Numeric,
            t if *t == Type::INT8 => Self::Int8,
            t if *t == Type::INT4 => Self::Int4,
            t if *t == Type::INT2 => Self::Int2,
            t if *t == Type::BYTEA => Self::Bytea,
            _ => Self::Other,
        }
    }
}

impl Param<'_> {
    /// What the parameter is, without its value (which may be a secret).
    fn kind(&self) -> &'static str {
        match self {
            Param::Null => "NULL",
            Param::Text(_) => "text",
            Param::Int(_) => "integer",
            Param::Bytes(_) => "bytes",
            Param::Amount(_) => "amount",
        }
    }
}

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BindError> {
        let out_of_range = || -> BindError { format!("an integer out of range for {ty}").into() };
        match (*self, Target::of(ty)) {
            (Param::Null, _) => return Ok(IsNull::Yes),
            (Param::Text(text), Target::Text) => out.extend_from_slice(text.as_bytes()),
            (Param::Text(text), Target::Numeric) => {
                if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err("a text bound as numeric is not a whole non-negative number".into());
                }
                put_numeric(false, text, out)?;
            }
            (Param::Int(n), Target::Int8) => out.extend_from_slice(&n.to_be_bytes()),
            (Param::Int(n), Target::Int4) => {
                let n = i32::try_from(n).map_err(|_| out_of_range())?;
                out.extend_from_slice(&n.to_be_bytes());
            }
            (Param::Int(n), Target::Int2) => {
                let n = i16::try_from(n).map_err(|_| out_of_range())?;
                out.extend_from_slice(&n.to_be_bytes());
            }
            (Param::Int(n), Target::Text) => out.extend_from_slice(n.to_string().as_bytes()),
            (Param::Int(n), Target::Numeric) => {
                put_numeric(n < 0, &n.unsigned_abs().to_string(), out)?;
            }
            (Param::Bytes(bytes), Target::Bytea) => out.extend_from_slice(bytes),
            (Param::Amount(n), Target::Numeric) => put_numeric(false, &n.to_string(), out)?,
            (Param::Amount(n), Target::Text) => out.extend_from_slice(n.to_string().as_bytes()),
            (param, _) => {
                return Err(
                    format!("a parameter of {} cannot be sent as {ty}", param.kind()).into(),
                );
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Writes the whole number of the ASCII decimal `digits` (negative if `negative`) in
/// PostgreSQL's binary `numeric`: the number of digit groups, the weight of the first, the
/// sign, the display scale (0), then the base-10000 groups, most significant first, without
/// the zero groups at the end (their weight says them).
fn put_numeric(negative: bool, digits: &str, out: &mut BytesMut) -> Result<(), BindError> {
    let digits = digits.trim_start_matches('0').as_bytes();
    // The groups of four digits, counted from the units; the first may be shorter.
    let first = match digits.len() % 4 {
        0 => 4,
        short => short,
    };
    let mut groups: Vec<u16> = Vec::with_capacity(digits.len().div_ceil(4));
    let mut at = 0;
    while at < digits.len() {
        let end = if at == 0 { first } else { at + 4 };
        let group = digits[at..end]
            .iter()
            .fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
        groups.push(group);
        at = end;
    }
    let weight = match groups.len() {
        0 => 0,
        n => i16::try_from(n - 1).map_err(|_| "a number too large for numeric")?,
    };
    while groups.last() == Some(&0) {
        groups.pop();
    }
    let ndigits = i16::try_from(groups.len()).map_err(|_| "a number too large for numeric")?;
    let sign: u16 = if negative && ndigits > 0 { 0x4000 } else { 0 };
    out.extend_from_slice(&ndigits.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    for group in groups {
        out.extend_from_slice(&group.to_be_bytes());
    }
    Ok(())
}

impl TextRow for tokio_postgres::Row {
    type Error = RowError;

    fn column(&self, i: usize) -> Result<Option<Cow<'_, str>>, RowError> {
        let unreadable =
            |e: tokio_postgres::Error| RowError::Read(format!("column {i}: {}", explain(&e)));
        if *self.columns()[i].type_() == Type::NUMERIC {
            let value: Option<Decimal> = self.try_get(i).map_err(unreadable)?;
            Ok(value.map(|d| Cow::Owned(d.0)))
        } else {
            let value: Option<&str> = self.try_get(i).map_err(unreadable)?;
            Ok(value.map(Cow::Borrowed))
        }
    }

    fn blob(&self, i: usize) -> Result<Option<Cow<'_, [u8]>>, RowError> {
        let value: Option<&[u8]> = self
            .try_get(i)
            .map_err(|e| RowError::Read(format!("column {i}: {}", explain(&e))))?;
        Ok(value.map(Cow::Borrowed))
    }

    fn corrupt(&self, i: usize, what: String) -> RowError {
        RowError::Corrupt(format!("column {i}: {what}"))
    }

    fn len(&self) -> usize {
        self.columns().len()
    }
}

/// A `numeric` in decimal, from PostgreSQL's binary form: a sign, a weight and base-10000
/// digits. Anything but a whole number comes out as text no amount parser takes (a sign,
/// "not a whole number"), so it is refused where it is read, never rounded.
struct Decimal(String);

impl<'a> FromSql<'a> for Decimal {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let word = |i: usize| -> Result<u16, Box<dyn std::error::Error + Sync + Send>> {
            raw.get(2 * i..2 * i + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| "a numeric cut short".into())
        };
        let (ndigits, weight, sign, dscale) = (word(0)?, word(1)? as i16, word(2)?, word(3)?);
        let whole = i32::from(weight) + 1;
        if sign == 0xC000 || dscale > 0 || (ndigits > 0 && i32::from(ndigits) > whole) {
            return Ok(Self("not a whole number".into()));
        }
        let mut text = String::new();
        if sign == 0x4000 {
            text.push('-');
        }
        if ndigits == 0 {
            text.push('0');
            return Ok(Self(text));
        }
        // The digit groups, then the zero groups below them that the form leaves out.
        for i in 0..whole {
            let digit = if i < i32::from(ndigits) {
                word(4 + i as usize)?
            } else {
                0
            };
            if i == 0 {
                text.push_str(&digit.to_string());
            } else {
                text.push_str(&format!("{digit:04}"));
            }
        }
        Ok(Self(text))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut raw = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            raw.extend_from_slice(&w.to_be_bytes());
        }
        raw
    }

    fn decode(raw: &[u8]) -> String {
        Decimal::from_sql(&Type::NUMERIC, raw).expect("a numeric").0
    }

    fn encode(param: Param<'_>, ty: &Type) -> Result<Vec<u8>, BindError> {
        let mut out = BytesMut::new();
        param.to_sql_checked(ty, &mut out)?;
        Ok(out.to_vec())
    }

    #[test]
    fn amounts_are_numerics_the_decoder_reads_back() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            9999,
            10_000,
            10_001,
            99_990_000,
            100_000_000,
            1_000_000_000_000,
            10u128.pow(20),
            12_345_678_900_000_000,
            u128::MAX,
            u128::MAX - 1,
        ];
        values.extend((0..=38).map(|e| 10u128.pow(e)));
        for n in values {
            let raw = encode(Param::Amount(n), &Type::NUMERIC).expect("an amount");
            assert_eq!(decode(&raw), n.to_string(), "{n}");
            let text = encode(Param::Text(&n.to_string()), &Type::NUMERIC).expect("a text");
            assert_eq!(text, raw, "{n}");
        }
        // The form itself: zero has no digit groups; 10^8 is one group of weight 2.
        assert_eq!(
            encode(Param::Amount(0), &Type::NUMERIC).expect("zero"),
            [0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            encode(Param::Amount(100_000_000), &Type::NUMERIC).expect("10^8"),
            [0, 1, 0, 2, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(
            encode(Param::Amount(123_400_005_678), &Type::NUMERIC).expect("an amount"),
            [0, 3, 0, 2, 0, 0, 0, 0, 0x04, 0xD2, 0, 0, 0x16, 0x2E]
        );
        assert_eq!(
            decode(&encode(Param::Text("000120"), &Type::NUMERIC).expect("a text")),
            "120"
        );
        for n in [i64::MIN, -10_000, -1, 0, 1, i64::MAX] {
            let raw = encode(Param::Int(n), &Type::NUMERIC).expect("an integer");
            assert_eq!(decode(&raw), n.to_string(), "{n}");
        }
    }

    #[test]
    fn a_domain_takes_what_its_base_type_takes() {
        let domain = |name: &str, base: Type| {
            Type::new(name.into(), 90_000, Kind::Domain(base), "public".into())
        };
        let atomic = domain("tenantd_atomic", Type::NUMERIC);
        for n in [0, 120, u128::MAX] {
            assert_eq!(
                encode(Param::Amount(n), &atomic).expect("an amount"),
                encode(Param::Amount(n), &Type::NUMERIC).expect("an amount"),
                "{n}"
            );
        }
        assert_eq!(
            encode(Param::Text("120"), &atomic).expect("a copied amount"),
            encode(Param::Amount(120), &Type::NUMERIC).expect("an amount"),
        );
        let kind = domain("tenantd_entry_kind", Type::TEXT);
        assert_eq!(
            encode(Param::Text("charge"), &kind).expect("a kind"),
            b"charge"
        );
        let nested = domain("outer", domain("inner", Type::NUMERIC));
        assert_eq!(
            encode(Param::Amount(7), &nested).expect("a domain over a domain"),
            encode(Param::Amount(7), &Type::NUMERIC).expect("an amount"),
        );
        assert!(encode(Param::Amount(7), &domain("flag", Type::BOOL)).is_err());
    }

    #[test]
    fn each_parameter_is_sent_only_as_what_it_can_be() {
        assert_eq!(encode(Param::Int(7), &Type::INT2).expect("int2"), [0, 7]);
        assert_eq!(
            encode(Param::Int(-2), &Type::INT4).expect("int4"),
            (-2i32).to_be_bytes()
        );
        assert_eq!(
            encode(Param::Int(i64::MIN), &Type::INT8).expect("int8"),
            i64::MIN.to_be_bytes()
        );
        assert_eq!(encode(Param::Int(42), &Type::TEXT).expect("text"), b"42");
        assert_eq!(
            encode(Param::Amount(u128::MAX), &Type::TEXT).expect("text"),
            u128::MAX.to_string().as_bytes()
        );
        for ty in [
            Type::TEXT,
            Type::INT4,
            Type::BYTEA,
            Type::BOOL,
            Type::NUMERIC,
        ] {
            let mut out = BytesMut::new();
            let null = Param::Null.to_sql_checked(&ty, &mut out).expect("NULL");
            assert!(matches!(null, IsNull::Yes) && out.is_empty(), "{ty}");
        }
        for (param, ty) in [
            (Param::Int(i64::from(i32::MAX) + 1), Type::INT4),
            (Param::Int(i64::from(i32::MIN) - 1), Type::INT4),
            (Param::Int(i64::from(i16::MAX) + 1), Type::INT2),
            (Param::Text("-1"), Type::NUMERIC),
            (Param::Text("1.5"), Type::NUMERIC),
            (Param::Text(""), Type::NUMERIC),
            (Param::Text("1e3"), Type::NUMERIC),
            (Param::Text("1"), Type::INT8),
            (Param::Bytes(b"x"), Type::TEXT),
            (Param::Amount(1), Type::INT8),
            (Param::Int(1), Type::BOOL),
            (Param::Text("t"), Type::BOOL),
        ] {
            assert!(encode(param, &ty).is_err(), "{param:?} as {ty}");
        }
    }

    #[test]
    fn whole_numerics_come_out_in_decimal() {
        assert_eq!(decode(&numeric(0, 0, 0, 0, &[])), "0");
        assert_eq!(decode(&numeric(1, 0, 0, 0, &[7])), "7");
        assert_eq!(decode(&numeric(2, 1, 0, 0, &[12, 34])), "120034");
        // 10^8: one digit group of weight 2, the two zero groups below it left out.
        assert_eq!(decode(&numeric(1, 2, 0, 0, &[1])), "100000000");
        let max = [340, 2823, 6692, 938, 4634, 6337, 4607, 4317, 6821, 1455];
        assert_eq!(decode(&numeric(10, 9, 0, 0, &max)), u128::MAX.to_string());
    }

    #[test]
    fn what_is_not_a_whole_number_is_no_amount() {
        for raw in [
            numeric(1, 0, 0x4000, 0, &[5]),
            numeric(0, 0, 0xC000, 0, &[]),
            numeric(1, -1, 0, 4, &[5000]),
            numeric(2, 0, 0, 4, &[1, 5000]),
        ] {
            let text = decode(&raw);
            assert!(crate::domain::Atomic::parse(&text).is_err(), "{text}");
        }
        assert!(Decimal::from_sql(&Type::NUMERIC, &[0, 1]).is_err());
    }
}
