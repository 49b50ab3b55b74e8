use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(
            header::HeaderName::from_bytes(name.as_bytes()).expect("a name"),
            HeaderValue::from_str(value).expect("a value"),
        );
    }
    h
}

fn console(config: &ConsoleConfig, oidc: Option<&OidcConfig>) -> Console {
    Console::new(config, oidc).expect("enabled")
}

fn enabled() -> ConsoleConfig {
    ConsoleConfig {
        enabled: true,
        ..ConsoleConfig::default()
    }
}

fn oidc() -> OidcConfig {
    OidcConfig {
        issuer: "https://idp.example:8443/realms/main".into(),
        audience: "tenantd".into(),
        admin_scope: "tenantd:admin".into(),
        permissions_claim: "tenantd_permissions".into(),
        ca_file: None,
    }
}

fn get(console: &Console, path: &str, pairs: &[(&str, &str)]) -> HttpResponse {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime
        .block_on(console.serve(&Method::GET, path, &headers(pairs)))
        .expect("served")
}

fn body(response: HttpResponse) -> Bytes {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    use http_body_util::BodyExt;
    runtime
        .block_on(response.into_body().collect())
        .expect("a full body")
        .to_bytes()
}

fn header_of(response: &HttpResponse, name: header::HeaderName) -> &str {
    response
        .headers()
        .get(name)
        .map_or("", |v| v.to_str().expect("ASCII"))
}

#[test]
fn the_embedded_files_stay_under_300_kb_and_the_page_loads_only_listed_ones() {
    let total: usize = assets::FILES.iter().map(|(_, body)| body.len()).sum();
    assert!(total < 300 * 1024, "{total} bytes");
    let names: Vec<&str> = assets::FILES.iter().map(|(name, _)| *name).collect();
    assert!(names.contains(&"index.html"), "{names:?}");
    // Every file in the directory is embedded, and every embedded file is in it.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console/assets");
    let mut on_disk = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("the assets directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(&dir).expect("under it");
                on_disk.push(name.to_str().expect("UTF-8").to_owned());
            }
        }
    }
    on_disk.sort();
    let mut embedded: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    embedded.sort();
    assert_eq!(embedded, on_disk);
}

#[test]
fn a_file_is_gzipped_with_an_etag_and_a_matching_etag_is_304() {
    let console = console(&enabled(), None);
    let plain = get(&console, "/console/", &[]);
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(
        header_of(&plain, header::CONTENT_TYPE),
        "text/html; charset=utf-8"
    );
    assert_eq!(header_of(&plain, header::CONTENT_ENCODING), "");
    let etag = header_of(&plain, header::ETAG).to_owned();
    let page = body(plain);

    let zipped = get(&console, "/console/", &[("accept-encoding", "br, gzip")]);
    assert_eq!(header_of(&zipped, header::CONTENT_ENCODING), "gzip");
    assert_eq!(header_of(&zipped, header::VARY), "Accept-Encoding");
    let zipped_etag = header_of(&zipped, header::ETAG).to_owned();
    assert_ne!(zipped_etag, etag, "each encoding has its own validator");
    let compressed = body(zipped);
    assert!(compressed.len() < page.len());
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&compressed[..]),
        &mut unzipped,
    )
    .expect("gzip");
    assert_eq!(unzipped, page);

    let again = get(&console, "/console/index.html", &[("if-none-match", &etag)]);
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header_of(&again, header::ETAG), etag);
    assert!(body(again).is_empty());
    let weak = format!("\"other\", W/{zipped_etag}");
    let again = get(
        &console,
        "/console/",
        &[("if-none-match", &weak), ("accept-encoding", "gzip")],
    );
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    let stale = get(&console, "/console/", &[("if-none-match", "\"other\"")]);
    assert_eq!(stale.status(), StatusCode::OK);
}

#[test]
fn gzip_refused_with_q_zero_is_not_sent() {
    for refusal in [
        "gzip;q=0",
        "gzip; q=0.000",
        "identity, gzip;q=0",
        "gzip;Q=0, *",
        "*, gzip; q = 0",
        "*;q=0",
    ] {
        assert!(
            !takes_gzip(&headers(&[("accept-encoding", refusal)])),
            "{refusal}"
        );
    }
    for taken in [
        "gzip",
        "GZIP;q=0.5",
        "deflate, *",
        "br;q=1.0, gzip;q=0.01",
        "*;q=0, gzip",
    ] {
        assert!(
            takes_gzip(&headers(&[("accept-encoding", taken)])),
            "{taken}"
        );
    }
    assert!(!takes_gzip(&headers(&[])));
}

#[test]
fn every_answer_carries_the_policy_and_config_names_the_provider_only_with_a_client_id() {
    let console_ = console(&enabled(), Some(&oidc()));
    let response = get(&console_, "/console/config.json", &[]);
    let csp = header_of(&response, header::CONTENT_SECURITY_POLICY).to_owned();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "connect-src 'self';",
    ] {
        assert!(
            format!("{csp};").contains(directive),
            "{directive} in {csp}"
        );
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(
        header_of(&response, header::X_CONTENT_TYPE_OPTIONS),
        "nosniff"
    );
    let config: serde_json::Value = serde_json::from_slice(&body(response)).expect("JSON");
    assert_eq!(config, serde_json::json!({ "oidc": null }));

    let with_client = ConsoleConfig {
        oidc_client_id: Some("console".into()),
        ..enabled()
    };
    let console_ = console(&with_client, Some(&oidc()));
    let response = get(&console_, "/console/config.json", &[]);
    let csp = header_of(&response, header::CONTENT_SECURITY_POLICY).to_owned();
    assert!(
        csp.ends_with("connect-src 'self' https://idp.example:8443"),
        "{csp}"
    );
    let config: serde_json::Value = serde_json::from_slice(&body(response)).expect("JSON");
    assert_eq!(
        config["oidc"]["issuer"],
        "https://idp.example:8443/realms/main"
    );
    assert_eq!(config["oidc"]["client_id"], "console");
    assert_eq!(config["oidc"]["scope"], "openid tenantd:admin");
    assert_eq!(config["oidc"]["permissions_claim"], "tenantd_permissions");
}

#[test]
fn unknown_files_other_methods_and_the_bare_prefix() {
    let console = console(&enabled(), None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let serve = |method: Method, path: &str| {
        runtime.block_on(console.serve(&method, path, &HeaderMap::new()))
    };
    assert!(matches!(
        serve(Method::GET, "/console/nope.js"),
        Err(ApiError::RouteNotFound)
    ));
    assert!(matches!(
        serve(Method::POST, "/console/"),
        Err(ApiError::MethodNotAllowed { allow: "GET, HEAD" })
    ));
    let redirect = serve(Method::GET, "/console").expect("a redirect");
    assert_eq!(redirect.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(header_of(&redirect, header::LOCATION), "/console/");
    assert!(Console::new(&ConsoleConfig::default(), None).is_none());
}

#[test]
fn a_console_dir_serves_plain_relative_names_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("pages")).expect("mkdir");
    std::fs::write(dir.path().join("pages/a.js"), "export const a = 1;\n").expect("write");
    std::fs::write(dir.path().join(".hidden"), "secret").expect("write");
    std::fs::write(dir.path().join("admin.token"), "secret").expect("write");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("elsewhere.js"), "secret").expect("write");
    std::os::unix::fs::symlink(
        outside.path().join("elsewhere.js"),
        dir.path().join("linked.js"),
    )
    .expect("symlink");
    let config = ConsoleConfig {
        dir: Some(dir.path().to_owned()),
        ..enabled()
    };
    let console = console(&config, None);
    let response = get(&console, "/console/pages/a.js", &[]);
    assert_eq!(
        header_of(&response, header::CONTENT_TYPE),
        "text/javascript; charset=utf-8"
    );
    assert_eq!(body(response), "export const a = 1;\n");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for refused in [
        "/console/.hidden",
        "/console/pages/../.hidden",
        "/console/pages//a.js",
        "/console/pages",
        "/console/%2e%2e/x",
        "/console/admin.token",
        "/console/linked.js",
    ] {
        let answer = runtime.block_on(console.serve(&Method::GET, refused, &HeaderMap::new()));
        assert!(matches!(answer, Err(ApiError::RouteNotFound)), "{refused}");
    }
}

#[test]
fn origins_of_issuer_urls() {
    assert_eq!(
        origin("https://idp.example/realms/x"),
        Some("https://idp.example")
    );
    assert_eq!(
        origin("http://127.0.0.1:4000"),
        Some("http://127.0.0.1:4000")
    );
    assert_eq!(
        origin("https://a.example:8443?x"),
        Some("https://a.example:8443")
    );
    assert_eq!(origin("idp.example"), None);
}

/// The text of an embedded file.
fn asset(name: &str) -> &'static str {
    let (_, body) = assets::FILES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} is embedded"));
    std::str::from_utf8(body).expect("UTF-8")
}

#[test]
fn the_pages_know_the_servers_event_types_and_longest_period() {
    let source = asset("event-types.js");
    let list = source
        .split_once("export const EVENT_TYPES = [")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(list, _)| list)
        .expect("event-types.js exports EVENT_TYPES");
    let names: Vec<&str> = list
        .split(',')
        .map(|item| item.trim().trim_matches('\''))
        .filter(|item| !item.is_empty())
        .collect();
    assert_eq!(names, crate::domain::EventType::NAMES);

    let line = format!(
        "export const MAX_EVERY_SECONDS = {};",
        crate::domain::EVERY_SECONDS_MAX
    );
    assert!(asset("period-form.js").contains(&line), "{line}");
}
