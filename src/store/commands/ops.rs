//! The writer's commands: every change of a tenant, a budget or a reservation, each with its
//! ledger entries and its audit event, inside the batch's transaction.
//!
//! A command reads what it changes, decides with checked arithmetic ([`Figures`]) and writes
//! the result, all on the one connection that writes, inside its own savepoint: there is no
//! window between a check and its act. Refusals follow the contract's order: `404` (tenant,
//! then budget or reservation), then `409` (`tenant_tombstoned`, `budget_closed`,
//! `reservation_not_active`, then the others).
//!
//! Before a command touches a budget it records the expiry of every reservation of that
//! budget whose time is up, so no entry ever counts an expired hold.

use super::Commands;
use crate::audit::{Actor, AuditEvent};
use crate::domain::{
    Atomic, Budget, BudgetId, BudgetState, DEFAULT_BUDGET_NAME, EntryId, EntryKind, Figures,
    LedgerEntry, Memo, Movement, Name, NewBudget, NewReservation, NewTenant, Refusal, Reservation,
    ReservationId, ReservationState, Settle, Tenant, TenantId, TenantState, Timestamp, Unit,
};
use crate::ids::TenantToken;
use crate::store::queries;
use crate::store::sql::{Param, Sql};
use crate::store::{Created, StoreError};

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::InsufficientFunds { available } => Self::InsufficientFunds(available),
            Refusal::Overflow => Self::AmountOverflow,
            Refusal::Corrupt => Self::Internal("a stored budget breaks the invariant".into()),
        }
    }
}

/// The index of a budget state in the metrics' counts.
fn budget_slot(state: &BudgetState) -> usize {
    match state {
        BudgetState::Open => 0,
        BudgetState::Closed { .. } => 1,
    }
}

/// The index of a reservation state in the metrics' counts.
fn reservation_slot(state: &ReservationState) -> usize {
    match state {
        ReservationState::Active => 0,
        ReservationState::Committed { .. } => 1,
        ReservationState::Released { .. } => 2,
        ReservationState::Expired { .. } => 3,
    }
}

/// The index of an entry kind in the metrics' counts.
fn entry_slot(kind: EntryKind) -> usize {
    EntryKind::ALL
        .iter()
        .position(|k| *k == kind)
        .expect("every kind is listed")
}

/// What a sweep found due, and how many of those it could not record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Expiries found due.
    pub(crate) found: usize,
    /// Of those, expiries that failed and stay due.
    pub(crate) failed: usize,
}

impl<D: Sql> Commands<D> {
    /// The time now: never earlier than a time this writer already used, so that events,
    /// entries and expiries stay in order when the system clock steps back.
    pub(crate) fn now(&mut self) -> Timestamp {
        self.last_now = self.last_now.max(self.clock.now());
        self.last_now
    }

    /// A new ULID for an id of any kind.
    fn next_ulid(&mut self, now: Timestamp) -> ulid::Ulid {
        self.ids.next(now.unix_ms())
    }

    pub(crate) fn create_tenant(
        &mut self,
        new: &NewTenant,
        actor: &Actor,
    ) -> Result<Created, StoreError> {
        let now = self.now();
        let id = TenantId::from_ulid(self.next_ulid(now));
        let token = TenantToken::mint(&id);
        // A clash on the active tenants' names comes back as `TenantNameTaken`.
        self.db.send(
            "INSERT INTO tenants (id, name, state, opening_deposit_atomic, token_hash, \
             created_at, tombstoned_at) VALUES (?1, ?2, 'active', ?3, ?4, ?5, NULL)",
            &[
                id.as_str().into(),
                new.name.as_str().into(),
                new.opening_deposit.into(),
                Param::Bytes(&token.hash()[..]),
                Param::Text(&now.to_string()),
            ],
        )?;
        let budget = Budget {
            id: id.default_budget(),
            tenant_id: id.clone(),
            name: Name::parse(DEFAULT_BUDGET_NAME).expect("a valid name"),
            unit: Unit::atomic(),
            state: BudgetState::Open,
            created_at: now,
            opening_deposit: new.opening_deposit,
            figures: Figures::opening(new.opening_deposit),
        };
        self.insert_budget(&budget)?;
        let event = AuditEvent::TenantCreated {
            id: id.clone(),
            name: new.name.clone(),
            opening_deposit: new.opening_deposit,
        };
        self.record(&now.to_string(), actor, &event)?;
        self.delta.created += 1;
        #[cfg(test)]
        self.inject_faults(new.name.as_str());
        Ok(Created {
            tenant: Tenant {
                id,
                name: new.name.clone(),
                created_at: now,
                state: TenantState::Active,
                budget,
            },
            token,
        })
    }

    pub(crate) fn tombstone_tenant(
        &mut self,
        id: &TenantId,
        actor: &Actor,
    ) -> Result<Tenant, StoreError> {
        let tenant = queries::tenant(&mut self.db, id)?.ok_or(StoreError::TenantNotFound)?;
        if tenant.state != TenantState::Active {
            return Ok(tenant);
        }
        let now = self.now();
        for budget in queries::open_budgets(&mut self.db, id)? {
            let mut budget = queries::budget(&mut self.db, id, Some(&budget))?;
            self.expire_due_in(&mut budget, now)?;
            self.release_all(&mut budget, now)?;
            self.mark_closed(&budget, now)?;
        }
        self.db.send(
            "UPDATE tenants SET state = 'tombstoned', tombstoned_at = ?2 WHERE id = ?1",
            &[id.as_str().into(), Param::Text(&now.to_string())],
        )?;
        self.record(
            &now.to_string(),
            actor,
            &AuditEvent::TenantTombstoned { id: id.clone() },
        )?;
        self.delta.tombstoned += 1;
        queries::tenant(&mut self.db, id)?
            .ok_or_else(|| StoreError::Internal(format!("tenant {id} vanished")))
    }

    pub(crate) fn create_budget(
        &mut self,
        tenant: &TenantId,
        new: &NewBudget,
        actor: &Actor,
    ) -> Result<Budget, StoreError> {
        self.active_tenant(tenant)?;
        let now = self.now();
        let budget = Budget {
            id: BudgetId::from_ulid(self.next_ulid(now)),
            tenant_id: tenant.clone(),
            name: new.name.clone(),
            unit: new.unit.clone(),
            state: BudgetState::Open,
            created_at: now,
            opening_deposit: new.opening_deposit,
            figures: Figures::opening(new.opening_deposit),
        };
        self.insert_budget(&budget)?;
        let event = AuditEvent::BudgetCreated {
            tenant: tenant.clone(),
            id: budget.id.clone(),
            name: budget.name.clone(),
            unit: budget.unit.clone(),
            opening_deposit: budget.opening_deposit,
        };
        self.record(&now.to_string(), actor, &event)?;
        Ok(budget)
    }

    pub(crate) fn close_budget(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
        actor: &Actor,
    ) -> Result<Budget, StoreError> {
        let (mut budget, active) = queries::budget_to_write(&mut self.db, tenant, id)?;
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if !budget.is_open() {
            return Ok(budget);
        }
        let now = self.now();
        self.expire_due_in(&mut budget, now)?;
        self.release_all(&mut budget, now)?;
        self.mark_closed(&budget, now)?;
        let event = AuditEvent::BudgetClosed {
            tenant: tenant.clone(),
            id: budget.id.clone(),
        };
        self.record(&now.to_string(), actor, &event)?;
        budget.state = BudgetState::Closed { at: now };
        Ok(budget)
    }

    pub(crate) fn move_budget(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
        movement: &Movement,
        actor: &Actor,
    ) -> Result<LedgerEntry, StoreError> {
        let now = self.now();
        let mut budget = self.open_budget(tenant, id, now)?;
        let amount = movement.amount;
        budget.figures = budget.figures.moved(movement.direction, amount.get())?;
        self.write_figures(&budget)?;
        let kind = movement.direction.entry_kind();
        let entry = self.append_entry(&budget, kind, amount, None, movement.memo.clone(), now)?;
        let event = AuditEvent::BudgetMoved {
            tenant: tenant.clone(),
            budget: budget.id.clone(),
            direction: movement.direction,
            amount,
            memo: movement.memo.clone(),
        };
        self.record(&now.to_string(), actor, &event)?;
        Ok(entry)
    }

    pub(crate) fn reserve(
        &mut self,
        tenant: &TenantId,
        new: &NewReservation,
        actor: &Actor,
    ) -> Result<Reservation, StoreError> {
        let now = self.now();
        let mut budget = self.open_budget(tenant, new.budget_id().as_ref(), now)?;
        budget.figures = budget.figures.reserve(new.amount.get())?;
        let reservation = Reservation {
            id: ReservationId::from_ulid(self.next_ulid(now)),
            tenant_id: tenant.clone(),
            budget_id: budget.id.clone(),
            state: ReservationState::Active,
            amount: new.amount,
            memo: new.memo.clone(),
            created_at: now,
            expires_at: now.plus_seconds(new.ttl.seconds()),
        };
        self.db.send(
            "INSERT INTO reservations (id, tenant_id, budget_id, state, amount_atomic, \
             committed_atomic, memo, created_at, expires_at, settled_at) \
             VALUES (?1, ?2, ?3, 'active', ?4, NULL, ?5, ?6, ?7, NULL)",
            &[
                reservation.id.as_str().into(),
                tenant.as_str().into(),
                budget.id.as_str().into(),
                reservation.amount.into(),
                reservation.memo.as_ref().map(Memo::as_str).into(),
                Param::Text(&now.to_string()),
                Param::Text(&reservation.expires_at.to_string()),
            ],
        )?;
        self.write_figures(&budget)?;
        self.append_entry(
            &budget,
            EntryKind::Reserve,
            reservation.amount,
            Some(&reservation.id),
            None,
            now,
        )?;
        let event = AuditEvent::ReservationCreated {
            tenant: tenant.clone(),
            id: reservation.id.clone(),
            budget: budget.id.clone(),
            amount: reservation.amount,
            expires_at: reservation.expires_at,
        };
        self.record(&now.to_string(), actor, &event)?;
        self.delta.reservations[reservation_slot(&ReservationState::Active)] += 1;
        self.next_expiry = self.next_expiry.min(reservation.expires_at);
        Ok(reservation)
    }

    pub(crate) fn settle(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
        settle: Settle,
        actor: &Actor,
    ) -> Result<Reservation, StoreError> {
        let now = self.now();
        let (mut reservation, active, mut budget) =
            queries::reservation_to_settle(&mut self.db, tenant, id)?;
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if budget.is_open() {
            self.expire_due_in(&mut budget, now)?;
        }
        let state = reservation.effective_state(now);
        if state != "active" {
            return Err(StoreError::ReservationNotActive(state));
        }
        // An active reservation's budget is open: closing releases every reservation.
        let held = reservation.amount;
        let (event, kind, entry_amount) = match settle {
            Settle::Commit(spent) => {
                budget.figures = budget.figures.commit(held.get(), spent.get())?;
                reservation.state = ReservationState::Committed {
                    amount: spent,
                    at: now,
                };
                let event = AuditEvent::ReservationCommitted {
                    tenant: tenant.clone(),
                    id: reservation.id.clone(),
                    amount: spent,
                };
                (event, Some(EntryKind::Commit), spent)
            }
            Settle::Release => {
                budget.figures = budget.figures.release(held.get())?;
                reservation.state = ReservationState::Released { at: now };
                let event = AuditEvent::ReservationReleased {
                    tenant: tenant.clone(),
                    id: reservation.id.clone(),
                };
                (event, Some(EntryKind::Release), held)
            }
            Settle::Extend(ttl) => {
                // A shorter TTL than the hold had brings its expiry forward.
                reservation.expires_at = now.plus_seconds(ttl.seconds());
                self.next_expiry = self.next_expiry.min(reservation.expires_at);
                let event = AuditEvent::ReservationExtended {
                    tenant: tenant.clone(),
                    id: reservation.id.clone(),
                    expires_at: reservation.expires_at,
                };
                (event, None, held)
            }
        };
        self.write_reservation(&reservation)?;
        if let Some(kind) = kind {
            self.write_figures(&budget)?;
            self.append_entry(
                &budget,
                kind,
                entry_amount,
                Some(&reservation.id),
                None,
                now,
            )?;
        }
        self.record(&now.to_string(), actor, &event)?;
        Ok(reservation)
    }

    /// Records up to `limit` expiries that are due at `now`, of any budget.
    ///
    /// Each expiry runs in a savepoint of its own: one that fails (a row that cannot be read,
    /// a budget that breaks the invariant) is logged and left due, and the others are
    /// recorded; the writer then tries again after a pause rather than at once.
    pub(crate) fn sweep(&mut self, now: Timestamp, limit: usize) -> Result<Swept, StoreError> {
        let due = queries::due(&mut self.db, now, limit)?;
        let mut swept = Swept {
            found: due.len(),
            failed: 0,
        };
        for reservation in due {
            let id = reservation.id.clone();
            let expired = self.guarded(true, |w| {
                let mut budget = queries::budget(
                    &mut w.db,
                    &reservation.tenant_id,
                    Some(&reservation.budget_id),
                )?;
                w.expire(&mut budget, reservation, now)
            });
            // A savepoint that could not be closed poisons the whole batch: stop here and
            // leave the flag for the batch to see.
            if let Some(poisoned) = &self.poisoned {
                return Err(poisoned.clone());
            }
            if let Err(e) = expired {
                log::error!("the expiry of reservation {id} cannot be recorded: {e:?}");
                swept.failed += 1;
            }
        }
        if swept.failed == 0 && swept.found < limit {
            self.next_expiry = queries::next_expiry(&mut self.db)?.unwrap_or(Timestamp::MAX);
        }
        Ok(swept)
    }

    /// The tenant, if it exists and is active: `404`, then `409 tenant_tombstoned`.
    fn active_tenant(&mut self, tenant: &TenantId) -> Result<(), StoreError> {
        match queries::tenant_active(&mut self.db, tenant)? {
            None => Err(StoreError::TenantNotFound),
            Some(false) => Err(StoreError::TenantTombstoned),
            Some(true) => Ok(()),
        }
    }

    /// A budget that may move now, with its due expiries recorded: `404` (tenant, budget),
    /// then `409` (`tenant_tombstoned`, `budget_closed`).
    fn open_budget(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
        now: Timestamp,
    ) -> Result<Budget, StoreError> {
        let (mut budget, active) = queries::budget_to_write(&mut self.db, tenant, id)?;
        if !active {
            return Err(StoreError::TenantTombstoned);
        }
        if !budget.is_open() {
            return Err(StoreError::BudgetClosed);
        }
        self.expire_due_in(&mut budget, now)?;
        Ok(budget)
    }

    /// Records the expiry of every reservation of `budget` whose time is up at `now`. Cheap
    /// when nothing anywhere is due: the writer knows the soonest expiry.
    fn expire_due_in(&mut self, budget: &mut Budget, now: Timestamp) -> Result<(), StoreError> {
        if self.next_expiry > now {
            return Ok(());
        }
        for reservation in queries::due_in_budget(&mut self.db, &budget.id, now)? {
            self.expire(budget, reservation, now)?;
        }
        Ok(())
    }

    /// Records one expiry: the hold returns, an `expire` entry, a `reservation.expired` event
    /// by the system.
    fn expire(
        &mut self,
        budget: &mut Budget,
        mut reservation: Reservation,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        budget.figures = budget.figures.release(reservation.amount.get())?;
        reservation.state = ReservationState::Expired { at: now };
        self.write_reservation(&reservation)?;
        self.write_figures(budget)?;
        self.append_entry(
            budget,
            EntryKind::Expire,
            reservation.amount,
            Some(&reservation.id),
            None,
            now,
        )?;
        let event = AuditEvent::ReservationExpired {
            tenant: reservation.tenant_id.clone(),
            id: reservation.id.clone(),
        };
        self.record(&now.to_string(), &Actor::System, &event)?;
        Ok(())
    }

    /// Releases every active reservation of `budget` (a close or a tombstone): a `release`
    /// entry each, and no event of their own.
    fn release_all(&mut self, budget: &mut Budget, now: Timestamp) -> Result<(), StoreError> {
        for mut reservation in queries::active_in_budget(&mut self.db, &budget.id)? {
            budget.figures = budget.figures.release(reservation.amount.get())?;
            reservation.state = ReservationState::Released { at: now };
            self.write_reservation(&reservation)?;
            self.append_entry(
                budget,
                EntryKind::Release,
                reservation.amount,
                Some(&reservation.id),
                None,
                now,
            )?;
        }
        self.write_figures(budget)
    }

    /// Marks `budget` closed at `now` (its figures already written).
    fn mark_closed(&mut self, budget: &Budget, now: Timestamp) -> Result<(), StoreError> {
        self.db.send(
            "UPDATE budgets SET state = 'closed', closed_at = ?2 WHERE id = ?1",
            &[budget.id.as_str().into(), Param::Text(&now.to_string())],
        )?;
        self.delta.budgets[budget_slot(&BudgetState::Open)] -= 1;
        self.delta.budgets[budget_slot(&BudgetState::Closed { at: now })] += 1;
        Ok(())
    }

    /// Inserts a new open budget and its opening-deposit entry.
    fn insert_budget(&mut self, budget: &Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::figure_params(&budget.figures);
        // A clash on an open budget's name comes back as `BudgetNameTaken`.
        self.db.send(
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
        self.delta.budgets[budget_slot(&budget.state)] += 1;
        self.insert_entry(&LedgerEntry::opening(budget))
    }

    /// Writes the budget's figures.
    fn write_figures(&mut self, budget: &Budget) -> Result<(), StoreError> {
        let [credited, debited, spent, reserved] = queries::figure_params(&budget.figures);
        self.db.send(
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
    fn write_reservation(&mut self, reservation: &Reservation) -> Result<(), StoreError> {
        self.db.send(
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
        if reservation.state != ReservationState::Active {
            self.delta.reservations[reservation_slot(&ReservationState::Active)] -= 1;
            self.delta.reservations[reservation_slot(&reservation.state)] += 1;
        }
        Ok(())
    }

    /// Appends the entry of a movement that left `budget` with its current figures.
    fn append_entry(
        &mut self,
        budget: &Budget,
        kind: EntryKind,
        amount: Atomic,
        reservation: Option<&ReservationId>,
        memo: Option<Memo>,
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
            kind,
            amount,
            reservation_id: reservation.cloned(),
            memo,
            occurred_at: now,
            balance: figure(budget.figures.balance())?,
            available: figure(budget.figures.available())?,
        };
        self.insert_entry(&entry)?;
        Ok(entry)
    }

    fn insert_entry(&mut self, entry: &LedgerEntry) -> Result<(), StoreError> {
        self.db.send(
            "INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, reservation_id, \
             memo, occurred_at, balance_atomic, available_atomic) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
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
            ],
        )?;
        self.delta.entries[entry_slot(entry.kind)] += 1;
        Ok(())
    }
}
