// A budget's spend per period: the statements of its last periods, read without its whole
// history, drawn as a bar chart and listed in a table.

import { h, svg, table, mono, timeNode, alertBox, showError } from './dom.js';
import { api, query, idAtTime, budgetPath } from './api.js';
import { formatAmount, thousandths, compareAmounts } from './money.js';
import { formatInZone, zoneFormat } from './time.js';
import { zoneOf } from './budget-period.js';

/** The periods the chart shows: the current one and the eleven before it. */
const CHART_PERIODS = 12;
const DAY_MS = 86400000;
/** Pages of statements the chart reads at most, and statements per page. */
const CHART_PAGES = 3;
const CHART_PAGE_SIZE = 100;

/** "start → end" of a statement's period in the budget's zone ("→ now" for the current one). */
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

/** The statements as a table, newest first: the chart's figures in exact digits. */
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

/** Reads the statements and draws the chart and table in holder, or the error. */
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

/** The "Spend per period" section; its statements load after it is shown. */
export function chartSection(budget, signal) {
  const chartHolder = h('div', { class: 'chart-holder' }, h('p', { class: 'muted' }, 'Loading periods…'));
  loadChart(chartHolder, budget, signal);
  return h('section', { class: 'chart-section' }, h('h4', {}, 'Spend per period'), chartHolder);
}
