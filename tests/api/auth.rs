//! Authentication and the tenant token's scope.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;
use crate::wire::{Response, request};

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let app = spawn_app();
    let id = tenant_id(&app.create_ok("schemes", "1"));
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {}", app.admin_token);
        let resp = app.request(
            "GET",
            &format!("/v1/tenants/{id}"),
            &[("Authorization", auth.as_str())],
            None,
        );
        assert_eq!(resp.status, 200, "scheme {scheme:?}: {}", resp.describe());
    }
}

#[test]
fn missing_malformed_or_unknown_credentials_are_401() {
    let app = spawn_app();
    let created = app.create_ok("creds", "1");
    let id = tenant_id(&created);
    let admin = app.admin_token.clone();
    let path = format!("/v1/tenants/{id}");
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("no Authorization header", vec![]),
        ("the scheme alone", vec!["Bearer".to_owned()]),
        ("an empty token", vec!["Bearer ".to_owned()]),
        ("another scheme", vec![format!("Basic {admin}")]),
        ("no scheme", vec![admin.clone()]),
        ("an unknown token", vec![bearer(&random_hex(32))]),
        (
            "an unknown tenant-style token",
            vec![bearer(&format!("tkn_{}", random_hex(32)))],
        ),
        (
            "the admin token with one more character",
            vec![bearer(&format!("{admin}x"))],
        ),
        (
            "the admin token one character short",
            vec![bearer(&admin[..admin.len() - 1])],
        ),
        (
            "the admin token upper-cased",
            vec![bearer(&admin.to_ascii_uppercase())],
        ),
        (
            "the admin token with a second word",
            vec![format!("Bearer {admin} extra")],
        ),
        (
            "two Authorization headers",
            vec![bearer(&admin), bearer(&admin)],
        ),
    ];
    for (msg, values) in cases {
        let headers: Vec<(&str, &str)> = values
            .iter()
            .map(|v| ("Authorization", v.as_str()))
            .collect();
        let get = app.request("GET", &path, &headers, None);
        assert_problem(&get, 401, "unauthorized", &format!("GET with {msg}"));
        let post = app.request(
            "POST",
            "/v1/tenants",
            &[headers.clone(), vec![("Content-Type", "application/json")]].concat(),
            Some(tenant_body(&unique("never"), "1").as_bytes()),
        );
        assert_problem(&post, 401, "unauthorized", &format!("POST with {msg}"));
        let delete = app.request("DELETE", &path, &headers, None);
        assert_problem(&delete, 401, "unauthorized", &format!("DELETE with {msg}"));
    }
    assert_eq!(
        app.tenant_count(),
        1,
        "no unauthenticated request created a tenant"
    );
    assert_eq!(
        app.get_admin(&id).json()["state"],
        "active",
        "no unauthenticated DELETE tombstoned anything"
    );
}

#[test]
fn a_tenant_token_reads_only_its_own_tenant() {
    let app = spawn_app();
    let a = app.create_ok("scope-a", "10");
    let b = app.create_ok("scope-b", "20");
    let (a_id, b_id) = (tenant_id(&a), tenant_id(&b));
    let a_token = tenant_token(&a);

    let own = app.get(&a_id, Some(&a_token));
    assert_eq!(own.status, 200, "a tenant reads itself: {}", own.describe());
    assert_eq!(
        own.body,
        app.get_admin(&a_id).body,
        "the tenant sees the same overview as the admin"
    );
    assert_eq!(own.json()["name"], "scope-a", "it is its own overview");

    let auth = bearer(&a_token);
    let body = tenant_body("scope-c", "1");
    let json_headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let cases: Vec<(&str, &str, String, Option<&[u8]>)> = vec![
        (
            "another tenant's id",
            "GET",
            format!("/v1/tenants/{b_id}"),
            None,
        ),
        (
            "an unknown well-formed id",
            "GET",
            "/v1/tenants/ten_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned(),
            None,
        ),
        ("a malformed id", "GET", "/v1/tenants/nope".to_owned(), None),
        (
            "a create",
            "POST",
            "/v1/tenants".to_owned(),
            Some(body.as_bytes()),
        ),
        (
            "a DELETE of itself",
            "DELETE",
            format!("/v1/tenants/{a_id}"),
            None,
        ),
        (
            "a DELETE of another",
            "DELETE",
            format!("/v1/tenants/{b_id}"),
            None,
        ),
        ("an unknown /v1 route", "GET", "/v1/nope".to_owned(), None),
        ("the collection", "GET", "/v1/tenants".to_owned(), None),
        (
            "another method on itself",
            "PUT",
            format!("/v1/tenants/{a_id}"),
            None,
        ),
    ];
    for (msg, method, path, body) in cases {
        let resp = app.request(method, &path, &json_headers, body);
        assert_problem(
            &resp,
            403,
            "forbidden",
            &format!("tenant token on {msg}: {method} {path}"),
        );
    }
    assert_eq!(app.tenant_count(), 2, "the tenant token created nothing");
    assert_eq!(
        app.get_admin(&a_id).json()["state"],
        "active",
        "the tenant token tombstoned nothing"
    );
    assert_eq!(
        app.get_admin(&b_id).json()["state"],
        "active",
        "the tenant token tombstoned nothing"
    );
}

#[test]
fn a_tombstoned_tenants_token_is_revoked() {
    let app = spawn_app();
    let a = app.create_ok("revoked-a", "1");
    let b = app.create_ok("revoked-b", "1");
    let (a_id, b_id) = (tenant_id(&a), tenant_id(&b));
    assert_eq!(
        app.get(&a_id, Some(&tenant_token(&a))).status,
        200,
        "token works before"
    );

    assert_eq!(app.delete(&a_id).status, 200, "tombstoning a");
    let after = app.get(&a_id, Some(&tenant_token(&a)));
    assert_problem(
        &after,
        401,
        "unauthorized",
        "the tombstoned tenant's own read",
    );
    let elsewhere = app.get(&b_id, Some(&tenant_token(&a)));
    assert_problem(
        &elsewhere,
        401,
        "unauthorized",
        "the revoked token on another tenant",
    );

    let b_read = app.get(&b_id, Some(&tenant_token(&b)));
    assert_eq!(
        b_read.status,
        200,
        "another tenant's token still works: {}",
        b_read.describe()
    );
}

#[test]
fn the_admin_token_reads_everything() {
    let app = spawn_app();
    let a = tenant_id(&app.create_ok("admin-a", "1"));
    let b = tenant_id(&app.create_ok("admin-b", "2"));
    assert_eq!(app.delete(&b).status, 200, "tombstoning b");
    for (msg, id, state) in [
        ("active a", &a, "active"),
        ("tombstoned b", &b, "tombstoned"),
    ] {
        let resp = app.get_admin(id);
        assert_eq!(resp.status, 200, "admin reads {msg}: {}", resp.describe());
        assert_eq!(resp.json()["state"], state, "admin sees {msg}'s state");
    }
}

#[test]
fn paths_outside_v1_and_the_openapi_document_need_no_token() {
    let app = spawn_app();
    for path in ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"] {
        let resp = app.get_path(path);
        assert_eq!(
            resp.status,
            200,
            "GET {path} without a token: {}",
            resp.describe()
        );
    }
}

/// A tenant token names its tenant; naming a real tenant proves nothing without the secret.
#[test]
fn a_forged_token_naming_a_real_tenant_is_401() {
    let app = spawn_app();
    let victim = app.create_ok("forged-victim", "1");
    let other = app.create_ok("forged-other", "1");
    let (victim_id, other_id) = (tenant_id(&victim), tenant_id(&other));
    let real = tenant_token(&victim);
    let ulid = victim_id.strip_prefix("ten_").expect("a ten_ id");
    let forged_secret = format!("tkn_{ulid}_{}", random_hex(32));
    let (prefix, last) = real.split_at(real.len() - 1);
    let flipped = format!("{prefix}{}", if last == "0" { "1" } else { "0" });
    let other_ulid = other_id.strip_prefix("ten_").expect("a ten_ id");
    let moved = real.replacen(ulid, other_ulid, 1);
    for (what, token, target) in [
        (
            "a random secret for a real tenant",
            &forged_secret,
            &victim_id,
        ),
        (
            "the real token with its last digit changed",
            &flipped,
            &victim_id,
        ),
        (
            "the real secret under another tenant's id",
            &moved,
            &other_id,
        ),
    ] {
        let response = app.get(target, Some(token));
        assert_problem(&response, 401, "unauthorized", what);
    }
    assert_eq!(
        app.get(&victim_id, Some(&real)).status,
        200,
        "the real token still reads its tenant"
    );
}

/// Requests each flooding thread sends at most.
const FLOOD_REQUESTS_PER_THREAD: usize = 100;

/// How long the flood may last at most, well under what a test may take.
const FLOOD_DURATION_MAX: Duration = Duration::from_secs(15);

/// Who a flooding thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flooder {
    /// The admin token: reads that fill the tiny store queue.
    Admin,
    /// The tenant's own token.
    Genuine,
    /// A token of the right shape for the tenant's ULID, with a random secret.
    ForgedForTenant,
    /// A token of the right shape for a random ULID.
    ForgedForStranger,
}

/// A forged token is refused by what it is, whatever the store's load: `401`, never `503`.
/// Meanwhile the admin and the genuine token may be turned away by the full queue (`503`),
/// and the genuine token is never taken for a forged one (`401`).
#[test]
fn forged_tenant_tokens_are_401_even_while_the_store_queue_is_full() {
    let app = AppBuilder::new()
        .arg("--store-queue-depth")
        .arg("1")
        .arg("--readers")
        .arg("1")
        .spawn();
    // The queue of one may still hold the start-up work (the idempotency purge, queued
    // behind the writer's first expiry sweep): this setup write is retried on its `503`, as
    // a client is told to; the flood below is what is tested.
    let name = unique("flooded");
    let setup_deadline = Instant::now() + Duration::from_secs(5);
    let created = loop {
        let resp = app.create(&name, "1");
        if resp.status != 503 || Instant::now() >= setup_deadline {
            assert_eq!(resp.status, 201, "creating {name:?}: {}", resp.describe());
            break resp.json();
        }
        thread::sleep(Duration::from_millis(20));
    };
    let id = tenant_id(&created);
    let ulid = id.strip_prefix("ten_").expect("a ten_ id").to_owned();
    let path = format!("/v1/tenants/{id}");
    let threads = [
        Flooder::Admin,
        Flooder::Admin,
        Flooder::Admin,
        Flooder::Admin,
        Flooder::Genuine,
        Flooder::ForgedForTenant,
        Flooder::ForgedForTenant,
        Flooder::ForgedForStranger,
    ];
    let deadline = Instant::now() + FLOOD_DURATION_MAX;
    let handles: Vec<_> = threads
        .iter()
        .map(|&who| {
            let addr = app.addr.clone();
            let path = path.clone();
            let admin = app.admin();
            let genuine = bearer(&tenant_token(&created));
            let ulid = ulid.clone();
            thread::spawn(move || {
                let mut answers = Vec::with_capacity(FLOOD_REQUESTS_PER_THREAD);
                for _ in 0..FLOOD_REQUESTS_PER_THREAD {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let auth = match who {
                        Flooder::Admin => admin.clone(),
                        Flooder::Genuine => genuine.clone(),
                        Flooder::ForgedForTenant => {
                            bearer(&format!("tkn_{ulid}_{}", random_hex(32)))
                        }
                        Flooder::ForgedForStranger => {
                            bearer(&format!("tkn_{}_{}", random_ulid(), random_hex(32)))
                        }
                    };
                    let resp = request(&addr, "GET", &path, &[("Authorization", &auth)], None);
                    answers.push((who, resp));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<(Flooder, Response)> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("a flooding thread"))
        .collect();

    let tally = |of: &[Flooder]| -> String {
        let mut counts: Vec<(u16, usize)> = Vec::new();
        for (_, resp) in answers.iter().filter(|(who, _)| of.contains(who)) {
            match counts.iter_mut().find(|(status, _)| *status == resp.status) {
                Some((_, n)) => *n += 1,
                None => counts.push((resp.status, 1)),
            }
        }
        counts.sort();
        let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n}×{s}")).collect();
        counts.join(", ")
    };
    let forged = [Flooder::ForgedForTenant, Flooder::ForgedForStranger];
    let summary = format!(
        "admin: {}; genuine: {}; forged: {}",
        tally(&[Flooder::Admin]),
        tally(&[Flooder::Genuine]),
        tally(&forged)
    );
    assert!(
        answers
            .iter()
            .filter(|(who, _)| forged.contains(who))
            .all(|(_, resp)| resp.status == 401),
        "every forged token gets 401, never 503, however full the queue ({summary})"
    );
    for (who, resp) in &answers {
        let ctx = format!("{who:?} token during the flood ({summary})");
        match who {
            Flooder::ForgedForTenant | Flooder::ForgedForStranger => {
                assert_problem(resp, 401, "unauthorized", &ctx);
            }
            Flooder::Admin | Flooder::Genuine if resp.status == 503 => {
                assert_problem(resp, 503, "unavailable", &ctx);
            }
            Flooder::Admin | Flooder::Genuine => {
                assert_eq!(resp.status, 200, "{ctx}: {}", resp.describe());
            }
        }
    }
    println!("forged tokens under a full store queue: {summary}");
}

/// The spends a tenant token may make (a charge, a reservation, a commit, a release, an
/// extend) refuse a token that is not the tenant's with `401` before anything else: before a
/// body that is not valid, a path of another tenant, a reservation's state, or a key the real
/// token used. Nothing moves, and the real token goes on working. (On PostgreSQL such a
/// token is checked by the write itself, in its batch: this holds there as it does where it
/// is checked first.)
#[test]
fn a_spend_with_a_token_not_the_tenants_is_401_before_anything_else() {
    let app = spawn_app();
    let victim = Scene::new(&app, &unique("spend-victim"), "100");
    let other = Scene::new(&app, &unique("spend-other"), "100");
    let ulid = victim.tid.strip_prefix("ten_").expect("a ten_ id");
    let forged = bearer(&format!("tkn_{ulid}_{}", random_hex(32)));
    // A hold and a keyed charge of the real token, which a forged request might reach.
    let rid = victim.hold_id("10");
    let charges = format!("/v1/tenants/{}/charges", victim.tid);
    let charge = json!({ "budget_id": victim.bid, "amount_atomic": "1" }).to_string();
    let key = unique("spend-key");
    let send_charge = |auth: &str, key: Option<&str>| {
        send(&app.addr, "POST", &charges, auth, Some(&charge), key, &[])
    };
    let first = send_charge(&victim.token, Some(&key));
    assert_eq!(
        first.status,
        201,
        "the real token's keyed charge: {}",
        first.describe()
    );
    let (before, other_before) = (victim.figures(), other.figures());

    let elsewhere = json!({ "budget_id": other.bid, "amount_atomic": "1" }).to_string();
    let reserve = reserve_body(&victim.bid, "5", None).to_string();
    let commit = amount_body("5").to_string();
    let cases: Vec<(&str, String, Option<String>)> = vec![
        ("a charge", charges.clone(), Some(charge.clone())),
        (
            "a charge whose body is not JSON",
            charges.clone(),
            Some("{".into()),
        ),
        (
            "a charge of no amount",
            charges.clone(),
            Some(json!({ "budget_id": victim.bid, "amount_atomic": "0" }).to_string()),
        ),
        (
            "a charge on another tenant's path",
            format!("/v1/tenants/{}/charges", other.tid),
            Some(elsewhere.clone()),
        ),
        (
            "a reservation",
            reservations_path(&victim.tid),
            Some(reserve),
        ),
        (
            "a commit",
            victim.rpath(&rid, "commit"),
            Some(commit.clone()),
        ),
        ("a release", victim.rpath(&rid, "release"), None),
        (
            "an extend",
            victim.rpath(&rid, "extend"),
            Some(json!({ "ttl_seconds": 60 }).to_string()),
        ),
        (
            "a commit of no such reservation",
            victim.rpath("res_01J0000000000000000000000", "commit"),
            Some(commit),
        ),
    ];
    for (what, path, body) in &cases {
        let resp = send(&app.addr, "POST", path, &forged, body.as_deref(), None, &[]);
        assert_problem(&resp, 401, "unauthorized", what);
    }
    let replayed = send_charge(&forged, Some(&key));
    assert_problem(
        &replayed,
        401,
        "unauthorized",
        "a charge with the key the real token used",
    );
    assert_eq!(victim.figures(), before, "no forged spend moved the budget");
    assert_eq!(other.figures(), other_before, "nor another tenant's");
    assert_eq!(
        victim.state(&rid),
        "active",
        "no forged request settled the hold"
    );

    // The real token: another tenant's path is forbidden, its own spends go through, and
    // once its tenant is tombstoned it is refused like a forged one.
    let path = format!("/v1/tenants/{}/charges", other.tid);
    let forbidden = send(
        &app.addr,
        "POST",
        &path,
        &victim.token,
        Some(&elsewhere),
        None,
        &[],
    );
    assert_problem(
        &forbidden,
        403,
        "forbidden",
        "the real token on another tenant",
    );
    let committed = victim.commit(&rid, "5");
    assert_eq!(
        committed.status,
        200,
        "the real token commits: {}",
        committed.describe()
    );
    assert_eq!(send_charge(&victim.token, None).status, 201, "and charges");
    assert_eq!(
        app.delete(&victim.tid).status,
        200,
        "the tenant is tombstoned"
    );
    let revoked = send_charge(&victim.token, None);
    assert_problem(
        &revoked,
        401,
        "unauthorized",
        "a charge of the tombstoned tenant's token",
    );
}
