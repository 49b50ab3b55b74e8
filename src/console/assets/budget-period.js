// A budget's period: its policy, the current period in the budget's own time zone, and the
// countdown to its reset.

import { h, timeNode } from './dom.js';
import { formatInZone, knownZone, durationUntil } from './time.js';
import { describePeriod } from './period-form.js';

/** The zone the budget's periods are shown in: its own, or UTC if the browser does not know it. */
export function zoneOf(budget) {
  return knownZone(budget.period && budget.period.time_zone ? budget.period.time_zone : 'UTC');
}

/** The period policy, the current period and a countdown refreshed by the caller. */
export function periodBlock(budget, tickers) {
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
