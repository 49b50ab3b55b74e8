//! A PostgreSQL connection for the store's threads: the [`Sql`] seam run synchronously.
//!
//! The store's writer and readers are plain threads. Each holds a [`Blocking`]: a
//! `tokio_postgres` client with a current-thread runtime of its own, on which every statement
//! is run to its end (`block_on`); the connection's task runs whenever a statement does.
//!
//! The commands' SQL numbers its parameters as SQLite does (`?1`, `?2`, …); a statement is
//! rewritten to PostgreSQL's `$1`, `$2`, … and prepared once, then kept. Parameters are sent
//! in binary, as the type the server inferred for them asks ([`Param`]'s [`ToSql`]): amounts
//! as `numeric`, built digit group by digit group from the integer, never through a float.
//!
//! Errors become the store's: a clash on the two unique names is the refusal itself
//! ([`StoreError::TenantNameTaken`], [`StoreError::BudgetNameTaken`]); a connection that is
//! gone, a server that is shutting down, full or read-only, and a transaction that lost a
//! race (serialization, deadlock, a lock not granted, a cancelled statement) are
//! [`StoreError::Unavailable`]; anything else is [`StoreError::Internal`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Statement};

use super::explain;
use crate::store::StoreError;
use crate::store::sql::{self, Param, Row, RowError, Sql};

/// A parameter's encoding error, as `tokio_postgres` takes it.
type BindError = Box<dyn std::error::Error + Sync + Send>;

/// The bounds of every store connection's session: a transaction left idle (its instance hung
/// or cut off mid-batch) is ended by the server after 10 s, so no instance holds the chain's
/// lock longer; a batch waits 5 s at most for that lock, then fails `Unavailable` (a `503`);
/// no statement runs longer than 30 s.
const SESSION_BOUNDS: &str = "SET idle_in_transaction_session_timeout = '10s'; \
     SET lock_timeout = '5s'; SET statement_timeout = '30s'";

/// A PostgreSQL connection used synchronously, from one thread, with its prepared statements.
pub(crate) struct Blocking {
    /// The client; its connection's task runs on `runtime`.
    client: Client,
    /// The statements prepared so far, by the SQL as the caller gave it (with `?N`).
    statements: HashMap<String, Statement>,
    /// The runtime every statement is run on, and the connection's task with it.
    runtime: tokio::runtime::Runtime,
    /// Where to connect again, for a connection that may be replaced between two statements
    /// when it is found closed (a reader's); `None` for the writer's, which is replaced
    /// only between transactions, by the writer.
    reconnect: Option<String>,
    /// Inside [`Sql::in_snapshot`]: the connection is not replaced until the snapshot ends.
    in_snapshot: bool,
    /// Statements sent ([`Sql::send`]) and not yet run: they go to the server together with
    /// the next statement that must be answered, in one round trip.
    pending: Vec<Pending>,
}

/// The statements sent in one round trip, at most; more are run at once.
const PIPELINE_MAX: usize = 64;

/// A statement sent and not yet run, with its parameters.
struct Pending {
    statement: Statement,
    params: Vec<Owned>,
}

/// A parameter kept until its statement runs.
#[derive(Debug)]
enum Owned {
    Null,
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
    Amount(u128),
}

impl Owned {
    fn new(param: &Param<'_>) -> Self {
        match *param {
            Param::Null => Self::Null,
            Param::Text(text) => Self::Text(text.to_owned()),
            Param::Int(n) => Self::Int(n),
            Param::Bytes(bytes) => Self::Bytes(bytes.to_vec()),
            Param::Amount(amount) => Self::Amount(amount),
        }
    }

    fn param(&self) -> Param<'_> {
        match self {
            Self::Null => Param::Null,
            Self::Text(text) => Param::Text(text),
            Self::Int(n) => Param::Int(*n),
            Self::Bytes(bytes) => Param::Bytes(bytes),
            Self::Amount(amount) => Param::Amount(*amount),
        }
    }
}

impl ToSql for Owned {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BindError> {
        self.param().to_sql(ty, out)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// What is run last in a round trip, after the statements sent: the one whose answer is
/// awaited.
enum Last<'a> {
    /// Nothing: the statements sent only.
    Nothing,
    /// A prepared query, and its parameters.
    Query(&'a Statement, &'a [Param<'a>]),
    /// Statements without parameters, unprepared.
    Batch(&'a str),
}

/// What the last statement of a round trip answered.
enum Answer {
    Nothing,
    Rows(Vec<tokio_postgres::Row>),
}

impl Blocking {
    /// Connects to the database at `url` (see [`super::connect`]).
    pub(crate) fn connect(url: &str) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime for PostgreSQL: {e}"))?;
        let client = runtime.block_on(super::connect(url))?;
        let mut db = Self {
            client,
            statements: HashMap::new(),
            runtime,
            reconnect: None,
            in_snapshot: false,
            pending: Vec::new(),
        };
        db.batch(SESSION_BOUNDS)
            .map_err(|e| format!("cannot set the session's bounds: {e:?}"))?;
        Ok(db)
    }

    /// Connects to the database at `url` for reads: a connection found closed before a
    /// statement is replaced, so that a reader outlives a restart or a fail-over of the
    /// server (the read that finds it broken fails).
    pub(crate) fn connect_for_reads(url: &str) -> Result<Self, String> {
        let mut db = Self::connect(url)?;
        db.reconnect = Some(url.to_owned());
        Ok(db)
    }

    /// Applies the schema where it is missing (see [`super::create_schema`]).
    pub(crate) fn create_schema(&mut self) -> Result<(), String> {
        self.runtime
            .block_on(super::create_schema(&mut self.client))
    }

    /// Replaces the connection with a new one to `url`, dropping what was prepared on the
    /// old one. A transaction open on the old one is rolled back by the server.
    pub(crate) fn reconnect(&mut self, url: &str) -> Result<(), StoreError> {
        let client = self
            .runtime
            .block_on(super::connect(url))
            .map_err(StoreError::Unavailable)?;
        self.client = client;
        self.statements.clear();
        // What was sent on the old connection died with its transaction.
        self.pending.clear();
        self.batch(SESSION_BOUNDS)
    }

    /// Whether the connection is gone, so that the thread connects anew. A connection the
    /// server ended while nothing ran is noticed by the next statement, which fails
    /// [`StoreError::Unavailable`].
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Runs `sql`, one or more statements without parameters (`BEGIN`, `COMMIT`,
    /// `ROLLBACK`, `SAVEPOINT` …), unprepared.
    pub(crate) fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.round_trip(Last::Batch(sql)).map(drop)
    }

    /// Runs the statements sent, then `last`, in one round trip: every request is written
    /// before any answer is awaited. The first error in order wins; after it, the server
    /// refuses the rest of the transaction anyway.
    fn round_trip(&mut self, last: Last<'_>) -> Result<Answer, StoreError> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            // The usual case outside a write: no futures to juggle.
            return match last {
                Last::Nothing => Ok(Answer::Nothing),
                Last::Query(statement, params) => self
                    .runtime
                    .block_on(self.client.query(statement, &bound(params)))
                    .map(Answer::Rows)
                    .map_err(|e| store_error(&e)),
                Last::Batch(sql) => self
                    .runtime
                    .block_on(self.client.batch_execute(sql))
                    .map(|()| Answer::Nothing)
                    .map_err(|e| store_error(&e)),
            };
        }
        let client = &self.client;
        let bound_pending: Vec<Vec<&(dyn ToSql + Sync)>> = pending
            .iter()
            .map(|p| p.params.iter().map(|o| o as &(dyn ToSql + Sync)).collect())
            .collect();
        let last_params = match &last {
            Last::Query(_, params) => bound(params),
            _ => Vec::new(),
        };
        self.runtime.block_on(async {
            type Sent<'f> = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + 'f>>;
            let mut sent: Vec<Sent<'_>> = pending
                .iter()
                .zip(&bound_pending)
                .map(|(p, params)| Box::pin(client.execute(&p.statement, params)) as Sent<'_>)
                .collect();
            type Awaited<'f> =
                Pin<Box<dyn Future<Output = Result<Answer, tokio_postgres::Error>> + 'f>>;
            let mut awaited: Awaited<'_> =
                match last {
                    Last::Nothing => Box::pin(async { Ok(Answer::Nothing) }),
                    Last::Query(statement, _) => Box::pin(async {
                        client
                            .query(statement, &last_params)
                            .await
                            .map(Answer::Rows)
                    }),
                    Last::Batch(sql) => Box::pin(async move {
                        client.batch_execute(sql).await.map(|()| Answer::Nothing)
                    }),
                };
            // Every future is polled in order, so each writes its request before the next;
            // then all are polled until each has its answer.
            let mut results: Vec<Option<Result<u64, tokio_postgres::Error>>> =
                sent.iter().map(|_| None).collect();
            let mut answer = None;
            std::future::poll_fn(|cx| {
                for (future, result) in sent.iter_mut().zip(results.iter_mut()) {
                    if result.is_none()
                        && let Poll::Ready(done) = future.as_mut().poll(cx)
                    {
                        *result = Some(done);
                    }
                }
                if answer.is_none()
                    && let Poll::Ready(done) = awaited.as_mut().poll(cx)
                {
                    answer = Some(done);
                }
                if answer.is_some() && results.iter().all(Option::is_some) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            for result in results.into_iter().flatten() {
                result.map_err(|e| store_error(&e))?;
            }
            answer
                .expect("polled to its end")
                .map_err(|e| store_error(&e))
        })
    }

    /// Runs `op`, and once more on a new connection when a reader's connection turns out
    /// closed as it runs (the server restarted, or failed over, while it was idle). Only
    /// outside a snapshot: a statement of a snapshot never moves to another connection.
    fn retried<T>(
        &mut self,
        mut op: impl FnMut(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match op(self) {
            Err(StoreError::Unavailable(_))
                if self.reconnect.is_some() && !self.in_snapshot && self.client.is_closed() =>
            {
                self.reconnect_if_closed()?;
                op(self)
            }
            result => result,
        }
    }

    /// Replaces a reader's connection that is found closed.
    fn reconnect_if_closed(&mut self) -> Result<(), StoreError> {
        match self.reconnect.clone() {
            Some(url) if self.client.is_closed() => self.reconnect(&url),
            _ => Ok(()),
        }
    }

    /// The statement for `sql`, prepared on first use.
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if !self.in_snapshot {
            self.reconnect_if_closed()?;
        }
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self
            .runtime
            .block_on(self.client.prepare(&numbered(sql)))
            .map_err(|e| store_error(&e))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// The parameters as `tokio_postgres` takes them.
fn bound<'p>(params: &'p [Param<'_>]) -> Vec<&'p (dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl Sql for Blocking {
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        self.flush()?;
        let statement = self.statement(sql)?;
        let changed = self
            .runtime
            .block_on(self.client.execute(&statement, &bound(params)))
            .map_err(|e| store_error(&e))?;
        usize::try_from(changed)
            .map_err(|_| StoreError::Internal(format!("{changed} rows changed")))
    }

    fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
    ) -> Result<Vec<T>, StoreError> {
        let rows = self.retried(|db| {
            let statement = db.statement(sql)?;
            match db.round_trip(Last::Query(&statement, params))? {
                Answer::Rows(rows) => Ok(rows),
                Answer::Nothing => Err(StoreError::Internal("a query answered no rows".into())),
            }
        })?;
        rows.iter()
            .map(|row| read(row).map_err(StoreError::from))
            .collect()
    }

    fn send(&mut self, sql: &str, params: &[Param<'_>]) -> Result<(), StoreError> {
        let statement = self.statement(sql)?;
        self.pending.push(Pending {
            statement,
            params: params.iter().map(Owned::new).collect(),
        });
        if self.pending.len() >= PIPELINE_MAX {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.round_trip(Last::Nothing).map(drop)
    }

    fn run(&mut self, sql: &str) -> Result<(), StoreError> {
        self.batch(sql)
    }

    /// A read-only transaction at `REPEATABLE READ` (one snapshot for all its statements),
    /// ended whatever happens, a panic in `read` included.
    fn in_snapshot<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.in_snapshot {
            return read(self);
        }
        self.retried(|db| db.batch("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"))?;
        self.in_snapshot = true;
        sql::ended(self, read, |db| {
            db.in_snapshot = false;
            db.batch("ROLLBACK")
        })
    }
}

/// The store's error for `e`: a clash on a unique name as its refusal, what the database
/// cannot take now as [`StoreError::Unavailable`], anything else as [`StoreError::Internal`].
pub(crate) fn store_error(e: &tokio_postgres::Error) -> StoreError {
    if let Some(code) = e.code() {
        if *code == SqlState::UNIQUE_VIOLATION {
            match e.as_db_error().and_then(|d| d.constraint()) {
                Some("tenants_active_name") => return StoreError::TenantNameTaken,
                Some("budgets_open_name") => return StoreError::BudgetNameTaken,
                _ => {}
            }
        }
        if unavailable(code.code()) {
            return StoreError::Unavailable(explain(e));
        }
    }
    if e.is_closed() || broken(e) {
        return StoreError::Unavailable(explain(e));
    }
    StoreError::Internal(explain(e))
}

/// Whether SQLSTATE `code` says the database cannot take the statement now, though it may
/// later or elsewhere: the connection (class 08), a shutdown or a start (57P01, 57P02,
/// 57P03), resources (class 53), a read-only server (25006), a lost race (40001, 40P01,
/// 55P03), a cancelled statement (57014).
fn unavailable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "25006" | "40001" | "40P01" | "55P03" | "57014"
        )
}

/// Whether `e` comes from the connection's socket (reset, cut short): the connection is
/// broken, as good as closed.
fn broken(e: &tokio_postgres::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(inner) = cause {
        if inner.is::<std::io::Error>() {
            return true;
        }
        cause = inner.source();
    }
    false
}

/// `sql` with its numbered parameters as PostgreSQL writes them: each `?` followed by
/// digits, outside a string literal, becomes `$` (`?12` is `$12`). Any other `?` (an
/// operator) is left alone.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // A doubled quote inside a literal closes and reopens it: the same either way.
            '\'' => quoted = !quoted,
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// The kinds of column a parameter can be sent for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// `text`, `varchar`, `char`, `name`, or a type the server left unknown.
    Text,
    /// `numeric`.
    Numeric,
    /// `bigint`.
    Int8,
    /// `integer`.
    Int4,
    /// `smallint`.
    Int2,
    /// `bytea`.
    Bytea,
    /// Anything else: no parameter is sent for it.
    Other,
}

impl Target {
    /// The kind of `ty`.
    fn of(ty: &Type) -> Self {
        match ty {
            t if [
                Type::TEXT,
                Type::VARCHAR,
                Type::BPCHAR,
                Type::NAME,
                Type::UNKNOWN,
            ]
            .contains(t) =>
            {
                Self::Text
            }
            t if *t == Type::NUMERIC => Self::Numeric,
            t if *t == Type::INT8 => Self::Int8,
            t if *t == Type::INT4 => Self::Int4,
            t if *t == Type::INT2 => Self::Int2,
            t if *t == Type::BYTEA => Self::Bytea,
            _ => Self::Other,
        }
    }
}

impl Param<'_> {
    /// What the parameter is, without its value (which may be a secret).
    fn kind(&self) -> &'static str {
        match self {
            Param::Null => "NULL",
            Param::Text(_) => "text",
            Param::Int(_) => "integer",
            Param::Bytes(_) => "bytes",
            Param::Amount(_) => "amount",
        }
    }
}

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BindError> {
        let out_of_range = || -> BindError { format!("an integer out of range for {ty}").into() };
        match (*self, Target::of(ty)) {
            (Param::Null, _) => return Ok(IsNull::Yes),
            (Param::Text(text), Target::Text) => out.extend_from_slice(text.as_bytes()),
            (Param::Text(text), Target::Numeric) => {
                if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err("a text bound as numeric is not a whole non-negative number".into());
                }
                put_numeric(false, text, out)?;
            }
            (Param::Int(n), Target::Int8) => out.extend_from_slice(&n.to_be_bytes()),
            (Param::Int(n), Target::Int4) => {
                let n = i32::try_from(n).map_err(|_| out_of_range())?;
                out.extend_from_slice(&n.to_be_bytes());
            }
            (Param::Int(n), Target::Int2) => {
                let n = i16::try_from(n).map_err(|_| out_of_range())?;
                out.extend_from_slice(&n.to_be_bytes());
            }
            (Param::Int(n), Target::Text) => out.extend_from_slice(n.to_string().as_bytes()),
            (Param::Int(n), Target::Numeric) => {
                put_numeric(n < 0, &n.unsigned_abs().to_string(), out)?;
            }
            (Param::Bytes(bytes), Target::Bytea) => out.extend_from_slice(bytes),
            (Param::Amount(n), Target::Numeric) => put_numeric(false, &n.to_string(), out)?,
            (Param::Amount(n), Target::Text) => out.extend_from_slice(n.to_string().as_bytes()),
            (param, _) => {
                return Err(
                    format!("a parameter of {} cannot be sent as {ty}", param.kind()).into(),
                );
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Writes the whole number of the ASCII decimal `digits` (negative if `negative`) in
/// PostgreSQL's binary `numeric`: the number of digit groups, the weight of the first, the
/// sign, the display scale (0), then the base-10000 groups, most significant first, without
/// the zero groups at the end (their weight says them).
fn put_numeric(negative: bool, digits: &str, out: &mut BytesMut) -> Result<(), BindError> {
    let digits = digits.trim_start_matches('0').as_bytes();
    // The groups of four digits, counted from the units; the first may be shorter.
    let first = match digits.len() % 4 {
        0 => 4,
        short => short,
    };
    let mut groups: Vec<u16> = Vec::with_capacity(digits.len().div_ceil(4));
    let mut at = 0;
    while at < digits.len() {
        let end = if at == 0 { first } else { at + 4 };
        let group = digits[at..end]
            .iter()
            .fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
        groups.push(group);
        at = end;
    }
    let weight = match groups.len() {
        0 => 0,
        n => i16::try_from(n - 1).map_err(|_| "a number too large for numeric")?,
    };
    while groups.last() == Some(&0) {
        groups.pop();
    }
    let ndigits = i16::try_from(groups.len()).map_err(|_| "a number too large for numeric")?;
    let sign: u16 = if negative && ndigits > 0 { 0x4000 } else { 0 };
    out.extend_from_slice(&ndigits.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    for group in groups {
        out.extend_from_slice(&group.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tokio_postgres::types::FromSql;

    use super::*;
    use crate::store::postgres::Decimal;
    use crate::store::postgres::scratch::Scratch;
    use crate::store::sql::text;

    fn encode(param: Param<'_>, ty: &Type) -> Result<Vec<u8>, BindError> {
        let mut out = BytesMut::new();
        param.to_sql_checked(ty, &mut out)?;
        Ok(out.to_vec())
    }

    fn decode(raw: &[u8]) -> String {
        Decimal::from_sql(&Type::NUMERIC, raw).expect("a numeric").0
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
    fn numbered_parameters_become_dollars_outside_literals() {
        for (sql, pg) in [
            ("SELECT ?1", "SELECT $1"),
            (
                "UPDATE t SET a = ?12 WHERE b = ?2",
                "UPDATE t SET a = $12 WHERE b = $2",
            ),
            ("SELECT ?1||?2", "SELECT $1||$2"),
            ("SELECT '?1', ?1", "SELECT '?1', $1"),
            ("SELECT 'it''s ?1', ?3", "SELECT 'it''s ?1', $3"),
            ("SELECT '', ?1, '?2'", "SELECT '', $1, '?2'"),
            ("SELECT j ? 'k', ?a, ?", "SELECT j ? 'k', ?a, ?"),
            ("SELECT ?", "SELECT ?"),
            ("SELECT 'é?1', ?1 -- ü", "SELECT 'é?1', $1 -- ü"),
            ("", ""),
        ] {
            assert_eq!(numbered(sql), pg, "{sql}");
        }
    }

    #[test]
    fn amounts_are_numerics_the_decoder_reads_back() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            9999,
            10_000,
            10_001,
            99_990_000,
            100_000_000,
            1_000_000_000_000,
            10u128.pow(20),
            12_345_678_900_000_000,
            u128::MAX,
            u128::MAX - 1,
        ];
        values.extend((0..=38).map(|e| 10u128.pow(e)));
        for n in values {
            let raw = encode(Param::Amount(n), &Type::NUMERIC).expect("an amount");
            assert_eq!(decode(&raw), n.to_string(), "{n}");
            let text = encode(Param::Text(&n.to_string()), &Type::NUMERIC).expect("a text");
            assert_eq!(text, raw, "{n}");
        }
        // The form itself: zero has no digit groups; 10^8 is one group of weight 2.
        assert_eq!(
            encode(Param::Amount(0), &Type::NUMERIC).expect("zero"),
            [0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            encode(Param::Amount(100_000_000), &Type::NUMERIC).expect("10^8"),
            [0, 1, 0, 2, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(
            encode(Param::Amount(123_400_005_678), &Type::NUMERIC).expect("an amount"),
            [0, 3, 0, 2, 0, 0, 0, 0, 0x04, 0xD2, 0, 0, 0x16, 0x2E]
        );
        assert_eq!(
            decode(&encode(Param::Text("000120"), &Type::NUMERIC).expect("a text")),
            "120"
        );
        for n in [i64::MIN, -10_000, -1, 0, 1, i64::MAX] {
            let raw = encode(Param::Int(n), &Type::NUMERIC).expect("an integer");
            assert_eq!(decode(&raw), n.to_string(), "{n}");
        }
    }

    #[test]
    fn each_parameter_is_sent_only_as_what_it_can_be() {
        assert_eq!(encode(Param::Int(7), &Type::INT2).expect("int2"), [0, 7]);
        assert_eq!(
            encode(Param::Int(-2), &Type::INT4).expect("int4"),
            (-2i32).to_be_bytes()
        );
        assert_eq!(
            encode(Param::Int(i64::MIN), &Type::INT8).expect("int8"),
            i64::MIN.to_be_bytes()
        );
        assert_eq!(encode(Param::Int(42), &Type::TEXT).expect("text"), b"42");
        assert_eq!(
            encode(Param::Amount(u128::MAX), &Type::TEXT).expect("text"),
            u128::MAX.to_string().as_bytes()
        );
        for ty in [
            Type::TEXT,
            Type::INT4,
            Type::BYTEA,
            Type::BOOL,
            Type::NUMERIC,
        ] {
            let mut out = BytesMut::new();
            let null = Param::Null.to_sql_checked(&ty, &mut out).expect("NULL");
            assert!(matches!(null, IsNull::Yes) && out.is_empty(), "{ty}");
        }
        for (param, ty) in [
            (Param::Int(i64::from(i32::MAX) + 1), Type::INT4),
            (Param::Int(i64::from(i32::MIN) - 1), Type::INT4),
            (Param::Int(i64::from(i16::MAX) + 1), Type::INT2),
            (Param::Text("-1"), Type::NUMERIC),
            (Param::Text("1.5"), Type::NUMERIC),
            (Param::Text(""), Type::NUMERIC),
            (Param::Text("1e3"), Type::NUMERIC),
            (Param::Text("1"), Type::INT8),
            (Param::Bytes(b"x"), Type::TEXT),
            (Param::Amount(1), Type::INT8),
            (Param::Int(1), Type::BOOL),
            (Param::Text("t"), Type::BOOL),
        ] {
            assert!(encode(param, &ty).is_err(), "{param:?} as {ty}");
        }
    }

    #[test]
    fn every_parameter_is_bound_and_read_back() {
        let db = Scratch::new("bind");
        let mut conn = db.connect();
        conn.batch(
            "CREATE TABLE scratch (k integer PRIMARY KEY, t text, b bigint, i integer, \
             s smallint, y bytea, n numeric(39,0))",
        )
        .expect("a table");
        let insert =
            "INSERT INTO scratch (k, t, b, i, s, y, n) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
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
        let db = Scratch::new("unique");
        let mut conn = db.connect();
        conn.runtime
            .block_on(super::super::create_schema(&mut conn.client))
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
        let db = Scratch::new("unavailable");
        let mut conn = db.connect();
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
        let mut admin = db.admin();
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
        let mut again = db.connect();
        assert_eq!(
            one(&mut again, "SELECT count(*)::text FROM scratch", &[]),
            "0"
        );
    }

    #[test]
    fn sqlstates_that_mean_later_are_told_apart() {
        for code in [
            "08000", "08006", "57P01", "57P02", "57P03", "53100", "53300", "25006", "40001",
            "40P01", "55P03", "57014",
        ] {
            assert!(unavailable(code), "{code}");
        }
        for code in [
            "23505", "23000", "42601", "25P02", "22003", "XX000", "57000",
        ] {
            assert!(!unavailable(code), "{code}");
        }
    }
}
