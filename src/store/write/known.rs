//! What a writer knows of the tenants it wrote last, where writers share the database
//! (PostgreSQL): a batch whose every command it covers begins without waiting for a round
//! trip of reads.
//!
//! A batch read ahead ([`super::ahead`]) takes two round trips: one locks its tenants and
//! reads their budgets, the second carries the writes and the `COMMIT`. Across a network the
//! first is half of every write's wait. But the rows a batch of spends reads are, most of the
//! time, those the same writer wrote in an earlier batch: every row it writes takes the
//! version of its transaction (PostgreSQL's `xmin`), which the writer knows. So it keeps, for
//! each tenant it wrote, the budgets as it left them and the version of each row, and a batch
//! whose commands name only such tenants and budgets sends, with its `BEGIN` and without
//! waiting, a guard: the tenants' locks (`NOWAIT`), each row still at the version the writer
//! left it, and no period or threshold row beside a budget. The commands then run on what the
//! writer kept, and their writes go with the `COMMIT` as before: one round trip.
//!
//! Any write of another writer moves a row's version, whatever it changed, so a guard that
//! holds proves that the batch read what the database holds, under the tenants' locks. A
//! guard that fails aborts the transaction before anything of it took effect: every command
//! is answered busy and sent again, read ahead the usual way, and the batch's tenants are not
//! guarded again for [`DOUBT_FOR`] (another instance writes them too).
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::ahead::Wanted;
use super::guard::{Guard, Written};
use super::subscribers::Subscriber;
use crate::domain::{Budget, BudgetId, TenantId};
use crate::store::Credential;

/// Tenants a writer keeps, at most; past it, it forgets them all and starts again.
pub(crate) const KNOWN_TENANTS_MAX: usize = 100_000;

/// How long a tenant whose guard failed is read ahead the usual way.
pub(crate) const DOUBT_FOR: Duration = Duration::from_secs(60);

/// A tenant as the writer last wrote it.
#[derive(Debug)]
struct KnownTenant {
    /// Its row's version.
    version: u32,
    /// The last id stored with it.
    last_id: Option<ulid::Ulid>,
    /// What its token is checked against, where a batch read it.
    credential: Option<Credential>,
    /// Its budgets the writer wrote, each with whether the tenant is active and its row's
    /// version.
    budgets: HashMap<BudgetId, (Budget, bool, u32)>,
}

/// The tenants a writer wrote last ([`Known::remember`]), and those it doubts.
#[derive(Debug, Default)]
pub(crate) struct Known {
    tenants: HashMap<TenantId, KnownTenant>,
    doubted: HashMap<TenantId, Instant>,
    /// The enabled webhook endpoints as a batch read them ahead, with their digest.
    endpoints: Option<(Vec<Subscriber>, String)>,
    /// The last id the writer last stored with each tenant it wrote: where a batch read
    /// ahead finds another, another writer wrote the tenant since ([`Known::observe`]).
    stored: HashMap<TenantId, ulid::Ulid>,
}

/// The version PostgreSQL gives the rows a transaction writes: the low 32 bits of
/// `txid_current()`.
pub(crate) fn version_of(xid: i64) -> u32 {
    (xid & 0xFFFF_FFFF) as u32
}

impl Known {
    /// The guard of a batch whose commands want `wanted`, if the writer knows every tenant,
    /// budget (each level of it), credential and, where one may write an event, the webhook
    /// endpoints they read first, no tenant doubted, and none settles a reservation; else
    /// `None`.
    pub(crate) fn guard(&mut self, wanted: &[Wanted<'_>], now: Instant) -> Option<Guard> {
        if wanted.is_empty() {
            return None;
        }
        if self.doubted.len() > KNOWN_TENANTS_MAX {
            self.doubted.retain(|_, until| *until > now);
        }
        let mut guard = Guard::default();
        for w in wanted {
            if w.reservation.is_some() {
                return None;
            }
            if w.publishes && guard.endpoints.is_none() {
                guard.endpoints = Some(self.endpoints.clone()?);
            }
            // A tenant's create names none: it reads nothing first but the endpoints.
            let Some(tenant_id) = w.tenant else {
                if w.budget.is_some() || w.checks_token {
                    return None;
                }
                continue;
            };
            if self
                .doubted
                .get(tenant_id)
                .is_some_and(|until| *until > now)
            {
                return None;
            }
            let tenant = self.tenants.get(tenant_id)?;
            if !guard.tenants.iter().any(|(t, ..)| t == tenant_id) {
                guard
                    .tenants
                    .push((tenant_id.clone(), tenant.version, tenant.last_id));
            }
            if w.checks_token {
                let credential = tenant.credential?;
                if !guard.credentials.iter().any(|(t, _)| t == tenant_id) {
                    guard.credentials.push((tenant_id.clone(), credential));
                }
            }
            let mut at = BudgetId::parse(w.budget?);
            while let Some(id) = at {
                let (budget, active, version) = tenant.budgets.get(&id)?;
                at = budget.parent_id.clone();
                if !guard.budgets.iter().any(|(b, ..)| b.id == id) {
                    guard.budgets.push((budget.clone(), *active, *version));
                }
            }
        }
        Some(guard)
    }

    /// After a batch that committed as transaction `xid`: the tenants it locked and stored
    /// the last id `last` of are known at its version, with the budgets it wrote.
    pub(crate) fn remember(
        &mut self,
        xid: i64,
        locked: &[TenantId],
        last: Option<ulid::Ulid>,
        written: Written,
    ) {
        let Some(forgot) = written.forgot else {
            self.tenants.clear();
            return;
        };
        if last.is_none() {
            // The tenants' rows were not written: their versions are not the batch's.
            for tenant in locked {
                self.tenants.remove(tenant);
            }
            return;
        }
        if self.tenants.len() + locked.len() > KNOWN_TENANTS_MAX {
            self.tenants.clear();
        }
        let version = version_of(xid);
        for tenant in locked {
            if forgot.contains(tenant) {
                self.tenants.remove(tenant);
                continue;
            }
            let known = self
                .tenants
                .entry(tenant.clone())
                .or_insert_with(|| KnownTenant {
                    version,
                    last_id: last,
                    credential: None,
                    budgets: HashMap::new(),
                });
            known.version = version;
            known.last_id = last;
        }
        for (tenant, credential) in written.credentials {
            if let Some(known) = self.tenants.get_mut(&tenant) {
                known.credential = credential;
            }
        }
        for (budget, active) in written.budgets {
            let kept = budget.policy.is_none() && budget.thresholds.is_empty();
            if let Some(known) = self.tenants.get_mut(&budget.tenant_id) {
                if kept {
                    known
                        .budgets
                        .insert(budget.id.clone(), (budget, active, version));
                } else {
                    known.budgets.remove(&budget.id);
                }
            }
        }
    }

    /// The enabled webhook endpoints, as a batch that committed read them ahead with their
    /// `digest`.
    pub(crate) fn remember_endpoints(&mut self, enabled: Vec<Subscriber>, digest: String) {
        self.endpoints = Some((enabled, digest));
    }

    /// After a batch that committed, having stored `last` as the last id of `locked`.
    pub(crate) fn stored(&mut self, locked: &[TenantId], last: Option<ulid::Ulid>) {
        let Some(last) = last else {
            return;
        };
        if self.stored.len() + locked.len() > KNOWN_TENANTS_MAX {
            self.stored.clear();
        }
        for tenant in locked {
            self.stored.insert(tenant.clone(), last);
        }
    }

    /// A batch read ahead found `tenant` with the last id `last`: another than the writer
    /// last stored means another writer wrote the tenant since, as it may again, and a guard
    /// of it would most likely fail: it is doubted ([`Known::doubt`]).
    pub(crate) fn observe(&mut self, tenant: &TenantId, last: Option<ulid::Ulid>, now: Instant) {
        if let Some(stored) = self.stored.get(tenant)
            && Some(*stored) != last
        {
            self.doubt(std::slice::from_ref(tenant), now);
        }
    }

    /// Forgets `tenants`, and guards none of them for [`DOUBT_FOR`]: a guard of theirs failed.
    pub(crate) fn doubt(&mut self, tenants: &[TenantId], now: Instant) {
        for tenant in tenants {
            self.tenants.remove(tenant);
            self.doubted.insert(tenant.clone(), now + DOUBT_FOR);
        }
    }

    /// Forgets the webhook endpoints: a batch changed them, or a guard failed that may have
    /// been theirs.
    pub(crate) fn forget_endpoints(&mut self) {
        self.endpoints = None;
    }

    /// Forgets `tenants`: a batch of theirs did not commit, or wrote them otherwise.
    pub(crate) fn forget(&mut self, tenants: &[TenantId]) {
        for tenant in tenants {
            self.tenants.remove(tenant);
        }
    }
}
