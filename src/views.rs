//! The JSON a client sees, written once per response: the handlers' answers, and the `data`
//! of the events the store writes (the objects as the API would answer for them right after
//! the change).

use serde::Serialize;

use serde_json::value::RawValue;

use crate::domain::{
    Atomic, Budget, BudgetId, CurrentPeriod, Delivery, DeliveryId, Endpoint, EndpointId, EntryId,
    Event, EventId, EventType, Figures, LedgerEntry, Memo, Name, Page, PeriodId, Policy,
    Reservation, ReservationId, Statement, Tenant, TenantId, Thresholds, Timestamp, Unit,
    period_totals,
};
use crate::ids::TenantToken;

/// A budget, with its derived figures.
#[derive(Serialize)]
struct BudgetView<'a> {
    id: &'a BudgetId,
    tenant_id: &'a TenantId,
    name: &'a Name,
    unit: &'a Unit,
    state: &'static str,
    created_at: Timestamp,
    closed_at: Option<Timestamp>,
    opening_deposit_atomic: Atomic,
    credited_atomic: Atomic,
    debited_atomic: Atomic,
    spent_atomic: Atomic,
    reserved_atomic: Atomic,
    balance_atomic: Atomic,
    available_atomic: Atomic,
    period: Option<&'a Policy>,
    current_period: Option<CurrentPeriodView<'a>>,
    alert_thresholds_atomic: &'a Thresholds,
}

/// Where a budget stands in its period: its id, when it began, and when it resets.
#[derive(Serialize)]
struct CurrentPeriodView<'a> {
    id: &'a PeriodId,
    started_at: Timestamp,
    ends_at: Timestamp,
}

impl<'a> From<&'a CurrentPeriod> for CurrentPeriodView<'a> {
    fn from(c: &'a CurrentPeriod) -> Self {
        Self {
            id: &c.id,
            started_at: c.started_at,
            ends_at: c.ends_at,
        }
    }
}

impl<'a> From<&'a Budget> for BudgetView<'a> {
    fn from(b: &'a Budget) -> Self {
        let f = &b.figures;
        // The store never hands out a budget that breaks the invariant; zero is never shown
        // for a broken one because it cannot be read.
        Self {
            id: &b.id,
            tenant_id: &b.tenant_id,
            name: &b.name,
            unit: &b.unit,
            state: b.state.name(),
            created_at: b.created_at,
            closed_at: b.state.closed_at(),
            opening_deposit_atomic: b.opening_deposit,
            credited_atomic: Atomic::new(f.credited),
            debited_atomic: Atomic::new(f.debited),
            spent_atomic: Atomic::new(f.spent),
            reserved_atomic: Atomic::new(f.reserved),
            balance_atomic: Atomic::new(f.balance().unwrap_or(0)),
            available_atomic: Atomic::new(f.available().unwrap_or(0)),
            period: b.policy.as_ref(),
            current_period: b.current.as_ref().map(CurrentPeriodView::from),
            alert_thresholds_atomic: &b.thresholds,
        }
    }
}

/// The tenant overview: the body of a read and of a tombstone, and an item of a list.
#[derive(Serialize)]
struct TenantView<'a> {
    id: &'a TenantId,
    name: &'a Name,
    state: &'static str,
    created_at: Timestamp,
    tombstoned_at: Option<Timestamp>,
    budget: BudgetView<'a>,
}

impl<'a> From<&'a Tenant> for TenantView<'a> {
    fn from(tenant: &'a Tenant) -> Self {
        Self {
            id: &tenant.id,
            name: &tenant.name,
            state: tenant.state.name(),
            created_at: tenant.created_at,
            tombstoned_at: tenant.state.tombstoned_at(),
            budget: BudgetView::from(&tenant.budget),
        }
    }
}

/// The environment block for the tenant's sidecar. Every name matches `^[A-Z][A-Z0-9_]*$`
/// and no value holds NUL, CR or LF (the public URL is checked at start-up; the ids and
/// token are generated).
#[derive(Serialize)]
#[allow(non_snake_case)]
struct SidecarEnv<'a> {
    TENANTD_URL: &'a str,
    TENANTD_TENANT_ID: &'a str,
    TENANTD_TENANT_TOKEN: &'a str,
    TENANTD_BUDGET_ID: &'a str,
}

#[derive(Serialize)]
struct CreatedView<'a> {
    #[serde(flatten)]
    tenant: TenantView<'a>,
    sidecar_config_env: SidecarEnv<'a>,
}

/// A ledger entry.
#[derive(Serialize)]
struct EntryView<'a> {
    id: &'a EntryId,
    budget_id: &'a BudgetId,
    kind: &'static str,
    amount_atomic: Atomic,
    reservation_id: Option<&'a ReservationId>,
    memo: Option<&'a Memo>,
    occurred_at: Timestamp,
    balance_atomic: Atomic,
    available_atomic: Atomic,
    period_id: Option<&'a PeriodId>,
}

impl<'a> From<&'a LedgerEntry> for EntryView<'a> {
    fn from(e: &'a LedgerEntry) -> Self {
        Self {
            id: &e.id,
            budget_id: &e.budget_id,
            kind: e.kind.name(),
            amount_atomic: e.amount,
            reservation_id: e.reservation_id.as_ref(),
            memo: e.memo.as_ref(),
            occurred_at: e.occurred_at,
            balance_atomic: e.balance,
            available_atomic: e.available,
            period_id: e.period_id.as_ref(),
        }
    }
}

/// A period statement.
#[derive(Serialize)]
struct StatementView<'a> {
    id: &'a PeriodId,
    budget_id: &'a BudgetId,
    state: &'static str,
    started_at: Timestamp,
    ends_at: Timestamp,
    allowance_atomic: Atomic,
    carried_in_atomic: Atomic,
    opening_available_atomic: Atomic,
    credited_atomic: Atomic,
    debited_atomic: Atomic,
    spent_atomic: Atomic,
    forfeited_atomic: Option<Atomic>,
    carried_out_atomic: Option<Atomic>,
    closing_available_atomic: Option<Atomic>,
}

impl<'a> StatementView<'a> {
    /// The statement `s` of a budget whose figures are `now`: a current period's totals are
    /// the budget's less those it began with.
    fn new(s: &'a Statement, now: &Figures) -> Self {
        let end = s.closing.as_ref().map_or(now, |c| &c.end);
        // The store never hands out a period that ends below its start; zero is never shown
        // for one because it cannot be read.
        let (credited, debited, spent) = period_totals(&s.start, end).unwrap_or_default();
        Self {
            id: &s.id,
            budget_id: &s.budget_id,
            state: if s.closing.is_some() {
                "closed"
            } else {
                "current"
            },
            started_at: s.started_at,
            ends_at: s.ends_at,
            allowance_atomic: s.allowance,
            carried_in_atomic: s.carried_in,
            opening_available_atomic: s.opening_available,
            credited_atomic: Atomic::new(credited),
            debited_atomic: Atomic::new(debited),
            spent_atomic: Atomic::new(spent),
            forfeited_atomic: s.closing.map(|c| c.forfeited),
            carried_out_atomic: s.closing.map(|c| c.carried_out),
            closing_available_atomic: s.closing.map(|c| c.available),
        }
    }
}

/// A reservation, in its recorded state.
#[derive(Serialize)]
struct ReservationView<'a> {
    id: &'a ReservationId,
    tenant_id: &'a TenantId,
    budget_id: &'a BudgetId,
    state: &'static str,
    amount_atomic: Atomic,
    committed_atomic: Option<Atomic>,
    memo: Option<&'a Memo>,
    created_at: Timestamp,
    expires_at: Timestamp,
    settled_at: Option<Timestamp>,
}

impl<'a> From<&'a Reservation> for ReservationView<'a> {
    fn from(r: &'a Reservation) -> Self {
        Self {
            id: &r.id,
            tenant_id: &r.tenant_id,
            budget_id: &r.budget_id,
            state: r.state.name(),
            amount_atomic: r.amount,
            committed_atomic: r.state.committed(),
            memo: r.memo.as_ref(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            settled_at: r.state.settled_at(),
        }
    }
}

/// A page of a list: `data`, `has_more`, and `next_after` (the last id, or `null` on the last
/// page).
#[derive(Serialize)]
struct PageView<V, I> {
    data: Vec<V>,
    has_more: bool,
    next_after: Option<I>,
}

fn page_json<'a, T, V: Serialize + From<&'a T>, I: Serialize>(
    page: &'a Page<T>,
    id: impl Fn(&'a T) -> I,
) -> String {
    let view = PageView {
        data: page.items.iter().map(V::from).collect(),
        has_more: page.has_more,
        next_after: page.has_more.then(|| page.items.last().map(id)).flatten(),
    };
    to_json(&view)
}

/// The buffer a body is written into starts this large: a tenant's overview or a budget is
/// 500 to 900 bytes, and `serde_json`'s own start of 128 bytes grows three times on the way.
const BODY_BYTES_START: usize = 1024;

fn to_json(value: &impl Serialize) -> String {
    let mut body = Vec::with_capacity(BODY_BYTES_START);
    serde_json::to_writer(&mut body, value).expect("a view always serializes");
    String::from_utf8(body).expect("serde_json writes UTF-8")
}

/// The overview of `tenant`.
pub(crate) fn tenant_json(tenant: &Tenant) -> String {
    to_json(&TenantView::from(tenant))
}

/// The body of a `201` to a create: the overview and the sidecar's environment.
pub(crate) fn created_json(tenant: &Tenant, token: &TenantToken, public_url: &str) -> String {
    to_json(&CreatedView {
        tenant: TenantView::from(tenant),
        sidecar_config_env: SidecarEnv {
            TENANTD_URL: public_url,
            TENANTD_TENANT_ID: tenant.id.as_str(),
            TENANTD_TENANT_TOKEN: token.plaintext(),
            TENANTD_BUDGET_ID: tenant.budget.id.as_str(),
        },
    })
}

/// A budget.
pub(crate) fn budget_json(budget: &Budget) -> String {
    to_json(&BudgetView::from(budget))
}

/// A ledger entry.
pub(crate) fn entry_json(entry: &LedgerEntry) -> String {
    to_json(&EntryView::from(entry))
}

/// A reservation.
pub(crate) fn reservation_json(reservation: &Reservation) -> String {
    to_json(&ReservationView::from(reservation))
}

/// A page of tenants.
pub(crate) fn tenants_json(page: &Page<Tenant>) -> String {
    page_json::<_, TenantView<'_>, _>(page, |t| &t.id)
}

/// A page of budgets.
pub(crate) fn budgets_json(page: &Page<Budget>) -> String {
    page_json::<_, BudgetView<'_>, _>(page, |b| &b.id)
}

/// A page of ledger entries.
pub(crate) fn entries_json(page: &Page<LedgerEntry>) -> String {
    page_json::<_, EntryView<'_>, _>(page, |e| &e.id)
}

/// A page of a budget's period statements.
pub(crate) fn periods_json(budget: &Budget, page: &Page<Statement>) -> String {
    let view = PageView {
        data: page
            .items
            .iter()
            .map(|s| StatementView::new(s, &budget.figures))
            .collect(),
        has_more: page.has_more,
        next_after: page
            .has_more
            .then(|| page.items.last().map(|s| &s.id))
            .flatten(),
    };
    to_json(&view)
}

/// A page of reservations.
pub(crate) fn reservations_json(page: &Page<Reservation>) -> String {
    page_json::<_, ReservationView<'_>, _>(page, |r| &r.id)
}

/// A webhook endpoint; its secret only in the answer that made it (a create, a rotation).
#[derive(Serialize)]
struct EndpointView<'a> {
    id: &'a EndpointId,
    url: &'a str,
    description: Option<&'a Memo>,
    event_types: Vec<&'static str>,
    tenant_id: Option<&'a TenantId>,
    state: &'static str,
    disabled_reason: Option<&'static str>,
    created_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<&'a str>,
}

impl<'a> From<&'a Endpoint> for EndpointView<'a> {
    fn from(e: &'a Endpoint) -> Self {
        Self {
            id: &e.id,
            url: &e.url,
            description: e.description.as_ref(),
            event_types: e.event_types.names(),
            tenant_id: e.tenant_id.as_ref(),
            state: e.state.name(),
            disabled_reason: e.state.reason().map(|r| r.name()),
            created_at: e.created_at,
            secret: None,
        }
    }
}

/// A webhook delivery.
#[derive(Serialize)]
struct DeliveryView<'a> {
    id: &'a DeliveryId,
    endpoint_id: &'a EndpointId,
    event_id: &'a EventId,
    event_type: &'static str,
    state: &'static str,
    attempts: u32,
    last_attempt_at: Option<Timestamp>,
    last_status: Option<u16>,
    last_error: Option<&'a str>,
    next_attempt_at: Option<Timestamp>,
    succeeded_at: Option<Timestamp>,
}

impl<'a> From<&'a Delivery> for DeliveryView<'a> {
    fn from(d: &'a Delivery) -> Self {
        Self {
            id: &d.id,
            endpoint_id: &d.endpoint_id,
            event_id: &d.event_id,
            event_type: d.event_type.name(),
            state: d.state.name(),
            attempts: d.attempts,
            last_attempt_at: d.last_attempt_at,
            last_status: d.last_status,
            last_error: d.last_error.as_deref(),
            next_attempt_at: d.next_attempt_at,
            succeeded_at: d.succeeded_at,
        }
    }
}

/// A webhook endpoint, with its secret (as `whsec_…` text) when one is given: the answer to a
/// create or a rotation, the only ones that show it.
pub(crate) fn endpoint_json(endpoint: &Endpoint, secret: Option<&str>) -> String {
    to_json(&EndpointView {
        secret,
        ..EndpointView::from(endpoint)
    })
}

/// A page of webhook endpoints.
pub(crate) fn endpoints_json(page: &Page<Endpoint>) -> String {
    page_json::<_, EndpointView<'_>, _>(page, |e| &e.id)
}

/// A webhook delivery.
pub(crate) fn delivery_json(delivery: &Delivery) -> String {
    to_json(&DeliveryView::from(delivery))
}

/// A page of an endpoint's deliveries.
pub(crate) fn deliveries_json(page: &Page<Delivery>) -> String {
    page_json::<_, DeliveryView<'_>, _>(page, |d| &d.id)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{BudgetState, TenantState};

    fn tenant(state: TenantState) -> Tenant {
        let id = TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        let at = Timestamp::parse("2026-11-22T10:00:00.123Z").expect("time");
        let deposit = Atomic::parse("340282366920938463463374607431768211455").expect("amount");
        Tenant {
            budget: Budget {
                id: id.default_budget(),
                tenant_id: id.clone(),
                name: Name::parse("default").expect("name"),
                unit: Unit::atomic(),
                state: match state {
                    TenantState::Active => BudgetState::Open,
                    TenantState::Tombstoned { at } => BudgetState::Closed { at },
                },
                created_at: at,
                opening_deposit: deposit,
                figures: Figures {
                    reserved: 5,
                    ..Figures::opening(deposit)
                },
                policy: None,
                current: None,
                thresholds: Thresholds::default(),
            },
            id,
            name: Name::parse("acme-prod").expect("name"),
            state,
            created_at: at,
        }
    }

    #[test]
    fn created_json_has_the_contract_shape() {
        let tenant = tenant(TenantState::Active);
        let token = TenantToken::mint(&tenant.id);
        let json: serde_json::Value =
            serde_json::from_str(&created_json(&tenant, &token, "http://h:1")).expect("json");
        assert_eq!(json["id"], "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(json["state"], "active");
        assert_eq!(json["created_at"], "2026-11-22T10:00:00.123Z");
        assert_eq!(json["tombstoned_at"], serde_json::Value::Null);
        let budget = &json["budget"];
        assert_eq!(budget["id"], "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(budget["name"], "default");
        assert_eq!(budget["unit"], "atomic");
        assert_eq!(budget["state"], "open");
        assert_eq!(
            budget["credited_atomic"],
            "340282366920938463463374607431768211455"
        );
        assert_eq!(budget["reserved_atomic"], "5");
        assert_eq!(
            budget["available_atomic"],
            "340282366920938463463374607431768211450"
        );
        let env = &json["sidecar_config_env"];
        assert_eq!(env["TENANTD_URL"], "http://h:1");
        assert_eq!(env["TENANTD_TENANT_TOKEN"], token.plaintext());
        assert_eq!(env["TENANTD_BUDGET_ID"], "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        let overview: serde_json::Value =
            serde_json::from_str(&tenant_json(&tenant)).expect("json");
        assert!(overview.get("sidecar_config_env").is_none());
    }

    #[test]
    fn a_tombstoned_overview_shows_when_and_a_closed_budget() {
        let at = Timestamp::parse("2026-11-22T11:00:00.000Z").expect("time");
        let json: serde_json::Value =
            serde_json::from_str(&tenant_json(&tenant(TenantState::Tombstoned { at })))
                .expect("json");
        assert_eq!(json["state"], "tombstoned");
        assert_eq!(json["tombstoned_at"], "2026-11-22T11:00:00.000Z");
        assert_eq!(json["budget"]["state"], "closed");
        assert_eq!(json["budget"]["closed_at"], "2026-11-22T11:00:00.000Z");
    }

    #[test]
    fn pages_name_their_last_id_only_when_more_follow() {
        let one = tenant(TenantState::Active);
        let more = Page {
            items: vec![one.clone()],
            has_more: true,
        };
        let json: serde_json::Value = serde_json::from_str(&tenants_json(&more)).expect("json");
        assert_eq!(json["next_after"], "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(json["data"][0]["name"], "acme-prod");
        let last = Page {
            items: vec![one],
            has_more: false,
        };
        let json: serde_json::Value = serde_json::from_str(&tenants_json(&last)).expect("json");
        assert_eq!(json["next_after"], serde_json::Value::Null);
        assert_eq!(json["has_more"], false);
    }
}
