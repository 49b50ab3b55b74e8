// Dates and durations for display.

const localFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

/** An RFC 3339 instant in the browser's time zone. */
export function formatInstant(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : localFormat.format(date);
}

/** An instant in a named IANA time zone (UTC if the browser does not know the zone). */
export function formatInZone(iso, timeZone) {
  const date = new Date(iso);
  try {
    return new Intl.DateTimeFormat(undefined, { timeZone, dateStyle: 'medium', timeStyle: 'short' }).format(date);
  } catch {
    return new Intl.DateTimeFormat(undefined, { timeZone: 'UTC', dateStyle: 'medium', timeStyle: 'short' }).format(date);
  }
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
