//! `POST /v1/tenants/<id>/batch`: up to [`BATCH_OPERATIONS_MAX`] spends of one tenant in one
//! request, one transaction and one durable write ([`SendBatch`]).
//!
//! Each operation is read as the body of the single call it names, by that call's own reader,
//! plus `op` (and the id its path would carry: `budget_id` for a credit or a debit,
//! `reservation_id` for a commit, release or extend), so its refusals name its fields as the
//! single call's do. An operation the handler refuses (a `422`, or a tenant token's credit or
//! debit: `403`) runs nothing and fails an atomic batch; the rest go to the store in order.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::budgets::movement_of;
use super::reservations::{Action, reservation_of, settle_of};
use super::{
    FieldErrors, HttpResponse, Member, Post, array_items, keyed, object_members, read_post_up_to,
    respond, tenant_id,
};
use crate::app::App;
use crate::auth::{Needs, Principal, authorize};
use crate::domain::{BodyFingerprint, BudgetId, Direction, ReservationId};
use crate::oidc::Permission::{Manage, Spend};
use crate::problem::ApiError;
use crate::store::ops::{BATCH_OPERATIONS_MAX, BatchItem, BatchOutcome, ItemResult, SendBatch};
use crate::store::{StoredResponse, Written};
use crate::views;

use super::BATCH_BODY_BYTES_MAX;
use super::route::{Route, handler, route, take, tenant};

/// The rows of the route table (see [`super::route`]).
#[rustfmt::skip]
pub(crate) const ROUTES: &[Route] = &[
    // Many spends of one tenant in one durable write.
    route("POST", "/v1/tenants/{id}/batch", tenant(Spend), handler!(|c| { let (who, id) = (c.who(), c.tenant()); send(c.app, who, take(c.unread), id).await })),
];

/// The operations a batch may hold, by the name `op` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Charge,
    Reserve,
    Commit,
    Release,
    Extend,
    Credit,
    Debit,
}

impl Op {
    /// Every `op`, as the contract names them.
    const NAMES: &'static str = "charge, reserve, commit, release, extend, credit or debit";

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "charge" => Self::Charge,
            "reserve" => Self::Reserve,
            "commit" => Self::Commit,
            "release" => Self::Release,
            "extend" => Self::Extend,
            "credit" => Self::Credit,
            "debit" => Self::Debit,
            _ => return None,
        })
    }

    /// The status its single call answers when it succeeds.
    fn status(self) -> u16 {
        match self {
            Self::Commit | Self::Release | Self::Extend => 200,
            Self::Charge | Self::Reserve | Self::Credit | Self::Debit => 201,
        }
    }

    /// The member that carries the id the single call's path names, if it is not in the
    /// single call's body already.
    fn path_id(self) -> Option<&'static str> {
        match self {
            Self::Credit | Self::Debit => Some("budget_id"),
            Self::Commit | Self::Release | Self::Extend => Some("reservation_id"),
            Self::Charge | Self::Reserve => None,
        }
    }
}

/// A batch as read from its body.
struct Parsed {
    /// What goes to the store, one per operation.
    items: Vec<BatchItem>,
    /// What answers each operation, once the store has run them.
    answers: Arc<Answers>,
    atomic: bool,
    fingerprint: BodyFingerprint,
}

/// What the handler knows of each operation to answer it: its `op` where it named a known
/// one, and its refusal where the handler refused it.
struct Answers {
    ops: Vec<Option<Op>>,
    refusals: Vec<Option<ApiError>>,
}

/// `POST /v1/tenants/<id>/batch`.
pub(crate) async fn send(
    app: &App,
    principal: &Principal,
    request: Request<Incoming>,
    tenant: &str,
) -> Result<HttpResponse, ApiError> {
    let Post { path, key, body } =
        read_post_up_to(app, request, false, BATCH_BODY_BYTES_MAX).await?;
    let may_manage = authorize(principal, Needs::Tenant(tenant, Manage)).is_ok();
    let Parsed {
        items,
        answers,
        atomic,
        fingerprint,
    } = parse_batch(&body, may_manage)?;
    let tenant = tenant_id(tenant)?;
    let kept = Arc::clone(&answers);
    let render = move |outcome: &BatchOutcome| StoredResponse {
        status: StatusCode::OK.as_u16(),
        location: None,
        body: results_json(&kept, &outcome.results, true),
    };
    let keyed = keyed(principal, key, "POST", &path, fingerprint, render.clone());
    let written = app
        .store
        .write(SendBatch {
            tenant,
            items,
            atomic,
            actor: principal.actor(),
            keyed,
        })
        .await?;
    match written {
        Written::Fresh(outcome) if !outcome.applied => Err(ApiError::BatchFailed {
            results: results_json(&answers, &outcome.results, false),
        }),
        written => Ok(respond(written, render)),
    }
}

/// The `results` array: each operation's status and body in order. In a batch that was not
/// applied (`applied` false) each operation that succeeded says `424` with no body.
fn results_json(answers: &Answers, results: &[ItemResult], applied: bool) -> String {
    let mut json = String::with_capacity(64 + results.len() * 320);
    json.push('[');
    for (i, result) in results.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        let ok = answers.ops[i].map_or(200, Op::status);
        let (status, body) = match result {
            _ if !applied && result.applied() => (424, "null".to_owned()),
            ItemResult::Entry(entry) => (ok, views::entry_json(entry)),
            ItemResult::Reservation(reservation) => (ok, views::reservation_json(reservation)),
            ItemResult::Refused(refusal, unit) => {
                let mut error = ApiError::from(refusal.clone());
                if let ApiError::InsufficientFunds { unit: said, .. } = &mut error {
                    *said = unit.as_ref().map(|u| u.as_str().to_owned());
                }
                problem(&error)
            }
            ItemResult::RefusedBefore => match &answers.refusals[i] {
                Some(error) => problem(error),
                None => problem(&ApiError::Internal(
                    "an operation without its refusal".into(),
                )),
            },
        };
        json.push_str("{\"status\":");
        json.push_str(&status.to_string());
        json.push_str(",\"body\":");
        json.push_str(&body);
        json.push('}');
    }
    json.push(']');
    if applied {
        format!("{{\"results\":{json}}}")
    } else {
        json
    }
}

/// An operation's status and problem, as its single call would answer it without the
/// request's id.
fn problem(error: &ApiError) -> (u16, String) {
    let body = String::from_utf8(error.body(None)).expect("a problem body is UTF-8");
    (error.status().as_u16(), body)
}

/// Reads a batch's body: `400` when it is not a JSON object, `422` for the whole request when
/// `operations` or `atomic` is wrong or another member is there; each operation is read on
/// its own ([`parse_item`]).
fn parse_batch(body: &[u8], may_manage: bool) -> Result<Parsed, ApiError> {
    let members = object_members(body)?;
    let mut errors = FieldErrors::default();
    let (mut atomic, mut operations) = (false, None);
    errors.walk(&members, &["operations"], |errors, field, value| {
        match (field, value) {
            ("atomic", Member::Bool(b)) => atomic = *b,
            ("atomic", _) => errors.add(field, "must be true or false"),
            ("operations", Member::Array(text)) => operations = Some(text.clone()),
            ("operations", _) => errors.add(field, "must be an array of operations"),
            _ => return false,
        }
        true
    });
    let items = match &operations {
        Some(text) => array_items(text)?,
        None => Vec::new(),
    };
    if operations.is_some() && items.is_empty() {
        errors.add("operations", "must hold at least 1 operation");
    }
    if items.len() > BATCH_OPERATIONS_MAX {
        errors.add(
            "operations",
            &format!("must hold at most {BATCH_OPERATIONS_MAX} operations"),
        );
    }
    errors.finish()?;
    let mut ops = Vec::with_capacity(items.len());
    let mut refusals = Vec::with_capacity(items.len());
    let mut store_items = Vec::with_capacity(items.len());
    let mut canonical = format!("batch\n{atomic}");
    for item in &items {
        let (op, read) = parse_item(item, may_manage);
        ops.push(op);
        // Each operation's text after its length: a memo's line breaks cannot run two
        // operations together.
        let (store_item, refusal, text) = match read {
            Ok((store_item, text)) => (store_item, None, text),
            Err(refusal) => (BatchItem::Refused, Some(refusal), member_text(item)),
        };
        let tag = if refusal.is_some() { "refused " } else { "" };
        canonical.push_str(&format!("\n{tag}{}:{text}", text.len()));
        store_items.push(store_item);
        refusals.push(refusal);
    }
    Ok(Parsed {
        items: store_items,
        answers: Arc::new(Answers { ops, refusals }),
        atomic,
        fingerprint: BodyFingerprint::of(canonical.as_bytes()),
    })
}

/// An operation's JSON in one canonical form (members sorted, no white space), for a refused
/// one's share of the fingerprint: the same operation sent again, laid out otherwise, is the
/// same.
fn member_text(member: &Member) -> String {
    match member {
        Member::Number(text) | Member::Object(text) | Member::Array(text) => {
            serde_json::from_str::<serde_json::Value>(text)
                .map_or_else(|_| text.clone(), |v| v.to_string())
        }
        Member::String(s) => serde_json::Value::from(s.as_str()).to_string(),
        Member::Null => "null".into(),
        Member::Bool(b) => b.to_string(),
    }
}

/// One operation: its `op` if it names a known one, and what goes to the store with its
/// share of the batch's fingerprint, or the refusal its single call would answer first: `422`
/// naming `op` for an operation that is not an object or names no known `op`, `403` for a
/// credit or a debit the principal may not make, then the single call's `422`.
fn parse_item(
    item: &Member,
    may_manage: bool,
) -> (Option<Op>, Result<(BatchItem, String), ApiError>) {
    let bad_op = |message: &str| {
        let mut errors = FieldErrors::default();
        errors.add("op", message);
        errors.finish().expect_err("an error was added")
    };
    let Member::Object(text) = item else {
        return (
            None,
            Err(bad_op("must be in an object: this operation is not one")),
        );
    };
    let Ok(mut members) = object_members(text.as_bytes()) else {
        return (
            None,
            Err(bad_op("must be in an object: this operation is not one")),
        );
    };
    let named: Vec<&Member> = members
        .iter()
        .filter(|(name, _)| name == "op")
        .map(|(_, value)| value)
        .collect();
    let op = match named.as_slice() {
        [Member::String(name)] => Op::parse(name),
        _ => None,
    };
    let Some(op) = op else {
        let message = match named.len() {
            0 => "is required".to_owned(),
            1 => format!("must be one of {}", Op::NAMES),
            _ => "must appear only once".to_owned(),
        };
        return (None, Err(bad_op(&message)));
    };
    if matches!(op, Op::Credit | Op::Debit) && !may_manage {
        return (Some(op), Err(ApiError::Forbidden));
    }
    members.retain(|(name, _)| name != "op");
    (Some(op), read_op(op, members))
}

/// The members of an operation without its `op`, read by its single call's reader.
fn read_op(op: Op, mut members: Vec<(String, Member)>) -> Result<(BatchItem, String), ApiError> {
    // The id a single call's path carries, taken out of the body its reader sees.
    let mut id_errors = FieldErrors::default();
    let mut id = None;
    if let Some(field) = op.path_id() {
        let given: Vec<&Member> = members
            .iter()
            .filter(|(name, _)| name == field)
            .map(|(_, value)| value)
            .collect();
        match given.as_slice() {
            [] => id_errors.add(field, "is required"),
            [Member::String(text)] => id = Some(text.clone()),
            [_] => id_errors.add(field, "must be a string"),
            _ => id_errors.add(field, "must appear only once"),
        }
        members.retain(|(name, _)| name != field);
    }
    let read = match op {
        Op::Charge | Op::Credit | Op::Debit => {
            let direction = match op {
                Op::Charge => Direction::Charge,
                Op::Credit => Direction::Credit,
                _ => Direction::Debit,
            };
            movement_of(&members, direction).map(|(movement, named)| {
                let budget_text = id.clone().or(named).unwrap_or_default();
                let fingerprint = movement.canonical(Some(&budget_text));
                let item = BatchItem::Move {
                    budget: BudgetId::parse(&budget_text),
                    movement,
                };
                (item, fingerprint)
            })
        }
        Op::Reserve => reservation_of(&members).map(|new| {
            let fingerprint = new.canonical();
            (BatchItem::Reserve(new), fingerprint)
        }),
        Op::Commit | Op::Release | Op::Extend => {
            let action = match op {
                Op::Commit => Action::Commit,
                Op::Release => Action::Release,
                _ => Action::Extend,
            };
            settle_of(&members, action).map(|settle| {
                let fingerprint = settle.canonical();
                let reservation = id.as_deref().and_then(ReservationId::parse);
                (
                    BatchItem::Settle {
                        reservation,
                        settle,
                    },
                    fingerprint,
                )
            })
        }
    };
    let mut errors = id_errors.errors;
    match read {
        Ok(_) if !errors.is_empty() => Err(ApiError::ValidationFailed(errors)),
        Err(ApiError::ValidationFailed(more)) => {
            errors.extend(more);
            Err(ApiError::ValidationFailed(errors))
        }
        Err(other) => Err(other),
        Ok((item, text)) => Ok((
            item,
            format!("{op:?} {}\n{text}", id.as_deref().unwrap_or("-")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_operation_counts_as_its_json_in_one_form() {
        for (member, text) in [
            (Member::String("a \"b\"".into()), r#""a \"b\"""#),
            (Member::Null, "null"),
            (Member::Bool(true), "true"),
            (Member::Number("1.50".into()), "1.5"),
            (Member::Array("[ 1, \"x\" ]".into()), r#"[1,"x"]"#),
            (
                Member::Object(r#"{ "op": "x",  "a": 1 }"#.into()),
                r#"{"a":1,"op":"x"}"#,
            ),
        ] {
            assert_eq!(member_text(&member), text, "{member:?}");
        }
    }
}
