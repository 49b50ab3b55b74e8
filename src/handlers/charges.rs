//! `/v1/tenants/<id>/charges`: spend without a prior hold, for work whose cost is known when
//! it is done. One charge is one durable write.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::route::{Route, handler, route, take, tenant};
use super::{
    FieldErrors, HttpResponse, Member, Post, keyed, object_members, parse_memo,
    parse_positive_amount, read_post, respond, tenant_id,
};
use crate::app::App;
use crate::auth::Principal;
use crate::domain::{Atomic, BodyFingerprint, BudgetId, LedgerEntry, Memo};
use crate::oidc::Permission::Spend;
use crate::problem::ApiError;
use crate::store::StoredResponse;
use crate::store::ops::Charge;
use crate::views;

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    // Charge a budget of the tenant.
    route("POST", "/v1/tenants/{id}/charges", tenant(Spend), handler!(|c| { let (who, id) = (c.who(), c.tenant()); create(c.app, who, take(c.unread), id).await })),
];

/// A charge request's body, checked.
#[derive(Debug)]
struct NewCharge {
    /// The budget as the body names it (an id that cannot exist is a `404`, decided with
    /// the write).
    budget: String,
    amount: Atomic,
    memo: Option<Memo>,
}

impl NewCharge {
    /// What makes two requests the same body. A missing memo and `null` are the same; an
    /// empty memo is not.
    fn fingerprint(&self) -> BodyFingerprint {
        let memo = self
            .memo
            .as_ref()
            .map_or("-".to_owned(), |m| format!("+{}", m.as_str()));
        BodyFingerprint::of(format!("charge\n{}\n{}\n{memo}", self.budget, self.amount).as_bytes())
    }
}

/// `POST /v1/tenants/<id>/charges`.
pub(crate) async fn create(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    tenant: &str,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } = read_post(app, request, false).await?;
    let charge = parse_create(&body)?;
    let tenant = tenant_id(tenant)?;
    let render = |entry: &LedgerEntry| StoredResponse {
        status: StatusCode::CREATED.as_u16(),
        location: None,
        body: views::entry_json(entry),
    };
    let keyed = keyed(principal, key, "POST", &path, charge.fingerprint(), render);
    let written = app
        .store
        .write(Charge {
            tenant,
            budget: BudgetId::parse(&charge.budget),
            amount: charge.amount,
            memo: charge.memo,
            actor: principal.actor(),
            keyed,
        })
        .await?;
    Ok(respond(written, render))
}

fn parse_create(body: &[u8]) -> Result<NewCharge, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let (mut budget, mut amount, mut memo) = (None, None, Some(None));
    errors.walk(
        &members,
        &["budget_id", "amount_atomic"],
        |errors, field, value| {
            match (field, value) {
                ("budget_id", Member::String(raw)) => budget = Some(raw.clone()),
                ("budget_id", _) => errors.add(field, "must be a string"),
                ("amount_atomic", _) => amount = parse_positive_amount(errors, field, value),
                ("memo", _) => memo = parse_memo(errors, field, value),
                _ => return false,
            }
            true
        },
    );
    errors.finish()?;
    match (budget, amount, memo) {
        (Some(budget), Some(amount), Some(memo)) => Ok(NewCharge {
            budget,
            amount,
            memo,
        }),
        _ => unreachable!("a body without errors has every required member"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::invalid_fields as fields;
    use super::*;

    #[test]
    fn charge_bodies_are_checked_whole() {
        let ok = parse_create(br#"{"budget_id":"bud_x","amount_atomic":"5","memo":null}"#)
            .expect("valid");
        assert_eq!((ok.budget.as_str(), ok.amount.get()), ("bud_x", 5));
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
            assert_eq!(fields(parse_create(body.as_bytes())), *want, "{body}");
        }
    }
}
