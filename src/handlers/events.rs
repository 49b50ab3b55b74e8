//! `/v1/events` and `/v1/tenants/<id>/events`: the events written with every change, to poll
//! or to page through.

use super::{HttpResponse, ok_json, query, tenant_id};
use crate::app::App;
use crate::domain::EventId;
use crate::problem::ApiError;
use crate::views;

use super::route::Access::Admin;
use super::route::{Route, handler, route, tenant};
use crate::oidc::Permission::Read;

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    route("GET", "/v1/events", Admin, handler!(|c| list(c.app, c.query).await)),
    route("GET", "/v1/events/{event_id}", Admin, handler!(|c| get(c.app, c.params[0]).await)),
    route("GET", "/v1/tenants/{id}/events", tenant(Read), handler!(|c| list_tenant(c.app, c.tenant(), c.query).await)),
];

/// A stored event whose `data` is not JSON: a damaged row, a bug's `500`.
fn damaged() -> ApiError {
    ApiError::Internal("a stored event's data is not JSON".into())
}

/// `GET /v1/events`.
async fn list(app: &App, raw_query: Option<&str>) -> Result<HttpResponse, ApiError> {
    let query = query::events(raw_query, true)?;
    let page = app.store.list_events(query).await?;
    Ok(ok_json(views::events_json(&page).ok_or_else(damaged)?))
}

/// `GET /v1/events/<evt>`.
async fn get(app: &App, id: &str) -> Result<HttpResponse, ApiError> {
    let event = app.store.event(EventId::parse(id)).await?;
    Ok(ok_json(views::event_json(&event).ok_or_else(damaged)?))
}

/// `GET /v1/tenants/<id>/events`.
async fn list_tenant(
    app: &App,
    tenant: &str,
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::events(raw_query, false)?;
    let page = app
        .store
        .list_tenant_events(tenant_id(tenant)?, query)
        .await?;
    Ok(ok_json(views::events_json(&page).ok_or_else(damaged)?))
}
