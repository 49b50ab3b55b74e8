//! A budget's periods as the writer moves them: a boundary recorded (the period closes, the
//! next begins with its refill or forfeit entry), a period begun, and one ended without a
//! boundary (a change of policy, a close).

use crate::audit::Actor;
use crate::domain::rules;
use crate::domain::{
    Atomic, Budget, Closing, CurrentPeriod, PeriodId, Policy, Statement, Timestamp,
};
use crate::store::StoreError;
use crate::store::rows::{self, PERIOD_COLUMNS};
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;

impl<D: Sql> WriterState<D> {
    /// Records the boundary of `budget`'s current period at `at` (recorded at `now`): the
    /// period closes, the next begins with its refill or forfeit entry, by the system.
    pub(super) fn boundary(
        &mut self,
        budget: &mut Budget,
        at: Timestamp,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let (Some(policy), Some(current)) = (budget.policy.clone(), budget.current.clone()) else {
            return Err(StoreError::Internal(
                "a boundary of a budget without a period".into(),
            ));
        };
        let before = budget.figures;
        let reset =
            rules::period_reset(&budget.tenant_id, &budget.id, budget.figures, &policy, at)?;
        let draft = reset
            .change
            .entry
            .ok_or_else(|| StoreError::Internal("a boundary without its entry".into()))?;
        let closed = self.close_period(&current.id, at, &reset.closing)?;
        budget.figures = reset.change.figures;
        self.write_figures(budget)?;
        self.begin_period(budget, &policy, current.anchor, at, reset.carried_in)?;
        let entry = self.append_entry(budget, draft, None, at)?;
        self.record(now, &Actor::System, &reset.change.event)?;
        self.publish_period_reset(now, budget, &closed, &entry)?;
        self.alert(budget, &before, now)
    }

    /// Begins a period of `policy` (set at `anchor`) at `at`, with `carried_in` carried over,
    /// on `budget`'s figures as they are: its statement, and the budget's current period.
    pub(crate) fn begin_period(
        &mut self,
        budget: &mut Budget,
        policy: &Policy,
        anchor: Timestamp,
        at: Timestamp,
        carried_in: Atomic,
    ) -> Result<(), StoreError> {
        let id = PeriodId::from_ulid(self.next_ulid(self.clock_now()));
        let current = CurrentPeriod {
            id,
            started_at: at,
            ends_at: policy.cadence.next_boundary(anchor, at),
            anchor,
        };
        let available = budget
            .figures
            .available()
            .ok_or_else(|| StoreError::Internal("a budget that breaks the invariant".into()))?;
        let f = &budget.figures;
        self.db().send(
            "INSERT INTO periods (id, budget_id, state, started_at, ends_at, allowance_atomic, \
             carried_in_atomic, opening_available_atomic, start_credited_atomic, \
             start_debited_atomic, start_spent_atomic) \
             VALUES (?1, ?2, 'current', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            &[
                current.id.as_str().into(),
                budget.id.as_str().into(),
                Param::Text(&at.to_string()),
                Param::Text(&current.ends_at.to_string()),
                policy.allowance.into(),
                carried_in.into(),
                Param::Amount(available),
                Param::Amount(f.credited),
                Param::Amount(f.debited),
                Param::Amount(f.spent),
            ],
        )?;
        self.db().send(
            "UPDATE budget_renewals SET period_id = ?2, period_started_at = ?3, \
             period_ends_at = ?4 WHERE budget_id = ?1",
            &[
                budget.id.as_str().into(),
                current.id.as_str().into(),
                Param::Text(&at.to_string()),
                Param::Text(&current.ends_at.to_string()),
            ],
        )?;
        self.lower_next_boundary(current.ends_at);
        budget.current = Some(current);
        Ok(())
    }

    /// Closes period `id` at `at`, as `closing` says; its totals are the closing figures less
    /// those it began with. Its statement, now closed.
    fn close_period(
        &mut self,
        id: &PeriodId,
        at: Timestamp,
        closing: &Closing,
    ) -> Result<Statement, StoreError> {
        let mut statement = self
            .db()
            .query_opt(
                &format!("SELECT {PERIOD_COLUMNS} FROM periods WHERE id = ?1"),
                &[id.as_str().into()],
                |row| rows::statement(row),
            )?
            .ok_or_else(|| StoreError::Internal(format!("the current period {id} is missing")))?;
        let totals = crate::domain::period_totals(&statement.start, &closing.end)
            .ok_or_else(|| StoreError::Internal(format!("period {id} ends below its start")))?;
        self.db().send(
            "UPDATE periods SET state = 'closed', ends_at = ?2, credited_atomic = ?3, \
             debited_atomic = ?4, spent_atomic = ?5, forfeited_atomic = ?6, \
             carried_out_atomic = ?7, closing_available_atomic = ?8 WHERE id = ?1",
            &[
                id.as_str().into(),
                Param::Text(&at.to_string()),
                Param::Amount(totals.0),
                Param::Amount(totals.1),
                Param::Amount(totals.2),
                closing.forfeited.into(),
                closing.carried_out.into(),
                closing.available.into(),
            ],
        )?;
        statement.ends_at = at;
        statement.closing = Some(*closing);
        Ok(statement)
    }

    /// Ends `budget`'s current period, if any, at `now` without a boundary (a change of
    /// policy, a close): nothing forfeited, all that is available carried out.
    pub(crate) fn end_period(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let Some(current) = budget.current.take() else {
            return Ok(());
        };
        let closing = rules::end_period(budget.figures)?;
        self.close_period(&current.id, now, &closing)?;
        self.db().send(
            "UPDATE budget_renewals SET period_id = NULL, period_started_at = NULL, \
             period_ends_at = NULL WHERE budget_id = ?1",
            &[budget.id.as_str().into()],
        )?;
        Ok(())
    }
}
