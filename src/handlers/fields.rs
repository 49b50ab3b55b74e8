//! The fields requests share, each parsed into its domain type or reported: names, amounts,
//! memos, TTLs, and the tenant a path names.

use super::json::{FieldErrors, Member};
use crate::domain::{Atomic, Memo, Name, TenantId, Ttl};
use crate::problem::ApiError;

/// The tenant a path names, once the body's checks are done: an id that cannot exist is a
/// `404`, like an unknown one.
pub(super) fn tenant_id(raw: &str) -> Result<TenantId, ApiError> {
    TenantId::parse(raw).ok_or(ApiError::TenantNotFound)
}

/// A name member (a tenant's or a budget's), or its error.
pub(super) fn parse_name(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Name> {
    match value {
        Member::String(raw) => Name::parse(raw)
            .map_err(|message| errors.add(field, message))
            .ok(),
        _ => {
            errors.add(field, "must be a string");
            None
        }
    }
}

/// An amount member (a string of decimal digits), or its error.
pub(super) fn parse_amount(
    errors: &mut FieldErrors,
    field: &str,
    value: &Member,
) -> Option<Atomic> {
    match value {
        Member::String(raw) => Atomic::parse(raw)
            .map_err(|message| errors.add(field, message))
            .ok(),
        Member::Number(_) => {
            errors.add(
                field,
                "must be a string of decimal digits, not a JSON number",
            );
            None
        }
        _ => {
            errors.add(field, "must be a string");
            None
        }
    }
}

/// An amount member of at least 1, or its error.
pub(super) fn parse_positive_amount(
    errors: &mut FieldErrors,
    field: &str,
    value: &Member,
) -> Option<Atomic> {
    let amount = parse_amount(errors, field, value)?;
    if amount.get() == 0 {
        errors.add(field, "must be at least 1");
        return None;
    }
    Some(amount)
}

/// An optional memo member (`null` is no memo), or its error.
pub(super) fn parse_memo(
    errors: &mut FieldErrors,
    field: &str,
    value: &Member,
) -> Option<Option<Memo>> {
    match value {
        Member::Null => Some(None),
        Member::String(raw) => Memo::parse(raw)
            .map(Some)
            .map_err(|message| errors.add(field, message))
            .ok(),
        _ => {
            errors.add(field, "must be a string or null");
            None
        }
    }
}

/// A TTL member: a JSON integer of seconds, or its error.
pub(super) fn parse_ttl(errors: &mut FieldErrors, field: &str, value: &Member) -> Option<Ttl> {
    match value {
        Member::Number(raw) => Ttl::parse(raw)
            .map_err(|message| errors.add(field, message))
            .ok(),
        _ => {
            errors.add(field, "must be a JSON integer of seconds from 1 to 86400");
            None
        }
    }
}

/// The fields a validation error names, for the handlers' tests.
#[cfg(test)]
pub(super) fn invalid_fields(result: Result<impl std::fmt::Debug, ApiError>) -> Vec<String> {
    match result {
        Err(ApiError::ValidationFailed(errors)) => errors.into_iter().map(|e| e.field).collect(),
        other => panic!("expected a validation error, got {other:?}"),
    }
}
