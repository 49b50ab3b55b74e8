//! The enabled webhook endpoints as the outbox decides on them: which events each takes, read
//! once and kept by the writer until they may have changed.

use crate::domain::{EndpointId, EventType, EventTypes, TenantId};
use crate::store::StoreError;
use crate::store::rows::{self, ENDPOINT_COLUMNS};
use crate::store::sql::{Row, RowError, Sql};

/// An enabled webhook endpoint, as far as deciding which events it takes.
#[derive(Debug, Clone)]
pub(crate) struct Subscriber {
    /// The endpoint a delivery is written for.
    pub(crate) id: EndpointId,
    /// The event types it takes.
    types: EventTypes,
    /// The one tenant whose events it takes, if it takes only one's.
    tenant: Option<TenantId>,
}

impl Subscriber {
    /// Whether it takes an event of `kind` about `tenant`.
    pub(crate) fn takes(&self, kind: EventType, tenant: &TenantId) -> bool {
        self.types.matches(kind) && self.tenant.as_ref().is_none_or(|t| t == tenant)
    }
}

/// The enabled endpoints, in the order of their ids: what [`subscriber`] reads.
pub(crate) static ENABLED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE state = 'enabled' ORDER BY id")
});

/// Reads the enabled endpoints, in the order of their ids.
pub(crate) fn enabled(db: &mut impl Sql) -> Result<Vec<Subscriber>, StoreError> {
    db.query(&ENABLED, &[], subscriber)
}

/// An endpoint of [`ENABLED`].
pub(crate) fn subscriber(row: &Row<'_>) -> Result<Subscriber, RowError> {
    let e = rows::endpoint(row)?;
    Ok(Subscriber {
        id: e.id,
        types: e.event_types,
        tenant: e.tenant_id,
    })
}
