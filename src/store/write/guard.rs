//! A batch begun on what its writer knows ([`super::known`]): the statements that guard it,
//! and what it takes and leaves.

use super::subscribers::Subscriber;
use crate::domain::{Budget, TenantId};
use crate::store::Credential;

/// What a failed guard makes the server say; the error it raises is told apart by it.
macro_rules! moved {
    () => {
        "tenantd: a guarded row moved"
    };
}

/// [`moved!`]'s text, as the server's error carries it.
pub(crate) const MOVED: &str = moved!();

/// What a guard selects: `0` while `$ok` holds, else an error: the text [`MOVED`] is no
/// integer.
macro_rules! guarded {
    ($ok:literal) => {
        concat!(
            "SELECT CAST(CASE WHEN ",
            $ok,
            " THEN '0' ELSE '",
            moved!(),
            "' END AS INT)"
        )
    };
}

/// Locks the tenants `?1` (a comma-separated list) that are still at the versions `?2` (in
/// the same order), without waiting; fails with [`MOVED`] unless all `?3` are.
pub(crate) const GUARD_TENANTS: &str = concat!(
    guarded!("count(*) = ?3"),
    " FROM unnest(string_to_array(CAST(?1 AS TEXT), ','), string_to_array(CAST(?2 AS TEXT), ',')) \
     AS w(id, x) CROSS JOIN LATERAL (SELECT 1 FROM tenants WHERE id = w.id \
     AND CAST(xmin AS TEXT) = w.x LIMIT 1 FOR NO KEY UPDATE NOWAIT) t"
);

/// Fails with [`MOVED`] unless every budget `?1` is still at its version in `?2` and has no
/// row of periods or thresholds: `?3` of them.
pub(crate) const GUARD_BUDGETS: &str = concat!(
    guarded!("count(*) = ?3"),
    " FROM unnest(string_to_array(CAST(?1 AS TEXT), ','), string_to_array(CAST(?2 AS TEXT), ',')) \
     AS w(id, x) CROSS JOIN LATERAL (SELECT 1 FROM budgets b WHERE b.id = w.id \
     AND CAST(b.xmin AS TEXT) = w.x \
     AND NOT EXISTS (SELECT 1 FROM budget_renewals r WHERE r.budget_id = b.id) LIMIT 1) b"
);

/// A digest of what decides which events the webhook endpoints take: each enabled one's id,
/// event types and tenant, in the order of their ids. Not the rows' versions: the senders
/// write their leases on the rows all the time.
macro_rules! endpoints_digest {
    () => {
        "SELECT md5(coalesce(string_agg(id || ' ' || event_types || ' ' \
         || coalesce(tenant_id, '-'), '|' ORDER BY id), '')) \
         FROM webhook_endpoints WHERE state = 'enabled'"
    };
}

/// The webhook endpoints' digest, read with the enabled endpoints ([`super::ahead`]).
pub(crate) const ENDPOINTS_DIGEST: &str = endpoints_digest!();

/// Fails with [`MOVED`] unless the webhook endpoints' digest is still `?1`.
pub(crate) const GUARD_ENDPOINTS: &str = concat!(
    "SELECT CAST(CASE WHEN (",
    endpoints_digest!(),
    ") = CAST(?1 AS TEXT) THEN '0' ELSE '",
    moved!(),
    "' END AS INT)"
);

/// A batch that begins on what the writer knows: the rows to guard, and what its commands
/// take in place of a read ahead.
#[derive(Debug, Default)]
pub(crate) struct Guard {
    /// The tenants, each with its row's version and last id.
    pub(crate) tenants: Vec<(TenantId, u32, Option<ulid::Ulid>)>,
    /// The budgets, each with whether its tenant is active and its row's version.
    pub(crate) budgets: Vec<(Budget, bool, u32)>,
    /// The credentials of the tenants whose commands check a token.
    pub(crate) credentials: Vec<(TenantId, Credential)>,
    /// The enabled webhook endpoints and their digest, where a command may write an
    /// event.
    pub(crate) endpoints: Option<(Vec<Subscriber>, String)>,
}

impl Guard {
    /// The ids and the versions of `rows`, each a comma-separated list in the same order.
    pub(crate) fn lists<'a>(rows: impl Iterator<Item = (&'a str, u32)>) -> (String, String, i64) {
        let (mut ids, mut versions, mut n) = (String::new(), String::new(), 0);
        for (id, version) in rows {
            if n > 0 {
                ids.push(',');
                versions.push(',');
            }
            ids.push_str(id);
            versions.push_str(&version.to_string());
            n += 1;
        }
        (ids, versions, n)
    }
}

/// What a batch that committed leaves to be known ([`super::known::Known::remember`]).
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// The budgets its commands wrote, as they left them, each with whether its tenant is
    /// active.
    pub(crate) budgets: Vec<(Budget, bool)>,
    /// The credentials it read.
    pub(crate) credentials: Vec<(TenantId, Option<Credential>)>,
    /// The tenants something of the batch may have changed otherwise; `None` for all.
    pub(crate) forgot: Option<Vec<TenantId>>,
}
