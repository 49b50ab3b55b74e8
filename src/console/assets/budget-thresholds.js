// A budget's alert thresholds: the line that shows them, and the field and parsing that
// edit them.

import { h, field } from './dom.js';
import { formatAmount, amountProblem } from './money.js';

/** The thresholds in the budget's unit, or "none". */
export function thresholdsBlock(budget) {
  const list = budget.alert_thresholds_atomic || [];
  return h('p', { class: 'thresholds' }, h('span', { class: 'label' }, 'Alert thresholds: '),
    list.length ? list.map((t) => formatAmount(t, budget.unit)).join(', ') : 'none');
}

/** The "Alert thresholds" field of the edit dialog, filled with the budget's. */
export function thresholdsField(budget) {
  return field('Alert thresholds',
    h('input', { type: 'text', autocomplete: 'off', value: (budget.alert_thresholds_atomic || []).join(', ') }),
    'Comma-separated amounts in atomic units. An event is written when available falls to or below one.');
}

/** The typed thresholds and what is wrong with them: {items, problems}. */
export function parseThresholds(text) {
  const items = text.split(',').map((s) => s.trim()).filter((s) => s !== '');
  const problems = [];
  for (const item of items) {
    if (amountProblem('x', item)) problems.push(`Alert threshold “${item}” is not a whole number of atomic units.`);
  }
  if (new Set(items).size !== items.length) problems.push('Alert thresholds must all be different.');
  if (items.length > 10) problems.push('At most 10 alert thresholds.');
  return { items, problems };
}
