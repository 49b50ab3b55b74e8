//! A budget, where it stands in its period, and its period statements.

use serde::Serialize;

use super::{PageView, page_json, to_json};
use crate::domain::{
    Atomic, Budget, BudgetId, CurrentPeriod, Figures, Name, Page, PeriodId, Policy, Statement,
    TenantId, Thresholds, Timestamp, Unit, period_totals,
};

/// A budget, with its derived figures.
#[derive(Serialize)]
pub(super) struct BudgetView<'a> {
    id: &'a BudgetId,
    tenant_id: &'a TenantId,
    parent_id: Option<&'a BudgetId>,
    name: &'a Name,
    unit: &'a Unit,
    state: &'static str,
    created_at: Timestamp,
    closed_at: Option<Timestamp>,
    opening_deposit_atomic: Atomic,
    credited_atomic: Atomic,
    debited_atomic: Atomic,
    spent_atomic: Atomic,
    reserved_atomic: Atomic,
    balance_atomic: Atomic,
    available_atomic: Atomic,
    period: Option<&'a Policy>,
    current_period: Option<CurrentPeriodView<'a>>,
    alert_thresholds_atomic: &'a Thresholds,
}

/// Where a budget stands in its period: its id, when it began, and when it resets.
#[derive(Serialize)]
struct CurrentPeriodView<'a> {
    id: &'a PeriodId,
    started_at: Timestamp,
    ends_at: Timestamp,
}

impl<'a> From<&'a CurrentPeriod> for CurrentPeriodView<'a> {
    fn from(c: &'a CurrentPeriod) -> Self {
        Self {
            id: &c.id,
            started_at: c.started_at,
            ends_at: c.ends_at,
        }
    }
}

impl<'a> From<&'a Budget> for BudgetView<'a> {
    fn from(b: &'a Budget) -> Self {
        let f = &b.figures;
        // The store never hands out a budget that breaks the invariant; zero is never shown
        // for a broken one because it cannot be read.
        Self {
            id: &b.id,
            tenant_id: &b.tenant_id,
            parent_id: b.parent_id.as_ref(),
            name: &b.name,
            unit: &b.unit,
            state: b.state.name(),
            created_at: b.created_at,
            closed_at: b.state.closed_at(),
            opening_deposit_atomic: b.opening_deposit,
            credited_atomic: Atomic::new(f.credited),
            debited_atomic: Atomic::new(f.debited),
            spent_atomic: Atomic::new(f.spent),
            reserved_atomic: Atomic::new(f.reserved),
            balance_atomic: Atomic::new(f.balance().unwrap_or(0)),
            available_atomic: Atomic::new(f.available().unwrap_or(0)),
            period: b.policy.as_ref(),
            current_period: b.current.as_ref().map(CurrentPeriodView::from),
            alert_thresholds_atomic: &b.thresholds,
        }
    }
}

/// A period statement.
#[derive(Serialize)]
pub(super) struct StatementView<'a> {
    id: &'a PeriodId,
    budget_id: &'a BudgetId,
    state: &'static str,
    started_at: Timestamp,
    ends_at: Timestamp,
    allowance_atomic: Atomic,
    carried_in_atomic: Atomic,
    opening_available_atomic: Atomic,
    credited_atomic: Atomic,
    debited_atomic: Atomic,
    spent_atomic: Atomic,
    forfeited_atomic: Option<Atomic>,
    carried_out_atomic: Option<Atomic>,
    closing_available_atomic: Option<Atomic>,
}

impl<'a> StatementView<'a> {
    /// The statement `s` of a budget whose figures are `now`: a current period's totals are
    /// the budget's less those it began with.
    pub(super) fn new(s: &'a Statement, now: &Figures) -> Self {
        let end = s.closing.as_ref().map_or(now, |c| &c.end);
        // The store never hands out a period that ends below its start; zero is never shown
        // for one because it cannot be read.
        let (credited, debited, spent) = period_totals(&s.start, end).unwrap_or_default();
        Self {
            id: &s.id,
            budget_id: &s.budget_id,
            state: if s.closing.is_some() {
                "closed"
            } else {
                "current"
            },
            started_at: s.started_at,
            ends_at: s.ends_at,
            allowance_atomic: s.allowance,
            carried_in_atomic: s.carried_in,
            opening_available_atomic: s.opening_available,
            credited_atomic: Atomic::new(credited),
            debited_atomic: Atomic::new(debited),
            spent_atomic: Atomic::new(spent),
            forfeited_atomic: s.closing.map(|c| c.forfeited),
            carried_out_atomic: s.closing.map(|c| c.carried_out),
            closing_available_atomic: s.closing.map(|c| c.available),
        }
    }
}

/// A budget.
pub(crate) fn budget_json(budget: &Budget) -> String {
    to_json(&BudgetView::from(budget))
}

/// A page of budgets.
pub(crate) fn budgets_json(page: &Page<Budget>) -> String {
    page_json::<_, BudgetView<'_>, _>(page, |b| &b.id)
}

/// A page of a budget's period statements.
pub(crate) fn periods_json(budget: &Budget, page: &Page<Statement>) -> String {
    let view = PageView {
        data: page
            .items
            .iter()
            .map(|s| StatementView::new(s, &budget.figures))
            .collect(),
        has_more: page.has_more,
        next_after: page
            .has_more
            .then(|| page.items.last().map(|s| &s.id))
            .flatten(),
    };
    to_json(&view)
}
