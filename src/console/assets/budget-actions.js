// An admin's actions on a budget: the buttons and their dialogs (credit, debit, edit the
// period and thresholds, close).

import { h, field, showMessages } from './dom.js';
import { api, newIdempotencyKey, budgetPath } from './api.js';
import { formatAmount, amountProblem } from './money.js';
import { openDialog, cancelButton, submitButton, confirmDialog } from './dialog.js';
import { periodFields } from './period-form.js';
import { thresholdsField, parseThresholds } from './budget-thresholds.js';

/** "Credit" or "Debit": an amount (and an optional memo) posted with an Idempotency-Key. */
function openMovementDialog(budget, kind, onChanged) {
  const label = kind === 'credits' ? 'Credit' : 'Debit';
  const idempotencyKey = newIdempotencyKey();
  const amount = field('Amount', h('input', { type: 'text', autocomplete: 'off', inputMode: 'numeric' }),
    `Atomic units (${budget.unit}).`);
  const memo = field('Memo', h('input', { type: 'text', autocomplete: 'off', maxLength: 200 }), 'Optional. A note kept in the ledger.');
  const { alert } = openDialog({
    title: `${label} ${budget.name}`,
    content: [
      h('p', { class: 'muted' }, `Available now: ${formatAmount(budget.available_atomic, budget.unit)}`),
      amount.field, memo.field],
    actions: [cancelButton(), submitButton(label)],
    async onSubmit() {
      const value = amount.input.value.trim();
      const problem = amountProblem('Amount', value, { min: '1' });
      if (problem) {
        showMessages(alert, [problem]);
        return false;
      }
      const body = { amount_atomic: value };
      if (memo.input.value !== '') body.memo = memo.input.value;
      await api(`${budgetPath(budget)}/${kind}`, { method: 'POST', body, idempotencyKey });
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
function openCloseDialog(budget, onChanged) {
  confirmDialog({
    title: `Close ${budget.name}?`,
    text: 'Closing releases its active reservations and freezes the budget: it can never be moved again. This cannot be undone.',
    confirmLabel: 'Close budget',
    async action() {
      await api(budgetPath(budget), { method: 'DELETE' });
      onChanged();
      return true;
    },
  });
}

/** The action buttons; onChanged reloads the page's data after a change. */
export function actionButtons(budget, onChanged) {
  const button = (text, handler, variant = '') => {
    const b = h('button', { type: 'button', class: `button button-small ${variant}` }, text);
    b.addEventListener('click', handler);
    return b;
  };
  return h('div', { class: 'actions' },
    button('Credit', () => openMovementDialog(budget, 'credits', onChanged)),
    button('Debit', () => openMovementDialog(budget, 'debits', onChanged)),
    button('Edit period and thresholds', () => openEditDialog(budget, onChanged)),
    button('Close budget', () => openCloseDialog(budget, onChanged), 'button-danger-quiet'));
}
