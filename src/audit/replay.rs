//! Verification by replay: the events, folded from `seq` 1, rebuild every tenant, budget and
//! reservation; the stored rows must be exactly what they say, and every budget's ledger must
//! replay to its figures. A balance edited behind the service's back is found even where the
//! chain itself is intact.

use std::collections::{BTreeMap, BTreeSet};

use super::{AuditEvent, Chain, Head, Linked, VerifyError};
use crate::crypto::sha256;
use crate::domain::rules::{self, Hold};
use crate::domain::{
    Atomic, Budget, BudgetId, BudgetState, Closing, Endpoint, EndpointId, EndpointState, EntryKind,
    EventTypes, Figures, LedgerEntry, Memo, Name, Policy, Reservation, ReservationId,
    ReservationState, Statement, Tenant, TenantId, Thresholds, Timestamp, Unit,
};

/// A tenant as its events leave it.
#[derive(Debug)]
pub(super) struct ReplayedTenant {
    pub(super) created_seq: i64,
    pub(super) created_at: Timestamp,
    pub(super) name: Name,
    pub(super) tombstoned_at: Option<Timestamp>,
    pub(super) budgets: Vec<BudgetId>,
    pub(super) stored: bool,
}

/// A budget as its events leave it.
#[derive(Debug)]
pub(super) struct ReplayedBudget {
    pub(super) created_seq: i64,
    pub(super) tenant: TenantId,
    pub(super) name: Name,
    pub(super) unit: Unit,
    pub(super) created_at: Timestamp,
    pub(super) opening_deposit: Atomic,
    pub(super) figures: Figures,
    pub(super) closed_at: Option<Timestamp>,
    pub(super) active: BTreeSet<ReservationId>,
    pub(super) stored: bool,
    /// The digest of the ledger its events imply, entry by entry (see [`entry_digest`]).
    pub(super) ledger: [u8; 32],
    /// Its period policy, and when it was set (a fixed length's anchor).
    pub(super) policy: Option<(Policy, Timestamp)>,
    pub(super) thresholds: Thresholds,
    /// Its periods, oldest first; the last is current while `current` says so.
    pub(super) periods: Vec<ReplayedPeriod>,
    /// Whether the last of `periods` is current.
    pub(super) current: bool,
    /// The statements read so far.
    pub(super) periods_read: usize,
}

/// A webhook endpoint as its events leave it.
#[derive(Debug)]
pub(super) struct ReplayedEndpoint {
    /// The row that made or last changed it.
    pub(super) seq: i64,
    pub(super) url: String,
    pub(super) event_types: EventTypes,
    pub(super) tenant: Option<TenantId>,
    pub(super) enabled: bool,
    pub(super) deleted: bool,
    pub(super) stored: bool,
}

/// A period as its events leave it: a statement without its id.
#[derive(Debug)]
pub(super) struct ReplayedPeriod {
    pub(super) started_at: Timestamp,
    pub(super) ends_at: Timestamp,
    pub(super) allowance: Atomic,
    pub(super) carried_in: Atomic,
    pub(super) opening_available: Atomic,
    pub(super) start: Figures,
    pub(super) closing: Option<Closing>,
}

impl ReplayedBudget {
    /// The current period's boundary, if it has one.
    pub(super) fn ends_at(&self) -> Option<Timestamp> {
        self.periods
            .last()
            .filter(|_| self.current)
            .map(|p| p.ends_at)
    }

    /// Refuses a change at `at` that comes after a boundary that was not recorded first.
    pub(super) fn on_time(&self, id: &BudgetId, at: Timestamp) -> Result<(), String> {
        match self.ends_at() {
            Some(ends_at) if ends_at <= at => Err(format!(
                "moves budget {id} at {at}, past its period's end at {ends_at}, before that \
                 boundary is recorded"
            )),
            _ => Ok(()),
        }
    }

    /// Begins a period at `at` with `carried_in` carried over, on the figures as they are.
    pub(super) fn begin_period(&mut self, at: Timestamp, carried_in: Atomic) -> Result<(), String> {
        let Some((policy, anchor)) = &self.policy else {
            return Ok(());
        };
        let opening_available = self
            .figures
            .available()
            .ok_or("a budget that breaks the invariant")?;
        self.periods.push(ReplayedPeriod {
            started_at: at,
            ends_at: policy.cadence.next_boundary(*anchor, at),
            allowance: policy.allowance,
            carried_in,
            opening_available: Atomic::new(opening_available),
            start: Figures {
                reserved: 0,
                ..self.figures
            },
            closing: None,
        });
        self.current = true;
        Ok(())
    }

    /// Ends the current period, if any, at `at`, as `closing` says.
    pub(super) fn end_period(&mut self, at: Timestamp, closing: Closing) {
        if let Some(period) = self.periods.last_mut().filter(|_| self.current) {
            period.ends_at = at;
            period.closing = Some(closing);
        }
        self.current = false;
    }
}

/// Why a change of reservation `id` could not be made: it had ended (in `state`).
pub(super) fn not_active(id: &ReservationId, state: &ReservationState) -> String {
    if matches!(state, ReservationState::Expired { .. }) {
        format!("acts on reservation {id} after it expired")
    } else {
        format!("settles reservation {id} twice")
    }
}

/// A reservation as its events leave it.
#[derive(Debug)]
pub(super) struct ReplayedReservation {
    pub(super) created_seq: i64,
    pub(super) tenant: TenantId,
    pub(super) budget: BudgetId,
    pub(super) amount: Atomic,
    pub(super) created_at: Timestamp,
    pub(super) expires_at: Timestamp,
    pub(super) state: ReservationState,
    pub(super) stored: bool,
}

impl ReplayedReservation {
    /// The reservation `id` as the rules see it.
    pub(super) fn hold<'a>(&'a self, id: &'a ReservationId) -> Hold<'a> {
        Hold {
            id,
            tenant: &self.tenant,
            amount: self.amount,
            state: &self.state,
            expires_at: self.expires_at,
        }
    }
}

/// The actors the contract names: `admin`, `tenant`, `system` and `oidc:<sub>`.
fn is_known_actor(actor: &str) -> bool {
    matches!(actor, "admin" | "tenant" | "system")
        || actor
            .strip_prefix("oidc:")
            .is_some_and(|sub| !sub.is_empty())
}

/// The running digest of a ledger after one more entry: what an entry says, not what it is
/// called (its id) nor the figures it shows (checked on their own).
pub(super) fn entry_digest(
    before: &[u8; 32],
    kind: EntryKind,
    amount: Atomic,
    reservation: Option<&ReservationId>,
    memo: Option<&Memo>,
    at: Timestamp,
) -> [u8; 32] {
    let text = format!(
        "{}\n{amount}\n{}\n{}\n{at}",
        kind.name(),
        reservation.map_or("-", ReservationId::as_str),
        memo.map_or_else(|| "-".to_owned(), |m| format!("+{}", m.as_str())),
    );
    let mut data = Vec::with_capacity(32 + text.len());
    data.extend_from_slice(before);
    data.extend_from_slice(text.as_bytes());
    sha256(&data)
}

/// Whether a hold from `at` to `expires_at` lasts a whole number of seconds the contract
/// allows (1 to 86,400).
pub(super) fn is_allowed_hold(at: Timestamp, expires_at: Timestamp) -> bool {
    let held = expires_at.unix_ms().saturating_sub(at.unix_ms());
    expires_at > at && held.is_multiple_of(1000) && (1000..=86_400_000).contains(&held)
}

/// The replay: push every row in order, then check every stored tenant, budget, reservation
/// and ledger entry, then [`Replay::finish`].
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub(super) chain: Chain,
    pub(super) tenants: BTreeMap<TenantId, ReplayedTenant>,
    pub(super) budgets: BTreeMap<BudgetId, ReplayedBudget>,
    pub(super) reservations: BTreeMap<ReservationId, ReplayedReservation>,
    pub(super) endpoints: BTreeMap<EndpointId, ReplayedEndpoint>,
    /// The ledger of the budget being read: the figures and the digest it has reached.
    pub(super) ledger: Option<(BudgetId, Figures, [u8; 32])>,
    /// The budgets whose ledgers have been read to their end.
    pub(super) ledgers_read: BTreeSet<BudgetId>,
}

impl Replay {
    /// Checks the row's link, then applies its event.
    pub(crate) fn push(&mut self, row: &Linked) -> Result<(), VerifyError> {
        self.chain.push(row)?;
        let seq = row.entry.seq;
        let entry = &row.entry;
        let broken = |reason: String| VerifyError::Broken { seq, reason };
        if !is_known_actor(&entry.actor) {
            return Err(broken(format!("an unknown actor {:?}", entry.actor)));
        }
        let at = Timestamp::parse(&entry.occurred_at)
            .ok_or_else(|| broken(format!("a bad occurred_at {:?}", entry.occurred_at)))?;
        let event =
            AuditEvent::parse(&entry.action, &entry.tenant_id, &entry.payload).map_err(broken)?;
        if !event.may_be_recorded_by(&entry.actor) {
            return Err(broken(format!(
                "{} by {:?}, who may not do that",
                entry.action, entry.actor
            )));
        }
        self.apply(seq, at, event).map_err(broken)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_budget(
        &mut self,
        seq: i64,
        tenant: &TenantId,
        id: BudgetId,
        name: Name,
        unit: Unit,
        at: Timestamp,
        opening_deposit: Atomic,
        (policy, thresholds): (Option<Policy>, Thresholds),
    ) -> Result<(), String> {
        if self.budgets.contains_key(&id) {
            return Err(format!("creates budget {id} a second time"));
        }
        let mut budget = ReplayedBudget {
            created_seq: seq,
            tenant: tenant.clone(),
            name,
            unit,
            created_at: at,
            opening_deposit,
            figures: Figures::opening(opening_deposit),
            closed_at: None,
            active: BTreeSet::new(),
            stored: false,
            ledger: entry_digest(
                &[0; 32],
                EntryKind::OpeningDeposit,
                opening_deposit,
                None,
                None,
                at,
            ),
            policy: policy.map(|p| (p, at)),
            thresholds,
            periods: Vec::new(),
            current: false,
            periods_read: 0,
        };
        budget.begin_period(at, Atomic::new(0))?;
        self.budgets.insert(id, budget);
        Ok(())
    }

    pub(super) fn active_tenant(&self, id: &TenantId) -> Result<&ReplayedTenant, String> {
        match self.tenants.get(id) {
            Some(t) if t.tombstoned_at.is_none() => Ok(t),
            Some(_) => Err(format!("moves tombstoned tenant {id}")),
            None => Err(format!("names tenant {id} before it exists")),
        }
    }

    pub(super) fn open_budget(
        &mut self,
        tenant: &TenantId,
        id: &BudgetId,
    ) -> Result<&mut ReplayedBudget, String> {
        self.active_tenant(tenant)?;
        match self.budgets.get_mut(id) {
            Some(b) if b.tenant == *tenant && b.closed_at.is_none() => Ok(b),
            Some(b) if b.tenant == *tenant => Err(format!("moves closed budget {id}")),
            _ => Err(format!(
                "names budget {id}, which tenant {tenant} does not have"
            )),
        }
    }

    /// Tenant `tenant`'s reservation `id`, in whatever state.
    pub(super) fn own_reservation(
        &self,
        tenant: &TenantId,
        id: &ReservationId,
    ) -> Result<&ReplayedReservation, String> {
        match self.reservations.get(id) {
            Some(r) if r.tenant == *tenant => Ok(r),
            _ => Err(format!(
                "names reservation {id}, which tenant {tenant} does not have"
            )),
        }
    }

    /// Ends the hold `id` in `state`: it leaves its budget's active holds.
    pub(super) fn end_hold(&mut self, id: &ReservationId, state: ReservationState) {
        let r = self
            .reservations
            .get_mut(id)
            .expect("checked by the caller");
        r.state = state;
        let budget = self
            .budgets
            .get_mut(&r.budget)
            .expect("a reservation's budget");
        budget.active.remove(id);
    }

    /// Releases the budget's active reservations and closes it, at `at`, by the rule the
    /// writer runs.
    pub(super) fn close(&mut self, id: &BudgetId, at: Timestamp) -> Result<(), String> {
        let budget = self.budgets.get_mut(id).expect("checked by the caller");
        // Released in the order the store releases them: soonest to expire first.
        let mut active: Vec<(Timestamp, ReservationId)> = std::mem::take(&mut budget.active)
            .into_iter()
            .map(|r| (self.reservations[&r].expires_at, r))
            .collect();
        active.sort();
        let holds: Vec<Hold<'_>> = active
            .iter()
            .map(|(_, r)| self.reservations[r].hold(r))
            .collect();
        let (figures, released) = rules::release_all(budget.figures, &holds, at)
            .map_err(|_| format!("budget {id} returns more than it holds"))?;
        budget.figures = figures;
        for ((_, reservation), (draft, state, _)) in active.iter().zip(released) {
            budget.ledger = entry_digest(
                &budget.ledger,
                draft.kind,
                draft.amount,
                draft.reservation.as_ref(),
                None,
                at,
            );
            self.reservations
                .get_mut(reservation)
                .expect("an active reservation")
                .state = state;
        }
        let closing = rules::end_period(budget.figures)
            .map_err(|_| format!("budget {id} breaks the invariant"))?;
        budget.end_period(at, closing);
        budget.closed_at = Some(at);
        Ok(())
    }

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
        } else if replayed.figures != stored.figures {
            Some("figures")
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
            self.reservations
                .get(id)
                .filter(|r| r.budget == entry.budget_id)
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
            entry.reservation_id.as_ref(),
            entry.memo.as_ref(),
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
