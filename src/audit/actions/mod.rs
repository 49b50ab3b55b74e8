//! The audit actions, one family to a file, and the one dispatch over them.
//!
//! An action's family file holds everything the chain does with it: its payload's shape, how
//! the payload is written and read back, who may record it, and what it does when the chain
//! is replayed. The families follow what an action changes, since that is what its replay
//! step works on: a tenant ([`tenant`]), a budget's existence and funds ([`budget`]), a
//! budget's periods, whose policy a `PATCH` sets and whose boundaries the system records
//! ([`period`]), a hold ([`reservation`]), and a webhook endpoint ([`endpoint`]). What they
//! share in their payloads is in [`payload`].
//!
//! Here is only dispatch: [`Family::of`] lists every action (the one place that does), and
//! each method of `AuditEvent` below hands the event to its family.

mod budget;
mod endpoint;
mod payload;
mod period;
mod reservation;
mod tenant;

use crate::audit::actor::{Recorders, is_known_actor};
use crate::audit::replay::Replay;
use crate::audit::{Linked, VerifyError};
use crate::domain::{AuditEvent, TenantId, Timestamp};

/// A family of actions: the file that describes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `tenant.*`.
    Tenant,
    /// `budget.created`, `budget.closed`, and the moves without a hold.
    Budget,
    /// `budget.updated` and `budget.period_reset`.
    Period,
    /// `reservation.*`.
    Reservation,
    /// `webhook_endpoint.*`.
    Endpoint,
}

impl Family {
    /// Every family, in the order a row's action is offered to them when it is read back.
    const ALL: [Self; 5] = [
        Self::Tenant,
        Self::Budget,
        Self::Period,
        Self::Reservation,
        Self::Endpoint,
    ];

    /// The family of `event`: the list of every action, by family.
    fn of(event: &AuditEvent) -> Self {
        match event {
            AuditEvent::TenantCreated { .. } | AuditEvent::TenantTombstoned { .. } => Self::Tenant,
            AuditEvent::BudgetCreated { .. }
            | AuditEvent::BudgetClosed { .. }
            | AuditEvent::BudgetMoved { .. } => Self::Budget,
            AuditEvent::BudgetUpdated { .. } | AuditEvent::BudgetPeriodReset { .. } => Self::Period,
            AuditEvent::ReservationCreated { .. }
            | AuditEvent::ReservationCommitted { .. }
            | AuditEvent::ReservationReleased { .. }
            | AuditEvent::ReservationExtended { .. }
            | AuditEvent::ReservationExpired { .. } => Self::Reservation,
            AuditEvent::WebhookEndpoint { .. } | AuditEvent::WebhookEndpointId { .. } => {
                Self::Endpoint
            }
        }
    }

    /// The event of a row whose action is this family's, or `None` when it is another's.
    fn parse(
        self,
        action: &str,
        tenant_id: &str,
        payload: &str,
    ) -> Option<Result<AuditEvent, String>> {
        match self {
            Self::Tenant => tenant::parse(action, tenant_id, payload),
            Self::Budget => budget::parse(action, tenant_id, payload),
            Self::Period => period::parse(action, tenant_id, payload),
            Self::Reservation => reservation::parse(action, tenant_id, payload),
            Self::Endpoint => endpoint::parse(action, tenant_id, payload),
        }
    }
}

/// What a family's function does with another family's event: nothing, since [`Family::of`]
/// sends each event to its own family.
fn foreign(event: &AuditEvent) -> ! {
    unreachable!("an event of family {:?} sent to another", Family::of(event))
}

impl AuditEvent {
    /// The `action` column's text.
    pub(crate) fn action(&self) -> &'static str {
        match Family::of(self) {
            Family::Tenant => tenant::action(self),
            Family::Budget => budget::action(self),
            Family::Period => period::action(self),
            Family::Reservation => reservation::action(self),
            Family::Endpoint => endpoint::action(self),
        }
    }

    /// The tenant concerned: the `tenant_id` column. A webhook endpoint's event names the
    /// tenant the endpoint is limited to, if it is (the column is then empty).
    pub(crate) fn tenant_id(&self) -> Option<&TenantId> {
        Some(match Family::of(self) {
            Family::Tenant => tenant::tenant_id(self),
            Family::Budget => budget::tenant_id(self),
            Family::Period => period::tenant_id(self),
            Family::Reservation => reservation::tenant_id(self),
            Family::Endpoint => return endpoint::tenant_id(self),
        })
    }

    /// The payload: compact JSON, the contract's members in its order, amounts as strings,
    /// non-ASCII characters unescaped.
    pub(crate) fn payload(&self) -> String {
        match Family::of(self) {
            Family::Tenant => tenant::payload(self),
            Family::Budget => budget::payload(self),
            Family::Period => period::payload(self),
            Family::Reservation => reservation::payload(self),
            Family::Endpoint => endpoint::payload(self),
        }
    }

    /// Reads an event back from a row's `action`, `tenant_id` and `payload`. Anything but the
    /// canonical payload of a known action, about that row's tenant, is refused: two texts
    /// never stand for one event.
    pub(crate) fn parse(action: &str, tenant_id: &str, payload: &str) -> Result<Self, String> {
        let event = Family::ALL
            .into_iter()
            .find_map(|family| family.parse(action, tenant_id, payload))
            .unwrap_or_else(|| Err(format!("unknown action {action:?}")))?;
        if event.payload() != payload {
            return Err("the payload is not in its canonical form".into());
        }
        Ok(event)
    }

    /// Whether `actor` may record this event: only the system expires holds and records a
    /// period's boundary, and does nothing else; a tenant token only reserves, settles its
    /// reservations and charges; the admin (and an identity) does all but the system's.
    pub(super) fn may_be_recorded_by(&self, actor: &str) -> bool {
        let recorders = match Family::of(self) {
            Family::Tenant => tenant::recorders(self),
            Family::Budget => budget::recorders(self),
            Family::Period => period::recorders(self),
            Family::Reservation => reservation::recorders(self),
            Family::Endpoint => endpoint::recorders(self),
        };
        Recorders::include(recorders, actor)
    }
}

/// The replay's step, one row at a time: written here, beside the dispatch, so that the
/// replay's state ([`Replay`]) names no action and each family's step runs on it.
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

    /// Applies the event of row `seq`, which occurred `at`: its family runs the rule the
    /// writer ran (`domain::rules`) on the state the events before it left, and the event the
    /// rule records must be the event recorded.
    fn apply(&mut self, seq: i64, at: Timestamp, event: AuditEvent) -> Result<(), String> {
        match Family::of(&event) {
            Family::Tenant => tenant::replay(self, seq, at, event),
            Family::Budget => budget::replay(self, seq, at, event),
            Family::Period => period::replay(self, at, event),
            Family::Reservation => reservation::replay(self, seq, at, event),
            Family::Endpoint => endpoint::replay(self, seq, event),
        }
    }
}
