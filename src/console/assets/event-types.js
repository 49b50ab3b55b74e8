// The event types the API writes.

export const EVENT_TYPES = [
  'tenant.created',
  'tenant.tombstoned',
  'budget.created',
  'budget.updated',
  'budget.closed',
  'budget.credited',
  'budget.debited',
  'budget.available_low',
  'budget.period_reset',
  'reservation.expired',
];
