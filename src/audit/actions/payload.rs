//! What the families' payloads share: the payload that is an id alone, how a payload is
//! written and read, and the members every family reads the same way (ids, amounts, times,
//! the row's tenant).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::domain::{Atomic, TenantId, Timestamp};

/// A payload member: borrowed when it is read back, owned when it is written.
pub(super) type Text<'a> = Cow<'a, str>;

/// The payload of an action that names one thing by its id alone.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IdPayload<'a> {
    #[serde(borrow)]
    pub(super) id: Text<'a>,
}

/// The payload of the action that names `id` alone.
pub(super) fn id_payload(id: &str) -> String {
    to_json(&IdPayload { id: id.into() })
}

/// Compact JSON, members in their struct's order, non-ASCII characters unescaped.
pub(super) fn to_json(payload: &impl Serialize) -> String {
    serde_json::to_string(payload).expect("an audit payload always serializes")
}

/// Reads the payload of an `action` row as `T`; whether it is canonical is checked once it
/// is an event.
pub(super) fn from_json<'a, T: Deserialize<'a>>(
    action: &str,
    payload: &'a str,
) -> Result<T, String> {
    serde_json::from_str(payload).map_err(|e| does_not_parse(action, &e))
}

/// Why the payload of an `action` row is refused when it is not JSON of its shape.
pub(super) fn does_not_parse(action: &str, e: &serde_json::Error) -> String {
    format!("a {action} payload that does not parse: {e}")
}

/// The tenant a row's `tenant_id` column names, which every action but a webhook endpoint's
/// must.
pub(super) fn row_tenant(tenant_id: &str) -> Result<TenantId, String> {
    TenantId::parse(tenant_id)
        .ok_or_else(|| format!("the row's tenant_id {tenant_id:?} is not a tenant id"))
}

/// An id member, read by its type's `parse`.
pub(super) fn id<T>(raw: &str, parse: impl FnOnce(&str) -> Option<T>) -> Result<T, String> {
    parse(raw).ok_or_else(|| format!("a bad id {raw:?}"))
}

/// An amount member.
pub(super) fn amount(raw: &str) -> Result<Atomic, String> {
    Atomic::parse(raw).map_err(|e| format!("an amount that {e}"))
}

/// A time member.
pub(super) fn time(raw: &str) -> Result<Timestamp, String> {
    Timestamp::parse(raw).ok_or_else(|| format!("a bad timestamp {raw:?}"))
}
