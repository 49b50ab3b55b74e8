//! The PostgreSQL side of `tenantd copy`: a database read in one snapshot, or an empty one
//! written in one transaction that holds the chain head, so no instance writes meanwhile.

use std::collections::HashMap;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Statement};

use crate::audit::{Head, VerifyError};
use crate::store::copy::{CHUNK_ROWS, Kind, Row, Table, Value};

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Text(text) => text.as_str().to_sql(ty, out),
            Value::Integer(n) => n.to_sql(ty, out),
            Value::Bytes(bytes) => bytes.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        [Type::TEXT, Type::INT8, Type::BYTEA].contains(ty)
    }

    to_sql_checked!();
}

/// The cast that gives a parameter of `kind` its type (amounts travel as text).
fn param_type(kind: Kind) -> &'static str {
    match kind {
        Kind::Text | Kind::Amount => "text",
        Kind::Integer => "bigint",
        Kind::Bytes => "bytea",
    }
}

/// A database, as a copy's source or target.
pub(in crate::store) struct Database {
    client: Client,
    name: String,
    /// The insert of a table's chunk of so many rows, prepared.
    inserts: HashMap<(&'static str, usize), Statement>,
}

impl Database {
    /// The database at `url`, read in one snapshot from now on; never written.
    pub(in crate::store) async fn source(url: &str) -> Result<Self, String> {
        let client = super::connect(url).await?;
        let name = super::describe(url);
        super::expect_schema(&client)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        Self::begin(
            client,
            name,
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        )
        .await
    }

    /// The database at `url` as a target: its schema made if need be, then one transaction
    /// holding the chain's lock until [`Database::commit`], so no instance writes meanwhile.
    pub(in crate::store) async fn create(url: &str) -> Result<Self, String> {
        let mut client = super::connect(url).await?;
        let name = super::describe(url);
        super::create_schema(&mut client)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let begin = "BEGIN; SELECT id FROM chain_head WHERE id = 1 FOR UPDATE;";
        Self::begin(client, name, begin).await
    }

    /// Begins the copy's transaction with the statements `begin`.
    async fn begin(client: Client, name: String, begin: &str) -> Result<Self, String> {
        client
            .batch_execute(begin)
            .await
            .map_err(|e| format!("{name}: {}", super::explain(&e)))?;
        Ok(Self {
            client,
            name,
            inserts: HashMap::new(),
        })
    }

    fn failed(&self, table: &Table, e: &tokio_postgres::Error) -> String {
        format!("{}: {}: {}", self.name, table.name, super::explain(e))
    }

    pub(in crate::store) async fn rows(
        &mut self,
        table: &Table,
        after: Option<&[Value]>,
    ) -> Result<Vec<Row>, String> {
        // Amounts are read as their decimal text, integers as bigint (a status is an integer).
        let columns: Vec<String> = table
            .columns
            .iter()
            .map(|(name, kind)| match kind {
                Kind::Amount => format!("{name}::text"),
                Kind::Integer => format!("{name}::bigint"),
                Kind::Text | Kind::Bytes => (*name).to_owned(),
            })
            .collect();
        let key: Vec<&str> = table.columns[..table.key].iter().map(|(n, _)| *n).collect();
        let key = key.join(", ");
        let mut sql = format!("SELECT {} FROM {}", columns.join(", "), table.name);
        if after.is_some() {
            let marks: Vec<String> = table.columns[..table.key]
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| format!("${}::{}", i + 1, param_type(*kind)))
                .collect();
            sql.push_str(&format!(" WHERE ({key}) > ({})", marks.join(", ")));
        }
        sql.push_str(&format!(" ORDER BY {key} LIMIT {CHUNK_ROWS}"));
        let params: Vec<&(dyn ToSql + Sync)> = after
            .unwrap_or(&[])
            .iter()
            .map(|v| v as &(dyn ToSql + Sync))
            .collect();
        let found = self
            .client
            .query(&sql, &params)
            .await
            .map_err(|e| self.failed(table, &e))?;
        let mut read = Vec::with_capacity(found.len());
        for row in &found {
            let mut values = Vec::with_capacity(table.columns.len());
            for (i, (_, kind)) in table.columns.iter().enumerate() {
                let value = match kind {
                    Kind::Text | Kind::Amount => row
                        .try_get::<_, Option<String>>(i)
                        .map(|v| v.map(Value::Text)),
                    Kind::Integer => row
                        .try_get::<_, Option<i64>>(i)
                        .map(|v| v.map(Value::Integer)),
                    Kind::Bytes => row
                        .try_get::<_, Option<Vec<u8>>>(i)
                        .map(|v| v.map(Value::Bytes)),
                };
                values.push(
                    value
                        .map_err(|e| self.failed(table, &e))?
                        .unwrap_or(Value::Null),
                );
            }
            read.push(values);
        }
        Ok(read)
    }

    /// Inserts `rows` with one statement (one round trip), prepared once per table and
    /// number of rows.
    pub(in crate::store) async fn insert(
        &mut self,
        table: &Table,
        rows: &[Row],
    ) -> Result<(), String> {
        if rows.is_empty() {
            return Ok(());
        }
        let key = (table.name, rows.len());
        if !self.inserts.contains_key(&key) {
            let columns: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
            let width = columns.len();
            let tuples: Vec<String> = (0..rows.len())
                .map(|r| {
                    let marks: Vec<String> = table
                        .columns
                        .iter()
                        .enumerate()
                        .map(|(i, (_, kind))| {
                            let n = r * width + i + 1;
                            match kind {
                                Kind::Amount => format!("${n}::text::numeric"),
                                other => format!("${n}::{}", param_type(*other)),
                            }
                        })
                        .collect();
                    format!("({})", marks.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO {} ({}) VALUES {}",
                table.name,
                columns.join(", "),
                tuples.join(", ")
            );
            let statement = self
                .client
                .prepare(&sql)
                .await
                .map_err(|e| self.failed(table, &e))?;
            self.inserts.insert(key, statement);
        }
        let statement = &self.inserts[&key];
        let params: Vec<&(dyn ToSql + Sync)> = rows
            .iter()
            .flatten()
            .map(|v| v as &(dyn ToSql + Sync))
            .collect();
        if let Err(e) = self.client.execute(statement, &params).await {
            return Err(self.failed(table, &e));
        }
        Ok(())
    }

    pub(in crate::store) async fn count(&mut self, table: &Table) -> Result<u64, String> {
        let row = self
            .client
            .query_one(&format!("SELECT count(*) FROM {}", table.name), &[])
            .await
            .map_err(|e| self.failed(table, &e))?;
        Ok(row.get::<_, i64>(0).unsigned_abs())
    }

    pub(in crate::store) async fn commit(&mut self) -> Result<(), String> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| format!("{}: COMMIT: {}", self.name, super::explain(&e)))
    }

    pub(in crate::store) async fn head(&mut self) -> Result<Head, String> {
        let row = self
            .client
            .query_opt(
                "SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1",
                &[],
            )
            .await
            .map_err(|e| format!("{}: {}", self.name, super::explain(&e)))?;
        Ok(match row {
            Some(row) => Head {
                seq: row.get(0),
                hash: row.get(1),
            },
            None => Head::genesis(),
        })
    }

    /// Verifies the chain as this target's open transaction sees it.
    pub(in crate::store) async fn verify_uncommitted(&mut self) -> Result<Head, String> {
        super::verify::verify_in_transaction(&self.client)
            .await
            .map_err(|e: VerifyError| format!("{}: {e}; nothing was kept", self.name))
    }
}
