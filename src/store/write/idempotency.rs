//! Binding a write to its `Idempotency-Key`: the stored response of a bound key is replayed,
//! a fresh write keeps its rendered response beside its effect in the same transaction, and
//! records older than the replay window are erased. Every time here is the writer's clock,
//! as for everything else it writes.

use crate::store::sql::{Param, Sql, text};
use crate::store::write::state::WriterState;
use crate::store::{Keyed, StoreError, StoredResponse, Written};

impl<D: Sql> WriterState<D> {
    /// The one idempotency wrapper: with a key, the stored response if the key is bound (or
    /// `IdempotencyMismatch` if it is bound to another request); else runs `op` and keeps its
    /// rendered response beside its effect, in the same transaction.
    pub(crate) fn keyed<T>(
        &mut self,
        keyed: Option<Keyed<T>>,
        op: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<Written<T>, StoreError> {
        let Some(keyed) = keyed else {
            return op(self).map(Written::Fresh);
        };
        if D::SHARED {
            self.lock_key(&keyed.principal, keyed.key.as_str())?;
        }
        let now_ms = self.now().unix_ms();
        if let Some(stored) = self.replay(&keyed, now_ms)? {
            return Ok(Written::Replayed(stored));
        }
        let value = op(self)?;
        let Keyed {
            principal,
            key,
            method,
            path,
            fingerprint,
            render,
        } = keyed;
        let response = render(&value);
        // An expired record of the same key may still be waiting for the purge: replaced.
        let location = response.location.as_deref();
        self.db().send(
            "INSERT INTO idempotency_keys (principal, key, method, path, fingerprint, status, \
             location, response_body, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (principal, key) DO UPDATE SET method = excluded.method, \
             path = excluded.path, fingerprint = excluded.fingerprint, \
             status = excluded.status, location = excluded.location, \
             response_body = excluded.response_body, created_ms = excluded.created_ms",
            &[
                principal.as_str().into(),
                key.as_str().into(),
                method.into(),
                path.as_str().into(),
                Param::Bytes(fingerprint.as_bytes()),
                Param::Int(i64::from(response.status)),
                location.into(),
                response.body.as_str().into(),
                Param::Int(i64::try_from(now_ms).unwrap_or(i64::MAX)),
            ],
        )?;
        Ok(Written::Fresh(value))
    }

    /// Takes the key's lock for the rest of the batch, without waiting, where writers share
    /// the database: the same key sent through two instances at once (of the admin, whose
    /// writes name no tenant yet, or under two tenants) runs once, and the other finds it
    /// bound. A transaction-scoped advisory lock on a hash of the principal and the key; held
    /// by another writer, the command is [`StoreError::Busy`] and is sent again.
    fn lock_key(&mut self, principal: &str, key: &str) -> Result<(), StoreError> {
        let scoped = format!("{principal}\n{key}");
        let taken = self.db().query_opt(
            "SELECT CAST(pg_try_advisory_xact_lock(hashtextextended(?1, 0)) AS TEXT)",
            &[scoped.as_str().into()],
            |row| Ok(text(row, 0)? == "true"),
        )?;
        if taken == Some(true) {
            Ok(())
        } else {
            Err(StoreError::Busy(
                "another writer holds the idempotency key".into(),
            ))
        }
    }

    /// The stored response for `keyed` if its key is bound and unexpired at `now_ms`.
    fn replay<T>(
        &mut self,
        keyed: &Keyed<T>,
        now_ms: u64,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let cutoff = self.expiry_cutoff_ms(now_ms);
        let found = self.db().query_opt(
            "SELECT method, path, fingerprint, CAST(status AS TEXT), location, response_body \
             FROM idempotency_keys WHERE principal = ?1 AND key = ?2 AND created_ms > ?3",
            &[
                keyed.principal.as_str().into(),
                keyed.key.as_str().into(),
                Param::Int(cutoff),
            ],
            |row| {
                let status = text(row, 3)?;
                Ok((
                    text(row, 0)?.into_owned(),
                    text(row, 1)?.into_owned(),
                    row.blob(2)?.unwrap_or_default().into_owned(),
                    status
                        .parse::<u16>()
                        .map_err(|_| row.corrupt(3, format!("a bad status {status:?}")))?,
                    row.column(4)?.map(|l| l.into_owned()),
                    text(row, 5)?.into_owned(),
                ))
            },
        )?;
        let Some((method, path, fingerprint, status, location, body)) = found else {
            return Ok(None);
        };
        let same = method == keyed.method
            && path == keyed.path
            && fingerprint.as_slice() == keyed.fingerprint.as_bytes();
        if !same {
            return Err(StoreError::IdempotencyMismatch);
        }
        Ok(Some(StoredResponse {
            status,
            location,
            body,
        }))
    }

    /// Records made at or before this instant (in ms) are past the replay window.
    fn expiry_cutoff_ms(&self, now_ms: u64) -> i64 {
        let ttl_ms = u64::try_from(self.idempotency_ttl().as_millis()).unwrap_or(u64::MAX);
        i64::try_from(now_ms.saturating_sub(ttl_ms)).unwrap_or(i64::MAX)
    }

    /// Erases the records past the replay window; how many.
    pub(crate) fn purge_expired(&mut self) -> Result<usize, StoreError> {
        let now_ms = self.now().unix_ms();
        let cutoff = self.expiry_cutoff_ms(now_ms);
        let purged = self.db().execute(
            "DELETE FROM idempotency_keys WHERE created_ms <= ?1",
            &[Param::Int(cutoff)],
        )?;
        self.counts().purged(purged);
        Ok(purged)
    }
}
