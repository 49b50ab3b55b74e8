//! What a budget renews by and where it stands: its period policy, its current period, its
//! period statements, and its alert thresholds.
//!
//! When boundaries fall is [`super::period`]'s; what a boundary does to the figures is a rule
//! (`rules::period_reset`). Here are the values they work on.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::{Atomic, BudgetId, Cadence, Figures, PeriodId, Timestamp};

/// How a budget renews: every period it starts again with `allowance` available, plus what
/// it carried over from the period before, at most `rollover_max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    /// When its boundaries fall.
    pub(crate) cadence: Cadence,
    /// What each period starts with.
    pub(crate) allowance: Atomic,
    /// What may carry over into the next period, at most.
    pub(crate) rollover_max: Atomic,
}

impl Policy {
    /// The policy as one line of text, for a request's fingerprint: every member, in a fixed
    /// order.
    pub(crate) fn canonical(&self) -> String {
        let when = match &self.cadence {
            Cadence::Calendar { interval, zone } => format!("{} {}", interval.name(), zone.name()),
            Cadence::Fixed { every_seconds } => format!("every {every_seconds}"),
        };
        format!("{when} {} {}", self.allowance, self.rollover_max)
    }
}

/// The policy as the API shows it (and the audit chain records it): `interval` and
/// `time_zone`, or `every_seconds`; then `allowance_atomic` and `rollover_max_atomic`.
impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match &self.cadence {
            Cadence::Calendar { interval, zone } => {
                map.serialize_entry("interval", interval.name())?;
                map.serialize_entry("time_zone", zone.name())?;
            }
            Cadence::Fixed { every_seconds } => {
                map.serialize_entry("every_seconds", every_seconds)?
            }
        }
        map.serialize_entry("allowance_atomic", &self.allowance)?;
        map.serialize_entry("rollover_max_atomic", &self.rollover_max)?;
        map.end()
    }
}

/// The period a budget is in: what its statement and `current_period` show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CurrentPeriod {
    /// Its id.
    pub(crate) id: PeriodId,
    /// When it began.
    pub(crate) started_at: Timestamp,
    /// Its next boundary.
    pub(crate) ends_at: Timestamp,
    /// When the policy was set: a fixed length's boundaries are whole multiples after it.
    pub(crate) anchor: Timestamp,
}

/// The most thresholds a budget may have.
pub(crate) const THRESHOLDS_MAX: usize = 10;

/// A budget's alert thresholds: at most [`THRESHOLDS_MAX`] amounts, no two equal, largest
/// first; shown as an array of amounts.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Thresholds(Vec<Atomic>);

impl Thresholds {
    /// The thresholds of `amounts`, in any order: refused when there are too many or two are
    /// equal.
    pub(crate) fn new(mut amounts: Vec<Atomic>) -> Result<Self, &'static str> {
        if amounts.len() > THRESHOLDS_MAX {
            return Err("must hold at most 10 amounts");
        }
        amounts.sort_unstable_by(|a, b| b.cmp(a));
        if amounts.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err("must not hold the same amount twice");
        }
        Ok(Self(amounts))
    }

    /// Largest first.
    pub(crate) fn amounts(&self) -> &[Atomic] {
        &self.0
    }

    /// True for none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The thresholds a movement from `before` available to `after` crossed: those below
    /// `before` and at or above `after`, largest first. None when nothing fell.
    pub(crate) fn crossed(&self, before: u128, after: u128) -> impl Iterator<Item = Atomic> + '_ {
        self.0
            .iter()
            .copied()
            .filter(move |t| before > t.get() && after <= t.get())
    }

    /// The stored column: the amounts in decimal, largest first, separated by commas (`""`
    /// for none).
    pub(crate) fn to_column(&self) -> String {
        let texts: Vec<String> = self.0.iter().map(Atomic::to_string).collect();
        texts.join(",")
    }

    /// Reads what [`Thresholds::to_column`] writes, and nothing else.
    pub(crate) fn from_column(raw: &str) -> Option<Self> {
        if raw.is_empty() {
            return Some(Self::default());
        }
        let amounts = raw
            .split(',')
            .map(|text| Atomic::parse(text).ok())
            .collect::<Option<Vec<_>>>()?;
        let thresholds = Self::new(amounts).ok()?;
        (thresholds.to_column() == raw).then_some(thresholds)
    }
}

/// A period as its statement shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Statement {
    /// Its id.
    pub(crate) id: PeriodId,
    /// Whose.
    pub(crate) budget_id: BudgetId,
    /// When it began.
    pub(crate) started_at: Timestamp,
    /// Its next boundary while current; when it ended once closed.
    pub(crate) ends_at: Timestamp,
    /// The policy's allowance when it began.
    pub(crate) allowance: Atomic,
    /// What the period before carried into it (`0` for a period that began with the budget
    /// or at a change of policy).
    pub(crate) carried_in: Atomic,
    /// What was available right after it began.
    pub(crate) opening_available: Atomic,
    /// The budget's totals right after it began (`reserved` is not kept: 0).
    pub(crate) start: Figures,
    /// How it ended; `None` while it is current.
    pub(crate) closing: Option<Closing>,
}

/// How a period ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closing {
    /// The budget's totals when it ended, before any boundary entry (`reserved` is not
    /// kept: 0).
    pub(crate) end: Figures,
    /// What it lost: the part of `available` that did not carry over.
    pub(crate) forfeited: Atomic,
    /// What it carried into the next period.
    pub(crate) carried_out: Atomic,
    /// What was available when it ended.
    pub(crate) available: Atomic,
}

/// What a period credited, debited and spent: the budget's totals at `end` less those at its
/// start (refills and forfeits are boundary entries, outside both).
pub(crate) fn period_totals(start: &Figures, end: &Figures) -> Option<(u128, u128, u128)> {
    Some((
        end.credited.checked_sub(start.credited)?,
        end.debited.checked_sub(start.debited)?,
        end.spent.checked_sub(start.spent)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amounts(values: &[u128]) -> Vec<Atomic> {
        values.iter().copied().map(Atomic::new).collect()
    }

    #[test]
    fn thresholds_are_kept_largest_first_and_round_trip_through_their_column() {
        let t = Thresholds::new(amounts(&[0, 1000, 5])).expect("valid");
        assert_eq!(t.amounts(), amounts(&[1000, 5, 0]).as_slice());
        assert_eq!(t.to_column(), "1000,5,0");
        assert_eq!(Thresholds::from_column("1000,5,0"), Some(t));
        assert_eq!(Thresholds::from_column(""), Some(Thresholds::default()));
        for bad in ["5,1000", "1,1", ",", "01", "a", "1,"] {
            assert_eq!(Thresholds::from_column(bad), None, "{bad:?}");
        }
        assert!(Thresholds::new(amounts(&[1, 1])).is_err(), "a duplicate");
        assert!(Thresholds::new(amounts(&[0; 0])).is_ok(), "none");
        let eleven: Vec<u128> = (0..11).collect();
        assert!(Thresholds::new(amounts(&eleven)).is_err(), "eleven");
        assert!(Thresholds::new(amounts(&eleven[..10])).is_ok(), "ten");
    }
}
