//! Stored rows read as domain values, alike from every backend.
//!
//! A backend hands over a row as columns of text ([`TextRow`]: every stored value of these
//! tables is text, amounts included, so both backends select the same strings), and the
//! readers here check every rule of the type. A row that breaks one (a bad amount, an unknown
//! state) is reported through [`TextRow::corrupt`], naming the column and what is wrong: a bug,
//! or a row edited behind the service's back.

use std::borrow::Cow;

use crate::domain::{
    Atomic, Budget, BudgetId, BudgetState, Cadence, Closing, CurrentPeriod, Delivery, DeliveryId,
    DeliveryState, DisabledReason, Endpoint, EndpointId, EndpointState, EntryId, EntryKind, Event,
    EventId, EventType, EventTypes, Figures, Interval, LedgerEntry, Memo, Name, PeriodId, Policy,
    Reservation, ReservationId, ReservationState, Statement, Tenant, TenantId, TenantState,
    Thresholds, Timestamp, Unit, Zone,
};

/// A stored row, column by column as text.
pub(crate) trait TextRow {
    /// The backend's error.
    type Error;

    /// Column `i` as text, `None` for NULL; an error for a column that is not text. A backend
    /// that stores amounts as numbers hands them over in decimal.
    fn column(&self, i: usize) -> Result<Option<Cow<'_, str>>, Self::Error>;

    /// Column `i` as bytes, `None` for NULL; an error for a column that is not bytes.
    fn blob(&self, i: usize) -> Result<Option<Cow<'_, [u8]>>, Self::Error>;

    /// The error for column `i` holding something its type does not allow.
    fn corrupt(&self, i: usize, what: String) -> Self::Error;

    /// How many columns the row has.
    fn len(&self) -> usize;
}

/// The columns of `row` from `at` on, read in place.
pub(crate) struct Columns<'r, R: ?Sized> {
    row: &'r R,
    at: usize,
}

impl<'r, R: TextRow + ?Sized> Columns<'r, R> {
    pub(crate) fn new(row: &'r R, at: usize) -> Self {
        Self { row, at }
    }

    fn opt_text(&self, i: usize) -> Result<Option<Cow<'r, str>>, R::Error> {
        self.row.column(self.at + i)
    }

    pub(crate) fn text(&self, i: usize) -> Result<Cow<'r, str>, R::Error> {
        self.opt_text(i)?.ok_or_else(|| {
            self.row
                .corrupt(self.at + i, "a NULL where a value belongs".into())
        })
    }

    pub(crate) fn parse<T>(
        &self,
        i: usize,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, R::Error> {
        let raw = self.text(i)?;
        parse(&raw).ok_or_else(|| {
            self.row
                .corrupt(self.at + i, format!("a bad {what} {raw:?}"))
        })
    }

    fn opt_parse<T>(
        &self,
        i: usize,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, R::Error> {
        match self.opt_text(i)? {
            None => Ok(None),
            Some(raw) => parse(&raw).map(Some).ok_or_else(|| {
                self.row
                    .corrupt(self.at + i, format!("a bad {what} {raw:?}"))
            }),
        }
    }

    /// The error for column `i` holding something its type does not allow.
    fn corrupt(&self, i: usize, what: &str) -> R::Error {
        self.row.corrupt(self.at + i, what.to_owned())
    }

    pub(crate) fn amount(&self, i: usize) -> Result<Atomic, R::Error> {
        self.parse(i, "amount", |raw| Atomic::parse(raw).ok())
    }

    fn time(&self, i: usize) -> Result<Timestamp, R::Error> {
        self.parse(i, "timestamp", Timestamp::parse)
    }

    fn opt_time(&self, i: usize) -> Result<Option<Timestamp>, R::Error> {
        self.opt_parse(i, "timestamp", Timestamp::parse)
    }

    fn opt_memo(&self, i: usize) -> Result<Option<Memo>, R::Error> {
        self.opt_parse(i, "memo", |raw| Memo::parse(raw).ok())
    }
}

/// The columns [`budget`] reads, in its order, of the table or alias `$t`.
macro_rules! budget_columns {
    ($t:literal) => {
        concat!(
            $t,
            ".id, ",
            $t,
            ".tenant_id, ",
            $t,
            ".name, ",
            $t,
            ".unit, ",
            $t,
            ".state, ",
            $t,
            ".created_at, ",
            $t,
            ".closed_at, ",
            $t,
            ".opening_deposit_atomic, ",
            $t,
            ".credited_atomic, ",
            $t,
            ".debited_atomic, ",
            $t,
            ".spent_atomic, ",
            $t,
            ".reserved_atomic, ",
            $t,
            "r.period_interval, ",
            $t,
            "r.period_time_zone, CAST(",
            $t,
            "r.period_every_seconds AS TEXT), ",
            $t,
            "r.period_allowance_atomic, ",
            $t,
            "r.period_rollover_max_atomic, ",
            $t,
            "r.period_anchor, ",
            $t,
            "r.period_id, ",
            $t,
            "r.period_started_at, ",
            $t,
            "r.period_ends_at, ",
            $t,
            "r.alert_thresholds, ",
            $t,
            ".parent_id"
        )
    };
}
pub(crate) use budget_columns;

/// The join that [`budget_columns`] of the table or alias `$t` needs: the budget's renewal
/// (its period policy, current period and thresholds) as alias `$t` + `r`, absent for a
/// budget that never had one. The budgets table keeps its 12 columns: SQLite compares the
/// keys of a `WITHOUT ROWID` table of more than 13 columns by its slow general comparator,
/// which every lookup of a budget would pay.
macro_rules! budget_renewal_join {
    ($t:literal) => {
        concat!(
            " LEFT JOIN budget_renewals ",
            $t,
            "r ON ",
            $t,
            "r.budget_id = ",
            $t,
            ".id"
        )
    };
}
pub(crate) use budget_renewal_join;

/// A budget from [`budget_columns`], starting at column `at`.
pub(crate) fn budget<R: TextRow + ?Sized>(row: &R, at: usize) -> Result<Budget, R::Error> {
    let c = Columns::new(row, at);
    let state = match (c.text(4)?.as_ref(), c.opt_time(6)?) {
        ("open", None) => BudgetState::Open,
        ("closed", Some(at)) => BudgetState::Closed { at },
        _ => return Err(row.corrupt(at + 4, "a bad budget state".into())),
    };
    Ok(Budget {
        id: c.parse(0, "budget id", BudgetId::parse)?,
        tenant_id: c.parse(1, "tenant id", TenantId::parse)?,
        name: c.parse(2, "name", |raw| Name::parse(raw).ok())?,
        unit: c.parse(3, "unit", |raw| Unit::parse(raw).ok())?,
        state,
        created_at: c.time(5)?,
        opening_deposit: c.amount(7)?,
        figures: Figures {
            credited: c.amount(8)?.get(),
            debited: c.amount(9)?.get(),
            spent: c.amount(10)?.get(),
            reserved: c.amount(11)?.get(),
        },
        policy: policy(&c, 12)?,
        current: current_period(&c, 17)?,
        thresholds: c
            .opt_parse(21, "alert thresholds", Thresholds::from_column)?
            .unwrap_or_default(),
        parent_id: c.opt_parse(22, "budget id", BudgetId::parse)?,
    })
}

/// A period policy from its five columns from `at` on (interval, time zone, length,
/// allowance, rollover cap), or `None` when it has none.
fn policy<R: TextRow + ?Sized>(c: &Columns<'_, R>, at: usize) -> Result<Option<Policy>, R::Error> {
    let Some(allowance) = c.opt_parse(at + 3, "amount", |raw| Atomic::parse(raw).ok())? else {
        return Ok(None);
    };
    let interval = c.opt_parse(at, "period interval", |raw| Interval::parse(raw).ok())?;
    let zone = c.opt_parse(at + 1, "time zone", |raw| Zone::parse(raw).ok())?;
    let every = c.opt_parse(at + 2, "period length", |raw| {
        raw.parse().ok().and_then(|s| Cadence::fixed(s).ok())
    })?;
    let cadence = match (interval, zone, every) {
        (Some(interval), Some(zone), None) => Cadence::Calendar { interval, zone },
        (None, None, Some(fixed)) => fixed,
        _ => return Err(c.corrupt(at, "a period that is neither calendar nor fixed")),
    };
    Ok(Some(Policy {
        cadence,
        allowance,
        rollover_max: c.amount(at + 4)?,
    }))
}

/// The current period from its columns from `at` on (anchor, id, start, end), or `None`.
fn current_period<R: TextRow + ?Sized>(
    c: &Columns<'_, R>,
    at: usize,
) -> Result<Option<CurrentPeriod>, R::Error> {
    let Some(id) = c.opt_parse(at + 1, "period id", PeriodId::parse)? else {
        return Ok(None);
    };
    Ok(Some(CurrentPeriod {
        id,
        anchor: c.time(at)?,
        started_at: c.time(at + 2)?,
        ends_at: c.time(at + 3)?,
    }))
}

/// The columns [`tenant`] reads, in its order: the tenant's (alias `t`), then its default
/// budget's (alias `b`).
macro_rules! tenant_columns {
    () => {
        concat!(
            "t.id, t.name, t.state, t.created_at, t.tombstoned_at, ",
            $crate::store::rows::budget_columns!("b")
        )
    };
}
pub(crate) use tenant_columns;

/// A tenant, with its default budget, from [`tenant_columns`].
pub(crate) fn tenant<R: TextRow + ?Sized>(row: &R) -> Result<Tenant, R::Error> {
    let c = Columns::new(row, 0);
    let id = c.parse(0, "tenant id", TenantId::parse)?;
    let state = match (c.text(2)?.as_ref(), c.opt_time(4)?) {
        ("active", None) => TenantState::Active,
        ("tombstoned", Some(at)) => TenantState::Tombstoned { at },
        _ => return Err(row.corrupt(2, format!("tenant {id} has a bad state"))),
    };
    Ok(Tenant {
        name: c.parse(1, "name", |raw| Name::parse(raw).ok())?,
        created_at: c.time(3)?,
        state,
        budget: budget(row, 5)?,
        id,
    })
}

/// The columns [`reservation`] reads, in its order, of the table or alias `$t`.
macro_rules! reservation_columns {
    ($t:literal) => {
        concat!(
            $t,
            ".id, ",
            $t,
            ".tenant_id, ",
            $t,
            ".budget_id, ",
            $t,
            ".state, ",
            $t,
            ".amount_atomic, ",
            $t,
            ".committed_atomic, ",
            $t,
            ".memo, ",
            $t,
            ".created_at, ",
            $t,
            ".expires_at, ",
            $t,
            ".settled_at"
        )
    };
}
pub(crate) use reservation_columns;

/// The columns [`reservation`] reads, of the table itself.
pub(crate) const RESERVATION_COLUMNS: &str = reservation_columns!("reservations");

/// How many columns [`reservation`] reads.
pub(crate) const RESERVATION_WIDTH: usize = 10;

/// A reservation from [`RESERVATION_COLUMNS`].
pub(crate) fn reservation<R: TextRow + ?Sized>(row: &R) -> Result<Reservation, R::Error> {
    let c = Columns::new(row, 0);
    let committed = c.opt_parse(5, "amount", |raw| Atomic::parse(raw).ok())?;
    let state = match (c.text(3)?.as_ref(), c.opt_time(9)?, committed) {
        ("active", None, None) => ReservationState::Active,
        ("committed", Some(at), Some(amount)) => ReservationState::Committed { amount, at },
        ("released", Some(at), None) => ReservationState::Released { at },
        ("expired", Some(at), None) => ReservationState::Expired { at },
        _ => return Err(row.corrupt(3, "a bad reservation state".into())),
    };
    Ok(Reservation {
        id: c.parse(0, "reservation id", ReservationId::parse)?,
        tenant_id: c.parse(1, "tenant id", TenantId::parse)?,
        budget_id: c.parse(2, "budget id", BudgetId::parse)?,
        state,
        amount: c.amount(4)?,
        memo: c.opt_memo(6)?,
        created_at: c.time(7)?,
        expires_at: c.time(8)?,
    })
}

/// The columns [`entry`] reads, in its order.
pub(crate) const ENTRY_COLUMNS: &str = "id, budget_id, kind, amount_atomic, reservation_id, \
     memo, occurred_at, balance_atomic, available_atomic, period_id, via_budget_id";

/// A ledger entry from [`ENTRY_COLUMNS`].
pub(crate) fn entry<R: TextRow + ?Sized>(row: &R) -> Result<LedgerEntry, R::Error> {
    let c = Columns::new(row, 0);
    Ok(LedgerEntry {
        id: c.parse(0, "entry id", EntryId::parse)?,
        budget_id: c.parse(1, "budget id", BudgetId::parse)?,
        kind: c.parse(2, "entry kind", EntryKind::parse)?,
        amount: c.amount(3)?,
        reservation_id: c.opt_parse(4, "reservation id", ReservationId::parse)?,
        memo: c.opt_memo(5)?,
        occurred_at: c.time(6)?,
        balance: c.amount(7)?,
        available: c.amount(8)?,
        period_id: c.opt_parse(9, "period id", PeriodId::parse)?,
        via_budget_id: c.opt_parse(10, "budget id", BudgetId::parse)?,
    })
}

/// The columns [`event`] reads, in its order.
pub(crate) const EVENT_COLUMNS: &str = "id, type, created_at, tenant_id, data";

/// An event from [`EVENT_COLUMNS`].
pub(crate) fn event<R: TextRow + ?Sized>(row: &R) -> Result<Event, R::Error> {
    event_at(row, 0)
}

/// An event from [`EVENT_COLUMNS`] at column `at` on.
pub(crate) fn event_at<R: TextRow + ?Sized>(row: &R, at: usize) -> Result<Event, R::Error> {
    let c = Columns::new(row, at);
    Ok(Event {
        id: c.parse(0, "event id", EventId::parse)?,
        kind: c.parse(1, "event type", EventType::parse)?,
        created_at: c.time(2)?,
        tenant_id: c.parse(3, "tenant id", TenantId::parse)?,
        data: c.text(4)?.into_owned(),
    })
}

/// The columns [`endpoint`] reads, in its order.
pub(crate) const ENDPOINT_COLUMNS: &str =
    "id, url, description, event_types, tenant_id, state, disabled_reason, created_at";

/// A webhook endpoint from [`ENDPOINT_COLUMNS`].
pub(crate) fn endpoint<R: TextRow + ?Sized>(row: &R) -> Result<Endpoint, R::Error> {
    let c = Columns::new(row, 0);
    let state = match (&*c.text(5)?, c.opt_text(6)?.as_deref()) {
        ("enabled", None) => EndpointState::Enabled,
        ("deleted", None) => EndpointState::Deleted,
        ("disabled", Some(reason)) => EndpointState::Disabled(
            DisabledReason::parse(reason).ok_or_else(|| c.corrupt(6, "an unknown reason"))?,
        ),
        _ => return Err(c.corrupt(5, "a state that does not fit its reason")),
    };
    Ok(Endpoint {
        id: c.parse(0, "endpoint id", EndpointId::parse)?,
        url: c.text(1)?.into_owned(),
        description: c.opt_memo(2)?,
        event_types: c.parse(3, "event types", EventTypes::from_column)?,
        tenant_id: c.opt_parse(4, "tenant id", TenantId::parse)?,
        state,
        created_at: c.time(7)?,
    })
}

/// Every webhook endpoint, for the verifier ([`ENDPOINT_COLUMNS`]).
pub(crate) const EVERY_ENDPOINT: &str = "SELECT id, url, description, event_types, tenant_id, \
     state, disabled_reason, created_at FROM webhook_endpoints ORDER BY id";

/// The columns [`delivery`] reads, in its order.
pub(crate) const DELIVERY_COLUMNS: &str = "id, endpoint_id, event_id, event_type, state, \
     CAST(attempts AS TEXT), last_attempt_at, CAST(last_status AS TEXT), last_error, \
     next_attempt_at, succeeded_at";

/// A webhook delivery from [`DELIVERY_COLUMNS`].
pub(crate) fn delivery<R: TextRow + ?Sized>(row: &R) -> Result<Delivery, R::Error> {
    let c = Columns::new(row, 0);
    Ok(Delivery {
        id: c.parse(0, "delivery id", DeliveryId::parse)?,
        endpoint_id: c.parse(1, "endpoint id", EndpointId::parse)?,
        event_id: c.parse(2, "event id", EventId::parse)?,
        event_type: c.parse(3, "event type", EventType::parse)?,
        state: c.parse(4, "delivery state", DeliveryState::parse)?,
        attempts: c.parse(5, "attempt count", |raw| raw.parse().ok())?,
        last_attempt_at: c.opt_time(6)?,
        last_status: c.opt_parse(7, "status", |raw| raw.parse().ok())?,
        last_error: c.opt_text(8)?.map(Cow::into_owned),
        next_attempt_at: c.opt_time(9)?,
        succeeded_at: c.opt_time(10)?,
    })
}

/// The columns [`statement`] reads, in its order.
pub(crate) const PERIOD_COLUMNS: &str = "id, budget_id, state, started_at, ends_at, \
     allowance_atomic, carried_in_atomic, opening_available_atomic, start_credited_atomic, \
     start_debited_atomic, start_spent_atomic, credited_atomic, debited_atomic, spent_atomic, \
     forfeited_atomic, carried_out_atomic, closing_available_atomic";

/// A period statement from [`PERIOD_COLUMNS`]. A closed period keeps its own totals; its
/// `end` figures are its start's plus those (the end's `reserved` is not kept).
pub(crate) fn statement<R: TextRow + ?Sized>(row: &R) -> Result<Statement, R::Error> {
    let c = Columns::new(row, 0);
    let start = Figures {
        credited: c.amount(8)?.get(),
        debited: c.amount(9)?.get(),
        spent: c.amount(10)?.get(),
        reserved: 0,
    };
    let closing = match c.text(2)?.as_ref() {
        "current" => None,
        "closed" => {
            let total = |i: usize, start: u128| -> Result<u128, R::Error> {
                start
                    .checked_add(c.amount(i)?.get())
                    .ok_or_else(|| row.corrupt(i, "a total past u128".into()))
            };
            Some(Closing {
                end: Figures {
                    credited: total(11, start.credited)?,
                    debited: total(12, start.debited)?,
                    spent: total(13, start.spent)?,
                    reserved: 0,
                },
                forfeited: c.amount(14)?,
                carried_out: c.amount(15)?,
                available: c.amount(16)?,
            })
        }
        _ => return Err(row.corrupt(2, "a bad period state".into())),
    };
    Ok(Statement {
        id: c.parse(0, "period id", PeriodId::parse)?,
        budget_id: c.parse(1, "budget id", BudgetId::parse)?,
        started_at: c.time(3)?,
        ends_at: c.time(4)?,
        allowance: c.amount(5)?,
        carried_in: c.amount(6)?,
        opening_available: c.amount(7)?,
        start,
        closing,
    })
}

/// Every tenant for the verifier, in id order: [`tenant_columns`] and, last, the opening
/// deposit the tenant row keeps ([`tenant_with_deposit`] reads it).
pub(crate) const EVERY_TENANT: &str = concat!(
    "SELECT ",
    tenant_columns!(),
    ", t.opening_deposit_atomic \
     FROM tenants t \
     LEFT JOIN budgets b ON b.tenant_id = t.id AND b.id = 'bud_' || substr(t.id, 5)",
    budget_renewal_join!("b"),
    " ORDER BY t.id"
);

/// A tenant of [`EVERY_TENANT`]. The opening deposit the tenant row keeps must be its default
/// budget's: a row whose two disagree cannot be read.
pub(crate) fn tenant_with_deposit<R: TextRow + ?Sized>(row: &R) -> Result<Tenant, R::Error> {
    let tenant = tenant(row)?;
    let at = row.len() - 1;
    let deposit = Columns::new(row, at).amount(0)?;
    if deposit != tenant.budget.opening_deposit {
        let what = format!("tenant {} keeps another opening deposit", tenant.id);
        return Err(row.corrupt(at, what));
    }
    Ok(tenant)
}

/// Every budget for the verifier, in id order.
pub(crate) const EVERY_BUDGET: &str = concat!(
    "SELECT ",
    budget_columns!("budgets"),
    " FROM budgets",
    budget_renewal_join!("budgets"),
    " ORDER BY budgets.id"
);

/// Every reservation for the verifier, in id order.
pub(crate) const EVERY_RESERVATION: &str = concat!(
    "SELECT ",
    reservation_columns!("reservations"),
    " FROM reservations ORDER BY id"
);

/// Every ledger entry for the verifier, by budget and then in order ([`ENTRY_COLUMNS`]).
pub(crate) const EVERY_ENTRY: &str = "SELECT id, budget_id, kind, amount_atomic, \
     reservation_id, memo, occurred_at, balance_atomic, available_atomic, period_id, \
     via_budget_id FROM ledger_entries ORDER BY budget_id, id";

/// Every period statement for the verifier, by budget and then in order ([`PERIOD_COLUMNS`]).
pub(crate) const EVERY_PERIOD: &str = "SELECT id, budget_id, state, started_at, ends_at, \
     allowance_atomic, carried_in_atomic, opening_available_atomic, start_credited_atomic, \
     start_debited_atomic, start_spent_atomic, credited_atomic, debited_atomic, spent_atomic, \
     forfeited_atomic, carried_out_atomic, closing_available_atomic \
     FROM periods ORDER BY budget_id, id";

/// Every audit event, in `seq` order, its `seq` as text as every other column. The `ORDER BY`
/// names the table's column: PostgreSQL would take a bare `seq` for the output column of that
/// name, the text, and sort `9` after `10`.
pub(crate) const EVERY_EVENT: &str = "SELECT CAST(seq AS TEXT), occurred_at, actor, action, \
     tenant_id, payload, prev_hash, hash FROM audit_events ORDER BY audit_events.seq";
