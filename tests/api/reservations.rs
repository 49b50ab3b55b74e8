//! Reservations: reserve, commit, release, extend and expiry; the ledger they write and
//! replay to; idempotent reserves and releases; the audit chain after a mixed workload.

use rusqlite::Connection;
use rusqlite::types::Value as SqlValue;
use serde_json::{Value, json};

use crate::helpers::*;

#[test]
fn reserve_returns_201_with_every_field() {
    let app = spawn_app();
    let s = Scene::new(&app, "reserver", "100000");
    let path = reservations_path(&s.tid);
    // The 1 s hold comes last: it expires while the test runs.
    let ttls = [
        ("", TTL_S_DEFAULT),
        (r#","ttl_seconds":null"#, TTL_S_DEFAULT),
        (r#","ttl_seconds":60"#, 60),
        (r#","ttl_seconds":86400"#, TTL_S_MAX),
        (r#","ttl_seconds":1"#, 1),
    ];
    let mut reserved = 0;
    for (i, (ttl, seconds)) in ttls.into_iter().enumerate() {
        let bid = &s.bid;
        let text = format!(r#"{{"budget_id":"{bid}","amount_atomic":"300","memo":"m{i}"{ttl}}}"#);
        let before = now_ms();
        let resp = send(&app.addr, "POST", &path, &s.token, Some(&text), None, &[]);
        let after = now_ms();
        let r = assert_created(&resp, &path, &text);
        assert_reservation_shape(&r, &text);
        let expected = [
            ("tenant_id", json!(s.tid)),
            ("budget_id", json!(s.bid)),
            ("state", json!("active")),
            ("amount_atomic", json!("300")),
            ("committed_atomic", Value::Null),
            ("memo", json!(format!("m{i}"))),
            ("settled_at", Value::Null),
        ];
        assert_fields(&r, &expected, &text);
        let created = timestamp_ms(str_of(&r, "created_at"));
        let window = before - 2000..=after + 2000;
        assert!(window.contains(&created), "{text}: created_at: {r}");
        let ttl_ms = timestamp_ms(str_of(&r, "expires_at")) - created;
        assert_eq!(ttl_ms, seconds * 1000, "{text}: expires_at");
        if i == 0 {
            let expected = [
                ("kind", json!("reserve")),
                ("reservation_id", r["id"].clone()),
                ("amount_atomic", json!("300")),
            ];
            assert_fields(&s.last_entry(), &expected, "the reserve entry");
            let payload = json!({
                "id": r["id"], "budget_id": s.bid, "amount_atomic": "300",
                "expires_at": r["expires_at"]
            });
            assert_last_event(&app, "reservation.created", "tenant", payload, &text);
        }
        if seconds > 1 {
            assert_eq!(s.reservation(&id_of(&r)), r, "{text}: a read");
            reserved += 300;
            s.expect([100_000, 0, 0, reserved], &text);
        }
    }
    let r = s.admin().hold("5", None);
    assert_eq!(r["tenant_id"], s.tid, "the admin reserves for the tenant");
    let actor = audit_of(&app, "reservation.created").pop().map(|e| e.0);
    assert_eq!(actor.as_deref(), Some("admin"), "the admin's actor");
}

#[test]
fn refused_reservation_bodies_name_every_bad_field() {
    let app = spawn_app();
    let s = Scene::new(&app, "refused-reserves", "100");
    let other = Scene::new(&app, "other-reserver", "100");
    let path = reservations_path(&s.tid);
    let bid = &s.bid;
    let with = |member: &str, raw: &str| {
        format!(r#"{{"budget_id":"{bid}","amount_atomic":"1","{member}":{raw}}}"#)
    };
    let long_memo = format!("\"{}\"", "m".repeat(MEMO_CHARS_MAX + 1));
    let mut cases: Vec<(String, Vec<&str>)> = vec![
        ("{}".into(), vec!["amount_atomic", "budget_id"]),
        (r#"{"amount_atomic":"1"}"#.into(), vec!["budget_id"]),
        (
            r#"{"budget_id":null,"amount_atomic":"1"}"#.into(),
            vec!["budget_id"],
        ),
        (
            r#"{"budget_id":7,"amount_atomic":"1"}"#.into(),
            vec!["budget_id"],
        ),
        (format!(r#"{{"budget_id":"{bid}"}}"#), vec!["amount_atomic"]),
        (with("memo", &long_memo), vec!["memo"]),
        (with("memo", r#""a\tb""#), vec!["memo"]),
        (with("ttl", "60"), vec!["ttl"]),
        (
            r#"{"budget_id":[],"amount_atomic":1,"ttl_seconds":0,"x":1}"#.into(),
            vec!["amount_atomic", "budget_id", "ttl_seconds", "x"],
        ),
    ];
    let amounts = r#""0" "-5" "1.5" "01" "+1" "" 5 null "340282366920938463463374607431768211456""#;
    for raw in amounts.split(' ') {
        let text = format!(r#"{{"budget_id":"{bid}","amount_atomic":{raw}}}"#);
        cases.push((text, vec!["amount_atomic"]));
    }
    // A TTL is a whole number by value, as JSON Schema's integer: 60.0 and 6e1 are 60 and
    // are taken (below); 1.5 and 15e-1 are not whole.
    let ttls = r#"0 86401 -1 1.5 15e-1 8.64001e4 "60" true [60] {} 18446744073709551617"#;
    for raw in ttls.split(' ') {
        cases.push((with("ttl_seconds", raw), vec!["ttl_seconds"]));
    }
    for (text, fields) in &cases {
        let resp = send(&app.addr, "POST", &path, &s.token, Some(text), None, &[]);
        assert_invalid(&resp, fields, text);
    }

    let lower = s.bid.to_ascii_lowercase();
    let unknown = "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    for bid in [
        other.bid.as_str(),
        unknown,
        "nope",
        lower.as_str(),
        s.tid.as_str(),
        "",
    ] {
        let (on, ctx) = (s.on(bid), format!("a reserve on {bid:?}"));
        assert_problem(&on.reserve("1", None), 404, "budget_not_found", &ctx);
        let beyond = on.reserve("1000", None);
        assert_problem(
            &beyond,
            404,
            "budget_not_found",
            &format!("{ctx}, too much"),
        );
        let invalid = on.reserve("1", Some(0));
        assert_invalid(&invalid, &["ttl_seconds"], &format!("{ctx}, ttl 0"));
    }
    assert_insufficient(&s.reserve("101", None), 100, "beyond available");
    other.expect([100, 0, 0, 0], "the other tenant's budget");
    s.expect([100, 0, 0, 0], "no refused reserve held anything");
    let events = audit_of(&app, "reservation.created");
    assert!(events.is_empty(), "no event: {events:?}");
}

#[test]
fn commit_below_equal_and_above_the_reserved_amount() {
    let app = spawn_app();
    let t = Scene::new(&app, "committer", "1");
    // Each budget holds 150 and its reservation 100, so 50 stays available: a commit of
    // 150 takes all of it, one of 151 is refused.
    let cases = [
        ("60", Some(60)),
        ("100", Some(100)),
        ("0", Some(0)),
        ("150", Some(150)),
        ("151", None),
    ];
    for (i, (asked, outcome)) in cases.into_iter().enumerate() {
        let s = t.new_budget(&format!("commit-{i}"), "150");
        let r = s.hold("100", None);
        let rid = id_of(&r);
        let resp = s.commit(&rid, asked);
        let ctx = format!("a commit of {asked} of 100");
        let Some(spent) = outcome else {
            assert_insufficient(&resp, 50, &ctx);
            assert_eq!(s.reservation(&rid), r, "{ctx}: it stays as it was");
            s.expect([150, 0, 0, 100], &ctx);
            assert_eq!(s.entries().len(), 2, "{ctx}: no entry");
            assert_ok(&s.commit(&rid, "100"), &format!("{ctx}, then 100"));
            continue;
        };
        let done = assert_ok(&resp, &ctx);
        assert_reservation_shape(&done, &ctx);
        let expected = [
            ("state", json!("committed")),
            ("committed_atomic", json!(asked)),
            ("amount_atomic", json!("100")),
        ];
        assert_fields(&done, &expected, &ctx);
        assert_eq!(s.reservation(&rid), done, "{ctx}: a read");
        s.expect([150, 0, spent, 0], &ctx);
        let ledger = s.entries();
        let expected = [
            ("kind", json!("commit")),
            ("amount_atomic", json!(asked)),
            ("reservation_id", json!(rid)),
        ];
        assert_fields(&ledger[ledger.len() - 1], &expected, &ctx);
        assert_eq!(replay(&ledger, &ctx), s.figures(), "{ctx}: replay");
        let payload = json!({ "id": rid, "amount_atomic": asked });
        assert_last_event(&app, "reservation.committed", "tenant", payload, &ctx);
    }
    let s = t.new_budget("commit-bodies", "10");
    let rid = s.hold_id("5");
    let refused = [
        (json!({}), "amount_atomic"),
        (json!({ "amount_atomic": null }), "amount_atomic"),
        (json!({ "amount_atomic": 3 }), "amount_atomic"),
        (json!({ "amount_atomic": "-1" }), "amount_atomic"),
        (json!({ "amount_atomic": "1", "memo": "x" }), "memo"),
    ];
    for (body, field) in refused {
        let ctx = format!("a commit of {body}");
        assert_invalid(&s.post(&s.rpath(&rid, "commit"), &body), &[field], &ctx);
    }
    assert_eq!(s.state(&rid), "active", "no refused commit settled it");
}

#[test]
fn release_takes_no_body_or_an_empty_object() {
    let app = spawn_app();
    let s = Scene::new(&app, "releaser", "100");
    let cases = [
        (None, None),
        (Some("{}"), Some("application/json")),
        (Some(" { } "), Some("application/json; charset=utf-8")),
    ];
    for (body, media) in cases {
        let ctx = format!("a release with body {body:?}");
        let rid = s.hold_id("40");
        let mut headers = vec![("Authorization", s.token.as_str())];
        headers.extend(media.map(|m| ("Content-Type", m)));
        let path = s.rpath(&rid, "release");
        let resp = app.request("POST", &path, &headers, body.map(str::as_bytes));
        let done = assert_ok(&resp, &ctx);
        assert_reservation_shape(&done, &ctx);
        let expected = [
            ("state", json!("released")),
            ("committed_atomic", Value::Null),
        ];
        assert_fields(&done, &expected, &ctx);
        s.expect([100, 0, 0, 0], &format!("{ctx}: the amount is back"));
        let expected = [("kind", json!("release")), ("amount_atomic", json!("40"))];
        assert_fields(&s.last_entry(), &expected, &ctx);
        let payload = json!({ "id": rid });
        assert_last_event(&app, "reservation.released", "tenant", payload, &ctx);
    }
    let rid = s.hold_id("40");
    let path = s.rpath(&rid, "release");
    let refused = [
        (json!({ "amount_atomic": "1" }), "amount_atomic"),
        (json!({ "memo": null }), "memo"),
    ];
    for (body, field) in refused {
        let ctx = format!("a release with {body}");
        assert_invalid(&s.post(&path, &body), &[field], &ctx);
    }
    let array = send(&app.addr, "POST", &path, &s.token, Some("[]"), None, &[]);
    assert_problem(&array, 400, "malformed_json", "a JSON array");
    assert_eq!(s.state(&rid), "active", "no refused release settled it");
}

#[test]
fn extend_sets_expires_at_from_now() {
    let app = spawn_app();
    let s = Scene::new(&app, "extender", "100");
    let r = s.hold("30", Some(1));
    let rid = id_of(&r);
    let before = now_ms();
    let resp = s.extend(&rid, 60);
    let after = now_ms();
    let extended = assert_ok(&resp, "extend by 60 s");
    assert_reservation_shape(&extended, "the extended reservation");
    assert_eq!(extended["state"], "active", "it stays active");
    let expires = timestamp_ms(str_of(&extended, "expires_at"));
    let window = before + 59_000..=after + 61_000;
    assert!(
        window.contains(&expires),
        "expires_at is now + 60 s: {extended}"
    );
    let payload = json!({ "id": rid, "expires_at": extended["expires_at"] });
    assert_last_event(&app, "reservation.extended", "tenant", payload, "extend");
    let refused = values(
        r#"[{}, {"ttl_seconds": null}, {"ttl_seconds": 0},
        {"ttl_seconds": 86401}, {"ttl_seconds": "60"}, {"ttl_seconds": 1.5}]"#,
    );
    for body in refused {
        let resp = s.post(&s.rpath(&rid, "extend"), &body);
        assert_invalid(&resp, &["ttl_seconds"], &format!("an extend of {body}"));
    }
    assert_eq!(
        s.reservation(&rid),
        extended,
        "no refused extend changed it"
    );

    sleep_past(timestamp_ms(str_of(&r, "expires_at")), 300);
    let done = assert_ok(&s.commit(&rid, "30"), "a commit after the first expiry");
    assert_eq!(done["state"], "committed", "the extension kept it alive");
    s.expect([100, 0, 30, 0], "after the commit");
}

#[test]
fn settled_reservations_are_not_active() {
    let app = spawn_app();
    let s = Scene::new(&app, "settled", "100");
    let committed = s.hold_id("10");
    assert_ok(&s.commit(&committed, "5"), "committing");
    let released = s.hold_id("10");
    assert_ok(&s.release(&released), "releasing");
    let (events, ledger) = (app.audit_count(), s.entries());
    for (state, rid) in [("committed", &committed), ("released", &released)] {
        for who in [s.clone(), s.admin()] {
            assert_not_active(&who.commit(rid, "1"), state, &format!("commit, {state}"));
            assert_not_active(&who.release(rid), state, &format!("release, {state}"));
            assert_not_active(&who.extend(rid, 60), state, &format!("extend, {state}"));
        }
        let bad = s.post(&s.rpath(rid, "commit"), &json!({}));
        assert_invalid(&bad, &["amount_atomic"], &format!("{state}: 422 first"));
    }
    assert_events(&app, events, "no refusal appended one");
    assert_eq!(s.entries(), ledger, "no refusal appended an entry");
}

#[test]
fn an_expired_reservation_holds_nothing_and_cannot_be_settled() {
    let app = spawn_app();
    let s = Scene::new(&app, "expiring", "10");
    let r = s.hold("10", Some(1));
    let rid = id_of(&r);
    assert_insufficient(&s.reserve("1", None), 0, "while the hold lasts");

    sleep_past(timestamp_ms(str_of(&r, "expires_at")), 100);
    let next = s.hold("10", None);
    assert_not_active(&s.commit(&rid, "1"), "expired", "a commit past expires_at");
    assert_not_active(&s.release(&rid), "expired", "a release past expires_at");
    assert_not_active(&s.extend(&rid, 60), "expired", "an extend past expires_at");
    let seen = s.wait_expired(&rid);
    assert_reservation_shape(&seen, "the expired reservation");
    s.expect([10, 0, 0, 10], "only the new hold");
    let ledger = s.entries();
    let kinds = ["opening_deposit", "reserve", "expire", "reserve"];
    assert_eq!(
        s.kinds(),
        kinds,
        "the expiry is recorded before the new hold"
    );
    assert_eq!(ledger[3]["reservation_id"], next["id"], "then the new hold");
    let replayed = replay(&ledger, "after an expiry");
    assert_eq!(replayed, s.figures(), "no entry shows the budget overspent");
}

#[test]
fn the_expiry_is_recorded_within_a_second() {
    let app = spawn_app();
    let s = Scene::new(&app, "swept", "100");
    let r = s.admin().hold("25", Some(1));
    let rid = id_of(&r);
    let expires = timestamp_ms(str_of(&r, "expires_at"));
    let seen = s.wait_expired(&rid);
    assert_reservation_shape(&seen, "the expired reservation");
    let settled = timestamp_ms(str_of(&seen, "settled_at"));
    let bound = expires..=expires + EXPIRY_RECORD_MS_MAX + SCHEDULING_SLACK_MS;
    assert!(bound.contains(&settled), "recorded within 1 s: {seen}");
    s.expect([100, 0, 0, 0], "the hold is back");
    let expected = [
        ("kind", json!("expire")),
        ("amount_atomic", json!("25")),
        ("reservation_id", json!(rid)),
    ];
    assert_fields(&s.last_entry(), &expected, "the expire entry");
    let rows: Vec<(String, String, String)> = app
        .audit_rows()
        .into_iter()
        .filter(|row| row.action == "reservation.expired")
        .map(|row| (row.actor, row.tenant_id, row.payload))
        .collect();
    let want = (
        "system".to_owned(),
        s.tid.clone(),
        json!({ "id": rid }).to_string(),
    );
    assert_eq!(rows, [want], "one reservation.expired event of the system");
}

#[test]
fn the_ledger_replays_to_the_budget_figures() {
    let app = spawn_app();
    let s = Scene::new(&app, "cycle", "1").new_budget("cycle", "1000");
    assert_status(&s.credit("500"), 201, "a credit");
    assert_status(&s.debit("200"), 201, "a debit");
    let r1 = s.hold_id("300");
    assert_ok(&s.commit(&r1, "120"), "a commit below the hold");
    let r2 = s.admin().hold_id("100");
    assert_ok(&s.admin().release(&r2), "a release");
    let r3 = s.hold_id("50");
    assert_ok(&s.extend(&r3, 600), "an extend");
    assert_ok(&s.commit(&r3, "80"), "a commit above the hold");
    s.hold_id("10");

    let shown = s.figures();
    assert_eq!(shown, Figures::new(1500, 200, 200, 10), "after the cycle");
    let ledger = s.entries();
    assert_eq!(replay(&ledger, "the cycle"), shown, "the entries replay");
    let sum = |kind: &str| -> u128 {
        let of_kind = ledger.iter().filter(|e| e["kind"] == kind);
        of_kind.map(|e| amount(e, "amount_atomic")).sum()
    };
    let credited = sum("opening_deposit") + sum("credit");
    assert_eq!(credited, shown.credited, "credited: deposit and credits");
    assert_eq!(sum("debit"), shown.debited, "debited is the debits");
    assert_eq!(sum("commit"), shown.spent, "spent is the commits");
    // The holds of the committed reservations (300 and 50) leave with their commits.
    let held = sum("reserve") - 300 - 50 - sum("release");
    assert_eq!(held, shown.reserved, "reserved is what stays held");
    assert_eq!(
        ledger.len(),
        10,
        "one entry per movement, none for an extend"
    );
    let read = list_all(&app, &s.token, &s.bpath("entries"));
    assert_eq!(read, ledger, "the tenant reads the same ledger");
}

#[test]
fn a_replayed_reserve_returns_the_first_answer_and_reserves_once() {
    let app = spawn_app();
    let s = Scene::new(&app, "replayed", "100");
    let (path, key, bid) = (reservations_path(&s.tid), Some("key-1"), &s.bid);
    let text = format!(r#"{{"budget_id":"{bid}","amount_atomic":"30"}}"#);
    let first = send(&app.addr, "POST", &path, &s.token, Some(&text), key, &[]);
    let rid = id_of(&assert_created(&first, &path, "the first reserve"));
    assert_eq!(first.header("idempotent-replayed"), None, "not a replay");
    let events = app.audit_count();
    let same = format!("{{ \"amount_atomic\" : \"30\",\n \"budget_id\" : \"{bid}\" }}");
    for when in ["at once", "after the commit"] {
        let again = send(&app.addr, "POST", &path, &s.token, Some(&same), key, &[]);
        assert_status(&again, 201, &format!("a replay {when}"));
        let replayed = again.header("idempotent-replayed");
        assert_eq!(replayed, Some("true"), "a replay {when} says so");
        assert_eq!(again.body, first.body, "a replay {when}: the first body");
        let location = again.header("location");
        assert_eq!(location, first.header("location"), "and its Location");
        if when == "at once" {
            s.expect([100, 0, 0, 30], "one hold only");
            assert_ok(&s.commit(&rid, "30"), "committing it");
        }
    }
    assert_events(&app, events + 1, "the commit's only");
    assert_eq!(list_all(&app, &s.token, &path).len(), 1, "one reservation");
    s.expect([100, 0, 30, 0], "one hold, committed");

    let memo = json!({ "budget_id": s.bid, "amount_atomic": "30", "memo": "x" });
    let ttl = json!({ "ttl_seconds": 5 });
    let mismatches = [
        s.post_keyed(&path, &reserve_body(&s.bid, "31", None), "key-1"),
        s.post_keyed(&path, &memo, "key-1"),
        s.post_keyed(&s.rpath(&rid, "extend"), &ttl, "key-1"),
    ];
    for (i, resp) in mismatches.iter().enumerate() {
        let ctx = format!("mismatch {i}");
        assert_problem(resp, 422, "idempotency_key_mismatch", &ctx);
    }
    let body = reserve_body(&s.bid, "80", None);
    let refused = s.post_keyed(&path, &body, "key-2");
    assert_insufficient(&refused, 70, "a keyed reserve beyond available");
    assert_status(&s.credit("10"), 201, "a top-up");
    let retry = s.post_keyed(&path, &body, "key-2");
    assert_created(&retry, &path, "the failed key's retry reserves");
    let replayed = retry.header("idempotent-replayed");
    assert_eq!(replayed, None, "a failed request bound nothing");
}

#[test]
fn keys_of_the_admin_and_of_a_tenant_never_meet() {
    let app = spawn_app();
    let a = Scene::new(&app, "keys-a", "100");
    let b = Scene::new(&app, "keys-b", "100");
    let (path, key) = (reservations_path(&a.tid), "shared-key");
    let body = reserve_body(&a.bid, "10", None);
    let by_admin = a.admin().post_keyed(&path, &body, key);
    let by_tenant = a.post_keyed(&path, &body, key);
    let b_body = reserve_body(&b.bid, "10", None);
    let by_other = b.post_keyed(&reservations_path(&b.tid), &b_body, key);
    for resp in [&by_admin, &by_tenant, &by_other] {
        assert_status(resp, 201, "a reserve with the shared key");
        let replayed = resp.header("idempotent-replayed");
        assert_eq!(replayed, None, "each answer is its own, not a replay");
    }
    let ids = (id_of(&by_admin.json()), id_of(&by_tenant.json()));
    assert_ne!(ids.0, ids.1, "two reservations");
    a.expect([100, 0, 0, 20], "two holds");
    let events = audit_of(&app, "reservation.created");
    let actors: Vec<String> = events.into_iter().map(|e| e.0).collect();
    assert_eq!(
        actors,
        ["admin", "tenant", "tenant"],
        "each principal's effect"
    );
    for (who, first) in [(a.admin(), &by_admin), (a.clone(), &by_tenant)] {
        let again = who.post_keyed(&path, &body, key);
        let replayed = again.header("idempotent-replayed");
        assert_eq!(replayed, Some("true"), "a retry is a replay");
        assert_eq!(again.body, first.body, "of its own principal's answer");
    }
    a.expect([100, 0, 0, 20], "the replays held nothing");
}

#[test]
fn a_release_without_a_body_and_with_an_empty_object_are_one_request() {
    let app = spawn_app();
    let s = Scene::new(&app, "release-keys", "100");
    let (rid, other) = (s.hold_id("10"), s.hold_id("10"));
    let path = s.rpath(&rid, "release");
    let key = Some("release-key");
    let first = send(&app.addr, "POST", &path, &s.token, None, key, &[]);
    assert_ok(&first, "a keyed release without a body");
    let events = app.audit_count();
    let empty = s.post_keyed(&path, &json!({}), "release-key");
    assert_status(&empty, 200, "the same key with {}");
    let replayed = empty.header("idempotent-replayed");
    assert_eq!(replayed, Some("true"), "{{}} replays the bodiless release");
    assert_eq!(empty.body, first.body, "the same body");
    let bare = send(&app.addr, "POST", &path, &s.token, None, key, &[]);
    let replayed = bare.header("idempotent-replayed");
    assert_eq!(replayed, Some("true"), "no body replays it again");
    assert_events(&app, events, "the replays appended none");
    let elsewhere = s.rpath(&other, "release");
    let mismatch = s.post_keyed(&elsewhere, &json!({}), "release-key");
    let ctx = "the key on another reservation's path";
    assert_problem(&mismatch, 422, "idempotency_key_mismatch", ctx);
}

#[test]
fn unknown_and_foreign_reservations_are_reservation_not_found() {
    let app = spawn_app();
    let a = Scene::new(&app, "rnf-a", "100");
    let b = Scene::new(&app, "rnf-b", "100");
    let mine = a.hold_id("10");
    let theirs = b.hold("10", None);
    let ids = [
        id_of(&theirs),
        "res_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned(),
        mine.to_ascii_lowercase(),
        format!("{mine}0"),
        a.bid.clone(),
        "nope".to_owned(),
    ];
    for rid in &ids {
        for who in [a.clone(), a.admin()] {
            let attempts = [
                ("GET", who.get(&who.rpath(rid, ""))),
                ("commit", who.commit(rid, "1")),
                ("release", who.release(rid)),
                ("extend", who.extend(rid, 60)),
            ];
            for (what, resp) in attempts {
                let ctx = format!("{what} of {rid}");
                assert_problem(&resp, 404, "reservation_not_found", &ctx);
            }
            let bad = who.post(&who.rpath(rid, "commit"), &json!({ "amount_atomic": 1 }));
            let ctx = format!("a bad commit of {rid}: 422 first");
            assert_invalid(&bad, &["amount_atomic"], &ctx);
        }
    }
    assert_eq!(b.reservation(&id_of(&theirs)), theirs, "b's is untouched");
    assert_eq!(a.state(&mine), "active", "a's is untouched");
}

#[test]
fn audit_verify_passes_after_a_mixed_workload_and_fails_after_tampering() {
    let mut app = spawn_app();
    let (a, b) = (
        Scene::new(&app, "verified-a", "1000"),
        Scene::new(&app, "verified-b", "50"),
    );
    let x = a.new_budget("x", "200");
    let credit = json!({ "amount_atomic": "100", "memo": "top-up ü" });
    assert_status(
        &a.admin().post(&a.bpath("credits"), &credit),
        201,
        "a credit",
    );
    assert_status(&a.debit("50"), 201, "a debit");
    let r1 = a.hold_id("300");
    assert_ok(&a.commit(&r1, "250"), "a commit");
    let r2 = a.hold_id("20");
    assert_ok(&a.release(&r2), "a release");
    let r3 = a.admin().hold_id("5");
    assert_ok(&a.extend(&r3, 900), "an extend");
    x.hold_id("70");
    assert_ok(&x.close(), "closing a budget with a hold");
    let short = id_of(&b.hold("10", Some(1)));
    b.wait_expired(&short);
    b.hold_id("15");
    assert_ok(&app.delete(&b.tid), "tombstoning b with a hold");
    let spent_bid = a.bid.clone();
    let entries = a.entries();
    let entry_of = |kind: &str| -> String {
        let entry = entries.iter().find(|e| e["kind"] == kind);
        let id = entry.and_then(|e| e["id"].as_str());
        id.unwrap_or_else(|| panic!("a {kind} entry in {entries:?}"))
            .to_owned()
    };
    let (release_entry, credit_entry) = (entry_of("release"), entry_of("credit"));

    assert_eq!(app.terminate().code(), Some(0), "graceful stop");
    let rows = audit_rows(&app.db());
    let head = assert_chain_valid(&rows, "the chain after the workload");
    let verify = audit_verify(&app.db_path);
    assert_eq!(verify.code, Some(0), "the untouched database: {verify:?}");
    let report = format!("ok: {} events, head {head}", rows.len());
    assert_eq!(verify.stdout.trim(), report, "its report");

    // The first copy is the control: dropping the triggers and rewriting a value unchanged
    // still verifies, so the failures below are the edits'.
    let keep: fn(SqlValue) -> SqlValue = |v| v;
    let expire: fn(SqlValue) -> SqlValue = |_| SqlValue::Text("expired".to_owned());
    // An entry relabelled, or a memo rewritten, leaves every figure as it was: only the
    // entries' match with the events they stand for finds them.
    let to_expire: fn(SqlValue) -> SqlValue = |_| SqlValue::Text("expire".to_owned());
    let other_memo: fn(SqlValue) -> SqlValue = |_| SqlValue::Text("top-up x".to_owned());
    let cases = [
        ("state", &r2, keep, 0),
        ("spent_atomic", &spent_bid, stored_amount_minus_one, 1),
        ("state", &r2, expire, 1),
        ("kind", &release_entry, to_expire, 1),
        ("memo", &credit_entry, other_memo, 1),
    ];
    for (i, (column, id, change, code)) in cases.into_iter().enumerate() {
        let copy = app.dir.path().join(format!("tampered-{i}.db"));
        std::fs::copy(&app.db_path, &copy).expect("copying the database");
        if wal_path(&app.db_path).exists() {
            std::fs::copy(wal_path(&app.db_path), wal_path(&copy)).expect("its WAL");
        }
        tamper(&open_rw(&copy), column, id, change);
        let verify = audit_verify(&copy);
        assert_eq!(
            verify.code,
            Some(code),
            "copy {i}, {column} of {id}: {verify:?}"
        );
        let why = code == 0 || !verify.stderr.trim().is_empty();
        assert!(why, "copy {i}: a failure says why: {verify:?}");
        let says = verify.stdout.starts_with("ok") == (code == 0);
        assert!(
            says,
            "copy {i}: reported ok exactly when it verifies: {verify:?}"
        );
    }
    assert_eq!(
        audit_verify(&app.db_path).code,
        Some(0),
        "the original verifies"
    );
}

/// The one table holding a column `column` and a row whose `id` is `id`: found from the
/// schema, so that the tests do not depend on the service's table names.
fn table_holding(db: &Connection, column: &str, id: &str) -> String {
    let sql = "SELECT name FROM sqlite_master WHERE type = 'table'";
    let tables: Vec<String> = db
        .prepare(sql)
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("listing the tables");
    let holds = |t: &String| {
        let sql = format!("SELECT count(*) FROM \"{t}\" WHERE id = ?1 AND \"{column}\" NOT NULL");
        db.query_row(&sql, [id], |r| r.get::<_, i64>(0))
            .is_ok_and(|n| n == 1)
    };
    let holding: Vec<String> = tables.into_iter().filter(holds).collect();
    assert_eq!(
        holding.len(),
        1,
        "one table holds {column} of {id}: {holding:?}"
    );
    holding[0].clone()
}

/// Edits one column of one row behind the service's back, after dropping the triggers of its
/// table: `change` maps the stored value to the new one.
fn tamper(db: &Connection, column: &str, id: &str, change: fn(SqlValue) -> SqlValue) {
    let table = table_holding(db, column, id);
    let sql = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?1";
    let triggers: Vec<String> = db
        .prepare(sql)
        .and_then(|mut s| s.query_map([&table], |r| r.get(0))?.collect())
        .expect("listing the triggers");
    for trigger in triggers {
        let dropped = db.execute_batch(&format!("DROP TRIGGER \"{trigger}\""));
        dropped.unwrap_or_else(|e| panic!("dropping trigger {trigger}: {e}"));
    }
    let select = format!("SELECT \"{column}\" FROM \"{table}\" WHERE id = ?1");
    let old: SqlValue = db
        .query_row(&select, [id], |r| r.get(0))
        .expect("the stored value");
    let update = format!("UPDATE \"{table}\" SET \"{column}\" = ?1 WHERE id = ?2");
    let changed = db.execute(&update, rusqlite::params![change(old), id]);
    let changed = changed.unwrap_or_else(|e| panic!("tampering with {table}.{column}: {e}"));
    assert_eq!(changed, 1, "one row of {table} tampered");
}

/// A stored amount minus one, whether the service keeps amounts as decimal text, as an
/// integer or as a 16-byte big-endian blob.
fn stored_amount_minus_one(v: SqlValue) -> SqlValue {
    match v {
        SqlValue::Text(t) => {
            let n: u128 = t
                .parse()
                .unwrap_or_else(|e| panic!("a decimal ({e}): {t:?}"));
            SqlValue::Text((n - 1).to_string())
        }
        SqlValue::Integer(n) => SqlValue::Integer(n - 1),
        SqlValue::Blob(b) if b.len() == 16 => {
            let n = u128::from_be_bytes(b.try_into().expect("16 bytes"));
            SqlValue::Blob((n - 1).to_be_bytes().to_vec())
        }
        other => panic!("an amount stored as {other:?}"),
    }
}

/// A TTL is a whole number by value, as JSON Schema's `integer` is: `60.0` and `6e1` hold
/// for 60 seconds like `60`.
#[test]
fn a_ttl_is_a_whole_number_however_it_is_written() {
    let app = spawn_app();
    let s = Scene::new(&app, "ttl-spellings", "100");
    let path = reservations_path(&s.tid);
    for raw in ["60", "60.0", "6e1", "600e-1"] {
        let text = format!(
            r#"{{"budget_id":"{}","amount_atomic":"1","ttl_seconds":{raw}}}"#,
            s.bid
        );
        let resp = send(&app.addr, "POST", &path, &s.token, Some(&text), None, &[]);
        assert_eq!(resp.status, 201, "ttl {raw}: {}", resp.describe());
        let r = resp.json();
        let held = timestamp_ms(r["expires_at"].as_str().expect("expires_at"))
            - timestamp_ms(r["created_at"].as_str().expect("created_at"));
        assert_eq!(held, 60_000, "ttl {raw} holds 60 s: {r}");
    }
}
