//! The PostgreSQL side of `tenantd copy`: a database opened as the source, in one read
//! snapshot, or as the target, its schema made and one transaction begun that holds the
//! chain's lock, so no instance writes meanwhile. The rows themselves are moved by the copy,
//! through the seam (`store::copy`); amounts go as their decimal text, which the `numeric`
//! columns take as the number.

use super::blocking::Blocking;

/// The database at `url`, read in one snapshot from now on; never written.
pub(in crate::store) fn source(url: &str) -> Result<Blocking, String> {
    let name = super::describe(url);
    let mut db = Blocking::connect_for_tool(url)?;
    db.expect_schema().map_err(|e| format!("{name}: {e}"))?;
    db.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(db)
}

/// The database at `url` as a target: its schema made if need be, then one transaction
/// holding the chain's lock until [`commit`], so no instance writes meanwhile.
pub(in crate::store) fn target(url: &str) -> Result<Blocking, String> {
    let name = super::describe(url);
    let mut db = Blocking::connect_for_tool(url)?;
    db.create_schema().map_err(|e| format!("{name}: {e}"))?;
    db.batch("BEGIN; SELECT id FROM chain_head WHERE id = 1 FOR UPDATE;")
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(db)
}

/// Commits the target's transaction on `db`, once the copy has checked out; `name` is the
/// database as messages name it.
pub(in crate::store) fn commit(db: &mut Blocking, name: &str) -> Result<(), String> {
    db.batch("COMMIT")
        .map_err(|e| format!("{name}: COMMIT: {e}"))
}
