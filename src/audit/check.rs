//! The checks of every stored row against what the events left: each tenant, budget,
//! reservation, period statement, webhook endpoint and ledger entry must be exactly what its
//! events say, and everything the events made must be stored.

use super::replay::{Replay, entry_digest};
use super::{Head, VerifyError};
use crate::domain::{
    Budget, BudgetId, BudgetState, Endpoint, EndpointState, EntryKind, Figures, LedgerEntry,
    Reservation, Statement, Tenant, Unit,
};

/// What to say of budget `id` whose stored figures are not the ones its events give: the
/// first figure that differs, as stored and as the events give it, in the budget's unit.
fn figures_differ(id: &BudgetId, unit: &Unit, stored: Figures, events: Figures) -> String {
    let named = |f: Figures| {
        [
            ("credited", f.credited),
            ("debited", f.debited),
            ("spent", f.spent),
            ("reserved", f.reserved),
        ]
    };
    let (figure, kept, given) = named(stored)
        .into_iter()
        .zip(named(events))
        .find(|((_, kept), (_, given))| kept != given)
        .map(|((figure, kept), (_, given))| (figure, kept, given))
        .expect("figures that differ differ in one of them");
    format!(
        "budget {id}'s stored {figure} figure is {}, but its events give {}",
        in_unit(kept, unit),
        in_unit(given, unit)
    )
}

/// An amount as a person reads it: in its budget's unit, or in atomic units for a budget made
/// without one.
fn in_unit(amount: u128, unit: &Unit) -> String {
    if *unit == Unit::atomic() {
        format!("{amount} atomic units")
    } else {
        format!("{amount} {}", unit.as_str())
    }
}

impl Replay {
    /// The verdict on one stored row: `differs` names what of it its events do not say.
    fn verdict(&self, row: &str, differs: Option<&str>) -> Result<(), VerifyError> {
        match differs {
            Some(what) => {
                Err(self.unaccounted(format!("{row}'s stored {what} is not what its events say")))
            }
            None => Ok(()),
        }
    }

    /// A stored row that no event made.
    fn unmade(&self, row: String, made_by: &str) -> VerifyError {
        self.unaccounted(format!("{row} has no {made_by} event"))
    }

    /// What to say when stored rows and events disagree.
    pub(crate) fn unaccounted(&self, reason: String) -> VerifyError {
        VerifyError::Unaccounted {
            head_seq: self.chain.head().seq,
            reason,
        }
    }

    /// Compares a stored tenant (its default budget aside) with its events.
    pub(crate) fn check_tenant(&mut self, stored: &Tenant) -> Result<(), VerifyError> {
        let id = &stored.id;
        let Some(replayed) = self.tenants.get_mut(id) else {
            return Err(self.unmade(format!("tenant {id}"), "tenant.created"));
        };
        replayed.stored = true;
        let differs = if replayed.name != stored.name {
            Some("name")
        } else if replayed.created_at != stored.created_at {
            Some("creation time")
        } else if replayed.tombstoned_at != stored.state.tombstoned_at() {
            Some("state or tombstone time")
        } else if stored.budget.id != id.default_budget() {
            Some("default budget")
        } else {
            None
        };
        self.verdict(&format!("tenant {id}"), differs)
    }

    /// Compares a stored webhook endpoint with its events (its memo and its secret are not
    /// audited).
    pub(crate) fn check_endpoint(&mut self, stored: &Endpoint) -> Result<(), VerifyError> {
        let id = &stored.id;
        let Some(replayed) = self.endpoints.get_mut(id) else {
            return Err(self.unmade(format!("webhook endpoint {id}"), "webhook_endpoint.created"));
        };
        replayed.stored = true;
        let state = match stored.state {
            EndpointState::Enabled => (true, false),
            EndpointState::Disabled(_) => (false, false),
            // A deleted endpoint's last `enabled` is whatever it was.
            EndpointState::Deleted => (replayed.enabled, true),
        };
        let differs = if replayed.url != stored.url {
            Some("url")
        } else if replayed.event_types != stored.event_types {
            Some("event types")
        } else if replayed.tenant != stored.tenant_id {
            Some("tenant")
        } else if (replayed.enabled, replayed.deleted) != state {
            Some("state")
        } else {
            None
        };
        self.verdict(&format!("webhook endpoint {id}"), differs)
    }

    /// Compares a stored budget with its events.
    pub(crate) fn check_budget(&mut self, stored: &Budget) -> Result<(), VerifyError> {
        let id = &stored.id;
        let Some(replayed) = self.budgets.get_mut(id) else {
            return Err(self.unmade(format!("budget {id}"), "tenant.created or budget.created"));
        };
        replayed.stored = true;
        let state = match replayed.closed_at {
            None => BudgetState::Open,
            Some(at) => BudgetState::Closed { at },
        };
        let differs = if replayed.tenant != stored.tenant_id {
            Some("tenant")
        } else if replayed.name != stored.name || replayed.unit != stored.unit {
            Some("name or unit")
        } else if replayed.created_at != stored.created_at {
            Some("creation time")
        } else if replayed.opening_deposit != stored.opening_deposit {
            Some("opening deposit")
        } else if replayed.parent != stored.parent_id {
            Some("parent")
        } else if replayed.figures != stored.figures {
            let said = figures_differ(id, &stored.unit, stored.figures, replayed.figures);
            return Err(self.unaccounted(said));
        } else if state != stored.state {
            Some("state or closing time")
        } else if replayed.policy.as_ref().map(|(p, _)| p) != stored.policy.as_ref() {
            Some("period policy")
        } else if replayed.thresholds != stored.thresholds {
            Some("alert thresholds")
        } else if replayed
            .periods
            .last()
            .filter(|_| replayed.current)
            .map(|p| (p.started_at, p.ends_at))
            != stored.current.as_ref().map(|c| (c.started_at, c.ends_at))
        {
            Some("current period")
        } else {
            None
        };
        self.verdict(&format!("budget {id}"), differs)
    }

    /// Compares a stored period statement with its events; statements come by budget, in
    /// order within one.
    pub(crate) fn check_period(&mut self, stored: &Statement) -> Result<(), VerifyError> {
        let row = format!("period {}", stored.id);
        let Some(budget) = self.budgets.get_mut(&stored.budget_id) else {
            return Err(self.unmade(row, "budget.created"));
        };
        let Some(replayed) = budget.periods.get(budget.periods_read) else {
            return Err(self.unaccounted(format!("{row} is one that no event begins")));
        };
        budget.periods_read += 1;
        let current = budget.current && budget.periods_read == budget.periods.len();
        let differs =
            if replayed.started_at != stored.started_at || replayed.ends_at != stored.ends_at {
                Some("times")
            } else if replayed.allowance != stored.allowance
                || replayed.carried_in != stored.carried_in
                || replayed.opening_available != stored.opening_available
                || replayed.start != stored.start
            {
                Some("opening figures")
            } else if replayed.closing != stored.closing || current != stored.closing.is_none() {
                Some("closing figures")
            } else {
                None
            };
        self.verdict(&row, differs)
    }

    /// Compares a stored reservation with its events.
    pub(crate) fn check_reservation(&mut self, stored: &Reservation) -> Result<(), VerifyError> {
        let id = &stored.id;
        let Some(replayed) = self.reservations.get_mut(id) else {
            return Err(self.unmade(format!("reservation {id}"), "reservation.created"));
        };
        replayed.stored = true;
        let differs = if replayed.tenant != stored.tenant_id || replayed.budget != stored.budget_id
        {
            Some("tenant or budget")
        } else if replayed.amount != stored.amount {
            Some("amount")
        } else if replayed.created_at != stored.created_at
            || replayed.expires_at != stored.expires_at
        {
            Some("times")
        } else if replayed.state != stored.state {
            Some("state")
        } else {
            None
        };
        self.verdict(&format!("reservation {id}"), differs)
    }

    /// Replays one ledger entry; entries come by budget, and in order within one. Each must
    /// move its budget's figures as its kind says and show the figures that result; a
    /// budget's last entry must leave exactly the figures its events give.
    pub(crate) fn check_entry(&mut self, entry: &LedgerEntry) -> Result<(), VerifyError> {
        let bad = |what: &str| format!("ledger entry {} {what}", entry.id);
        let (figures, digest) = match self.ledger.take() {
            Some((budget, figures, digest)) if budget == entry.budget_id => (figures, digest),
            previous => {
                self.end_ledger(previous)?;
                if entry.kind != EntryKind::OpeningDeposit
                    || entry.id != entry.budget_id.opening_entry()
                {
                    return Err(self.unaccounted(bad("is not its budget's opening deposit")));
                }
                if !self.ledgers_read.insert(entry.budget_id.clone()) {
                    return Err(self.unaccounted(bad("starts its budget's ledger a second time")));
                }
                (Figures::default(), [0; 32])
            }
        };
        let amount = entry.amount.get();
        let held = || -> Result<u128, String> {
            let id = entry
                .reservation_id
                .as_ref()
                .ok_or_else(|| bad("names no reservation"))?;
            // An ancestor's entry names a hold of the budget the spend was made on.
            let holder = entry.via_budget_id.as_ref().unwrap_or(&entry.budget_id);
            self.reservations
                .get(id)
                .filter(|r| r.budget == *holder)
                .map(|r| r.amount.get())
                .ok_or_else(|| bad("names a reservation of another budget"))
        };
        let moved = match entry.kind {
            EntryKind::OpeningDeposit if figures == Figures::default() => {
                Ok(Figures::opening(entry.amount))
            }
            EntryKind::OpeningDeposit => Err(bad("is a second opening deposit")),
            EntryKind::Credit => figures.credit(amount).map_err(|_| bad("overflows")),
            EntryKind::Debit => figures.debit(amount).map_err(|_| bad("overdraws")),
            EntryKind::Reserve => figures.reserve(amount).map_err(|_| bad("overspends")),
            EntryKind::Commit => {
                held().and_then(|held| figures.commit(held, amount).map_err(|_| bad("overspends")))
            }
            EntryKind::Release | EntryKind::Expire => figures
                .release(amount)
                .map_err(|_| bad("returns more than is held")),
            EntryKind::Charge => figures.charge(amount).map_err(|_| bad("overspends")),
            EntryKind::Refill => figures.credit(amount).map_err(|_| bad("overflows")),
            EntryKind::Forfeit => figures.debit(amount).map_err(|_| bad("overdraws")),
        }
        .map_err(|reason| self.unaccounted(reason))?;
        if moved.balance() != Some(entry.balance.get())
            || moved.available() != Some(entry.available.get())
        {
            return Err(self.unaccounted(bad("shows figures its movement does not give")));
        }
        let digest = entry_digest(
            &digest,
            entry.kind,
            entry.amount,
            (entry.reservation_id.as_ref(), entry.memo.as_ref()),
            entry.via_budget_id.as_ref(),
            entry.occurred_at,
        );
        self.ledger = Some((entry.budget_id.clone(), moved, digest));
        Ok(())
    }

    /// Ends the ledger of one budget: its entries must reach the figures its events give, and
    /// say, one by one, what its events imply (kind, amount, reservation, memo, time).
    fn end_ledger(&self, ledger: Option<(BudgetId, Figures, [u8; 32])>) -> Result<(), VerifyError> {
        let Some((budget, figures, digest)) = ledger else {
            return Ok(());
        };
        match self.budgets.get(&budget) {
            Some(b) if b.figures != figures => Err(self.unaccounted(format!(
                "budget {budget}'s ledger does not replay to its figures"
            ))),
            Some(b) if b.ledger != digest => Err(self.unaccounted(format!(
                "budget {budget}'s ledger entries are not the ones its events imply"
            ))),
            Some(_) => Ok(()),
            None => Err(self.unaccounted(format!(
                "ledger entries name budget {budget}, which no event creates"
            ))),
        }
    }

    /// Ends the replay: every tenant, budget and reservation the chain made must be stored,
    /// and the last ledger read must end where its budget's events do.
    pub(crate) fn finish(mut self) -> Result<Head, VerifyError> {
        let ledger = self.ledger.take();
        self.end_ledger(ledger)?;
        let missing = |seq: i64, what: String| VerifyError::Broken {
            seq,
            reason: format!("names {what}, which is not stored"),
        };
        if let Some((id, t)) = self.tenants.iter().find(|(_, t)| !t.stored) {
            return Err(missing(t.created_seq, format!("tenant {id}")));
        }
        if let Some((id, b)) = self.budgets.iter().find(|(_, b)| !b.stored) {
            return Err(missing(b.created_seq, format!("budget {id}")));
        }
        if let Some((id, r)) = self.reservations.iter().find(|(_, r)| !r.stored) {
            return Err(missing(r.created_seq, format!("reservation {id}")));
        }
        if let Some((id, e)) = self.endpoints.iter().find(|(_, e)| !e.stored) {
            return Err(missing(e.seq, format!("webhook endpoint {id}")));
        }
        if let Some(id) = self
            .budgets
            .keys()
            .find(|id| !self.ledgers_read.contains(*id))
        {
            return Err(self.unaccounted(format!("budget {id} has no ledger")));
        }
        if let Some(id) = self
            .budgets
            .iter()
            .find(|(_, b)| b.periods_read != b.periods.len())
            .map(|(id, _)| id)
        {
            return Err(self.unaccounted(format!(
                "budget {id}'s stored periods are not the ones its events begin"
            )));
        }
        Ok(self.chain.head().clone())
    }
}
