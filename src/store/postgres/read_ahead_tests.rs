//! The statements a batch reads ahead with on PostgreSQL, and the token checks a credential
//! thread answers together, planned as a store connection plans them (one generic plan, kept
//! for the connection's life), on tables never analysed: each id they list is found by its
//! key, never by reading a whole table.

use super::blocking::Blocking;
use super::scratch::Scratch;
use super::writer::STORE_LAST_IDS;
use crate::domain::{EndpointId, ReservationId, TenantId};
use crate::store::Credential;
use crate::store::queries::budgets::BUDGETS_TO_WRITE;
use crate::store::queries::reservations::RESERVATIONS_TO_SETTLE;
use crate::store::queries::tenants::{CREDENTIALS, credentials};
use crate::store::sql::{Sql, text};
use crate::store::write::ahead::{self, LOCK_TENANTS, TENANTS, Wanted};
use crate::store::write::guard::{GUARD_BUDGETS, GUARD_TENANTS};

const SCHEMA: &str = include_str!("../../../schema-postgres.sql");

/// 1,000 tenants with a budget each, in trees of four levels (`bud_1` ← `bud_2` ← `bud_3` ←
/// `bud_4`, then `bud_5` ← …; a tree across tenants, which the planner does not know): a size
/// at which a scan is the cheaper plan on paper.
const ROWS: &str = "\
    INSERT INTO tenants (id, name, state, opening_deposit_atomic, token_hash, created_at) \
    SELECT 'ten_' || g, 'tenant ' || g, 'active', 0, sha256(g::text::bytea), \
           '2026-11-29T00:00:00.000Z' \
    FROM generate_series(1, 1000) AS g; \
    INSERT INTO budgets (id, tenant_id, name, unit, state, created_at, opening_deposit_atomic, \
           credited_atomic, debited_atomic, spent_atomic, reserved_atomic, parent_id) \
    SELECT 'bud_' || g, 'ten_' || g, 'main', 'USD', 'open', '2026-11-29T00:00:00.000Z', \
           0, 0, 0, 0, 0, CASE WHEN g % 4 = 1 THEN NULL ELSE 'bud_' || (g - 1) END \
    FROM generate_series(1, 1000) AS g";

/// The plan `conn` keeps for `sql` (its `?N` parameters all text), prepared as `name` and
/// run with `args`.
fn plan(conn: &mut Blocking, name: &str, sql: &str, args: &str) -> String {
    let numbered = sql
        .replace("?1", "$1")
        .replace("?2", "$2")
        .replace("?3", "$3");
    conn.batch(&format!("PREPARE {name} AS {numbered}"))
        .expect("the statement is prepared");
    let lines = conn
        .query(&format!("EXPLAIN EXECUTE {name}({args})"), &[], |row| {
            Ok(text(row, 0)?.into_owned())
        })
        .expect("the plan is explained");
    lines.join("\n")
}

#[test]
fn a_batch_reads_ahead_and_stores_by_key_whatever_the_statistics() {
    let db = Scratch::from_env("plans");
    let mut conn = Blocking::connect(&db.url).expect("the role tenantd connects");
    let mode = conn
        .query("SHOW plan_cache_mode", &[], |row| {
            Ok(text(row, 0)?.into_owned())
        })
        .expect("the setting is read");
    assert_eq!(
        mode,
        ["force_generic_plan"],
        "a store connection keeps one plan"
    );
    conn.batch(SCHEMA).expect("the schema is created");
    conn.batch(ROWS).expect("the rows are written");
    let tenants = "'ten_7,ten_42,ten_999'";
    let statements = [
        ("the tenants that exist", TENANTS, tenants.to_owned()),
        ("the tenants locked", LOCK_TENANTS, tenants.to_owned()),
        (
            "the budgets",
            BUDGETS_TO_WRITE,
            "'bud_7,bud_42,bud_999', 'res_1,res_2'".to_owned(),
        ),
        (
            "the tenants' last ids",
            STORE_LAST_IDS,
            "'ten_7,ten_42', '01M8K0VGJAK8R2YEXC1NN2QYQ2'".to_owned(),
        ),
        ("the tokens' checks", CREDENTIALS, tenants.to_owned()),
        (
            "the reservations",
            RESERVATIONS_TO_SETTLE,
            "'res_1,res_2'".to_owned(),
        ),
        (
            "the tenants guarded",
            GUARD_TENANTS,
            "'ten_7,ten_42', '1,2', 2".to_owned(),
        ),
        (
            "the budgets guarded",
            GUARD_BUDGETS,
            "'bud_7,bud_42', '1,2', 2".to_owned(),
        ),
    ];
    conn.batch("BEGIN").expect("a transaction, for the lock");
    for (i, (what, sql, args)) in statements.into_iter().enumerate() {
        let plan = plan(&mut conn, &format!("listed_{i}"), sql, &args);
        assert!(
            plan.contains("Index") && !plan.contains("Seq Scan") && !plan.contains("Hash"),
            "{what} are not read by key:\n{plan}"
        );
    }
    // The last ids land on the tenants listed, and only there.
    conn.batch("EXECUTE listed_3('ten_7,ten_42', '01M8K0VGJAK8R2YEXC1NN2QYQ2')")
        .expect("the last ids are stored");
    let stored = conn
        .query(
            "SELECT id || ' ' || coalesce(last_id, '-') FROM tenants \
             WHERE id IN ('ten_7', 'ten_42', 'ten_999') ORDER BY id",
            &[],
            |row| Ok(text(row, 0)?.into_owned()),
        )
        .expect("the last ids are read");
    assert_eq!(
        stored,
        [
            "ten_42 01M8K0VGJAK8R2YEXC1NN2QYQ2",
            "ten_7 01M8K0VGJAK8R2YEXC1NN2QYQ2",
            "ten_999 -"
        ]
    );
    // A budget at the fourth level comes with its three ancestors.
    let mut read = conn
        .query("EXECUTE listed_2('bud_8', '')", &[], |row| {
            Ok(text(row, 1)?.into_owned())
        })
        .expect("the budgets are read");
    read.sort();
    assert_eq!(read, ["bud_5", "bud_6", "bud_7", "bud_8"], "every level");
    // A reservation listed brings its budget and that one's ancestors, and is read itself.
    let id = ReservationId::from_ulid(ulid::Ulid::from_parts(9, 9));
    conn.batch(&format!(
        "INSERT INTO reservations (id, tenant_id, budget_id, state, amount_atomic, \
         committed_atomic, memo, created_at, expires_at, settled_at) VALUES ('{id}', 'ten_7', \
         'bud_7', 'active', 3, NULL, NULL, '2026-11-29T00:00:00.000Z', \
         '2026-11-29T00:01:00.000Z', NULL)"
    ))
    .expect("a reservation is written");
    let mut read = conn
        .query(
            &format!("EXECUTE listed_2('', '{id},res_none')"),
            &[],
            |row| Ok(text(row, 1)?.into_owned()),
        )
        .expect("the budgets are read");
    read.sort();
    assert_eq!(
        read,
        ["bud_5", "bud_6", "bud_7"],
        "the reservation's budget, every level"
    );
    let held = conn
        .query(&format!("EXECUTE listed_5('{id},res_none')"), &[], |row| {
            Ok(format!("{} {}", text(row, 0)?, text(row, 2)?))
        })
        .expect("the reservations are read");
    assert_eq!(
        held,
        [format!("{id} bud_7")],
        "the one of the two listed that exists"
    );
    conn.batch("ROLLBACK").expect("the transaction ends");

    // Token checks together: each answer in its id's place, none for no such tenant.
    let id = |n: u64| TenantId::from_ulid(ulid::Ulid::from_parts(n, 1));
    let (live, gone, missing) = (id(1), id(2), id(3));
    for (tenant, state, at) in [
        (&live, "active", "NULL"),
        (&gone, "tombstoned", "created_at"),
    ] {
        conn.batch(&format!(
            "INSERT INTO tenants (id, name, state, opening_deposit_atomic, token_hash, \
             created_at) VALUES ('{tenant}', '{tenant}', 'active', 0, sha256('{tenant}'), \
             '2026-11-29T00:00:00.000Z'); UPDATE tenants SET state = '{state}', \
             tombstoned_at = {at} WHERE id = '{tenant}'"
        ))
        .expect("a tenant is written");
    }
    let credential = |tenant: &TenantId, active| {
        Some(Credential {
            token_hash: crate::crypto::sha256(tenant.as_str().as_bytes()),
            active,
        })
    };
    let ids = [live.clone(), missing.clone(), gone.clone(), live.clone()];
    assert_eq!(
        credentials(&mut conn, &ids).expect("the checks are read"),
        [
            credential(&live, true),
            None,
            credential(&gone, false),
            credential(&live, true)
        ]
    );
    assert_eq!(
        credentials(&mut conn, &ids[2..3]).expect("one check is read"),
        [credential(&gone, false)]
    );

    // The enabled endpoints come with what a batch reads ahead where one of its commands may
    // write an event, a tenant's create (which names no tenant yet) included, and not
    // otherwise.
    conn.batch(&format!(
        "INSERT INTO webhook_endpoints (id, url, event_types, state, disabled_reason, \
         created_at, secret) VALUES \
         ('{on}', 'https://a.example/', '*', 'enabled', NULL, '2026-11-29T00:00:00.000Z', \
          sha256('a')), \
         ('{off}', 'https://b.example/', '*', 'disabled', 'manual', \
          '2026-11-29T00:00:00.000Z', sha256('b'))",
        on = EndpointId::from_ulid(ulid::Ulid::from_parts(1, 1)),
        off = EndpointId::from_ulid(ulid::Ulid::from_parts(2, 1)),
    ))
    .expect("two endpoints are written");
    for (publishes, tenant) in [(true, Some(&live)), (false, Some(&live)), (true, None)] {
        let wanted = [Wanted {
            tenant,
            budget: None,
            reservation: None,
            publishes,
            checks_token: false,
        }];
        conn.batch("BEGIN").expect("a transaction, for the lock");
        let read = ahead::read(&mut conn, true, "SELECT 'first'", &wanted).expect("read ahead");
        conn.batch("ROLLBACK").expect("the transaction ends");
        assert_eq!(read.firsts, ["first"]);
        let ids = read
            .subscribers
            .map(|found| found.into_iter().map(|s| s.id).collect::<Vec<_>>());
        let expected = publishes.then(|| vec![EndpointId::from_ulid(ulid::Ulid::from_parts(1, 1))]);
        assert_eq!(ids, expected, "publishes: {publishes}, tenant: {tenant:?}");
        assert_eq!(read.locked.len(), usize::from(tenant.is_some()));
    }

    // The credentials of the tenants whose commands check a token come with what is read
    // ahead, after the locks: each such tenant's, `None` for one that does not exist.
    let wanted = [&live, &gone, &missing, &live].map(|tenant| Wanted {
        tenant: Some(tenant),
        budget: None,
        reservation: None,
        publishes: false,
        checks_token: true,
    });
    conn.batch("BEGIN").expect("a transaction, for the lock");
    let read = ahead::read(&mut conn, true, "SELECT 'first'", &wanted).expect("read ahead");
    conn.batch("ROLLBACK").expect("the transaction ends");
    let mut found = read.credentials;
    found.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        found,
        [
            (live.clone(), credential(&live, true)),
            (gone.clone(), credential(&gone, false)),
            (missing, None),
        ]
    );
}
