// A tenant's page: overview, budgets, active reservations, ledger (with the report of a batch
// sent from it) and events.

import { h, table, field, badge, mono, timeNode, alertBox, showError, hideAlert, fill } from './dom.js';
import { api, listAll, query } from './api.js';
import { canManage } from './session.js';
import { formatAmount } from './money.js';
import { formatInstant } from './time.js';
import { pagedList, growingList } from './list-page.js';
import { confirmDialog } from './dialog.js';
import { budgetCard } from './budget-card.js';
import { budgetTree } from './budget-tree.js';

const LEDGER_PAGE = 20;
const EVENTS_PAGE = 20;
const TICK_MS = 60000;

function tenantPath(id) {
  return `/v1/tenants/${encodeURIComponent(id)}`;
}

function overviewFacts(tenant) {
  const facts = [
    ['Id', mono(tenant.id)],
    ['State', badge(tenant.state)],
    ['Created', timeNode(tenant.created_at, formatInstant(tenant.created_at))],
  ];
  if (tenant.tombstoned_at) facts.push(['Tombstoned', timeNode(tenant.tombstoned_at, formatInstant(tenant.tombstoned_at))]);
  return h('dl', { class: 'facts' }, facts.map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value))));
}

function openTombstoneDialog(tenant, onDone) {
  const input = h('input', { type: 'text', autocomplete: 'off', spellcheck: false });
  const confirm = field("Type the tenant's name to confirm", input);
  const dialog = confirmDialog({
    title: `Tombstone ${tenant.name}?`,
    text: 'Tombstoning revokes the tenant token, releases every active reservation and closes every budget. '
      + 'The records stay readable, but nothing can move again. This cannot be undone.',
    confirmLabel: 'Tombstone',
    content: [confirm.field],
    async action() {
      if (input.value !== tenant.name) return false;
      await api(tenantPath(tenant.id), { method: 'DELETE' });
      onDone();
      return true;
    },
  });
  const button = dialog.form.querySelector('button[type="submit"]');
  button.disabled = true;
  input.addEventListener('input', () => {
    button.disabled = input.value !== tenant.name;
  });
  input.focus();
}

function reservationsTable(reservations, budgetsById) {
  return table({
    caption: 'Active reservations',
    captionHidden: true,
    columns: ['Id', 'Budget', 'Amount', 'Expires'],
    rows: reservations.map((r) => {
      const budget = budgetsById.get(r.budget_id);
      return [
        mono(r.id),
        budget ? budget.name : mono(r.budget_id),
        mono(formatAmount(r.amount_atomic, budget ? budget.unit : '')),
        timeNode(r.expires_at, formatInstant(r.expires_at)),
      ];
    }),
    empty: 'No active reservations.',
  });
}

/** Where an entry came from: the budget the spend was made on, when not this one. */
function viaCell(entry, budgetsById) {
  if (!entry.via_budget_id) return h('span', { class: 'muted' }, '—');
  const via = budgetsById.get(entry.via_budget_id);
  return via ? via.name : mono(entry.via_budget_id);
}

function ledgerTable(entries, unit, budgetsById) {
  return table({
    caption: 'Ledger',
    captionHidden: true,
    columns: ['Id', 'Kind', 'Via', 'Amount', 'Created', 'Reservation', 'Available after'],
    rows: entries.map((e) => [
      mono(e.id),
      h('code', { class: 'kind' }, e.kind),
      viaCell(e, budgetsById),
      mono(formatAmount(e.amount_atomic, unit)),
      timeNode(e.occurred_at, formatInstant(e.occurred_at)),
      e.reservation_id ? mono(e.reservation_id) : h('span', { class: 'muted' }, '—'),
      mono(formatAmount(e.available_atomic, unit)),
    ]),
    empty: 'No entries.',
  });
}

function eventRows(events) {
  return events.map((e) => h('tr', {},
    h('td', {}, h('code', {}, e.type)),
    h('td', {}, mono(e.id)),
    h('td', {}, timeNode(e.created_at, formatInstant(e.created_at)))));
}

/**
 * The ledger section: the report of the last batch sent from this page (what the server does
 * not keep: its refusals), a budget chooser and a paged table.
 */
function ledgerSection(tenantId, signal) {
  const holder = h('div', {});
  const batchHolder = h('div', { class: 'batch-holder' });
  const chooser = h('div', { class: 'toolbar' });
  let budgets = [];
  let budgetsById = new Map();
  let shownId = null; // the budget whose entries the table shows (or is loading)
  const select = h('select', {});
  const chooserField = field('Budget', select);
  const entries = pagedList({
    signal,
    toolbar: chooser,
    content: holder,
    async fetchPage(after) {
      const budget = budgets.find((b) => b.id === select.value) || budgets[0];
      const page = await api(`${tenantPath(tenantId)}/budgets/${encodeURIComponent(budget.id)}/entries${query({ limit: LEDGER_PAGE, after })}`);
      return { ...page, unit: budget.unit };
    },
    render: (page) => holder.replaceChildren(ledgerTable(page.data, page.unit, budgetsById)),
  });
  select.addEventListener('change', () => {
    shownId = select.value;
    entries.reset();
  });

  return {
    element: h('section', { class: 'section', 'aria-labelledby': 'ledger-heading' },
      h('h2', { id: 'ledger-heading' }, 'Ledger'),
      batchHolder,
      entries.element),
    /**
     * Shows a batch's report in place of the last one, and chooses its budget: the page's
     * refresh that follows (setBudgets) shows that budget's entries.
     */
    showBatch(report, budget) {
      batchHolder.replaceChildren(report);
      if (budgets.some((b) => b.id === budget.id)) select.value = budget.id;
    },
    /**
     * Shows the budgets to choose from; keeps the chosen one and the page if it still exists
     * and its entries are the ones shown, else shows the first page of the chosen one.
     */
    setBudgets(list) {
      const chosen = select.value;
      budgets = list;
      budgetsById = new Map(list.map((b) => [b.id, b]));
      fill(select, list.map((b) => h('option', { value: b.id }, b.state === 'open' ? b.name : `${b.name} (${b.state})`)));
      if (list.some((b) => b.id === chosen)) select.value = chosen;
      chooser.replaceChildren(list.length > 1 ? chooserField.field : h('p', { class: 'muted small' },
        list.length === 1 ? `Entries of the ${list[0].name} budget, oldest first.` : ''));
      if (list.length === 0) {
        holder.replaceChildren(h('p', { class: 'muted' }, 'No budgets.'));
        return Promise.resolve(null);
      }
      const same = select.value === shownId;
      shownId = select.value;
      return same ? entries.reload() : entries.reset();
    },
  };
}

/** The events section: the tenant's events, 20 at a time with "More events". */
function eventsSection(tenantId, signal) {
  const body = h('tbody');
  const list = growingList({
    signal,
    content: h('div', { class: 'table-wrap', tabindex: '0' },
      h('table', {},
        h('caption', { class: 'visually-hidden' }, 'Events'),
        h('thead', {}, h('tr', {}, ['Type', 'Id', 'Created'].map((c) => h('th', { scope: 'col' }, c)))),
        body)),
    moreLabel: 'More events',
    fetchPage: (after) => api(`${tenantPath(tenantId)}/events${query({ limit: EVENTS_PAGE, after })}`),
    render(page, after) {
      const rows = eventRows(page.data);
      if (after) body.append(...rows);
      else if (rows.length) body.replaceChildren(...rows);
      else body.replaceChildren(h('tr', {}, h('td', { class: 'empty', colSpan: 3 }, 'No events.')));
    },
  });
  return {
    element: h('section', { class: 'section', 'aria-labelledby': 'events-heading' },
      h('h2', { id: 'events-heading' }, 'Events'),
      list.element),
    reload: () => list.reload(),
  };
}

export function renderTenant(main, { principal, params, signal }) {
  const tenantId = params[0];
  const manage = canManage(principal, tenantId);
  const alert = alertBox();
  const heading = h('h1', {}, 'Tenant');
  const headActions = h('div', { class: 'actions' });
  const facts = h('div', {});
  const budgetsHolder = h('div', { class: 'budgets' }, h('p', { class: 'muted' }, 'Loading budgets…'));
  const reservationsHolder = h('div', { class: 'card card-flush' });
  const ledger = ledgerSection(tenantId, signal);
  const events = eventsSection(tenantId, signal);
  let tickers = [];
  const timer = setInterval(() => tickers.forEach((tick) => tick()), TICK_MS);
  signal.addEventListener('abort', () => clearInterval(timer));

  const sections = h('div', { class: 'page-sections', hidden: true },
    h('section', { class: 'section', 'aria-labelledby': 'budgets-heading' },
      h('h2', { id: 'budgets-heading' }, 'Budgets'), budgetsHolder),
    h('section', { class: 'section', 'aria-labelledby': 'reservations-heading' },
      h('h2', { id: 'reservations-heading' }, 'Active reservations'), reservationsHolder),
    ledger.element,
    events.element);
  main.append(h('div', { class: 'page' },
    h('div', { class: 'page-head' }, h('div', {}, heading, facts), headActions),
    alert,
    sections));

  /** A batch was sent from a budget's card: its report above the ledger, then the new figures. */
  function onBatch(report, budget) {
    ledger.showBatch(report, budget);
    refresh();
  }

  async function refresh() {
    let tenant;
    let budgets;
    try {
      [tenant, budgets] = await Promise.all([
        api(tenantPath(tenantId)),
        listAll(`${tenantPath(tenantId)}/budgets`),
      ]);
    } catch (error) {
      if (signal.aborted) return;
      if (error.status === 404) heading.textContent = 'Tenant not found';
      showError(alert, error);
      return;
    }
    if (signal.aborted) return;
    hideAlert(alert);
    sections.hidden = false;
    document.title = `${tenant.name} · tenantd`;
    heading.textContent = tenant.name;
    facts.replaceChildren(overviewFacts(tenant));
    headActions.replaceChildren();
    if (manage && tenant.state === 'active') {
      const tombstone = h('button', { type: 'button', class: 'button button-danger' }, 'Tombstone tenant');
      tombstone.addEventListener('click', () => openTombstoneDialog(tenant, refresh));
      headActions.append(tombstone);
    }
    tickers = [];
    const writable = manage && tenant.state === 'active';
    const { items, budgetsById } = budgetTree(budgets);
    budgetsHolder.replaceChildren(...items.map((item) => budgetCard(item.budget,
      { manage: writable, tickers, signal, onChanged: refresh, onBatch, tree: { ...item, budgetsById } })));
    if (budgets.length === 0) budgetsHolder.append(h('p', { class: 'muted' }, 'No budgets.'));
    ledger.setBudgets(items.map((item) => item.budget));
    events.reload();
    try {
      const reservations = await listAll(`${tenantPath(tenantId)}/reservations`, { state: 'active' }, 1000);
      if (!signal.aborted) reservationsHolder.replaceChildren(reservationsTable(reservations, budgetsById));
    } catch (error) {
      if (signal.aborted) return;
      const sectionAlert = alertBox();
      showError(sectionAlert, error);
      reservationsHolder.replaceChildren(sectionAlert);
    }
  }
  refresh();
}
