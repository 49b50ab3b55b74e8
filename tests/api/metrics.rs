//! `/metrics`: the Prometheus exposition and its counts.

use crate::helpers::*;

/// The sum of every sample of `name` whose labels include all of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample line has a value");
        let (metric, label_text) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let matches = labels.iter().all(|(k, v)| {
            label_text
                .split(',')
                .any(|pair| pair.trim() == format!("{k}=\"{v}\""))
        });
        if matches {
            let v: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("a numeric value: {line}"));
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

#[test]
fn metrics_expose_the_named_families() {
    let app = spawn_app();
    app.get_path("/healthz");
    // Traffic through both store queues, all of it answered before the scrape.
    let created = app.create_ok("metered", "1");
    let read = app.get(&tenant_id(&created), Some(&tenant_token(&created)));
    assert_eq!(read.status, 200, "a tenant read: {}", read.describe());
    assert_eq!(app.get_path("/readyz").status, 200, "a readiness ping");
    let resp = app.get_path("/metrics");
    assert_eq!(resp.status, 200, "GET /metrics: {}", resp.describe());
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain") && content_type.contains("version=0.0.4"),
        "the Prometheus text format: {content_type:?}"
    );
    let text = resp.text();
    let families = [
        ("tenantd_http_requests_total", "counter"),
        ("tenantd_http_request_duration_seconds", "histogram"),
        ("tenantd_store_queue_depth", "gauge"),
        ("tenantd_tenants", "gauge"),
        ("tenantd_audit_events", "gauge"),
        ("tenantd_http_connections_open", "gauge"),
    ];
    for (family, kind) in families {
        let declared: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("# TYPE {family} ")))
            .collect();
        assert_eq!(
            declared,
            [format!("# TYPE {family} {kind}")],
            "{family} is declared once, as a {kind}:\n{text}"
        );
        let samples = if kind == "histogram" {
            format!("{family}_bucket")
        } else {
            family.to_owned()
        };
        assert!(
            sample(&text, &samples, &[]).is_some(),
            "{family} has at least one sample:\n{text}"
        );
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        let name = format!("tenantd_http_request_duration_seconds{suffix}");
        assert!(
            sample(&text, &name, &[("route", "/healthz")]).is_some(),
            "{name} has a /healthz series:\n{text}"
        );
    }
    assert!(
        sample(
            &text,
            "tenantd_http_request_duration_seconds_bucket",
            &[("route", "/healthz"), ("le", "+Inf")]
        )
        .is_some_and(|v| v >= 1.0),
        "the +Inf bucket counts the /healthz request:\n{text}"
    );
    assert!(
        sample(&text, "tenantd_http_connections_open", &[]).is_some_and(|v| v >= 1.0),
        "at least this connection is open:\n{text}"
    );
    // The store's own work (a sweep, a poll of what other instances wrote) may be queued at
    // the instant of a scrape: the gauges must come back to 0 within a few scrapes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut text = text;
    loop {
        let depths: Vec<Option<f64>> = ["write", "read"]
            .iter()
            .map(|queue| sample(&text, "tenantd_store_queue_depth", &[("queue", queue)]))
            .collect();
        if depths.iter().all(|d| *d == Some(0.0)) {
            break;
        }
        assert!(
            depths.iter().all(Option::is_some) && std::time::Instant::now() < deadline,
            "tenantd_store_queue_depth has a write and a read series, back to 0 within 5 s \
             once nothing waits for the store:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        text = app.metrics();
    }
}

#[test]
fn metric_counts_follow_the_traffic() {
    let app = spawn_app();
    let requests = |text: &str, route: &str, status: &str| {
        sample(
            text,
            "tenantd_http_requests_total",
            &[("route", route), ("status", status)],
        )
        .unwrap_or(0.0)
    };
    let before = app.metrics();
    let created_before = requests(&before, "/v1/tenants", "201");
    let unmatched_before = requests(&before, "unmatched", "404");

    let ids: Vec<String> = (0..3)
        .map(|i| tenant_id(&app.create_ok(&format!("metered-{i}"), "1")))
        .collect();
    assert_eq!(app.delete(&ids[0]).status, 200, "tombstoning one");
    app.get_path("/no/such/route");
    app.get_path("/no/such/route");

    let after = app.metrics();
    assert_eq!(
        requests(&after, "/v1/tenants", "201") - created_before,
        3.0,
        "three 201s on /v1/tenants are counted:\n{after}"
    );
    assert_eq!(
        requests(&after, "unmatched", "404") - unmatched_before,
        2.0,
        "two unmatched 404s are counted:\n{after}"
    );
    assert!(
        requests(&after, "/v1/tenants/{id}", "200") >= 1.0,
        "the DELETE's 200 on /v1/tenants/{{id}} is counted:\n{after}"
    );
    let cases = [
        ("tenantd_tenants", vec![("state", "active")], 2.0),
        ("tenantd_tenants", vec![("state", "tombstoned")], 1.0),
        ("tenantd_audit_events", vec![], 4.0),
    ];
    for (name, labels, expected) in cases {
        assert_eq!(
            sample(&after, name, &labels),
            Some(expected),
            "{name}{labels:?} after three creates and one tombstone:\n{after}"
        );
    }
}

/// `/metrics` counts budgets by state, reservations by recorded state and ledger entries by
/// kind, and the counts survive a restart (they are read back from the database).
#[test]
fn metrics_count_budgets_reservations_and_entries() {
    let mut app = spawn_app();
    let s = Scene::new(&app, "counted", "100");
    let extra = s.new_budget("extra", "5");
    let committed = s.hold_id("10");
    assert_eq!(s.commit(&committed, "4").status, 200);
    let released = s.hold_id("3");
    assert_eq!(s.release(&released).status, 200);
    s.hold_id("1");
    assert_eq!(s.credit("7").status, 201);
    assert_eq!(s.debit("2").status, 201);
    assert_eq!(extra.close().status, 200);

    let want: &[(&str, &str, &str, f64)] = &[
        ("tenantd_budgets", "state", "open", 1.0),
        ("tenantd_budgets", "state", "closed", 1.0),
        ("tenantd_reservations", "state", "active", 1.0),
        ("tenantd_reservations", "state", "committed", 1.0),
        ("tenantd_reservations", "state", "released", 1.0),
        ("tenantd_reservations", "state", "expired", 0.0),
        ("tenantd_ledger_entries", "kind", "opening_deposit", 2.0),
        ("tenantd_ledger_entries", "kind", "credit", 1.0),
        ("tenantd_ledger_entries", "kind", "debit", 1.0),
        ("tenantd_ledger_entries", "kind", "reserve", 3.0),
        ("tenantd_ledger_entries", "kind", "commit", 1.0),
        ("tenantd_ledger_entries", "kind", "release", 1.0),
        ("tenantd_ledger_entries", "kind", "expire", 0.0),
    ];
    // SQLite's WAL; PostgreSQL's is the server's own, and not counted here.
    if app.backend() == Backend::Sqlite {
        let frames = sample(&app.metrics(), "tenantd_store_wal_frames_total", &[]);
        assert!(
            frames.is_some_and(|f| f >= 10.0),
            "ten committed writes wrote WAL frames: {frames:?}"
        );
    }
    for when in ["while running", "after a restart"] {
        let text = app.metrics();
        for (name, label, value, count) in want {
            assert_eq!(
                sample(&text, name, &[(label, value)]),
                Some(*count),
                "{when}: {name}{{{label}=\"{value}\"}}"
            );
        }
        app.restart();
    }
}
