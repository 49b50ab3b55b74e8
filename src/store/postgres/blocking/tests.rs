//! The connection as a whole against a live server (`make test` starts one): every parameter
//! bound and read back, the refusals and errors the store tells apart.

use super::*;
use crate::store::postgres::scratch::Scratch;
use crate::store::sql::text;

/// A connection to `db` as the role `tenantd`.
fn connect(db: &Scratch) -> Blocking {
    Blocking::connect(&db.url).expect("the role tenantd connects")
}

/// A connection to `db` as the superuser.
fn admin(db: &Scratch) -> Blocking {
    Blocking::connect(db.admin_url()).expect("the superuser connects")
}

/// Each row of `sql`'s result, its columns as text (`None` for NULL).
fn texts(conn: &mut Blocking, sql: &str, params: &[Param<'_>]) -> Vec<Vec<Option<String>>> {
    conn.query(sql, params, |row| {
        (0..row.len())
            .map(|i| Ok(row.column(i)?.map(|c| c.into_owned())))
            .collect()
    })
    .expect("a query")
}

fn one(conn: &mut Blocking, sql: &str, params: &[Param<'_>]) -> String {
    let rows = conn
        .query(sql, params, |row| Ok(text(row, 0)?.into_owned()))
        .expect("a query");
    assert_eq!(rows.len(), 1, "{sql}");
    rows.into_iter().next().expect("a row")
}

#[test]
fn every_parameter_is_bound_and_read_back() {
    let db = Scratch::from_env("bind");
    let mut conn = connect(&db);
    conn.batch(
        "CREATE TABLE scratch (k integer PRIMARY KEY, t text, b bigint, i integer, \
         s smallint, y bytea, n numeric(39,0))",
    )
    .expect("a table");
    let insert = "INSERT INTO scratch (k, t, b, i, s, y, n) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    let rows: [[Param<'_>; 7]; 5] = [
        [
            Param::Int(1),
            Param::Text("héllo 'x' ?1"),
            Param::Int(i64::MIN),
            Param::Int(i64::from(i32::MAX)),
            Param::Int(-7),
            Param::Bytes(&[0, 1, 255]),
            Param::Amount(u128::MAX),
        ],
        [
            Param::Int(2),
            Param::Int(-42),
            Param::Int(i64::MAX),
            Param::Int(i64::from(i32::MIN)),
            Param::Int(i64::from(i16::MAX)),
            Param::Bytes(&[]),
            Param::Text("100000000"),
        ],
        [
            Param::Int(3),
            Param::Amount(u128::MAX),
            Param::Int(0),
            Param::Int(0),
            Param::Int(0),
            Param::Bytes(b"abc"),
            Param::Int(-10_000),
        ],
        [
            Param::Int(4),
            Param::Null,
            Param::Null,
            Param::Null,
            Param::Null,
            Param::Null,
            Param::Null,
        ],
        [
            Param::Int(5),
            Param::Text(""),
            Param::Int(1),
            Param::Int(1),
            Param::Int(1),
            Param::Bytes(&[7; 32]),
            Param::Amount(0),
        ],
    ];
    for row in &rows {
        assert_eq!(conn.execute(insert, row).expect("an insert"), 1);
    }
    assert_eq!(conn.statements.len(), 1, "the insert is prepared once");
    let read = conn
        .query(
            "SELECT t, b::text, i::text, s::text, n, y FROM scratch WHERE k >= ?1 ORDER BY k",
            &[Param::Int(1)],
            |row| {
                let texts = (0..5)
                    .map(|i| Ok(row.column(i)?.map(|c| c.into_owned())))
                    .collect::<Result<Vec<_>, RowError>>()?;
                Ok((texts, row.blob(5)?.map(|b| b.into_owned())))
            },
        )
        .expect("the rows");
    let s = |v: &str| Some(v.to_owned());
    let max = u128::MAX.to_string();
    assert_eq!(
        read,
        [
            (
                vec![
                    s("héllo 'x' ?1"),
                    s(&i64::MIN.to_string()),
                    s(&i32::MAX.to_string()),
                    s("-7"),
                    s(&max),
                ],
                Some(vec![0, 1, 255]),
            ),
            (
                vec![
                    s("-42"),
                    s(&i64::MAX.to_string()),
                    s(&i32::MIN.to_string()),
                    s(&i16::MAX.to_string()),
                    s("100000000"),
                ],
                Some(vec![]),
            ),
            (
                vec![s(&max), s("0"), s("0"), s("0"), s("-10000")],
                Some(b"abc".to_vec()),
            ),
            (vec![None, None, None, None, None], None),
            (
                vec![s(""), s("1"), s("1"), s("1"), s("0")],
                Some(vec![7; 32])
            ),
        ]
    );

    // The server's own reading of the numeric the encoder sent.
    assert_eq!(
        one(
            &mut conn,
            "SELECT ?1::numeric::text",
            &[Param::Amount(u128::MAX)]
        ),
        "340282366920938463463374607431768211455"
    );
    assert_eq!(
        one(
            &mut conn,
            "SELECT (?1::numeric + 1)::text",
            &[Param::Amount(99_999_999)]
        ),
        "100000000"
    );
    // Numbers out of order, used twice, beside a literal that looks like one.
    assert_eq!(
        one(
            &mut conn,
            "SELECT ?2 || '?1' || ?1 || ?2",
            &[Param::Text("a"), Param::Text("b")]
        ),
        "b?1ab"
    );
    // A parameter the column cannot take fails the statement, which is a bug.
    for (sql, param) in [
        ("UPDATE scratch SET i = ?1 WHERE k = 1", Param::Int(1 << 40)),
        ("UPDATE scratch SET n = ?1 WHERE k = 1", Param::Text("12a")),
        ("UPDATE scratch SET t = ?1 WHERE k = 1", Param::Bytes(b"x")),
        ("UPDATE scratch SET y = ?1 WHERE k = 1", Param::Text("x")),
    ] {
        let e = conn.execute(sql, &[param]).expect_err(sql);
        assert!(matches!(e, StoreError::Internal(_)), "{sql}: {e:?}");
    }
    assert_eq!(
        texts(&mut conn, "SELECT i::text FROM scratch WHERE k = 1", &[]),
        [[s(&i32::MAX.to_string())]]
    );
    assert_eq!(
        conn.execute(
            "UPDATE scratch SET b = b + 1 WHERE k > ?1",
            &[Param::Int(2)]
        )
        .expect("an update"),
        3
    );

    // A transaction by hand: what it did is gone once rolled back.
    conn.batch("BEGIN").expect("BEGIN");
    conn.execute("DELETE FROM scratch", &[]).expect("a delete");
    conn.batch("ROLLBACK").expect("ROLLBACK");
    assert_eq!(
        one(&mut conn, "SELECT count(*)::text FROM scratch", &[]),
        "5"
    );
}

#[test]
fn a_clash_on_a_unique_name_is_the_refusal() {
    let db = Scratch::from_env("unique");
    let mut conn = connect(&db);
    conn.runtime
        .block_on(crate::store::postgres::create_schema(&mut conn.client))
        .expect("the schema");
    let tenant = "INSERT INTO tenants (id, name, state, opening_deposit_atomic, token_hash, \
                  created_at) VALUES (?1, ?2, 'active', ?3, ?4, ?5)";
    let at = "2026-01-01T00:00:00.000000Z";
    let hash = [1u8; 32];
    let insert = |conn: &mut Blocking, id: &str, name: &str| {
        conn.execute(
            tenant,
            &[
                Param::Text(id),
                Param::Text(name),
                Param::Amount(u128::MAX),
                Param::Bytes(&hash),
                Param::Text(at),
            ],
        )
    };
    assert_eq!(insert(&mut conn, "ten_1", "acme"), Ok(1));
    assert_eq!(
        insert(&mut conn, "ten_2", "acme"),
        Err(StoreError::TenantNameTaken)
    );
    // Another unique index is no refusal of a name.
    assert!(matches!(
        insert(&mut conn, "ten_1", "other"),
        Err(StoreError::Internal(_))
    ));

    let budget = "INSERT INTO budgets (id, tenant_id, name, unit, state, created_at, \
                  opening_deposit_atomic, credited_atomic, debited_atomic, spent_atomic, \
                  reserved_atomic) VALUES (?1, ?2, ?3, 'tokens', 'open', ?4, ?5, ?5, 0, 0, 0)";
    let open = |conn: &mut Blocking, id: &str, name: &str| {
        conn.execute(
            budget,
            &[
                Param::Text(id),
                Param::Text("ten_1"),
                Param::Text(name),
                Param::Text(at),
                Param::Amount(10),
            ],
        )
    };
    assert_eq!(open(&mut conn, "bud_1", "main"), Ok(1));
    assert_eq!(
        open(&mut conn, "bud_2", "main"),
        Err(StoreError::BudgetNameTaken)
    );
    assert_eq!(open(&mut conn, "bud_2", "side"), Ok(1));

    // A refusing trigger is a bug in a command, not a refusal to the client.
    let e = conn
        .execute("DELETE FROM tenants WHERE id = ?1", &[Param::Text("ten_1")])
        .expect_err("a tenant is never deleted");
    assert!(matches!(e, StoreError::Internal(_)), "{e:?}");
    let e = conn.execute("SELEC 1", &[]).expect_err("a syntax error");
    assert!(matches!(e, StoreError::Internal(_)), "{e:?}");
    assert!(!conn.is_closed());
}

#[test]
fn what_the_server_cannot_take_now_is_unavailable() {
    let db = Scratch::from_env("unavailable");
    let mut conn = connect(&db);
    conn.batch("CREATE TABLE scratch (n integer)")
        .expect("a table");

    // A read-only transaction (as on a standby).
    conn.batch("BEGIN READ ONLY").expect("BEGIN");
    let e = conn
        .execute("INSERT INTO scratch VALUES (?1)", &[Param::Int(1)])
        .expect_err("read only");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    conn.batch("ROLLBACK").expect("ROLLBACK");

    // A statement cancelled by its timeout.
    conn.batch("SET statement_timeout = 50").expect("SET");
    let e = conn
        .query("SELECT pg_sleep(5)::text", &[], |_| Ok(()))
        .expect_err("cancelled");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    conn.batch("RESET statement_timeout").expect("RESET");

    // A connection the server ended.
    let pid = one(&mut conn, "SELECT pg_backend_pid()::text", &[]);
    let pid: i64 = pid.parse().expect("a pid");
    assert!(!conn.is_closed());
    let mut admin = admin(&db);
    assert_eq!(
        one(
            &mut admin,
            "SELECT pg_terminate_backend(?1, 10000)::text",
            &[Param::Int(pid)]
        ),
        "true"
    );
    let e = conn
        .query("SELECT 1::text", &[], |_| Ok(()))
        .expect_err("the connection is gone");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(conn.is_closed());
    let e = conn
        .execute("INSERT INTO scratch VALUES (?1)", &[Param::Int(1)])
        .expect_err("still gone");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(matches!(
        conn.batch("BEGIN"),
        Err(StoreError::Unavailable(_))
    ));

    // A new connection works.
    let mut again = connect(&db);
    assert_eq!(
        one(&mut again, "SELECT count(*)::text FROM scratch", &[]),
        "0"
    );
}
