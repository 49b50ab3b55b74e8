//! The members of a JSON object in the order its text has them, which `serde_json::Value`
//! does not keep: the contract fixes the order of members in answers and events.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The members of a JSON object in the order the text has them, each with its raw text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(InOrder)
    }
}

/// The members of the object `text`, in order, with their raw texts; fails the test (naming
/// `ctx`) if `text` is not a JSON object.
pub fn members(text: &str, ctx: &str) -> Vec<(String, Box<RawValue>)> {
    let parsed = serde_json::from_str::<Members>(text);
    parsed
        .unwrap_or_else(|e| panic!("{ctx}: a JSON object ({e}): {text}"))
        .0
}

/// The names of the members of the object `text`, in order.
pub fn member_names(text: &str, ctx: &str) -> Vec<String> {
    members(text, ctx)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}
