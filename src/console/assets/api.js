// The fetch wrapper for the /v1 API: bearer token, JSON bodies, problem documents as errors.

import { storedToken } from './session.js';

/** An API or network failure; message is the problem's detail. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `The server answered ${status}.`);
    this.name = 'ApiError';
    this.status = status;
    this.code = problem.code || null;
    this.problem = problem;
    this.fieldErrors = Array.isArray(problem.errors) ? problem.errors : [];
  }
}

let onUnauthorized = null;

/** Called with the ApiError when the server answers 401 to the token still stored. */
export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

/** A random UUID for an Idempotency-Key; works outside secure contexts too. */
export function newIdempotencyKey() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

async function readProblem(response) {
  const type = response.headers.get('content-type') || '';
  if (type.includes('json')) {
    try {
      const body = await response.json();
      if (body && typeof body === 'object') return body;
    } catch {
      // fall through to the generic problem
    }
  }
  const what = response.statusText ? `${response.status} ${response.statusText}` : String(response.status);
  return { title: response.statusText, status: response.status, detail: `The server answered ${what}.` };
}

/** The API path of a budget: what its actions and its statements are read and posted under. */
export function budgetPath(budget) {
  return `/v1/tenants/${encodeURIComponent(budget.tenant_id)}/budgets/${encodeURIComponent(budget.id)}`;
}

/** Builds a query string from an object, leaving out empty values. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

/**
 * Calls the API. Options: method, body (sent as JSON), idempotencyKey, token (instead of the
 * stored one; a 401 then does not sign out).
 */
export async function api(path, { method = 'GET', body, idempotencyKey, token } = {}) {
  const bearer = token || storedToken();
  const headers = { Accept: 'application/json' };
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, { detail: 'The server could not be reached. Check the connection and try again.' });
  }
  if (!response.ok) {
    const error = new ApiError(response.status, await readProblem(response));
    if (response.status === 401 && !token && onUnauthorized && storedToken() === bearer) onUnauthorized(error);
    throw error;
  }
  if (response.status === 204) return null;
  return response.json();
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/**
 * The id `<prefix>_<ULID>` of a ULID whose time is `ms` (Unix milliseconds) and whose
 * randomness is all zeros: the smallest id of that kind created in that millisecond. A ULID
 * is 26 Crockford base-32 characters, upper case: 10 for the 48-bit time (5 bits each, most
 * significant first, so the first is 0-7), then 16 for the 80 bits of randomness. Lists take
 * any well-formed id as `after`, whether or not it names an item, and list in id order: with
 * this one as `after`, a list starts at what was created from `ms` on.
 */
export function idAtTime(prefix, ms) {
  let time = Math.min(Math.max(Math.floor(ms), 0), 2 ** 48 - 1);
  let timeChars = '';
  for (let i = 0; i < 10; i += 1) {
    timeChars = CROCKFORD[time % 32] + timeChars;
    time = Math.floor(time / 32);
  }
  return `${prefix}_${timeChars}${'0'.repeat(16)}`;
}

/** Reads every page of a list (limit 1000 each), up to maxItems items. */
export async function listAll(path, params = {}, maxItems = 10000) {
  const items = [];
  let after = null;
  for (;;) {
    const page = await api(`${path}${query({ ...params, limit: 1000, after })}`);
    items.push(...page.data);
    if (!page.has_more || items.length >= maxItems) return items;
    after = page.next_after;
  }
}
