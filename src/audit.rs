//! The audit chain: pure hash-chain code and its verifier.
//!
//! Each row's `hash` is the lower-case hex SHA-256 of
//! `prev_hash "\n" seq "\n" occurred_at "\n" actor "\n" action "\n" tenant_id "\n" payload`,
//! so anyone with `sqlite3` and `sha256sum` can recompute the chain without this program.

use rusqlite::{Connection, OptionalExtension};

use crate::ids::{hex, sha256};

/// `prev_hash` of the first event.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Who acts in the proof-of-concept deployment.
pub const ACTOR_ADMIN: &str = "admin";

pub const ACTION_TENANT_CREATED: &str = "tenant.created";
pub const ACTION_TENANT_TOMBSTONED: &str = "tenant.tombstoned";

/// One row of `audit_events`, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub seq: i64,
    pub occurred_at: String,
    pub actor: String,
    pub action: String,
    pub tenant_id: String,
    pub payload: String,
}

/// The hash of `event` linked after `prev_hash`.
pub fn link_hash(prev_hash: &str, event: &Event) -> String {
    let preimage = format!(
        "{prev_hash}\n{}\n{}\n{}\n{}\n{}\n{}",
        event.seq, event.occurred_at, event.actor, event.action, event.tenant_id, event.payload
    );
    hex(&sha256(preimage.as_bytes()))
}

/// The chain's last link: where the next event attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub seq: i64,
    pub hash: String,
}

impl Head {
    pub fn genesis() -> Self {
        Self {
            seq: 0,
            hash: GENESIS_HASH.to_owned(),
        }
    }

    /// Reads the head from the database (the genesis head for an empty chain).
    pub fn load(conn: &Connection) -> rusqlite::Result<Self> {
        let mut stmt =
            conn.prepare_cached("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")?;
        let mut rows = stmt.query([])?;
        match rows.next()? {
            Some(row) => Ok(Self {
                seq: row.get(0)?,
                hash: row.get(1)?,
            }),
            None => Ok(Self::genesis()),
        }
    }
}

/// Appends one event after `head` inside the caller's transaction and returns the new head.
/// The schema's insert trigger refuses a row that does not continue the chain.
pub fn append(
    conn: &Connection,
    head: &Head,
    occurred_at: &str,
    action: &str,
    tenant_id: &str,
    payload: &str,
) -> rusqlite::Result<Head> {
    let event = Event {
        seq: head.seq + 1,
        occurred_at: occurred_at.to_owned(),
        actor: ACTOR_ADMIN.to_owned(),
        action: action.to_owned(),
        tenant_id: tenant_id.to_owned(),
        payload: payload.to_owned(),
    };
    let hash = link_hash(&head.hash, &event);
    conn.prepare_cached(
        "INSERT INTO audit_events \
         (seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(rusqlite::params![
        event.seq,
        event.occurred_at,
        event.actor,
        event.action,
        event.tenant_id,
        event.payload,
        head.hash,
        hash,
    ])?;
    Ok(Head {
        seq: event.seq,
        hash,
    })
}

/// Why a chain does not verify.
#[derive(Debug, PartialEq, Eq)]
pub enum VerifyError {
    /// The row at `seq` breaks the chain, for the reason given.
    Broken { seq: i64, reason: String },
    /// The chain is whole but does not account for the tenants table: an event is missing
    /// (its tail cut, say) or one names no tenant.
    Unaccounted { head_seq: i64, reason: String },
    /// The chain could not be read at all.
    Sqlite(String),
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Broken { seq, reason } => write!(f, "audit chain broken at seq {seq}: {reason}"),
            Self::Unaccounted { head_seq, reason } => write!(
                f,
                "audit chain (ending at seq {head_seq}) does not account for the tenants: {reason}"
            ),
            Self::Sqlite(cause) => write!(f, "cannot read the audit chain: {cause}"),
        }
    }
}

/// Walks the whole chain in `seq` order, checking numbering, links and hashes. Returns the
/// head (`seq` is the number of events).
pub fn verify(conn: &Connection) -> Result<Head, VerifyError> {
    let sqlite = |e: rusqlite::Error| VerifyError::Sqlite(e.to_string());
    let mut stmt = conn
        .prepare(
            "SELECT seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash \
             FROM audit_events ORDER BY seq",
        )
        .map_err(sqlite)?;
    let mut rows = stmt.query([]).map_err(sqlite)?;
    let mut head = Head::genesis();
    while let Some(row) = rows.next().map_err(sqlite)? {
        // A row whose columns cannot be read as text (a tampered type, say) is broken too.
        let unreadable = |e: rusqlite::Error| VerifyError::Broken {
            seq: row.get::<_, i64>(0).unwrap_or(head.seq + 1),
            reason: format!("a column cannot be read: {e}"),
        };
        let event = Event {
            seq: row.get(0).map_err(unreadable)?,
            occurred_at: row.get(1).map_err(unreadable)?,
            actor: row.get(2).map_err(unreadable)?,
            action: row.get(3).map_err(unreadable)?,
            tenant_id: row.get(4).map_err(unreadable)?,
            payload: row.get(5).map_err(unreadable)?,
        };
        let prev_hash: String = row.get(6).map_err(unreadable)?;
        let hash: String = row.get(7).map_err(unreadable)?;
        let broken = |reason: String| VerifyError::Broken {
            seq: event.seq,
            reason,
        };
        if event.seq != head.seq + 1 {
            return Err(VerifyError::Broken {
                seq: head.seq + 1,
                reason: format!("missing; the next stored seq is {}", event.seq),
            });
        }
        if prev_hash != head.hash {
            return Err(broken(
                "prev_hash does not match the hash of the previous event".into(),
            ));
        }
        if link_hash(&prev_hash, &event) != hash {
            return Err(broken(
                "hash does not match the event's contents (tampered?)".into(),
            ));
        }
        head = Head {
            seq: event.seq,
            hash,
        };
    }
    Ok(head)
}

/// Checks that the chain accounts for every tenant: each has exactly one `tenant.created`
/// event, a `tenant.tombstoned` event exactly when it is tombstoned, and no event names a
/// tenant that is not there. A hash chain alone cannot show that its tail was cut; the
/// tenants table can. Streams grouped rows, so memory stays flat however many tenants.
pub fn verify_tenants(conn: &Connection, head: &Head) -> Result<(), VerifyError> {
    let unaccounted = |reason: String| VerifyError::Unaccounted {
        head_seq: head.seq,
        reason,
    };
    let sqlite = |e: rusqlite::Error| VerifyError::Sqlite(e.to_string());
    let mismatch: Option<(String, String, i64, i64)> = conn
        .query_row(
            "SELECT t.id, t.state, coalesce(e.created, 0), coalesce(e.tombstoned, 0)
             FROM tenants t LEFT JOIN (
                 SELECT tenant_id,
                        sum(action = 'tenant.created') AS created,
                        sum(action = 'tenant.tombstoned') AS tombstoned
                 FROM audit_events GROUP BY tenant_id
             ) e ON e.tenant_id = t.id
             WHERE coalesce(e.created, 0) != 1
                OR coalesce(e.tombstoned, 0) != (t.state = 'tombstoned')
             LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .optional()
        .map_err(sqlite)?;
    if let Some((id, state, created, tombstoned)) = mismatch {
        return Err(unaccounted(format!(
            "tenant {id} ({state}) has {created} tenant.created and {tombstoned} \
             tenant.tombstoned events"
        )));
    }
    let stray: Option<(i64, String)> = conn
        .query_row(
            "SELECT seq, tenant_id FROM audit_events a
             WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = a.tenant_id)
             ORDER BY seq LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(sqlite)?;
    match stray {
        Some((seq, id)) => Err(VerifyError::Broken {
            seq,
            reason: format!("names tenant {id}, which is not in the tenants table"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> Event {
        Event {
            seq,
            occurred_at: "2026-11-22T10:00:00.123Z".into(),
            actor: "admin".into(),
            action: "tenant.created".into(),
            tenant_id: "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            payload:
                r#"{"id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV","name":"a","opening_deposit_atomic":"1"}"#
                    .into(),
        }
    }

    #[test]
    fn link_hash_is_sha256_of_the_documented_preimage() {
        let e = event(1);
        let preimage = format!(
            "{GENESIS_HASH}\n1\n{}\nadmin\ntenant.created\n{}\n{}",
            e.occurred_at, e.tenant_id, e.payload
        );
        assert_eq!(
            link_hash(GENESIS_HASH, &e),
            hex(&sha256(preimage.as_bytes()))
        );
    }

    #[test]
    fn the_chain_must_account_for_every_tenant() {
        let conn = Connection::open_in_memory().expect("db");
        conn.execute_batch(include_str!("../schema.sql"))
            .expect("schema");
        let tenant = |id: &str, state: &str| {
            let tombstoned_at = if state == "active" { "NULL" } else { "'t'" };
            conn.execute_batch(&format!(
                "INSERT INTO tenants VALUES ('{id}', '{id}', '{state}', '1', '1', zeroblob(32), 't', {tombstoned_at})"
            ))
            .expect("tenant");
        };
        let mut head = Head::genesis();
        let event = |head: &mut Head, action: &str, id: &str| {
            *head = append(&conn, head, "t", action, id, "{}").expect("append");
        };
        tenant("ten_A", "active");
        event(&mut head, ACTION_TENANT_CREATED, "ten_A");
        assert_eq!(verify_tenants(&conn, &head), Ok(()));
        tenant("ten_B", "tombstoned");
        event(&mut head, ACTION_TENANT_CREATED, "ten_B");
        assert!(
            matches!(
                verify_tenants(&conn, &head),
                Err(VerifyError::Unaccounted { .. })
            ),
            "a tombstoned tenant without its tombstone event"
        );
        event(&mut head, ACTION_TENANT_TOMBSTONED, "ten_B");
        assert_eq!(verify_tenants(&conn, &head), Ok(()));
        event(&mut head, ACTION_TENANT_CREATED, "ten_GHOST");
        assert!(
            matches!(
                verify_tenants(&conn, &head),
                Err(VerifyError::Broken { seq: 4, .. })
            ),
            "an event for a tenant that is not there"
        );
    }

    #[test]
    fn link_hash_depends_on_every_field() {
        let base = event(1);
        let h = link_hash(GENESIS_HASH, &base);
        let variants = [
            Event {
                seq: 2,
                ..base.clone()
            },
            Event {
                occurred_at: "2026-11-22T10:00:00.124Z".into(),
                ..base.clone()
            },
            Event {
                actor: "root".into(),
                ..base.clone()
            },
            Event {
                action: "tenant.tombstoned".into(),
                ..base.clone()
            },
            Event {
                tenant_id: "ten_x".into(),
                ..base.clone()
            },
            Event {
                payload: "{}".into(),
                ..base.clone()
            },
        ];
        for v in &variants {
            assert_ne!(link_hash(GENESIS_HASH, v), h, "{v:?}");
        }
        assert_ne!(link_hash(&"1".repeat(64), &base), h);
    }
}
