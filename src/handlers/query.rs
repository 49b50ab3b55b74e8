//! The query string of a list: `limit`, `after` and the list's filters, each checked, every
//! bad or unknown parameter reported at once (`400 invalid_query`).

use crate::domain::{
    BudgetId, BudgetState, DeliveryId, DeliveryState, EventId, EventType, NAME_CHARS_MAX, TenantId,
    TenantState, Timestamp,
};
use crate::problem::{ApiError, FieldError};
use crate::store::ListQuery;

/// Items on a page when `limit` is not given.
pub(crate) const LIMIT_DEFAULT: usize = 100;

/// The most items on a page.
pub(crate) const LIMIT_MAX: usize = 1000;

/// Reads a list's query. `after` must be an id with `id_prefix` (whether or not it names an
/// item); `state` one of `states`; `budget_id` is allowed only where `budget_filter` is set.
/// Names and values are taken as sent: every valid value is plain ASCII that needs no
/// percent-encoding, so an encoded one is refused rather than decoded.
pub(crate) fn list(
    raw: Option<&str>,
    id_prefix: &str,
    states: &[&'static str],
    budget_filter: bool,
) -> Result<ListQuery, ApiError> {
    parse(
        raw,
        id_prefix,
        &Filters {
            state: ("state", states),
            budget_id: budget_filter,
            ..Filters::NONE
        },
    )
}

/// Reads the query of a tenant's budgets: `state` and `parent_id` (a budget's children).
pub(crate) fn budgets(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    parse(
        raw,
        BudgetId::PREFIX,
        &Filters {
            state: ("state", &BudgetState::NAMES),
            parent_id: true,
            ..Filters::NONE
        },
    )
}

/// Reads the query of the tenants list: `state` and `name_contains`.
pub(crate) fn tenants(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    parse(
        raw,
        TenantId::PREFIX,
        &Filters {
            state: ("state", &TenantState::NAMES),
            name_contains: true,
            ..Filters::NONE
        },
    )
}

/// Reads the query of a list of events: `type`, and on the list of every tenant's events
/// (`all_tenants`) also `tenant_id` and `created_after`.
pub(crate) fn events(raw: Option<&str>, all_tenants: bool) -> Result<ListQuery, ApiError> {
    parse(
        raw,
        EventId::PREFIX,
        &Filters {
            state: ("type", &EventType::NAMES),
            tenant_id: all_tenants,
            created_after: all_tenants,
            ..Filters::NONE
        },
    )
}

/// Reads the query of a webhook endpoint's deliveries: `state` and `event_id`.
pub(crate) fn deliveries(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    parse(
        raw,
        DeliveryId::PREFIX,
        &Filters {
            state: ("state", &DeliveryState::NAMES),
            event_id: true,
            ..Filters::NONE
        },
    )
}

/// The filters a list takes besides `limit` and `after`.
struct Filters<'a> {
    /// The name of the parameter that selects one of a fixed set of values (a state, an
    /// event type), and those values (none: no such parameter).
    state: (&'static str, &'a [&'static str]),
    /// Whether `budget_id` is taken.
    budget_id: bool,
    /// Whether `parent_id` is taken.
    parent_id: bool,
    /// Whether `tenant_id` is taken.
    tenant_id: bool,
    /// Whether `created_after` is taken.
    created_after: bool,
    /// Whether `event_id` is taken.
    event_id: bool,
    /// Whether `name_contains` is taken.
    name_contains: bool,
}

impl Filters<'static> {
    const NONE: Self = Self {
        state: ("state", &[]),
        budget_id: false,
        parent_id: false,
        tenant_id: false,
        created_after: false,
        event_id: false,
        name_contains: false,
    };
}

fn parse(raw: Option<&str>, id_prefix: &str, filters: &Filters<'_>) -> Result<ListQuery, ApiError> {
    let (state_name, states) = filters.state;
    let mut query = ListQuery::first(LIMIT_DEFAULT);
    let mut errors: Vec<FieldError> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let mut fail = |field: &str, message: &str| {
        if !errors.iter().any(|e| e.field == field) {
            errors.push(FieldError {
                field: field.to_owned(),
                message: message.to_owned(),
            });
        }
    };
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if seen.contains(&name) {
            fail(name, "must appear only once");
            continue;
        }
        seen.push(name);
        match name {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=LIMIT_MAX).contains(&n) && !value.starts_with(['+', '0']) => {
                    query.limit = n;
                }
                _ => fail(name, "must be a whole number from 1 to 1000"),
            },
            "after" => {
                if is_id(value, id_prefix) {
                    query.after = Some(value.to_owned());
                } else {
                    fail(name, &format!("must be an id that starts with {id_prefix}"));
                }
            }
            _ if name == state_name && !states.is_empty() => {
                match states.iter().find(|s| **s == value) {
                    Some(state) => query.state = Some(state),
                    None => fail(name, &format!("must be one of {}", states.join(", "))),
                }
            }
            "budget_id" if filters.budget_id => {
                if BudgetId::parse(value).is_some() {
                    query.budget_id = Some(value.to_owned());
                } else {
                    fail(name, "must be a budget id");
                }
            }
            "parent_id" if filters.parent_id => {
                if BudgetId::parse(value).is_some() {
                    query.parent_id = Some(value.to_owned());
                } else {
                    fail(name, "must be a budget id");
                }
            }
            "tenant_id" if filters.tenant_id => {
                if TenantId::parse(value).is_some() {
                    query.tenant_id = Some(value.to_owned());
                } else {
                    fail(name, "must be a tenant id");
                }
            }
            "event_id" if filters.event_id => {
                if EventId::parse(value).is_some() {
                    query.event_id = Some(value.to_owned());
                } else {
                    fail(name, "must be an event id");
                }
            }
            "created_after" if filters.created_after => {
                match percent_decoded(value)
                    .as_deref()
                    .and_then(Timestamp::parse_rfc3339)
                {
                    Some(at) => query.created_after = Some(at),
                    None => fail(
                        name,
                        "must be an RFC 3339 instant, such as 2026-11-26T10:00:00Z",
                    ),
                }
            }
            "name_contains" if filters.name_contains => {
                match form_decoded(value).filter(|text| {
                    (1..=NAME_CHARS_MAX).contains(&text.chars().count())
                        && !text.chars().any(char::is_control)
                }) {
                    Some(text) => query.name_contains = Some(text.to_ascii_lowercase()),
                    None => fail(
                        name,
                        &format!(
                            "must be 1 to {NAME_CHARS_MAX} characters of UTF-8, \
                             percent-encoded, with no control character"
                        ),
                    ),
                }
            }
            _ => fail(name, "is not a known parameter"),
        }
    }
    if errors.is_empty() {
        Ok(query)
    } else {
        Err(ApiError::InvalidQuery(errors))
    }
}

/// `raw` with its `%XX` escapes decoded (an instant's `:` and `+` are often sent escaped); a
/// `+` stays a `+`, for an offset. `None` for a bad escape or bytes that are not UTF-8.
fn percent_decoded(raw: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(raw.len());
    let mut rest = raw.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// `raw` as an HTML form sends text: `+` for a space, `%XX` for any other byte (a `+` itself is
/// `%2B`). `None` for a bad escape or bytes that are not UTF-8.
fn form_decoded(raw: &str) -> Option<String> {
    percent_decoded(&raw.replace('+', " "))
}

/// Whether `raw` is `prefix` followed by a canonical ULID.
fn is_id(raw: &str, prefix: &str) -> bool {
    let Some(text) = raw.strip_prefix(prefix) else {
        return false;
    };
    let mut canonical = [0u8; ulid::ULID_LEN];
    ulid::Ulid::from_string(text).is_ok_and(|u| u.array_to_str(&mut canonical) == text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: &[&str] = &crate::domain::BudgetState::NAMES;

    fn fields(raw: &str, budget_filter: bool) -> Vec<String> {
        match list(Some(raw), "bud_", STATES, budget_filter) {
            Err(ApiError::InvalidQuery(errors)) => errors.into_iter().map(|e| e.field).collect(),
            other => panic!("{raw}: expected invalid_query, got {other:?}"),
        }
    }

    #[test]
    fn good_queries_parse() {
        let q = list(None, "bud_", STATES, false).expect("no query");
        assert_eq!((q.limit, q.after, q.state), (LIMIT_DEFAULT, None, None));
        let q = list(
            Some("limit=1000&after=bud_01ARZ3NDEKTSV4RRFFQ69G5FAV&state=closed"),
            "bud_",
            STATES,
            false,
        )
        .expect("valid");
        assert_eq!(q.limit, 1000);
        assert_eq!(q.after.as_deref(), Some("bud_01ARZ3NDEKTSV4RRFFQ69G5FAV"));
        assert_eq!(q.state, Some("closed"));
        let q = list(
            Some("budget_id=bud_01ARZ3NDEKTSV4RRFFQ69G5FAV&"),
            "res_",
            &[],
            true,
        )
        .expect("valid");
        assert_eq!(
            q.budget_id.as_deref(),
            Some("bud_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        );
    }

    #[test]
    fn every_bad_parameter_is_named() {
        let cases: &[(&str, bool, &[&str])] = &[
            ("limit=0", false, &["limit"]),
            ("limit=1001", false, &["limit"]),
            ("limit=01", false, &["limit"]),
            ("limit=+5", false, &["limit"]),
            ("limit=", false, &["limit"]),
            ("limit", false, &["limit"]),
            (
                "limit=x&state=gone&after=ten_01ARZ3NDEKTSV4RRFFQ69G5FAV",
                false,
                &["limit", "state", "after"],
            ),
            ("limit=5&limit=6", false, &["limit"]),
            ("after=bud_01arz3ndektsv4rrffq69g5fav", false, &["after"]),
            ("cursor=x&sort=id", false, &["cursor", "sort"]),
            (
                "budget_id=bud_01ARZ3NDEKTSV4RRFFQ69G5FAV",
                false,
                &["budget_id"],
            ),
            ("budget_id=bud_x", true, &["budget_id"]),
            ("state=open%20", false, &["state"]),
        ];
        for (raw, budget_filter, want) in cases {
            assert_eq!(fields(raw, *budget_filter), *want, "{raw}");
        }
    }
}
