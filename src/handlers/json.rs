//! The JSON object reader: a body's members in order, duplicates kept, each value classified
//! but never converted; and [`FieldErrors`], which walks them and collects every field's error.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::problem::{ApiError, FieldError};

/// One member's value, as much as a validator needs to know of it. Numbers are classified,
/// never converted, so a number no float can hold (`1e400`) is still a number of a JSON
/// object, reported against its field rather than refusing the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Member {
    String(String),
    Number(String),
    Null,
    /// An object, as its JSON text.
    Object(String),
    /// An array, as its JSON text.
    Array(String),
    /// `true` or `false`.
    Bool(bool),
}

/// The parser's recursion limit: a body nested this deep (the object itself is one level) or
/// deeper is not JSON to it, and is refused the same way here.
const MEMBER_DEPTH_MAX: usize = 128;

/// A JSON object's members in order, duplicates kept, so that a duplicate can be refused
/// rather than silently resolved.
struct RawMembers(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for RawMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = RawMembers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMembers, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(entry);
                }
                Ok(RawMembers(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Reads a body as one JSON object: `400 malformed_json` unless it is one (nested deeper
/// than [`MEMBER_DEPTH_MAX`] counts as not JSON, as the parser would have it).
pub(super) fn object_members(body: &[u8]) -> Result<Vec<(String, Member)>, ApiError> {
    let malformed = |e: serde_json::Error| {
        let why = match e.classify() {
            serde_json::error::Category::Data => "it must be a JSON object".to_owned(),
            _ => e.to_string(),
        };
        ApiError::MalformedJson(why)
    };
    let RawMembers(raw) = serde_json::from_slice(body).map_err(malformed)?;
    raw.into_iter()
        .map(|(name, value)| Ok((name, member(value.get())?)))
        .collect()
}

/// One JSON value the parser has accepted, classified.
pub(super) fn member(text: &str) -> Result<Member, ApiError> {
    let malformed = |e: serde_json::Error| ApiError::MalformedJson(e.to_string());
    Ok(match text.as_bytes().first() {
        Some(b'"') => Member::String(serde_json::from_str(text).map_err(malformed)?),
        Some(b'-' | b'0'..=b'9') => Member::Number(text.to_owned()),
        Some(b'n') => Member::Null,
        Some(b'{') => {
            check_depth(text)?;
            Member::Object(text.to_owned())
        }
        Some(b'[') => {
            check_depth(text)?;
            Member::Array(text.to_owned())
        }
        Some(b't') => Member::Bool(true),
        _ => Member::Bool(false),
    })
}

/// The items of an array member, classified.
pub(super) fn array_items(text: &str) -> Result<Vec<Member>, ApiError> {
    let items: Vec<Box<RawValue>> =
        serde_json::from_str(text).map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    items.iter().map(|item| member(item.get())).collect()
}

/// Refuses an array or object nested deeper than [`MEMBER_DEPTH_MAX`]. `text` is JSON the
/// parser has already accepted, so counting brackets outside strings is exact.
fn check_depth(text: &str) -> Result<(), ApiError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                // The object holding the member is the first level; like the parser, the
                // limit itself is refused.
                if 1 + depth >= MEMBER_DEPTH_MAX {
                    return Err(ApiError::MalformedJson(format!(
                        "it nests deeper than {MEMBER_DEPTH_MAX} levels"
                    )));
                }
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Collects a body's field errors, each field once, in the order met.
#[derive(Default)]
pub(super) struct FieldErrors {
    /// The errors found, in the order met; a nested member's reader passes them up.
    pub(super) errors: Vec<FieldError>,
    reported: HashSet<String>,
}

impl FieldErrors {
    pub(super) fn add(&mut self, field: &str, message: &str) {
        if self.reported.insert(field.to_owned()) {
            self.errors.push(FieldError {
                field: field.to_owned(),
                message: message.to_owned(),
            });
        }
    }

    /// Walks `members` once: a duplicate is an error of its own, a known member goes to
    /// `check`, an unknown one is reported, and a missing `required` one too.
    pub(super) fn walk(
        &mut self,
        members: &[(String, Member)],
        required: &[&str],
        mut check: impl FnMut(&mut Self, &str, &Member) -> bool,
    ) {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(members.len());
        for (name, _) in members {
            *seen.entry(name.as_str()).or_insert(0) += 1;
        }
        for (name, value) in members {
            if seen[name.as_str()] > 1 {
                self.add(name, "must appear only once");
            } else if !check(self, name, value) {
                self.add(name, "is not a known member");
            }
        }
        for name in required {
            if !seen.contains_key(name) {
                self.add(name, "is required");
            }
        }
    }

    /// `422` with every error found, if there was one.
    pub(super) fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::ValidationFailed(self.errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_classified_not_converted() {
        let members = object_members(
            br#"{"s":"x\u00e9","n":1e400,"m":-1e400,"i":123456789012345678901234567890123456789012,"z":null,"a":[1],"o":{},"b":true}"#,
        )
        .expect("an object");
        let kinds: Vec<(&str, &Member)> = members.iter().map(|(k, v)| (k.as_str(), v)).collect();
        assert_eq!(
            kinds,
            vec![
                ("s", &Member::String("xé".into())),
                ("n", &Member::Number("1e400".into())),
                ("m", &Member::Number("-1e400".into())),
                (
                    "i",
                    &Member::Number("123456789012345678901234567890123456789012".into())
                ),
                ("z", &Member::Null),
                ("a", &Member::Array("[1]".into())),
                ("o", &Member::Object("{}".into())),
                ("b", &Member::Bool(true)),
            ]
        );
    }

    #[test]
    fn non_objects_are_malformed() {
        let deep = format!("{{\"name\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        let just_too_deep = format!(
            "{{\"name\":{}{}}}",
            "[".repeat(MEMBER_DEPTH_MAX - 1),
            "]".repeat(MEMBER_DEPTH_MAX - 1)
        );
        for body in [
            "",
            "[]",
            "\"x\"",
            "1",
            "1e400",
            "null",
            "{",
            "{\"name\":\"a\"} x",
            "\u{fffd}",
            &deep,
            &just_too_deep,
        ] {
            assert!(
                matches!(
                    object_members(body.as_bytes()),
                    Err(ApiError::MalformedJson(_))
                ),
                "{body:?}"
            );
        }
        assert!(matches!(
            object_members(b"{\"name\":\"\xff\"}"),
            Err(ApiError::MalformedJson(_))
        ));
        let deep_enough = format!(
            "{{\"name\":{}{}}}",
            "[".repeat(MEMBER_DEPTH_MAX - 2),
            "]".repeat(MEMBER_DEPTH_MAX - 2)
        );
        assert!(object_members(deep_enough.as_bytes()).is_ok());
        // The parser itself draws the line at the same place.
        assert!(serde_json::from_str::<serde_json::Value>(&deep_enough).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&just_too_deep).is_err());
    }
}
