// One budget on a tenant's page: its balance bar, figures, period, thresholds, actions and chart.

import { h, svg, table, field, badge, mono, timeNode, alertBox, showError, showMessages } from './dom.js';
import { api, query, idAtTime, newIdempotencyKey } from './api.js';
import { formatAmount, sumAmounts, thousandths, amountProblem, compareAmounts } from './money.js';
import { formatInstant, formatInZone, zoneFormat, knownZone, durationUntil } from './time.js';
import { openDialog, cancelButton, submitButton, confirmDialog } from './dialog.js';
import { periodFields, describePeriod } from './period-form.js';

const CHART_PERIODS = 12;
const DAY_MS = 86400000;
/** Pages of statements the chart reads at most, and statements per page. */
const CHART_PAGES = 3;
const CHART_PAGE_SIZE = 100;

function budgetPath(budget) {
  return `/v1/tenants/${encodeURIComponent(budget.tenant_id)}/budgets/${encodeURIComponent(budget.id)}`;
}

/** The stacked bar of available / reserved / spent, sized by BigInt ratios. */
function balanceBar(budget) {
  const { available_atomic: available, reserved_atomic: reserved, spent_atomic: spent, unit } = budget;
  const whole = sumAmounts(available, reserved, spent);
  const label = `available ${available} of ${whole} ${unit}, reserved ${reserved}, spent ${spent}`;
  const first = thousandths(available, whole);
  const second = thousandths(sumAmounts(available, reserved), whole);
  const widths = whole === '0' ? [0, 0, 0] : [first, second - first, 1000 - second];
  const bar = h('div', { class: 'bar', role: 'img', 'aria-label': label });
  ['available', 'reserved', 'spent'].forEach((name, i) => {
    const segment = h('div', { class: `bar-segment bar-${name}` });
    segment.style.width = `${widths[i] / 10}%`;
    bar.append(segment);
  });
  const legend = h('ul', { class: 'legend', 'aria-hidden': 'true' },
    ['Available', 'Reserved', 'Spent'].map((text) => h('li', {},
      h('span', { class: `swatch bar-${text.toLowerCase()}` }), text)));
  return h('div', { class: 'bar-block' }, bar, legend);
}

function figures(budget) {
  const rows = [
    ['Available', budget.available_atomic],
    ['Reserved', budget.reserved_atomic],
    ['Spent', budget.spent_atomic],
    ['Balance', budget.balance_atomic],
    ['Credited', budget.credited_atomic],
    ['Debited', budget.debited_atomic],
    ['Opening deposit', budget.opening_deposit_atomic],
  ];
  return h('dl', { class: 'figures' }, rows.map(([term, value]) => h('div', { class: 'figure' },
    h('dt', {}, term), h('dd', { class: 'mono' }, formatAmount(value, budget.unit)))));
}

/** The zone the budget's periods are shown in: its own, or UTC if the browser does not know it. */
function zoneOf(budget) {
  return knownZone(budget.period && budget.period.time_zone ? budget.period.time_zone : 'UTC');
}

/** The period policy, the current period and a countdown refreshed by the caller. */
function periodBlock(budget, tickers) {
  if (!budget.period) return h('p', { class: 'muted' }, 'No period: the budget does not renew.');
  const zone = zoneOf(budget);
  const nodes = [h('p', { class: 'period-policy' }, describePeriod(budget.period, budget.unit))];
  const current = budget.current_period;
  if (current) {
    nodes.push(h('p', { class: 'muted' }, 'Current period: ',
      timeNode(current.started_at, formatInZone(current.started_at, zone)), ' → ',
      timeNode(current.ends_at, formatInZone(current.ends_at, zone))));
    const countdown = h('strong', {});
    const update = () => {
      const left = durationUntil(current.ends_at);
      countdown.textContent = left ? `Resets in ${left}` : 'Resetting now';
    };
    update();
    tickers.push(update);
    nodes.push(h('p', { class: 'reset' }, countdown, ' · ',
      h('span', {}, `on ${formatInZone(current.ends_at, zone)} (${zone})`)));
  }
  return h('div', { class: 'period' }, nodes);
}

function thresholdsBlock(budget) {
  const list = budget.alert_thresholds_atomic || [];
  return h('p', { class: 'thresholds' }, h('span', { class: 'label' }, 'Alert thresholds: '),
    list.length ? list.map((t) => formatAmount(t, budget.unit)).join(', ') : 'none');
}

function periodSpan(statement, zone) {
  const start = formatInZone(statement.started_at, zone);
  return statement.state === 'current' ? `${start} → now` : `${start} → ${formatInZone(statement.ends_at, zone)}`;
}

/** How a bar is labelled: by month, by day, or by time of day for short periods. */
function periodLabeller(budget) {
  const zone = zoneOf(budget);
  const period = budget.period || {};
  let options = { month: 'short', day: 'numeric' };
  if (period.interval === 'month') options = { month: 'short', year: 'numeric' };
  else if (period.every_seconds !== undefined && period.every_seconds < 86400) {
    options = { hour: 'numeric', minute: '2-digit', timeZoneName: 'short' };
  }
  const format = zoneFormat(options, zone);
  return (iso) => format.format(new Date(iso));
}

/** The bar chart of spend per period, drawn with SVG DOM calls. */
function spendChart(statements, budget) {
  const zone = zoneOf(budget);
  const width = 600;
  const height = 160;
  const top = 8;
  const bottom = 24;
  const plot = height - top - bottom;
  const largest = statements.reduce((max, s) => (compareAmounts(s.spent_atomic, max) > 0 ? s.spent_atomic : max), '0');
  const slot = width / CHART_PERIODS;
  const barWidth = Math.max(8, slot * 0.6);
  const chart = svg('svg', { viewBox: `-16 0 ${width + 32} ${height}`, role: 'img', 'aria-label': 'Spend per period', class: 'chart' });
  chart.append(svg('line', { x1: 0, x2: width, y1: top + plot + 0.5, y2: top + plot + 0.5, class: 'chart-axis' }));
  const labelOf = periodLabeller(budget);
  const labels = statements.map((st) => labelOf(st.started_at));
  const longest = labels.reduce((max, text) => Math.max(max, text.length), 0);
  const labelEvery = Math.max(1, Math.ceil((longest * 11) / slot));
  statements.forEach((statement, i) => {
    const ratio = thousandths(statement.spent_atomic, largest);
    const barHeight = Math.max(ratio === 0 ? 0 : 1, (plot * ratio) / 1000);
    const x = i * slot + (slot - barWidth) / 2;
    const rect = svg('rect', {
      x, y: top + plot - barHeight, width: barWidth, height: barHeight, rx: 2,
      class: statement.state === 'current' ? 'chart-bar chart-bar-current' : 'chart-bar',
    }, svg('title', {}, `${periodSpan(statement, zone)}: spent ${formatAmount(statement.spent_atomic, budget.unit)}`));
    chart.append(rect);
    if (i % labelEvery === 0) {
      const label = svg('text', { x: i * slot + slot / 2, y: height - 6, class: 'chart-label', 'text-anchor': 'middle' });
      label.textContent = labels[i];
      chart.append(label);
    }
  });
  return chart;
}

function statementsTable(statements, budget) {
  const zone = zoneOf(budget);
  return table({
    caption: 'Statements',
    columns: ['Started', 'Ended', 'Spent', 'Carried out'],
    rows: statements.slice().reverse().map((s) => [
      timeNode(s.started_at, formatInZone(s.started_at, zone)),
      s.state === 'current' ? h('span', { class: 'muted' }, 'current') : timeNode(s.ends_at, formatInZone(s.ends_at, zone)),
      mono(formatAmount(s.spent_atomic, budget.unit)),
      s.carried_out_atomic === null ? h('span', { class: 'muted' }, '—') : mono(formatAmount(s.carried_out_atomic, budget.unit)),
    ]),
  });
}

/**
 * The length of one of the budget's periods in ms: a calendar period's longest (a day of
 * 24 h, a week, a month of 31 days); without a period (its statements are from an earlier
 * policy), a month's.
 */
function periodLengthMs(period) {
  if (period && period.every_seconds !== undefined) return period.every_seconds * 1000;
  const days = { day: 1, week: 7, month: 31 }[period && period.interval];
  return (days || 31) * DAY_MS;
}

/**
 * The statements of the budget's last CHART_PERIODS periods, oldest first, without reading
 * its whole history: period ids are ULIDs that begin with their creation time, and a list's
 * `after` takes any well-formed id, so the list starts at the id of "13 periods ago".
 */
async function recentStatements(budget) {
  let now = Date.now();
  const current = budget.current_period;
  if (current) {
    // Hold "now" within the current period as the server sees it, should the browser's clock
    // be off: the window then still reaches back 12 whole periods.
    const started = Date.parse(current.started_at);
    const ends = Date.parse(current.ends_at);
    if (Number.isFinite(started) && now < started) now = started;
    if (Number.isFinite(ends) && now > ends) now = ends;
  }
  let after = idAtTime('per', now - (CHART_PERIODS + 1) * periodLengthMs(budget.period));
  const statements = [];
  for (let pages = 0; pages < CHART_PAGES; pages += 1) {
    const page = await api(`${budgetPath(budget)}/periods${query({ after, limit: CHART_PAGE_SIZE })}`);
    statements.push(...page.data);
    if (!page.has_more) break;
    after = page.next_after;
  }
  return statements.slice(-CHART_PERIODS);
}

async function loadChart(holder, budget, signal) {
  try {
    const statements = await recentStatements(budget);
    if (signal.aborted) return;
    if (statements.length === 0) {
      holder.replaceChildren(h('p', { class: 'muted' }, 'No periods'));
      return;
    }
    holder.replaceChildren(spendChart(statements, budget), statementsTable(statements, budget));
  } catch (error) {
    if (signal.aborted) return;
    const alert = alertBox();
    showError(alert, error);
    holder.replaceChildren(alert);
  }
}

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

function parseThresholds(text) {
  const items = text.split(',').map((s) => s.trim()).filter((s) => s !== '');
  const problems = [];
  for (const item of items) {
    if (amountProblem('x', item)) problems.push(`Alert threshold “${item}” is not a whole number of atomic units.`);
  }
  if (new Set(items).size !== items.length) problems.push('Alert thresholds must all be different.');
  if (items.length > 10) problems.push('At most 10 alert thresholds.');
  return { items, problems };
}

/** "Edit period and thresholds": PATCH of the period policy and the alert thresholds. */
function openEditDialog(budget, onChanged) {
  const period = periodFields(budget.period);
  const thresholds = field('Alert thresholds',
    h('input', { type: 'text', autocomplete: 'off', value: (budget.alert_thresholds_atomic || []).join(', ') }),
    'Comma-separated amounts in atomic units. An event is written when available falls to or below one.');
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

function actionButtons(budget, onChanged) {
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

/**
 * Builds the budget's article. manage: whether admin actions show; tickers collects the
 * countdown updaters; onChanged reloads the page's data.
 */
export function budgetCard(budget, { manage, tickers, signal, onChanged }) {
  const chartHolder = h('div', { class: 'chart-holder' }, h('p', { class: 'muted' }, 'Loading periods…'));
  const headingId = `budget-${budget.id}`;
  const article = h('article', { class: 'card budget', 'aria-labelledby': headingId },
    h('div', { class: 'budget-head' },
      h('h3', { id: headingId }, budget.name),
      badge(budget.state),
      h('span', { class: 'muted mono small' }, budget.id)),
    balanceBar(budget),
    figures(budget),
    periodBlock(budget, tickers),
    thresholdsBlock(budget),
    budget.closed_at ? h('p', { class: 'muted' }, 'Closed ', timeNode(budget.closed_at, formatInstant(budget.closed_at))) : null,
    manage && budget.state === 'open' ? actionButtons(budget, onChanged) : null,
    h('section', { class: 'chart-section' }, h('h4', {}, 'Spend per period'), chartHolder));
  loadChart(chartHolder, budget, signal);
  return article;
}
