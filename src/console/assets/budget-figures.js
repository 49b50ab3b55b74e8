// A budget's money at a glance: the bar of available, reserved and spent, and every figure
// in exact digits with its unit.

import { h } from './dom.js';
import { formatAmount, sumAmounts, thousandths } from './money.js';

/** The stacked bar of available / reserved / spent, sized by BigInt ratios. */
export function balanceBar(budget) {
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

/** Every figure of the budget, in exact digits with its unit. */
export function figures(budget) {
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
