//! Budgets: what they hold, and every movement of them as checked arithmetic on `u128`.
//!
//! [`Figures`] is the one place the invariant *credited ≥ debited + spent + reserved* is
//! kept: each movement returns new figures or a refusal, and never wraps. The store applies
//! a movement inside the transaction that writes it, so no check is separated from its act.

use std::fmt;

use serde::{Serialize, Serializer};

use super::{
    Atomic, BodyFingerprint, BudgetId, CurrentPeriod, EntryKind, Name, Policy, TenantId,
    Thresholds, Timestamp,
};

/// The name of every tenant's first budget.
pub(crate) const DEFAULT_BUDGET_NAME: &str = "default";

/// The most characters a memo may have.
pub(crate) const MEMO_CHARS_MAX: usize = 200;

/// The most bytes a unit may have.
const UNIT_BYTES_MAX: usize = 32;

/// A label for people (`usd_micros`, `tokens`): `^[a-z][a-z0-9_]{0,31}$`, never converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit(String);

impl Unit {
    /// The unit of a budget made without one.
    pub(crate) fn atomic() -> Self {
        Self("atomic".into())
    }

    /// Checks the pattern.
    pub(crate) fn parse(raw: &str) -> Result<Self, &'static str> {
        let mut bytes = raw.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
        let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !first_ok || !rest_ok || raw.len() > UNIT_BYTES_MAX {
            return Err("must match ^[a-z][a-z0-9_]{0,31}$");
        }
        Ok(Self(raw.to_owned()))
    }

    /// The unit as given.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for Unit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A note for people, never interpreted: 0 to [`MEMO_CHARS_MAX`] characters under a name's
/// other rules (no control characters, no white space at either end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Memo(String);

impl Memo {
    /// Checks every rule; the empty memo is allowed.
    pub(crate) fn parse(raw: &str) -> Result<Self, &'static str> {
        if raw.is_empty() {
            return Ok(Self(String::new()));
        }
        if raw.chars().count() > MEMO_CHARS_MAX {
            return Err("must be at most 200 characters long");
        }
        Name::parse(raw).map(|_| Self(raw.to_owned()))
    }

    /// The memo as given.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for Memo {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Why a change was refused (see [`super::rules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It needs more than is available; what is available.
    InsufficientFunds { available: Atomic },
    /// A credit would carry `credited` past `u128`.
    Overflow,
    /// The figures already break the invariant: stored data that was tampered with.
    Corrupt,
    /// The hold is not active at the change's time; the state it is in (`expired` once its
    /// time is up, recorded or not).
    NotActive { state: &'static str },
    /// An expiry before the hold's time is up.
    NotDue,
}

/// A budget's running totals. `balance = credited − debited − spent`,
/// `available = balance − reserved`, and the invariant keeps both non-negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    /// The opening deposit plus every credit.
    pub(crate) credited: u128,
    /// Every debit.
    pub(crate) debited: u128,
    /// Every commit.
    pub(crate) spent: u128,
    /// The amounts of the active reservations.
    pub(crate) reserved: u128,
}

impl Figures {
    /// A new budget's figures.
    pub(crate) fn opening(deposit: Atomic) -> Self {
        Self {
            credited: deposit.get(),
            ..Self::default()
        }
    }

    /// `credited − debited − spent`, or `None` when the invariant is broken.
    pub(crate) fn balance(&self) -> Option<u128> {
        self.credited
            .checked_sub(self.debited)?
            .checked_sub(self.spent)
    }

    /// `balance − reserved`, or `None` when the invariant is broken.
    pub(crate) fn available(&self) -> Option<u128> {
        self.balance()?.checked_sub(self.reserved)
    }

    fn need(&self, amount: u128) -> Result<(), Refusal> {
        let available = self.available().ok_or(Refusal::Corrupt)?;
        if amount > available {
            return Err(Refusal::InsufficientFunds {
                available: Atomic::new(available),
            });
        }
        Ok(())
    }

    /// A top-up.
    pub(crate) fn credit(self, amount: u128) -> Result<Self, Refusal> {
        self.available().ok_or(Refusal::Corrupt)?;
        let credited = self.credited.checked_add(amount).ok_or(Refusal::Overflow)?;
        Ok(Self { credited, ..self })
    }

    /// A withdrawal, of at most what is available.
    pub(crate) fn debit(self, amount: u128) -> Result<Self, Refusal> {
        self.need(amount)?;
        Ok(Self {
            debited: self.debited + amount,
            ..self
        })
    }

    /// A credit, a debit or a charge, as `direction` says.
    pub(crate) fn moved(self, direction: Direction, amount: u128) -> Result<Self, Refusal> {
        match direction {
            Direction::Credit => self.credit(amount),
            Direction::Debit => self.debit(amount),
            Direction::Charge => self.charge(amount),
        }
    }

    /// A hold, of at most what is available.
    pub(crate) fn reserve(self, amount: u128) -> Result<Self, Refusal> {
        self.need(amount)?;
        Ok(Self {
            reserved: self.reserved + amount,
            ..self
        })
    }

    /// A spend without a hold, of at most what is available.
    pub(crate) fn charge(self, amount: u128) -> Result<Self, Refusal> {
        self.need(amount)?;
        Ok(Self {
            spent: self.spent.checked_add(amount).ok_or(Refusal::Corrupt)?,
            ..self
        })
    }

    /// A hold of `held` returned (a release or an expiry).
    pub(crate) fn release(self, held: u128) -> Result<Self, Refusal> {
        let reserved = self.reserved.checked_sub(held).ok_or(Refusal::Corrupt)?;
        Ok(Self { reserved, ..self })
    }

    /// A hold of `held` settled by spending `spent`: the whole hold leaves `reserved`, and
    /// any excess over it must be available now.
    pub(crate) fn commit(self, held: u128, spent: u128) -> Result<Self, Refusal> {
        self.need(spent.saturating_sub(held))?;
        let released = self.release(held)?;
        Ok(Self {
            spent: released.spent.checked_add(spent).ok_or(Refusal::Corrupt)?,
            ..released
        })
    }
}

/// Open, or closed at a time after which it never moves again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BudgetState {
    /// It may move.
    Open,
    /// Final.
    Closed { at: Timestamp },
}

impl BudgetState {
    /// Every state's name, as the API and the database write it, in [`BudgetState::slot`]
    /// order: the one list the filters, the counters and the metrics use.
    pub(crate) const NAMES: [&'static str; 2] = ["open", "closed"];

    /// The state's place in [`BudgetState::NAMES`].
    pub(crate) fn slot(&self) -> usize {
        match self {
            Self::Open => 0,
            Self::Closed { .. } => 1,
        }
    }

    /// The state's name, as the API and the database write it.
    pub(crate) fn name(&self) -> &'static str {
        Self::NAMES[self.slot()]
    }

    /// When it was closed, if it was.
    pub(crate) fn closed_at(&self) -> Option<Timestamp> {
        match self {
            Self::Open => None,
            Self::Closed { at } => Some(*at),
        }
    }
}

/// A budget as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Its id.
    pub(crate) id: BudgetId,
    /// Whose it is.
    pub(crate) tenant_id: TenantId,
    /// Unique among the tenant's open budgets.
    pub(crate) name: Name,
    /// A label for people.
    pub(crate) unit: Unit,
    /// Open or closed.
    pub(crate) state: BudgetState,
    /// When it was made.
    pub(crate) created_at: Timestamp,
    /// What it was made with.
    pub(crate) opening_deposit: Atomic,
    /// Its running totals.
    pub(crate) figures: Figures,
    /// How it renews, if it does; kept when it closes.
    pub(crate) policy: Option<Policy>,
    /// The period it is in: `None` without a policy, and once closed.
    pub(crate) current: Option<CurrentPeriod>,
    /// Its alert thresholds.
    pub(crate) thresholds: Thresholds,
    /// The budget above it, fixed for its life (`None` at the top).
    pub(crate) parent_id: Option<BudgetId>,
}

/// The most ancestors a budget may have: a tree has at most four levels.
pub(crate) const ANCESTORS_MAX: usize = 3;

/// What a `parent_id` that names no budget of the tenant is told, whether it is malformed or
/// unknown.
pub(crate) const PARENT_UNKNOWN: &str = "must name a budget of this tenant";

impl Budget {
    /// True while it may move.
    pub(crate) fn is_open(&self) -> bool {
        self.state == BudgetState::Open
    }
}

/// A validated budget create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewBudget {
    /// The name asked for.
    pub(crate) name: Name,
    /// The unit asked for (or the default).
    pub(crate) unit: Unit,
    /// The opening deposit asked for.
    pub(crate) opening_deposit: Atomic,
    /// How it renews, if it does.
    pub(crate) policy: Option<Policy>,
    /// Its alert thresholds.
    pub(crate) thresholds: Thresholds,
    /// The budget above it, if any: to be found open under the same tenant when it is written.
    pub(crate) parent: Option<BudgetId>,
}

impl NewBudget {
    /// What makes two create requests the same body: the parsed values. A body without a
    /// period or thresholds has the fingerprint it had before either existed, so a key bound
    /// then replays.
    pub(crate) fn fingerprint(&self) -> BodyFingerprint {
        let mut text = format!(
            "budget\n{}\n{}\n{}",
            self.name.as_str(),
            self.unit.as_str(),
            self.opening_deposit
        );
        push_renewal(&mut text, self.policy.as_ref(), &self.thresholds);
        if let Some(parent) = &self.parent {
            text.push_str(&format!("\nparent {parent}"));
        }
        BodyFingerprint::of(text.as_bytes())
    }
}

/// Appends a period policy and thresholds to a fingerprint's text, when either is set.
pub(crate) fn push_renewal(text: &mut String, policy: Option<&Policy>, thresholds: &Thresholds) {
    if policy.is_none() && thresholds.is_empty() {
        return;
    }
    let policy = policy.map_or("-".to_owned(), Policy::canonical);
    text.push_str(&format!("\n{policy}\n{}", thresholds.to_column()));
}

/// Which way a movement without a hold goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// A top-up, by the admin.
    Credit,
    /// A withdrawal, by the admin.
    Debit,
    /// A spend, by the tenant or the admin.
    Charge,
}

impl Direction {
    /// The kind of the ledger entry a movement this way appends.
    pub(crate) fn entry_kind(self) -> EntryKind {
        match self {
            Self::Credit => EntryKind::Credit,
            Self::Debit => EntryKind::Debit,
            Self::Charge => EntryKind::Charge,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Credit => "credit",
            Self::Debit => "debit",
            Self::Charge => "charge",
        })
    }
}

/// A validated credit, debit or charge request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Movement {
    /// Which way.
    pub(crate) direction: Direction,
    /// How much, at least 1.
    pub(crate) amount: Atomic,
    /// A note, if one was given.
    pub(crate) memo: Option<Memo>,
}

impl Movement {
    /// What makes two requests the same body. A missing memo and `null` are the same; an
    /// empty memo is not. `budget` is the budget the body names, where the path does not (a
    /// charge).
    pub(crate) fn fingerprint(&self, budget: Option<&str>) -> BodyFingerprint {
        BodyFingerprint::of(self.canonical(budget).as_bytes())
    }

    /// The text its fingerprint is of.
    pub(crate) fn canonical(&self, budget: Option<&str>) -> String {
        let memo = self
            .memo
            .as_ref()
            .map_or("-".to_owned(), |m| format!("+{}", m.as_str()));
        let mut text = format!("{}\n{}\n{memo}", self.direction, self.amount);
        if let Some(budget) = budget {
            text.push_str(&format!("\n{budget}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(credited: u128, debited: u128, spent: u128, reserved: u128) -> Figures {
        Figures {
            credited,
            debited,
            spent,
            reserved,
        }
    }

    #[test]
    fn movements_keep_the_invariant_or_refuse() {
        let f = figures(100, 10, 20, 30);
        assert_eq!(f.balance(), Some(70));
        assert_eq!(f.available(), Some(40));
        let short = Err(Refusal::InsufficientFunds {
            available: Atomic::new(40),
        });
        assert_eq!(f.debit(41), short);
        assert_eq!(f.reserve(41), short);
        assert_eq!(f.reserve(40).map(|g| g.available()), Ok(Some(0)));
        assert_eq!(f.debit(40).map(|g| g.available()), Ok(Some(0)));
        // A commit above its hold needs the excess available.
        assert_eq!(f.commit(30, 70).map(|g| g.available()), Ok(Some(0)));
        assert_eq!(f.commit(30, 71), short);
        assert_eq!(f.commit(30, 0), Ok(figures(100, 10, 20, 0)));
        assert_eq!(f.release(30), Ok(figures(100, 10, 20, 0)));
        assert_eq!(f.release(31), Err(Refusal::Corrupt));
        assert_eq!(
            figures(u128::MAX, 0, 0, 0).credit(1),
            Err(Refusal::Overflow)
        );
        assert_eq!(figures(1, 2, 0, 0).credit(1), Err(Refusal::Corrupt));
        assert_eq!(figures(1, 2, 0, 0).reserve(0), Err(Refusal::Corrupt));
    }

    #[test]
    fn units_and_memos_follow_their_rules() {
        for (raw, ok) in [
            ("atomic", true),
            ("usd_micros", true),
            ("a", true),
            ("a1_", true),
            (&*format!("a{}", "b".repeat(31)), true),
            (&*format!("a{}", "b".repeat(32)), false),
            ("", false),
            ("1a", false),
            ("_a", false),
            ("Usd", false),
            ("usd-micros", false),
        ] {
            assert_eq!(Unit::parse(raw).is_ok(), ok, "unit {raw:?}");
        }
        for (raw, ok) in [
            ("", true),
            ("refund #42", true),
            (&*"é".repeat(MEMO_CHARS_MAX), true),
            (&*"é".repeat(MEMO_CHARS_MAX + 1), false),
            (" lead", false),
            ("tab\tinside", false),
        ] {
            assert_eq!(Memo::parse(raw).is_ok(), ok, "memo {raw:?}");
        }
    }
}
