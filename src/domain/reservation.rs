//! Reservations: holds on part of a budget, settled by a commit, a release or time.

use super::{Atomic, BodyFingerprint, BudgetId, Memo, ReservationId, TenantId, Timestamp};

/// The shortest hold, in seconds.
pub(crate) const TTL_SECONDS_MIN: u32 = 1;

/// The longest hold, in seconds (a day).
pub(crate) const TTL_SECONDS_MAX: u32 = 86_400;

/// The hold of a reservation made without a TTL, in seconds.
pub(crate) const TTL_SECONDS_DEFAULT: u32 = 300;

/// How long a hold lasts: [`TTL_SECONDS_MIN`] to [`TTL_SECONDS_MAX`] seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl(u32);

impl Ttl {
    /// The hold of a reservation made without a TTL.
    pub(crate) fn default_hold() -> Self {
        Self(TTL_SECONDS_DEFAULT)
    }

    /// Reads a JSON number's text: a whole number of seconds in range. As in JSON Schema,
    /// an integer is a value, not a spelling: `300`, `300.0` and `3e2` are the same number;
    /// `300.5` is not whole. The value is read exactly, never through a float.
    pub(crate) fn parse(number: &str) -> Result<Self, &'static str> {
        let refuse = "must be a whole number of seconds from 1 to 86400";
        match whole_number(number) {
            Some(s) if (TTL_SECONDS_MIN..=TTL_SECONDS_MAX).contains(&s) => Ok(Self(s)),
            _ => Err(refuse),
        }
    }

    /// The hold in seconds.
    pub(crate) fn seconds(self) -> u32 {
        self.0
    }
}

/// The value of a JSON number's text if it is a whole number that fits in a `u32`, read
/// exactly: the digits, shifted by the exponent, must leave no non-zero digit after the point.
pub(crate) fn whole_number(text: &str) -> Option<u32> {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    if mantissa.starts_with('-') {
        // Zero is the only whole number with a sign that could be in range, and it is not.
        return None;
    }
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    // Where the point falls in `digits` once the exponent has moved it.
    let point = i64::try_from(int.len()).ok()? + i64::from(exponent);
    let mut value: u64 = 0;
    for (i, digit) in digits.iter().enumerate() {
        let i = i64::try_from(i).ok()?;
        if i >= point {
            if *digit != 0 {
                return None;
            }
        } else {
            value = value.checked_mul(10)?.checked_add(u64::from(*digit))?;
        }
    }
    // Zeros the exponent appends past the last digit (none matter to a zero).
    let zeros = point - i64::try_from(digits.len()).ok()?;
    if value != 0 {
        for _ in 0..zeros.max(0) {
            value = value.checked_mul(10)?;
            if value > u64::from(u32::MAX) {
                return None;
            }
        }
    }
    u32::try_from(value).ok()
}

/// Where a reservation is in its life: active, then one of three final states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReservationState {
    /// It holds its amount until `expires_at`.
    Active,
    /// Settled by spending `amount`.
    Committed { amount: Atomic, at: Timestamp },
    /// Its amount returned.
    Released { at: Timestamp },
    /// Its time ran out; `at` is when that was recorded.
    Expired { at: Timestamp },
}

impl ReservationState {
    /// Every state's name, as the API and the database write it, in
    /// [`ReservationState::slot`] order: the one list the filters, the counters and the
    /// metrics use.
    pub(crate) const NAMES: [&'static str; 4] = ["active", "committed", "released", "expired"];

    /// The state's place in [`ReservationState::NAMES`].
    pub(crate) fn slot(&self) -> usize {
        match self {
            Self::Active => 0,
            Self::Committed { .. } => 1,
            Self::Released { .. } => 2,
            Self::Expired { .. } => 3,
        }
    }

    /// The state's name, as the API and the database write it.
    pub(crate) fn name(&self) -> &'static str {
        Self::NAMES[self.slot()]
    }

    /// When it was settled, if it was.
    pub(crate) fn settled_at(&self) -> Option<Timestamp> {
        match self {
            Self::Active => None,
            Self::Committed { at, .. } | Self::Released { at } | Self::Expired { at } => Some(*at),
        }
    }

    /// What was spent, for a committed reservation.
    pub(crate) fn committed(&self) -> Option<Atomic> {
        match self {
            Self::Committed { amount, .. } => Some(*amount),
            _ => None,
        }
    }
}

/// A reservation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Its id.
    pub(crate) id: ReservationId,
    /// Whose it is.
    pub(crate) tenant_id: TenantId,
    /// The budget it holds on.
    pub(crate) budget_id: BudgetId,
    /// Where it is in its life, as recorded.
    pub(crate) state: ReservationState,
    /// What it holds.
    pub(crate) amount: Atomic,
    /// A note, if one was given.
    pub(crate) memo: Option<Memo>,
    /// When it was made.
    pub(crate) created_at: Timestamp,
    /// From this instant on it holds nothing.
    pub(crate) expires_at: Timestamp,
}

/// A validated reservation request. The budget id is kept as sent: one that names no budget
/// of the tenant (malformed ones included) is a `404`, decided with the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewReservation {
    /// The `budget_id` member as sent.
    pub(crate) budget_text: String,
    /// How much, at least 1.
    pub(crate) amount: Atomic,
    /// How long.
    pub(crate) ttl: Ttl,
    /// A note, if one was given.
    pub(crate) memo: Option<Memo>,
}

impl NewReservation {
    /// The budget to hold on, if the text is an id at all.
    pub(crate) fn budget_id(&self) -> Option<BudgetId> {
        BudgetId::parse(&self.budget_text)
    }

    /// What makes two requests the same body; an omitted TTL and the default are the same.
    pub(crate) fn fingerprint(&self) -> BodyFingerprint {
        BodyFingerprint::of(self.canonical().as_bytes())
    }

    /// The text its fingerprint is of.
    pub(crate) fn canonical(&self) -> String {
        let memo = self
            .memo
            .as_ref()
            .map_or("-".to_owned(), |m| format!("+{}", m.as_str()));
        format!(
            "reserve\n{}\n{}\n{}\n{memo}",
            self.budget_text,
            self.amount,
            self.ttl.seconds()
        )
    }
}

/// What settles or changes an active reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Spend this much (0 or more) and release the rest.
    Commit(Atomic),
    /// Return the whole amount.
    Release,
    /// Hold until now + the TTL.
    Extend(Ttl),
}

impl Settle {
    /// What makes two requests the same body.
    pub(crate) fn fingerprint(&self) -> BodyFingerprint {
        BodyFingerprint::of(self.canonical().as_bytes())
    }

    /// The text its fingerprint is of.
    pub(crate) fn canonical(&self) -> String {
        match self {
            Self::Commit(amount) => format!("commit\n{amount}"),
            Self::Release => "release".to_owned(),
            Self::Extend(ttl) => format!("extend\n{}", ttl.seconds()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_whole_seconds_in_range() {
        for (raw, ok) in [
            ("1", true),
            ("300", true),
            ("86400", true),
            ("1.0", true),
            ("300.000", true),
            ("1e2", true),
            ("1E2", true),
            ("3.6e3", true),
            ("8640000e-2", true),
            ("864e+2", true),
            ("0", false),
            ("0.5e1", true),
            ("86401", false),
            ("86400.0000000000001", false),
            ("1.5", false),
            ("15e-1", false),
            ("-1", false),
            ("-0", false),
            ("1e400", false),
            ("1e-400", false),
            ("99999999999999999999", false),
            ("0.0000000000000000000000001e25", true),
            ("0e2000000000", false),
        ] {
            assert_eq!(Ttl::parse(raw).is_ok(), ok, "ttl {raw}");
        }
    }
}
