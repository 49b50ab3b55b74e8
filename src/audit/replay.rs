//! Verification by replay: the state the events leave, folded from `seq` 1 (every tenant,
//! budget with its periods and ledger digest, reservation and webhook endpoint), and the moves
//! that more than one family's replay step makes on it. Each family's step is in `actions`,
//! and the checks of the stored rows against this state are in `check`; this file names
//! neither.

use std::collections::{BTreeMap, BTreeSet};

use super::Chain;
use crate::crypto::sha256;
use crate::domain::rules::{self, Change, Draft, Hold, Spread};
use crate::domain::{
    ANCESTORS_MAX, Atomic, AuditEvent, BudgetId, Closing, EndpointId, EntryKind, EventTypes,
    Figures, Memo, Name, Policy, ReservationId, ReservationState, TenantId, Thresholds, Timestamp,
    Unit,
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
    /// The budget above it, if any.
    pub(super) parent: Option<BudgetId>,
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

    /// Refuses the expiry of a hold whose time was up at `expires_at` recorded out of its
    /// period: after the boundary that followed that instant, or before a boundary that
    /// preceded it (a hold that ran out by a boundary returns before it).
    pub(super) fn in_period(&self, id: &BudgetId, expires_at: Timestamp) -> Result<(), String> {
        match self.periods.last().filter(|_| self.current) {
            Some(p) if expires_at > p.ends_at => Err(format!(
                "returns a hold on budget {id} whose time was up at {expires_at}, past its \
                 period's end at {}, before that boundary is recorded",
                p.ends_at
            )),
            Some(p) if expires_at <= p.started_at => Err(format!(
                "returns a hold on budget {id} whose time was up at {expires_at}, after the \
                 boundary at {} that came after it",
                p.started_at
            )),
            _ => Ok(()),
        }
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

/// The running digest of a ledger after one more entry: what an entry says, not what it is
/// called (its id) nor the figures it shows (checked on their own).
pub(super) fn entry_digest(
    before: &[u8; 32],
    kind: EntryKind,
    amount: Atomic,
    (reservation, memo): (Option<&ReservationId>, Option<&Memo>),
    via: Option<&BudgetId>,
    at: Timestamp,
) -> [u8; 32] {
    let text = format!(
        "{}\n{amount}\n{}\n{}\n{}\n{at}",
        kind.name(),
        reservation.map_or("-", ReservationId::as_str),
        memo.map_or_else(|| "-".to_owned(), |m| format!("+{}", m.as_str())),
        via.map_or("-", BudgetId::as_str),
    );
    let mut data = Vec::with_capacity(32 + text.len());
    data.extend_from_slice(before);
    data.extend_from_slice(text.as_bytes());
    sha256(&data)
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
        parent: Option<BudgetId>,
    ) -> Result<(), String> {
        if self.budgets.contains_key(&id) {
            return Err(format!("creates budget {id} a second time"));
        }
        if let Some(parent) = &parent {
            self.open_budget(tenant, parent)
                .map_err(|e| format!("creates budget {id} under a parent that is not open: {e}"))?;
            if self.ancestors(parent).len() >= ANCESTORS_MAX {
                return Err(format!("creates budget {id} at a fifth level"));
            }
        }
        let mut budget = ReplayedBudget {
            created_seq: seq,
            tenant: tenant.clone(),
            name,
            unit,
            created_at: at,
            opening_deposit,
            parent,
            figures: Figures::opening(opening_deposit),
            closed_at: None,
            active: BTreeSet::new(),
            stored: false,
            ledger: entry_digest(
                &[0; 32],
                EntryKind::OpeningDeposit,
                opening_deposit,
                (None, None),
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

    /// The ancestors of budget `id`, nearest first.
    pub(super) fn ancestors(&self, id: &BudgetId) -> Vec<BudgetId> {
        let mut ancestors: Vec<BudgetId> = Vec::new();
        let mut parent = self.budgets.get(id).and_then(|b| b.parent.clone());
        // A chain of parents is checked as each budget is made: it ends, and soon.
        while let Some(id) = parent.filter(|id| !ancestors.contains(id)) {
            parent = self.budgets.get(&id).and_then(|b| b.parent.clone());
            ancestors.push(id);
        }
        ancestors
    }

    /// Moves each ancestor of budget `via` by `spread` (a spend or a hold's end on `via`), with
    /// its entry of `draft`'s kind, amount, reservation and memo, nearest first, as the writer
    /// does. A move at `at` comes after each ancestor's boundaries up to `at` (`on_time`; an
    /// expiry is checked against the instant it fell due instead, by its caller).
    fn spread_up(
        &mut self,
        via: &BudgetId,
        spread: Spread,
        draft: &Draft,
        at: Timestamp,
        on_time: bool,
    ) -> Result<(), String> {
        for id in self.ancestors(via) {
            let a = self.budgets.get_mut(&id).expect("an ancestor is a budget");
            if a.closed_at.is_some() {
                return Err(format!("moves closed budget {id}, above budget {via}"));
            }
            if on_time {
                a.on_time(&id, at)?;
            }
            a.figures = spread.apply(a.figures).map_err(|_| {
                format!("a move of budget {via} that budget {id} above it cannot take")
            })?;
            a.ledger = entry_digest(
                &a.ledger,
                draft.kind,
                draft.amount,
                (draft.reservation.as_ref(), draft.memo.as_ref()),
                Some(via),
                at,
            );
        }
        Ok(())
    }

    /// The open budgets of `tenant` in the order a tombstone closes them: the deepest first
    /// (a budget's holds return on its ancestors, still open), then by id.
    pub(super) fn closing_order(&self, tenant: &TenantId) -> Vec<BudgetId> {
        let mut open: Vec<(usize, BudgetId)> = self
            .budgets
            .iter()
            .filter(|(_, b)| b.tenant == *tenant && b.closed_at.is_none())
            .map(|(id, _)| (self.ancestors(id).len(), id.clone()))
            .collect();
        open.sort_by(|(da, a), (db, b)| db.cmp(da).then(a.cmp(b)));
        open.into_iter().map(|(_, id)| id).collect()
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
        for (draft, _, _) in &released {
            budget.ledger = entry_digest(
                &budget.ledger,
                draft.kind,
                draft.amount,
                (draft.reservation.as_ref(), None),
                None,
                at,
            );
        }
        // Each hold returns on every level it held, as the writer returns it.
        for ((_, reservation), (draft, state, _)) in active.iter().zip(released) {
            self.spread_up(id, Spread::Return(draft.amount.get()), &draft, at, true)?;
            self.reservations
                .get_mut(reservation)
                .expect("an active reservation")
                .state = state;
        }
        let budget = self.budgets.get_mut(id).expect("checked by the caller");
        let closing = rules::end_period(budget.figures)
            .map_err(|_| format!("budget {id} breaks the invariant"))?;
        budget.end_period(at, closing);
        budget.closed_at = Some(at);
        Ok(())
    }

    /// Takes what a rule decided for `budget` if it recorded exactly `event`: the figures,
    /// and the entry the ledger must show next.
    pub(super) fn take(
        &mut self,
        budget: &BudgetId,
        change: Change,
        event: &AuditEvent,
        at: Timestamp,
    ) -> Result<(), String> {
        if change.event != *event {
            return Err(format!(
                "records {:?} where its rule records {:?}",
                event, change.event
            ));
        }
        let b = self
            .budgets
            .get_mut(budget)
            .expect("a budget checked by the caller");
        if let Some(draft) = change.entry {
            b.figures = change.figures;
            b.ledger = entry_digest(
                &b.ledger,
                draft.kind,
                draft.amount,
                (draft.reservation.as_ref(), draft.memo.as_ref()),
                None,
                at,
            );
            if let Some(spread) = change.spread {
                let on_time = !matches!(event, AuditEvent::ReservationExpired { .. });
                self.spread_up(budget, spread, &draft, at, on_time)?;
            }
        }
        Ok(())
    }
}
