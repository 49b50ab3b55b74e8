//! `/v1/tenants/<id>/reservations`: reserve, list, read, and commit, release or extend.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::refused;
use super::{
    FieldErrors, HttpResponse, Member, Post, keyed, object_members, ok_json, parse_amount,
    parse_memo, parse_positive_amount, parse_ttl, query, read_post, respond, tenant_id,
};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::{NewReservation, Reservation, ReservationId, ReservationState, Settle, Ttl};
use crate::problem::ApiError;
use crate::store::ops::{Reserve, SettleReservation};
use crate::store::{StoredResponse, TokenCheck};
use crate::views;

use super::route::{Call, Route, handler, route, take, tenant};
use crate::oidc::Permission::{Read, Spend};

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    // List a tenant's reservations; reserve.
    route("GET", "/v1/tenants/{id}/reservations", tenant(Read), handler!(|c| list(c.app, c.tenant(), c.query).await)),
    route("POST", "/v1/tenants/{id}/reservations", tenant(Spend), handler!(|c| { let (who, check, id) = (c.who(), c.check(), c.tenant()); create(c.app, (who, check), take(c.unread), id).await })).checked_by_its_write(),
    // Read a reservation.
    route("GET", "/v1/tenants/{id}/reservations/{reservation_id}", tenant(Read), handler!(|c| { let (id, r) = c.pair(); get(c.app, id, r).await })),
    // Commit, release or extend a reservation.
    route("POST", "/v1/tenants/{id}/reservations/{reservation_id}/commit", tenant(Spend), handler!(|c| settle_call(c, Action::Commit).await)).checked_by_its_write(),
    route("POST", "/v1/tenants/{id}/reservations/{reservation_id}/release", tenant(Spend), handler!(|c| settle_call(c, Action::Release).await)).checked_by_its_write(),
    route("POST", "/v1/tenants/{id}/reservations/{reservation_id}/extend", tenant(Spend), handler!(|c| settle_call(c, Action::Extend).await)).checked_by_its_write(),
];

/// A commit, release or extend, from its route.
async fn settle_call(call: Call<'_>, action: Action) -> Result<HttpResponse, ApiError> {
    let (who, check, ids) = (call.who(), call.check(), call.pair());
    settle(call.app, (who, check), take(call.unread), ids, action).await
}

/// What a commit, release or extend asks for, before its body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `…/commit`.
    Commit,
    /// `…/release`.
    Release,
    /// `…/extend`.
    Extend,
}

/// `POST /v1/tenants/<id>/reservations`; the principal comes with its token's check where
/// that is left to the write.
pub(crate) async fn create(
    app: &App,
    (principal, check): (&Principal, Option<Arc<TokenCheck>>),
    request: Request<Incoming>,
    tenant: &str,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, false).await?;
    let reservation = parse_create(&body)?;
    let tenant_text = tenant;
    let tenant = tenant_id(tenant)?;
    let render = |r: &Reservation| StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: Some(format!("/v1/tenants/{}/reservations/{}", r.tenant_id, r.id)),
        body: views::reservation_json(r),
    };
    let keyed = keyed(
        principal,
        key,
        "POST",
        &path,
        reservation.fingerprint(),
        render,
    );
    let written = app
        .store
        .write_checked(
            Reserve {
                tenant,
                reservation,
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

fn parse_create(body: &[u8]) -> Result<NewReservation, ApiError> {
    reservation_of(&object_members(body)?)
}

/// A reservation's members ([`parse_create`]), as a batch's operation gives them too.
pub(super) fn reservation_of(members: &[(String, Member)]) -> Result<NewReservation, ApiError> {
    let mut errors = FieldErrors::default();
    let (mut budget, mut amount, mut ttl, mut memo) =
        (None, None, Some(Ttl::default_hold()), Some(None));
    errors.walk(
        members,
        &["budget_id", "amount_atomic"],
        |errors, field, value| {
            match (field, value) {
                ("budget_id", Member::String(raw)) => budget = Some(raw.clone()),
                ("budget_id", _) => errors.add(field, "must be a string"),
                ("amount_atomic", _) => amount = parse_positive_amount(errors, field, value),
                ("ttl_seconds", Member::Null) => ttl = Some(Ttl::default_hold()),
                ("ttl_seconds", _) => ttl = parse_ttl(errors, field, value),
                ("memo", _) => memo = parse_memo(errors, field, value),
                _ => return false,
            }
            true
        },
    );
    errors.finish()?;
    match (budget, amount, ttl, memo) {
        (Some(budget_text), Some(amount), Some(ttl), Some(memo)) => Ok(NewReservation {
            budget_text,
            amount,
            ttl,
            memo,
        }),
        _ => unreachable!("a body without errors has every required member"),
    }
}

/// `GET /v1/tenants/<id>/reservations`.
pub(crate) async fn list(
    app: &App,
    tenant: &str,
    raw_query: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let query = query::list(
        raw_query,
        ReservationId::PREFIX,
        &ReservationState::NAMES,
        true,
    )?;
    let page = app
        .store
        .list_reservations(tenant_id(tenant)?, query)
        .await?;
    Ok(ok_json(views::reservations_json(&page)))
}

/// `GET /v1/tenants/<id>/reservations/<rid>`.
pub(crate) async fn get(
    app: &App,
    tenant: &str,
    reservation: &str,
) -> Result<HttpResponse, ApiError> {
    let reservation = app
        .store
        .reservation(tenant_id(tenant)?, ReservationId::parse(reservation))
        .await?;
    Ok(ok_json(views::reservation_json(&reservation)))
}

/// `POST …/reservations/<rid>/commit`, `…/release` and `…/extend`; the principal comes with
/// its token's check where that is left to the write.
pub(crate) async fn settle(
    app: &App,
    (principal, check): (&Principal, Option<Arc<TokenCheck>>),
    request: Request<Incoming>,
    (tenant, reservation): (&str, &str),
    action: Action,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, action == Action::Release).await?;
    let settle = parse_settle(&body, action)?;
    let tenant_text = tenant;
    let tenant = tenant_id(tenant)?;
    let render = |r: &Reservation| StoredResponse {
        status: StatusCode::OK.as_u16(),
        location: None,
        body: views::reservation_json(r),
    };
    let keyed = keyed(principal, key, "POST", &path, settle.fingerprint(), render);
    let written = app
        .store
        .write_checked(
            SettleReservation {
                tenant,
                reservation: ReservationId::parse(reservation),
                settle,
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

fn parse_settle(body: &[u8], action: Action) -> Result<Settle, ApiError> {
    settle_of(&object_members(body)?, action)
}

/// A commit's, release's or extend's members ([`parse_settle`]), as a batch's operation gives
/// them too.
pub(super) fn settle_of(members: &[(String, Member)], action: Action) -> Result<Settle, ApiError> {
    let mut errors = FieldErrors::default();
    let (mut amount, mut ttl) = (None, None);
    let required: &[&str] = match action {
        Action::Commit => &["amount_atomic"],
        Action::Release => &[],
        Action::Extend => &["ttl_seconds"],
    };
    errors.walk(members, required, |errors, field, value| {
        match (action, field) {
            (Action::Commit, "amount_atomic") => amount = parse_amount(errors, field, value),
            (Action::Extend, "ttl_seconds") => ttl = parse_ttl(errors, field, value),
            _ => return false,
        }
        true
    });
    errors.finish()?;
    Ok(match (action, amount, ttl) {
        (Action::Commit, Some(amount), _) => Settle::Commit(amount),
        (Action::Release, ..) => Settle::Release,
        (Action::Extend, _, Some(ttl)) => Settle::Extend(ttl),
        _ => unreachable!("a body without errors has every required member"),
    })
}

#[cfg(test)]
mod tests {
    use super::super::invalid_fields as fields;
    use super::*;

    #[test]
    fn reservation_bodies_are_checked_whole() {
        let ok = parse_create(br#"{"budget_id":"nope","amount_atomic":"3","ttl_seconds":null}"#)
            .expect("a malformed budget id is a 404 later, not a 422");
        assert_eq!(ok.budget_id(), None);
        assert_eq!(ok.ttl, Ttl::default_hold());
        let cases: &[(&str, &[&str])] = &[
            (r#"{}"#, &["budget_id", "amount_atomic"]),
            (
                r#"{"budget_id":1,"amount_atomic":"0","ttl_seconds":"5"}"#,
                &["budget_id", "amount_atomic", "ttl_seconds"],
            ),
            (
                r#"{"budget_id":"b","amount_atomic":"1","ttl_seconds":86401}"#,
                &["ttl_seconds"],
            ),
            (
                r#"{"budget_id":"b","amount_atomic":"1","ttl_seconds":1.5}"#,
                &["ttl_seconds"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(fields(parse_create(body.as_bytes())), *want, "{body}");
        }
    }

    #[test]
    fn settle_bodies_follow_their_action() {
        assert!(matches!(
            parse_settle(br#"{"amount_atomic":"0"}"#, Action::Commit),
            Ok(Settle::Commit(amount)) if amount.get() == 0
        ));
        assert!(matches!(
            parse_settle(b"{}", Action::Release),
            Ok(Settle::Release)
        ));
        let cases: &[(&[u8], Action, &[&str])] = &[
            (b"{}", Action::Commit, &["amount_atomic"]),
            (b"{}", Action::Extend, &["ttl_seconds"]),
            (br#"{"ttl_seconds":null}"#, Action::Extend, &["ttl_seconds"]),
            (
                br#"{"amount_atomic":"1"}"#,
                Action::Release,
                &["amount_atomic"],
            ),
            (
                br#"{"ttl_seconds":5}"#,
                Action::Commit,
                &["ttl_seconds", "amount_atomic"],
            ),
        ];
        for (body, action, want) in cases {
            assert_eq!(fields(parse_settle(body, *action)), *want, "{action:?}");
        }
    }
}
