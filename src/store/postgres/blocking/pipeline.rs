//! Statements sent together: a command's writes ([`Sql::send`]) wait for the next statement
//! that must be answered, then go to the server with it in one round trip, every request
//! written before any answer is awaited.
//!
//! [`Sql::send`]: crate::store::sql::Sql::send

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use tokio_postgres::Statement;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use super::Blocking;
use super::errors::store_error;
use crate::store::StoreError;
use crate::store::postgres::codec::{BindError, bound};
use crate::store::sql::Param;

/// The statements sent in one round trip, at most; more are run at once. A batch whose
/// commands read nothing the batch did not read ahead sends all its writes with its `COMMIT`:
/// six or so a command, so a batch of 256 commands takes about two round trips of them.
pub(super) const PIPELINE_MAX: usize = 1024;

/// A statement sent and not yet run, with its parameters.
pub(super) struct Pending {
    pub(super) statement: Statement,
    pub(super) params: Vec<Owned>,
    /// Whether its answer's first value is kept ([`Blocking::send_kept`]).
    pub(super) kept: bool,
}

/// A parameter kept until its statement runs.
#[derive(Debug)]
pub(super) enum Owned {
    Null,
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
    Amount(u128),
}

impl Owned {
    pub(super) fn new(param: &Param<'_>) -> Self {
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
pub(super) enum Last<'a> {
    /// Nothing: the statements sent only.
    Nothing,
    /// A prepared query, and its parameters.
    Query(&'a Statement, &'a [Param<'a>]),
    /// Prepared queries, run in order, and their parameters.
    Queries(Vec<(Statement, &'a [Param<'a>])>),
    /// Statements without parameters, unprepared.
    Batch(&'a str),
}

/// What the last statement of a round trip answered.
pub(super) enum Answer {
    Nothing,
    Rows(Vec<tokio_postgres::Row>),
    /// The rows of each of [`Last::Queries`], in their order.
    Lists(Vec<Vec<tokio_postgres::Row>>),
}

impl Blocking {
    /// Runs `sql`, one or more statements without parameters (`BEGIN`, `COMMIT`,
    /// `ROLLBACK`, `SAVEPOINT` …), unprepared.
    pub(crate) fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.round_trip(Last::Batch(sql)).map(drop)
    }

    /// Runs the statements sent, then `last`, in one round trip: every request is written
    /// before any answer is awaited. The first error in order wins; after it, the server
    /// refuses the rest of the transaction anyway. An error of a statement sent is noted for
    /// [`Sql::take_send_failure`](crate::store::sql::Sql::take_send_failure).
    pub(super) fn round_trip(&mut self, last: Last<'_>) -> Result<Answer, StoreError> {
        if matches!(last, Last::Batch(_)) {
            self.touched += 1;
        }
        let answer = self.round_trip_once(last);
        if answer.is_err() {
            self.touched += 1;
        }
        answer
    }

    fn round_trip_once(&mut self, last: Last<'_>) -> Result<Answer, StoreError> {
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
                Last::Queries(_) => self.pipelined(&[], last).map_err(|(_, e)| e),
            };
        }
        self.pipelined(&pending, last).map_err(|(sent, e)| {
            self.send_failed |= sent;
            e
        })
    }

    /// Runs `pending`, then `last`, in one round trip; an error tells whether it was one of
    /// `pending`'s.
    fn pipelined(
        &mut self,
        pending: &[Pending],
        last: Last<'_>,
    ) -> Result<Answer, (bool, StoreError)> {
        let client = &self.client;
        let bound_pending: Vec<Vec<&(dyn ToSql + Sync)>> = pending
            .iter()
            .map(|p| p.params.iter().map(|o| o as &(dyn ToSql + Sync)).collect())
            .collect();
        let queries: Vec<(Statement, Vec<&(dyn ToSql + Sync)>)> = match &last {
            Last::Query(statement, params) => vec![((*statement).clone(), bound(params))],
            Last::Queries(queries) => queries
                .iter()
                .map(|(statement, params)| (statement.clone(), bound(params)))
                .collect(),
            Last::Nothing | Last::Batch(_) => Vec::new(),
        };
        let mut kept: Vec<String> = Vec::new();
        let answer = self.runtime.block_on(async {
            // A statement sent answers the first value of its first row where it is kept.
            type Sent<'f> =
                Pin<Box<dyn Future<Output = Result<Option<String>, tokio_postgres::Error>> + 'f>>;
            let mut sent: Vec<Sent<'_>> = pending
                .iter()
                .zip(&bound_pending)
                .map(|(p, params)| {
                    if p.kept {
                        Box::pin(async move {
                            let rows = client.query(&p.statement, params).await?;
                            Ok(rows.first().and_then(|row| row.try_get(0).ok()))
                        }) as Sent<'_>
                    } else {
                        Box::pin(
                            async move { client.execute(&p.statement, params).await.map(|_| None) },
                        ) as Sent<'_>
                    }
                })
                .collect();
            type Rows = Vec<tokio_postgres::Row>;
            type Awaited<'f> =
                Pin<Box<dyn Future<Output = Result<Rows, tokio_postgres::Error>> + 'f>>;
            let mut awaited: Vec<Awaited<'_>> = match &last {
                &Last::Batch(sql) => {
                    vec![Box::pin(async move {
                        client.batch_execute(sql).await.map(|()| Vec::new())
                    })]
                }
                _ => queries
                    .iter()
                    .map(|(statement, params)| {
                        Box::pin(client.query(statement, params)) as Awaited<'_>
                    })
                    .collect(),
            };
            // Every future is polled in order, so each writes its request before the next;
            // then all are polled until each has its answer.
            let mut results: Vec<Option<Result<Option<String>, tokio_postgres::Error>>> =
                sent.iter().map(|_| None).collect();
            let mut answers: Vec<Option<Result<Rows, tokio_postgres::Error>>> =
                awaited.iter().map(|_| None).collect();
            std::future::poll_fn(|cx| {
                for (future, result) in sent.iter_mut().zip(results.iter_mut()) {
                    if result.is_none()
                        && let Poll::Ready(done) = future.as_mut().poll(cx)
                    {
                        *result = Some(done);
                    }
                }
                for (future, answer) in awaited.iter_mut().zip(answers.iter_mut()) {
                    if answer.is_none()
                        && let Poll::Ready(done) = future.as_mut().poll(cx)
                    {
                        *answer = Some(done);
                    }
                }
                if answers.iter().all(Option::is_some) && results.iter().all(Option::is_some) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            // What a statement kept answered is kept even when a later one failed.
            for result in &mut results {
                if let Some(Ok(Some(value))) = result {
                    kept.push(std::mem::take(value));
                }
            }
            for result in results.into_iter().flatten() {
                result.map_err(|e| (true, store_error(&e)))?;
            }
            let mut lists = answers
                .into_iter()
                .map(|answer| {
                    answer
                        .expect("polled to its end")
                        .map_err(|e| (false, store_error(&e)))
                })
                .collect::<Result<Vec<Rows>, _>>()?;
            Ok(match last {
                Last::Nothing | Last::Batch(_) => Answer::Nothing,
                Last::Query(..) => Answer::Rows(lists.pop().unwrap_or_default()),
                Last::Queries(_) => Answer::Lists(lists),
            })
        });
        self.kept.extend(kept);
        answer
    }

    /// Sends `sql` as [`Sql::send`] does, and keeps the first value of its first row (as
    /// text) for [`Blocking::take_kept`] once it is answered, even where a statement after
    /// it fails or the connection is lost before their answers.
    ///
    /// [`Sql::send`]: crate::store::sql::Sql::send
    pub(crate) fn send_kept(&mut self, sql: &str, params: &[Param<'_>]) -> Result<(), StoreError> {
        self.pend(sql, params, true)
    }

    /// Adds `sql` to the statements sent, its first value `kept` or not.
    pub(super) fn pend(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        kept: bool,
    ) -> Result<(), StoreError> {
        let statement = self.statement(sql)?;
        self.touched += 1;
        self.pending.push(Pending {
            statement,
            params: params.iter().map(Owned::new).collect(),
            kept,
        });
        Ok(())
    }

    /// The values kept by the statements sent with [`Blocking::send_kept`] that were
    /// answered, in order; taken.
    pub(crate) fn take_kept(&mut self) -> Vec<String> {
        std::mem::take(&mut self.kept)
    }
}
