// The period fields shared by "New tenant" and "Edit period and thresholds".

import { h, field } from './dom.js';
import { amountProblem } from './money.js';
import { browserTimeZone } from './time.js';

const KINDS = [
  ['none', 'None'],
  ['day', 'Daily'],
  ['week', 'Weekly'],
  ['month', 'Monthly'],
  ['fixed', 'Fixed length'],
];
export const MAX_EVERY_SECONDS = 31622400;

function textInput(value, extra = {}) {
  return h('input', { type: 'text', autocomplete: 'off', spellcheck: false, value, ...extra });
}

function kindOf(period) {
  if (!period) return 'none';
  return period.every_seconds !== undefined ? 'fixed' : period.interval;
}

/**
 * Builds the fields, filled from an existing period policy (or none).
 * Returns {element, read()} where read() gives {period, problems}.
 */
export function periodFields(existing = null) {
  const kind = h('select', {}, KINDS.map(([value, text]) => h('option', { value }, text)));
  kind.value = kindOf(existing);
  const zone = field('Time zone', textInput(existing && existing.time_zone ? existing.time_zone : browserTimeZone()),
    'An IANA time zone, such as Europe/Berlin or UTC. Periods start at local midnight.');
  const every = field('Every (seconds)',
    textInput(existing && existing.every_seconds !== undefined ? String(existing.every_seconds) : '3600', { inputMode: 'numeric' }),
    `From 1 to ${MAX_EVERY_SECONDS}.`);
  const allowance = field('Allowance', textInput(existing ? existing.allowance_atomic : '', { inputMode: 'numeric' }),
    'Atomic units the budget starts each period with.');
  const rollover = field('Rollover max', textInput(existing && existing.rollover_max_atomic !== '0' ? existing.rollover_max_atomic : '', { inputMode: 'numeric' }),
    'Optional. The most that carries over into the next period; 0 if empty.');
  const kindField = field('Period', kind, 'A budget with a period starts again with its allowance at every boundary.');

  function sync() {
    const value = kind.value;
    zone.field.hidden = !['day', 'week', 'month'].includes(value);
    every.field.hidden = value !== 'fixed';
    allowance.field.hidden = value === 'none';
    rollover.field.hidden = value === 'none';
  }
  kind.addEventListener('change', sync);
  sync();

  function read() {
    const value = kind.value;
    const problems = [];
    if (value === 'none') return { period: null, problems };
    const period = {};
    if (value === 'fixed') {
      const text = every.input.value.trim();
      if (!/^[1-9][0-9]{0,7}$/.test(text) || Number(text) > MAX_EVERY_SECONDS) {
        problems.push(`Every (seconds) must be a whole number from 1 to ${MAX_EVERY_SECONDS}.`);
      } else period.every_seconds = Number(text);
    } else {
      period.interval = value;
      const tz = zone.input.value.trim();
      if (!tz) problems.push('Time zone is required for a calendar period.');
      period.time_zone = tz || 'UTC';
    }
    const allowanceText = allowance.input.value.trim();
    const allowanceProblem = amountProblem('Allowance', allowanceText);
    if (allowanceProblem) problems.push(allowanceProblem);
    period.allowance_atomic = allowanceText;
    const rolloverText = rollover.input.value.trim();
    if (rolloverText !== '') {
      const rolloverProblem = amountProblem('Rollover max', rolloverText);
      if (rolloverProblem) problems.push(rolloverProblem);
      period.rollover_max_atomic = rolloverText;
    }
    return { period, problems };
  }

  return {
    element: h('div', { class: 'field-group' }, kindField.field, zone.field, every.field, allowance.field, rollover.field),
    read,
  };
}

/** "Monthly, Europe/Berlin, allowance 1000 atomic, rollover max 0" */
export function describePeriod(period, unit) {
  const tail = `allowance ${period.allowance_atomic} ${unit}, rollover max ${period.rollover_max_atomic}`;
  if (period.every_seconds !== undefined) return `Every ${period.every_seconds} seconds, ${tail}`;
  const name = { day: 'Daily', week: 'Weekly', month: 'Monthly' }[period.interval] || period.interval;
  return `${name}, ${period.time_zone}, ${tail}`;
}
