//! Rate limits: a token bucket per principal, `429 rate_limited` right after authentication,
//! before the body is read, with `Retry-After` and the draft's `RateLimit` headers.

use std::time::Duration;

use crate::helpers::*;
use crate::wire::Response;

/// A server whose principals may send `rate` (`N/s`, `N/m`), `burst` at once, with `more`
/// flags.
fn spawn_limited(rate: &str, burst: &str, more: &[&str]) -> TestApp {
    let builder = AppBuilder::new()
        .arg("--rate-limit")
        .arg(rate)
        .arg("--rate-limit-burst")
        .arg(burst);
    more.iter().fold(builder, |b, flag| b.arg(flag)).spawn()
}

/// `GET /v1/tenants/<id>` with `token`.
fn read(app: &TestApp, id: &str, token: &str) -> Response {
    app.get(id, Some(token))
}

/// The figure `name` of a `RateLimit` value such as `"default";r=2;t=0`.
fn member(resp: &Response, name: &str) -> u64 {
    let value = resp.header("ratelimit").unwrap_or_default();
    value
        .split(';')
        .find_map(|part| part.strip_prefix(&format!("{name}=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("RateLimit has {name}: {}", resp.describe()))
}

/// The value of the sample `name{principal="…"}` in the metrics text.
fn refused(app: &TestApp, principal: &str) -> String {
    let text = app.metrics();
    let series = format!("tenantd_rate_limited_total{{principal=\"{principal}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("{series}is exposed:\n{text}"))
        .to_owned()
}

#[test]
fn a_burst_of_exactly_the_bucket_passes_and_the_next_is_refused_without_its_body_read() {
    // One a minute, three at once: nothing comes back during the test.
    let app = spawn_limited("1/m", "3", &[]);
    let created = app.create_ok("limited", "100");
    let (id, token) = (tenant_id(&created), tenant_token(&created));
    let other = app.create_ok("neighbour", "100");

    for remaining in [2, 1, 0] {
        let resp = read(&app, &id, &token);
        assert_eq!(resp.status, 200, "{}", resp.describe());
        assert_eq!(
            resp.header("ratelimit-policy"),
            None,
            "the policy comes with a 429"
        );
        assert_eq!(member(&resp, "r"), remaining);
        let t = member(&resp, "t");
        assert!(
            (remaining > 0 && t == 0) || (remaining == 0 && (1..=60).contains(&t)),
            "t is 0 while some remain, else the wait for one more: {}",
            resp.describe()
        );
    }

    // The fourth: refused before its body is read, so a body past the 1 MiB bound is no 413.
    let body = vec![b' '; 2 * 1024 * 1024];
    let auth = bearer(&token);
    let resp = app.request(
        "POST",
        &format!("/v1/tenants/{id}/charges"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        Some(&body),
    );
    assert_problem(&resp, 429, "rate_limited", "rate_limited");
    let retry_after: u64 = resp
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("Retry-After in whole seconds: {}", resp.describe()));
    assert!((1..=60).contains(&retry_after), "{}", resp.describe());
    assert_eq!(member(&resp, "r"), 0);
    assert_eq!(
        member(&resp, "t"),
        retry_after,
        "t is the wait Retry-After gives"
    );
    assert_eq!(
        resp.header("ratelimit-policy"),
        Some("\"default\";q=3;w=180")
    );
    assert_eq!(refused(&app, "tenant"), "1");

    // Another tenant has a bucket of its own; the admin is not counted, and its answers say
    // nothing of limits.
    let resp = read(&app, &tenant_id(&other), &tenant_token(&other));
    assert_eq!(
        (resp.status, member(&resp, "r")),
        (200, 2),
        "{}",
        resp.describe()
    );
    let resp = app.get_admin(&id);
    assert_eq!(resp.status, 200, "{}", resp.describe());
    assert_eq!(
        (resp.header("ratelimit"), resp.header("ratelimit-policy")),
        (None, None),
        "an uncounted admin's answer: {}",
        resp.describe()
    );

    // Never limited, whoever asks: the probes and the metrics. Unauthenticated requests count
    // against no one.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let resp = app.request("GET", path, &[("Authorization", auth.as_str())], None);
        assert_eq!(resp.status, 200, "{path}: {}", resp.describe());
        assert_eq!(resp.header("ratelimit"), None, "{path}");
    }
    let resp = app.get(&id, Some("not-a-token"));
    assert_problem(&resp, 401, "unauthorized", "unauthorized");
    assert_eq!(resp.header("ratelimit"), None, "a 401 is not counted");
    assert_eq!(refused(&app, "tenant"), "1", "only the one 429 is counted");
}

#[test]
fn after_the_announced_wait_one_more_passes() {
    let app = spawn_limited("1/s", "1", &[]);
    let created = app.create_ok("waits", "100");
    let (id, token) = (tenant_id(&created), tenant_token(&created));
    // Requests in a row until one is refused: on a loaded machine a second may pass between
    // two, and a token come back.
    let refused = (0..50)
        .map(|_| read(&app, &id, &token))
        .find(|resp| resp.status == 429)
        .expect("one of 50 requests in a row is refused at one a second");
    assert_problem(&refused, 429, "rate_limited", "rate_limited");
    let t = member(&refused, "t");
    assert_eq!(
        t,
        1,
        "one a second: one more within a second: {}",
        refused.describe()
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    std::thread::sleep(Duration::from_secs(t));
    let resp = read(&app, &id, &token);
    assert_eq!(resp.status, 200, "after {t} s: {}", resp.describe());
}

#[test]
fn a_forbidden_request_counts_and_the_admin_is_counted_when_asked() {
    let app = spawn_limited("1/m", "2", &["--rate-limit-admin"]);
    let one = app.create_ok("one", "100");
    let two = app.create_ok("two", "100");
    // The admin made two creates: its bucket is empty.
    let resp = app.create("three", "100");
    assert_problem(&resp, 429, "rate_limited", "rate_limited");
    assert_eq!(refused(&app, "admin"), "1");
    assert_eq!(app.tenant_count(), 2, "the refused create made nothing");

    // A tenant token reading another tenant: 403, counted.
    let token = tenant_token(&one);
    for _ in 0..2 {
        let resp = read(&app, &tenant_id(&two), &token);
        assert_problem(&resp, 403, "forbidden", "forbidden");
        assert!(resp.header("ratelimit").is_some(), "{}", resp.describe());
    }
    let resp = read(&app, &tenant_id(&one), &token);
    assert_problem(&resp, 429, "rate_limited", "rate_limited");
    assert_eq!(refused(&app, "tenant"), "1");
}
