//! `/v1/webhook-endpoints`: endpoints made, listed, read, changed, deleted and given new
//! secrets; their deliveries listed and retried. Admin only. A secret leaves the process in
//! the answer that made it and nowhere else.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::{
    FieldErrors, HttpResponse, Member, Post, array_items, keyed, object_members, ok_json,
    parse_memo, query, read_patch, read_post, respond,
};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::{
    BodyFingerprint, DeliveryId, Endpoint, EndpointId, EndpointPatch, EventTypes, NewEndpoint,
    TenantId,
};
use crate::problem::ApiError;
use crate::store::StoredResponse;
use crate::store::ops::{
    CreateEndpoint, DeleteEndpoint, RetryDelivery, RotateSecret, Secret, UpdateEndpoint,
};
use crate::views;
use crate::webhook;

use super::route::Access::Admin;
use super::route::{Route, handler, route, take};

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    route("GET", "/v1/webhook-endpoints", Admin, handler!(|c| list(c.app, c.query).await)),
    route("POST", "/v1/webhook-endpoints", Admin, handler!(|c| create(c.app, c.who(), take(c.unread)).await)),
    route("GET", "/v1/webhook-endpoints/{endpoint_id}", Admin, handler!(|c| get(c.app, c.params[0]).await)),
    route("PATCH", "/v1/webhook-endpoints/{endpoint_id}", Admin, handler!(|c| { let (who, id) = (c.who(), c.params[0]); patch(c.app, who, take(c.unread), id).await })),
    route("DELETE", "/v1/webhook-endpoints/{endpoint_id}", Admin, handler!(|c| delete(c.app, c.who(), c.params[0]).await)),
    route("POST", "/v1/webhook-endpoints/{endpoint_id}/rotate-secret", Admin, handler!(|c| { let (who, id) = (c.who(), c.params[0]); rotate(c.app, who, take(c.unread), id).await })),
    route("GET", "/v1/webhook-endpoints/{endpoint_id}/deliveries", Admin, handler!(|c| deliveries(c.app, c.params[0], c.query).await)),
    route("POST", "/v1/webhook-endpoints/{endpoint_id}/deliveries/{delivery_id}/retry", Admin, handler!(|c| { let p = (c.params[0], c.params[1]); retry(c.app, c.who(), take(c.unread), p).await })),
];

/// `GET /v1/webhook-endpoints`.
async fn list(app: &App, raw_query: Option<&str>) -> Result<HttpResponse, ApiError> {
    let query = query::list(raw_query, EndpointId::PREFIX, &[], false)?;
    let page = app.store.list_endpoints(query).await?;
    Ok(ok_json(views::endpoints_json(&page)))
}

/// `GET /v1/webhook-endpoints/<whe>`.
async fn get(app: &App, id: &str) -> Result<HttpResponse, ApiError> {
    let endpoint = app.store.endpoint(EndpointId::parse(id)).await?;
    Ok(ok_json(views::endpoint_json(&endpoint, None)))
}

/// `POST /v1/webhook-endpoints`: `201` with the secret, shown here once.
async fn create(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, false).await?;
    let endpoint = parse_create(&body, app.webhook_allow_http)?;
    let secret = webhook::Secret::generate();
    let shown = secret.reveal();
    let render = move |e: &Endpoint| StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: Some(format!("/v1/webhook-endpoints/{}", e.id)),
        body: views::endpoint_json(e, Some(&shown)),
    };
    let keyed = keyed(
        principal,
        key,
        "POST",
        &path,
        fingerprint(&endpoint),
        render.clone(),
    );
    let written = app
        .store
        .write(CreateEndpoint {
            endpoint,
            secret: Secret(*secret.as_bytes()),
            actor: principal.actor(),
            keyed,
        })
        .await?;
    Ok(respond(written, render))
}

/// What makes two creates the same body: the parsed values.
fn fingerprint(e: &NewEndpoint) -> BodyFingerprint {
    let text = format!(
        "webhook_endpoint\n{}\n{}\n{}\n{}",
        e.url,
        e.event_types.to_column(),
        e.tenant_id.as_ref().map_or("-", TenantId::as_str),
        e.description
            .as_ref()
            .map_or("-".to_owned(), |d| format!("+{}", d.as_str())),
    );
    BodyFingerprint::of(text.as_bytes())
}

fn parse_create(body: &[u8], allow_http: bool) -> Result<NewEndpoint, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let (mut url, mut types, mut tenant, mut description) =
        (None, Some(EventTypes::All), Some(None), Some(None));
    errors.walk(&members, &["url"], |errors, field, value| {
        match field {
            "url" => url = parse_url(errors, field, value, allow_http),
            "event_types" => types = parse_event_types(errors, field, value),
            "tenant_id" => tenant = parse_tenant(errors, field, value),
            "description" => description = parse_memo(errors, field, value),
            _ => return false,
        }
        true
    });
    errors.finish()?;
    match (url, types, tenant, description) {
        (Some(url), Some(event_types), Some(tenant_id), Some(description)) => Ok(NewEndpoint {
            url,
            description,
            event_types,
            tenant_id,
        }),
        _ => Err(ApiError::Internal("a checked body lost a member".into())),
    }
}

/// `PATCH /v1/webhook-endpoints/<whe>`.
async fn patch(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let body = read_patch(app, request).await?;
    let patch = parse_patch(&body, app.webhook_allow_http)?;
    let endpoint = app
        .store
        .write(UpdateEndpoint {
            id: EndpointId::parse(id),
            patch,
            actor: principal.actor(),
        })
        .await?;
    Ok(ok_json(views::endpoint_json(&endpoint, None)))
}

fn parse_patch(body: &[u8], allow_http: bool) -> Result<EndpointPatch, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let mut patch = EndpointPatch::default();
    errors.walk(&members, &[], |errors, field, value| {
        match field {
            "url" => patch.url = parse_url(errors, field, value, allow_http),
            "event_types" => patch.event_types = parse_event_types(errors, field, value),
            "tenant_id" => patch.tenant_id = parse_tenant(errors, field, value),
            "description" => patch.description = parse_memo(errors, field, value),
            "enabled" => match value {
                Member::Bool(enabled) => patch.enabled = Some(*enabled),
                _ => errors.add(field, "must be true or false"),
            },
            _ => return false,
        }
        true
    });
    errors.finish()?;
    Ok(patch)
}

/// `DELETE /v1/webhook-endpoints/<whe>`.
async fn delete(app: &App, principal: &Principal, id: &str) -> Result<HttpResponse, ApiError> {
    let endpoint = app
        .store
        .write(DeleteEndpoint {
            id: EndpointId::parse(id),
            actor: principal.actor(),
        })
        .await?;
    Ok(ok_json(views::endpoint_json(&endpoint, None)))
}

/// `POST /v1/webhook-endpoints/<whe>/rotate-secret`: the new secret, shown here once.
async fn rotate(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, true).await?;
    no_members(&body)?;
    let secret = webhook::Secret::generate();
    let shown = secret.reveal();
    let render = move |e: &Endpoint| StoredResponse {
        status: StatusCode::OK.as_u16(),
        location: None,
        body: views::endpoint_json(e, Some(&shown)),
    };
    let fingerprint = BodyFingerprint::of(b"rotate-secret");
    let keyed = keyed(principal, key, "POST", &path, fingerprint, render.clone());
    let written = app
        .store
        .write(RotateSecret {
            id: EndpointId::parse(id),
            secret: Secret(*secret.as_bytes()),
            actor: principal.actor(),
            keyed,
        })
        .await?;
    Ok(respond(written, render))
}

/// `GET /v1/webhook-endpoints/<whe>/deliveries`.
async fn deliveries(
    app: &App,
    id: &str,
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::deliveries(raw_query)?;
    let page = app
        .store
        .list_deliveries(EndpointId::parse(id), query)
        .await?;
    Ok(ok_json(views::deliveries_json(&page)))
}

/// `POST /v1/webhook-endpoints/<whe>/deliveries/<whd>/retry`: `202`, one more attempt now.
async fn retry(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    (endpoint, delivery): (&str, &str),
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, true).await?;
    no_members(&body)?;
    let render = |d: &crate::domain::Delivery| StoredResponse {
        status: StatusCode::ACCEPTED.as_u16(),
        location: None,
        body: views::delivery_json(d),
    };
    let fingerprint = BodyFingerprint::of(b"retry");
    let keyed = keyed(principal, key, "POST", &path, fingerprint, render);
    let written = app
        .store
        .write(RetryDelivery {
            endpoint: EndpointId::parse(endpoint),
            delivery: DeliveryId::parse(delivery),
            keyed,
        })
        .await?;
    Ok(respond(written, render))
}

/// A body that must be empty or `{}`: every member is unknown.
fn no_members(body: &[u8]) -> Result<(), ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    errors.walk(&members, &[], |_, _, _| false);
    errors.finish()
}

/// A URL member, checked as [`webhook::url::parse`] does.
fn parse_url(
    errors: &mut FieldErrors,
    field: &str,
    value: &Member,
    allow_http: bool,
) -> Option<String> {
    match value {
        Member::String(raw) => match webhook::url::parse(raw, allow_http) {
            Ok(_) => Some(raw.clone()),
            Err(message) => {
                errors.add(field, message);
                None
            }
        },
        _ => {
            errors.add(field, "must be a string: an absolute https:// URL");
            None
        }
    }
}

/// An `event_types` member; `null` stands for the default, `["*"]`.
fn parse_event_types(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<EventTypes> {
    let items = match value {
        Member::Null => return Some(EventTypes::All),
        Member::Array(text) => match array_items(text) {
            Ok(items) => items,
            Err(_) => {
                errors.add(field, "must be an array of event types");
                return None;
            }
        },
        _ => {
            errors.add(field, "must be an array of event types, or [\"*\"]");
            return None;
        }
    };
    let mut names = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item {
            Member::String(name) => names.push(name.as_str()),
            _ => {
                errors.add(&format!("{field}.{i}"), "must be an event type");
                return None;
            }
        }
    }
    match EventTypes::parse(&names) {
        Ok(types) => Some(types),
        Err((at, message)) => {
            let field = at.map_or_else(|| field.to_owned(), |i| format!("{field}.{i}"));
            errors.add(&field, message);
            None
        }
    }
}

/// A `tenant_id` member: a tenant id, or `null` for every tenant.
fn parse_tenant(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Option<TenantId>> {
    match value {
        Member::Null => Some(None),
        Member::String(raw) => match TenantId::parse(raw) {
            Some(id) => Some(Some(id)),
            None => {
                errors.add(field, "must be a tenant id, or null");
                None
            }
        },
        _ => {
            errors.add(field, "must be a tenant id, or null");
            None
        }
    }
}
