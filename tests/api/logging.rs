//! The log: one access line per request with the route template, and no secret and no
//! header value anywhere in it.

use std::time::Duration;

use crate::helpers::*;
use crate::wire::Response;

/// Waits for the log line carrying `request_id` and checks it reads
/// `METHOD ROUTE STATUS DURATIONms REQUEST_ID`.
fn assert_access_line(app: &TestApp, method: &str, route: &str, status: u16, request_id: &str) {
    let prefix = format!("{method} {route} {status} ");
    let line = app
        .wait_for_log(Duration::from_secs(3), |l| {
            l.contains(&prefix) && l.trim_end().ends_with(request_id)
        })
        .unwrap_or_else(|| {
            panic!(
                "no access line `{prefix}<duration>ms {request_id}`; log:\n{}",
                app.log_text()
            )
        });
    let rest = &line[line.find(&prefix).expect("the prefix") + prefix.len()..];
    let words: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(
        words.len(),
        2,
        "after the status come the duration and the request id: {line}"
    );
    let duration = words[0]
        .strip_suffix("ms")
        .and_then(|d| d.parse::<f64>().ok());
    assert!(
        duration.is_some_and(|d| d >= 0.0),
        "the duration is a number of milliseconds: {line}"
    );
    assert_eq!(
        words[1], request_id,
        "the line ends with the request id: {line}"
    );
}

#[test]
fn every_request_gets_one_access_line_with_its_route_template() {
    let app = spawn_app();
    let created = app.create_ok("logged", "1");
    let id = tenant_id(&created);
    let auth = app.admin();

    /// Request id, method, path, headers, body, expected route label, expected status.
    type Case<'a> = (
        &'a str,
        &'a str,
        String,
        Vec<(&'a str, &'a str)>,
        Option<Vec<u8>>,
        &'a str,
        u16,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "log-health",
            "GET",
            "/healthz".to_owned(),
            vec![],
            None,
            "/healthz",
            200,
        ),
        (
            "log-ready",
            "GET",
            "/readyz".to_owned(),
            vec![],
            None,
            "/readyz",
            200,
        ),
        (
            "log-metrics",
            "GET",
            "/metrics".to_owned(),
            vec![],
            None,
            "/metrics",
            200,
        ),
        (
            "log-openapi",
            "GET",
            "/v1/openapi.json".to_owned(),
            vec![],
            None,
            "/v1/openapi.json",
            200,
        ),
        (
            "log-read",
            "GET",
            format!("/v1/tenants/{id}"),
            vec![("Authorization", auth.as_str())],
            None,
            "/v1/tenants/{id}",
            200,
        ),
        (
            "log-create",
            "POST",
            "/v1/tenants".to_owned(),
            vec![
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ],
            Some(tenant_body("logged-2", "1").into_bytes()),
            "/v1/tenants",
            201,
        ),
        (
            "log-401",
            "GET",
            format!("/v1/tenants/{id}"),
            vec![],
            None,
            "/v1/tenants/{id}",
            401,
        ),
        (
            "log-unmatched",
            "GET",
            "/no/such/route".to_owned(),
            vec![],
            None,
            "unmatched",
            404,
        ),
    ];
    for (rid, method, path, mut headers, body, route, status) in cases {
        let request_id = format!("{rid}-{}", random_hex(4));
        headers.push(("X-Request-Id", request_id.as_str()));
        let resp = app.request(method, &path, &headers, body.as_deref());
        assert_eq!(resp.status, status, "{rid}: {}", resp.describe());
        assert_access_line(&app, method, route, status, &request_id);
        if status < 400 {
            let lines = app
                .log_lines()
                .into_iter()
                .filter(|l| l.contains(&request_id))
                .count();
            assert_eq!(
                lines, 1,
                "{rid}: exactly one log line for a successful request"
            );
        }
    }
    assert!(
        !app.log_lines()
            .iter()
            .any(|l| l.contains(&format!("/v1/tenants/{id}"))),
        "access lines name the route template, not the tenant id"
    );
}

#[test]
fn no_secret_or_header_value_reaches_the_log_or_an_error_body() {
    let app = spawn_app();
    secret_session(&app);
}

#[test]
fn no_secret_reaches_the_log_at_every_level() {
    let app = AppBuilder::new().env("RUST_LOG", "trace").spawn();
    secret_session(&app);
    let levels = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];
    let below_info: Vec<String> = app
        .log_lines()
        .into_iter()
        .filter(|l| l.contains(" DEBUG ") || l.contains(" TRACE "))
        .collect();
    assert!(
        !below_info.is_empty(),
        "RUST_LOG=trace logs below info (the broken request's connection error at least), so \
         the session above ran at every level of {levels:?}; log:\n{}",
        app.log_text()
    );
}

/// Drives every path a secret could take (creates with and without a key, a replay, a
/// mismatch, tenant and admin tokens in and out of scope, bad tokens, a broken request
/// carrying the admin token), then checks that neither the log nor any error body holds a
/// secret or a header value.
fn secret_session(app: &TestApp) {
    let admin = app.admin();
    let user_agent = format!("agent-{}", random_hex(12));
    let custom = format!("custom-{}", random_hex(12));
    let idem_key = format!("idem-{}", random_hex(12));
    let bad_tokens = [
        format!("{}x", app.admin_token),
        format!("tkn_{}", random_hex(32)),
        random_hex(32),
    ];
    let common = [
        ("User-Agent", user_agent.as_str()),
        ("X-Custom", custom.as_str()),
    ];
    let mut error_bodies: Vec<String> = Vec::new();
    let mut keep = |resp: &Response| {
        if resp.status >= 400 {
            error_bodies.push(resp.text());
        }
    };
    // Every request of the session carries the two headers of `common`.
    let call = |method: &str, path: &str, auth: &str, body: Option<&str>, key: Option<&str>| {
        send(&app.addr, method, path, auth, body, key, &common)
    };
    let key = Some(idem_key.as_str());

    let plain = call(
        "POST",
        "/v1/tenants",
        &admin,
        Some(&tenant_body("secret-a", "1")),
        None,
    );
    assert_eq!(plain.status, 201, "create a: {}", plain.describe());
    let keyed = call(
        "POST",
        "/v1/tenants",
        &admin,
        Some(&tenant_body("secret-b", "2")),
        key,
    );
    assert_eq!(keyed.status, 201, "create b: {}", keyed.describe());
    let replay = call(
        "POST",
        "/v1/tenants",
        &admin,
        Some(&tenant_body("secret-b", "2")),
        key,
    );
    assert_eq!(replay.status, 201, "replay b: {}", replay.describe());
    keep(&call(
        "POST",
        "/v1/tenants",
        &admin,
        Some(&tenant_body("secret-c", "2")),
        key,
    ));

    let (a, b) = (plain.json(), keyed.json());
    let (a_id, b_id) = (tenant_id(&a), tenant_id(&b));
    let (a_token, b_token) = (tenant_token(&a), tenant_token(&b));
    let a_auth = bearer(&a_token);
    let b_auth = bearer(&b_token);
    let (a_path, b_path) = (format!("/v1/tenants/{a_id}"), format!("/v1/tenants/{b_id}"));

    let own = call("GET", &a_path, &a_auth, None, None);
    assert_eq!(own.status, 200, "a reads itself: {}", own.describe());
    keep(&call("GET", &a_path, &b_auth, None, None));
    keep(&call(
        "POST",
        "/v1/tenants",
        &a_auth,
        Some(&tenant_body("secret-d", "1")),
        None,
    ));
    for bad in &bad_tokens {
        keep(&call("GET", &a_path, &bearer(bad), None, None));
    }
    let basic = format!("Basic {}", app.admin_token);
    keep(&call("GET", "/v1/tenants/nope", &basic, None, None));
    keep(&call(
        "POST",
        "/v1/tenants",
        &admin,
        Some(&tenant_body("secret-a", "1")),
        None,
    ));
    keep(&call(
        "POST",
        "/v1/tenants",
        &admin,
        Some("{\"name\":\"\"}"),
        None,
    ));
    let deleted = call("DELETE", &a_path, &admin, None, None);
    assert_eq!(deleted.status, 200, "delete a: {}", deleted.describe());
    keep(&call("GET", &a_path, &a_auth, None, None));
    keep(&call("GET", &b_path, &a_auth, None, None));
    assert_eq!(
        error_bodies.len(),
        11,
        "every error case above answered with an error"
    );

    // A request hyper cannot parse, carrying the admin token: the connection error it logs
    // (at debug) must not echo the request's bytes.
    let broken = app.raw(
        format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: {admin}\r\nX-Custom: {custom}\r\n\
             broken header line {admin}\r\n\r\n"
        )
        .as_bytes(),
    );
    let broken = String::from_utf8_lossy(&broken).into_owned();
    assert!(
        broken.starts_with("HTTP/1.1 4"),
        "a request with a broken header line is refused: {broken:?}"
    );
    error_bodies.push(broken);

    // The last request's access line marks the end of the session in the log.
    let marker = format!("end-of-session-{}", random_hex(4));
    app.request(
        "GET",
        "/healthz",
        &[("X-Request-Id", marker.as_str())],
        None,
    );
    assert!(
        app.wait_for_log(Duration::from_secs(3), |l| l.contains(&marker))
            .is_some(),
        "the session's log was flushed"
    );

    let mut secrets: Vec<(String, String)> = Vec::new();
    let mut add = |what: &str, value: &str| {
        secrets.push((what.to_owned(), value.to_owned()));
        if value.len() >= 32 {
            secrets.push((
                format!("the first 16 characters of {what}"),
                value[..16].to_owned(),
            ));
            secrets.push((
                format!("the last 16 characters of {what}"),
                value[value.len() - 16..].to_owned(),
            ));
        }
    };
    add("the admin token", &app.admin_token);
    add(
        "the admin token's hash",
        &sha256_hex(app.admin_token.as_bytes()),
    );
    for (name, token) in [
        ("tenant a's token", &a_token),
        ("tenant b's token", &b_token),
    ] {
        add(name, token);
        add(&format!("{name} hash"), &sha256_hex(token.as_bytes()));
        add(
            &format!("{name} hash in upper case"),
            &sha256_hex(token.as_bytes()).to_ascii_uppercase(),
        );
    }
    for (i, bad) in bad_tokens.iter().enumerate() {
        add(&format!("bad token #{i}"), bad);
    }
    add("the User-Agent header", &user_agent);
    add("a custom header", &custom);
    add("the Idempotency-Key header", &idem_key);

    let log = app.log_lines();
    assert!(log.len() > 10, "the session was logged: {log:?}");
    for line in &log {
        for (what, value) in &secrets {
            assert!(
                !line.contains(value.as_str()),
                "{what} appears in the log line {line:?}"
            );
        }
    }
    for body in &error_bodies {
        for (what, value) in &secrets {
            assert!(
                !body.contains(value.as_str()),
                "{what} appears in the error body {body}"
            );
        }
    }
}
