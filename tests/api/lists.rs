//! Lists of tenants, budgets, ledger entries and reservations: pages in id order, `limit`,
//! `after` and `next_after`, filters, bad queries, and who may list what.

use crate::helpers::*;

/// A well-formed id of no item: the ULID of 26 zeros sorts before every real one.
fn lowest_id(prefix: &str) -> String {
    format!("{prefix}_{}", "0".repeat(26))
}

/// The largest well-formed id: sorts after every real one.
fn highest_id(prefix: &str) -> String {
    format!("{prefix}_7{}", "Z".repeat(25))
}

/// Creates `n` tenants named `<prefix>-<i>`; returns their ids in creation order.
fn tenants(app: &TestApp, prefix: &str, n: usize) -> Vec<String> {
    let create = |i| tenant_id(&app.create_ok(&format!("{prefix}-{i:03}"), "10"));
    (0..n).map(create).collect()
}

/// Every id of a list read as admin.
fn all_ids(app: &TestApp, path: &str) -> Vec<String> {
    list_all(app, &app.admin(), path)
        .iter()
        .map(id_of)
        .collect()
}

/// The four lists of a scene's tenant, with the prefix of their ids.
fn lists(s: &Scene) -> [(String, &'static str); 4] {
    [
        ("/v1/tenants".to_owned(), "ten"),
        (budgets_path(&s.tid), "bud"),
        (reservations_path(&s.tid), "res"),
        (s.bpath("entries"), "ent"),
    ]
}

#[test]
fn tenants_come_in_pages_in_id_order() {
    let app = spawn_app();
    let ids = tenants(&app, "paged", 5);
    let admin = app.admin();
    let pages = [
        ("limit=2".to_owned(), &ids[..2], true),
        (format!("limit=2&after={}", ids[1]), &ids[2..4], true),
        (format!("after={}&limit=2", ids[3]), &ids[4..], false),
        ("limit=5".to_owned(), &ids[..], false),
        ("limit=4".to_owned(), &ids[..4], true),
        (format!("after={}", ids[4]), &ids[5..], false),
        ("limit=1000".to_owned(), &ids[..], false),
    ];
    for (query, expected, has_more) in pages {
        let page = list_page(&app, &admin, &format!("/v1/tenants?{query}"));
        assert_eq!(
            page_ids(&page),
            expected,
            "?{query}: the page's items in id order"
        );
        assert_eq!(page["has_more"], has_more, "?{query}: has_more");
    }
    let page = list_page(&app, &admin, "/v1/tenants");
    for item in page["data"].as_array().expect("data") {
        let read = app.get_admin(str_of(item, "id")).json();
        assert_eq!(read, *item, "a listed tenant is its overview");
    }
}

#[test]
fn the_default_limit_is_100_and_the_largest_1000() {
    let app = spawn_app();
    let ids = tenants(&app, "many", PAGE_LIMIT_DEFAULT + 1);
    let admin = app.admin();
    let first = list_page(&app, &admin, "/v1/tenants");
    let (head, tail) = ids.split_at(PAGE_LIMIT_DEFAULT);
    assert_eq!(
        page_ids(&first),
        head,
        "the default page holds 100, oldest first"
    );
    assert_eq!(
        first["has_more"], true,
        "101 tenants do not fit one default page"
    );
    let after = format!("/v1/tenants?after={}", str_of(&first, "next_after"));
    let next = list_page(&app, &admin, &after);
    assert_eq!(page_ids(&next), tail, "the second page holds the rest");
    assert_eq!(next["has_more"], false, "it is the last");
    let all = list_page(&app, &admin, &format!("/v1/tenants?limit={PAGE_LIMIT_MAX}"));
    assert_eq!(page_ids(&all), ids, "limit=1000 holds all 101");
    let one = list_page(&app, &admin, "/v1/tenants?limit=1");
    assert_eq!(page_ids(&one), ids[..1], "limit=1 holds the oldest");
}

#[test]
fn paging_never_skips_or_repeats_while_items_are_added() {
    let app = spawn_app();
    let s = Scene::new(&app, "growing", "1000");
    for i in 0..7 {
        s.new_budget(&format!("b-{i}"), "10");
        s.hold_id("1");
    }
    let admin = app.admin();
    for (round, (path, _)) in lists(&s).into_iter().enumerate().skip(1) {
        let before = all_ids(&app, &path);
        assert!(
            before.len() >= 7,
            "GET {path}: three pages to read: {before:?}"
        );
        let mut seen: Vec<String> = Vec::new();
        let mut query = with_query(&path, "limit=3");
        for page_no in 0..10 {
            let page = list_page(&app, &admin, &query);
            seen.extend(page_ids(&page));
            // Items made between pages must neither shift nor repeat what was read.
            s.new_budget(&format!("late-{round}-{page_no}"), "1");
            s.admin().hold_id("1");
            let Some(next) = page["next_after"].as_str() else {
                break;
            };
            query = with_query(&path, &format!("limit=3&after={next}"));
        }
        for pair in seen.windows(2) {
            assert!(
                pair[0] < pair[1],
                "GET {path}: ascending, no repeats: {seen:?}"
            );
        }
        assert_eq!(
            seen[..before.len()],
            before,
            "GET {path}: nothing that existed skipped"
        );
    }
}

#[test]
fn after_an_id_that_names_no_item_still_works() {
    let app = spawn_app();
    let s = Scene::new(&app, "gaps", "100");
    tenants(&app, "gaps-more", 3);
    for i in 0..4 {
        s.new_budget(&format!("g-{i}"), "1");
        let rid = s.hold_id("1");
        assert_ok(&s.commit(&rid, "1"), "a commit for the ledger");
    }
    let admin = app.admin();
    for (path, prefix) in lists(&s) {
        let ids = all_ids(&app, &path);
        assert!(ids.len() >= 4, "GET {path}: enough items: {ids:?}");
        let cases = [
            (
                "between the second and the third item",
                id_after(&ids[1]),
                &ids[2..],
            ),
            ("below every item", lowest_id(prefix), &ids[..]),
            ("above every item", highest_id(prefix), &ids[ids.len()..]),
            (
                "the last item's",
                ids[ids.len() - 1].clone(),
                &ids[ids.len()..],
            ),
        ];
        for (msg, after, expected) in cases {
            let page = list_page(&app, &admin, &with_query(&path, &format!("after={after}")));
            assert_eq!(page_ids(&page), expected, "GET {path} after an id {msg}");
            assert_eq!(
                page["has_more"], false,
                "GET {path} after an id {msg}: last page"
            );
        }
    }
}

#[test]
fn filters_select_by_state_and_budget() {
    let app = spawn_app();
    let live = tenants(&app, "live", 3);
    let dead = tenants(&app, "dead", 2);
    for id in &dead {
        assert_eq!(app.delete(id).status, 200, "tombstoning {id}");
    }
    let s = Scene::new(&app, "filtered", "1000");
    let open = s.new_budget("open", "100");
    let closed = s.new_budget("closed", "100");
    let on_closed = closed.admin().hold_id("5");
    assert_ok(&closed.close(), "closing a budget");
    let expired = id_of(&s.hold("3", Some(1)));
    let active_default = s.hold_id("1");
    let active_open = open.hold_id("1");
    let committed = open.hold_id("2");
    assert_ok(&s.commit(&committed, "2"), "committing");
    let released = s.hold_id("4");
    assert_ok(&s.release(&released), "releasing");
    s.wait_expired(&expired);

    let sorted = |ids: &[&String]| {
        let mut ids: Vec<String> = ids.iter().map(|id| (*id).clone()).collect();
        ids.sort();
        ids
    };
    let (budgets, holds) = (budgets_path(&s.tid), reservations_path(&s.tid));
    let (at, bid) = (|q: &str| with_query(&holds, q), s.bid.as_str());
    let cases = [
        (
            "/v1/tenants?state=active".to_owned(),
            [&live[..], &[s.tid.clone()][..]].concat(),
        ),
        ("/v1/tenants?state=tombstoned".to_owned(), dead.clone()),
        (
            "/v1/tenants".to_owned(),
            [&live[..], &dead[..], &[s.tid.clone()][..]].concat(),
        ),
        (
            with_query(&budgets, "state=open"),
            sorted(&[&s.bid, &open.bid]),
        ),
        (
            with_query(&budgets, "state=closed"),
            vec![closed.bid.clone()],
        ),
        (at("state=active"), sorted(&[&active_default, &active_open])),
        (at("state=committed"), vec![committed.clone()]),
        (at("state=released"), sorted(&[&on_closed, &released])),
        (at("state=expired"), vec![expired.clone()]),
        (
            at(&format!("budget_id={}", open.bid)),
            sorted(&[&active_open, &committed]),
        ),
        (
            at(&format!("budget_id={}", closed.bid)),
            vec![on_closed.clone()],
        ),
        (
            at(&format!("budget_id={bid}&state=released")),
            vec![released.clone()],
        ),
        (
            at(&format!("state=active&budget_id={bid}")),
            vec![active_default.clone()],
        ),
    ];
    let admin = app.admin();
    for (path, expected) in cases {
        assert_eq!(
            all_ids(&app, &path),
            expected,
            "GET {path}: exactly the matching items"
        );
        let first = list_page(&app, &admin, &with_query(&path, "limit=1"));
        assert_eq!(
            page_ids(&first),
            expected[..1],
            "GET {path}&limit=1: a filtered page"
        );
        let more = expected.len() > 1;
        assert_eq!(
            first["has_more"], more,
            "GET {path}&limit=1: has_more counts matches"
        );
        let state = path
            .split(['?', '&'])
            .find_map(|p| p.strip_prefix("state="));
        for item in list_all(&app, &admin, &path) {
            let shown = item["state"].as_str();
            assert!(
                state.is_none() || shown == state,
                "GET {path}: only {state:?}: {item}"
            );
        }
    }
}

#[test]
fn bad_queries_are_invalid_query_naming_each_parameter() {
    let app = spawn_app();
    let s = Scene::new(&app, "queried", "10");
    s.hold_id("1");
    let admin = app.admin();
    let common = [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        ("limit=-1", "limit"),
        ("limit=%2B5", "limit"),
        ("limit=1.5", "limit"),
        ("limit=1e2", "limit"),
        ("limit=99999999999999999999999", "limit"),
        ("limit=", "limit"),
        ("limit", "limit"),
        ("limit=1&limit=2", "limit"),
        ("after=", "after"),
        ("after=nope", "after"),
        ("colour=red", "colour"),
        ("Limit=5", "Limit"),
    ];
    for (path, prefix) in lists(&s) {
        let wrong_kind = if prefix == "ten" {
            lowest_id("bud")
        } else {
            lowest_id("ten")
        };
        let lower = highest_id(prefix).to_ascii_lowercase();
        let twice = format!("after={0}&after={0}", lowest_id(prefix));
        let mut cases: Vec<(String, Vec<&str>)> = common
            .iter()
            .map(|(q, f)| ((*q).to_owned(), vec![*f]))
            .collect();
        cases.push((format!("after={wrong_kind}"), vec!["after"]));
        cases.push((format!("after={lower}"), vec!["after"]));
        cases.push((twice, vec!["after"]));
        cases.push((
            "limit=0&after=x&colour=red".into(),
            vec!["after", "colour", "limit"],
        ));
        let states: &[&str] = match prefix {
            "ten" => &["open", "bogus", "", "ACTIVE", "active&state=active"],
            "bud" => &["active", "bogus", "", "OPEN", "open&state=open"],
            "res" => &["open", "bogus", "", "COMMITTED", "active&state=active"],
            _ => &["active", "open"],
        };
        cases.extend(states.iter().map(|v| (format!("state={v}"), vec!["state"])));
        if prefix != "ent" {
            cases.push(("state=bogus&limit=0".into(), vec!["limit", "state"]));
        }
        if prefix != "res" {
            cases.push((format!("budget_id={}", s.bid), vec!["budget_id"]));
        }
        for (query, fields) in &cases {
            let resp = get_as(&app, &admin, &with_query(&path, query));
            assert_invalid_query(&resp, fields, &format!("GET {path}?{query}"));
        }
        let good = list_page(&app, &admin, &with_query(&path, "limit=1000"));
        assert!(
            !page_ids(&good).is_empty(),
            "GET {path}: a good query answers"
        );
    }
}

#[test]
fn lists_need_the_right_principal_and_an_existing_parent() {
    let app = spawn_app();
    let a = Scene::new(&app, "lister-a", "10");
    let b = Scene::new(&app, "lister-b", "10");
    let admin = app.admin();
    let forbidden = [
        "/v1/tenants".to_owned(),
        "/v1/tenants?limit=0".to_owned(),
        budgets_path(&b.tid),
        reservations_path(&b.tid),
        b.bpath("entries"),
        budgets_path(UNKNOWN_TENANT),
        with_query(&reservations_path(&b.tid), "bogus=1"),
    ];
    for path in &forbidden {
        let ctx = format!("the tenant token on GET {path}");
        assert_problem(&a.get(path), 403, "forbidden", &ctx);
    }
    for (path, _) in lists(&a).into_iter().skip(1) {
        let own = list_all(&app, &a.token, &path);
        assert_eq!(
            own,
            list_all(&app, &admin, &path),
            "GET {path}: the tenant lists its own"
        );
    }
    let missing = [
        (budgets_path(UNKNOWN_TENANT), "tenant_not_found"),
        (reservations_path(UNKNOWN_TENANT), "tenant_not_found"),
        (
            budget_path(UNKNOWN_TENANT, &a.bid, "entries"),
            "tenant_not_found",
        ),
        (budgets_path("nope"), "tenant_not_found"),
        (a.on(&b.bid).bpath("entries"), "budget_not_found"),
        (
            a.on("bud_01ARZ3NDEKTSV4RRFFQ69G5FAV").bpath("entries"),
            "budget_not_found",
        ),
        (a.on("nope").bpath("entries"), "budget_not_found"),
    ];
    for (path, code) in &missing {
        assert_problem(
            &get_as(&app, &admin, path),
            404,
            code,
            &format!("GET {path}"),
        );
    }
    let bad_query = with_query(&budgets_path(UNKNOWN_TENANT), "limit=0");
    let ctx = "a bad query decides before an unknown tenant";
    assert_invalid_query(&get_as(&app, &admin, &bad_query), &["limit"], ctx);

    assert_eq!(app.delete(&b.tid).status, 200, "tombstoning b");
    assert_eq!(
        b.entries().len(),
        1,
        "a tombstoned tenant's ledger reads on"
    );
    let closed = all_ids(&app, &with_query(&budgets_path(&b.tid), "state=closed"));
    assert_eq!(closed, [b.bid.as_str()], "its default budget, closed");
}

#[test]
fn tenants_are_found_by_a_part_of_their_name_in_either_case() {
    let app = spawn_app();
    let names = [
        "Acme Prod",
        "acme_dev",
        "50% off",
        r"back\slash",
        "Ünïcode ACME",
        "unrelated",
    ];
    let ids: Vec<String> = names
        .iter()
        .map(|name| tenant_id(&app.create_ok(name, "1")))
        .collect();
    assert_eq!(app.delete(&ids[1]).status, 200, "tombstoning acme_dev");
    let admin = app.admin();
    let found = |query: &str| -> Vec<String> {
        let path = with_query("/v1/tenants", query);
        list_all(&app, &admin, &path)
            .iter()
            .map(|t| str_of(t, "name").to_owned())
            .collect()
    };
    let cases: &[(&str, &[&str])] = &[
        // ASCII letters match in either case; `+` and `%20` are spaces, as forms send them.
        (
            "name_contains=acme",
            &["Acme Prod", "acme_dev", "Ünïcode ACME"],
        ),
        ("name_contains=ACME%20p", &["Acme Prod"]),
        ("name_contains=e+p", &["Acme Prod"]),
        // `%`, `_` and `\` are themselves, not patterns.
        ("name_contains=_", &["acme_dev"]),
        ("name_contains=%25", &["50% off"]),
        ("name_contains=%5C", &[r"back\slash"]),
        // Other letters match as written.
        ("name_contains=%C3%9Cn", &["Ünïcode ACME"]),
        ("name_contains=%C3%BCn", &[]),
        (
            "name_contains=acme&state=active",
            &["Acme Prod", "Ünïcode ACME"],
        ),
        ("name_contains=acme&state=tombstoned", &["acme_dev"]),
        ("name_contains=nothing-has-this", &[]),
    ];
    for (query, want) in cases {
        assert_eq!(found(query), *want, "{query}");
    }
    // Pages of a search follow `next_after` like any list.
    let path = "/v1/tenants?name_contains=acme&limit=1";
    let first = get_as(&app, &admin, path);
    assert_eq!(first.status, 200, "{}", first.describe());
    let page = first.json();
    assert_eq!(page["has_more"], true);
    assert_eq!(page["next_after"], ids[0].as_str());

    for bad in [
        "name_contains=",
        "name_contains=%ZZ",
        "name_contains=%FF",
        "name_contains=a%0Ab",
        &format!("name_contains={}", "x".repeat(201)),
    ] {
        let resp = get_as(&app, &admin, &with_query("/v1/tenants", bad));
        assert_invalid_query(&resp, &["name_contains"], bad);
    }
    let budgets = with_query(&budgets_path(&ids[0]), "name_contains=acme");
    assert_invalid_query(
        &get_as(&app, &admin, &budgets),
        &["name_contains"],
        "on budgets",
    );
}
