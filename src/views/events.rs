//! An event's `data`, rendered once when the store writes it, and events as they are read,
//! their stored `data` sent as it was written.

use serde::Serialize;
use serde_json::value::RawValue;

use super::budgets::{BudgetView, StatementView};
use super::ledger::{EntryView, ReservationView};
use super::tenants::TenantView;
use super::{PageView, to_json};
use crate::domain::{
    Atomic, Budget, Event, EventId, EventType, LedgerEntry, Page, Reservation, Statement, Tenant,
    TenantId, Timestamp,
};

/// What an event tells, with the objects it names as they stand right after its change.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EventData<'a> {
    /// `tenant.created`: the tenant's overview (never its token).
    TenantCreated(&'a Tenant),
    /// `tenant.tombstoned`: the overview, now tombstoned.
    TenantTombstoned(&'a Tenant),
    /// `budget.created`.
    BudgetCreated(&'a Budget),
    /// `budget.updated`.
    BudgetUpdated(&'a Budget),
    /// `budget.closed`.
    BudgetClosed(&'a Budget),
    /// `budget.credited` and `budget.debited`: the budget and the entry.
    BudgetMoved(&'a Budget, &'a LedgerEntry),
    /// `budget.available_low`: the budget and the threshold crossed.
    AvailableLow(&'a Budget, Atomic),
    /// `budget.period_reset`: the budget in its new period, the statement of the period that
    /// closed, and the refill or forfeit entry.
    PeriodReset(&'a Budget, &'a Statement, &'a LedgerEntry),
    /// `reservation.expired`: the reservation and its budget.
    ReservationExpired(&'a Reservation, &'a Budget),
}

/// The members of each kind's `data`, in the contract's order. Made and serialized at once,
/// never stored, so the size of its largest variant costs nothing.
#[derive(Serialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
enum DataView<'a> {
    Tenant {
        tenant: TenantView<'a>,
    },
    Budget {
        budget: BudgetView<'a>,
    },
    Moved {
        budget: BudgetView<'a>,
        entry: EntryView<'a>,
    },
    Low {
        budget: BudgetView<'a>,
        threshold_atomic: Atomic,
    },
    Reset {
        budget: BudgetView<'a>,
        closed_period: StatementView<'a>,
        entry: EntryView<'a>,
    },
    Expired {
        reservation: ReservationView<'a>,
        budget: BudgetView<'a>,
    },
}

impl EventData<'_> {
    /// The event's kind; `None` for a movement that writes none (a charge, a hold, a commit,
    /// a release: the spend path).
    pub(crate) fn kind(&self) -> Option<EventType> {
        Some(match self {
            Self::TenantCreated(_) => EventType::TenantCreated,
            Self::TenantTombstoned(_) => EventType::TenantTombstoned,
            Self::BudgetCreated(_) => EventType::BudgetCreated,
            Self::BudgetUpdated(_) => EventType::BudgetUpdated,
            Self::BudgetClosed(_) => EventType::BudgetClosed,
            Self::BudgetMoved(_, entry) => match entry.kind {
                crate::domain::EntryKind::Credit => EventType::BudgetCredited,
                crate::domain::EntryKind::Debit => EventType::BudgetDebited,
                _ => return None,
            },
            Self::AvailableLow(..) => EventType::BudgetAvailableLow,
            Self::PeriodReset(..) => EventType::BudgetPeriodReset,
            Self::ReservationExpired(..) => EventType::ReservationExpired,
        })
    }

    /// The tenant concerned.
    pub(crate) fn tenant_id(&self) -> &TenantId {
        match self {
            Self::TenantCreated(t) | Self::TenantTombstoned(t) => &t.id,
            Self::BudgetCreated(b)
            | Self::BudgetUpdated(b)
            | Self::BudgetClosed(b)
            | Self::BudgetMoved(b, _)
            | Self::AvailableLow(b, _)
            | Self::PeriodReset(b, ..)
            | Self::ReservationExpired(_, b) => &b.tenant_id,
        }
    }

    /// The `data` member's JSON text.
    pub(crate) fn json(self) -> String {
        let view = match self {
            Self::TenantCreated(t) | Self::TenantTombstoned(t) => DataView::Tenant {
                tenant: TenantView::from(t),
            },
            Self::BudgetCreated(b) | Self::BudgetUpdated(b) | Self::BudgetClosed(b) => {
                DataView::Budget {
                    budget: BudgetView::from(b),
                }
            }
            Self::BudgetMoved(b, e) => DataView::Moved {
                budget: BudgetView::from(b),
                entry: EntryView::from(e),
            },
            Self::AvailableLow(b, threshold) => DataView::Low {
                budget: BudgetView::from(b),
                threshold_atomic: threshold,
            },
            Self::PeriodReset(b, s, e) => DataView::Reset {
                budget: BudgetView::from(b),
                closed_period: StatementView::new(s, &b.figures),
                entry: EntryView::from(e),
            },
            Self::ReservationExpired(r, b) => DataView::Expired {
                reservation: ReservationView::from(r),
                budget: BudgetView::from(b),
            },
        };
        to_json(&view)
    }
}

/// An event: its stored `data` goes out as it was written.
#[derive(Serialize)]
struct EventView<'a> {
    id: &'a EventId,
    #[serde(rename = "type")]
    kind: &'static str,
    created_at: Timestamp,
    tenant_id: &'a TenantId,
    data: &'a RawValue,
}

impl<'a> EventView<'a> {
    fn new(e: &'a Event) -> Result<Self, serde_json::Error> {
        Ok(Self {
            id: &e.id,
            kind: e.kind.name(),
            created_at: e.created_at,
            tenant_id: &e.tenant_id,
            data: serde_json::from_str(&e.data)?,
        })
    }
}

/// An event; `None` when its stored `data` is not JSON (a damaged row).
pub(crate) fn event_json(event: &Event) -> Option<String> {
    EventView::new(event).ok().map(|view| to_json(&view))
}

/// A page of events; `None` when one's stored `data` is not JSON.
pub(crate) fn events_json(page: &Page<Event>) -> Option<String> {
    let data = page
        .items
        .iter()
        .map(EventView::new)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(to_json(&PageView {
        data,
        has_more: page.has_more,
        next_after: page
            .has_more
            .then(|| page.items.last().map(|e| &e.id))
            .flatten(),
    }))
}
