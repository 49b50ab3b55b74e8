// One budget on a tenant's page: its card, assembled from the parts that each do one job
// (figures, period, thresholds, actions, chart, its place in the tenant's budget tree).

import { h, badge, timeNode } from './dom.js';
import { formatInstant } from './time.js';
import { balanceBar, figures } from './budget-figures.js';
import { periodBlock } from './budget-period.js';
import { thresholdsBlock } from './budget-thresholds.js';
import { actionButtons } from './budget-actions.js';
import { chartSection } from './budget-chart.js';
import { treeLines } from './budget-tree.js';

/**
 * Builds the budget's article. manage: whether admin actions show; tickers collects the
 * countdown updaters; onChanged reloads the page's data; onBatch shows a batch's report (see
 * budget-batch.js); tree: its item of budgetTree() and budgetsById (the budget alone, at the
 * top, without it).
 */
export function budgetCard(budget, { manage, tickers, signal, onChanged, onBatch, tree = null }) {
  const headingId = `budget-${budget.id}`;
  const { depth = 0, parent = null, children = [] } = tree || {};
  const budgetsById = tree ? tree.budgetsById : new Map([[budget.id, budget]]);
  const article = h('article', { class: `card budget budget-depth-${depth}`, 'aria-labelledby': headingId },
    h('div', { class: 'budget-head' },
      h('h3', { id: headingId }, budget.name),
      badge(budget.state),
      h('span', { class: 'muted mono small' }, budget.id)),
    treeLines(parent, children),
    balanceBar(budget),
    figures(budget),
    periodBlock(budget, tickers),
    thresholdsBlock(budget),
    budget.closed_at ? h('p', { class: 'muted' }, 'Closed ', timeNode(budget.closed_at, formatInstant(budget.closed_at))) : null,
    manage && budget.state === 'open' ? actionButtons(budget, { onChanged, onBatch, budgetsById, children }) : null,
    chartSection(budget, signal));
  return article;
}
