//! A budget's rows as they are first written and as its settings change: the budget itself,
//! its renewal row (period policy and alert thresholds), its first period and its opening
//! entry.

use crate::domain::{Atomic, Budget, BudgetId, Cadence, LedgerEntry, Policy, Timestamp};
use crate::store::StoreError;
use crate::store::queries;
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;

impl<D: Sql> WriterState<D> {
    /// Inserts a new open budget, its renewal if it has a policy or thresholds, its first
    /// period if it has a policy, and its opening-deposit entry (in that period).
    pub(crate) fn insert_budget(&mut self, budget: &mut Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::budgets::figure_params(&budget.figures);
        // A clash on an open budget's name comes back as `BudgetNameTaken`.
        self.db().send(
            "INSERT INTO budgets (id, tenant_id, name, unit, state, created_at, closed_at, \
             opening_deposit_atomic, credited_atomic, debited_atomic, spent_atomic, \
             reserved_atomic, parent_id) \
             VALUES (?1, ?2, ?3, ?4, 'open', ?5, NULL, ?6, ?7, ?8, ?9, ?10, ?11)",
            &[
                budget.id.as_str().into(),
                budget.tenant_id.as_str().into(),
                budget.name.as_str().into(),
                budget.unit.as_str().into(),
                Param::Text(&budget.created_at.to_string()),
                budget.opening_deposit.into(),
                credited,
                debited,
                spent,
                reserved,
                budget.parent_id.as_ref().map(BudgetId::as_str).into(),
            ],
        )?;
        self.counts().budget_created();
        if budget.policy.is_some() || !budget.thresholds.is_empty() {
            let anchor = budget
                .policy
                .as_ref()
                .map(|_| budget.created_at.to_string());
            let [interval, zone, every, allowance, rollover, anchor] =
                policy_params(budget.policy.as_ref(), anchor.as_deref());
            let thresholds = budget.thresholds.to_column();
            self.db().send(
                "INSERT INTO budget_renewals (budget_id, period_interval, period_time_zone, \
                 period_every_seconds, period_allowance_atomic, period_rollover_max_atomic, \
                 period_anchor, alert_thresholds) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                &[
                    budget.id.as_str().into(),
                    interval,
                    zone,
                    every,
                    allowance,
                    rollover,
                    anchor,
                    Param::Text(&thresholds),
                ],
            )?;
        }
        if let Some(policy) = budget.policy.clone() {
            let at = budget.created_at;
            self.begin_period(budget, &policy, at, at, Atomic::new(0))?;
        }
        self.insert_entry(LedgerEntry::opening(budget))
    }

    /// Writes `budget`'s period policy (`None`: it has none), set at `anchor`; it must be
    /// in no period.
    pub(crate) fn write_policy(
        &mut self,
        budget: &Budget,
        policy: Option<&Policy>,
        anchor: Timestamp,
    ) -> Result<(), StoreError> {
        self.ensure_renewal(budget)?;
        let anchor = policy.map(|_| anchor.to_string());
        let [interval, zone, every, allowance, rollover, anchor] =
            policy_params(policy, anchor.as_deref());
        self.db().send(
            "UPDATE budget_renewals SET period_interval = ?2, period_time_zone = ?3, \
             period_every_seconds = ?4, period_allowance_atomic = ?5, \
             period_rollover_max_atomic = ?6, period_anchor = ?7 WHERE budget_id = ?1",
            &[
                budget.id.as_str().into(),
                interval,
                zone,
                every,
                allowance,
                rollover,
                anchor,
            ],
        )?;
        Ok(())
    }

    /// Writes `budget`'s alert thresholds.
    pub(crate) fn write_thresholds(&mut self, budget: &Budget) -> Result<(), StoreError> {
        self.ensure_renewal(budget)?;
        let thresholds = budget.thresholds.to_column();
        self.db().send(
            "UPDATE budget_renewals SET alert_thresholds = ?2 WHERE budget_id = ?1",
            &[budget.id.as_str().into(), Param::Text(&thresholds)],
        )?;
        Ok(())
    }

    /// Makes `budget`'s renewal row (no policy, no thresholds) if it has none yet.
    fn ensure_renewal(&mut self, budget: &Budget) -> Result<(), StoreError> {
        self.db().send(
            "INSERT INTO budget_renewals (budget_id) VALUES (?1) \
             ON CONFLICT (budget_id) DO NOTHING",
            &[budget.id.as_str().into()],
        )?;
        Ok(())
    }
}

/// A policy's six columns, in their order (interval, time zone, length, allowance, rollover
/// cap, anchor); all NULL for none.
fn policy_params<'a>(policy: Option<&'a Policy>, anchor: Option<&'a str>) -> [Param<'a>; 6] {
    let (interval, zone, every) = match policy.map(|p| &p.cadence) {
        Some(Cadence::Calendar { interval, zone }) => {
            (Some(interval.name()), Some(zone.name()), None)
        }
        Some(Cadence::Fixed { every_seconds }) => (None, None, Some(i64::from(*every_seconds))),
        None => (None, None, None),
    };
    [
        interval.into(),
        zone.into(),
        every.into(),
        policy.map(|p| p.allowance).into(),
        policy.map(|p| p.rollover_max).into(),
        anchor.into(),
    ]
}
