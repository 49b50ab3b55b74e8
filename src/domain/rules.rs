//! The business rules, written once: every change of a budget or a reservation as a pure
//! function from the current state and figures to the new ones, the ledger entries it writes
//! and the audit event that records it, or a refusal.
//!
//! Two interpreters run them. The store's writer reads the rows, runs the rule, and writes
//! what it decided (`store::ops`). The audit replay reads an event, runs the rule on the
//! state the events before it left, and compares: the event the rule would have written must
//! be the event recorded (`audit::replay`). A rule changed here changes both. The model test
//! of the store (`store::model_tests`) keeps an oracle of its own, written apart from these.
//!
//! Rules never read a clock or a database: the time of the change and every id come in as
//! arguments. The events they record ([`AuditEvent`]) are data here; how an event is written
//! into the chain, read back and replayed is the `audit` module's (`audit/actions/`).

use super::{
    Atomic, BudgetId, Closing, Direction, EndpointId, EntryKind, EventTypes, Figures, Memo, Name,
    Policy, Refusal, Reservation, ReservationId, ReservationState, TenantId, Thresholds, Timestamp,
    Unit,
};

/// A change of state, as the chain records it. Every event names its tenant (the row's
/// `tenant_id` column); the payload holds exactly the contract's members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuditEvent {
    /// A tenant and its default budget.
    TenantCreated {
        id: TenantId,
        name: Name,
        opening_deposit: Atomic,
        policy: Option<Policy>,
        thresholds: Thresholds,
    },
    /// A tombstone, with the releases and closures it implies.
    TenantTombstoned { id: TenantId },
    /// A budget.
    BudgetCreated {
        tenant: TenantId,
        id: BudgetId,
        name: Name,
        unit: Unit,
        opening_deposit: Atomic,
        policy: Option<Policy>,
        thresholds: Thresholds,
        parent: Option<BudgetId>,
    },
    /// A budget closed, with the releases it implies (and the end of its current period).
    BudgetClosed { tenant: TenantId, id: BudgetId },
    /// A budget's policy after a `PATCH` that changed it.
    BudgetUpdated {
        tenant: TenantId,
        id: BudgetId,
        policy: Option<Policy>,
        thresholds: Thresholds,
    },
    /// A period's boundary, by the system: the new period began at `started_at`, with a
    /// `refill` or `forfeit` entry of `amount`.
    BudgetPeriodReset {
        tenant: TenantId,
        budget: BudgetId,
        started_at: Timestamp,
        kind: EntryKind,
        amount: Atomic,
    },
    /// A top-up (`budget.credited`), a withdrawal (`budget.debited`) or a spend without a
    /// hold (`budget.charged`).
    BudgetMoved {
        tenant: TenantId,
        budget: BudgetId,
        direction: Direction,
        amount: Atomic,
        memo: Option<Memo>,
    },
    /// A hold taken.
    ReservationCreated {
        tenant: TenantId,
        id: ReservationId,
        budget: BudgetId,
        amount: Atomic,
        expires_at: Timestamp,
    },
    /// A hold settled by spending `amount`.
    ReservationCommitted {
        tenant: TenantId,
        id: ReservationId,
        amount: Atomic,
    },
    /// A hold returned.
    ReservationReleased { tenant: TenantId, id: ReservationId },
    /// A hold made to last longer.
    ReservationExtended {
        tenant: TenantId,
        id: ReservationId,
        expires_at: Timestamp,
    },
    /// A hold whose time ran out.
    ReservationExpired { tenant: TenantId, id: ReservationId },
    /// A webhook endpoint made (`created`), or changed by a `PATCH` or by the system after
    /// failing (`updated`): what it is after the change, never its secret.
    WebhookEndpoint {
        change: EndpointChange,
        id: EndpointId,
        url: String,
        event_types: EventTypes,
        tenant: Option<TenantId>,
        enabled: bool,
    },
    /// A webhook endpoint deleted (`deleted`) or given a new secret (`secret_rotated`).
    WebhookEndpointId {
        change: EndpointChange,
        id: EndpointId,
        tenant: Option<TenantId>,
    },
}

/// What happened to a webhook endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndpointChange {
    /// `webhook_endpoint.created`.
    Created,
    /// `webhook_endpoint.updated`.
    Updated,
    /// `webhook_endpoint.deleted`.
    Deleted,
    /// `webhook_endpoint.secret_rotated`.
    SecretRotated,
}

/// A ledger entry as a rule decides it; the store gives it its id, its time and the
/// figures it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Draft {
    /// What moved.
    pub(crate) kind: EntryKind,
    /// How much.
    pub(crate) amount: Atomic,
    /// The hold it belongs to, if any.
    pub(crate) reservation: Option<ReservationId>,
    /// The request's note, if any.
    pub(crate) memo: Option<Memo>,
}

/// A hold as the rules see it: what a reservation's row (or its replayed events) says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold<'a> {
    /// Its id.
    pub(crate) id: &'a ReservationId,
    /// Whose it is.
    pub(crate) tenant: &'a TenantId,
    /// What it holds.
    pub(crate) amount: Atomic,
    /// Its recorded state.
    pub(crate) state: &'a ReservationState,
    /// From this instant on it holds nothing.
    pub(crate) expires_at: Timestamp,
}

impl Reservation {
    /// The reservation as the rules see it.
    pub(crate) fn hold(&self) -> Hold<'_> {
        Hold {
            id: &self.id,
            tenant: &self.tenant_id,
            amount: self.amount,
            state: &self.state,
            expires_at: self.expires_at,
        }
    }
}

impl Hold<'_> {
    /// The state a change must act on at `now`, if the hold is not active then: an active
    /// hold whose time is up is expired (at its expiry), recorded or not.
    pub(crate) fn ended_at(&self, now: Timestamp) -> Option<ReservationState> {
        match self.state {
            ReservationState::Active if self.expires_at <= now => Some(ReservationState::Expired {
                at: self.expires_at,
            }),
            ReservationState::Active => None,
            state => Some(state.clone()),
        }
    }

    /// Refuses a hold that is not active at `now`.
    fn live(&self, now: Timestamp) -> Result<(), Refusal> {
        match self.ended_at(now) {
            None => Ok(()),
            Some(state) => Err(Refusal::NotActive {
                state: state.name(),
            }),
        }
    }
}

/// What a rule decided for one budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// The budget's new figures.
    pub(crate) figures: Figures,
    /// The ledger entry it writes, if it moves money; with none, the figures are unchanged
    /// (an extend), and neither the writer nor the replay writes them.
    pub(crate) entry: Option<Draft>,
    /// The event that records it.
    pub(crate) event: AuditEvent,
    /// What it moves on each of the budget's ancestors: a spend or a hold's end moves them
    /// alike (`None`: it moves the budget alone).
    pub(crate) spread: Option<Spread>,
}

/// What a budget's change moves on each of its ancestors, alike: the figures of a spend
/// (a hold, a commit, a charge) or of a hold's end, as the budget itself moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spread {
    /// A hold taken: `reserved` grows, and it must be available.
    Hold(u128),
    /// A hold of `held` settled by spending `spent`: the excess over the hold must be
    /// available.
    Settle { held: u128, spent: u128 },
    /// A hold returned (a release, an expiry, a close).
    Return(u128),
    /// A spend without a hold: it must be available.
    Spend(u128),
}

impl Spread {
    /// An ancestor's figures after the move, or why it cannot take it.
    pub(crate) fn apply(self, figures: Figures) -> Result<Figures, Refusal> {
        match self {
            Self::Hold(amount) => figures.reserve(amount),
            Self::Settle { held, spent } => figures.commit(held, spent),
            Self::Return(held) => figures.release(held),
            Self::Spend(amount) => figures.charge(amount),
        }
    }
}

/// The figures of each ancestor (`ancestors`, nearest first) after `spread`, or the place of
/// the nearest that cannot take it, with its refusal: a spend fits every level or moves none.
pub(crate) fn spread_up(
    spread: Spread,
    ancestors: impl IntoIterator<Item = Figures>,
) -> Result<Vec<Figures>, (usize, Refusal)> {
    ancestors
        .into_iter()
        .enumerate()
        .map(|(level, figures)| spread.apply(figures).map_err(|refusal| (level, refusal)))
        .collect()
}

/// What a rule decided for a hold and its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    /// The budget's change.
    pub(crate) change: Change,
    /// The hold's new state.
    pub(crate) state: ReservationState,
    /// The hold's expiry, moved by an extend.
    pub(crate) expires_at: Timestamp,
}

/// How an active hold ends, or lasts longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// Spend this much (0 or more, within the hold or above it) and return the rest.
    Commit(Atomic),
    /// Return the whole hold.
    Release,
    /// Hold until this instant instead.
    Extend(Timestamp),
}

/// A credit, a debit or a charge of `amount` to an open budget (a debit and a charge take at
/// most what is available).
pub(crate) fn move_funds(
    tenant: &TenantId,
    budget: &BudgetId,
    figures: Figures,
    direction: Direction,
    amount: Atomic,
    memo: Option<&Memo>,
) -> Result<Change, Refusal> {
    Ok(Change {
        figures: figures.moved(direction, amount.get())?,
        entry: Some(Draft {
            kind: direction.entry_kind(),
            amount,
            reservation: None,
            memo: memo.cloned(),
        }),
        event: AuditEvent::BudgetMoved {
            tenant: tenant.clone(),
            budget: budget.clone(),
            direction,
            amount,
            memo: memo.cloned(),
        },
        spread: (direction == Direction::Charge).then_some(Spread::Spend(amount.get())),
    })
}

/// What a period's boundary decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reset {
    /// The budget's change: its `refill` or `forfeit` entry and the event.
    pub(crate) change: Change,
    /// How the period before ended.
    pub(crate) closing: Closing,
    /// What it carried into the new period.
    pub(crate) carried_in: Atomic,
    /// What the new period starts with available.
    pub(crate) opening_available: Atomic,
}

/// A boundary of `policy` at `at`, on an open budget's `figures`: with `a` available, the
/// new period starts with `allowance + min(a, rollover_max)` available and every hold kept.
/// A refill that would carry `credited` past `u128` adds what fits.
pub(crate) fn period_reset(
    tenant: &TenantId,
    budget: &BudgetId,
    figures: Figures,
    policy: &Policy,
    at: Timestamp,
) -> Result<Reset, Refusal> {
    let available = figures.available().ok_or(Refusal::Corrupt)?;
    let carry = available.min(policy.rollover_max.get());
    let target = policy.allowance.get().saturating_add(carry);
    let (kind, amount, after) = if target >= available {
        let headroom = u128::MAX - figures.credited;
        let refill = (target - available).min(headroom);
        let credited = figures.credited + refill;
        (
            EntryKind::Refill,
            refill,
            Figures {
                credited,
                ..figures
            },
        )
    } else {
        let forfeit = available - target;
        let debited = figures
            .debited
            .checked_add(forfeit)
            .ok_or(Refusal::Corrupt)?;
        (EntryKind::Forfeit, forfeit, Figures { debited, ..figures })
    };
    let opening_available = after.available().ok_or(Refusal::Corrupt)?;
    let amount = Atomic::new(amount);
    Ok(Reset {
        change: Change {
            figures: after,
            entry: Some(Draft {
                kind,
                amount,
                reservation: None,
                memo: None,
            }),
            event: AuditEvent::BudgetPeriodReset {
                tenant: tenant.clone(),
                budget: budget.clone(),
                started_at: at,
                kind,
                amount,
            },
            spread: None,
        },
        closing: Closing {
            end: Figures {
                reserved: 0,
                ..figures
            },
            forfeited: Atomic::new(available - carry),
            carried_out: Atomic::new(carry),
            available: Atomic::new(available),
        },
        carried_in: Atomic::new(carry),
        opening_available: Atomic::new(opening_available),
    })
}

/// How a period ends without a boundary (a change of policy, a close, a tombstone): nothing
/// is forfeited and all that is available is carried out.
pub(crate) fn end_period(figures: Figures) -> Result<Closing, Refusal> {
    let available = Atomic::new(figures.available().ok_or(Refusal::Corrupt)?);
    Ok(Closing {
        end: Figures {
            reserved: 0,
            ..figures
        },
        forfeited: Atomic::new(0),
        carried_out: available,
        available,
    })
}

/// A `PATCH` of a budget's policy and thresholds: the event, or `None` when nothing changes.
pub(crate) fn update(
    tenant: &TenantId,
    budget: &BudgetId,
    (policy, thresholds): (Option<&Policy>, &Thresholds),
    (new_policy, new_thresholds): (Option<Policy>, Thresholds),
) -> Option<AuditEvent> {
    if policy == new_policy.as_ref() && *thresholds == new_thresholds {
        return None;
    }
    Some(AuditEvent::BudgetUpdated {
        tenant: tenant.clone(),
        id: budget.clone(),
        policy: new_policy,
        thresholds: new_thresholds,
    })
}

/// A hold of `amount` on an open budget until `expires_at`: at most what is available.
pub(crate) fn reserve(
    tenant: &TenantId,
    budget: &BudgetId,
    figures: Figures,
    id: &ReservationId,
    amount: Atomic,
    expires_at: Timestamp,
) -> Result<Change, Refusal> {
    Ok(Change {
        figures: figures.reserve(amount.get())?,
        entry: Some(Draft {
            kind: EntryKind::Reserve,
            amount,
            reservation: Some(id.clone()),
            memo: None,
        }),
        event: AuditEvent::ReservationCreated {
            tenant: tenant.clone(),
            id: id.clone(),
            budget: budget.clone(),
            amount,
            expires_at,
        },
        spread: Some(Spread::Hold(amount.get())),
    })
}

/// A commit (within the hold, or above it out of what is available), a release or an
/// extend of a hold that is active at `now`, on its open budget's `figures`.
pub(crate) fn settle(
    figures: Figures,
    hold: &Hold<'_>,
    settlement: Settlement,
    now: Timestamp,
) -> Result<Settled, Refusal> {
    hold.live(now)?;
    let (tenant, id, held) = (hold.tenant.clone(), hold.id.clone(), hold.amount);
    let entry = |kind, amount| {
        Some(Draft {
            kind,
            amount,
            reservation: Some(hold.id.clone()),
            memo: None,
        })
    };
    Ok(match settlement {
        Settlement::Commit(spent) => Settled {
            change: Change {
                figures: figures.commit(held.get(), spent.get())?,
                entry: entry(EntryKind::Commit, spent),
                event: AuditEvent::ReservationCommitted {
                    tenant,
                    id,
                    amount: spent,
                },
                spread: Some(Spread::Settle {
                    held: held.get(),
                    spent: spent.get(),
                }),
            },
            state: ReservationState::Committed {
                amount: spent,
                at: now,
            },
            expires_at: hold.expires_at,
        },
        Settlement::Release => Settled {
            change: Change {
                figures: figures.release(held.get())?,
                entry: entry(EntryKind::Release, held),
                event: AuditEvent::ReservationReleased { tenant, id },
                spread: Some(Spread::Return(held.get())),
            },
            state: ReservationState::Released { at: now },
            expires_at: hold.expires_at,
        },
        // A shorter TTL than the hold had brings its expiry forward.
        Settlement::Extend(expires_at) => Settled {
            change: Change {
                figures,
                entry: None,
                event: AuditEvent::ReservationExtended {
                    tenant,
                    id,
                    expires_at,
                },
                spread: None,
            },
            state: ReservationState::Active,
            expires_at,
        },
    })
}

/// The expiry of an active hold whose time is up at `now`: the hold returns.
pub(crate) fn expire(
    figures: Figures,
    hold: &Hold<'_>,
    now: Timestamp,
) -> Result<Settled, Refusal> {
    if *hold.state != ReservationState::Active {
        return Err(Refusal::NotActive {
            state: hold.state.name(),
        });
    }
    if hold.expires_at > now {
        return Err(Refusal::NotDue);
    }
    Ok(Settled {
        change: Change {
            figures: figures.release(hold.amount.get())?,
            entry: Some(Draft {
                kind: EntryKind::Expire,
                amount: hold.amount,
                reservation: Some(hold.id.clone()),
                memo: None,
            }),
            event: AuditEvent::ReservationExpired {
                tenant: hold.tenant.clone(),
                id: hold.id.clone(),
            },
            spread: Some(Spread::Return(hold.amount.get())),
        },
        state: ReservationState::Expired { at: now },
        expires_at: hold.expires_at,
    })
}

/// One hold returned by a close: its entry, its new state, and the budget's figures once it
/// has returned (what its entry shows).
pub(crate) type Released = (Draft, ReservationState, Figures);

/// What closing a budget does to its figures and holds: every active hold (in the order
/// given: soonest to expire first) returns, a `release` entry each; the event is the
/// caller's (a budget closed, or a tenant tombstoned). The final figures, and each release.
pub(crate) fn release_all(
    figures: Figures,
    holds: &[Hold<'_>],
    now: Timestamp,
) -> Result<(Figures, Vec<Released>), Refusal> {
    let mut figures = figures;
    let mut released = Vec::with_capacity(holds.len());
    for hold in holds {
        if *hold.state != ReservationState::Active {
            return Err(Refusal::NotActive {
                state: hold.state.name(),
            });
        }
        figures = figures.release(hold.amount.get())?;
        let draft = Draft {
            kind: EntryKind::Release,
            amount: hold.amount,
            reservation: Some(hold.id.clone()),
            memo: None,
        };
        released.push((draft, ReservationState::Released { at: now }, figures));
    }
    Ok((figures, released))
}

/// The event of a budget's close (its holds released by [`release_all`]).
pub(crate) fn close(tenant: &TenantId, budget: &BudgetId) -> AuditEvent {
    AuditEvent::BudgetClosed {
        tenant: tenant.clone(),
        id: budget.clone(),
    }
}

/// The event of a tenant's tombstone (each open budget closed by [`release_all`]).
pub(crate) fn tombstone(tenant: &TenantId) -> AuditEvent {
    AuditEvent::TenantTombstoned { id: tenant.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (TenantId, BudgetId, ReservationId) {
        let tenant = TenantId::from_ulid(ulid::Ulid(1));
        let budget = tenant.default_budget();
        let reservation = ReservationId::from_ulid(ulid::Ulid(2));
        (tenant, budget, reservation)
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_ms(ms)
    }

    /// A hold of `amount` in `state` until `expires_ms`, numbered `n`, of the tenant of
    /// [`ids`]: read through [`Reservation::hold`], as the writer reads it.
    fn reservation(n: u128, amount: u128, state: ReservationState, expires_ms: u64) -> Reservation {
        let (tenant, budget, _) = ids();
        Reservation {
            id: ReservationId::from_ulid(ulid::Ulid(n)),
            tenant_id: tenant,
            budget_id: budget,
            state,
            amount: Atomic::new(amount),
            memo: None,
            created_at: at(0),
            expires_at: at(expires_ms),
        }
    }

    /// Figures of `credited` with `reserved` held.
    fn figures(credited: u128, reserved: u128) -> Figures {
        Figures {
            credited,
            reserved,
            ..Figures::default()
        }
    }

    #[test]
    fn a_commit_within_the_hold_returns_the_rest_and_above_it_needs_what_is_available() {
        let held = reservation(2, 30, ReservationState::Active, 10_000);
        let hold = held.hold();
        let within = settle(
            figures(100, 30),
            &hold,
            Settlement::Commit(Atomic::new(20)),
            at(1),
        )
        .expect("within the hold");
        assert_eq!(within.change.figures.spent, 20);
        assert_eq!(within.change.figures.reserved, 0);
        assert_eq!(within.change.figures.available(), Some(80));
        let above = settle(
            figures(100, 30),
            &hold,
            Settlement::Commit(Atomic::new(100)),
            at(1),
        )
        .expect("above the hold, all of it available");
        assert_eq!(above.change.figures.available(), Some(0));
        assert_eq!(
            settle(
                figures(100, 30),
                &hold,
                Settlement::Commit(Atomic::new(101)),
                at(1)
            ),
            Err(Refusal::InsufficientFunds {
                available: Atomic::new(70)
            }),
            "the excess over the hold must be available"
        );
    }

    #[test]
    fn a_hold_whose_time_is_up_is_expired_for_every_settlement_but_its_expiry() {
        let held = reservation(2, 5, ReservationState::Active, 1_000);
        let hold = held.hold();
        for settlement in [
            Settlement::Commit(Atomic::new(1)),
            Settlement::Release,
            Settlement::Extend(at(5_000)),
        ] {
            assert_eq!(
                settle(figures(10, 5), &hold, settlement, at(1_000)),
                Err(Refusal::NotActive { state: "expired" }),
                "{settlement:?}"
            );
        }
        assert_eq!(expire(figures(10, 5), &hold, at(999)), Err(Refusal::NotDue));
        let expired = expire(figures(10, 5), &hold, at(1_000)).expect("due");
        assert_eq!(expired.change.figures.reserved, 0);
        assert_eq!(expired.state, ReservationState::Expired { at: at(1_000) });
    }

    #[test]
    fn a_settled_hold_is_refused_with_its_state() {
        let held = reservation(2, 5, ReservationState::Released { at: at(1) }, 1_000);
        let hold = held.hold();
        assert_eq!(
            settle(figures(10, 0), &hold, Settlement::Release, at(2)),
            Err(Refusal::NotActive { state: "released" })
        );
        assert_eq!(
            release_all(figures(10, 0), &[hold], at(2)),
            Err(Refusal::NotActive { state: "released" })
        );
    }

    #[test]
    fn a_close_returns_each_hold_in_turn_and_each_entry_shows_its_own_figures() {
        let first = reservation(2, 3, ReservationState::Active, 1_000);
        let second = reservation(3, 4, ReservationState::Active, 1_000);
        let holds = [first.hold(), second.hold()];
        let (figures, released) = release_all(figures(10, 7), &holds, at(5)).expect("a close");
        assert_eq!(figures.reserved, 0);
        let available: Vec<_> = released.iter().map(|(_, _, f)| f.available()).collect();
        assert_eq!(available, [Some(6), Some(10)], "after the first, then both");
        assert!(released.iter().all(|(d, s, _)| d.kind == EntryKind::Release
            && *s == ReservationState::Released { at: at(5) }));
    }

    #[test]
    fn a_reserve_and_a_debit_take_at_most_what_is_available() {
        let (tenant, budget, id) = ids();
        assert_eq!(
            reserve(
                &tenant,
                &budget,
                figures(10, 4),
                &id,
                Atomic::new(7),
                at(1_000)
            ),
            Err(Refusal::InsufficientFunds {
                available: Atomic::new(6)
            })
        );
        let debit = move_funds(
            &tenant,
            &budget,
            figures(10, 4),
            Direction::Debit,
            Atomic::new(6),
            None,
        )
        .expect("all that is available");
        assert_eq!(debit.figures.available(), Some(0));
        assert_eq!(
            move_funds(
                &tenant,
                &budget,
                figures(u128::MAX, 0),
                Direction::Credit,
                Atomic::new(1),
                None
            ),
            Err(Refusal::Overflow)
        );
    }
}
