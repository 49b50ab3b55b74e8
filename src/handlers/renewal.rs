//! The members that make a budget renew and speak: `period` and `alert_thresholds_atomic`,
//! as a budget create, a tenant create (for its default budget) and a budget's `PATCH` take
//! them. A nested member's error names its path: `period.time_zone`,
//! `alert_thresholds_atomic.2`.

use super::{FieldErrors, Member, array_items, object_members, parse_amount};
use crate::domain::{Atomic, Cadence, Interval, Policy, Thresholds, Zone, whole_number};

/// A `period` member: a policy, or `None` for `null` (no period); `None` outer on an error.
pub(super) fn parse_period(
    errors: &mut FieldErrors,
    field: &str,
    value: &Member,
) -> Option<Option<Policy>> {
    let raw = match value {
        Member::Null => return Some(None),
        Member::Object(raw) => raw,
        _ => {
            errors.add(field, "must be an object or null");
            return None;
        }
    };
    // The body parsed as a whole, so its parts parse.
    let members = object_members(raw.as_bytes()).ok()?;
    let mut inner = FieldErrors::default();
    let (mut interval, mut zone, mut every) = (None, None, None);
    let (mut allowance, mut rollover) = (None, Some(Atomic::new(0)));
    inner.walk(&members, &["allowance_atomic"], |errors, field, value| {
        match (field, value) {
            ("interval" | "time_zone" | "every_seconds" | "rollover_max_atomic", Member::Null) => {}
            ("interval", Member::String(raw)) => {
                interval = Interval::parse(raw).map_err(|m| errors.add(field, m)).ok();
            }
            ("interval", _) => errors.add(field, "must be one of day, week or month"),
            ("time_zone", Member::String(raw)) => {
                zone = Zone::parse(raw).map_err(|m| errors.add(field, m)).ok();
            }
            ("time_zone", _) => errors.add(field, "must be a string naming an IANA time zone"),
            ("every_seconds", value) => {
                every = match value {
                    // A JSON integer is a value, not a spelling: `60`, `60.0` and `6e1` alike.
                    Member::Number(raw) => whole_number(raw),
                    _ => None,
                }
                .and_then(|seconds| Cadence::fixed(seconds).ok());
                if every.is_none() {
                    errors.add(field, "must be a JSON integer from 1 to 31622400");
                }
            }
            ("allowance_atomic", value) => allowance = parse_amount(errors, field, value),
            ("rollover_max_atomic", value) => rollover = parse_amount(errors, field, value),
            _ => return false,
        }
        true
    });
    let given = |name: &str| {
        members
            .iter()
            .any(|(n, v)| n == name && !matches!(v, Member::Null))
    };
    let (has_interval, has_every) = (given("interval"), given("every_seconds"));
    match (has_interval, has_every) {
        (true, true) => {
            inner.add("interval", "must not be given with every_seconds");
            inner.add("every_seconds", "must not be given with interval");
        }
        (false, false) => {
            inner.add("interval", "or every_seconds is required");
            inner.add("every_seconds", "or interval is required");
        }
        _ => {}
    }
    if has_every && given("time_zone") {
        inner.add("time_zone", "is only for a calendar interval");
    }
    let mut failed = false;
    for error in inner.errors {
        errors.add(&format!("{field}.{}", error.field), &error.message);
        failed = true;
    }
    if failed {
        return None;
    }
    let cadence = match (interval, every) {
        (Some(interval), None) => Cadence::Calendar {
            interval,
            zone: zone.unwrap_or_else(Zone::utc),
        },
        (None, Some(fixed)) => fixed,
        _ => return None,
    };
    Some(Some(Policy {
        cadence,
        allowance: allowance?,
        rollover_max: rollover?,
    }))
}

/// An `alert_thresholds_atomic` member: the thresholds (`null`: none), or `None` on an
/// error.
pub(super) fn parse_thresholds(
    errors: &mut FieldErrors,
    field: &str,
    value: &Member,
) -> Option<Thresholds> {
    let raw = match value {
        Member::Null => return Some(Thresholds::default()),
        Member::Array(raw) => raw,
        _ => {
            errors.add(field, "must be an array of amounts or null");
            return None;
        }
    };
    let items = array_items(raw).ok()?;
    let mut amounts = Vec::with_capacity(items.len());
    let mut failed = false;
    for (i, item) in items.iter().enumerate() {
        match parse_amount(errors, &format!("{field}.{i}"), item) {
            Some(amount) => amounts.push(amount),
            None => failed = true,
        }
    }
    if failed {
        return None;
    }
    Thresholds::new(amounts)
        .map_err(|message| errors.add(field, message))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::super::invalid_fields as fields;
    use super::*;
    use crate::problem::ApiError;

    fn period(body: &str) -> Result<Option<Policy>, ApiError> {
        let mut errors = FieldErrors::default();
        let parsed = parse_period(&mut errors, "period", &super::super::member(body)?);
        errors.finish()?;
        Ok(parsed.expect("no error, so a value"))
    }

    fn thresholds(body: &str) -> Result<Thresholds, ApiError> {
        let mut errors = FieldErrors::default();
        let parsed = parse_thresholds(
            &mut errors,
            "alert_thresholds_atomic",
            &super::super::member(body)?,
        );
        errors.finish()?;
        Ok(parsed.expect("no error, so a value"))
    }

    #[test]
    fn periods_are_calendar_or_fixed_and_every_bad_member_is_named() {
        let monthly =
            period(r#"{"interval":"month","time_zone":"Europe/Berlin","allowance_atomic":"5000"}"#)
                .expect("valid")
                .expect("a policy");
        assert_eq!(monthly.rollover_max.get(), 0, "the default rollover");
        let daily = period(r#"{"interval":"day","allowance_atomic":"1","time_zone":null}"#)
            .expect("valid")
            .expect("a policy");
        assert_eq!(
            daily.cadence,
            Cadence::Calendar {
                interval: Interval::Day,
                zone: Zone::utc()
            },
            "UTC by default"
        );
        assert_eq!(period("null").expect("valid"), None);
        let cases: &[(&str, &[&str])] = &[
            ("5", &["period"]),
            (
                "{}",
                &[
                    "period.allowance_atomic",
                    "period.interval",
                    "period.every_seconds",
                ],
            ),
            (
                r#"{"interval":"day","every_seconds":60,"allowance_atomic":"1"}"#,
                &["period.interval", "period.every_seconds"],
            ),
            (
                r#"{"every_seconds":60,"time_zone":"UTC","allowance_atomic":"1"}"#,
                &["period.time_zone"],
            ),
            (
                r#"{"interval":"day","time_zone":"+02:00","allowance_atomic":"1"}"#,
                &["period.time_zone"],
            ),
            (
                r#"{"every_seconds":0,"allowance_atomic":"1"}"#,
                &["period.every_seconds"],
            ),
            (
                r#"{"every_seconds":60.5,"allowance_atomic":"1"}"#,
                &["period.every_seconds"],
            ),
            (
                r#"{"every_seconds":31622401,"allowance_atomic":1,"x":1}"#,
                &[
                    "period.every_seconds",
                    "period.allowance_atomic",
                    "period.x",
                ],
            ),
            (
                r#"{"interval":"year","allowance_atomic":"1","rollover_max_atomic":"-1"}"#,
                &["period.interval", "period.rollover_max_atomic"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(fields(period(body)), *want, "{body}");
        }
    }

    #[test]
    fn thresholds_are_distinct_amounts_at_most_ten() {
        let t = thresholds(r#"["0","1000"]"#).expect("valid");
        assert_eq!(t.to_column(), "1000,0", "largest first");
        assert!(thresholds("null").expect("valid").is_empty());
        let cases: &[(&str, &[&str])] = &[
            ("{}", &["alert_thresholds_atomic"]),
            (
                r#"["1",2,"x"]"#,
                &["alert_thresholds_atomic.1", "alert_thresholds_atomic.2"],
            ),
            (r#"["1","1"]"#, &["alert_thresholds_atomic"]),
            (
                r#"["0","1","2","3","4","5","6","7","8","9","10"]"#,
                &["alert_thresholds_atomic"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(fields(thresholds(body)), *want, "{body}");
        }
    }
}
