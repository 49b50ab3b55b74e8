//! A tenant token checked by the write it comes with, where writers share the database
//! (PostgreSQL): the token's check is then one more query in the round trip that begins the
//! write's batch ([`super::ahead`]), where on its own it is a round trip before the write is
//! even queued. The router lets only a route whose one effect is that write defer the check,
//! and answers nothing but a `401` before the check has passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use subtle::ConstantTimeEq;

use super::state::WriterState;
use super::{BudgetsAhead, WriteOp};
use crate::domain::{ReservationId, TenantId};
use crate::store::sql::Sql;
use crate::store::{Credential, StoreError, queries};

/// A presented tenant token, to be checked, and what the last check of it found.
pub(crate) struct TokenCheck {
    /// The tenant the token names.
    tenant: TenantId,
    /// The SHA-256 of the token: the plaintext is not kept.
    hash: [u8; 32],
    /// [`UNCHECKED`], [`ADMITTED`] or [`REFUSED`]: the last check's finding.
    verdict: AtomicU8,
}

const UNCHECKED: u8 = 0;
const ADMITTED: u8 = 1;
const REFUSED: u8 = 2;

impl TokenCheck {
    /// A token of `tenant` whose SHA-256 is `hash`, not checked yet.
    pub(crate) fn new(tenant: TenantId, hash: [u8; 32]) -> Arc<Self> {
        Arc::new(Self {
            tenant,
            hash,
            verdict: AtomicU8::new(UNCHECKED),
        })
    }

    /// The tenant the token names.
    pub(crate) fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Checks the token against its tenant's `credential` (`None`: no such tenant), and
    /// keeps the finding: whether the tenant exists and is active, and the token is its own.
    pub(crate) fn judge(&self, credential: Option<Credential>) -> bool {
        let admitted = admits(credential, &self.hash);
        let verdict = if admitted { ADMITTED } else { REFUSED };
        self.verdict.store(verdict, Ordering::Release);
        admitted
    }

    /// What the last check found, if one ran: the last, since a write found busy is sent
    /// again and checked again.
    pub(crate) fn verdict(&self) -> Option<bool> {
        match self.verdict.load(Ordering::Acquire) {
            ADMITTED => Some(true),
            REFUSED => Some(false),
            _ => None,
        }
    }
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCheck")
            .field("tenant", &self.tenant)
            .field("verdict", &self.verdict())
            .finish_non_exhaustive()
    }
}

/// Whether a token whose SHA-256 is `hash` is the token of a tenant whose credential is
/// `credential`, the tenant active. The hashes are compared in constant time.
pub(crate) fn admits(credential: Option<Credential>, hash: &[u8; 32]) -> bool {
    credential.is_some_and(|c| bool::from(c.token_hash.ct_eq(hash)) & c.active)
}

/// An operation that runs only once the token it came with is checked and admitted, in its
/// batch's transaction; a refused token is answered [`StoreError::Unauthenticated`], and
/// nothing of the operation runs.
#[derive(Debug, Clone)]
pub(crate) struct Checked<O> {
    /// The operation.
    pub(crate) op: O,
    /// The token it came with.
    pub(crate) check: Arc<TokenCheck>,
}

impl<O: WriteOp> WriteOp for Checked<O> {
    type Output = O::Output;

    const BUDGETS_AHEAD: BudgetsAhead = O::BUDGETS_AHEAD;

    fn run<D: Sql>(self, state: &mut WriterState<D>) -> Result<O::Output, StoreError> {
        if !state.admits(&self.check)? {
            return Err(StoreError::Unauthenticated);
        }
        self.op.run(state)
    }

    fn tenant(&self) -> Option<&TenantId> {
        self.op.tenant()
    }

    fn budget(&self) -> Option<&str> {
        self.op.budget()
    }

    fn reservation(&self) -> Option<&ReservationId> {
        self.op.reservation()
    }

    fn publishes(&self) -> bool {
        self.op.publishes()
    }

    fn checks_token(&self) -> bool {
        true
    }
}

impl<D: Sql> WriterState<D> {
    /// Checks `check`'s token against its tenant's credential: as the batch read it ahead
    /// (after its tenants' locks, so a tombstone committed before is seen), or read now.
    pub(crate) fn admits(&mut self, check: &TokenCheck) -> Result<bool, StoreError> {
        let credential = match self.ahead.credential(check.tenant()) {
            Some(read) => read,
            None => queries::tenants::credential(self.db(), check.tenant())?,
        };
        Ok(check.judge(credential))
    }
}
