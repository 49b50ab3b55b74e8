//! `/v1/tenants/<id>/budgets`: create, list, read and close budgets; credit and debit them;
//! list their ledger entries.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::{
    FieldErrors, HttpResponse, Post, keyed, object_members, ok_json, parse_amount, parse_memo,
    parse_name, parse_positive_amount, query, read_post, respond, tenant_id,
};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::{
    Budget, BudgetId, BudgetState, Direction, EntryId, LedgerEntry, Movement, NewBudget, Unit,
};
use crate::problem::ApiError;
use crate::store::StoredResponse;
use crate::store::ops::{CloseBudget, CreateBudget, MoveBudget};
use crate::views;

use super::route::{Call, Route, handler, route, take, tenant};
use crate::oidc::Permission::{Manage, Read};

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    // List a tenant's budgets; create one.
    route("GET", "/v1/tenants/{id}/budgets", tenant(Read), handler!(|c| list(c.app, c.tenant(), c.query).await)),
    route("POST", "/v1/tenants/{id}/budgets", tenant(Manage), handler!(|c| { let (who, id) = (c.who(), c.tenant()); create(c.app, who, take(c.unread), id).await })),
    // Read a budget; close it.
    route("GET", "/v1/tenants/{id}/budgets/{budget_id}", tenant(Read), handler!(|c| { let (id, b) = c.pair(); get(c.app, id, b).await })),
    route("DELETE", "/v1/tenants/{id}/budgets/{budget_id}", tenant(Manage), handler!(|c| { let (id, b) = c.pair(); close(c.app, c.who(), id, b).await })),
    // Top a budget up; withdraw from it.
    route("POST", "/v1/tenants/{id}/budgets/{budget_id}/credits", tenant(Manage), handler!(|c| move_call(c, Direction::Credit).await)),
    route("POST", "/v1/tenants/{id}/budgets/{budget_id}/debits", tenant(Manage), handler!(|c| move_call(c, Direction::Debit).await)),
    // A budget's ledger.
    route("GET", "/v1/tenants/{id}/budgets/{budget_id}/entries", tenant(Read), handler!(|c| entries(c.app, c.pair(), c.query).await)),
];

/// A credit or a debit, from its route.
async fn move_call(call: Call<'_>, direction: Direction) -> Result<HttpResponse, ApiError> {
    let (who, ids) = (call.who(), call.pair());
    movement(call.app, who, take(call.unread), ids, direction).await
}

/// `POST /v1/tenants/<id>/budgets`.
pub(crate) async fn create(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    tenant: &str,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, false).await?;
    let budget = parse_create(&body)?;
    let tenant = tenant_id(tenant)?;
    let render = |budget: &Budget| StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: Some(format!(
            "/v1/tenants/{}/budgets/{}",
            budget.tenant_id, budget.id
        )),
        body: views::budget_json(budget),
    };
    let keyed = keyed(principal, key, "POST", &path, budget.fingerprint(), render);
    let written = app
        .store
        .write(CreateBudget {
            tenant,
            budget,
            actor: principal.actor(),
            keyed,
        })
        .await?;
    Ok(respond(written, render))
}

fn parse_create(body: &[u8]) -> Result<NewBudget, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let (mut name, mut deposit, mut unit) = (None, None, Some(Unit::atomic()));
    errors.walk(
        &members,
        &["name", "opening_deposit_atomic"],
        |errors, field, value| {
            match field {
                "name" => name = parse_name(errors, field, value),
                "opening_deposit_atomic" => deposit = parse_amount(errors, field, value),
                "unit" => {
                    unit = match value {
                        super::Member::Null => Some(Unit::atomic()),
                        super::Member::String(raw) => Unit::parse(raw)
                            .map_err(|message| errors.add(field, message))
                            .ok(),
                        _ => {
                            errors.add(field, "must be a string or null");
                            None
                        }
                    }
                }
                _ => return false,
            }
            true
        },
    );
    errors.finish()?;
    match (name, deposit, unit) {
        (Some(name), Some(opening_deposit), Some(unit)) => Ok(NewBudget {
            name,
            unit,
            opening_deposit,
        }),
        _ => unreachable!("a body without errors has every required member"),
    }
}

/// `GET /v1/tenants/<id>/budgets`.
pub(crate) async fn list(
    app: &App,
    tenant: &str,
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::list(raw_query, BudgetId::PREFIX, &BudgetState::NAMES, false)?;
    let page = app.store.list_budgets(tenant_id(tenant)?, query).await?;
    Ok(ok_json(views::budgets_json(&page)))
}

/// `GET /v1/tenants/<id>/budgets/<bid>`.
pub(crate) async fn get(app: &App, tenant: &str, budget: &str) -> Result<HttpResponse, ApiError> {
    let budget = app
        .store
        .budget(tenant_id(tenant)?, BudgetId::parse(budget))
        .await?;
    Ok(ok_json(views::budget_json(&budget)))
}

/// `DELETE /v1/tenants/<id>/budgets/<bid>`.
pub(crate) async fn close(
    app: &App,
    principal: &Principal,
    tenant: &str,
    budget: &str,
) -> Result<HttpResponse, ApiError> {
    let budget = app
        .store
        .write(CloseBudget {
            tenant: tenant_id(tenant)?,
            budget: BudgetId::parse(budget),
            actor: principal.actor(),
        })
        .await?;
    Ok(ok_json(views::budget_json(&budget)))
}

/// `POST /v1/tenants/<id>/budgets/<bid>/credits` and `…/debits`.
pub(crate) async fn movement(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    (tenant, budget): (&str, &str),
    direction: Direction,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, false).await?;
    let movement = parse_movement(&body, direction)?;
    let tenant = tenant_id(tenant)?;
    let render = |entry: &LedgerEntry| StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: None,
        body: views::entry_json(entry),
    };
    let keyed = keyed(
        principal,
        key,
        "POST",
        &path,
        movement.fingerprint(),
        render,
    );
    let written = app
        .store
        .write(MoveBudget {
            tenant,
            budget: BudgetId::parse(budget),
            movement,
            actor: principal.actor(),
            keyed,
        })
        .await?;
    Ok(respond(written, render))
}

fn parse_movement(body: &[u8], direction: Direction) -> Result<Movement, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let (mut amount, mut memo) = (None, Some(None));
    errors.walk(&members, &["amount_atomic"], |errors, field, value| {
        match field {
            "amount_atomic" => amount = parse_positive_amount(errors, field, value),
            "memo" => memo = parse_memo(errors, field, value),
            _ => return false,
        }
        true
    });
    errors.finish()?;
    match (amount, memo) {
        (Some(amount), Some(memo)) => Ok(Movement {
            direction,
            amount,
            memo,
        }),
        _ => unreachable!("a body without errors has every required member"),
    }
}

/// `GET /v1/tenants/<id>/budgets/<bid>/entries`.
pub(crate) async fn entries(
    app: &App,
    (tenant, budget): (&str, &str),
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::list(raw_query, EntryId::PREFIX, &[], false)?;
    let page = app
        .store
        .list_entries(tenant_id(tenant)?, BudgetId::parse(budget), query)
        .await?;
    Ok(ok_json(views::entries_json(&page)))
}

#[cfg(test)]
mod tests {
    use super::super::invalid_fields as fields;
    use super::*;

    #[test]
    fn budget_bodies_are_checked_whole() {
        let ok = parse_create(br#"{"name":"gpu","opening_deposit_atomic":"0","unit":null}"#)
            .expect("valid");
        assert_eq!(ok.unit, Unit::atomic());
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["name", "opening_deposit_atomic"]),
            (
                r#"{"name":"a","opening_deposit_atomic":"1","unit":"USD"}"#,
                &["unit"],
            ),
            (
                r#"{"name":"a","opening_deposit_atomic":1,"unit":5,"x":1}"#,
                &["opening_deposit_atomic", "unit", "x"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(fields(parse_create(body.as_bytes())), *want, "{body}");
        }
    }

    #[test]
    fn movement_bodies_are_checked_whole() {
        let ok = parse_movement(br#"{"amount_atomic":"5","memo":null}"#, Direction::Credit)
            .expect("valid");
        assert_eq!((ok.amount.get(), ok.memo), (5, None));
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["amount_atomic"]),
            (r#"{"amount_atomic":"0"}"#, &["amount_atomic"]),
            (r#"{"amount_atomic":"1","memo":" x"}"#, &["memo"]),
            (r#"{"amount_atomic":"1","memo":7}"#, &["memo"]),
        ];
        for (body, want) in cases {
            assert_eq!(
                fields(parse_movement(body.as_bytes(), Direction::Debit)),
                *want,
                "{body}"
            );
        }
    }
}
