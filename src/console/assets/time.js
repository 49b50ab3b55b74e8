// Dates and durations for display. Every time shown names its zone: the browser's for what
// happened (ledger, events, reservations), the budget's for its periods.

/** A date and a time of day with the zone's short name: "Nov 26, 2026, 8:45 AM UTC". */
const DATE_TIME = {
  year: 'numeric', month: 'short', day: 'numeric', hour: 'numeric', minute: '2-digit', timeZoneName: 'short',
};

const localFormat = new Intl.DateTimeFormat(undefined, DATE_TIME);

/** An RFC 3339 instant in the browser's time zone. */
export function formatInstant(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : localFormat.format(date);
}

/** The IANA time zone itself if the browser knows it, else UTC (what it is then shown in). */
export function knownZone(timeZone) {
  try {
    new Intl.DateTimeFormat(undefined, { timeZone });
    return timeZone;
  } catch {
    return 'UTC';
  }
}

/** A formatter of the given options in a time zone, UTC if the browser does not know it. */
export function zoneFormat(options, timeZone) {
  return new Intl.DateTimeFormat(undefined, { ...options, timeZone: knownZone(timeZone) });
}

/** An instant in a named IANA time zone (UTC if the browser does not know the zone). */
export function formatInZone(iso, timeZone) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : zoneFormat(DATE_TIME, timeZone).format(date);
}

/** The browser's IANA time zone, or UTC. */
export function browserTimeZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

/** A coarse duration until an instant: "3 d 4 h", "5 h 12 min", "7 min". */
export function durationUntil(iso, now = Date.now()) {
  const ms = new Date(iso).getTime() - now;
  if (!(ms > 0)) return null;
  const minutes = Math.floor(ms / 60000);
  const days = Math.floor(minutes / 1440);
  const hours = Math.floor((minutes % 1440) / 60);
  const mins = minutes % 60;
  if (days > 0) return `${days} d ${hours} h`;
  if (hours > 0) return `${hours} h ${mins} min`;
  if (mins > 0) return `${mins} min`;
  return 'less than a minute';
}

/** "every 3600 seconds" style phrase for a fixed-length period. */
export function describeSeconds(seconds) {
  return seconds === 1 ? '1 second' : `${seconds} seconds`;
}
