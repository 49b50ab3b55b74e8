//! The write operations, one type in a file of each: its fields are the request as the store
//! receives it, its [`WriteOp::run`](super::write::WriteOp::run) reads what it changes,
//! decides with checked arithmetic and writes the result, all on the one connection that
//! writes, inside its own savepoint: there is no window between a check and its act.
//! Refusals follow the contract's order: `404` (tenant, then budget or reservation), then
//! `409` (`tenant_tombstoned`, `budget_closed`, `reservation_not_active`, then the others).
//!
//! Before an operation touches a budget it records the expiry of every reservation of that
//! budget whose time is up, so no entry ever counts an expired hold ([`effects`]).
//!
//! Adding one: a file here with the type and its `impl WriteOp`, and its line below.

mod effects;

mod attempts;
mod batch;
mod close_budget;
mod create_budget;
mod create_tenant;
mod endpoints;
#[cfg(test)]
mod expire_due;
mod move_budget;
mod purge_events;
mod purge_expired;
mod reserve;
mod settle;
mod tombstone_tenant;
mod update_budget;

pub(crate) use attempts::{Attempted, ClaimEndpoints, RecordAttempt};
pub(crate) use batch::{BATCH_OPERATIONS_MAX, BatchItem, BatchOutcome, ItemResult, SendBatch};
pub(crate) use close_budget::CloseBudget;
pub(crate) use create_budget::CreateBudget;
pub(crate) use create_tenant::{CreateTenant, Created};
pub(crate) use endpoints::{
    CreateEndpoint, DeleteEndpoint, RetryDelivery, RotateSecret, Secret, UpdateEndpoint,
};
#[cfg(test)]
pub(crate) use expire_due::ExpireDue;
pub(crate) use move_budget::MoveBudget;
pub(crate) use purge_events::PurgeEvents;
pub(crate) use purge_expired::PurgeExpired;
pub(crate) use reserve::Reserve;
pub(crate) use settle::SettleReservation;
pub(crate) use tombstone_tenant::TombstoneTenant;
pub(crate) use update_budget::{BudgetPatch, UpdateBudget};
