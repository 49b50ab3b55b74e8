//! A budget's entries read page by page while the levels' entries are swept into SQLite's
//! index between the writes (`queries::levels`; test builds sweep every few entries): every
//! entry of every level is listed once, in id order, with its own and its kind filter, and the
//! index is checked by `audit verify`, which finds a row taken out of it or added to it. On
//! PostgreSQL, which has no such index, the same pages must list the same entries.

use std::collections::BTreeMap;

use super::ops::{CreateBudget, MoveBudget};
use super::sql::{Sql, text};
use super::test_stores::{create_tenant, fresh, on_each_backend};
use super::{ListQuery, Store};
use crate::audit::Actor;
use crate::domain::{
    Atomic, BudgetId, Direction, EntryKind, LedgerEntry, Movement, Name, NewBudget, TenantId, Unit,
};

/// How many entries a level must list that a spend on the budget named (`-`: its own) left,
/// of a kind.
type Counted = (&'static str, EntryKind, usize);

/// Creates budget `name` under `parent`, with 1,000 of its own.
async fn child(store: &Store, tenant: &TenantId, name: &str, parent: &BudgetId) -> BudgetId {
    fresh(
        store
            .write(CreateBudget {
                tenant: tenant.clone(),
                budget: NewBudget {
                    name: Name::parse(name).expect("a name"),
                    unit: Unit::atomic(),
                    opening_deposit: Atomic::new(1000),
                    policy: None,
                    thresholds: crate::domain::Thresholds::default(),
                    parent: Some(parent.clone()),
                },
                actor: Actor::Admin,
                keyed: None,
            })
            .await,
    )
    .id
}

/// Moves `amount` on `budget`, one write at a time.
async fn moved(store: &Store, tenant: &TenantId, budget: &BudgetId, direction: Direction) {
    fresh(
        store
            .write(MoveBudget {
                tenant: tenant.clone(),
                budget: Some(budget.clone()),
                movement: Movement {
                    direction,
                    amount: Atomic::new(1),
                    memo: None,
                },
                actor: Actor::Admin,
                keyed: None,
            })
            .await,
    );
}

/// Every entry of `budget`, read `limit` at a time (of `kind` only, if given).
async fn entries(
    store: &Store,
    tenant: &TenantId,
    budget: &BudgetId,
    limit: usize,
    kind: Option<&'static str>,
) -> Vec<LedgerEntry> {
    let mut all: Vec<LedgerEntry> = Vec::new();
    let mut query = ListQuery::first(limit);
    query.state = kind;
    loop {
        let page = store
            .list_entries(tenant.clone(), Some(budget.clone()), query.clone())
            .await
            .expect("a page of entries");
        assert!(page.items.len() <= limit, "a page holds at most its limit");
        all.extend(page.items);
        if !page.has_more {
            return all;
        }
        query.after = all.last().map(|e| e.id.as_str().to_owned());
    }
}

/// Writes to a tree org → team → key (and a second key under the team), reads every level's
/// entries and checks them against what was written.
async fn scene(store: Store) {
    let (tenant, root) = create_tenant(&store, "levels", 1_000_000).await;
    let org = child(&store, &tenant, "org", &root).await;
    let team = child(&store, &tenant, "team", &org).await;
    let key = child(&store, &tenant, "key", &team).await;
    let other = child(&store, &tenant, "other", &team).await;
    // Each write its own batch, so that sweeps fall between them; the last few stay in the
    // tail.
    for n in 0..40 {
        match n % 5 {
            0 | 1 => moved(&store, &tenant, &key, Direction::Charge).await,
            2 => moved(&store, &tenant, &other, Direction::Charge).await,
            3 => moved(&store, &tenant, &team, Direction::Charge).await,
            _ => moved(&store, &tenant, &org, Direction::Credit).await,
        }
    }
    let name = |id: &BudgetId| {
        [
            (&root, "root"),
            (&org, "org"),
            (&team, "team"),
            (&key, "key"),
        ]
        .iter()
        .find(|(b, _)| *b == id)
        .map_or("other", |(_, name)| *name)
    };
    // What each level must list: entries by (the budget spent on, kind).
    let expected: [(&BudgetId, &[Counted]); 5] = [
        (
            &root,
            &[
                ("key", EntryKind::Charge, 16),
                ("other", EntryKind::Charge, 8),
                ("team", EntryKind::Charge, 8),
            ],
        ),
        (
            &org,
            &[
                ("-", EntryKind::Credit, 8),
                ("key", EntryKind::Charge, 16),
                ("other", EntryKind::Charge, 8),
                ("team", EntryKind::Charge, 8),
            ],
        ),
        (
            &team,
            &[
                ("-", EntryKind::Charge, 8),
                ("key", EntryKind::Charge, 16),
                ("other", EntryKind::Charge, 8),
            ],
        ),
        (&key, &[("-", EntryKind::Charge, 16)]),
        (&other, &[("-", EntryKind::Charge, 8)]),
    ];
    for (budget, wanted) in expected {
        let whole = entries(&store, &tenant, budget, 1000, None).await;
        let mut counted: BTreeMap<(&str, EntryKind), usize> = BTreeMap::new();
        for e in &whole {
            assert_eq!(&e.budget_id, budget, "an entry of {}", name(budget));
            let via = e.via_budget_id.as_ref().map_or("-", name);
            *counted.entry((via, e.kind)).or_default() += 1;
        }
        // Each budget's opening deposit is its own, whatever it was.
        counted.remove(&("-", EntryKind::OpeningDeposit));
        let wanted: BTreeMap<(&str, EntryKind), usize> = wanted
            .iter()
            .map(|(via, kind, n)| ((*via, *kind), *n))
            .collect();
        assert_eq!(counted, wanted, "the entries of {}", name(budget));
        assert!(
            whole.windows(2).all(|w| w[0].id < w[1].id),
            "{}: in id order, each once",
            name(budget)
        );
        // The same entries three at a time, across the sweeps' boundaries.
        let paged = entries(&store, &tenant, budget, 3, None).await;
        assert_eq!(
            paged.iter().map(|e| &e.id).collect::<Vec<_>>(),
            whole.iter().map(|e| &e.id).collect::<Vec<_>>(),
            "{}: paged as whole",
            name(budget)
        );
        // And the charges alone, two at a time.
        let charges = entries(&store, &tenant, budget, 2, Some("charge")).await;
        assert_eq!(
            charges.iter().map(|e| &e.id).collect::<Vec<_>>(),
            whole
                .iter()
                .filter(|e| e.kind == EntryKind::Charge)
                .map(|e| &e.id)
                .collect::<Vec<_>>(),
            "{}: the charges",
            name(budget)
        );
    }
}

#[test]
fn every_level_lists_its_entries_across_sweeps_and_verify_checks_the_index() {
    on_each_backend("levels", 8, scene, |postgres, path| {
        super::verify_audit(path).expect("the chain and the index verify");
        if postgres {
            return;
        }
        let mut db = super::sqlite::editor(path);
        let mut one = |sql: &str| -> String {
            db.query_opt(sql, &[], |row| Ok(text(row, 0)?.into_owned()))
                .expect(sql)
                .unwrap_or_default()
        };
        assert_ne!(
            one("SELECT CAST(count(*) AS TEXT) FROM ledger_levels"),
            "0",
            "the writer swept"
        );
        assert_ne!(
            one("SELECT CAST(count(*) AS TEXT) FROM ledger_entries \
                 WHERE via_budget_id IS NOT NULL \
                 AND id > (SELECT through FROM ledger_levels_swept)"),
            "0",
            "the last levels' entries are in the tail"
        );
        // A row taken out of the index, then one that names no entry: each is found.
        let taken = one(
            "DELETE FROM ledger_levels WHERE entry_id = (SELECT min(entry_id) FROM \
             ledger_levels) RETURNING entry_id",
        );
        let verdict = super::verify_audit(path).expect_err("the index lacks an entry");
        assert!(verdict.contains(&taken), "{verdict}");
        Sql::execute(
            &mut db,
            "INSERT INTO ledger_levels (budget_id, entry_id) VALUES ('bud_none', ?1)",
            &[taken.as_str().into()],
        )
        .expect("a stray row");
        let verdict = super::verify_audit(path).expect_err("the index names no such entry");
        assert!(verdict.contains("ledger_levels names entry"), "{verdict}");
        // The mark's row cannot go, and a mark moved past the last entry is found.
        assert!(
            Sql::execute(&mut db, "DELETE FROM ledger_levels_swept", &[]).is_err(),
            "the mark is kept"
        );
        Sql::execute(
            &mut db,
            "DELETE FROM ledger_levels WHERE budget_id = 'bud_none'",
            &[],
        )
        .expect("the stray row goes");
        Sql::execute(
            &mut db,
            "INSERT INTO ledger_levels (budget_id, entry_id) \
             SELECT budget_id, id FROM ledger_entries WHERE id = ?1",
            &[taken.as_str().into()],
        )
        .expect("the row taken out is back");
        super::verify_audit(path).expect("the index is whole again");
        Sql::execute(
            &mut db,
            "UPDATE ledger_levels_swept SET through = 'zzz'",
            &[],
        )
        .expect("the mark moved");
        let verdict = super::verify_audit(path).expect_err("the mark is after every entry");
        assert!(
            verdict.contains("mark is after the last entry"),
            "{verdict}"
        );
    });
}
