//! `/v1/tenants/<id>/budgets`: create, list, read, change and close budgets; credit, debit
//! and charge them (`/v1/tenants/<id>/charges`, whose body names the budget); list their
//! ledger entries and period statements.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::refused;
use super::{
    FieldErrors, HttpResponse, Member, Post, keyed, object_members, ok_json, parse_amount,
    parse_memo, parse_name, parse_positive_amount, query, read_patch, read_post, renewal, respond,
    tenant_id,
};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::{
    Budget, BudgetId, Direction, EntryId, LedgerEntry, Movement, NewBudget, PARENT_UNKNOWN,
    PeriodId, Thresholds, Unit,
};
use crate::problem::ApiError;
use crate::store::ops::{BudgetPatch, CloseBudget, CreateBudget, MoveBudget, UpdateBudget};
use crate::store::{StoredResponse, TokenCheck};
use crate::views;

use super::route::{Call, Params, Route, handler, route, take, tenant};
use crate::oidc::Permission::{Manage, Read, Spend};

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
    // Spend from a budget without a hold.
    route("POST", "/v1/tenants/{id}/charges", tenant(Spend), handler!(|c| { let (who, check, id) = (c.who(), c.check(), c.tenant()); movement(c.app, (who, check), take(c.unread), (id, None), Direction::Charge).await })).checked_by_its_write(),
    // Set, change or clear its period and thresholds.
    route("PATCH", "/v1/tenants/{id}/budgets/{budget_id}", tenant(Manage), handler!(|c| { let (who, ids) = (c.who(), c.pair()); patch(c.app, who, take(c.unread), ids).await })),
    // A budget's ledger; one entry of it.
    route("GET", "/v1/tenants/{id}/budgets/{budget_id}/entries", tenant(Read), handler!(|c| entries(c.app, c.pair(), c.query).await)),
    route("GET", "/v1/tenants/{id}/budgets/{budget_id}/entries/{entry_id}", tenant(Read), handler!(|c| entry(c.app, c.params).await)),
    // A budget's period statements.
    route("GET", "/v1/tenants/{id}/budgets/{budget_id}/periods", tenant(Read), handler!(|c| periods(c.app, c.pair(), c.query).await)),
];

/// A credit or a debit, from its route.
async fn move_call(call: Call<'_>, direction: Direction) -> Result<HttpResponse, ApiError> {
    let (who, check, (tenant, budget)) = (call.who(), call.check(), call.pair());
    movement(
        call.app,
        (who, check),
        take(call.unread),
        (tenant, Some(budget)),
        direction,
    )
    .await
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
    let (mut policy, mut thresholds) = (Some(None), Some(Thresholds::default()));
    let mut parent = Some(None);
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
                "period" => policy = renewal::parse_period(errors, field, value),
                "alert_thresholds_atomic" => {
                    thresholds = renewal::parse_thresholds(errors, field, value);
                }
                "parent_id" => parent = parse_parent(errors, field, value),
                _ => return false,
            }
            true
        },
    );
    errors.finish()?;
    match (name, deposit, unit, policy, thresholds, parent) {
        (
            Some(name),
            Some(opening_deposit),
            Some(unit),
            Some(policy),
            Some(thresholds),
            Some(parent),
        ) => Ok(NewBudget {
            name,
            unit,
            opening_deposit,
            policy,
            thresholds,
            parent,
        }),
        _ => unreachable!("a body without errors has every required member"),
    }
}

/// A budget's `parent_id`: `null` (at the top), or the id of a budget (whether it is an open
/// budget of the tenant is decided with the write).
fn parse_parent(
    errors: &mut FieldErrors,
    field: &str,
    value: &super::Member,
) -> Option<Option<BudgetId>> {
    match value {
        super::Member::Null => Some(None),
        super::Member::String(raw) => match BudgetId::parse(raw) {
            Some(id) => Some(Some(id)),
            None => {
                errors.add(field, PARENT_UNKNOWN);
                None
            }
        },
        _ => {
            errors.add(field, "must be a budget id or null");
            None
        }
    }
}

/// `GET /v1/tenants/<id>/budgets`.
pub(crate) async fn list(
    app: &App,
    tenant: &str,
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::budgets(raw_query)?;
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

/// `POST /v1/tenants/<id>/budgets/<bid>/credits` and `…/debits`, and
/// `POST /v1/tenants/<id>/charges`, whose body names the budget (`budget` is `None`). The
/// principal comes with its token's check where that is left to the write.
pub(crate) async fn movement(
    app: &App,
    (principal, check): (&Principal, Option<Arc<TokenCheck>>),
    request: Request<Incoming>,
    (tenant, budget): (&str, Option<&str>),
    direction: Direction,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, false).await?;
    let (movement, named) = parse_movement(&body, direction)?;
    let fingerprint = movement.fingerprint(named.as_deref());
    let budget_text = budget.or(named.as_deref());
    let budget = budget_text.and_then(BudgetId::parse);
    let tenant_text = tenant;
    let tenant = tenant_id(tenant)?;
    let render = |entry: &LedgerEntry| StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: None,
        body: views::entry_json(entry),
    };
    let keyed = keyed(principal, key, "POST", &path, fingerprint, render);
    let written = app
        .store
        .write_checked(
            MoveBudget {
                tenant,
                budget,
                movement,
                actor: principal.actor(),
                keyed,
            },
            check,
        )
        .await;
    match written {
        Ok(written) => Ok(respond(written, render)),
        Err(e) => Err(refused(app, e, tenant_text).await),
    }
}

/// A movement's body, and the budget it names: a charge's body names its budget
/// (`budget_id`, required), a credit's and a debit's path does.
fn parse_movement(
    body: &[u8],
    direction: Direction,
) -> Result<(Movement, Option<String>), ApiError> {
    movement_of(&object_members(body)?, direction)
}

/// A movement's members ([`parse_movement`]), as a batch's operation gives them too.
pub(super) fn movement_of(
    members: &[(String, Member)],
    direction: Direction,
) -> Result<(Movement, Option<String>), ApiError> {
    let mut errors = FieldErrors::default();
    let (mut amount, mut memo, mut budget) = (None, Some(None), None);
    let charge = direction == Direction::Charge;
    let required: &[&str] = if charge {
        &["budget_id", "amount_atomic"]
    } else {
        &["amount_atomic"]
    };
    errors.walk(members, required, |errors, field, value| {
        match (field, value) {
            ("budget_id", Member::String(raw)) if charge => budget = Some(raw.clone()),
            ("budget_id", _) if charge => errors.add(field, "must be a string"),
            ("amount_atomic", _) => amount = parse_positive_amount(errors, field, value),
            ("memo", _) => memo = parse_memo(errors, field, value),
            _ => return false,
        }
        true
    });
    errors.finish()?;
    match (amount, memo) {
        (Some(amount), Some(memo)) => Ok((
            Movement {
                direction,
                amount,
                memo,
            },
            budget,
        )),
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

/// `GET /v1/tenants/<id>/budgets/<bid>/entries/<eid>`.
pub(crate) async fn entry(
    app: &App,
    [tenant, budget, entry]: Params<'_>,
) -> Result<HttpResponse, ApiError> {
    let entry = app
        .store
        .entry(
            tenant_id(tenant)?,
            BudgetId::parse(budget),
            EntryId::parse(entry),
        )
        .await?;
    Ok(ok_json(views::entry_json(&entry)))
}

/// `GET /v1/tenants/<id>/budgets/<bid>/periods`.
pub(crate) async fn periods(
    app: &App,
    (tenant, budget): (&str, &str),
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::list(raw_query, PeriodId::PREFIX, &["current", "closed"], false)?;
    let (budget, page) = app
        .store
        .list_periods(tenant_id(tenant)?, BudgetId::parse(budget), query)
        .await?;
    Ok(ok_json(views::periods_json(&budget, &page)))
}

/// `PATCH /v1/tenants/<id>/budgets/<bid>`: a JSON merge patch of `period` and
/// `alert_thresholds_atomic`. It needs no `Idempotency-Key` (it is idempotent by itself);
/// a given one is ignored.
pub(crate) async fn patch(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    (tenant, budget): (&str, &str),
) -> Result<HttpResponse, ApiError> {
    let body = read_patch(app, request).await?;
    let patch = parse_patch(&body)?;
    let budget = app
        .store
        .write(UpdateBudget {
            tenant: tenant_id(tenant)?,
            budget: BudgetId::parse(budget),
            patch,
            actor: principal.actor(),
        })
        .await?;
    Ok(ok_json(views::budget_json(&budget)))
}

fn parse_patch(body: &[u8]) -> Result<BudgetPatch, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let mut patch = BudgetPatch::default();
    errors.walk(&members, &[], |errors, field, value| {
        match field {
            "period" => patch.policy = renewal::parse_period(errors, field, value),
            "alert_thresholds_atomic" => {
                patch.thresholds = renewal::parse_thresholds(errors, field, value);
            }
            "parent_id" => errors.add(field, "is fixed for the budget's life"),
            _ => return false,
        }
        true
    });
    errors.finish()?;
    Ok(patch)
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
        let (ok, named) =
            parse_movement(br#"{"amount_atomic":"5","memo":null}"#, Direction::Credit)
                .expect("valid");
        assert_eq!((ok.amount.get(), ok.memo, named), (5, None, None));
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["amount_atomic"]),
            (r#"{"amount_atomic":"0"}"#, &["amount_atomic"]),
            (r#"{"amount_atomic":"1","memo":" x"}"#, &["memo"]),
            (r#"{"amount_atomic":"1","memo":7}"#, &["memo"]),
            (r#"{"amount_atomic":"1","budget_id":"b"}"#, &["budget_id"]),
        ];
        for (body, want) in cases {
            assert_eq!(
                fields(parse_movement(body.as_bytes(), Direction::Debit)),
                *want,
                "{body}"
            );
        }
    }

    #[test]
    fn charge_bodies_name_their_budget() {
        let (ok, named) = parse_movement(
            br#"{"budget_id":"bud_x","amount_atomic":"5","memo":null}"#,
            Direction::Charge,
        )
        .expect("valid");
        assert_eq!((ok.amount.get(), named.as_deref()), (5, Some("bud_x")));
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["budget_id", "amount_atomic"]),
            (
                r#"{"budget_id":1,"amount_atomic":"0"}"#,
                &["budget_id", "amount_atomic"],
            ),
            (
                r#"{"budget_id":"b","amount_atomic":"1","memo":" x","ttl_seconds":5}"#,
                &["memo", "ttl_seconds"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                fields(parse_movement(body.as_bytes(), Direction::Charge)),
                *want,
                "{body}"
            );
        }
    }
}
