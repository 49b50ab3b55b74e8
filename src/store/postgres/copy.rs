//! The PostgreSQL side of `tenantd copy`: a database opened as the source, in one read
//! snapshot with no audit row waiting for its place in the chain, or as the target, its schema
//! made and one transaction begun that holds the chain's lock and locks out every write of an
//! instance (the tenants and the webhook endpoints locked whole), so none writes meanwhile. The rows themselves are moved by the copy,
//! through the seam (`store::copy`); amounts go as their decimal text, which the `numeric`
//! columns take as the number.

use std::time::Duration;

use super::blocking::Blocking;
use crate::store::write::chain;

/// How long a copy waits for the instances to chain the audit rows pending in its source.
const PENDING_WAIT: Duration = Duration::from_secs(10);

/// The database at `url`, read in one snapshot from now on; never written. Audit rows that
/// wait for their place in the chain are waited for (at most [`PENDING_WAIT`]): the copy
/// moves a chain whole, and a source whose snapshot still has some is refused.
pub(in crate::store) fn source(url: &str) -> Result<Blocking, String> {
    let name = super::describe(url);
    let mut db = Blocking::connect_for_tool(url)?;
    db.expect_schema().map_err(|e| format!("{name}: {e}"))?;
    chain::settle_pending(&mut db, PENDING_WAIT).map_err(|e| format!("{name}: {e}"))?;
    db.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .map_err(|e| format!("{name}: {e}"))?;
    let pending = chain::pending(&mut db).map_err(|e| format!("{name}: {e}"))?;
    if !pending.is_empty() {
        return Err(format!(
            "{name}: {} audit rows are waiting for their place in the chain (committed changes \
             that no instance has chained yet); start an instance on it, which chains them, or \
             stop the instances that write it, then copy again",
            pending.len()
        ));
    }
    Ok(db)
}

/// The database at `url` as a target: its schema made if need be, then one transaction
/// holding the chain's lock and the locks of the tables every write takes a row of (a
/// tenant's, or an endpoint's) until [`commit`], so no instance writes meanwhile.
pub(in crate::store) fn target(url: &str) -> Result<Blocking, String> {
    let name = super::describe(url);
    let mut db = Blocking::connect_for_tool(url)?;
    db.create_schema().map_err(|e| format!("{name}: {e}"))?;
    db.batch(
        "BEGIN; SELECT id FROM chain_head WHERE id = 1 FOR UPDATE; \
         LOCK TABLE tenants, webhook_endpoints IN EXCLUSIVE MODE;",
    )
    .map_err(|e| format!("{name}: {e}"))?;
    Ok(db)
}

/// Commits the target's transaction on `db`, once the copy has checked out; `name` is the
/// database as messages name it.
pub(in crate::store) fn commit(db: &mut Blocking, name: &str) -> Result<(), String> {
    db.batch("COMMIT")
        .map_err(|e| format!("{name}: COMMIT: {e}"))
}
