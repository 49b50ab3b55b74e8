//! SQLite's index of the entries a spend leaves on the levels above it (migration 12): written
//! in bulk by the writer's sweep, and merged with the entries not swept yet when a budget's
//! entries are read.
//!
//! A budget's own entries are in `ledger_entries_budget`, a partial index, as each is written.
//! The entries on the levels above a spend (`via_budget_id` set) are not: each would have gone
//! to the end of its level's part of that index, a page written for each level of each spend.
//! They are found instead through `ledger_levels` (budget, entry id), which the writer fills
//! every [`SWEEP_ENTRIES`] entries from those after `ledger_levels_swept.through` (the tail),
//! in its key's order, so that each level's part of it is written once a sweep. A read of a
//! budget's entries takes its own, those `ledger_levels` names and those in the tail, in id
//! order. Entry ids grow in the order the one writer commits them, so a swept entry never
//! lies after the mark, and an entry written after a sweep always does. The tail is read only
//! for a budget that has (or had: budgets are never deleted) a child; it is about
//! [`SWEEP_ENTRIES`] rows long at most (longer while sweeps fail), and read by the
//! table's key.
//!
//! PostgreSQL keeps every entry in its index by budget, and has none of this.

use super::page;
use crate::domain::{BudgetId, LedgerEntry};
use crate::store::rows::{self, ENTRY_COLUMNS};
use crate::store::sql::{Param, Sql, text};
use crate::store::{ListQuery, Page, StoreError};

/// Entries written between sweeps, at most (the writer sweeps before the batch after it has
/// written this many): the tail a read of an upper level's entries goes through. Test builds
/// sweep after a few entries, so that the store's tests read across sweeps all the time.
pub(crate) const SWEEP_ENTRIES: u64 = if cfg!(test) { 5 } else { 16_384 };

/// The sweep, in order: every levels' entry of the tail into `ledger_levels`, in its key's
/// order, then the mark moved to the last entry written. Run by the writer in a write
/// transaction, and by a copy into a new file before it checks the copy.
pub(crate) const SWEEP: [&str; 2] = [
    "INSERT INTO ledger_levels (budget_id, entry_id) \
     SELECT budget_id, id FROM ledger_entries \
     WHERE id > (SELECT through FROM ledger_levels_swept) AND via_budget_id IS NOT NULL \
     ORDER BY budget_id, id",
    "UPDATE ledger_levels_swept \
     SET through = coalesce((SELECT max(id) FROM ledger_entries), through)",
];

/// Sweeps the tail ([`SWEEP`]).
pub(crate) fn sweep(db: &mut impl Sql) -> Result<(), StoreError> {
    SWEEP.iter().try_for_each(|statement| db.run(statement))
}

/// The entries written since the last sweep (the tail's length).
pub(crate) fn unswept(db: &mut impl Sql) -> Result<u64, StoreError> {
    let count = db.query_opt(
        "SELECT CAST(count(*) AS TEXT) FROM ledger_entries \
         WHERE id > (SELECT through FROM ledger_levels_swept)",
        &[],
        |row| Ok(text(row, 0)?.into_owned()),
    )?;
    count
        .unwrap_or_default()
        .parse()
        .map_err(|e| StoreError::Internal(format!("the entries after the sweep: {e}")))
}

/// A page of budget `budget`'s entries on SQLite: its own, the levels' swept and the levels'
/// in the tail, each read in id order up to the page's bound, then merged. A kind filter is
/// written as a literal, as [`super::page::page`] writes a state.
pub(crate) fn page(
    db: &mut impl Sql,
    budget: &BudgetId,
    query: &ListQuery,
) -> Result<Page<LedgerEntry>, StoreError> {
    let kind = query.state.map_or(String::new(), |kind| {
        debug_assert!(kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        format!(" AND kind = '{kind}'")
    });
    let levels = &*LEVELS_COLUMNS;
    let sql = format!(
        "SELECT * FROM (SELECT {ENTRY_COLUMNS} FROM ledger_entries \
             WHERE budget_id = CAST(?1 AS TEXT) AND via_budget_id IS NULL{kind} \
             AND id > CAST(?2 AS TEXT) ORDER BY id LIMIT CAST(?3 AS BIGINT)) \
         UNION ALL \
         SELECT * FROM (SELECT {levels} FROM ledger_levels AS l \
             CROSS JOIN ledger_entries AS e ON e.id = l.entry_id \
             WHERE l.budget_id = CAST(?1 AS TEXT) AND l.entry_id > CAST(?2 AS TEXT){kind} \
             ORDER BY l.entry_id LIMIT CAST(?3 AS BIGINT)) \
         UNION ALL \
         SELECT * FROM (SELECT {ENTRY_COLUMNS} FROM ledger_entries \
             WHERE id > max(CAST(?2 AS TEXT), (SELECT through FROM ledger_levels_swept)) \
             AND budget_id = CAST(?1 AS TEXT) AND via_budget_id IS NOT NULL{kind} \
             AND EXISTS (SELECT 1 FROM budgets WHERE parent_id = CAST(?1 AS TEXT)) \
             ORDER BY id LIMIT CAST(?3 AS BIGINT)) \
         ORDER BY 1 LIMIT CAST(?3 AS BIGINT)"
    );
    let params = [
        Param::Text(budget.as_str()),
        Param::Text(query.after.as_deref().unwrap_or("")),
        page::bound(query),
    ];
    Ok(page::cut(
        db.query(&sql, &params, |row| rows::entry(row))?,
        query,
    ))
}

/// [`ENTRY_COLUMNS`] of the entries table named `e`.
static LEVELS_COLUMNS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    ENTRY_COLUMNS
        .split(", ")
        .map(|column| format!("e.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
});

/// Whether the file has the index (schema version 12 and later): `audit verify` reads files
/// of earlier versions as they are, without migrating them.
pub(crate) fn in_schema(db: &mut impl Sql) -> Result<bool, StoreError> {
    Ok(db
        .query_opt(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'ledger_levels_swept'",
            &[],
            |_| Ok(()),
        )?
        .is_some())
}

/// Every ledger entry for the verifier, by budget and then in order, as `rows::EVERY_ENTRY`
/// reads them but through the indexes of migration 12: each budget's own entries (the partial
/// index) merged with its levels' (`ledger_levels`, named by its key's budget, and the tail),
/// so that SQLite sorts no more than the tail. An index row that names an entry of another
/// budget lists it under the index's budget, where the replay finds it wrong.
pub(crate) const EVERY_ENTRY: &str = "\
    SELECT id, budget_id, kind, amount_atomic, reservation_id, memo, occurred_at, \
        balance_atomic, available_atomic, period_id, via_budget_id \
        FROM ledger_entries WHERE via_budget_id IS NULL \
    UNION ALL \
    SELECT l.entry_id, l.budget_id, e.kind, e.amount_atomic, e.reservation_id, e.memo, \
        e.occurred_at, e.balance_atomic, e.available_atomic, e.period_id, e.via_budget_id \
        FROM ledger_levels AS l CROSS JOIN ledger_entries AS e ON e.id = l.entry_id \
    UNION ALL \
    SELECT id, budget_id, kind, amount_atomic, reservation_id, memo, occurred_at, \
        balance_atomic, available_atomic, period_id, via_budget_id \
        FROM ledger_entries WHERE via_budget_id IS NOT NULL \
        AND id > (SELECT through FROM ledger_levels_swept) \
    ORDER BY 2, 1";

/// What is wrong with `ledger_levels`, if anything (`tenantd audit verify`): a mark that is
/// not one row at or before the last entry, a row that names no swept entry of a level at its
/// budget, or a swept entry of a level it does not name. Each would hide an entry from its
/// budget's pages, or show one that is not its.
pub(crate) fn misindexed(db: &mut impl Sql) -> Result<Option<String>, StoreError> {
    let mark = db.query_opt(
        "SELECT CAST(count(*) AS TEXT), CAST(coalesce(max(through) <= coalesce((SELECT \
         max(id) FROM ledger_entries), ''), 0) AS TEXT) FROM ledger_levels_swept",
        &[],
        |row| Ok((text(row, 0)?.into_owned(), text(row, 1)?.into_owned())),
    )?;
    match mark {
        Some((rows, _)) if rows != "1" => {
            return Ok(Some(format!(
                "ledger_levels_swept holds {rows} rows where it holds one"
            )));
        }
        Some((_, within)) if within != "1" => {
            return Ok(Some(
                "ledger_levels_swept's mark is after the last entry".to_owned(),
            ));
        }
        _ => {}
    }
    let [stray, missing] = [
        "SELECT l.entry_id FROM ledger_levels AS l WHERE NOT EXISTS (SELECT 1 FROM ledger_entries \
         AS e WHERE e.id = l.entry_id AND e.budget_id = l.budget_id \
         AND e.via_budget_id IS NOT NULL AND e.id <= (SELECT through FROM ledger_levels_swept)) \
         LIMIT 1",
        "SELECT e.id FROM ledger_entries AS e WHERE e.via_budget_id IS NOT NULL \
         AND e.id <= (SELECT through FROM ledger_levels_swept) AND NOT EXISTS (SELECT 1 FROM \
         ledger_levels AS l WHERE l.budget_id = e.budget_id AND l.entry_id = e.id) LIMIT 1",
    ]
    .map(|sql| db.query_opt(sql, &[], |row| Ok(text(row, 0)?.into_owned())));
    Ok(match (stray?, missing?) {
        (Some(id), _) => Some(format!(
            "ledger_levels names entry {id}, which is no swept entry of a level at its budget"
        )),
        (None, Some(id)) => Some(format!(
            "entry {id} of a level is before the sweep's mark but not in ledger_levels"
        )),
        (None, None) => None,
    })
}
