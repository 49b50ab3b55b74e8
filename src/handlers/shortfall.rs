//! A write refused for want of funds, told in the unit of the level that is short (the budget
//! moved, or one of its ancestors). The store's refusal carries the amount available and that
//! budget's id, so the budget is read for its unit on that path alone: a write that succeeds
//! costs nothing more. A budget's unit never changes, so reading it after the refusal gives
//! the unit the refusal was in.

use crate::app::App;
use crate::domain::{BudgetId, TenantId, Unit};
use crate::problem::ApiError;
use crate::store::StoreError;

/// The API's error for the store's `e`, a shortfall in the unit of the budget it names under
/// `tenant` (the path's text). The unit is left out, and the amount said in atomic units, when
/// the budget has the default unit or cannot be read.
pub(super) async fn refused(app: &App, e: StoreError, tenant: &str) -> ApiError {
    let StoreError::InsufficientFunds(available, short) = e else {
        return e.into();
    };
    let unit = match &short {
        Some(budget) => unit_of(app, tenant, budget).await,
        None => None,
    };
    ApiError::InsufficientFunds {
        available: available.to_string(),
        unit,
        budget: short.map(|b| b.as_str().to_owned()),
    }
}

/// The unit of `budget` under `tenant`, unless it is the default one.
async fn unit_of(app: &App, tenant: &str, budget: &BudgetId) -> Option<String> {
    let tenant = TenantId::parse(tenant)?;
    let unit = app
        .store
        .budget(tenant, Some(budget.clone()))
        .await
        .ok()?
        .unit;
    (unit != Unit::atomic()).then(|| unit.as_str().to_owned())
}
