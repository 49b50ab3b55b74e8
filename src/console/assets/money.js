// Amounts: u128 decimal strings, shown digit for digit; BigInt only for sums and small ratios.

export const U128_MAX = '340282366920938463463374607431768211455';

/** Whether a string is an amount the API takes: canonical digits, at most u128::MAX. */
export function isAmount(text) {
  if (typeof text !== 'string' || !/^(0|[1-9][0-9]*)$/.test(text)) return false;
  if (text.length !== U128_MAX.length) return text.length < U128_MAX.length;
  return text <= U128_MAX;
}

/** "1000 atomic" */
export function formatAmount(digits, unit) {
  if (digits === null || digits === undefined) return '—';
  return unit ? `${digits} ${unit}` : String(digits);
}

/** The exact sum of amounts, as a decimal string. */
export function sumAmounts(...amounts) {
  return amounts.reduce((total, a) => total + BigInt(a), 0n).toString();
}

/** part / whole in thousandths (0 to 1000), a small Number; 0 when whole is 0. */
export function thousandths(part, whole) {
  const w = BigInt(whole);
  if (w === 0n) return 0;
  return Number((BigInt(part) * 1000n) / w);
}

/** Compares two amounts: -1, 0 or 1. */
export function compareAmounts(a, b) {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Validates a user-typed amount; returns an error sentence or null. */
export function amountProblem(label, text, { min = '0' } = {}) {
  if (!isAmount(text)) {
    return `${label} must be a whole number of atomic units, without sign, spaces or leading zeros, at most ${U128_MAX}.`;
  }
  if (compareAmounts(text, min) < 0) return `${label} must be at least ${min}.`;
  return null;
}
