//! `tenantd copy` between SQLite and PostgreSQL, `audit verify` on PostgreSQL, and what the
//! commands refuse there. Each test has a database of its own on the private cluster that
//! `make test` starts (`TENANTD_TEST_POSTGRES_ADMIN_URL`, see scripts/with-postgres.sh).

use std::path::Path;

use rusqlite::Connection;
use serde_json::json;

use crate::helpers::*;

fn copy(from: &str, to: &str) -> CliOutput {
    run_cli(&["copy", "--from", from, "--to", to])
}

fn verify_url(url: &str) -> CliOutput {
    run_cli(&["audit", "verify", "--db", url])
}

/// The `content digest …` a successful copy prints.
fn digest(out: &CliOutput) -> String {
    assert_eq!(out.code, Some(0), "copy: {}{}", out.stdout, out.stderr);
    out.stdout
        .split("content digest ")
        .nth(1)
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("no digest in {:?}", out.stdout))
}

/// Every row of every table of a SQLite file, as text, in key order.
fn dump(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).expect("the file opens");
    let mut all = Vec::new();
    for (table, key) in [
        ("audit_events", "seq"),
        ("tenants", "id"),
        ("budgets", "id"),
        ("reservations", "id"),
        ("ledger_entries", "id"),
        ("idempotency_keys", "principal, key"),
    ] {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY {key}"))
            .expect("a query");
        let columns = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                let values: Vec<String> = (0..columns)
                    .map(|i| format!("{:?}", row.get_ref(i).expect("a value")))
                    .collect();
                Ok(format!("{table}: {}", values.join(" | ")))
            })
            .expect("rows");
        all.extend(rows.map(|r| r.expect("a row")));
    }
    all
}

/// A database with every kind of row: tenants (one tombstoned), budgets (one closed), credits
/// and debits with memos, reservations committed, released and active, keyed writes, the
/// largest amount there is. The server (on SQLite whatever `TENANTD_TEST_BACKEND` says) is
/// stopped; its file is returned with its directory.
fn busy_sqlite() -> (tempfile::TempDir, std::path::PathBuf) {
    let mut app = AppBuilder::new().sqlite().spawn();
    let max = u128::MAX.to_string();
    let rich = Scene::new(&app, "rich", &max);
    let plain = Scene::new(&app, "plain ünïcode", "1000");
    let gone = Scene::new(&app, "gone", "5");
    let second = plain.admin().new_budget("gpu-hours", "300");
    let credit = json!({"amount_atomic": "70", "memo": "top-up ✓"});
    assert_status(
        &second.post(&second.bpath("credits"), &credit),
        201,
        "a credit",
    );
    assert_status(
        &second.post(&second.bpath("debits"), &amount_body("20")),
        201,
        "a debit",
    );
    // A budget under another, and a spend on it that moves both: a parent and an entry via
    // the budget spent on.
    let team = json!({"name": "gpu-team", "opening_deposit_atomic": "50", "parent_id": second.bid});
    let team = second.post_budget(&team);
    let team = second.on(str_of(
        &assert_created(&team, &budgets_path(&second.tid), "a budget under another"),
        "id",
    ));
    let charge = json!({"budget_id": team.bid, "amount_atomic": "7", "memo": "two levels"});
    let charged = team.post(&format!("/v1/tenants/{}/charges", team.tid), &charge);
    assert_status(&charged, 201, "a charge on two levels");
    for (scene, amount, settle) in [
        (&plain, "10", Some(("commit", "12"))),
        (&plain, "5", Some(("release", ""))),
        (&rich, "1", None),
        (&rich, &max[..10], Some(("commit", "0"))),
    ] {
        let body = reserve_body(&scene.bid, amount, Some(600));
        let held = scene.post_keyed(
            &reservations_path(&scene.tid),
            &body,
            &format!("k-{amount}"),
        );
        let held = assert_created(&held, &reservations_path(&scene.tid), "a hold");
        let rid = held["id"].as_str().expect("an id");
        if let Some((how, spent)) = settle {
            let body = if how == "commit" {
                amount_body(spent)
            } else {
                json!({})
            };
            assert_ok(&scene.post(&scene.rpath(rid, how), &body), how);
        }
    }
    let keyed = app.create_with_key("keyed", "10", "create-key");
    assert_eq!(keyed.status, 201, "{}", keyed.describe());
    let closed = rich.admin().new_budget("closed-one", "9");
    assert_ok(
        &app.request(
            "DELETE",
            &closed.bpath(""),
            &[("Authorization", &app.admin())],
            None,
        ),
        "a close",
    );
    assert_ok(&app.delete(&gone.tid), "a tombstone");
    app.terminate();
    let path = app.db_path.clone();
    let dir = std::mem::replace(&mut app.dir, tempfile::tempdir().expect("a directory"));
    (dir, path)
}

/// SQLite → PostgreSQL → SQLite: every row arrives as it was, both copies print the same
/// digest and head, and both chains verify; the sources are not changed.
#[test]
fn a_round_trip_through_postgres_keeps_every_row() {
    let (dir, original) = busy_sqlite();
    let db = TestDb::new();
    let before = std::fs::read(&original).expect("the file");
    let there = copy(original.to_str().expect("UTF-8"), &db.url);
    let there_digest = digest(&there);
    assert_eq!(
        std::fs::read(&original).expect("the file"),
        before,
        "the source file is untouched"
    );

    let verified = verify_url(&db.url);
    assert_eq!(
        verified.code,
        Some(0),
        "{}{}",
        verified.stdout,
        verified.stderr
    );
    let original_verified = audit_verify(&original);
    assert_eq!(
        verified.stdout, original_verified.stdout,
        "the same chain, the same head"
    );

    let events_there = db.psql("SELECT count(*) FROM audit_events");
    let back = dir.path().join("back.db");
    let back_out = copy(&db.url, back.to_str().expect("UTF-8"));
    assert_eq!(digest(&back_out), there_digest, "the same rows read back");
    assert_eq!(
        db.psql("SELECT count(*) FROM audit_events"),
        events_there,
        "the source database is untouched"
    );
    let rows = dump(&original);
    assert!(rows.len() > 30, "a busy database: {rows:#?}");
    assert_eq!(dump(&back), rows, "every row of every table, as it was");
    let back_verified = audit_verify(&back);
    assert_eq!(back_verified.stdout, original_verified.stdout);
    assert!(
        !dir.path().join("back.db.partial").exists() && !dir.path().join("back.db-wal").exists(),
        "the copy is one self-contained file"
    );
    // The largest amount crossed numeric(39,0) whole.
    assert_eq!(
        db.psql("SELECT count(*) FROM budgets WHERE opening_deposit_atomic = 340282366920938463463374607431768211455"),
        "1"
    );
}

/// Tables of more rows than a copy reads and writes at a time (1,000) arrive whole, in order,
/// both ways.
#[test]
fn tables_larger_than_a_chunk_are_copied_whole() {
    let mut app = AppBuilder::new().sqlite().spawn();
    for i in 0..1001 {
        let created = app.create(&format!("tenant-{i:04}"), "1");
        assert_eq!(created.status, 201, "{}", created.describe());
    }
    app.terminate();
    let db = TestDb::new();
    let there = copy(app.db_path.to_str().expect("UTF-8"), &db.url);
    let digest_there = digest(&there);
    assert!(
        there.stdout.contains("1001 audit_events, 1001 tenants"),
        "{}",
        there.stdout
    );
    let back = app.dir.path().join("back.db");
    assert_eq!(
        digest(&copy(&db.url, back.to_str().expect("UTF-8"))),
        digest_there
    );
    assert_eq!(dump(&back), dump(&app.db_path));
}

/// Copies into one empty database at the same moment, each making the schema on its own:
/// the schema is made once, exactly one copy fills the database, and the others are refused
/// as it is no longer empty.
#[test]
fn concurrent_copies_into_one_database_fill_it_once() {
    let (_dir, original) = busy_sqlite();
    let db = TestDb::new();
    let source = original.to_str().expect("UTF-8").to_owned();
    let copies: Vec<_> = (0..4)
        .map(|_| {
            let (source, url) = (source.clone(), db.url.clone());
            std::thread::spawn(move || copy(&source, &url))
        })
        .collect();
    let outs: Vec<CliOutput> = copies
        .into_iter()
        .map(|c| c.join().expect("a copy"))
        .collect();
    let done: Vec<&CliOutput> = outs.iter().filter(|o| o.code == Some(0)).collect();
    assert_eq!(done.len(), 1, "{outs:#?}");
    for out in outs.iter().filter(|o| o.code != Some(0)) {
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(out.stderr.contains("not empty"), "{}", out.stderr);
    }
    let events = audit_verify(&original);
    assert_eq!(verify_url(&db.url).stdout, events.stdout);
}

/// A source whose chain does not account for its rows is refused before anything of the
/// copy is kept: no file at the target's name, no row in the target database.
#[test]
fn a_source_that_does_not_verify_is_never_copied() {
    let (dir, original) = busy_sqlite();
    {
        let conn = Connection::open(&original).expect("the file opens");
        let edited = conn
            .execute(
                "UPDATE budgets SET spent_atomic = '1' WHERE name = 'gpu-hours'",
                [],
            )
            .expect("an edit behind the service's back");
        assert_eq!(edited, 1);
    }
    let to_file = dir.path().join("copy.db");
    let out = copy(
        original.to_str().expect("UTF-8"),
        to_file.to_str().expect("UTF-8"),
    );
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("nothing was kept"), "{}", out.stderr);
    assert!(!to_file.exists(), "no file at the target's name");
    assert!(
        !dir.path().join("copy.db.partial").exists(),
        "no working file left"
    );

    let db = TestDb::new();
    let out = copy(original.to_str().expect("UTF-8"), &db.url);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("nothing was kept"), "{}", out.stderr);
    assert_eq!(db.psql("SELECT count(*) FROM audit_events"), "0");
    assert_eq!(db.psql("SELECT count(*) FROM tenants"), "0");
}

/// No tenant token reaches the log of a copy, even at `RUST_LOG=debug`: the idempotency
/// record of a keyed create holds one, and the PostgreSQL driver logs parameters at debug.
#[test]
fn a_copy_logs_no_tenant_token_at_any_level() {
    let (dir, original) = busy_sqlite();
    let token: String = Connection::open(&original)
        .expect("the file opens")
        .query_row(
            "SELECT json_extract(response_body, '$.sidecar_config_env.TENANTD_TENANT_TOKEN') \
             FROM idempotency_keys WHERE key = 'create-key'",
            [],
            |row| row.get(0),
        )
        .expect("the keyed create's stored answer");
    let db = TestDb::new();
    let out = run_cli_in(
        dir.path(),
        &[
            "copy",
            "--from",
            original.to_str().expect("UTF-8"),
            "--to",
            &db.url,
        ],
        &[("RUST_LOG", "debug")],
        std::time::Duration::from_secs(60),
    );
    digest(&out);
    assert!(
        out.stderr.contains("DEBUG"),
        "debug logging is on: {}",
        out.stderr
    );
    assert!(!out.stderr.contains(&token), "a tenant token in the log");
    assert!(!out.stdout.contains(&token));
    assert_eq!(
        db.psql("SELECT count(*) FROM idempotency_keys WHERE key = 'create-key'"),
        "1",
        "the record itself was copied"
    );
}

/// A target that holds data, or a file that exists, is refused and left as it was.
#[test]
fn copy_writes_only_into_an_empty_target() {
    let (dir, original) = busy_sqlite();
    let db = TestDb::new();
    digest(&copy(original.to_str().expect("UTF-8"), &db.url));
    let events = db.psql("SELECT count(*) FROM audit_events");
    let again = copy(original.to_str().expect("UTF-8"), &db.url);
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert!(again.stderr.contains("not empty"), "{}", again.stderr);
    assert_eq!(db.psql("SELECT count(*) FROM audit_events"), events);

    let existing = dir.path().join("existing.db");
    std::fs::write(&existing, b"something else").expect("a file");
    let onto_file = copy(&db.url, existing.to_str().expect("UTF-8"));
    assert_eq!(onto_file.code, Some(1), "{}", onto_file.stderr);
    assert!(onto_file.stderr.contains("exists"), "{}", onto_file.stderr);
    assert_eq!(
        std::fs::read(&existing).expect("the file"),
        b"something else"
    );

    let empty = TestDb::new();
    let from_nothing = copy(&empty.url, dir.path().join("x.db").to_str().expect("UTF-8"));
    assert_eq!(from_nothing.code, Some(1));
    assert!(
        from_nothing.stderr.contains("no tenantd schema"),
        "{}",
        from_nothing.stderr
    );
    assert!(!dir.path().join("x.db").exists() && !dir.path().join("x.db.partial").exists());
}

/// A balance edited behind the service's back on PostgreSQL is caught by `audit verify`, as
/// on SQLite, and no secret of the URL reaches the output.
#[test]
fn audit_verify_on_postgres_catches_an_edited_balance() {
    let (_dir, original) = busy_sqlite();
    let db = TestDb::new();
    digest(&copy(original.to_str().expect("UTF-8"), &db.url));
    let bid = db.psql("SELECT id FROM budgets WHERE name = 'gpu-hours'");
    db.psql(&format!(
        "UPDATE budgets SET spent_atomic = spent_atomic + 1 WHERE id = '{bid}'"
    ));
    let out = verify_url(&db.url);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&bid),
        "names the budget: {}",
        out.stderr
    );
    let password = db
        .url
        .split(':')
        .nth(2)
        .and_then(|p| p.split('@').next())
        .expect("a password");
    assert!(!out.stderr.contains(password) && !out.stdout.contains(password));
}

/// `backup` is SQLite's: on PostgreSQL it exits 2, names pg_dump, and creates nothing.
#[test]
fn backup_on_postgres_names_pg_dump() {
    let db = TestDb::new();
    let out = run_cli(&["backup", "--db", &db.url, "--to", "x.db"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("pg_dump"), "{}", out.stderr);
    assert_eq!(db.psql("SELECT to_regclass('tenants') IS NULL"), "t");
}

/// TLS as libpq's URLs ask for it. `verify-full` against the cluster's own authority
/// connects; against another authority, or the Mozilla roots built in, it is refused before
/// anything is read; `require` encrypts without checking, and `disable` goes in the clear.
#[test]
fn tls_is_checked_as_sslmode_says() {
    let (dir, original) = busy_sqlite();
    let db = TestDb::new();
    let ca = std::env::var("TENANTD_TEST_POSTGRES_CA").expect("TENANTD_TEST_POSTGRES_CA");
    let with = |query: &str| format!("{}?{query}", db.url);
    let full = with(&format!("sslmode=verify-full&sslrootcert={ca}"));
    digest(&copy(original.to_str().expect("UTF-8"), &full));

    let other = Authority::new(dir.path(), "another").cert;
    let refused = [
        with(&format!(
            "sslmode=verify-full&sslrootcert={}",
            other.display()
        )),
        with(&format!(
            "sslmode=verify-ca&sslrootcert={}",
            other.display()
        )),
        with("sslmode=verify-full"),
    ];
    for url in &refused {
        let out = verify_url(url);
        assert_eq!(out.code, Some(1), "{url}: {}{}", out.stdout, out.stderr);
        assert!(out.stderr.contains("certificate"), "{url}: {}", out.stderr);
        assert!(!out.stderr.contains("ok:"), "{url}");
    }
    for query in [
        "sslmode=verify-ca&sslrootcert=CA",
        "sslmode=require",
        "sslmode=disable",
    ] {
        let url = with(&query.replace("CA", &ca));
        let out = verify_url(&url);
        assert_eq!(out.code, Some(0), "{url}: {}{}", out.stdout, out.stderr);
    }
    let bad_mode = verify_url(&with("sslmode=sometimes"));
    assert_eq!(bad_mode.code, Some(1));
    assert!(
        bad_mode.stderr.contains("sslmode=sometimes"),
        "{}",
        bad_mode.stderr
    );
}
