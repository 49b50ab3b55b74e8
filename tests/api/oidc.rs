//! Production authentication against a real OpenID Connect provider (`oidc-provider`, see
//! `helpers/oidc.rs`): access tokens by client credentials, the admin scope, per-tenant
//! permissions on every route, hostile tokens, key rotation, the provider down, the audit
//! actor, and the log.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;
use crate::wire::Response;

/// How long a test waits for tenantd to have the provider's keys.
const KEYS_TIMEOUT: Duration = Duration::from_secs(20);

/// A tenantd that takes `provider`'s tokens (and its admin token), once it has the keys.
fn app_for(provider: &IdentityProvider) -> TestApp {
    let mut builder = AppBuilder::new();
    for flag in provider.flags() {
        builder = builder.arg(&flag);
    }
    let app = builder.spawn();
    wait_ready(&app);
    app
}

/// Waits until `/readyz` says ready (the key set has been had).
fn wait_ready(app: &TestApp) {
    let deadline = Instant::now() + KEYS_TIMEOUT;
    loop {
        let status = app.get_path("/readyz").status;
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz still {status} after {KEYS_TIMEOUT:?}; log:\n{}",
            app.log_text()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn grant(tenant: &str, permission: &str) -> String {
    format!("{tenant}:{permission}")
}

/// Asserts a `401` that names `invalid_token` in `WWW-Authenticate`.
fn assert_invalid_token(resp: &Response, ctx: &str) {
    assert_eq!(resp.status, 401, "{ctx}: {}", resp.describe());
    assert_eq!(
        resp.header("www-authenticate"),
        Some(r#"Bearer realm="tenantd", error="invalid_token""#),
        "{ctx}"
    );
    assert_eq!(resp.json()["code"], "unauthorized", "{ctx}");
}

/// What a route needs: the admin (or admin scope), or a permission under the tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    Read,
    Spend,
    Manage,
    Admin,
}

/// A principal of the table: its bearer token and what it may do under the tenant.
struct Principal {
    name: &'static str,
    token: String,
    /// The most it may do under the tenant of the table (`None`: nothing).
    reach: Option<Need>,
}

/// The tenant of one principal's row, with a reservation for each settling route.
struct Fixture {
    tid: String,
    bid: String,
    holds: [String; 3],
    /// The tenant's own token.
    token: String,
}

fn fixture(app: &TestApp, name: &str) -> Fixture {
    let created = app.create_ok(name, "1000");
    let tid = tenant_id(&created);
    let bid = str_of(&created["budget"], "id").to_owned();
    let (path, admin) = (reservations_path(&tid), app.admin());
    let body = reserve_body(&bid, "1", None).to_string();
    let holds = [0, 1, 2].map(|_| {
        let resp = send(&app.addr, "POST", &path, &admin, Some(&body), None, &[]);
        str_of(&assert_status(&resp, 201, "a hold"), "id").to_owned()
    });
    let token = tenant_token(&created);
    Fixture {
        tid,
        bid,
        holds,
        token,
    }
}

/// Every route of the endpoint table under `/v1`, in an order where each destructive one
/// comes after what it would destroy; each with what it needs and its success status.
fn routes(f: &Fixture, n: usize) -> Vec<(&'static str, String, Option<Value>, Need, u16)> {
    let t = &f.tid;
    let b = &f.bid;
    let [r1, r2, r3] = &f.holds;
    vec![
        ("GET", "/v1/tenants".into(), None, Need::Admin, 200),
        (
            "POST",
            "/v1/tenants".into(),
            Some(json!({"name": format!("made-by-{n}"), "opening_deposit_atomic": "1"})),
            Need::Admin,
            201,
        ),
        ("GET", format!("/v1/tenants/{t}"), None, Need::Read, 200),
        ("GET", budgets_path(t), None, Need::Read, 200),
        ("GET", budget_path(t, b, ""), None, Need::Read, 200),
        ("GET", budget_path(t, b, "entries"), None, Need::Read, 200),
        ("GET", reservations_path(t), None, Need::Read, 200),
        ("GET", reservation_path(t, r1, ""), None, Need::Read, 200),
        (
            "POST",
            reservations_path(t),
            Some(reserve_body(b, "1", None)),
            Need::Spend,
            201,
        ),
        (
            "POST",
            reservation_path(t, r1, "extend"),
            Some(json!({"ttl_seconds": 60})),
            Need::Spend,
            200,
        ),
        (
            "POST",
            reservation_path(t, r2, "commit"),
            Some(amount_body("1")),
            Need::Spend,
            200,
        ),
        (
            "POST",
            reservation_path(t, r3, "release"),
            Some(json!({})),
            Need::Spend,
            200,
        ),
        (
            "POST",
            budgets_path(t),
            Some(json!({"name": "extra", "opening_deposit_atomic": "5"})),
            Need::Manage,
            201,
        ),
        (
            "POST",
            budget_path(t, b, "credits"),
            Some(amount_body("7")),
            Need::Manage,
            201,
        ),
        (
            "POST",
            budget_path(t, b, "debits"),
            Some(amount_body("3")),
            Need::Manage,
            201,
        ),
        ("DELETE", budget_path(t, b, ""), None, Need::Manage, 200),
        (
            "DELETE",
            format!("/v1/tenants/{t}"),
            None,
            Need::Manage,
            200,
        ),
    ]
}

/// Every principal on every route: the success status where its credential reaches, `403`
/// where it does not, and nothing changed by a `403`.
#[test]
fn every_principal_on_every_route() {
    let provider = IdentityProvider::start();
    let app = app_for(&provider);
    // The principals, each given a fresh tenant of its own (the table's destructive routes
    // run on it), and permissions on that tenant (or on another).
    type Row = (&'static str, Option<&'static str>, bool, Option<Need>);
    let rows: [Row; 9] = [
        ("admin token", None, false, Some(Need::Admin)),
        ("tenant token", None, false, Some(Need::Spend)),
        ("admin scope", None, true, Some(Need::Admin)),
        ("read", Some("read"), false, Some(Need::Read)),
        ("spend", Some("spend"), false, Some(Need::Spend)),
        ("manage", Some("manage"), false, Some(Need::Manage)),
        ("manage of another tenant", Some("other"), false, None),
        ("no permission", None, false, None),
        ("another tenant's token", None, false, None),
    ];
    let other = tenant_id(&app.create_ok("other", "1"));
    let mut table = Vec::new();
    for (n, (name, permission, admin_scope, reach)) in rows.into_iter().enumerate() {
        let f = fixture(&app, &format!("tenant-{n}"));
        let created_other = (name == "another tenant's token")
            .then(|| app.create_ok(&format!("stranger-{n}"), "1"));
        let token = match name {
            "admin token" => app.admin_token.clone(),
            "tenant token" => f.token.clone(),
            "another tenant's token" => tenant_token(created_other.as_ref().expect("made above")),
            _ => {
                let grants = match permission {
                    Some("other") => vec![grant(&other, "manage")],
                    Some(p) => vec![grant(&f.tid, p)],
                    None => vec![],
                };
                provider.identity(&grants, admin_scope).1
            }
        };
        let principal = Principal { name, token, reach };
        for (method, path, body, need, success) in routes(&f, n) {
            let events_before = app.audit_count();
            let allowed = principal.reach.is_some_and(|reach| {
                if need == Need::Admin {
                    reach == Need::Admin
                } else {
                    reach >= need
                }
            });
            let auth = bearer(&principal.token);
            let body = body.as_ref().map(Value::to_string);
            let resp = send(&app.addr, method, &path, &auth, body.as_deref(), None, &[]);
            let want = if allowed { success } else { 403 };
            let ctx = format!("{} {method} {path}", principal.name);
            assert_eq!(resp.status, want, "{ctx}: {}", resp.describe());
            if !allowed {
                assert_eq!(resp.json()["code"], "forbidden", "{ctx}");
                assert_eq!(
                    app.audit_count(),
                    events_before,
                    "{ctx}: a 403 changed something"
                );
            }
            table.push(format!(
                "{:<26} {method:<6} {:<50} {}",
                principal.name,
                route_of(&path),
                resp.status
            ));
        }
    }
    // The table as tested, for whoever reads the test's output.
    println!("{}", table.join("\n"));
}

/// A path with its ids replaced by the template's names, for the printed table.
fn route_of(path: &str) -> String {
    path.split('/')
        .map(|s| {
            if s.starts_with("ten_") {
                "{tenant}"
            } else if s.starts_with("bud_") {
                "{budget}"
            } else if s.starts_with("res_") {
                "{reservation}"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Tokens of every algorithm the contract allows are taken, each checked with its own key.
#[test]
fn every_allowed_algorithm_is_taken() {
    let provider = IdentityProvider::start();
    let app = app_for(&provider);
    for algorithm in ALGORITHMS {
        let client = provider.register(&[], algorithm);
        let token = provider.token(&client, Some(ADMIN_SCOPE));
        let header = jwt_part(&token, 0);
        assert_eq!(
            header["alg"], algorithm,
            "the provider signed with {algorithm}"
        );
        let resp = get_as(&app, &bearer(&token), "/v1/tenants");
        assert_eq!(resp.status, 200, "{algorithm}: {}", resp.describe());
    }
}

/// Part `n` (0: header, 1: claims) of a compact JWS, decoded.
fn jwt_part(token: &str, n: usize) -> Value {
    let part = token.split('.').nth(n).expect("a JWT part");
    let bytes = base64url_decode(part);
    serde_json::from_slice(&bytes).expect("a JSON part")
}

fn base64url_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'-' => 62,
            b'_' => 63,
            _ => panic!("not base64url: {c}"),
        }
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | (value(*c) << (18 - 6 * i)));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// Every hostile token of the contract's list is a `401 invalid_token`, and a good token
/// made the same way is taken (so each refusal is the check's, not the harness's).
#[test]
fn hostile_tokens_are_refused() {
    let provider = IdentityProvider::start();
    let app = app_for(&provider);
    let kids = provider.kids();
    let rs = kids["RS256"].as_str().expect("an RS256 kid").to_owned();
    let es = kids["ES256"].as_str().expect("an ES256 kid").to_owned();
    let issuer = provider.issuer();
    let good = claims_now(&issuer, "forger");
    let header = json!({"alg": "RS256", "kid": rs, "typ": "at+jwt"});
    let with = |name: &str, value: Value| {
        let mut claims = good.clone();
        claims[name] = value;
        claims
    };
    let now = unix_now();
    let signed = provider.forge("signed", header.clone(), good.clone());
    assert_eq!(
        get_as(&app, &bearer(&signed), "/v1/tenants").status,
        200,
        "a well-made token signed by the provider's key is taken"
    );
    let cases: Vec<(&str, String)> = vec![
        (
            "alg none",
            provider.forge("none", header.clone(), good.clone()),
        ),
        (
            "HS256 with the public key",
            provider.forge("hmac", header.clone(), good.clone()),
        ),
        (
            "expired",
            provider.forge("signed", header.clone(), with("exp", json!(now - 120))),
        ),
        (
            "not yet valid",
            provider.forge("signed", header.clone(), with("nbf", json!(now + 600))),
        ),
        (
            "issued in the future",
            provider.forge("signed", header.clone(), with("iat", json!(now + 600))),
        ),
        (
            "another issuer",
            provider.forge(
                "signed",
                header.clone(),
                with("iss", json!("http://127.0.0.1:1")),
            ),
        ),
        (
            "another audience",
            provider.forge("signed", header.clone(), with("aud", json!("someone-else"))),
        ),
        ("no expiry", {
            let mut claims = good.clone();
            claims.as_object_mut().expect("an object").remove("exp");
            provider.forge("signed", header.clone(), claims)
        }),
        ("no sub", {
            let mut claims = good.clone();
            claims.as_object_mut().expect("an object").remove("sub");
            provider.forge("signed", header.clone(), claims)
        }),
        (
            "a tampered payload",
            provider.forge_with(json!({
                "mode": "tampered",
                "header": header,
                "claims": with("scope", json!("")),
                "tampered_claims": good,
            })),
        ),
        (
            "an unknown kid",
            provider.forge(
                "signed",
                json!({"alg": "RS256", "kid": "no-such-key"}),
                good.clone(),
            ),
        ),
        (
            "no kid",
            provider.forge("attacker", json!({"alg": "RS256"}), good.clone()),
        ),
        (
            "an attacker's key under the provider's kid",
            provider.forge("attacker", header.clone(), good.clone()),
        ),
        (
            "another key's algorithm (RS256 key, PS256 header)",
            provider.forge("signed", json!({"alg": "PS256", "kid": rs}), good.clone()),
        ),
        (
            "an attacker's ES256 key under the provider's ES256 kid",
            provider.forge("attacker", json!({"alg": "ES256", "kid": es}), good.clone()),
        ),
        ("not a JWT at all", "a.b.c".to_owned()),
    ];
    for (what, token) in &cases {
        let resp = get_as(&app, &bearer(token), "/v1/tenants");
        assert_invalid_token(&resp, what);
        let detail = resp.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            !detail.contains("forger"),
            "{what}: a claim value in the detail {detail:?}"
        );
    }
    assert_eq!(app.audit_count(), 0, "no hostile token changed anything");
}

/// A token within the 60 s leeway is taken (expired 30 s ago, valid from 30 s on); one 90 s
/// out is refused.
#[test]
fn the_leeway_is_60_seconds() {
    let provider = IdentityProvider::start();
    let app = app_for(&provider);
    let kid = provider.kids()["ES256"].as_str().expect("a kid").to_owned();
    let header = json!({"alg": "ES256", "kid": kid});
    let now = unix_now();
    let mut claims = claims_now(&provider.issuer(), "skewed");
    claims["exp"] = json!(now - 30);
    claims["nbf"] = json!(now + 30);
    claims["iat"] = json!(now + 30);
    let token = provider.forge("signed", header.clone(), claims.clone());
    let resp = get_as(&app, &bearer(&token), "/v1/tenants");
    assert_eq!(resp.status, 200, "{}", resp.describe());
    // Past the leeway (by 30 s, more than a slow test takes), each is refused.
    for (claim, value) in [("exp", now - 90), ("nbf", now + 90), ("iat", now + 90)] {
        let mut past = claims.clone();
        past[claim] = json!(value);
        let token = provider.forge("signed", header.clone(), past);
        let resp = get_as(&app, &bearer(&token), "/v1/tenants");
        assert_invalid_token(&resp, &format!("{claim} {value} (now {now})"));
    }
}

/// A key rotation at the provider is picked up without a restart: an unknown kid fetches the
/// key set again. Made-up kids fetch it at most once per 30 s.
#[test]
fn key_rotation_is_picked_up_and_refetches_are_rate_limited() {
    let provider = IdentityProvider::start();
    let app = app_for(&provider);
    let (client, before) = provider.identity(&[], true);
    assert_eq!(get_as(&app, &bearer(&before), "/v1/tenants").status, 200);
    provider.rotate();
    let after = provider.token(&client, Some(ADMIN_SCOPE));
    assert_ne!(
        jwt_part(&after, 0)["kid"],
        jwt_part(&before, 0)["kid"],
        "the kid changed"
    );
    let fetches = provider.jwks_fetches();
    let resp = get_as(&app, &bearer(&after), "/v1/tenants");
    assert_eq!(
        resp.status,
        200,
        "the new key is fetched: {}",
        resp.describe()
    );
    assert_eq!(
        provider.jwks_fetches(),
        fetches + 1,
        "one fetch for the new kid"
    );
    // Within 30 s of that fetch, made-up kids fetch nothing more and are refused.
    let claims = claims_now(&provider.issuer(), "prober");
    for n in 0..5 {
        let token = provider.forge(
            "attacker",
            json!({"alg": "RS256", "kid": format!("made-up-{n}")}),
            claims.clone(),
        );
        assert_invalid_token(
            &get_as(&app, &bearer(&token), "/v1/tenants"),
            "a made-up kid",
        );
    }
    assert_eq!(
        provider.jwks_fetches(),
        fetches + 1,
        "no fetch within 30 s of the last"
    );
    // A key the provider withdrew keeps working only while cached: the old token is still
    // signed by a key tenantd no longer holds after the refetch.
    assert_invalid_token(
        &get_as(&app, &bearer(&before), "/v1/tenants"),
        "a token of a withdrawn key",
    );
}

/// The provider down when tenantd starts: access tokens get `503` and `/readyz` is not ready;
/// once it is up, both recover without a restart. Other credentials work meanwhile.
#[test]
fn the_provider_down_at_start_then_up() {
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let app = AppBuilder::new()
        .arg("--oidc-issuer")
        .arg(&issuer)
        .arg("--oidc-audience")
        .arg(AUDIENCE)
        .spawn();
    // A token shaped like the provider's, which tenantd cannot check yet.
    let early = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    let resp = get_as(&app, &bearer(early), "/v1/tenants");
    assert_eq!(resp.status, 503, "{}", resp.describe());
    assert_eq!(resp.json()["code"], "unavailable");
    assert!(resp.header("retry-after").is_some(), "Retry-After");
    assert_eq!(
        app.get_path("/readyz").status,
        503,
        "not ready without the keys"
    );
    assert_eq!(
        get_as(&app, &app.admin(), "/v1/tenants").status,
        200,
        "the admin token works"
    );
    let provider = IdentityProvider::start_on(port);
    wait_ready(&app);
    let (_, token) = provider.identity(&[], true);
    let resp = get_as(&app, &bearer(&token), "/v1/tenants");
    assert_eq!(resp.status, 200, "{}", resp.describe());
    // Down again: the key set once had keeps serving.
    drop(provider);
    assert_eq!(get_as(&app, &bearer(&token), "/v1/tenants").status, 200);
    assert_eq!(
        app.get_path("/readyz").status,
        200,
        "ready on the cached keys"
    );
}

/// A provider served over HTTPS with a private authority's certificate: trusted once
/// `--oidc-ca-file` names that authority; with the Mozilla roots, or another authority's
/// file, its keys are never had (tokens `503`, not ready, the reason in the log).
#[test]
fn a_private_authority_is_trusted_through_the_ca_file() {
    let dir = tempfile::TempDir::new().expect("a temporary directory");
    let authority = Authority::new(dir.path(), "provider");
    let (cert, key) = authority.server_certificate(dir.path());
    let provider = IdentityProvider::start_tls(&cert, &key);
    assert!(
        provider.issuer().starts_with("https://"),
        "{}",
        provider.issuer()
    );
    let (_, token) = provider.identity(&[], true);
    let spawn = |ca_file: Option<&std::path::Path>| {
        let mut builder = AppBuilder::new();
        for flag in provider.flags() {
            builder = builder.arg(&flag);
        }
        if let Some(file) = ca_file {
            builder = builder
                .arg("--oidc-ca-file")
                .arg(file.to_str().expect("a UTF-8 path"));
        }
        builder.spawn()
    };

    let trusting = spawn(Some(&authority.cert));
    wait_ready(&trusting);
    let body = json!({"name": "over-tls", "opening_deposit_atomic": "5"}).to_string();
    let (addr, auth) = (&trusting.addr, bearer(&token));
    let resp = send(addr, "POST", "/v1/tenants", &auth, Some(&body), None, &[]);
    assert_eq!(resp.status, 201, "{}", resp.describe());

    let other = Authority::new(dir.path(), "other");
    for (what, ca_file) in [
        ("the Mozilla roots", None),
        ("another authority", Some(other.cert.as_path())),
    ] {
        let app = spawn(ca_file);
        let failed = app.wait_for_log(KEYS_TIMEOUT, |line| {
            line.contains("cannot fetch the identity provider's keys")
        });
        let failed = failed
            .unwrap_or_else(|| panic!("{what}: no failed fetch logged; log:\n{}", app.log_text()));
        assert!(
            failed.contains("invalid peer certificate: UnknownIssuer"),
            "{what}: the reason, as docs/authentication.md's table gives it: {failed}"
        );
        assert_eq!(app.get_path("/readyz").status, 503, "{what}: not ready");
        let resp = get_as(&app, &bearer(&token), "/v1/tenants");
        assert_eq!(resp.status, 503, "{what}: {}", resp.describe());
    }
}

/// With OIDC configured the admin token is optional; tenant tokens keep working, and the
/// audit chain names each identity by its `sub`. Keys of two identities never meet.
#[test]
fn identities_act_under_their_sub_without_an_admin_token() {
    let provider = IdentityProvider::start();
    let mut builder = AppBuilder::new().without_admin_token();
    for flag in provider.flags() {
        builder = builder.arg(&flag);
    }
    let app = builder.spawn();
    wait_ready(&app);
    assert_eq!(
        get_as(&app, &app.admin(), "/v1/tenants").status,
        401,
        "no admin token was configured"
    );
    let (admin, admin_token) = provider.identity(&[], true);
    let body = json!({"name": "by-oidc", "opening_deposit_atomic": "10"}).to_string();
    let (addr, auth, key) = (&app.addr, bearer(&admin_token), Some("one-key"));
    let created = send(addr, "POST", "/v1/tenants", &auth, Some(&body), key, &[]);
    let created = assert_created(&created, "/v1/tenants", "create as an identity");
    let tid = tenant_id(&created);
    let bid = str_of(&created["budget"], "id").to_owned();
    // The tenant token works without any admin token configured.
    let own = tenant_token(&created);
    assert_eq!(app.get(&tid, Some(&own)).status, 200);
    // A spender of that tenant reserves; the same key as the admin identity's is its own.
    let (spender, spend_token) = provider.identity(&[grant(&tid, "spend")], false);
    let reserve = reserve_body(&bid, "4", None).to_string();
    let (path, as_spender) = (reservations_path(&tid), bearer(&spend_token));
    let held = send(addr, "POST", &path, &as_spender, Some(&reserve), key, &[]);
    assert_eq!(
        held.status,
        201,
        "the spender's key is not the admin identity's: {}",
        held.describe()
    );
    let replay = send(addr, "POST", "/v1/tenants", &auth, Some(&body), key, &[]);
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let actors: Vec<String> = app.audit_rows().into_iter().map(|r| r.actor).collect();
    assert_eq!(
        actors,
        vec![format!("oidc:{}", admin.id), format!("oidc:{}", spender.id)],
        "the audit actors"
    );
    let verified = app.audit_verify();
    assert_eq!(
        verified.code,
        Some(0),
        "the chain verifies: {}",
        verified.stderr
    );
}

/// No access token, no claim value but `sub`, no client secret and no key material reaches
/// the log, even at the most verbose level, whatever the token's fate.
#[test]
fn no_token_or_claim_reaches_the_log() {
    let provider = IdentityProvider::start();
    let mut builder = AppBuilder::new().env("RUST_LOG", "trace");
    for flag in provider.flags() {
        builder = builder.arg(&flag);
    }
    let app = builder.spawn();
    wait_ready(&app);
    let tid = tenant_id(&app.create_ok("logged", "5"));
    let permission = grant(&tid, "manage");
    let (client, token) = provider.identity(std::slice::from_ref(&permission), false);
    assert_eq!(app.get(&tid, Some(&token)).status, 200);
    let (_, admin) = provider.identity(&[], true);
    assert_eq!(get_as(&app, &bearer(&admin), "/v1/tenants").status, 200);
    let expired = {
        let kid = provider.kids()["RS256"].as_str().expect("a kid").to_owned();
        let mut claims = claims_now(&provider.issuer(), "expired-sub");
        claims["exp"] = json!(unix_now() - 600);
        claims["tenantd_permissions"] = json!([permission]);
        provider.forge("signed", json!({"alg": "RS256", "kid": kid}), claims)
    };
    assert_invalid_token(&get_as(&app, &bearer(&expired), "/v1/tenants"), "expired");
    let log = app.log_text();
    let secrets = [
        ("the access token", token.as_str()),
        (
            "its signature",
            token.rsplit('.').next().expect("a signature"),
        ),
        ("its claims", token.split('.').nth(1).expect("claims")),
        ("the admin identity's token", admin.as_str()),
        ("the expired token", expired.as_str()),
        ("the permission", permission.as_str()),
        ("the client secret", client.secret.as_str()),
        ("the admin scope", ADMIN_SCOPE),
    ];
    for (what, secret) in secrets {
        assert!(!log.contains(secret), "{what} is in the log:\n{log}");
    }
}

/// Start-up refuses, with exit code 2 and a message naming the problem, an issuer without an
/// audience (and the reverse), and a plain-`http://` issuer off loopback, also through the
/// environment.
#[test]
fn start_up_refuses_an_unusable_identity_provider_setting() {
    let dir = tempfile::TempDir::new().expect("a temporary directory");
    let db = dir.path().join("refused.db");
    let db = db.to_str().expect("a UTF-8 path");
    let base = ["serve", "--listen", "127.0.0.1:0", "--db", db];
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("writing not.pem");
    let not_pem = not_pem.to_str().expect("a UTF-8 path");
    let authority = Authority::new(dir.path(), "start-up");
    let ca = authority.cert.to_str().expect("a UTF-8 path");
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "an issuer without an audience",
            vec!["--oidc-issuer", "https://id.example.com"],
            vec![],
            "--oidc-audience",
        ),
        (
            "an audience without an issuer",
            vec!["--oidc-audience", "tenantd"],
            vec![],
            "--oidc-issuer",
        ),
        (
            "a plain-http issuer off loopback",
            vec![
                "--oidc-issuer",
                "http://id.example.com",
                "--oidc-audience",
                "tenantd",
            ],
            vec![],
            "https:// unless its host is a loopback address",
        ),
        (
            "the same through the environment",
            vec![],
            vec![
                ("TENANTD_OIDC_ISSUER", "http://10.1.2.3/realms/x"),
                ("TENANTD_OIDC_AUDIENCE", "tenantd"),
            ],
            "https:// unless its host is a loopback address",
        ),
        (
            "an authorities' file without a certificate",
            vec![
                "--oidc-issuer",
                "https://id.example.com",
                "--oidc-audience",
                "tenantd",
                "--oidc-ca-file",
                not_pem,
            ],
            vec![],
            "no certificate in it",
        ),
        (
            "an authorities' file that is not there",
            vec![],
            vec![
                ("TENANTD_OIDC_ISSUER", "https://id.example.com"),
                ("TENANTD_OIDC_AUDIENCE", "tenantd"),
                ("TENANTD_OIDC_CA_FILE", "/nonexistent/ca.pem"),
            ],
            "/nonexistent/ca.pem",
        ),
        (
            "an authorities' file for a plain-http issuer",
            vec![
                "--oidc-issuer",
                "http://127.0.0.1:9",
                "--oidc-audience",
                "tenantd",
                "--oidc-ca-file",
                ca,
            ],
            vec![],
            "--oidc-ca-file is for an https:// issuer",
        ),
        (
            "no admin token and no identity provider",
            vec![],
            vec![],
            "no admin token",
        ),
    ];
    for (what, extra, envs, says) in cases {
        let mut args = base.to_vec();
        args.extend(extra);
        let out = run_cli_in(dir.path(), &args, &envs, Duration::from_secs(15));
        assert_eq!(out.code, Some(2), "{what}: exit code 2: {out:?}");
        assert!(
            out.stderr.contains(says),
            "{what}: {:?} lacks {says:?}",
            out.stderr
        );
    }
}
