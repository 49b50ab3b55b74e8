// A tenant's budgets as a tree: their reading order and depth, the lines on a card that name
// its parent and its children, and what a refusal of the tree (the level that was short) says.

import { h } from './dom.js';
import { formatAmount } from './money.js';

const MAX_DEPTH = 3; // four levels: a budget has at most 3 ancestors

const byId = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/**
 * The budgets as a tree, in reading order: each budget right after its parent, children in
 * id order, top-level budgets (and any whose parent is not in the list) in id order. Each
 * item: {budget, depth, parent, children}; budgetsById maps every id to its budget.
 */
export function budgetTree(budgets) {
  const budgetsById = new Map(budgets.map((b) => [b.id, b]));
  const childrenOf = new Map();
  const roots = [];
  for (const b of [...budgets].sort(byId)) {
    if (b.parent_id && budgetsById.has(b.parent_id)) {
      if (!childrenOf.has(b.parent_id)) childrenOf.set(b.parent_id, []);
      childrenOf.get(b.parent_id).push(b);
    } else roots.push(b);
  }
  const items = [];
  const seen = new Set();
  const visit = (budget, depth) => {
    if (seen.has(budget.id)) return;
    seen.add(budget.id);
    const children = childrenOf.get(budget.id) || [];
    items.push({ budget, depth: Math.min(depth, MAX_DEPTH), parent: budgetsById.get(budget.parent_id) || null, children });
    for (const child of children) visit(child, depth + 1);
  };
  roots.forEach((b) => visit(b, 0));
  budgets.filter((b) => !seen.has(b.id)).sort(byId).forEach((b) => visit(b, 0));
  return { items, budgetsById };
}

/** A link to a budget's card on this page: scrolls to it and moves the focus to its heading. */
export function cardLink(budget) {
  const link = h('a', { href: `#budget-${budget.id}` }, budget.name);
  link.addEventListener('click', (event) => {
    // The page's URL fragment is the console's route: stay on it, go to the card.
    event.preventDefault();
    const heading = document.getElementById(`budget-${budget.id}`);
    if (!heading) return;
    heading.tabIndex = -1;
    heading.scrollIntoView({ block: 'start' });
    heading.focus({ preventScroll: true });
  });
  return link;
}

/** "Under <parent>" and "Over <children>", each name a link to that budget's card. */
export function treeLines(parent, children) {
  const lines = [];
  if (parent) lines.push(h('p', { class: 'budget-tree' }, 'Under ', cardLink(parent)));
  if (children.length) {
    lines.push(h('p', { class: 'budget-tree' }, 'Over ',
      children.map((c, i) => [i ? ', ' : null, cardLink(c)])));
  }
  return lines.length ? h('div', { class: 'budget-tree-lines' }, lines) : null;
}

/**
 * A 409 insufficient_funds problem in words: the level that is short (the budget itself or
 * one above it, named by the problem's budget_id), by name, with what it has available in
 * its unit; null for any other problem. A charge's dialog and a batch's results both say it.
 */
export function shortfallText(problem, budget, budgetsById) {
  if (!problem || problem.code !== 'insufficient_funds') return null;
  const levelId = problem.budget_id || budget.id;
  const level = budgetsById.get(levelId);
  const text = level
    ? `${level.name} has only ${formatAmount(problem.available_atomic, level.unit)} available`
    : problem.detail;
  return levelId !== budget.id ? `${text} — a spend must fit every level above this budget too.` : `${text}.`;
}
