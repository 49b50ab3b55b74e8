//! A batch of operations' budget figures, ledger entries and (on SQLite) audit rows, written
//! when the batch ends well (`WriterState::keeping_budgets`) where each operation wrote its
//! own:
//!
//! - **Figures**, once a budget: a batch of 100 charges on 10 budgets sends 10 `UPDATE`s, not
//!   100. On PostgreSQL each `UPDATE` of a row leaves a version of it that the open
//!   transaction cannot prune, and the next `UPDATE` of the row walks them all; on SQLite each
//!   one runs the budget's trigger in a statement journal of its own.
//! - **Ledger entries** and **audit rows** (these linked to the chain as each operation
//!   records its event), inserted together in a few statements ([`super::many`]): a
//!   statement costs its parameters' parsing and, on SQLite, a statement journal where a
//!   trigger or a check may abort it (the chain's insert trigger made its statement cost a
//!   batched charge more than its entry). On PostgreSQL an audit event waits in
//!   `audit_pending` for the chainer: those rows are kept, and inserted together in order.
//!
//! Every batch of commands keeps them so while its commands are spends (`super::keeping`;
//! on PostgreSQL where its writes go with its `COMMIT`): a batch of a few charges sends one
//! statement a table, not one a charge.
//!
//! While a batch runs, what is stored of a budget it moved is older than what it moved: every
//! read of a budget on the writer goes through the readers of [`super::keeping`], which put
//! the batch's figures over the stored ones. An operation that fails is undone with its
//! savepoint, or with the snapshot taken before it where it runs without one:
//! [`Unwritten::undo_to`] puts back what it changed.

use std::collections::HashMap;

use crate::audit::{Entry, Linked};
use crate::domain::{Budget, BudgetId, Figures, LedgerEntry, TenantId};

/// The figures a batch of operations moved, the entries it made and the audit rows it linked,
/// not written yet.
#[derive(Debug, Default)]
pub(crate) struct Unwritten {
    /// Whether figures and rows are kept here rather than written: while a batch of
    /// operations runs.
    on: bool,
    /// Each budget's tenant and figures as the batch left them.
    figures: HashMap<BudgetId, (TenantId, Figures)>,
    /// The entries made, in order.
    entries: Vec<LedgerEntry>,
    /// The audit rows linked, in the chain's order.
    audit: Vec<Linked>,
    /// The audit rows waiting for the chain (PostgreSQL), in the order of their changes.
    pending: Vec<Entry>,
    /// Each change in order, so that a failed operation's changes can be undone.
    undo: Vec<Change>,
}

/// One change kept, as it is undone.
#[derive(Debug)]
enum Change {
    /// A budget's figures, with those they replaced (`None`: none were kept, and the budget
    /// goes with its tenant).
    Figures(BudgetId, Option<Figures>),
    /// An entry made.
    Entry,
    /// An audit row appended.
    Audit,
    /// An audit row to wait for the chain.
    Pending,
}

/// What a batch of operations kept, as it is written.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Each budget's figures and tenant, in the order of the budgets' ids.
    pub(crate) figures: Vec<(BudgetId, TenantId, Figures)>,
    /// The entries, in the order they were made.
    pub(crate) entries: Vec<LedgerEntry>,
    /// The audit rows, in the chain's order.
    pub(crate) audit: Vec<Linked>,
    /// The audit rows to wait for the chain, in the order of their changes.
    pub(crate) pending: Vec<Entry>,
}

impl Unwritten {
    /// A batch of operations begins: figures, entries and audit rows are kept from now on.
    pub(super) fn start(&mut self) {
        self.stop();
        self.on = true;
    }

    /// Keeps from now on, adding to what is kept already (a batch of commands, between two
    /// that write what is kept).
    pub(super) fn resume(&mut self) {
        self.on = true;
    }

    /// Whether figures and rows are kept now.
    pub(super) fn is_on(&self) -> bool {
        self.on
    }

    /// The batch ended: figures and rows are written again as they come, and whatever is kept
    /// is dropped (what a batch that ended well kept was taken first, [`Unwritten::take`]).
    pub(super) fn stop(&mut self) {
        self.on = false;
        self.figures.clear();
        self.entries.clear();
        self.audit.clear();
        self.pending.clear();
        self.undo.clear();
    }

    /// Where the changes stand now, to be undone to ([`Unwritten::undo_to`]). A mark taken
    /// while a batch runs is never above the changes until the batch ends; once it has ended
    /// (nothing kept), undoing to any mark does nothing.
    pub(super) fn mark(&self) -> usize {
        self.undo.len()
    }

    /// Undoes every change made after `mark`, the latest first.
    pub(super) fn undo_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            match self.undo.pop() {
                Some(Change::Figures(id, Some(before))) => {
                    if let Some((_, figures)) = self.figures.get_mut(&id) {
                        *figures = before;
                    }
                }
                Some(Change::Figures(id, None)) => {
                    self.figures.remove(&id);
                }
                Some(Change::Entry) => {
                    self.entries.pop();
                }
                Some(Change::Audit) => {
                    self.audit.pop();
                }
                Some(Change::Pending) => {
                    self.pending.pop();
                }
                None => return,
            }
        }
    }

    /// Keeps `budget`'s figures, if figures are kept now; whether they were.
    pub(super) fn defer(&mut self, budget: &Budget) -> bool {
        if !self.on {
            return false;
        }
        // A budget kept before has its tenant kept with it: only its figures change.
        let before = match self.figures.get_mut(&budget.id) {
            Some((_, figures)) => Some(std::mem::replace(figures, budget.figures)),
            None => {
                let kept = (budget.tenant_id.clone(), budget.figures);
                self.figures.insert(budget.id.clone(), kept);
                None
            }
        };
        self.undo.push(Change::Figures(budget.id.clone(), before));
        true
    }

    /// Keeps `entry`, if entries are kept now; gives it back if not.
    pub(super) fn defer_entry(&mut self, entry: LedgerEntry) -> Option<LedgerEntry> {
        if !self.on {
            return Some(entry);
        }
        self.entries.push(entry);
        self.undo.push(Change::Entry);
        None
    }

    /// Keeps audit row `row`, if rows are kept now; gives it back if not.
    pub(super) fn defer_audit(&mut self, row: Linked) -> Option<Linked> {
        if !self.on {
            return Some(row);
        }
        self.audit.push(row);
        self.undo.push(Change::Audit);
        None
    }

    /// Keeps audit row `entry` to wait for the chain, if rows are kept now; gives it back if
    /// not.
    pub(super) fn defer_pending(&mut self, entry: Entry) -> Option<Entry> {
        if !self.on {
            return Some(entry);
        }
        self.pending.push(entry);
        self.undo.push(Change::Pending);
        None
    }

    /// `budget` as the batch left it: its figures replaced by those kept for it, if any.
    pub(super) fn overlay(&self, budget: &mut Budget) {
        if let Some((_, figures)) = self.figures.get(&budget.id) {
            budget.figures = *figures;
        }
    }

    /// Everything kept, to be written now: the batch's end. Nothing is kept after, and what
    /// comes later is written as it comes.
    pub(super) fn take(&mut self) -> Kept {
        let mut figures: Vec<_> = self
            .figures
            .drain()
            .map(|(id, (tenant, figures))| (id, tenant, figures))
            .collect();
        figures.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let kept = Kept {
            figures,
            entries: std::mem::take(&mut self.entries),
            audit: std::mem::take(&mut self.audit),
            pending: std::mem::take(&mut self.pending),
        };
        self.stop();
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> BudgetId {
        BudgetId::from_ulid(ulid::Ulid::from_parts(u64::from(n), 0))
    }

    fn spent(spent: u128) -> Figures {
        Figures {
            spent,
            ..Figures::default()
        }
    }

    /// The tenant every budget of these tests is of.
    fn tenant() -> TenantId {
        TenantId::from_ulid(ulid::Ulid::from_parts(0, 0))
    }

    /// Budget `n` of [`tenant`], with `figures`.
    fn budget(n: u8, figures: Figures) -> Budget {
        Budget {
            id: id(n),
            tenant_id: tenant(),
            name: crate::domain::Name::parse("b").expect("a name"),
            unit: crate::domain::Unit::atomic(),
            state: crate::domain::BudgetState::Open,
            created_at: crate::domain::Timestamp::from_unix_ms(0),
            opening_deposit: crate::domain::Atomic::new(0),
            figures,
            policy: None,
            current: None,
            thresholds: crate::domain::Thresholds::default(),
            parent_id: None,
        }
    }

    #[test]
    fn nothing_is_kept_unless_a_batch_runs() {
        let mut unwritten = Unwritten::default();
        assert!(!unwritten.defer(&budget(1, spent(1))));
        assert!(unwritten.take().figures.is_empty());
        unwritten.start();
        assert!(unwritten.defer(&budget(1, spent(1))));
        unwritten.stop();
        assert!(!unwritten.defer(&budget(1, spent(2))));
        assert!(
            unwritten.take().figures.is_empty(),
            "a stop drops what was kept"
        );
    }

    #[test]
    fn each_budget_is_written_once_with_its_last_figures() {
        let mut unwritten = Unwritten::default();
        unwritten.start();
        for n in 1..=10 {
            unwritten.defer(&budget(2, spent(n)));
            unwritten.defer(&budget(1, spent(100 + n)));
        }
        assert_eq!(
            unwritten.take().figures,
            vec![(id(1), tenant(), spent(110)), (id(2), tenant(), spent(10))]
        );
        assert!(
            !unwritten.defer(&budget(1, spent(1))),
            "a take ends the batch: what comes after is written as it comes"
        );
        unwritten.undo_to(0);
        assert!(unwritten.take().figures.is_empty());
    }

    #[test]
    fn an_undo_puts_back_what_came_after_the_mark() {
        let mut unwritten = Unwritten::default();
        unwritten.start();
        unwritten.defer(&budget(1, spent(1)));
        let mark = unwritten.mark();
        unwritten.defer(&budget(1, spent(2)));
        unwritten.defer(&budget(2, spent(3)));
        unwritten.defer(&budget(1, spent(4)));
        unwritten.undo_to(mark);
        assert_eq!(unwritten.figures.get(&id(1)), Some(&(tenant(), spent(1))));
        assert_eq!(
            unwritten.figures.get(&id(2)),
            None,
            "budget 2 was not kept before"
        );
        unwritten.undo_to(0);
        assert!(unwritten.take().figures.is_empty());
    }

    #[test]
    fn an_undo_drops_the_audit_rows_after_the_mark_and_a_take_gives_them_in_order() {
        let head = crate::audit::Head::genesis();
        let event = |n: u8| {
            head.link_entry(crate::audit::Entry {
                seq: 0,
                occurred_at: "2026-01-01T00:00:00.000Z".into(),
                actor: "admin".into(),
                action: "budget.credited".into(),
                tenant_id: String::new(),
                payload: format!("{{\"n\":{n}}}"),
            })
        };
        let mut unwritten = Unwritten::default();
        assert_eq!(
            unwritten.defer_audit(event(1)),
            Some(event(1)),
            "no batch runs"
        );
        unwritten.start();
        assert_eq!(unwritten.defer_audit(event(1)), None);
        unwritten.defer(&budget(1, spent(1)));
        let mark = unwritten.mark();
        assert_eq!(unwritten.defer_audit(event(2)), None);
        unwritten.defer(&budget(1, spent(2)));
        assert_eq!(unwritten.defer_audit(event(3)), None);
        unwritten.undo_to(mark);
        let kept = unwritten.take();
        assert_eq!(kept.figures, vec![(id(1), tenant(), spent(1))]);
        assert_eq!(kept.audit, vec![event(1)]);
    }

    #[test]
    fn a_mark_from_before_a_batch_undoes_nothing_once_it_has_ended() {
        let mut unwritten = Unwritten::default();
        let before = unwritten.mark();
        unwritten.start();
        unwritten.defer(&budget(1, spent(1)));
        unwritten.stop();
        unwritten.undo_to(before);
        unwritten.start();
        let inside = unwritten.mark();
        unwritten.defer(&budget(2, spent(2)));
        assert_eq!(unwritten.take().figures, vec![(id(2), tenant(), spent(2))]);
        unwritten.undo_to(inside);
        unwritten.undo_to(before);
        assert!(unwritten.take().figures.is_empty());
        assert!(unwritten.undo.is_empty());
    }
}
