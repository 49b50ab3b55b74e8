//! `/v1/tenants`: create, read and tombstone a tenant.

use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, StatusCode};

use super::{
    FieldErrors, HttpResponse, check_json_body_headers, idempotency_key, keyed, object_members,
    ok_json, parse_amount, parse_name, query, read_body, renewal, respond, tenant_id,
};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::{IdempotencyKey, NewTenant, Thresholds};
use crate::problem::ApiError;
use crate::store::StoredResponse;
use crate::store::ops::{CreateTenant, Created, TombstoneTenant};
use crate::views;

use super::route::Access::Admin;
use super::route::{Route, handler, route, take, tenant as under_tenant};
use crate::oidc::Permission::{Manage, Read};

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    // List tenants; provision one.
    route("GET", "/v1/tenants", Admin, handler!(|c| list(c.app, c.query).await)),
    route("POST", "/v1/tenants", Admin, handler!(|c| create(c.app, c.who(), take(c.unread)).await)),
    // Read a tenant's overview; tombstone it.
    route("GET", "/v1/tenants/{id}", under_tenant(Read), handler!(|c| get(c.app, c.tenant()).await)),
    route("DELETE", "/v1/tenants/{id}", under_tenant(Manage), handler!(|c| tombstone(c.app, c.who(), c.tenant()).await)),
];

/// A create request as the handler hands it to the store: the parsed body and its key.
#[derive(Debug)]
pub struct CreateRequest {
    /// What to create.
    pub(crate) tenant: NewTenant,
    /// The `Idempotency-Key`, if one was sent.
    pub(crate) idempotency_key: Option<IdempotencyKey>,
}

impl CreateRequest {
    /// The name asked for.
    pub fn name(&self) -> &str {
        self.tenant.name.as_str()
    }

    /// The opening deposit asked for.
    pub fn opening_deposit(&self) -> u128 {
        self.tenant.opening_deposit.get()
    }

    /// The key, if one was sent.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_ref().map(IdempotencyKey::as_str)
    }
}

/// `POST /v1/tenants`. Checks in the contract's order: `413`, `415`, then a body sent with a
/// transfer coding that cannot be read (`501`, not in the contract's table), `400` (headers,
/// then JSON), `422`, `409`. The still-encoded body is read (and bounded) before it is
/// refused.
pub(crate) async fn create(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
) -> Result<HttpResponse, ApiError> {
    let (parts, body) = request.into_parts();
    let body = read_body(&parts.headers, body, app.limits.body_read_timeout).await?;
    let CreateRequest {
        tenant,
        idempotency_key,
    } = create_request(&parts.headers, &body)?;
    let url = std::sync::Arc::clone(&app.public_url);
    let keyed = keyed(
        principal,
        idempotency_key,
        "POST",
        parts.uri.path(),
        tenant.fingerprint(),
        move |created: &Created| created_response(created, &url),
    );
    let written = app
        .store
        .write(CreateTenant {
            tenant,
            actor: principal.actor(),
            keyed,
        })
        .await?;
    Ok(respond(written, |created| {
        created_response(created, &app.public_url)
    }))
}

/// The `201` of a create, with the sidecar's environment.
fn created_response(created: &Created, public_url: &str) -> StoredResponse {
    StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: Some(format!("/v1/tenants/{}", created.tenant.id)),
        body: views::created_json(&created.tenant, &created.token, public_url),
    }
}

/// Turns a create's headers and whole body into a store command: `415`, `501`, then `400`
/// (the `Idempotency-Key`, then the JSON), then `422`. Everything below the socket and above
/// the store, so the fuzzer drives exactly what a client can reach.
pub fn create_request(headers: &HeaderMap, body: &[u8]) -> Result<CreateRequest, ApiError> {
    check_json_body_headers(headers)?;
    let idempotency_key = idempotency_key(headers)?;
    let tenant = parse_create(body)?;
    Ok(CreateRequest {
        tenant,
        idempotency_key,
    })
}

/// Parses and validates a create body, reporting every bad field at once.
fn parse_create(body: &[u8]) -> Result<NewTenant, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let (mut name, mut deposit) = (None, None);
    let (mut policy, mut thresholds) = (Some(None), Some(Thresholds::default()));
    errors.walk(
        &members,
        &["name", "opening_deposit_atomic"],
        |errors, field, value| {
            match field {
                "name" => name = parse_name(errors, field, value),
                "opening_deposit_atomic" => deposit = parse_amount(errors, field, value),
                "period" => policy = renewal::parse_period(errors, field, value),
                "alert_thresholds_atomic" => {
                    thresholds = renewal::parse_thresholds(errors, field, value);
                }
                _ => return false,
            }
            true
        },
    );
    errors.finish()?;
    match (name, deposit, policy, thresholds) {
        (Some(name), Some(opening_deposit), Some(policy), Some(thresholds)) => Ok(NewTenant {
            name,
            opening_deposit,
            policy,
            thresholds,
        }),
        _ => unreachable!("a body without errors has every required member"),
    }
}

/// `GET /v1/tenants/<id>`.
pub(crate) async fn get(app: &App, id: &str) -> Result<HttpResponse, ApiError> {
    let id = tenant_id(id)?;
    let tenant = app.store.tenant(id).await?;
    Ok(ok_json(views::tenant_json(&tenant)))
}

/// `GET /v1/tenants`.
pub(crate) async fn list(app: &App, raw_query: Option<&str>) -> Result<HttpResponse, ApiError> {
    let query = query::tenants(raw_query)?;
    let page = app.store.list_tenants(query).await?;
    Ok(ok_json(views::tenants_json(&page)))
}

/// `DELETE /v1/tenants/<id>`.
pub(crate) async fn tombstone(
    app: &App,
    principal: &Principal,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id(id)?;
    let tenant = app
        .store
        .write(TombstoneTenant {
            id,
            actor: principal.actor(),
        })
        .await?;
    Ok(ok_json(views::tenant_json(&tenant)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::{self, HeaderValue};

    fn fields(body: &str) -> Vec<String> {
        match parse_create(body.as_bytes()) {
            Err(ApiError::ValidationFailed(errors)) => {
                errors.into_iter().map(|e| e.field).collect()
            }
            other => panic!("{body}: expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn a_good_body_parses() {
        let parsed =
            parse_create(br#"{ "opening_deposit_atomic": "7", "name": "acme" }"#).expect("valid");
        assert_eq!(parsed.name.as_str(), "acme");
        assert_eq!(parsed.opening_deposit.get(), 7);
    }

    #[test]
    fn every_bad_field_is_reported_once() {
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["name", "opening_deposit_atomic"]),
            (
                r#"{"name":"","opening_deposit_atomic":"01"}"#,
                &["name", "opening_deposit_atomic"],
            ),
            (
                r#"{"name":"a","opening_deposit_atomic":5}"#,
                &["opening_deposit_atomic"],
            ),
            (
                r#"{"name":"n","opening_deposit_atomic":1e400}"#,
                &["opening_deposit_atomic"],
            ),
            (
                r#"{"name":"n","opening_deposit_atomic":"1","x":1e400}"#,
                &["x"],
            ),
            (r#"{"name":1,"opening_deposit_atomic":"5"}"#, &["name"]),
            (
                r#"{"name":"a","opening_deposit_atomic":"5","nmae":"x"}"#,
                &["nmae"],
            ),
            (
                r#"{"name":"a","name":"b","opening_deposit_atomic":"5"}"#,
                &["name"],
            ),
            (
                r#"{"name":null,"opening_deposit_atomic":null,"x":1,"y":2}"#,
                &["name", "opening_deposit_atomic", "x", "y"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(fields(body), *want, "{body}");
        }
    }

    #[test]
    fn a_wrong_media_type_outranks_an_unknown_transfer_coding() {
        let body = br#"{"name":"a","opening_deposit_atomic":"1"}"#;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, chunked"),
        );
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(matches!(
            create_request(&headers, body),
            Err(ApiError::UnsupportedMediaType)
        ));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(matches!(
            create_request(&headers, body),
            Err(ApiError::UnsupportedTransferCoding)
        ));
    }

    #[test]
    fn a_content_coding_makes_a_create_415() {
        for (value, coded) in [("gzip", true), ("identity", false), ("identity, br", true)] {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(value));
            let body = br#"{"name":"a","opening_deposit_atomic":"1"}"#;
            assert_eq!(
                matches!(
                    create_request(&headers, body),
                    Err(ApiError::UnsupportedMediaType)
                ),
                coded,
                "{value}"
            );
        }
    }
}
