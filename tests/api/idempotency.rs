//! `Idempotency-Key`: replays, mismatches, failures that bind nothing, malformed keys and
//! expiry.

use std::thread;
use std::time::{Duration, Instant};

use crate::helpers::*;

#[test]
fn a_retry_with_the_same_key_and_body_replays_the_first_response() {
    let app = spawn_app();
    let key = "replay-key-1";
    let first = app.create_with_key("replayed", "100", key);
    assert_eq!(first.status, 201, "first create: {}", first.describe());
    assert_eq!(
        first.header("idempotent-replayed"),
        None,
        "the first response is not marked as a replay"
    );
    let (tenants, events) = (app.tenant_count(), app.audit_count());

    let second = app.create_with_key("replayed", "100", key);
    assert_eq!(
        second.status,
        201,
        "the replay has the same status: {}",
        second.describe()
    );
    assert_eq!(
        second.header("idempotent-replayed"),
        Some("true"),
        "the replay says Idempotent-Replayed: true"
    );
    assert_eq!(
        second.body, first.body,
        "the replay body is byte for byte the first, sidecar token included"
    );
    assert_eq!(
        second.header("location"),
        first.header("location"),
        "the replay carries the same Location"
    );
    assert_eq!(app.tenant_count(), tenants, "a replay creates no tenant");
    assert_eq!(app.audit_count(), events, "a replay appends no audit event");

    let token = tenant_token(&second.json());
    let id = tenant_id(&second.json());
    assert_eq!(
        app.get(&id, Some(&token)).status,
        200,
        "the replayed token is the live token"
    );
}

#[test]
fn white_space_and_member_order_do_not_change_the_body() {
    let app = spawn_app();
    let key = "layout-key";
    let first = app.post_tenants(
        r#"{"name":"layout","opening_deposit_atomic":"7"}"#,
        Some(key),
    );
    assert_eq!(first.status, 201, "first create: {}", first.describe());
    let second = app.post_tenants(
        "{ \"opening_deposit_atomic\" : \"7\" ,\n  \"name\" : \"layout\" }\n",
        Some(key),
    );
    assert_eq!(
        second.status,
        201,
        "the same body in another layout: {}",
        second.describe()
    );
    assert_eq!(
        second.header("idempotent-replayed"),
        Some("true"),
        "it is a replay"
    );
    assert_eq!(second.body, first.body, "it returns the first body");
    assert_eq!(app.tenant_count(), 1, "one tenant only");
}

#[test]
fn a_replay_after_tombstone_returns_the_original_body() {
    let app = spawn_app();
    let key = "tombstoned-key";
    let first = app.create_with_key("replay-after-delete", "9", key);
    assert_eq!(first.status, 201, "first create: {}", first.describe());
    let id = tenant_id(&first.json());
    assert_eq!(app.delete(&id).status, 200, "tombstoning it");
    let events = app.audit_count();

    let replay = app.create_with_key("replay-after-delete", "9", key);
    assert_eq!(
        replay.status,
        201,
        "the replay after a tombstone: {}",
        replay.describe()
    );
    assert_eq!(
        replay.header("idempotent-replayed"),
        Some("true"),
        "it is a replay"
    );
    assert_eq!(
        replay.body, first.body,
        "the original body, state active included"
    );
    assert_eq!(
        app.tenant_count(),
        1,
        "the replay created nothing, though the name is free"
    );
    assert_eq!(app.audit_count(), events, "the replay appended nothing");
    assert_eq!(
        app.get_admin(&id).json()["state"],
        "tombstoned",
        "the tenant stays tombstoned"
    );
}

#[test]
fn the_same_key_with_another_body_is_a_mismatch() {
    let app = spawn_app();
    let key = "mismatch-key";
    let first = app.create_with_key("original", "1", key);
    assert_eq!(first.status, 201, "first create: {}", first.describe());
    let cases = [
        ("another amount", "original", "2"),
        ("another name", "other", "1"),
        ("a name differing in case", "Original", "1"),
    ];
    for (msg, name, amount) in cases {
        let resp = app.create_with_key(name, amount, key);
        assert_problem(&resp, 422, "idempotency_key_mismatch", msg);
    }
    let invalid = app.post_tenants(&tenant_body("", "1"), Some(key));
    assert_eq!(
        invalid.status,
        422,
        "an invalid body with a bound key: {}",
        invalid.describe()
    );
    assert_eq!(app.tenant_count(), 1, "no mismatch created a tenant");
    assert_eq!(app.audit_count(), 1, "no mismatch appended an audit event");
}

#[test]
fn a_failed_request_binds_nothing() {
    let app = spawn_app();

    let key = "failed-validation-key";
    let bad = app.post_tenants(&tenant_body(" bad", "1"), Some(key));
    assert_problem(&bad, 422, "validation_failed", "an invalid body with a key");
    let good = app.create_with_key("after-validation", "1", key);
    assert_eq!(
        good.status,
        201,
        "the key is free after a failed request: {}",
        good.describe()
    );
    assert_eq!(
        good.header("idempotent-replayed"),
        None,
        "that is not a replay"
    );

    let holder = tenant_id(&app.create_ok("held-name", "1"));
    let key = "failed-conflict-key";
    let taken = app.create_with_key("held-name", "5", key);
    assert_problem(&taken, 409, "tenant_name_taken", "a taken name with a key");
    assert_eq!(app.delete(&holder).status, 200, "freeing the name");
    let retry = app.create_with_key("held-name", "5", key);
    assert_eq!(
        retry.status,
        201,
        "the same key and body after the 409 create anew, not a replay of the 409: {}",
        retry.describe()
    );
    assert_eq!(retry.header("idempotent-replayed"), None, "not a replay");
}

#[test]
fn malformed_keys_are_400_invalid_header() {
    let app = spawn_app();
    let long = "k".repeat(IDEMPOTENCY_KEY_BYTES_MAX + 1);
    let long_msg = format!("{} characters", IDEMPOTENCY_KEY_BYTES_MAX + 1);
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("an empty key", vec![""]),
        (long_msg.as_str(), vec![long.as_str()]),
        ("an inner space", vec!["has space"]),
        ("a tab", vec!["a\tb"]),
        ("non-ASCII", vec!["schlüssel"]),
        ("two keys", vec!["one", "two"]),
        ("the same key twice", vec!["same", "same"]),
    ];
    let (addr, auth) = (&app.addr, app.admin());
    for (msg, keys) in cases {
        // A row's keys go as extra headers, exactly as given, however many there are.
        let bad: Vec<(&str, &str)> = keys.iter().map(|k| ("Idempotency-Key", *k)).collect();
        let body = tenant_body(&unique("bad-key"), "1");
        let resp = send(addr, "POST", "/v1/tenants", &auth, Some(&body), None, &bad);
        assert_problem(&resp, 400, "invalid_header", msg);
    }
    assert_eq!(
        app.tenant_count(),
        0,
        "no request with a malformed key created a tenant"
    );

    let longest = "k".repeat(IDEMPOTENCY_KEY_BYTES_MAX);
    let longest_msg = format!("{IDEMPOTENCY_KEY_BYTES_MAX} characters");
    let accepted = [
        ("one character", "k"),
        (longest_msg.as_str(), longest.as_str()),
        ("visible punctuation", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    ];
    for (msg, k) in accepted {
        let resp = app.create_with_key(&unique("good-key"), "1", k);
        assert_eq!(resp.status, 201, "a key of {msg}: {}", resp.describe());
    }
}

/// How long a purge may take to be logged after a start-up.
const PURGE_LOG_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits for the `erased N expired idempotency records` line among the log lines from
/// index `first` on, and returns N.
fn wait_for_purge(app: &TestApp, first: usize) -> u64 {
    let line = app
        .wait_for_log_since(first, PURGE_LOG_TIMEOUT, |l| {
            l.contains("expired idempotency records")
        })
        .unwrap_or_else(|| {
            panic!(
                "no `erased N expired idempotency records` line within {PURGE_LOG_TIMEOUT:?} \
                 of the start-up; log:\n{}",
                app.log_text()
            )
        });
    line.split("erased ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the purge line names how many it erased: {line:?}"))
}

/// How many stored responses hold `token` in their body.
fn responses_holding(app: &TestApp, token: &str) -> i64 {
    assert!(
        token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "a token to search for: {token:?}"
    );
    let position = match app.backend() {
        Backend::Sqlite => "instr",
        Backend::Postgres => "strpos",
    };
    app.count(&format!(
        "SELECT count(*) FROM idempotency_keys WHERE {position}(response_body, '{token}') > 0"
    ))
}

#[test]
fn an_expired_key_creates_anew_and_its_stored_response_is_purged() {
    let app_builder = AppBuilder::new().arg("--idempotency-ttl-s").arg("1");
    let mut app = app_builder.spawn();
    let first = app.create_with_key("expiring", "1", "expiring-key");
    assert_eq!(first.status, 201, "first create: {}", first.describe());
    let other = app.create_with_key("expiring-2", "1", "expiring-key-2");
    assert_eq!(other.status, 201, "second create: {}", other.describe());
    let first_token = tenant_token(&first.json());
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys"),
        2,
        "both keys are stored during the window"
    );
    assert_eq!(
        responses_holding(&app, &first_token),
        1,
        "during the window the first stored response holds the first token (the search can \
         find it)"
    );

    thread::sleep(Duration::from_millis(2100));

    let same = app.create_with_key("expiring", "1", "expiring-key");
    assert_problem(
        &same,
        409,
        "tenant_name_taken",
        "after expiry the same key and body are a new create (the name is taken), not a replay",
    );
    let anew = app.create_with_key("expiring-anew", "1", "expiring-key-2");
    assert_eq!(
        anew.status,
        201,
        "after expiry the key takes a new body, no mismatch: {}",
        anew.describe()
    );
    assert_eq!(anew.header("idempotent-replayed"), None, "not a replay");
    let anew_token = tenant_token(&anew.json());
    assert_eq!(
        responses_holding(&app, &first_token),
        1,
        "the expired record waits for the next purge (only a lookup ignores it)"
    );
    assert_eq!(
        responses_holding(&app, &anew_token),
        1,
        "the new binding of the second key stores its response"
    );

    thread::sleep(Duration::from_millis(1100));
    let first_line = app.log_len();
    app.restart();
    let erased = wait_for_purge(&app, first_line);
    assert_eq!(
        erased, 2,
        "the purge at start-up erased both expired records (the first key's and the second \
         key's new one)"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys"),
        0,
        "the purge at start-up erased every expired stored response"
    );
    for (what, token) in [("first", &first_token), ("new", &anew_token)] {
        assert_eq!(
            responses_holding(&app, token),
            0,
            "no stored response holds the {what} token any more"
        );
    }
}

/// How the server is restarted so that its start-up purge runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Restart {
    /// SIGTERM: the clean stop checkpoints the WAL, so the token is in the database file.
    Graceful,
    /// SIGKILL: the token's page stays in the WAL, where only a truncating checkpoint
    /// (not a passive one) erases it.
    Crash,
}

/// Creates with a key under a 1 s window, restarts after expiry, and checks that the purged
/// token leaves the files within a bound while the server runs, and is still gone after a
/// SIGKILL right after that.
fn purged_token_leaves_the_files(restart: Restart) {
    /// How long the truncating checkpoint after a purge may take.
    const ERASE_TIMEOUT: Duration = Duration::from_secs(10);

    let mut app = AppBuilder::new()
        .arg("--idempotency-ttl-s")
        .arg("1")
        .spawn();
    let created = app.create_with_key("erased-while-serving", "1", "erased-serving-key");
    assert_eq!(created.status, 201, "create: {}", created.describe());
    let id = tenant_id(&created.json());
    let token = tenant_token(&created.json());
    assert!(
        !files_holding(app.dir.path(), token.as_bytes()).is_empty(),
        "during the window the stored response holds the token in the files (the search \
         below can find it)"
    );

    thread::sleep(Duration::from_millis(1100));
    let first_line = app.log_len();
    match restart {
        Restart::Graceful => {
            app.restart();
        }
        Restart::Crash => {
            app.kill();
            let holding = files_holding(app.dir.path(), token.as_bytes());
            assert!(
                holding.iter().any(|f| f.ends_with("-wal")),
                "after kill -9 the WAL holds the stored response's token (so the search below \
                 can find it there); files holding it: {holding:?}"
            );
            app.start();
        }
    }
    assert_eq!(
        wait_for_purge(&app, first_line),
        1,
        "{restart:?} restart: the purge at start-up erased the expired record"
    );

    let deadline = Instant::now() + ERASE_TIMEOUT;
    while contains_bytes(&db_bytes(&app.db_path), token.as_bytes()) {
        assert!(
            Instant::now() < deadline,
            "{restart:?} restart: {ERASE_TIMEOUT:?} after the purge the running server's files \
             still hold the plaintext token: {:?}",
            files_holding(app.dir.path(), token.as_bytes())
        );
        thread::sleep(Duration::from_millis(50));
    }

    app.kill();
    assert_eq!(
        files_holding(app.dir.path(), token.as_bytes()),
        Vec::<String>::new(),
        "{restart:?} restart: after kill -9 no file of the data directory (database, -wal, \
         -shm) holds the token"
    );
    let db = app.db();
    assert_eq!(
        count(&db, "SELECT count(*) FROM idempotency_keys"),
        0,
        "{restart:?} restart: the purge is durable"
    );
    assert_eq!(
        db.query_row("SELECT state FROM tenants WHERE id = ?1", [&id], |r| {
            r.get::<_, String>(0)
        })
        .expect("the tenant survives the purge and the kill"),
        "active",
        "{restart:?} restart: the purge erased only the stored response, not the tenant"
    );
}

#[test]
fn a_purged_token_leaves_the_files_while_serving_and_after_kill_9() {
    purged_token_leaves_the_files(Restart::Graceful);
}

#[test]
fn a_purged_token_leaves_the_wal_after_a_crash_restart() {
    purged_token_leaves_the_files(Restart::Crash);
}

#[test]
fn an_expired_stored_response_leaves_no_plaintext_token_in_the_files() {
    let mut app = AppBuilder::new()
        .arg("--idempotency-ttl-s")
        .arg("1")
        .spawn();
    let created = app.create_with_key("erased", "1", "erased-key");
    assert_eq!(created.status, 201, "create: {}", created.describe());
    let token = tenant_token(&created.json());
    assert!(
        contains_bytes(&db_bytes(&app.db_path), token.as_bytes()),
        "during the window the stored response holds the token (the check below can fail)"
    );

    thread::sleep(Duration::from_millis(1100));
    let first_line = app.log_len();
    app.restart();
    // The purge at start-up runs beside the server: stopping before it ran would keep the
    // record for the next start, as a stop before the window ends does.
    assert_eq!(
        wait_for_purge(&app, first_line),
        1,
        "the start-up's purge erases the one expired record"
    );
    assert_eq!(
        app.terminate().code(),
        Some(0),
        "graceful stop after the purge"
    );
    assert!(
        !contains_bytes(&db_bytes(&app.db_path), token.as_bytes()),
        "once the window is over the plaintext token is erased from the database files, \
         free pages and WAL included"
    );
}
