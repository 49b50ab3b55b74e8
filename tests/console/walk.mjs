// The web console in a real browser: Debian's headless Chromium, driven by playwright-core
// through the accessible names the console's spec gives (roles, labels, button names, headings),
// as a person would use it. scripts/console-test.sh starts the servers and runs it:
//
//   CONSOLE_URL       tenantd A (admin token, webhooks to http:// and private addresses)
//   ADMIN_TOKEN_FILE  its admin token (tenantd B takes the same one)
//   OIDC_CONSOLE_URL  tenantd B, whose console signs in at OIDC_ISSUER
//   OIDC_ISSUER       tests/oidc/provider.mjs, with a public client for B's console
//   SCREENSHOT_DIR    where the screenshots go (target/console/)
//   TMPDIR            where Chromium's profile goes (a folder of console-test.sh's work directory)
//
// It prints each step and exits 1 at the first failure, naming the step. Throughout, every
// page must log no console error, throw no uncaught error, trigger no Content-Security-Policy
// violation, open no alert/confirm/prompt, and request nothing from any origin but its
// server's (and, while signing in with OIDC, the identity provider's); no request URL and no
// console message may hold a token.

import { mkdirSync, readFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { createHash, createHmac, randomUUID } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { join } from 'node:path';

import { chromium } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';

const CHROMIUM = '/usr/bin/chromium';
// Without the background-networking flags Chromium calls Google's services, which this
// machine's network refuses. chromium.launch() gives it a fresh --user-data-dir of its own, a
// new directory under TMPDIR (Playwright refuses the flag in args): console-test.sh sets TMPDIR
// to a folder of its work directory, so that every Chromium process names that directory on
// its command line, and stops them by it (Playwright starts Chromium in a session of its own).
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const WAIT_MS = 10_000; // any one element, text or dialog to appear
const NAVIGATION_MS = 15_000;
const LAUNCH_MS = 60_000; // Chromium's first start on a cold machine builds its font cache
const DELIVERY_MS = 30_000; // a webhook delivery to reach the receiver and show as succeeded
const U128_MAX = '340282366920938463463374607431768211455';
const HOSTILE_NAME = '<img src=x onerror=alert(1)>';
const VIEWPORTS = [
  { width: 1280, height: 800 },
  { width: 390, height: 844 },
];
const TOKEN_KEY = 'tenantd.token';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run scripts/console-test.sh`);
  return value;
};
const config = {
  url: env('CONSOLE_URL'),
  oidcUrl: env('OIDC_CONSOLE_URL'),
  issuer: env('OIDC_ISSUER'),
  adminToken: readFileSync(env('ADMIN_TOKEN_FILE'), 'utf8').trim(),
  screenshots: env('SCREENSHOT_DIR'),
};

// ---------------------------------------------------------------------------------------
// Steps and checks

let currentStep = '(start)';
const started = Date.now();
const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

/** Runs one named step, and fails it too if a monitor given saw a problem meanwhile. */
async function step(name, fn, ...monitors) {
  currentStep = name;
  const t = Date.now();
  process.stdout.write(`- ${name} ... `);
  await fn();
  for (const monitor of monitors) monitor.assertClean();
  console.log(`ok (${seconds(Date.now() - t)})`);
}

class CheckFailed extends Error {}

function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

const show = (value) => JSON.stringify(value);

/**
 * Waits (at most `timeout` ms, polling) until `read()` gives a value `accept` takes; fails
 * with `what`, the expectation and the last value read.
 */
async function until(what, read, accept, { timeout = WAIT_MS, expected = '' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  let lastError;
  for (;;) {
    try {
      last = await read();
      lastError = undefined;
      if (accept(last)) return last;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const saw = lastError ? `an error: ${lastError.message.split('\n')[0]}` : show(last);
      throw new CheckFailed(`${what}: expected ${expected || 'a match'} within ${seconds(timeout)}, saw ${saw}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The trimmed text of a locator's first element, or null when there is none. */
async function textOf(locator) {
  if ((await locator.count()) === 0) return null;
  return (await locator.first().textContent())?.trim() ?? null;
}

/** Waits until the locator's (trimmed) text is exactly `expected`. */
const untilText = (what, locator, expected, options) =>
  until(what, () => textOf(locator), (text) => text === expected, { expected: show(expected), ...options });

async function visible(what, locator, timeout = WAIT_MS) {
  try {
    await locator.first().waitFor({ state: 'visible', timeout });
  } catch {
    throw new CheckFailed(`${what}: not visible within ${seconds(timeout)}`);
  }
  return locator.first();
}

/** Checks that no element of the locator is visible (hidden ones are absent to a person). */
async function absent(what, locator) {
  const count = await locator.filter({ visible: true }).count();
  check(count === 0, `${what}: expected none, found ${count} visible`);
}

// ---------------------------------------------------------------------------------------
// The HTTP API and the raw /console/ answers, from Node

/** A call of tenantd's API; fails unless it answers 200 (or 201 to a POST). */
async function api(method, path, { token = config.adminToken, body, base = config.url } = {}) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    if (method === 'POST') headers['idempotency-key'] = randomUUID();
  }
  const response = await fetch(base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(WAIT_MS),
  });
  const text = await response.text();
  const expected = method === 'POST' ? [200, 201] : [200];
  check(expected.includes(response.status), `${method} ${path}: answered ${response.status}: ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : null;
}

/** One GET with node:http: status, headers and the body's bytes as sent (not decoded). */
function rawGet(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers, timeout: WAIT_MS }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} took over ${WAIT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
}

// ---------------------------------------------------------------------------------------
// The webhook receiver: answers 204 and keeps every request

function startReceiver() {
  const requests = [];
  const waiters = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      requests.push({ method: req.method, path: req.url, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(204);
      res.end();
      for (const wake of waiters.splice(0)) wake();
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}/hooks/tenantd`,
        requests,
        close: () => {
          server.closeAllConnections();
          return new Promise((r) => server.close(r));
        },
        /** The first request `match` takes, waiting at most `timeout` ms for it. */
        async waitFor(match, timeout) {
          const deadline = Date.now() + timeout;
          for (;;) {
            const found = requests.find(match);
            if (found) return found;
            const left = deadline - Date.now();
            check(left > 0, `the receiver got no such request within ${seconds(timeout)} (it got ${requests.length}: ${show(requests.map((r) => r.headers['webhook-id']))})`);
            await new Promise((wake) => {
              waiters.push(wake);
              setTimeout(wake, left);
            });
          }
        },
      });
    });
  });
}

/** Whether a delivery's webhook-signature verifies with the endpoint's secret (Standard Webhooks). */
function signatureVerifies(delivery, secret) {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const signed = `${delivery.headers['webhook-id']}.${delivery.headers['webhook-timestamp']}.${delivery.body}`;
  const expected = `v1,${createHmac('sha256', key).update(signed).digest('base64')}`;
  return (delivery.headers['webhook-signature'] ?? '').split(' ').includes(expected);
}

// ---------------------------------------------------------------------------------------
// What every page must not do: the monitor of one browser context

class Monitor {
  /**
   * @param {string} name       whose pages these are, for the messages
   * @param {string[]} origins  the origins its pages may request
   * @param {string[]} secrets  strings no request URL and no console message may hold
   */
  constructor(name, origins, secrets) {
    this.name = name;
    this.origins = new Set(origins);
    this.secrets = secrets;
    this.problems = [];
    this.cspViolations = [];
    this.tolerated = null;
  }

  static async attach(context, name, origins, secrets) {
    const monitor = new Monitor(name, origins, secrets);
    // The listener is injected through the DevTools protocol before any page script, and
    // reports through a binding (not a request), so the console's CSP does not apply to it;
    // checkCspListener() proves on a live console page that it reports.
    await context.exposeBinding('__tenantdTestCspViolation', ({ page }, v) => {
      const problem = `CSP violation on ${page.url()}: ${v.directive} blocked ${v.blocked || '(inline)'} by ${v.element || '(no element)'} at ${v.source}:${v.line} ${v.sample}`;
      monitor.cspViolations.push({ ...v, problem });
      monitor.problems.push(problem);
    });
    await context.addInitScript(() => {
      window.addEventListener(
        'securitypolicyviolation',
        (e) => {
          // The violating element, when it is one: <style id="…"> as "style#…".
          const element = e.target instanceof Element ? e.target.localName + (e.target.id ? `#${e.target.id}` : '') : '';
          window.__tenantdTestCspViolation({
            directive: e.effectiveDirective,
            blocked: e.blockedURI,
            element,
            source: e.sourceFile,
            line: e.lineNumber,
            sample: e.sample,
          });
        },
        true,
      );
    });
    context.on('request', (request) => monitor.onRequest(request));
    context.on('page', (page) => monitor.watch(page));
    return monitor;
  }

  watch(page) {
    page.on('console', (message) => {
      const text = message.text();
      for (const secret of this.secrets) {
        if (text.includes(secret)) this.problems.push(`a console message holds a token: ${message.type()} ${text.slice(0, 200)}`);
      }
      if (message.type() !== 'error') return;
      if (this.tolerated?.test(text)) {
        console.log(`\n    (expected console error: ${text})`);
        return;
      }
      const where = message.location();
      this.problems.push(`console error on ${page.url()}: ${text} (${where.url}:${where.lineNumber})`);
    });
    page.on('pageerror', (error) => this.problems.push(`uncaught error on ${page.url()}: ${error.message}`));
    page.on('dialog', (dialog) => {
      this.problems.push(`a ${dialog.type()} dialog opened on ${page.url()}: ${show(dialog.message())}`);
      dialog.dismiss().catch(() => {});
    });
  }

  onRequest(request) {
    const url = request.url();
    let origin;
    try {
      origin = new URL(url).origin;
    } catch {
      origin = url;
    }
    if (!this.origins.has(origin)) this.problems.push(`a request to another origin: ${request.method()} ${url}`);
    for (const secret of this.secrets) {
      if (url.includes(secret)) this.problems.push(`a request URL holds a token: ${request.method()} ${url}`);
    }
  }

  /** Runs fn with console errors matching `pattern` expected (e.g. a deliberate 401). */
  async tolerating(pattern, fn) {
    this.tolerated = pattern;
    try {
      return await fn();
    } finally {
      this.tolerated = null;
    }
  }

  /** Forgets one problem the test caused on purpose (and its CSP violation, if it is one). */
  forget(problem) {
    const index = this.problems.indexOf(problem);
    check(index >= 0, `the monitor has no problem ${show(problem)} to forget`);
    this.problems.splice(index, 1);
    const violation = this.cspViolations.findIndex((v) => v.problem === problem);
    if (violation >= 0) this.cspViolations.splice(violation, 1);
  }

  assertClean(when = '') {
    check(this.problems.length === 0, `${this.name}'s pages${when}:\n      ${this.problems.join('\n      ')}`);
  }
}

// ---------------------------------------------------------------------------------------
// The console: pages, dialogs, figures and tables

async function newContext(browser, base, { viewport = VIEWPORTS[0], clipboard = false } = {}) {
  const context = await browser.newContext({ viewport, locale: 'en-US', timezoneId: 'UTC' });
  context.setDefaultTimeout(WAIT_MS);
  context.setDefaultNavigationTimeout(NAVIGATION_MS);
  if (clipboard) await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  return context;
}

/** Waits for the page whose one h1 is exactly `name`. */
async function expectPage(page, name, timeout = WAIT_MS) {
  await untilText(`the page's h1`, page.locator('h1'), name, { timeout });
  const count = await page.locator('h1').count();
  check(count === 1, `the page "${name}" has ${count} h1 elements, not one`);
}

/**
 * Opens a route of the console (`#/tenants`, …) as a fresh load of the page, so that what the
 * test then waits for is the new document's, never the old one's. A goto that changes only
 * the fragment would be a same-document navigation (the old page stays until the router
 * runs): on the console already, the URL is replaced without a navigation and reloaded.
 */
async function visit(page, base, route) {
  const url = `${base}/console/${route}`;
  if (page.url().split('#')[0] === url.split('#')[0]) {
    await page.evaluate((u) => history.replaceState(null, '', u), url);
    await page.reload();
  } else {
    await page.goto(url);
  }
}

const button = (scope, name) => scope.getByRole('button', { name, exact: true });

/** The open modal <dialog> whose heading is `title`: waits for it and checks it is modal. */
async function openDialog(page, title) {
  const dialog = page.locator('dialog[open]').filter({ has: page.getByRole('heading', { name: title, exact: true }) });
  await visible(`the dialog "${title}"`, dialog);
  check(await dialog.evaluate((d) => d.matches(':modal')), `the dialog "${title}" is open but not modal (showModal())`);
  return dialog;
}

async function expectDialogClosed(page, title) {
  const dialog = page.locator('dialog[open]').filter({ has: page.getByRole('heading', { name: title, exact: true }) });
  await until(`the dialog "${title}" to close`, () => dialog.count(), (n) => n === 0, { expected: 'it closed' });
}

async function signIn(page, base, token) {
  await page.goto(`${base}/console/`);
  await expectPage(page, 'Sign in to tenantd');
  const field = page.getByLabel('Token', { exact: true });
  check((await field.getAttribute('type')) === 'password', 'the "Token" input is not type=password');
  await field.fill(token);
  await button(page, 'Sign in').click();
}

/** A budget's card: the article whose h3 is the budget's name. */
const budgetCard = (page, name) =>
  page.getByRole('article').filter({ has: page.getByRole('heading', { level: 3, name, exact: true }) });

const escapeRegExp = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The <dd> after the <dt> `term` in a card. */
const figure = (card, term) =>
  card.locator('dt').filter({ hasText: new RegExp(`^\\s*${escapeRegExp(term)}\\s*$`) }).locator('xpath=following-sibling::dd[1]');

/** Waits until each figure of the card reads exactly as given ({Available: '650 atomic', …}). */
async function expectFigures(card, figures, what) {
  for (const [term, text] of Object.entries(figures)) {
    await untilText(`${what}: ${term}`, figure(card, term), text);
  }
}

/** The table captioned `caption`: its column names and its body rows as {column: text}. */
async function readTable(page, caption) {
  const table = page.getByRole('table', { name: caption, exact: true });
  await visible(`the table "${caption}"`, table);
  return table.evaluate((t) => {
    const text = (cell) => cell.textContent.replace(/\s+/g, ' ').trim();
    const rows = [...t.rows];
    const headerRow = rows.find((r) => [...r.cells].every((c) => c.tagName === 'TH'));
    const columns = headerRow ? [...headerRow.cells].map(text) : [];
    const body = rows
      .filter((r) => r !== headerRow && !r.closest('thead'))
      .map((r) => Object.fromEntries([...r.cells].map((c, i) => [columns[i] ?? String(i), text(c)])));
    return { columns, rows: body };
  });
}

/** Waits until the table captioned `caption` has rows that `accept` takes; returns them. */
const untilRows = (what, page, caption, accept, options) =>
  until(what, async () => (await readTable(page, caption)).rows, accept, options);

/** Where the token is in this page: it must be in sessionStorage only. */
async function checkTokenPlacement(page, token, who) {
  const found = await page.evaluate(
    ([t, key]) => ({
      session: sessionStorage.getItem(key),
      local: Object.keys(localStorage).filter((k) => k.includes(t) || (localStorage.getItem(k) ?? '').includes(t)),
      cookie: document.cookie.includes(t),
      url: location.href.includes(t),
    }),
    [token, TOKEN_KEY],
  );
  check(found.session === token, `${who}: sessionStorage["${TOKEN_KEY}"] is not the token`);
  check(found.local.length === 0, `${who}: the token is in localStorage (${show(found.local)})`);
  check(!found.cookie, `${who}: the token is in document.cookie`);
  check(!found.url && !page.url().includes(token), `${who}: the token is in the URL`);
  const cookies = await page.context().cookies();
  check(!cookies.some((c) => c.value.includes(token)), `${who}: the token is in a cookie`);
}

async function axe(page, what) {
  const results = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa']).analyze();
  const findings = results.violations;
  for (const v of findings) {
    console.log(`\n    axe ${what}: ${v.impact} ${v.id}: ${v.help} (${v.nodes.length}: ${v.nodes.slice(0, 4).map((n) => n.target.join(' ')).join(', ')})`);
  }
  const bad = findings.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  check(bad.length === 0, `axe-core on ${what}: ${bad.length} serious or critical finding(s): ${bad.map((v) => `${v.id} (${v.impact}): ${v.nodes[0]?.failureSummary?.replace(/\s+/g, ' ')}`).join('; ')}`);
  if (findings.length === 0) process.stdout.write('(axe: no finding) ');
}

/** Screenshots of the page at each viewport; at the narrow one the page must not scroll sideways. */
async function screenshots(page, name) {
  for (const viewport of VIEWPORTS) {
    await page.setViewportSize(viewport);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    check(overflow <= 0, `${name} at ${viewport.width}x${viewport.height}: the page scrolls sideways by ${overflow} px (tables should scroll in their wrapper)`);
    const path = join(config.screenshots, `${name}-${viewport.width}x${viewport.height}.png`);
    await page.screenshot({ path, fullPage: true });
  }
  await page.setViewportSize(VIEWPORTS[0]);
}

// ---------------------------------------------------------------------------------------
// The checks

async function checkServing() {
  await step('GET /console/: security headers, gzip, ETag and 304', async () => {
    const page = await rawGet(`${config.url}/console/`, { 'accept-encoding': 'gzip' });
    check(page.status === 200, `GET /console/ answered ${page.status}`);
    const csp = page.headers['content-security-policy'] ?? '';
    check(csp, 'GET /console/ has no Content-Security-Policy header');
    const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).filter((d) => d[0]).map(([k, ...v]) => [k, v]));
    check(show(directives['default-src']) === show(["'self'"]), `the CSP's default-src is not 'self' alone: ${csp}`);
    check(show(directives['frame-ancestors']) === show(["'none'"]), `the CSP's frame-ancestors is not 'none': ${csp}`);
    check(!csp.includes('unsafe-inline') && !csp.includes('unsafe-eval'), `the CSP allows unsafe-inline or unsafe-eval: ${csp}`);
    check(page.headers['content-encoding'] === 'gzip', `GET /console/ with Accept-Encoding: gzip is not gzip-compressed (content-encoding ${page.headers['content-encoding']})`);
    const html = gunzipSync(page.body).toString('utf8');
    check(html.includes('<script type="module"'), 'the gunzipped /console/ is not the console\'s index.html');
    check(/^text\/html/.test(page.headers['content-type'] ?? ''), `/console/ is served as ${page.headers['content-type']}`);
    const etag = page.headers.etag;
    check(etag, 'GET /console/ has no ETag');
    const again = await rawGet(`${config.url}/console/`, { 'accept-encoding': 'gzip', 'if-none-match': etag });
    check(again.status === 304, `GET /console/ with If-None-Match: ${etag} answered ${again.status}, not 304`);
    check(again.body.length === 0, 'the 304 has a body');

    const cfg = await rawGet(`${config.url}/console/config.json`);
    check(cfg.status === 200 && show(JSON.parse(cfg.body.toString()).oidc) === 'null', `/console/config.json without OIDC is not {"oidc": null}: ${cfg.status} ${cfg.body}`);
    const oidcPage = await rawGet(`${config.oidcUrl}/console/`);
    const oidcCsp = oidcPage.headers['content-security-policy'] ?? '';
    const connect = oidcCsp.split(';').map((d) => d.trim()).find((d) => d.startsWith('connect-src ')) ?? '';
    check(connect.split(/\s+/).includes(config.issuer), `with OIDC, the CSP's connect-src does not name the issuer ${config.issuer}: ${oidcCsp}`);
  });
}

/**
 * Proves, on a live console page, that a CSP violation reaches the monitor: an inline <style>
 * with an id and a content of its own, which the CSP blocks. Waits for that violation (by
 * directive, blocked URI and element) and for Chromium's console error about it (which names
 * the style's own sha256 hash), then forgets those two and nothing else. Anything the monitor
 * saw before the probe fails the step first.
 */
async function checkCspListener(page, monitor) {
  monitor.assertClean(' before the CSP probe');
  check(monitor.cspViolations.length === 0, `CSP violations before the probe: ${show(monitor.cspViolations)}`);
  const id = `tenantd-test-csp-probe-${randomUUID()}`;
  const css = `/* ${id} */ body { outline: 0 }`;
  const hash = `'sha256-${createHash('sha256').update(css).digest('base64')}'`;
  await page.evaluate(([probeId, text]) => {
    const style = document.createElement('style');
    style.id = probeId;
    style.textContent = text;
    document.head.append(style);
  }, [id, css]);
  const isProbe = (v) => v.directive === 'style-src-elem' && v.blocked === 'inline' && v.element === `style#${id}`;
  const isProbeError = (p) => p.startsWith('console error') && p.includes(hash);
  const violations = await until('the CSP violation listener to report the probe\'s inline <style>',
    () => monitor.cspViolations.map((v) => ({ ...v })), (vs) => vs.some(isProbe),
    { expected: `a style-src-elem violation, blocked "inline", by <style id="${id}">` });
  const problems = await until('Chromium\'s console error about the probe\'s inline <style>',
    () => [...monitor.problems], (ps) => ps.some(isProbeError),
    { expected: `a console error naming the probe's hash ${hash}` });
  const violation = violations.find(isProbe);
  const consoleError = problems.find(isProbeError);
  check(monitor.cspViolations.filter(isProbe).length === 1, `the probe was reported ${monitor.cspViolations.filter(isProbe).length} times, not once`);
  await page.evaluate((probeId) => document.getElementById(probeId)?.remove(), id);
  monitor.forget(violation.problem);
  monitor.forget(consoleError);
}

async function adminWalk(browser, receiver) {
  const base = config.url;
  const context = await newContext(browser, base, { clipboard: true });
  const monitor = await Monitor.attach(context, 'the admin', [base], [config.adminToken]);
  const page = await context.newPage();
  const steps = (name, fn) => step(name, fn, monitor);
  const state = {};

  await steps('the sign-in page: heading, labelled token field, no OIDC button; axe', async () => {
    await page.goto(`${base}/console/`);
    await expectPage(page, 'Sign in to tenantd');
    check(page.url().endsWith('#/sign-in'), `without a token the console is at ${page.url()}, not #/sign-in`);
    await visible('the "Token" field', page.getByLabel('Token', { exact: true }));
    await visible('the "Sign in" button', button(page, 'Sign in'));
    await absent('a "Sign in with …" button without OIDC', page.getByRole('button', { name: /^Sign in with/ }));
    await checkCspListener(page, monitor);
    await axe(page, 'the sign-in page');
  });

  await steps('a wrong token: the problem\'s detail in an alert, nothing kept', async () => {
    const wrong = `wrong-${randomUUID()}-${randomUUID()}`;
    // What the API itself says to that token: the alert must show its problem's detail.
    const refusal = await fetch(`${base}/v1/tenants?limit=1`, { headers: { authorization: `Bearer ${wrong}` }, signal: AbortSignal.timeout(WAIT_MS) });
    const problem = await refusal.json();
    check(refusal.status === 401 && typeof problem.detail === 'string' && problem.detail.trim() !== '',
      `the API answered a wrong token with ${refusal.status} ${show(problem)}, not a 401 problem with a detail`);
    await monitor.tolerating(/status of 401/, async () => {
      await signIn(page, base, wrong);
      const alert = await visible('the alert after a wrong token', page.getByRole('alert'));
      await until('the alert after a wrong token', () => textOf(alert),
        (t) => (t ?? '').replace(/\s+/g, ' ').includes(problem.detail.trim().replace(/\s+/g, ' ')),
        { expected: `the API's detail ${show(problem.detail)}` });
    });
    await expectPage(page, 'Sign in to tenantd');
    const kept = await page.evaluate(() => ({ session: sessionStorage.length, local: localStorage.length, cookie: document.cookie }));
    check(kept.session === 0 && kept.local === 0 && kept.cookie === '', `a refused token left something behind: ${show(kept)}`);
  });

  await steps('sign in with the admin token: Tenants, the header, the token in sessionStorage only', async () => {
    await signIn(page, base, config.adminToken);
    await expectPage(page, 'Tenants');
    check(page.url().endsWith('#/tenants'), `after signing in the console is at ${page.url()}`);
    const nav = page.getByRole('navigation', { name: 'Main' });
    for (const link of ['Tenants', 'Events', 'Webhooks']) await visible(`the nav link "${link}"`, nav.getByRole('link', { name: link, exact: true }));
    await visible('"Signed in as admin"', page.getByRole('banner').getByText('Signed in as admin', { exact: true }));
    await visible('the "Sign out" button', button(page, 'Sign out'));
    await readTable(page, 'Tenants');
    await checkTokenPlacement(page, config.adminToken, 'the admin');
  });

  await steps('"New tenant" with a monthly period, then the sidecar configuration, "Copy .env" and "Done"', async () => {
    state.name = `acme-walk-${randomUUID().slice(0, 8)}`;
    await button(page, 'New tenant').click();
    const dialog = await openDialog(page, 'New tenant');
    await dialog.getByLabel('Name', { exact: true }).fill(state.name);
    await dialog.getByLabel('Opening deposit', { exact: true }).fill('1000');
    await dialog.getByLabel('Period', { exact: true }).selectOption({ label: 'Monthly' });
    await visible('"Time zone" for a calendar period', dialog.getByLabel('Time zone', { exact: true }));
    await absent('"Every (seconds)" for a calendar period', dialog.getByLabel('Every (seconds)', { exact: true }));
    await dialog.getByLabel('Time zone', { exact: true }).fill('Europe/Berlin');
    await dialog.getByLabel('Allowance', { exact: true }).fill('1000');
    await dialog.getByLabel('Rollover max', { exact: true }).fill('0');
    await button(dialog, 'Create tenant').click();

    const sidecar = await openDialog(page, 'Save the sidecar configuration');
    await visible('the warning "The tenant token is shown only once."', sidecar.getByText('The tenant token is shown only once.'));
    const block = (title) => sidecar.getByRole('heading', { name: title, exact: true }).locator('xpath=following::pre[1]');
    await visible('the ".env" heading', sidecar.getByRole('heading', { name: '.env', exact: true }));
    await visible('the "Kubernetes env" heading', sidecar.getByRole('heading', { name: 'Kubernetes env', exact: true }));
    const dotenv = await block('.env').textContent();
    const kube = await block('Kubernetes env').textContent();
    const vars = Object.fromEntries(dotenv.split('\n').filter((l) => l.trim()).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
    for (const name of ['TENANTD_URL', 'TENANTD_TENANT_ID', 'TENANTD_TENANT_TOKEN', 'TENANTD_BUDGET_ID']) {
      check(vars[name], `the .env block has no ${name}=…: ${show(dotenv)}`);
      check(kube.includes(`- name: ${name}\n    value: ${JSON.stringify(vars[name])}`), `the Kubernetes env block has no "- name: ${name}" with value ${JSON.stringify(vars[name])}: ${show(kube)}`);
    }
    check(/^env:\n/.test(kube), `the Kubernetes env block does not start with "env:": ${show(kube)}`);
    check(/^tkn_[0-9A-Z]{26}_[0-9a-f]+$/.test(vars.TENANTD_TENANT_TOKEN), `TENANTD_TENANT_TOKEN does not look like a tenant token: ${vars.TENANTD_TENANT_TOKEN.slice(0, 8)}…`);
    check(vars.TENANTD_URL === base, `TENANTD_URL is ${vars.TENANTD_URL}, not ${base}`);
    Object.assign(state, { id: vars.TENANTD_TENANT_ID, budget: vars.TENANTD_BUDGET_ID, tenantToken: vars.TENANTD_TENANT_TOKEN, dotenv });
    monitor.secrets.push(state.tenantToken);

    await button(sidecar, 'Copy .env').click();
    await until('the "Copied" status', () => textOf(sidecar.getByRole('status')), (t) => /Copied/.test(t ?? ''), { expected: '"Copied"' });
    const clipboard = await page.evaluate(() => navigator.clipboard.readText());
    check(clipboard === dotenv, `"Copy .env" put ${show(clipboard)} on the clipboard, not the .env block ${show(dotenv)}`);
    await button(sidecar, 'Copy Kubernetes env').click();
    await until('the Kubernetes env on the clipboard', () => page.evaluate(() => navigator.clipboard.readText()), (text) => text === kube, { expected: show(kube) });

    await button(sidecar, 'Done').click();
    await expectDialogClosed(page, 'Save the sidecar configuration');
    await expectPage(page, state.name);
    check(page.url().endsWith(`#/tenants/${state.id}`), `after "Done" the console is at ${page.url()}, not #/tenants/${state.id}`);
    const stored = await page.evaluate((t) => [...Object.keys(sessionStorage), ...Object.keys(localStorage)].filter((k) => (sessionStorage.getItem(k) ?? localStorage.getItem(k) ?? '').includes(t)), state.tenantToken);
    check(stored.length === 0, `the tenant token was kept in storage after "Done": ${show(stored)}`);
    const inDocument = await page.evaluate((t) => document.documentElement.outerHTML.includes(t) || [...document.querySelectorAll('input, textarea')].some((i) => i.value.includes(t)), state.tenantToken);
    check(!inDocument, 'the tenant token is still in the document after "Done" (the dialog must forget it)');

    const tenant = await api('GET', `/v1/tenants/${state.id}`);
    check(tenant.name === state.name, `the API has the tenant as ${show(tenant.name)}`);
    check(
      show(tenant.budget.period) === show({ interval: 'month', time_zone: 'Europe/Berlin', allowance_atomic: '1000', rollover_max_atomic: '0' }),
      `the console created the period ${show(tenant.budget.period)}, not monthly in Europe/Berlin with allowance 1000`,
    );
    check(tenant.budget.opening_deposit_atomic === '1000', `the opening deposit is ${tenant.budget.opening_deposit_atomic}, not 1000`);
  });

  const card = budgetCard(page, 'default');
  await steps('the tenant\'s page: its budget, figures and monthly period', async () => {
    await visible('the "Budgets" section', page.getByRole('heading', { level: 2, name: 'Budgets', exact: true }));
    await visible('the default budget\'s card', card);
    await visible(`the tenant id ${state.id}`, page.getByText(state.id, { exact: true }));
    await expectFigures(card, {
      Available: '1000 atomic', Reserved: '0 atomic', Spent: '0 atomic', Balance: '1000 atomic',
      Credited: '1000 atomic', Debited: '0 atomic', 'Opening deposit': '1000 atomic',
    }, 'a new tenant\'s budget');
    await until('the period', () => card.textContent(), (t) => /Monthly/.test(t) && t.includes('Europe/Berlin'), { expected: '"Monthly" and "Europe/Berlin"' });
    await visible('"Resets in …"', card.getByText(/Resets in/));
  });

  await steps('reserve 300, commit 250, reserve 100 through the API; the page shows the figures and the ledger', async () => {
    const spend = (path, body) => api('POST', `/v1/tenants/${state.id}${path}`, { token: state.tenantToken, body });
    const first = await spend('/reservations', { budget_id: state.budget, amount_atomic: '300', ttl_seconds: 600 });
    await spend(`/reservations/${first.id}/commit`, { amount_atomic: '250' });
    const second = await spend('/reservations', { budget_id: state.budget, amount_atomic: '100', ttl_seconds: 600 });
    await page.reload();
    await expectPage(page, state.name);
    await expectFigures(card, {
      Available: '650 atomic', Reserved: '100 atomic', Spent: '250 atomic', Balance: '750 atomic',
      Credited: '1000 atomic', Debited: '0 atomic', 'Opening deposit': '1000 atomic',
    }, 'after the spending');
    const bar = card.getByRole('img', { name: /available 650\b/ });
    await visible('the bar labelled "available 650 …"', bar);

    const active = await untilRows('the active reservations', page, 'Active reservations', (rows) => rows.length === 1, { expected: 'one row' });
    check(Object.values(active[0]).includes(second.id), `the active reservation row does not show ${second.id}: ${show(active[0])}`);
    check(Object.values(active[0]).includes('100 atomic'), `the active reservation row does not show "100 atomic": ${show(active[0])}`);

    const entries = (await api('GET', `/v1/tenants/${state.id}/budgets/${state.budget}/entries?limit=20`)).data;
    check(show(entries.map((e) => [e.kind, e.amount_atomic])) === show([['opening_deposit', '1000'], ['reserve', '300'], ['commit', '250'], ['reserve', '100']]),
      `the API's ledger is not what the test made: ${show(entries.map((e) => [e.kind, e.amount_atomic]))}`);
    const rows = await untilRows('the ledger', page, 'Ledger', (r) => r.length === entries.length, { expected: `${entries.length} rows` });
    entries.forEach((entry, i) => {
      const row = rows[i];
      check(row.Id === entry.id, `ledger row ${i + 1}: Id ${show(row.Id)}, not ${entry.id} (rows in the API's order)`);
      check(row.Kind === entry.kind, `ledger row ${i + 1}: Kind ${show(row.Kind)}, not ${entry.kind}`);
      check(row.Amount === `${entry.amount_atomic} atomic`, `ledger row ${i + 1}: Amount ${show(row.Amount)}, not "${entry.amount_atomic} atomic"`);
      if (entry.reservation_id) check(Object.values(row).includes(entry.reservation_id), `ledger row ${i + 1} does not show its reservation ${entry.reservation_id}: ${show(row)}`);
    });
  });

  await steps('"Edit period and thresholds": weekly in Asia/Tokyo, thresholds 100 and 50', async () => {
    await button(card, 'Edit period and thresholds').click();
    const dialog = page.locator('dialog[open]');
    await visible('the edit dialog', dialog);
    check(await dialog.evaluate((d) => d.matches(':modal')), 'the edit dialog is not modal');
    await visible('the edit dialog\'s heading', dialog.getByRole('heading'));
    await dialog.getByLabel('Period', { exact: true }).selectOption({ label: 'Weekly' });
    await dialog.getByLabel('Time zone', { exact: true }).fill('Asia/Tokyo');
    await dialog.getByLabel('Allowance', { exact: true }).fill('2000');
    await dialog.getByLabel('Rollover max', { exact: true }).fill('500');
    await dialog.getByLabel('Alert thresholds', { exact: true }).fill('100, 50');
    await button(dialog, 'Save').click();
    await until('the edit dialog to close', () => page.locator('dialog[open]').count(), (n) => n === 0, { expected: 'no open dialog' });
    await until('the new period on the page', () => card.textContent(), (t) => /Weekly/.test(t) && t.includes('Asia/Tokyo') && !/Monthly/.test(t), { expected: '"Weekly" and "Asia/Tokyo", no "Monthly"' });
    check(/allowance 2000 atomic/.test(await card.textContent()), `the period does not show "allowance 2000 atomic": ${show((await card.textContent()).replace(/\s+/g, ' '))}`);
    const budget = await api('GET', `/v1/tenants/${state.id}/budgets/${state.budget}`);
    check(show(budget.period) === show({ interval: 'week', time_zone: 'Asia/Tokyo', allowance_atomic: '2000', rollover_max_atomic: '500' }), `the API has the period ${show(budget.period)} after "Save"`);
    check(show([...budget.alert_thresholds_atomic].sort()) === show(['100', '50']), `the API has the thresholds ${show(budget.alert_thresholds_atomic)}`);
    // The card's line "Alert thresholds: 100 atomic, 50 atomic", in the API's order.
    const thresholds = card.getByText('Alert thresholds:', { exact: true }).locator('xpath=..');
    const expected = `Alert thresholds: ${budget.alert_thresholds_atomic.map((t) => `${t} atomic`).join(', ')}`;
    await until('the card\'s alert thresholds', async () => (await textOf(thresholds))?.replace(/\s+/g, ' ') ?? null,
      (t) => t === expected, { expected: show(expected) });
    await expectFigures(card, { Available: `${budget.available_atomic} atomic`, Reserved: `${budget.reserved_atomic} atomic` }, 'after the edit');
  });

  await steps('"New endpoint" for the receiver: the signing secret once, then the endpoint listed', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Webhooks', exact: true }).click();
    await expectPage(page, 'Webhook endpoints');
    await button(page, 'New endpoint').click();
    const dialog = await openDialog(page, 'New endpoint');
    await dialog.getByLabel('URL', { exact: true }).fill(receiver.url);
    await dialog.getByLabel('Description', { exact: true }).fill('the browser test\'s receiver');
    const events = dialog.getByRole('group', { name: 'Events' });
    await visible('the "Events" fieldset', events);
    await events.getByRole('checkbox', { name: 'budget.credited', exact: true }).check();
    await dialog.getByLabel('Tenant', { exact: true }).fill(state.id);
    await button(dialog, 'Create endpoint').click();

    const secretDialog = await openDialog(page, 'Signing secret');
    const secret = (await secretDialog.locator('code').first().textContent()).trim();
    check(/^whsec_[A-Za-z0-9+/]+=*$/.test(secret), `the signing secret is ${show(secret.slice(0, 10))}…, not whsec_…`);
    await visible('"Shown only once"', secretDialog.getByText(/Shown only once/i));
    await visible('the "Copy secret" button', button(secretDialog, 'Copy secret'));
    await button(secretDialog, 'Done').click();
    await expectDialogClosed(page, 'Signing secret');
    check(!(await page.locator('body').innerText()).includes(secret), 'the secret is still shown after "Done"');
    state.secret = secret;
    monitor.secrets.push(secret);

    const listed = await api('GET', '/v1/webhook-endpoints');
    const endpoint = listed.data.find((e) => e.url === receiver.url);
    check(endpoint, `the API lists no endpoint for ${receiver.url}`);
    check(show(endpoint.event_types) === show(['budget.credited']) && endpoint.tenant_id === state.id,
      `the endpoint was created with events ${show(endpoint.event_types)} and tenant ${endpoint.tenant_id}`);
    state.endpoint = endpoint.id;
    await until('the endpoint in the table "Endpoints"', async () => (await readTable(page, 'Endpoints')).rows, (rows) => rows.some((r) => r.URL === receiver.url), { expected: `a row with URL ${receiver.url}` });
  });

  await steps('"Credit" 500 in the console: the figures change', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Tenants', exact: true }).click();
    await expectPage(page, 'Tenants');
    await page.getByRole('link', { name: state.name, exact: true }).click();
    await expectPage(page, state.name);
    const before = await api('GET', `/v1/tenants/${state.id}/budgets/${state.budget}`);
    await expectFigures(card, { Available: `${before.available_atomic} atomic` }, 'before the credit');
    await button(card, 'Credit').click();
    const dialog = page.locator('dialog[open]').filter({ has: page.getByLabel('Amount', { exact: true }) });
    await visible('the credit dialog', dialog);
    await dialog.getByLabel('Amount', { exact: true }).fill('500');
    await button(dialog, 'Credit').click();
    const available = (BigInt(before.available_atomic) + 500n).toString();
    const credited = (BigInt(before.credited_atomic) + 500n).toString();
    await expectFigures(card, { Available: `${available} atomic`, Credited: `${credited} atomic` }, 'after crediting 500');
    const after = await api('GET', `/v1/tenants/${state.id}/budgets/${state.budget}`);
    check(after.available_atomic === available, `the API has available ${after.available_atomic} after the credit, not ${available}`);
  });

  await steps('the credit reaches the receiver, signed, and its delivery shows as succeeded (Refresh)', async () => {
    const got = await receiver.waitFor((r) => r.body.includes('"budget.credited"'), DELIVERY_MS);
    check(signatureVerifies(got, state.secret), 'the delivery\'s webhook-signature does not verify with the secret the console showed');
    const eventId = got.headers['webhook-id'];
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Webhooks', exact: true }).click();
    await expectPage(page, 'Webhook endpoints');
    await page.getByRole('link', { name: receiver.url, exact: true }).click();
    await expectPage(page, receiver.url);
    await visible('the "Deliveries" section', page.getByRole('heading', { level: 2, name: 'Deliveries', exact: true }));
    const refresh = button(page, 'Refresh');
    await until('a succeeded delivery of the credit in "Deliveries"', async () => {
      await refresh.click();
      return (await readTable(page, 'Deliveries')).rows;
    }, (rows) => rows.some((r) => r['Event id'] === eventId && r.State === 'succeeded'), { timeout: DELIVERY_MS, expected: `a row for ${eventId} with State "succeeded"` });
    const rows = (await readTable(page, 'Deliveries')).rows;
    const row = rows.find((r) => r['Event id'] === eventId);
    check(row['Event type'] === 'budget.credited', `the delivery's Event type is ${show(row['Event type'])}, not "budget.credited"`);
    await visible('a "Retry" button on the delivery', button(page, 'Retry'));
  });

  // The budget tree: org → team → key under the walk's tenant, made through the API.
  const tree = {};
  const treeCard = (name) => budgetCard(page, name);
  /** The card's bar, by its label: "available A of W unit, reserved R, spent S". */
  const barLabel = (b) => `available ${b.available_atomic} of ${BigInt(b.available_atomic) + BigInt(b.reserved_atomic) + BigInt(b.spent_atomic)} ${b.unit}, reserved ${b.reserved_atomic}, spent ${b.spent_atomic}`;
  const expectBars = async (what) => {
    for (const name of ['org', 'team', 'key']) {
      const b = await api('GET', `/v1/tenants/${state.id}/budgets/${tree[name].id}`);
      await visible(`${what}: the ${name} card's bar "${barLabel(b)}"`, treeCard(name).getByRole('img', { name: barLabel(b), exact: true }));
    }
  };

  await steps('a budget tree org → team → key: the cards in tree order, indented, "Under" and "Over" linked, a bar each', async () => {
    const create = (name, deposit, parent) => api('POST', `/v1/tenants/${state.id}/budgets`, {
      body: { name, opening_deposit_atomic: deposit, unit: 'tokens', ...(parent ? { parent_id: parent.id } : {}) },
    });
    tree.org = await create('org', '10000');
    tree.team = await create('team', '1800', tree.org);
    tree.key = await create('key', '3000', tree.team);
    check(tree.org.parent_id === null && tree.team.parent_id === tree.org.id && tree.key.parent_id === tree.team.id,
      `the API made the tree ${show([tree.org.parent_id, tree.team.parent_id, tree.key.parent_id])}`);
    await visit(page, base, `#/tenants/${state.id}`);
    await expectPage(page, state.name);
    const budgets = page.getByRole('region', { name: 'Budgets', exact: true });
    const order = ['default', 'org', 'team', 'key'];
    await until('the budget cards in tree order', () => budgets.getByRole('heading', { level: 3 }).allTextContents(),
      (names) => show(names.map((n) => n.trim())) === show(order), { expected: show(order) });
    // Each level is indented further than its parent; the top levels line up.
    const left = {};
    for (const name of order) left[name] = (await treeCard(name).boundingBox()).x;
    check(left.org === left.default && left.team > left.org && left.key > left.team, `the cards are not indented by depth: ${show(left)}`);

    const lines = (name) => treeCard(name).getByText(/^(Under|Over) /).allTextContents();
    const expected = { default: [], org: ['Over team'], team: ['Under org', 'Over key'], key: ['Under team'] };
    for (const [name, want] of Object.entries(expected)) {
      await until(`the ${name} card's "Under"/"Over" lines`, async () => (await lines(name)).map((t) => t.replace(/\s+/g, ' ').trim()),
        (got) => show(got) === show(want), { expected: show(want) });
    }
    for (const [name, link, target] of [['org', 'team', tree.team], ['team', 'org', tree.org], ['team', 'key', tree.key], ['key', 'team', tree.team]]) {
      const href = await treeCard(name).getByRole('link', { name: link, exact: true }).getAttribute('href');
      check(href === `#budget-${target.id}`, `the ${name} card's link "${link}" goes to ${show(href)}, not #budget-${target.id}`);
    }
    const route = page.url();
    await treeCard('key').getByRole('link', { name: 'team', exact: true }).click();
    await until('the focus after "Under team"', () => page.evaluate(() => document.activeElement?.id), (id) => id === `budget-${tree.team.id}`,
      { expected: `the team card's heading budget-${tree.team.id}` });
    check(page.url() === route, `the link "team" changed the URL to ${page.url()} (the route is ${route})`);
    await expectPage(page, state.name);
    await expectBars('the new tree');
  });

  await steps('"Charge" on the key, over the team\'s funds: the dialog names the team and its available; nothing moves', async () => {
    await button(treeCard('key'), 'Charge').click();
    const dialog = await openDialog(page, 'Charge key');
    await dialog.getByLabel('Amount', { exact: true }).fill('2500');
    await dialog.getByLabel('Memo', { exact: true }).fill('more than the team has');
    const want = 'team has only 1800 tokens available — a spend must fit every level above this budget too.';
    await monitor.tolerating(/status of 409/, async () => {
      await button(dialog, 'Charge').click();
      const alert = await visible('the charge dialog\'s alert', dialog.getByRole('alert'));
      await untilText('the charge dialog\'s alert', alert, want);
    });
    for (const [name, available] of [['org', '10000'], ['team', '1800'], ['key', '3000']]) {
      const b = await api('GET', `/v1/tenants/${state.id}/budgets/${tree[name].id}`);
      check(b.available_atomic === available && b.spent_atomic === '0', `after the refused charge ${name} has available ${b.available_atomic}, spent ${b.spent_atomic}`);
    }

    // The same dialog, an amount that fits every level (a failed request binds no key).
    await dialog.getByLabel('Amount', { exact: true }).fill('500');
    await dialog.getByLabel('Memo', { exact: true }).fill('walk charge');
    await button(dialog, 'Charge').click();
    await expectDialogClosed(page, 'Charge key');
    for (const [name, available] of [['org', '9500'], ['team', '1300'], ['key', '2500']]) {
      await expectFigures(treeCard(name), { Available: `${available} tokens`, Spent: '500 tokens' }, `${name} after charging 500 on the key`);
    }
    await expectBars('after the charge');
  });

  await steps('the team\'s ledger shows the charge "Via" the key; the key\'s own shows none', async () => {
    const ledger = page.getByLabel('Budget', { exact: true });
    const charges = (rows) => rows.filter((r) => r.Kind === 'charge');
    await ledger.selectOption({ label: 'team' });
    const teamRows = await untilRows('the team\'s ledger', page, 'Ledger', (r) => charges(r).length === 1, { expected: 'one charge row' });
    const row = charges(teamRows)[0];
    check(row.Via === 'key' && row.Amount === '500 tokens', `the team's charge row reads Via ${show(row.Via)}, Amount ${show(row.Amount)}, not "key" and "500 tokens"`);
    const deposit = teamRows.find((r) => r.Kind === 'opening_deposit');
    check(deposit && deposit.Via === '—', `the team's opening deposit row reads Via ${show(deposit?.Via)}, not "—"`);
    const [apiEntry] = (await api('GET', `/v1/tenants/${state.id}/budgets/${tree.team.id}/entries?limit=20`)).data.filter((e) => e.kind === 'charge');
    check(apiEntry.via_budget_id === tree.key.id && row.Id === apiEntry.id, `the API's charge on the team is ${show(apiEntry)}`);

    await ledger.selectOption({ label: 'key' });
    const keyRows = await untilRows('the key\'s ledger', page, 'Ledger', (r) => charges(r).length === 1 && !r.some((e) => e.Id === row.Id), { expected: 'the key\'s one charge row' });
    check(charges(keyRows)[0].Via === '—', `the key's own charge reads Via ${show(charges(keyRows)[0].Via)}, not "—"`);
  });

  await steps('"Close budget" on the team while the key is open: refused, "close the budgets under it first"', async () => {
    await button(treeCard('team'), 'Close budget').click();
    const dialog = await openDialog(page, 'Close team?');
    await monitor.tolerating(/status of 409/, async () => {
      await button(dialog, 'Close budget').click();
      const alert = await visible('the close dialog\'s alert', dialog.getByRole('alert'));
      await untilText('the close dialog\'s alert', alert, 'team has open budgets under it (key): close the budgets under it first.');
    });
    await button(dialog, 'Cancel').click();
    await expectDialogClosed(page, 'Close team?');
    check((await api('GET', `/v1/tenants/${state.id}/budgets/${tree.team.id}`)).state === 'open', 'the team was closed');
  });

  // A batch's report: the tree's figures before each batch, the rows read from its table.
  const figuresOf = async () => Object.fromEntries(await Promise.all(['org', 'team', 'key'].map(async (name) => {
    const b = await api('GET', `/v1/tenants/${state.id}/budgets/${tree[name].id}`);
    return [name, { available: BigInt(b.available_atomic), spent: BigInt(b.spent_atomic) }];
  })));
  const sendBatch = async (lines, { atomic }) => {
    await button(treeCard('key'), 'Batch').click();
    const dialog = await openDialog(page, 'Batch of charges on key');
    await dialog.getByLabel('Charges', { exact: true }).fill(lines.join('\n'));
    const allOrNothing = dialog.getByLabel('All or nothing', { exact: true });
    check((await allOrNothing.getAttribute('type')) === 'checkbox', '"All or nothing" is not a checkbox');
    if (atomic) await allOrNothing.check();
    await button(dialog, 'Send batch').click();
    await expectDialogClosed(page, 'Batch of charges on key');
    const report = await visible('the batch\'s report "Batch on key"', page.getByRole('region', { name: 'Batch on key', exact: true }));
    await until('the focus after the batch', () => page.evaluate(() => document.activeElement?.textContent), (t) => t === 'Batch on key',
      { expected: 'the report\'s heading "Batch on key"' });
    const inLedger = page.getByRole('region', { name: 'Ledger', exact: true }).getByRole('region', { name: 'Batch on key', exact: true });
    check((await inLedger.count()) === 1, 'the batch\'s report is not in the "Ledger" section');
    return report;
  };
  const untilBatchRows = (what, count) => untilRows(what, page, 'Batch results', (r) => r.length === count && r.every((row) => row.Outcome), { expected: `${count} rows` });
  const expectTree = async (figures, what) => {
    for (const name of ['org', 'team', 'key']) {
      await expectFigures(treeCard(name), { Available: `${figures[name].available} tokens`, Spent: `${figures[name].spent} tokens` }, `${name} ${what}`);
    }
  };

  await steps('"Batch" on the key, three charges, the second over the team\'s funds: its refusal and the short level shown above the ledger; the balance moves by the other two', async () => {
    const before = await figuresOf();
    // 200 fits; the next is then 1 more than the team has (it is short, the key is not); 300 fits.
    const report = await sendBatch(['200 batch first', `${before.team.available - 200n + 1n} over the team`, '300'], { atomic: false });
    await untilText('the batch\'s summary', report.locator('.batch-summary'), '2 of 3 charges applied, 1 refused.');
    const rows = await untilBatchRows('the batch\'s results', 3);
    const outcomes = rows.map((r) => r.Outcome);
    check(show(outcomes) === show(['applied', 'refused', 'applied']), `the batch's outcomes read ${show(outcomes)}`);
    const refused = rows[1];
    const shortBy = `team has only ${before.team.available - 200n} tokens available — a spend must fit every level above this budget too.`;
    check(refused.Code === 'insufficient_funds' && refused['Short level'] === 'team' && refused.Detail === shortBy,
      `the refused charge reads ${show(refused)}, not insufficient_funds, "team" and ${show(shortBy)}`);
    const href = await report.getByRole('link', { name: 'team', exact: true }).getAttribute('href');
    check(href === `#budget-${tree.team.id}`, `the short level's link goes to ${show(href)}`);
    check(rows[0].Memo === 'batch first' && rows[2].Memo === '—' && rows[0].Code === '—', `the applied rows read ${show([rows[0], rows[2]])}`);

    const after = Object.fromEntries(Object.entries(before).map(([name, f]) => [name, { available: f.available - 500n, spent: f.spent + 500n }]));
    await expectTree(after, 'after the batch (200 and 300 applied, the second refused)');
    const got = await figuresOf();
    check(Object.keys(after).every((n) => got[n].available === after[n].available && got[n].spent === after[n].spent),
      `the API's figures after the batch are not the ones before moved by 500: ${show(Object.fromEntries(Object.entries(got).map(([n, f]) => [n, String(f.available)])))} available`);
    // The ledger below shows the key's entries, the two applied charges among them.
    check((await page.getByLabel('Budget', { exact: true }).evaluate((s) => s.selectedOptions[0]?.textContent)) === 'key', 'the ledger does not show the key after its batch');
    const ids = rows.filter((r) => r.Outcome === 'applied').map((r) => /ent_[0-9A-Z]{26}/.exec(r.Detail)?.[0]);
    await untilRows('the key\'s ledger after the batch', page, 'Ledger', (r) => ids.every((id) => id && r.some((e) => e.Id === id && e.Kind === 'charge')),
      { expected: `the entries ${show(ids)}` });
    await axe(page, 'a tenant\'s page with a batch\'s report');
    await screenshots(page, 'batch');
  });

  await steps('"Batch" with "All or nothing", one charge refused: the report says nothing was applied, and nothing moved', async () => {
    const before = await figuresOf();
    const report = await monitor.tolerating(/status of 409/, () =>
      sendBatch(['100 would fit', `${before.team.available} over the team, with the first counted`], { atomic: true }));
    await untilText('the batch\'s summary', report.locator('.batch-summary'), 'Nothing was applied: 1 of 2 charges refused, and the batch was all or nothing.');
    const rows = await untilBatchRows('the all-or-nothing batch\'s results', 2);
    check(show(rows.map((r) => r.Outcome)) === show(['not applied', 'refused']), `the outcomes read ${show(rows.map((r) => r.Outcome))}`);
    // Each charge is tried after the ones before it: the team would have had 100 less.
    const shortBy = `team has only ${before.team.available - 100n} tokens available — a spend must fit every level above this budget too.`;
    check(rows[1].Code === 'insufficient_funds' && rows[1]['Short level'] === 'team' && rows[1].Detail === shortBy,
      `the refused charge reads ${show(rows[1])}, not insufficient_funds, "team" and ${show(shortBy)}`);
    await absent('an applied row in the all-or-nothing batch', report.getByText('applied', { exact: true }));
    await expectTree(before, 'after the all-or-nothing batch');
    const got = await figuresOf();
    check(Object.keys(before).every((n) => got[n].available === before[n].available && got[n].spent === before[n].spent),
      'the API\'s figures moved after the refused all-or-nothing batch');
  });

  await steps('a u128 opening deposit shows its exact digits, on the page and in the list', async () => {
    const name = `u128-${randomUUID().slice(0, 8)}`;
    const tenant = await api('POST', '/v1/tenants', { body: { name, opening_deposit_atomic: U128_MAX } });
    await visit(page, base, `#/tenants/${tenant.id}`);
    await expectPage(page, name);
    const u128Card = budgetCard(page, 'default');
    await expectFigures(u128Card, { Available: `${U128_MAX} atomic`, 'Opening deposit': `${U128_MAX} atomic`, Balance: `${U128_MAX} atomic` }, 'the u128 budget');
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Tenants', exact: true }).click();
    await expectPage(page, 'Tenants');
    const rows = await untilRows('the tenants list', page, 'Tenants', (r) => r.some((row) => row.Name === name), { expected: `a row ${name}` });
    const row = rows.find((r) => r.Name === name);
    check(row.Available === `${U128_MAX} atomic`, `the tenants list shows Available ${show(row.Available)}, not "${U128_MAX} atomic"`);
    state.u128Name = name;
  });

  await steps('a tenant named <img src=x onerror=alert(1)> shows those characters, and nothing runs', async () => {
    const tenant = await api('POST', '/v1/tenants', { body: { name: HOSTILE_NAME, opening_deposit_atomic: '5' } });
    await visit(page, base, '#/tenants');
    await expectPage(page, 'Tenants');
    const link = await visible('the hostile name as a link in the tenants list', page.getByRole('link', { name: HOSTILE_NAME, exact: true }));
    check((await link.textContent()) === HOSTILE_NAME, `the list shows ${show(await link.textContent())}`);
    await link.click();
    await expectPage(page, HOSTILE_NAME);
    check((await page.locator('h1').textContent()) === HOSTILE_NAME, 'the h1 is not exactly the name');
    check(page.url().endsWith(`#/tenants/${tenant.id}`), `the link led to ${page.url()}`);
    const images = await page.evaluate(() => [...document.querySelectorAll('img')].map((i) => i.getAttribute('src')));
    check(!images.includes('x'), `an <img src=x> is in the page: ${show(images)}`);
  });

  await steps('screenshots and axe: the tenants list', async () => {
    await visit(page, base, '#/tenants');
    await expectPage(page, 'Tenants');
    await untilRows('the tenants list', page, 'Tenants', (r) => r.length === 3, { expected: 'three tenants' });
    await axe(page, 'the tenants list');
    await screenshots(page, 'tenants');
  });

  await steps('screenshots and axe: a tenant\'s page', async () => {
    await visit(page, base, `#/tenants/${state.id}`);
    await expectPage(page, state.name);
    await visible('the default budget\'s card', card);
    await readTable(page, 'Ledger');
    await axe(page, 'a tenant\'s page');
    await screenshots(page, 'tenant');
  });

  await steps('screenshots and axe: the webhooks page', async () => {
    await visit(page, base, '#/webhooks');
    await expectPage(page, 'Webhook endpoints');
    await untilRows('the endpoints', page, 'Endpoints', (r) => r.length === 1, { expected: 'one endpoint' });
    await axe(page, 'the webhooks page');
    await screenshots(page, 'webhooks');
  });

  await steps('"Search by name" and "State" filter the tenants list', async () => {
    // A fourth tenant, tombstoned through the API, for the "State" filter to find.
    const gone = await api('POST', '/v1/tenants', { body: { name: `gone-${randomUUID().slice(0, 8)}`, opening_deposit_atomic: '3' } });
    check((await api('DELETE', `/v1/tenants/${gone.id}`)).state === 'tombstoned', `DELETE /v1/tenants/${gone.id} did not tombstone it`);
    const active = [state.name, state.u128Name, HOSTILE_NAME].sort();
    const all = [...active, gone.name].sort();
    const names = (rows) => rows.map((row) => row.Name).sort();
    const exactly = (expected) => (rows) => show(names(rows)) === show(expected);
    const noAlert = () => absent('an alert on the tenants list', page.getByRole('alert'));

    await visit(page, base, '#/tenants');
    await expectPage(page, 'Tenants');
    await untilRows('the list of all tenants', page, 'Tenants', exactly(all), { expected: show(all) });
    const search = page.getByLabel('Search by name', { exact: true });
    check((await search.getAttribute('type')) === 'search', 'the "Search by name" input is not type=search');
    await search.fill(state.u128Name.toUpperCase());
    await untilRows(`the list searched for ${state.u128Name.toUpperCase()} (case-insensitive)`, page, 'Tenants', exactly([state.u128Name]), { expected: `one row, ${state.u128Name}` });
    await search.fill('');
    await untilRows('the list with the search cleared', page, 'Tenants', exactly(all), { expected: show(all) });
    await page.getByLabel('State', { exact: true }).selectOption({ label: 'tombstoned' });
    const tombstoned = await untilRows('the list of tombstoned tenants', page, 'Tenants', exactly([gone.name]), { expected: `one row, ${gone.name}` });
    check(tombstoned[0].State === 'tombstoned', `the tombstoned tenant's State reads ${show(tombstoned[0].State)}`);
    await noAlert();
    await page.getByLabel('State', { exact: true }).selectOption({ label: 'active' });
    await untilRows('the list of active tenants', page, 'Tenants', exactly(active), { expected: show(active) });
    await noAlert();
    await page.getByLabel('State', { exact: true }).selectOption({ label: 'All' });
    await untilRows('the list of all tenants', page, 'Tenants', exactly(all), { expected: show(all) });
    await noAlert();
  });

  await steps('a forged sign-in answer (?error=…&state=…) signs nobody out and shows none of its text', async () => {
    const forged = 'FORGED-PROVIDER-TEXT';
    await page.goto(`${config.url}/console/?error=access_denied&error_description=${forged}&state=forged`);
    await visible('"Signed in as admin" after the forged answer', page.getByText('Signed in as admin', { exact: true }));
    await absent('the forged text', page.getByText(forged));
    check(!page.url().includes('state=forged'), `the forged answer stays in the URL: ${page.url()}`);
    await checkTokenPlacement(page, config.adminToken, 'the admin after a forged sign-in answer');
  });

  await steps('the token is still in sessionStorage only; "Sign out" forgets it', async () => {
    await checkTokenPlacement(page, config.adminToken, 'the admin at the end of the walk');
    await button(page, 'Sign out').click();
    await expectPage(page, 'Sign in to tenantd');
    const left = await page.evaluate((key) => sessionStorage.getItem(key), TOKEN_KEY);
    check(left === null, 'the token is still in sessionStorage after "Sign out"');
  });

  await context.close();
  return state;
}

async function tenantWalk(browser, state) {
  const base = config.url;
  const context = await newContext(browser, base);
  const monitor = await Monitor.attach(context, 'the tenant', [base], [state.tenantToken, config.adminToken]);
  const page = await context.newPage();

  await step('a tenant token signs in to its own tenant only', async () => {
    await signIn(page, base, state.tenantToken);
    await expectPage(page, state.name);
    check(page.url().endsWith(`#/tenants/${state.id}`), `the tenant is at ${page.url()}, not its page`);
    await visible(`"Signed in as tenant ${state.id}"`, page.getByRole('banner').getByText(`Signed in as tenant ${state.id}`, { exact: true }));
    const nav = page.getByRole('navigation', { name: 'Main' });
    const budget = await api('GET', `/v1/tenants/${state.id}/budgets/${state.budget}`);
    const ownPage = `#/tenants/${state.id}`;
    // The tenant's page, rendered with its budget (so that what must be absent had its chance
    // to show), and none of the admin's links, buttons or tenants list.
    const expectOwnPageOnly = async (where) => {
      await expectPage(page, state.name);
      await until(`the URL ${where}`, () => page.url(), (u) => u.endsWith(ownPage), { expected: `…${ownPage}` });
      await expectFigures(budgetCard(page, 'default'), { Available: `${budget.available_atomic} atomic`, Spent: `${budget.spent_atomic} atomic` }, `the tenant's own budget ${where}`);
      for (const link of ['Events', 'Webhooks']) await absent(`the nav link "${link}" for a tenant ${where}`, nav.getByRole('link', { name: link, exact: true }));
      for (const admin of ['Credit', 'Debit', 'Charge', 'Batch', 'Tombstone tenant', 'Edit period and thresholds', 'Close budget', 'New tenant']) {
        await absent(`the admin button "${admin}" for a tenant ${where}`, button(page, admin));
      }
      await absent(`the tenants list for a tenant ${where}`, page.getByRole('table', { name: 'Tenants', exact: true }));
    };
    await expectOwnPageOnly('after signing in');
    await checkTokenPlacement(page, state.tenantToken, 'the tenant');

    // The nav's "Tenants" (if shown) and every admin route lead to the tenant's own page.
    const tenantsLink = nav.getByRole('link', { name: 'Tenants', exact: true }).filter({ visible: true });
    if ((await tenantsLink.count()) > 0) {
      await visit(page, base, '#/events');
      await expectOwnPageOnly('at #/events');
      // A click that changes the fragment is a same-document navigation: wait for a page
      // rendered after it (a link to the page shown already changes nothing).
      const navigates = (await tenantsLink.first().evaluate((a) => a.href)) !== page.url();
      await page.locator('h1').evaluateAll((headings) => headings.forEach((h) => h.setAttribute('data-test-before-click', '')));
      await tenantsLink.click();
      if (navigates) {
        await untilText('the page\'s h1 rendered after the click on "Tenants"', page.locator('h1:not([data-test-before-click])'), state.name);
      }
      await expectOwnPageOnly('behind the nav link "Tenants"');
    }
    for (const route of ['#/tenants', '#/webhooks', '#/events']) {
      await visit(page, base, route);
      await expectOwnPageOnly(`at ${route}`);
    }
  }, monitor);

  await context.close();
}

async function oidcWalk(browser) {
  const base = config.oidcUrl;
  const issuerHost = new URL(config.issuer).host;
  const name = `oidc-${randomUUID().slice(0, 8)}`;
  await api('POST', '/v1/tenants', { base, body: { name, opening_deposit_atomic: '7' } });
  const context = await newContext(browser, base);
  const monitor = await Monitor.attach(context, 'the OIDC admin', [base, new URL(config.issuer).origin], [config.adminToken]);
  const page = await context.newPage();

  await step(`"Sign in with ${issuerHost}": authorization code with PKCE at the identity provider`, async () => {
    await page.goto(`${base}/console/`);
    await expectPage(page, 'Sign in to tenantd');
    await button(page, `Sign in with ${issuerHost}`).click();
    await page.waitForURL((u) => u.origin === new URL(config.issuer).origin, { timeout: NAVIGATION_MS });
    const authorize = new URL(page.url());
    check(authorize.pathname.startsWith('/test/interaction/'), `"Sign in with" led to ${page.url()}, not the provider's sign-in page`);
    await page.getByLabel('Login name', { exact: true }).fill('console-operator');
    await button(page, 'Sign in').click();
    await page.waitForURL((u) => u.origin === base, { timeout: NAVIGATION_MS });
    await expectPage(page, 'Tenants');
    const rows = await untilRows('the tenants list with the OIDC token', page, 'Tenants', (r) => r.some((row) => row.Name === name), { expected: `a row ${name}` });
    check(rows.length === 1, `tenantd B lists ${rows.length} tenants, not 1`);
    check(page.url() === `${base}/console/#/tenants`, `after the sign-in the URL is ${page.url()}, not ${base}/console/#/tenants (the code must leave it)`);
    await visible('"Signed in as admin"', page.getByRole('banner').getByText('Signed in as admin', { exact: true }));
    const token = await page.evaluate((key) => sessionStorage.getItem(key), TOKEN_KEY);
    check(token && token.split('.').length === 3, 'sessionStorage holds no JWT after the OIDC sign-in');
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8'));
    check(claims.iss === config.issuer && [].concat(claims.aud).includes('tenantd') && claims.scope.split(' ').includes('tenantd:admin'),
      `the access token is not the issuer's admin token for tenantd: ${show({ iss: claims.iss, aud: claims.aud, scope: claims.scope })}`);
    monitor.secrets.push(token);
    await checkTokenPlacement(page, token, 'the OIDC admin');
  }, monitor);

  await context.close();
}

// ---------------------------------------------------------------------------------------

async function main() {
  mkdirSync(config.screenshots, { recursive: true });
  console.log(`console browser test: ${config.url} (OIDC: ${config.oidcUrl} at ${config.issuer})`);
  await checkServing();
  const receiver = await startReceiver();
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, timeout: LAUNCH_MS });
  try {
    console.log(`Chromium ${browser.version()}`);
    const state = await adminWalk(browser, receiver);
    await tenantWalk(browser, state);
    await oidcWalk(browser);
  } catch (error) {
    const pages = browser.contexts().flatMap((c) => c.pages());
    const last = pages[pages.length - 1];
    if (last) {
      const alerts = await last.getByRole('alert').filter({ visible: true }).allInnerTexts().catch(() => []);
      for (const text of alerts.map((t) => t.trim()).filter(Boolean)) console.log(`\n  (the page's alert says: ${text})`);
      const path = join(config.screenshots, 'failure.png');
      await last.screenshot({ path, fullPage: true }).then(() => console.log(`\n  (the page at the failure: ${path}, ${last.url()})`), () => {});
    }
    throw error;
  } finally {
    await browser.close();
    await receiver.close();
  }
  console.log(`console browser test: every check passed in ${seconds(Date.now() - started)}`);
}

// Exits once the walk is done: a keep-alive socket of fetch() or of the receiver would
// otherwise hold the process up to 20 s more.
main().then(() => process.exit(0), (error) => {
  const what = error instanceof CheckFailed ? error.message : (error.stack ?? String(error));
  console.log(`FAILED`);
  console.error(`console browser test FAILED at step "${currentStep}":\n  ${what}`);
  process.exit(1);
});
