//! The statements a batch reads ahead with on PostgreSQL, planned as a writer's connection
//! plans them (one generic plan, kept for the connection's life), on tables never analysed:
//! each id they list is found by its key, never by reading a whole table.

use super::blocking::Blocking;
use super::scratch::Scratch;
use crate::store::queries::budgets::BUDGETS_TO_WRITE;
use crate::store::sql::{Sql, text};
use crate::store::write::ahead::{LOCK_TENANTS, TENANTS};

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
    let numbered = sql.replace("?1", "$1").replace("?2", "$2");
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
            "'bud_7,bud_42,bud_999'".to_owned(),
        ),
        (
            "a tenant's last id",
            "UPDATE tenants SET last_id = ?2 WHERE id = ?1",
            "'ten_7', '01M8K0VGJAK8R2YEXC1NN2QYQ2'".to_owned(),
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
    // A budget at the fourth level comes with its three ancestors.
    let mut read = conn
        .query("EXECUTE listed_2('bud_8')", &[], |row| {
            Ok(text(row, 1)?.into_owned())
        })
        .expect("the budgets are read");
    read.sort();
    assert_eq!(read, ["bud_5", "bud_6", "bud_7", "bud_8"], "every level");
    conn.batch("ROLLBACK").expect("the transaction ends");
}
