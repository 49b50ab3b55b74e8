//! Every body rule of the create endpoint, table-driven: what is refused (and which fields
//! are named), what is accepted, and which bodies are not JSON objects at all.

use serde_json::{Value, json};

use crate::helpers::*;

fn body(name: Value, amount: Value) -> String {
    json!({ "name": name, "opening_deposit_atomic": amount }).to_string()
}

/// A name of `n` characters cycling through 1- to 4-byte UTF-8 characters.
fn multibyte_name(n: usize, salt: char) -> String {
    let alphabet = ['é', '€', '𝄞', '日', salt, 'ß', '🦀'];
    alphabet.iter().cycle().take(n).collect()
}

const NAME: &str = "name";
const AMOUNT: &str = "opening_deposit_atomic";

#[test]
fn refused_bodies_name_every_bad_field() {
    let app = spawn_app();
    let ok = || json!("fine-name");
    let one = || json!("1");
    let long_ascii = "a".repeat(NAME_CHARS_MAX + 1);
    let long_multi = multibyte_name(NAME_CHARS_MAX + 1, 'x');
    let long_ascii_msg = format!("name {} ASCII characters", NAME_CHARS_MAX + 1);
    let long_multi_msg = format!("name {} multibyte characters", NAME_CHARS_MAX + 1);
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        // Missing or mistyped members.
        ("an empty object", "{}".to_owned(), vec![NAME, AMOUNT]),
        (
            "name missing",
            json!({ AMOUNT: "1" }).to_string(),
            vec![NAME],
        ),
        (
            "amount missing",
            json!({ NAME: "x" }).to_string(),
            vec![AMOUNT],
        ),
        ("name a number", body(json!(5), one()), vec![NAME]),
        ("name null", body(Value::Null, one()), vec![NAME]),
        ("name an array", body(json!(["a"]), one()), vec![NAME]),
        (
            "name an object",
            body(json!({ "v": "a" }), one()),
            vec![NAME],
        ),
        ("name true", body(json!(true), one()), vec![NAME]),
        // Name rules.
        ("name empty", body(json!(""), one()), vec![NAME]),
        (
            long_ascii_msg.as_str(),
            body(json!(long_ascii), one()),
            vec![NAME],
        ),
        (
            long_multi_msg.as_str(),
            body(json!(long_multi), one()),
            vec![NAME],
        ),
        ("name with NUL", body(json!("a\u{0}b"), one()), vec![NAME]),
        ("name with a tab", body(json!("a\tb"), one()), vec![NAME]),
        (
            "name with a line feed",
            body(json!("a\nb"), one()),
            vec![NAME],
        ),
        (
            "name with a carriage return",
            body(json!("a\rb"), one()),
            vec![NAME],
        ),
        ("name with ESC", body(json!("a\u{1b}b"), one()), vec![NAME]),
        ("name with DEL", body(json!("a\u{7f}b"), one()), vec![NAME]),
        (
            "name with C1 NEL (U+0085)",
            body(json!("a\u{85}b"), one()),
            vec![NAME],
        ),
        (
            "name with C1 U+0080",
            body(json!("a\u{80}b"), one()),
            vec![NAME],
        ),
        (
            "name with C1 U+009F",
            body(json!("a\u{9f}b"), one()),
            vec![NAME],
        ),
        (
            "name with a leading space",
            body(json!(" acme"), one()),
            vec![NAME],
        ),
        (
            "name with a trailing space",
            body(json!("acme "), one()),
            vec![NAME],
        ),
        ("name only a space", body(json!(" "), one()), vec![NAME]),
        (
            "name with a leading NBSP",
            body(json!("\u{a0}acme"), one()),
            vec![NAME],
        ),
        (
            "name with a trailing NBSP",
            body(json!("acme\u{a0}"), one()),
            vec![NAME],
        ),
        (
            "name with a trailing ideographic space",
            body(json!("acme\u{3000}"), one()),
            vec![NAME],
        ),
        (
            "name with a leading em space",
            body(json!("\u{2003}acme"), one()),
            vec![NAME],
        ),
        (
            "name with a trailing line separator",
            body(json!("acme\u{2028}"), one()),
            vec![NAME],
        ),
        (
            "name with a leading hair space",
            body(json!("\u{200a}acme"), one()),
            vec![NAME],
        ),
        // Amount rules.
        (
            "amount a JSON number",
            body(ok(), json!(1000)),
            vec![AMOUNT],
        ),
        ("amount a JSON zero", body(ok(), json!(0)), vec![AMOUNT]),
        ("amount a JSON float", body(ok(), json!(1.5)), vec![AMOUNT]),
        ("amount null", body(ok(), Value::Null), vec![AMOUNT]),
        ("amount true", body(ok(), json!(true)), vec![AMOUNT]),
        ("amount an array", body(ok(), json!(["1"])), vec![AMOUNT]),
        (
            "amount an object",
            body(ok(), json!({ "v": "1" })),
            vec![AMOUNT],
        ),
        ("amount empty", body(ok(), json!("")), vec![AMOUNT]),
        ("amount negative", body(ok(), json!("-1")), vec![AMOUNT]),
        (
            "amount with a plus sign",
            body(ok(), json!("+1")),
            vec![AMOUNT],
        ),
        (
            "amount with a decimal point",
            body(ok(), json!("1.0")),
            vec![AMOUNT],
        ),
        (
            "amount with an exponent",
            body(ok(), json!("1e3")),
            vec![AMOUNT],
        ),
        (
            "amount with a leading space",
            body(ok(), json!(" 1")),
            vec![AMOUNT],
        ),
        (
            "amount with a trailing space",
            body(ok(), json!("1 ")),
            vec![AMOUNT],
        ),
        (
            "amount with an inner space",
            body(ok(), json!("1 000")),
            vec![AMOUNT],
        ),
        (
            "amount with an underscore",
            body(ok(), json!("1_000")),
            vec![AMOUNT],
        ),
        (
            "amount with a leading zero",
            body(ok(), json!("01")),
            vec![AMOUNT],
        ),
        ("amount of two zeros", body(ok(), json!("00")), vec![AMOUNT]),
        ("amount in hex", body(ok(), json!("0x10")), vec![AMOUNT]),
        (
            "amount in Arabic-Indic digits",
            body(ok(), json!("\u{661}\u{662}")),
            vec![AMOUNT],
        ),
        (
            "amount in full-width digits",
            body(ok(), json!("\u{ff11}")),
            vec![AMOUNT],
        ),
        (
            "amount u128::MAX + 1",
            body(ok(), json!("340282366920938463463374607431768211456")),
            vec![AMOUNT],
        ),
        (
            "amount ten times u128::MAX",
            body(ok(), json!("3402823669209384634633746074317682114550")),
            vec![AMOUNT],
        ),
        (
            "amount of 100 nines",
            body(ok(), json!("9".repeat(100))),
            vec![AMOUNT],
        ),
        // Members that must not be there.
        (
            "an unknown member",
            json!({ NAME: "x", AMOUNT: "1", "nmae": "typo" }).to_string(),
            vec!["nmae"],
        ),
        (
            "a member given twice",
            r#"{"name":"a","name":"b","opening_deposit_atomic":"1"}"#.to_owned(),
            vec![NAME],
        ),
        (
            "the amount given twice",
            r#"{"name":"a","opening_deposit_atomic":"1","opening_deposit_atomic":"1"}"#.to_owned(),
            vec![AMOUNT],
        ),
        // Everything at once: every bad field is reported.
        (
            "every field bad at once",
            json!({ NAME: " bad", AMOUNT: "01", "extra": 1 }).to_string(),
            vec!["extra", NAME, AMOUNT],
        ),
        (
            "both fields the wrong type",
            json!({ NAME: 1, AMOUNT: 2 }).to_string(),
            vec![NAME, AMOUNT],
        ),
        (
            "two unknown members and a missing name",
            json!({ AMOUNT: "1", "a": 1, "b": 2 }).to_string(),
            vec!["a", "b", NAME],
        ),
    ];
    for (msg, text, expected) in cases {
        let resp = app.post_tenants(&text, None);
        let problem = assert_problem(&resp, 422, "validation_failed", msg);
        let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(
            error_fields(&problem, msg),
            expected,
            "{msg}: one error entry per bad field, all of them; body sent: {text}"
        );
    }
    assert_eq!(app.tenant_count(), 0, "no refused body created a tenant");
    assert_eq!(
        app.audit_count(),
        0,
        "no refused body appended an audit event"
    );
}

#[test]
fn boundary_values_are_accepted() {
    let app = spawn_app();
    let longest_ascii = format!("a {NAME_CHARS_MAX}-character ASCII name");
    let longest_multi = format!("a {NAME_CHARS_MAX}-character multibyte name");
    let longest_four_byte = format!("a name of {NAME_CHARS_MAX} four-byte characters");
    let cases: Vec<(&str, String, String)> = vec![
        ("amount zero", "zero-deposit".to_owned(), "0".to_owned()),
        (
            "amount u128::MAX",
            "max-deposit".to_owned(),
            U128_MAX.to_owned(),
        ),
        (
            "amount u64::MAX + 1",
            "big-deposit".to_owned(),
            "18446744073709551616".to_owned(),
        ),
        ("a one-character name", "x".to_owned(), "1".to_owned()),
        (
            longest_ascii.as_str(),
            "b".repeat(NAME_CHARS_MAX),
            "1".to_owned(),
        ),
        (
            longest_multi.as_str(),
            multibyte_name(NAME_CHARS_MAX, 'y'),
            "1".to_owned(),
        ),
        (
            longest_four_byte.as_str(),
            "🦀".repeat(NAME_CHARS_MAX),
            "1".to_owned(),
        ),
        (
            "a name with inner spaces",
            "acme prod eu".to_owned(),
            "1".to_owned(),
        ),
        (
            "a name with an inner NBSP",
            "acme\u{a0}nbsp".to_owned(),
            "1".to_owned(),
        ),
        (
            "a name with quotes and backslashes",
            r#"ac"me\prod"#.to_owned(),
            "1".to_owned(),
        ),
        (
            "a name in another script",
            "日本の顧客".to_owned(),
            "1".to_owned(),
        ),
        (
            "a name with a combining mark",
            "cafe\u{301}".to_owned(),
            "1".to_owned(),
        ),
        (
            "a name with a zero-width joiner",
            "a\u{200d}b".to_owned(),
            "1".to_owned(),
        ),
    ];
    for (msg, name, amount) in cases {
        let resp = app.create(&name, &amount);
        assert_eq!(resp.status, 201, "{msg}: {}", resp.describe());
        let created = resp.json();
        assert_eq!(
            created["name"],
            name.as_str(),
            "{msg}: the name comes back exactly"
        );
        assert_eq!(
            created["budget"]["opening_deposit_atomic"],
            amount.as_str(),
            "{msg}: the amount comes back exactly"
        );
        let read = app.get_admin(&tenant_id(&created)).json();
        assert_eq!(
            read["name"],
            name.as_str(),
            "{msg}: the stored name reads back exactly"
        );
        assert_eq!(
            read["budget"]["balance_atomic"],
            amount.as_str(),
            "{msg}: the stored amount reads back exactly"
        );
    }
}

#[test]
fn member_order_and_white_space_do_not_matter() {
    let app = spawn_app();
    let text = "\n { \"opening_deposit_atomic\" :\t\"12\" ,\r\n \"name\" : \"spaced\" } \n";
    let resp = app.post_tenants(text, None);
    assert_eq!(
        resp.status,
        201,
        "a valid body in any layout: {}",
        resp.describe()
    );
    assert_eq!(resp.json()["name"], "spaced", "the name is parsed");
}

#[test]
fn bodies_that_are_not_json_objects_are_malformed_json() {
    let app = spawn_app();
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let deep_object = format!(
        "{{\"name\":{}\"x\"{},\"opening_deposit_atomic\":\"1\"}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("an empty body", b"".to_vec()),
        ("plain text", b"hello".to_vec()),
        (
            "truncated JSON",
            br#"{"name":"a","opening_deposit_atomic":"1""#.to_vec(),
        ),
        (
            "a trailing comma",
            br#"{"name":"a","opening_deposit_atomic":"1",}"#.to_vec(),
        ),
        (
            "single quotes",
            b"{'name':'a','opening_deposit_atomic':'1'}".to_vec(),
        ),
        (
            "trailing garbage",
            br#"{"name":"a","opening_deposit_atomic":"1"} x"#.to_vec(),
        ),
        (
            "two objects",
            br#"{"name":"a","opening_deposit_atomic":"1"}{}"#.to_vec(),
        ),
        (
            "a JSON array",
            br#"[{"name":"a","opening_deposit_atomic":"1"}]"#.to_vec(),
        ),
        ("a JSON string", br#""name""#.to_vec()),
        ("a JSON number", b"42".to_vec()),
        ("JSON null", b"null".to_vec()),
        ("JSON true", b"true".to_vec()),
        (
            "invalid UTF-8 in a string",
            b"{\"name\":\"\xff\xfe\",\"opening_deposit_atomic\":\"1\"}".to_vec(),
        ),
        (
            "a lone surrogate escape",
            br#"{"name":"\ud800","opening_deposit_atomic":"1"}"#.to_vec(),
        ),
        ("deeply nested arrays", deep.into_bytes()),
        ("a deeply nested member", deep_object.into_bytes()),
        (
            "a UTF-16 body",
            "{\"name\":\"a\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
    ];
    for (msg, bytes) in cases {
        let auth = app.admin();
        let resp = app.request(
            "POST",
            "/v1/tenants",
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ],
            Some(&bytes),
        );
        assert_problem(&resp, 400, "malformed_json", msg);
    }
    assert_eq!(app.tenant_count(), 0, "no malformed body created a tenant");
}

/// Digits of the integer too big for any float in the tests below.
const HUGE_DIGITS: usize = 400;

/// A number too big for a float (`1e400`, a 400-digit integer) is still a JSON number, so the
/// body is still a JSON object: the number is a bad value of its member, or an unknown
/// member, never `400 malformed_json`. Nothing is written.
#[test]
fn numbers_too_big_for_a_float_are_field_errors_not_malformed_json() {
    let app = spawn_app();
    let digits = "9".repeat(HUGE_DIGITS);
    let huge_integer = format!("a {HUGE_DIGITS}-digit integer");
    let numbers = [
        ("1e400", "1e400"),
        ("-1e400", "-1e400"),
        (huge_integer.as_str(), digits.as_str()),
    ];
    let mut cases: Vec<(String, String, &str)> = Vec::new();
    for (what, number) in numbers {
        cases.push((
            format!("{what} as the deposit"),
            format!(r#"{{"name":"n","opening_deposit_atomic":{number}}}"#),
            AMOUNT,
        ));
        cases.push((
            format!("{what} as an unknown member"),
            format!(r#"{{"name":"n","opening_deposit_atomic":"1","x":{number}}}"#),
            "x",
        ));
    }
    for (msg, text, field) in &cases {
        let resp = app.post_tenants(text, None);
        let problem = assert_problem(&resp, 422, "validation_failed", msg);
        assert_eq!(
            error_fields(&problem, msg),
            [*field],
            "{msg}: exactly one error entry, for {field}; body sent: {text}"
        );
    }
    assert_eq!(app.tenant_count(), 0, "no such create wrote a tenant");
    assert_eq!(
        app.audit_count(),
        0,
        "no such create appended an audit event"
    );
}
