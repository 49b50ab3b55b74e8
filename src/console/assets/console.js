// The console's entry point: configuration, sign-in state, the header and the hash router.

import { h, fill } from './dom.js';
import { setUnauthorizedHandler } from './api.js';
import { storedToken, storeToken, forgetToken, principalFor, isAdmin, canRead, homeRoute, describePrincipal } from './session.js';
import { isReturn, completeSignIn, ForeignReturn } from './oidc.js';
import { renderSignIn } from './page-sign-in.js';
import { renderTenants } from './page-tenants.js';
import { renderTenant } from './page-tenant.js';
import { renderEvents } from './page-events.js';
import { renderWebhooks } from './page-webhooks.js';
import { renderWebhook } from './page-webhook.js';
import { renderNotFound } from './page-not-found.js';

const ROUTES = [
  { pattern: /^\/tenants$/, render: renderTenants, nav: 'tenants' },
  { pattern: /^\/tenants\/(ten_[0-9A-Za-z]+)$/, render: renderTenant, nav: 'tenants', tenantParam: true },
  { pattern: /^\/events$/, render: renderEvents, nav: 'events', adminOnly: true },
  { pattern: /^\/webhooks$/, render: renderWebhooks, nav: 'webhooks', adminOnly: true },
  { pattern: /^\/webhooks\/(whe_[0-9A-Za-z]+)$/, render: renderWebhook, nav: 'webhooks', adminOnly: true },
];

const header = document.getElementById('site-header');
const main = document.getElementById('main');
let config = { oidc: null };
let pendingMessage = null;
let pageController = null;
let hasRendered = false;

async function loadConfig() {
  try {
    const response = await fetch('config.json', { cache: 'no-store', credentials: 'omit' });
    if (response.ok) {
      const body = await response.json();
      if (body && typeof body === 'object') config = { oidc: body.oidc || null };
    }
  } catch {
    config = { oidc: null };
  }
}

function currentPath() {
  const hash = location.hash.replace(/^#/, '');
  return hash.split('?')[0] || '';
}

/** Goes to a route of the console (without the leading #). */
export function navigate(route, { replace = false } = {}) {
  if (replace) {
    history.replaceState(null, '', `#${route}`);
    renderRoute();
  } else if (location.hash === `#${route}`) {
    renderRoute();
  } else {
    location.hash = route;
  }
}

function signOut(message = null) {
  forgetToken();
  pendingMessage = message;
  navigate('/sign-in');
}

function brand() {
  return h('a', { class: 'brand', href: '#/tenants' },
    h('img', { src: 'favicon.svg', alt: '', width: 24, height: 24 }),
    h('span', {}, 'tenantd'));
}

function renderHeader(principal, active) {
  if (!principal) {
    fill(header, h('div', { class: 'topbar' }, h('span', { class: 'brand' },
      h('img', { src: 'favicon.svg', alt: '', width: 24, height: 24 }), h('span', {}, 'tenantd'))));
    return;
  }
  const links = [['tenants', 'Tenants', '#/tenants']];
  if (isAdmin(principal)) links.push(['events', 'Events', '#/events'], ['webhooks', 'Webhooks', '#/webhooks']);
  const nav = h('nav', { 'aria-label': 'Main', class: 'nav' },
    h('ul', {}, links.map(([key, text, href]) => h('li', {},
      h('a', { href, 'aria-current': key === active ? 'page' : null }, text)))));
  const signOutButton = h('button', { type: 'button', class: 'button button-quiet' }, 'Sign out');
  signOutButton.addEventListener('click', () => signOut());
  fill(header, h('div', { class: 'topbar' },
    brand(),
    nav,
    h('div', { class: 'who' }, h('span', { class: 'who-text' }, describePrincipal(principal)), signOutButton)));
}

function showSignIn() {
  if (pageController) pageController.abort();
  pageController = null;
  renderHeader(null);
  const message = pendingMessage;
  pendingMessage = null;
  renderSignIn(main, {
    oidc: config.oidc,
    message,
    onSignedIn(token, principal) {
      storeToken(token);
      navigate(homeRoute(principal), { replace: true });
    },
  });
}

function renderRoute() {
  const token = storedToken();
  const path = currentPath();
  if (!token) {
    if (path !== '/sign-in') history.replaceState(null, '', '#/sign-in');
    showSignIn();
    return;
  }
  const principal = principalFor(token, config.oidc);
  if (path === '' || path === '/' || path === '/sign-in') {
    navigate(homeRoute(principal), { replace: true });
    return;
  }
  const route = ROUTES.find((r) => r.pattern.test(path));
  const params = route ? path.match(route.pattern).slice(1) : [];
  const allowed = route && (!route.adminOnly || isAdmin(principal))
    && (!route.tenantParam || canRead(principal, params[0]))
    && (route.tenantParam || isAdmin(principal) || path !== '/tenants' || principal.tenants.length > 1);
  if (route && !allowed) {
    navigate(homeRoute(principal), { replace: true });
    return;
  }
  if (pageController) pageController.abort();
  pageController = new AbortController();
  renderHeader(principal, route ? route.nav : null);
  main.replaceChildren();
  main.removeAttribute('aria-busy');
  const context = { principal, params, signal: pageController.signal, navigate };
  (route ? route.render : renderNotFound)(main, context);
  window.scrollTo(0, 0);
  if (hasRendered) focusHeading();
  hasRendered = true;
}

/** Moves focus to the new page's heading, so that a screen reader starts there. */
function focusHeading() {
  const heading = main.querySelector('h1');
  if (!heading) return;
  heading.tabIndex = -1;
  heading.focus({ preventScroll: true });
}

async function start() {
  setUnauthorizedHandler((error) => signOut(error.message));
  await loadConfig();
  if (isReturn()) {
    try {
      const token = await completeSignIn(config.oidc);
      storeToken(token);
      history.replaceState(null, '', '/console/#/tenants');
    } catch (error) {
      // A link from elsewhere signs nobody out; its message shows only on the sign-in page.
      if (!(error instanceof ForeignReturn)) forgetToken();
      if (!storedToken()) pendingMessage = error.message;
    }
  }
  window.addEventListener('hashchange', renderRoute);
  renderRoute();
}

start();
