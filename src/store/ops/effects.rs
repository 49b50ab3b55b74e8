//! What several operations write alike: a budget's figures, its ledger entries, a
//! reservation's new state, a budget closed, its periods begun and ended, and the expiries
//! and boundaries recorded before anything else touches a budget.

use crate::audit::Actor;
use crate::domain::rules::{self, Change, Draft};
use crate::domain::{
    Atomic, Budget, BudgetId, BudgetState, Cadence, Closing, CurrentPeriod, EntryId, LedgerEntry,
    Memo, PeriodId, Policy, Refusal, Reservation, ReservationId, Statement, TenantId, Timestamp,
};
use crate::store::rows::{self, PERIOD_COLUMNS};
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::{StoreError, queries};
use crate::views::EventData;

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::InsufficientFunds { available } => Self::InsufficientFunds(available),
            Refusal::Overflow => Self::AmountOverflow,
            Refusal::Corrupt => Self::Internal("a stored budget breaks the invariant".into()),
            Refusal::NotActive { state } => Self::ReservationNotActive(state),
            Refusal::NotDue => Self::Internal("an expiry before the hold's time".into()),
        }
    }
}

/// What a sweep found due, and how many of those it could not record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Expiries found due.
    pub(crate) found: usize,
    /// Of those, expiries that failed and stay due.
    pub(crate) failed: usize,
}

impl<D: Sql> WriterState<D> {
    /// Records up to `limit` expiries that are due at `now`, of any budget, each with every
    /// boundary of its budget that fell due before it ([`WriterState::catch_up_budget`]).
    ///
    /// Each budget is caught up in a savepoint of its own: one that fails (a row that cannot
    /// be read, a budget that breaks the invariant) is logged and left due, and the others are
    /// recorded; the writer then tries again after a pause rather than at once.
    pub(crate) fn sweep(&mut self, now: Timestamp, limit: usize) -> Result<Swept, StoreError> {
        let due = queries::due(self.db(), now, limit)?;
        let mut swept = Swept {
            found: due.len(),
            failed: 0,
        };
        let mut caught_up = std::collections::BTreeSet::new();
        for reservation in due {
            if !caught_up.insert(reservation.budget_id.clone()) {
                continue;
            }
            let (tenant, budget) = (reservation.tenant_id, reservation.budget_id);
            if self
                .catch_up_guarded(&tenant, &budget, now, usize::MAX)?
                .is_none()
            {
                swept.failed += 1;
            }
        }
        if swept.failed == 0 && swept.found < limit {
            let soonest = queries::next_expiry(self.db())?.unwrap_or(Timestamp::MAX);
            self.set_next_expiry(soonest);
        }
        Ok(swept)
    }

    /// Records up to about `limit` period boundaries due at `now`, soonest first, each budget
    /// with its expiries in between ([`WriterState::catch_up_budget`]), in savepoints of their
    /// own as [`WriterState::sweep`] does.
    pub(crate) fn sweep_boundaries(
        &mut self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Swept, StoreError> {
        let due = queries::due_boundaries(self.db(), now, limit)?;
        let mut swept = Swept {
            found: 0,
            failed: 0,
        };
        let mut left = limit;
        for (tenant, budget) in due {
            if left == 0 {
                break;
            }
            let recorded = match self.catch_up_guarded(&tenant, &budget, now, left)? {
                Some(boundaries) => boundaries,
                None => {
                    swept.failed += 1;
                    0
                }
            };
            swept.found += recorded;
            left = left.saturating_sub(recorded.max(1));
        }
        if swept.failed == 0 && left > 0 {
            let soonest = queries::next_boundary(self.db())?.unwrap_or(Timestamp::MAX);
            self.set_next_boundary(soonest);
        }
        Ok(swept)
    }

    /// Catches budget `budget` up to `now` (at most `limit` boundaries) in a savepoint of its
    /// own: how many boundaries it recorded, or `None` when it failed (logged) and stays due.
    /// An error only when the savepoint could not be closed, which poisons the batch.
    fn catch_up_guarded(
        &mut self,
        tenant: &TenantId,
        budget: &BudgetId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Option<usize>, StoreError> {
        let caught_up = self.guarded(true, |w| {
            let mut budget = queries::budget(w.db(), tenant, Some(budget))?;
            if !budget.is_open() {
                return Ok(0);
            }
            w.catch_up_budget_by(&mut budget, now, limit)
        });
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned.clone());
        }
        Ok(caught_up
            .inspect_err(|e| {
                log::error!(
                    "the expiries and boundaries of budget {budget} cannot be recorded: {e:?}"
                )
            })
            .ok())
    }

    /// The tenant, if it exists and is active: `404`, then `409 tenant_tombstoned`.
    pub(crate) fn active_tenant(&mut self, tenant: &TenantId) -> Result<(), StoreError> {
        match queries::tenant_active(self.db(), tenant)? {
            None => Err(StoreError::TenantNotFound),
            Some(false) => Err(StoreError::TenantTombstoned),
            Some(true) => Ok(()),
        }
    }

    /// A budget that may move now, with its due expiries recorded: `404` (tenant, budget),
    /// then `409` (`tenant_tombstoned`, `budget_closed`).
    pub(crate) fn open_budget(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
        now: Timestamp,
    ) -> Result<Budget, StoreError> {
        let (mut budget, active) = queries::budget_to_write(self.db(), tenant, id)?;
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if !budget.is_open() {
            return Err(StoreError::BudgetClosed);
        }
        self.catch_up_budget(&mut budget, now)?;
        Ok(budget)
    }

    /// Records, in the order they fell due, every expiry of a reservation of `budget` and
    /// every boundary of its period up to `now`: the holds that ran out by a boundary return
    /// before it, so each boundary sees what was available at its instant. Cheap when nothing
    /// is due: the writer knows the soonest expiry, and the budget its next boundary. How
    /// many boundaries it recorded.
    pub(crate) fn catch_up_budget(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        self.catch_up_budget_by(budget, now, usize::MAX)
    }

    /// [`WriterState::catch_up_budget`], stopping after `limit` boundaries; a budget left
    /// with a boundary due has no expiry after it recorded either.
    fn catch_up_budget_by(
        &mut self,
        budget: &mut Budget,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut boundaries = 0;
        while let Some(ends_at) = budget.current.as_ref().map(|c| c.ends_at)
            && ends_at <= now
        {
            if boundaries == limit {
                return Ok(boundaries);
            }
            self.expire_due_by(budget, ends_at)?;
            self.boundary(budget, ends_at, now)?;
            boundaries += 1;
        }
        self.expire_due_by(budget, now)?;
        Ok(boundaries)
    }

    /// Records the expiry of every reservation of `budget` whose time is up at `by`.
    fn expire_due_by(&mut self, budget: &mut Budget, by: Timestamp) -> Result<(), StoreError> {
        if self.next_expiry() > by {
            return Ok(());
        }
        let now = self.now();
        for reservation in queries::due_in_budget(self.db(), &budget.id, by)? {
            self.expire(budget, reservation, now)?;
        }
        Ok(())
    }

    /// Records the boundary of `budget`'s current period at `at` (recorded at `now`): the
    /// period closes, the next begins with its refill or forfeit entry, by the system.
    fn boundary(
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
        let entry = self.append_entry(budget, draft, at)?;
        self.record(now, &Actor::System, &reset.change.event)?;
        self.publish(now, EventData::PeriodReset(budget, &closed, &entry))?;
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

    /// Records one expiry: the hold returns, an `expire` entry, a `reservation.expired` audit
    /// event by the system, and its event.
    fn expire(
        &mut self,
        budget: &mut Budget,
        mut reservation: Reservation,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let expired = rules::expire(budget.figures, &reservation.hold(), now)?;
        reservation.state = expired.state;
        self.write_reservation(&reservation)?;
        self.apply(budget, expired.change, &Actor::System, now)?;
        self.publish(now, EventData::ReservationExpired(&reservation, budget))
    }

    /// Writes what a rule decided for `budget`: its figures and its entry, if it moved money
    /// (a rule that writes no entry leaves the figures as they were: an extend), its audit
    /// event by `actor`, the event of a credit or a debit, and a `budget.available_low` for
    /// each threshold it crossed. The entry, if any.
    pub(crate) fn apply(
        &mut self,
        budget: &mut Budget,
        change: Change,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<Option<LedgerEntry>, StoreError> {
        let before = budget.figures;
        let entry = match change.entry {
            Some(draft) => {
                budget.figures = change.figures;
                self.write_figures(budget)?;
                Some(self.append_entry(budget, draft, now)?)
            }
            None => {
                debug_assert_eq!(
                    change.figures, budget.figures,
                    "a rule that writes no entry moves no figure"
                );
                None
            }
        };
        self.record(now, actor, &change.event)?;
        if let Some(entry) = &entry {
            self.publish(now, EventData::BudgetMoved(budget, entry))?;
            self.alert(budget, &before, now)?;
        }
        Ok(entry)
    }

    /// Closes `budget` (a close or a tombstone): every active hold returns, a `release` entry
    /// each and no event of their own; the figures are written and the budget is marked
    /// closed at `now`.
    pub(crate) fn close(&mut self, budget: &mut Budget, now: Timestamp) -> Result<(), StoreError> {
        let mut active = queries::active_in_budget(self.db(), &budget.id)?;
        let holds: Vec<_> = active.iter().map(Reservation::hold).collect();
        let (figures, released) = rules::release_all(budget.figures, &holds, now)?;
        for (reservation, (draft, state, after)) in active.iter_mut().zip(released) {
            budget.figures = after;
            reservation.state = state;
            self.write_reservation(reservation)?;
            self.append_entry(budget, draft, now)?;
        }
        budget.figures = figures;
        self.write_figures(budget)?;
        self.end_period(budget, now)?;
        budget.state = BudgetState::Closed { at: now };
        self.db().send(
            "UPDATE budgets SET state = ?2, closed_at = ?3 WHERE id = ?1",
            &[
                budget.id.as_str().into(),
                budget.state.name().into(),
                Param::Text(&now.to_string()),
            ],
        )?;
        self.counts().budget_moved(&budget.state);
        Ok(())
    }

    /// Inserts a new open budget, its renewal if it has a policy or thresholds, its first
    /// period if it has a policy, and its opening-deposit entry (in that period).
    pub(crate) fn insert_budget(&mut self, budget: &mut Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::figure_params(&budget.figures);
        // A clash on an open budget's name comes back as `BudgetNameTaken`.
        self.db().send(
            "INSERT INTO budgets (id, tenant_id, name, unit, state, created_at, closed_at, \
             opening_deposit_atomic, credited_atomic, debited_atomic, spent_atomic, \
             reserved_atomic) \
             VALUES (?1, ?2, ?3, ?4, 'open', ?5, NULL, ?6, ?7, ?8, ?9, ?10)",
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
        self.insert_entry(&LedgerEntry::opening(budget))
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

    /// Writes the budget's figures.
    pub(crate) fn write_figures(&mut self, budget: &Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::figure_params(&budget.figures);
        self.db().send(
            "UPDATE budgets SET credited_atomic = ?2, debited_atomic = ?3, \
             spent_atomic = ?4, reserved_atomic = ?5 WHERE id = ?1",
            &[
                budget.id.as_str().into(),
                credited,
                debited,
                spent,
                reserved,
            ],
        )?;
        Ok(())
    }

    /// Writes the reservation's state and expiry (only an active reservation is written), and
    /// counts a settlement.
    pub(crate) fn write_reservation(
        &mut self,
        reservation: &Reservation,
    ) -> Result<(), StoreError> {
        self.db().send(
            "UPDATE reservations SET state = ?2, committed_atomic = ?3, expires_at = ?4, \
             settled_at = ?5 WHERE id = ?1",
            &[
                reservation.id.as_str().into(),
                reservation.state.name().into(),
                reservation.state.committed().into(),
                Param::Text(&reservation.expires_at.to_string()),
                reservation
                    .state
                    .settled_at()
                    .map(|t| t.to_string())
                    .as_ref()
                    .into(),
            ],
        )?;
        self.counts().reservation_moved(&reservation.state);
        Ok(())
    }

    /// Appends the entry a rule drafted, of a movement that left `budget` with its current
    /// figures.
    fn append_entry(
        &mut self,
        budget: &Budget,
        draft: Draft,
        now: Timestamp,
    ) -> Result<LedgerEntry, StoreError> {
        let figure = |value: Option<u128>| {
            value
                .map(Atomic::new)
                .ok_or_else(|| StoreError::Internal("a movement broke the invariant".into()))
        };
        let entry = LedgerEntry {
            id: EntryId::from_ulid(self.next_ulid(now)),
            budget_id: budget.id.clone(),
            kind: draft.kind,
            amount: draft.amount,
            reservation_id: draft.reservation,
            memo: draft.memo,
            occurred_at: now,
            balance: figure(budget.figures.balance())?,
            available: figure(budget.figures.available())?,
            period_id: budget.current.as_ref().map(|c| c.id.clone()),
        };
        self.insert_entry(&entry)?;
        Ok(entry)
    }

    fn insert_entry(&mut self, entry: &LedgerEntry) -> Result<(), StoreError> {
        self.db().send(
            "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, reservation_id, \
             memo, occurred_at, balance_atomic, available_atomic, period_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            &[
                entry.id.as_str().into(),
                entry.budget_id.as_str().into(),
                entry.kind.name().into(),
                entry.amount.into(),
                entry
                    .reservation_id
                    .as_ref()
                    .map(ReservationId::as_str)
                    .into(),
                entry.memo.as_ref().map(Memo::as_str).into(),
                Param::Text(&entry.occurred_at.to_string()),
                entry.balance.into(),
                entry.available.into(),
                entry.period_id.as_ref().map(PeriodId::as_str).into(),
            ],
        )?;
        self.counts().entry(entry.kind);
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
