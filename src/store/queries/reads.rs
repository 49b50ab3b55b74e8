//! The reads a reader thread answers ([`Reads`]), each one of the queries, for any
//! connection of the seam.

use std::time::Duration;

use super::budgets;
use super::events;
use super::reservations;
use super::tenants;
use super::webhooks;
use crate::domain::{
    Budget, BudgetId, Delivery, Endpoint, EndpointId, EntryId, Event, EventId, LedgerEntry,
    Reservation, ReservationId, Statement, Tenant, TenantId, Timestamp,
};
use crate::store::sql::Sql;
use crate::store::{Credential, ListQuery, Page, StoreError, run_guarded};

/// Where a token check's answer goes.
pub(crate) type CredentialReply =
    tokio::sync::oneshot::Sender<Result<Option<Credential>, StoreError>>;

/// Answers token checks `checks` together ([`Reads::credentials`]), each on its reply
/// channel; a check whose requester has gone is dropped.
pub(crate) fn answer_credentials(conn: &mut dyn Reads, checks: Vec<(TenantId, CredentialReply)>) {
    let (ids, replies): (Vec<_>, Vec<_>) = checks.into_iter().unzip();
    match run_guarded(|| conn.credentials(&ids)) {
        Ok(found) => {
            for (reply, credential) in replies.into_iter().zip(found) {
                let _ = reply.send(Ok(credential));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// The reads a reader thread answers, on any backend's connection.
pub(crate) trait Reads: Send {
    /// A tenant, with its default budget.
    fn tenant(&mut self, id: &TenantId) -> Result<Tenant, StoreError>;
    /// A budget of a tenant.
    fn budget(&mut self, tenant: &TenantId, id: Option<&BudgetId>) -> Result<Budget, StoreError>;
    /// A reservation of a tenant.
    fn reservation(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Result<Reservation, StoreError>;
    /// A page of tenants.
    fn list_tenants(&mut self, query: &ListQuery) -> Result<Page<Tenant>, StoreError>;
    /// A page of a tenant's budgets.
    fn list_budgets(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Budget>, StoreError>;
    /// A page of a budget's ledger entries.
    fn list_entries(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<Page<LedgerEntry>, StoreError>;
    /// A page of a tenant's reservations.
    fn list_reservations(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Reservation>, StoreError>;
    /// One ledger entry of a budget.
    fn entry(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        id: Option<&EntryId>,
    ) -> Result<LedgerEntry, StoreError>;
    /// A page of a budget's period statements, with the budget.
    fn list_periods(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<(Budget, Page<Statement>), StoreError>;
    /// A page of events.
    fn list_events(&mut self, query: &ListQuery) -> Result<Page<Event>, StoreError>;
    /// One webhook endpoint.
    fn endpoint(&mut self, id: Option<&EndpointId>) -> Result<Endpoint, StoreError>;
    /// The endpoints `owner` sends to, and whether one is held by no one.
    fn sending(
        &mut self,
        owner: &str,
        now: Timestamp,
    ) -> Result<(Vec<webhooks::Sending>, bool), StoreError>;
    /// An endpoint's due deliveries.
    fn due_deliveries(
        &mut self,
        endpoint: &EndpointId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<webhooks::Due>, StoreError>;
    /// How long the oldest pending delivery has waited.
    fn oldest_pending(&mut self, now: Timestamp) -> Result<Option<Duration>, StoreError>;
    /// A page of webhook endpoints.
    fn list_endpoints(&mut self, query: &ListQuery) -> Result<Page<Endpoint>, StoreError>;
    /// A page of an endpoint's deliveries.
    fn list_deliveries(
        &mut self,
        endpoint: Option<&EndpointId>,
        query: &ListQuery,
    ) -> Result<Page<Delivery>, StoreError>;
    /// A page of a tenant's events.
    fn list_tenant_events(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Event>, StoreError>;
    /// One event.
    fn event(&mut self, id: Option<&EventId>) -> Result<Event, StoreError>;
    /// What the tokens of the tenants must match, in their order
    /// ([`tenants::credentials`]: one round trip for them all on PostgreSQL).
    fn credentials(&mut self, ids: &[TenantId]) -> Result<Vec<Option<Credential>>, StoreError>;
    /// Whether token checks taken together cost less than one by one: where each is a round
    /// trip to a server (PostgreSQL), not a read in the process.
    fn checks_together(&self) -> bool;
}

impl<D: Sql + Send> Reads for D {
    fn tenant(&mut self, id: &TenantId) -> Result<Tenant, StoreError> {
        tenants::tenant(self, id)?.ok_or(StoreError::TenantNotFound)
    }

    fn budget(&mut self, tenant: &TenantId, id: Option<&BudgetId>) -> Result<Budget, StoreError> {
        budgets::budget(self, tenant, id)
    }

    fn reservation(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Result<Reservation, StoreError> {
        reservations::reservation(self, tenant, id)
    }

    fn list_tenants(&mut self, query: &ListQuery) -> Result<Page<Tenant>, StoreError> {
        tenants::list_tenants(self, query)
    }

    fn list_budgets(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Budget>, StoreError> {
        budgets::list_budgets(self, tenant, query)
    }

    fn list_entries(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<Page<LedgerEntry>, StoreError> {
        budgets::list_entries(self, tenant, budget, query)
    }

    fn list_reservations(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Reservation>, StoreError> {
        reservations::list_reservations(self, tenant, query)
    }

    fn entry(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        id: Option<&EntryId>,
    ) -> Result<LedgerEntry, StoreError> {
        budgets::entry(self, tenant, budget, id)
    }

    fn list_periods(
        &mut self,
        tenant: &TenantId,
        budget: Option<&BudgetId>,
        query: &ListQuery,
    ) -> Result<(Budget, Page<Statement>), StoreError> {
        budgets::list_periods(self, tenant, budget, query)
    }

    fn list_events(&mut self, query: &ListQuery) -> Result<Page<Event>, StoreError> {
        events::list_events(self, query)
    }

    fn endpoint(&mut self, id: Option<&EndpointId>) -> Result<Endpoint, StoreError> {
        webhooks::endpoint(self, id)
    }

    fn sending(
        &mut self,
        owner: &str,
        now: Timestamp,
    ) -> Result<(Vec<webhooks::Sending>, bool), StoreError> {
        webhooks::sending(self, owner, now)
    }

    fn due_deliveries(
        &mut self,
        endpoint: &EndpointId,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<webhooks::Due>, StoreError> {
        webhooks::due_deliveries(self, endpoint, now, limit)
    }

    fn oldest_pending(&mut self, now: Timestamp) -> Result<Option<Duration>, StoreError> {
        webhooks::oldest_pending(self, now)
    }

    fn list_endpoints(&mut self, query: &ListQuery) -> Result<Page<Endpoint>, StoreError> {
        webhooks::list_endpoints(self, query)
    }

    fn list_deliveries(
        &mut self,
        endpoint: Option<&EndpointId>,
        query: &ListQuery,
    ) -> Result<Page<Delivery>, StoreError> {
        webhooks::list_deliveries(self, endpoint, query)
    }

    fn list_tenant_events(
        &mut self,
        tenant: &TenantId,
        query: &ListQuery,
    ) -> Result<Page<Event>, StoreError> {
        events::list_tenant_events(self, tenant, query)
    }

    fn event(&mut self, id: Option<&EventId>) -> Result<Event, StoreError> {
        events::event(self, id)
    }

    fn credentials(&mut self, ids: &[TenantId]) -> Result<Vec<Option<Credential>>, StoreError> {
        tenants::credentials(self, ids)
    }

    fn checks_together(&self) -> bool {
        D::SHARED
    }
}
