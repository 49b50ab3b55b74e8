//! The JSON a client sees, written once per response: the handlers' answers, and the `data`
//! of the events the store writes (the objects as the API would answer for them right after
//! the change).
//!
//! A file a resource, by what it renders: tenants and their create's answer ([`tenants`]),
//! budgets and their period statements ([`budgets`]), ledger entries and reservations
//! ([`ledger`]), webhook endpoints and deliveries ([`webhooks`]), and events, their `data`
//! among them ([`events`]). This file holds what they share (a page of a list, the body's
//! buffer) and names each file's functions once, so callers write `views::budget_json`.
//!
//! The files name one another one way: a tenant's overview holds its budget (`tenants` names
//! `budgets`), and an event's `data` holds the views of the objects it names (`events` names
//! `tenants`, `budgets` and `ledger`); nothing names `events` or `webhooks`, and a file
//! names this one only for its helpers. A new event type is its `EventData` variant and its
//! arms in `events.rs`.

mod budgets;
mod events;
mod ledger;
mod tenants;
mod webhooks;

use serde::Serialize;

use crate::domain::Page;

pub(crate) use budgets::{budget_json, budgets_json, periods_json};
pub(crate) use events::{EventData, event_json, events_json};
pub(crate) use ledger::{entries_json, entry_json, reservation_json, reservations_json};
pub(crate) use tenants::{created_json, tenant_json, tenants_json};
pub(crate) use webhooks::{deliveries_json, delivery_json, endpoint_json, endpoints_json};

/// A page of a list: `data`, `has_more`, and `next_after` (the last id, or `null` on the last
/// page).
#[derive(Serialize)]
struct PageView<V, I> {
    data: Vec<V>,
    has_more: bool,
    next_after: Option<I>,
}

/// A page of `T` rendered item by item as `V`, with `id` naming the last item for
/// `next_after`: every list but the periods' (which need their budget) and the events'
/// (whose items may fail to render) is one call.
fn page_json<'a, T, V: Serialize + From<&'a T>, I: Serialize>(
    page: &'a Page<T>,
    id: impl Fn(&'a T) -> I,
) -> String {
    let view = PageView {
        data: page.items.iter().map(V::from).collect(),
        has_more: page.has_more,
        next_after: page.has_more.then(|| page.items.last().map(id)).flatten(),
    };
    to_json(&view)
}

/// The buffer a body is written into starts this large: a tenant's overview or a budget is
/// 500 to 900 bytes, and `serde_json`'s own start of 128 bytes grows three times on the way.
const BODY_BYTES_START: usize = 1024;

/// The JSON text of a view, written into a buffer of [`BODY_BYTES_START`] bytes, so that one
/// object's body is written without growing it.
fn to_json(value: &impl Serialize) -> String {
    let mut body = Vec::with_capacity(BODY_BYTES_START);
    serde_json::to_writer(&mut body, value).expect("a view always serializes");
    String::from_utf8(body).expect("serde_json writes UTF-8")
}
