// A batch of charges on one budget: the dialog that sends them as one request to
// POST /v1/tenants/<id>/batch, and the report of what became of each. The server keeps no
// refusal, so the page that sent the batch is the one place that can show them: the tenant's
// page shows the report above the budget's ledger, until the next batch or until it is left.

import { h, field, table, mono, badge, timeNode, uid, showMessages } from './dom.js';
import { api, newIdempotencyKey } from './api.js';
import { formatAmount, amountProblem } from './money.js';
import { formatInstant } from './time.js';
import { openDialog, cancelButton, submitButton } from './dialog.js';
import { cardLink, shortfallText } from './budget-tree.js';

const BATCH_MAX = 1000; // operations in one batch, as the API takes them
const MEMO_MAX = 200; // characters in a memo, as the API takes them
const PROBLEMS_SHOWN = 5; // lines the dialog's alert lists before it counts the rest

const plural = (n, one, many) => (n === 1 ? `${n} ${one}` : `${n} ${many}`);

/**
 * The charges typed one a line, "<amount> <memo…>" (blank lines skipped): {charges:
 * [{amount, memo}], problems}.
 */
export function parseCharges(text) {
  const charges = [];
  const problems = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '') return;
    const [, amount, memo = ''] = /^(\S+)(?:\s+(.*))?$/.exec(line);
    const problem = amountProblem(`Line ${i + 1}: the amount`, amount, { min: '1' })
      || ([...memo].length > MEMO_MAX ? `Line ${i + 1}: the memo is longer than ${MEMO_MAX} characters.` : null);
    if (problem) problems.push(problem);
    else charges.push({ amount, memo });
  });
  if (charges.length + problems.length === 0) problems.push('Type at least one amount.');
  if (charges.length > BATCH_MAX) problems.push(`A batch holds at most ${BATCH_MAX} charges; this one has ${charges.length}.`);
  if (problems.length > PROBLEMS_SHOWN) {
    const more = problems.length - PROBLEMS_SHOWN;
    problems.splice(PROBLEMS_SHOWN, more, `… and ${plural(more, 'more line', 'more lines')}.`);
  }
  return { charges, problems };
}

/** A checkbox with its label beside it and a hint under both; returns {field, input}. */
function checkField(label, hint) {
  const input = h('input', { type: 'checkbox', id: uid('f') });
  const hintNode = h('p', { class: 'hint', id: `${input.id}-hint` }, hint);
  input.setAttribute('aria-describedby', hintNode.id);
  return {
    field: h('div', { class: 'field' }, h('div', { class: 'check check-text' }, input, h('label', { for: input.id }, label)), hintNode),
    input,
  };
}

const none = () => h('span', { class: 'muted' }, '—');

/**
 * One operation's outcome, from its {status, body}: applied (a 2xx and the ledger entry),
 * not applied (424: an all-or-nothing batch another operation failed), or refused (the
 * problem its single call would have answered).
 */
function outcomeCells(result, budget, budgetsById) {
  const { status = 0, body = null } = result || {};
  if (status >= 200 && status < 300) {
    const entry = body || {};
    return [badge('applied'), none(), none(),
      ['Entry ', mono(entry.id || '—'), `, available after: ${formatAmount(entry.available_atomic, budget.unit)}`]];
  }
  if (status === 424) {
    return [badge('not applied'), none(), none(), 'Not applied: another charge of this all-or-nothing batch was refused.'];
  }
  const problem = body || {};
  let level = none();
  if (problem.code === 'insufficient_funds') {
    const short = budgetsById.get(problem.budget_id || budget.id);
    level = short ? cardLink(short) : mono(problem.budget_id);
  }
  const fields = Array.isArray(problem.errors) ? problem.errors.map((e) => `${e.field}: ${e.message}`) : [];
  const detail = shortfallText(problem, budget, budgetsById)
    || problem.detail || `The server answered ${status || 'nothing'} for this charge.`;
  return [badge('refused'), problem.code ? h('code', {}, problem.code) : none(), level,
    fields.length ? `${detail} (${fields.join('; ')})` : detail];
}

/**
 * The report of a batch sent: a heading naming the budget, a sentence saying how many were
 * applied (or that none was), and a row per charge. applied: whether the batch was (false for
 * a 409 batch_failed). Returns {element, heading}; the heading takes the focus.
 */
function batchReport({ budget, budgetsById, charges, results, atomic, applied, sentAt }) {
  const headingId = uid('batch');
  const heading = h('h3', { id: headingId, tabindex: '-1' }, `Batch on ${budget.name}`);
  const rows = charges.map((charge, i) => {
    const cells = outcomeCells(results[i], budget, budgetsById);
    const detail = cells.pop();
    return h('tr', {},
      h('td', {}, String(i + 1)),
      h('td', {}, mono(formatAmount(charge.amount, budget.unit))),
      h('td', { class: 'wrap' }, charge.memo || none()),
      cells.map((cell) => h('td', {}, cell)),
      h('td', { class: 'wrap' }, detail));
  });
  const statuses = charges.map((_, i) => results[i]?.status ?? 0);
  const isRefused = (s) => !(s >= 200 && s < 300) && s !== 424;
  const done = statuses.filter((s) => s >= 200 && s < 300).length;
  const refused = statuses.filter(isRefused).length;
  // In a batch not applied, a refusal after a charge that would have gone through names what
  // was available with that charge counted.
  const counted = statuses.some((s, i) => s === 424 && statuses.slice(i + 1).some(isRefused));
  const n = plural(charges.length, 'charge', 'charges');
  let summary;
  if (!applied) summary = `Nothing was applied: ${refused} of ${n} refused, and the batch was all or nothing.`;
  else if (refused === 0) summary = charges.length === 1 ? 'The charge was applied.' : `All ${n} were applied.`;
  else summary = `${done} of ${n} applied, ${refused} refused.`;
  const element = h('section', { class: 'card batch', 'aria-labelledby': headingId },
    h('div', { class: 'batch-head' }, heading,
      h('span', { class: 'muted small' }, atomic ? 'All or nothing' : 'Each on its own', ' · sent ',
        timeNode(sentAt, formatInstant(sentAt)))),
    h('p', { class: 'batch-summary' }, summary),
    !applied && counted
      ? h('p', { class: 'muted small' }, 'Each charge was tried as if the ones before it had been applied: what a refusal says is available counts them.')
      : null,
    table({
      caption: 'Batch results',
      captionHidden: true,
      columns: ['#', 'Amount', 'Memo', 'Outcome', 'Code', 'Short level', 'Detail'],
      rows,
    }));
  return { element, heading };
}

/**
 * "Batch": charges typed one a line, with "All or nothing", sent in one request with an
 * Idempotency-Key. Whatever became of them (every one applied, some refused, or none applied
 * in an all-or-nothing batch that failed), the dialog closes and onSent(element, budget)
 * shows the report, whose heading then takes the focus. A request refused as a whole (or
 * not answered) shows in the dialog, as any action's.
 */
export function openBatchDialog(budget, { budgetsById, onSent }) {
  const idempotencyKey = newIdempotencyKey();
  const lines = field('Charges', h('textarea', { rows: 6, autocomplete: 'off' }),
    `One a line: an amount in atomic units (${budget.unit}), then optionally a memo. At most ${BATCH_MAX}.`);
  const atomic = checkField('All or nothing', 'If any charge is refused, none is applied.');
  let report = null;
  const { alert } = openDialog({
    title: `Batch of charges on ${budget.name}`,
    content: [
      h('p', { class: 'muted' }, `Available now: ${formatAmount(budget.available_atomic, budget.unit)}`),
      h('p', { class: 'muted' }, 'The charges go in one request and apply in order. Each must fit this budget and every budget above it.'),
      lines.field, atomic.field],
    actions: [cancelButton(), submitButton('Send batch')],
    async onSubmit() {
      const { charges, problems } = parseCharges(lines.input.value);
      if (problems.length) {
        showMessages(alert, problems);
        return false;
      }
      const body = {
        atomic: atomic.input.checked,
        operations: charges.map((c) => ({
          op: 'charge', budget_id: budget.id, amount_atomic: c.amount, ...(c.memo ? { memo: c.memo } : {}),
        })),
      };
      let answer;
      try {
        const sent = await api(`/v1/tenants/${encodeURIComponent(budget.tenant_id)}/batch`, { method: 'POST', body, idempotencyKey });
        answer = { results: sent.results, applied: true };
      } catch (error) {
        if (error.code !== 'batch_failed' || !Array.isArray(error.problem.results)) throw error;
        answer = { results: error.problem.results, applied: false };
      }
      const results = Array.isArray(answer.results) ? answer.results : [];
      report = batchReport({ budget, budgetsById, charges, results, atomic: body.atomic, applied: answer.applied, sentAt: new Date().toISOString() });
      onSent(report.element, budget);
      return true;
    },
    // The dialog gives the focus back to the button that opened it as it closes: the report's
    // heading takes it after that.
    onClose() {
      if (report) report.heading.focus();
    },
  });
  lines.input.focus();
}
