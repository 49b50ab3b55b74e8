//! A write refused for want of funds, told in the unit of the level that is short (the budget
//! moved, or one of its ancestors). The store's refusal carries the amount available and that
//! budget's id, so the budget is read for its unit on that path alone: a write that succeeds
//! costs nothing more. A budget's unit never changes, so reading it after the refusal gives
//! the unit the refusal was in.

use crate::app::App;
use crate::domain::{BudgetId, ReservationId, TenantId, Unit};
use crate::problem::ApiError;
use crate::store::StoreError;

/// What a refused write took from: a budget named by the request (its id's text, if any),
/// or the budget a reservation holds on (the reservation's id's text).
#[derive(Debug, Clone, Copy)]
pub(super) enum Taken<'a> {
    /// A reserve, a debit or a charge names its budget.
    Budget(Option<&'a str>),
    /// A commit takes from its reservation's budget.
    Reservation(&'a str),
}

/// The API's error for the store's `e`, a shortfall in the unit of the budget it names, or
/// else of the budget `taken` names, under `tenant` (the path's text). The unit is left out, and the amount said in atomic
/// units, when the budget has the default unit or cannot be read.
pub(super) async fn refused(app: &App, e: StoreError, tenant: &str, taken: Taken<'_>) -> ApiError {
    let StoreError::InsufficientFunds(available, short) = e else {
        return e.into();
    };
    // The level that is short, where the store named it: the budget moved or an ancestor.
    let taken = match &short {
        Some(budget) => Taken::Budget(Some(budget.as_str())),
        None => taken,
    };
    ApiError::InsufficientFunds {
        available: available.to_string(),
        unit: unit_of(app, tenant, taken).await,
        budget: short.map(|b| b.as_str().to_owned()),
    }
}

/// The unit of the budget `taken` names, unless it is the default one.
async fn unit_of(app: &App, tenant: &str, taken: Taken<'_>) -> Option<String> {
    let tenant = TenantId::parse(tenant)?;
    let budget = match taken {
        Taken::Budget(id) => BudgetId::parse(id?)?,
        Taken::Reservation(id) => {
            let id = ReservationId::parse(id);
            app.store
                .reservation(tenant.clone(), id)
                .await
                .ok()?
                .budget_id
        }
    };
    let unit = app.store.budget(tenant, Some(budget)).await.ok()?.unit;
    (unit != Unit::atomic()).then(|| unit.as_str().to_owned())
}
