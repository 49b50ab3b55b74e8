// An admin's actions on a budget: the buttons and their dialogs (credit, debit, charge, a
// batch of charges, edit the period and thresholds, close).

import { h, field, showMessages } from './dom.js';
import { api, newIdempotencyKey, budgetPath } from './api.js';
import { formatAmount, amountProblem } from './money.js';
import { shortfallText } from './budget-tree.js';
import { openDialog, cancelButton, submitButton, confirmDialog } from './dialog.js';
import { periodFields } from './period-form.js';
import { thresholdsField, parseThresholds } from './budget-thresholds.js';
import { openBatchDialog } from './budget-batch.js';

/** What each movement posts where: a credit or debit names the budget, a charge spends on it. */
const MOVEMENTS = {
  credits: { label: 'Credit', path: (b) => `${budgetPath(b)}/credits` },
  debits: { label: 'Debit', path: (b) => `${budgetPath(b)}/debits` },
  charges: {
    label: 'Charge',
    path: (b) => `/v1/tenants/${encodeURIComponent(b.tenant_id)}/charges`,
    body: (b) => ({ budget_id: b.id }),
    note: 'A charge spends on this budget and on every budget above it: it must fit each of them.',
  },
};

/** A failed spend's error, with a shortfall said in words (shortfallText). */
function shortfall(error, budget, budgetsById) {
  const text = error ? shortfallText(error.problem, budget, budgetsById) : null;
  return text ? new Error(text) : error;
}

/** "Credit", "Debit" or "Charge": an amount (and an optional memo) posted with an Idempotency-Key. */
function openMovementDialog(budget, kind, { onChanged, budgetsById }) {
  const { label, path, body: extra = () => ({}), note } = MOVEMENTS[kind];
  const idempotencyKey = newIdempotencyKey();
  const amount = field('Amount', h('input', { type: 'text', autocomplete: 'off', inputMode: 'numeric' }),
    `Atomic units (${budget.unit}).`);
  const memo = field('Memo', h('input', { type: 'text', autocomplete: 'off', maxLength: 200 }), 'Optional. A note kept in the ledger.');
  const { alert } = openDialog({
    title: `${label} ${budget.name}`,
    content: [
      h('p', { class: 'muted' }, `Available now: ${formatAmount(budget.available_atomic, budget.unit)}`),
      note ? h('p', { class: 'muted' }, note) : null,
      amount.field, memo.field],
    actions: [cancelButton(), submitButton(label)],
    async onSubmit() {
      const value = amount.input.value.trim();
      const problem = amountProblem('Amount', value, { min: '1' });
      if (problem) {
        showMessages(alert, [problem]);
        return false;
      }
      const body = { ...extra(budget), amount_atomic: value };
      if (memo.input.value !== '') body.memo = memo.input.value;
      try {
        await api(path(budget), { method: 'POST', body, idempotencyKey });
      } catch (error) {
        throw shortfall(error, budget, budgetsById);
      }
      onChanged();
      return true;
    },
  });
  amount.input.focus();
}

/** "Edit period and thresholds": PATCH of the period policy and the alert thresholds. */
function openEditDialog(budget, onChanged) {
  const period = periodFields(budget.period);
  const thresholds = thresholdsField(budget);
  const { alert } = openDialog({
    title: `Edit ${budget.name}`,
    content: [
      h('p', { class: 'muted' }, 'A new or changed period starts now. Leave the thresholds empty for none.'),
      period.element, thresholds.field],
    actions: [cancelButton(), submitButton('Save')],
    async onSubmit() {
      const { period: periodValue, problems } = period.read();
      const parsed = parseThresholds(thresholds.input.value);
      problems.push(...parsed.problems);
      if (problems.length) {
        showMessages(alert, problems);
        return false;
      }
      await api(budgetPath(budget), {
        method: 'PATCH',
        body: { period: periodValue, alert_thresholds_atomic: parsed.items },
      });
      onChanged();
      return true;
    },
  });
}

/** "Close budget": a confirmation, then the DELETE that freezes the budget for good. */
function openCloseDialog(budget, { onChanged, children }) {
  confirmDialog({
    title: `Close ${budget.name}?`,
    text: 'Closing releases its active reservations and freezes the budget: it can never be moved again. This cannot be undone.',
    confirmLabel: 'Close budget',
    async action() {
      try {
        await api(budgetPath(budget), { method: 'DELETE' });
      } catch (error) {
        if (error.code !== 'budget_has_open_children') throw error;
        const open = children.filter((c) => c.state === 'open').map((c) => c.name);
        const which = open.length ? ` (${open.join(', ')})` : '';
        throw new Error(`${budget.name} has open budgets under it${which}: close the budgets under it first.`);
      }
      onChanged();
      return true;
    },
  });
}

/**
 * The action buttons; onChanged reloads the page's data after a change; onBatch(element,
 * budget), when given, shows the report of a batch sent from "Batch" where the page shows
 * the budget's activity.
 */
export function actionButtons(budget, { onChanged, onBatch, budgetsById, children = [] }) {
  const context = { onChanged, budgetsById, children };
  const button = (text, handler, variant = '') => {
    const b = h('button', { type: 'button', class: `button button-small ${variant}` }, text);
    b.addEventListener('click', handler);
    return b;
  };
  return h('div', { class: 'actions' },
    button('Credit', () => openMovementDialog(budget, 'credits', context)),
    button('Debit', () => openMovementDialog(budget, 'debits', context)),
    button('Charge', () => openMovementDialog(budget, 'charges', context)),
    onBatch ? button('Batch', () => openBatchDialog(budget, { budgetsById, onSent: onBatch })) : null,
    button('Edit period and thresholds', () => openEditDialog(budget, onChanged)),
    button('Close budget', () => openCloseDialog(budget, context), 'button-danger-quiet'));
}
