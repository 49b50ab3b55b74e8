//! The outbox: each event written in the transaction of the change it reports, so there is
//! never an event without its change nor a change without its event.
//!
//! The operations hand it domain values (a tenant, a budget, an entry: one method a kind of
//! event), and this file alone renders them: an event's `data` is the JSON the API showed of
//! those objects at the instant of the change, so it is written with the change, in its
//! transaction, by the views' own rendering ([`EventData`]). Nothing else in the store calls
//! into `crate::views`.

use crate::domain::{
    Budget, DeliveryId, EndpointId, EventId, Figures, LedgerEntry, Reservation, Statement, Tenant,
    Timestamp,
};
use crate::store::StoreError;
use crate::store::sql::{Param, Sql};
use crate::store::write::state::WriterState;
use crate::store::write::subscribers::{self, Subscriber};
use crate::views::EventData;

impl<D: Sql> WriterState<D> {
    /// Writes `tenant.created` for `tenant`, at `at`.
    pub(crate) fn publish_tenant_created(
        &mut self,
        at: Timestamp,
        tenant: &Tenant,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::TenantCreated(tenant))
    }

    /// Writes `tenant.tombstoned` for `tenant`, now tombstoned, at `at`.
    pub(crate) fn publish_tenant_tombstoned(
        &mut self,
        at: Timestamp,
        tenant: &Tenant,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::TenantTombstoned(tenant))
    }

    /// Writes `budget.created` for `budget`, at `at`.
    pub(crate) fn publish_budget_created(
        &mut self,
        at: Timestamp,
        budget: &Budget,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::BudgetCreated(budget))
    }

    /// Writes `budget.updated` for `budget` as it now stands, at `at`.
    pub(crate) fn publish_budget_updated(
        &mut self,
        at: Timestamp,
        budget: &Budget,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::BudgetUpdated(budget))
    }

    /// Writes `budget.closed` for `budget`, now closed, at `at`.
    pub(crate) fn publish_budget_closed(
        &mut self,
        at: Timestamp,
        budget: &Budget,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::BudgetClosed(budget))
    }

    /// Writes `budget.credited` or `budget.debited` for `entry` and the budget it left, at
    /// `at`; nothing for an entry of the spend path (a charge, a hold, a commit, a release),
    /// which writes no event.
    pub(crate) fn publish_budget_moved(
        &mut self,
        at: Timestamp,
        budget: &Budget,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::BudgetMoved(budget, entry))
    }

    /// Writes `budget.period_reset`: `budget` in its new period, the statement of the period
    /// that `closed`, and the refill or forfeit `entry`, at `at`.
    pub(crate) fn publish_period_reset(
        &mut self,
        at: Timestamp,
        budget: &Budget,
        closed: &Statement,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::PeriodReset(budget, closed, entry))
    }

    /// Writes `reservation.expired` for `reservation` and its `budget`, at `at`.
    pub(crate) fn publish_reservation_expired(
        &mut self,
        at: Timestamp,
        reservation: &Reservation,
        budget: &Budget,
    ) -> Result<(), StoreError> {
        self.publish(at, EventData::ReservationExpired(reservation, budget))
    }

    /// Writes the event `data` tells of, written at `at`, inside the caller's transaction;
    /// nothing for a movement of the spend path, which writes none.
    fn publish(&mut self, at: Timestamp, data: EventData<'_>) -> Result<(), StoreError> {
        let Some(kind) = data.kind() else {
            return Ok(());
        };
        let id = EventId::from_ulid(self.next_ulid(at));
        self.db().send(
            "INSERT INTO events (id, type, created_at, tenant_id, data) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            &[
                id.as_str().into(),
                kind.name().into(),
                Param::Text(&at.to_string()),
                data.tenant_id().as_str().into(),
                Param::Text(&data.json()),
            ],
        )?;
        self.counts().event(kind);
        let tenant = data.tenant_id();
        let takers: Vec<EndpointId> = self
            .enabled_endpoints()?
            .iter()
            .filter(|s| s.takes(kind, tenant))
            .map(|s| s.id.clone())
            .collect();
        for endpoint in takers {
            let delivery = DeliveryId::from_ulid(self.next_ulid(at));
            self.db().send(
                "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, state, \
                 attempts, next_attempt_at) VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5)",
                &[
                    delivery.as_str().into(),
                    endpoint.as_str().into(),
                    id.as_str().into(),
                    kind.name().into(),
                    Param::Text(&at.to_string()),
                ],
            )?;
            self.counts().delivery_created();
        }
        Ok(())
    }

    /// The enabled endpoints, read once until they may have changed.
    fn enabled_endpoints(&mut self) -> Result<&[Subscriber], StoreError> {
        if self.subscribers().is_none() {
            let read = subscribers::enabled(self.db())?;
            *self.subscribers() = Some(read);
        }
        Ok(self.subscribers().as_deref().unwrap_or_default())
    }

    /// Writes a `budget.available_low` for each of `budget`'s thresholds that the movement
    /// from `before` to its figures now took `available_atomic` across (from above to at or
    /// below), largest first.
    pub(crate) fn alert(
        &mut self,
        budget: &Budget,
        before: &Figures,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        if budget.thresholds.is_empty() {
            return Ok(());
        }
        let (Some(was), Some(is)) = (before.available(), budget.figures.available()) else {
            return Err(StoreError::Internal(
                "a budget that breaks the invariant".into(),
            ));
        };
        for threshold in budget.thresholds.crossed(was, is) {
            self.publish(at, EventData::AvailableLow(budget, threshold))?;
        }
        Ok(())
    }
}
