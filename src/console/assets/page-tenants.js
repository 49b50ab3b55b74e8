// The tenants page: search, filter and page through tenants; create one.

import { h, table, routeLink, alertBox, showError, field, badge, mono, timeNode } from './dom.js';
import { api, query } from './api.js';
import { isAdmin } from './session.js';
import { formatAmount } from './money.js';
import { formatInstant } from './time.js';
import { pagedList } from './list-page.js';
import { openNewTenantDialog } from './new-tenant.js';

const PAGE_SIZE = 25;
const SEARCH_DELAY_MS = 250;

function tenantRow(tenant) {
  const budget = tenant.budget;
  return h('tr', {},
    h('td', {}, routeLink(`/tenants/${tenant.id}`, tenant.name, { class: 'strong-link' })),
    h('td', {}, mono(tenant.id)),
    h('td', {}, badge(tenant.state)),
    h('td', { class: 'num' }, budget ? mono(formatAmount(budget.available_atomic, budget.unit)) : '—'),
    h('td', {}, timeNode(tenant.created_at, formatInstant(tenant.created_at))));
}

function tenantsTable(tenants, filtered) {
  return table({
    caption: 'Tenants',
    captionHidden: true,
    columns: ['Name', 'Id', 'State', 'Available', 'Created'],
    rows: tenants.map(tenantRow),
    empty: filtered ? 'No tenant matches these filters.' : 'No tenants yet. Create the first one with “New tenant”.',
  });
}

/** For an identity with permissions on several tenants: just those tenants. */
async function renderGrantedTenants(main, { principal, signal }) {
  const alert = alertBox();
  const holder = h('div', { class: 'card card-flush' });
  main.append(h('div', { class: 'page' }, h('div', { class: 'page-head' }, h('h1', {}, 'Tenants')), alert, holder));
  const tenants = [];
  for (const grant of principal.tenants) {
    try {
      tenants.push(await api(`/v1/tenants/${encodeURIComponent(grant.id)}`));
    } catch (error) {
      showError(alert, error);
    }
  }
  if (!signal.aborted) holder.replaceChildren(tenantsTable(tenants, false));
}

export function renderTenants(main, context) {
  document.title = 'Tenants · tenantd';
  if (!isAdmin(context.principal)) {
    renderGrantedTenants(main, context);
    return;
  }
  const { signal, navigate } = context;
  const search = field('Search by name', h('input', { type: 'search', autocomplete: 'off', spellcheck: false }));
  const stateSelect = h('select', {}, h('option', { value: '' }, 'All'),
    h('option', { value: 'active' }, 'active'), h('option', { value: 'tombstoned' }, 'tombstoned'));
  const state = field('State', stateSelect);
  const holder = h('div', { class: 'table-holder' });
  // Whether the newest request had a filter: only its answer is drawn, and says so when empty.
  let filtered = false;

  const list = pagedList({
    signal,
    toolbar: h('div', { class: 'toolbar', role: 'search' }, search.field, state.field),
    content: holder,
    busy: true,
    fetchPage(after) {
      const nameContains = search.input.value;
      filtered = Boolean(nameContains || stateSelect.value);
      return api(`/v1/tenants${query({ limit: PAGE_SIZE, after, state: stateSelect.value, name_contains: nameContains })}`);
    },
    render: (page) => holder.replaceChildren(tenantsTable(page.data, filtered)),
    // A first page that failed (such as a new search) shows none rather than the old filter's.
    onFirstPageFailure: () => holder.replaceChildren(tenantsTable([], true)),
  });
  let timer = null;
  search.input.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => list.reset(), SEARCH_DELAY_MS);
  });
  signal.addEventListener('abort', () => clearTimeout(timer));
  stateSelect.addEventListener('change', () => list.reset());

  const newTenant = h('button', { type: 'button', class: 'button button-primary' }, 'New tenant');
  newTenant.addEventListener('click', () => openNewTenantDialog({ navigate }));

  main.append(h('div', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Tenants'), newTenant),
    list.element));
  list.reset();
}
