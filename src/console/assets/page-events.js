// The events page: every tenant's events, filtered by type, with each event's data on demand.

import { h, field, routeLink, mono, timeNode } from './dom.js';
import { api, query } from './api.js';
import { formatInstant } from './time.js';
import { pagedList } from './list-page.js';
import { EVENT_TYPES } from './event-types.js';

const PAGE_SIZE = 25;
const COLUMNS = ['Type', 'Tenant', 'Id', 'Created', 'Data'];

/** A row and its hidden detail row; "Show" toggles the event's data. */
function eventRows(event) {
  const detailId = `data-${event.id}`;
  const pre = h('pre', { class: 'code', tabindex: '0' }, JSON.stringify(event.data, null, 2));
  const detail = h('tr', { class: 'detail-row', id: detailId, hidden: true },
    h('td', { colSpan: COLUMNS.length }, pre));
  const toggle = h('button', {
    type: 'button', class: 'button button-small', 'aria-expanded': 'false', 'aria-controls': detailId,
  }, 'Show');
  toggle.addEventListener('click', () => {
    const open = detail.hidden;
    detail.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    toggle.textContent = open ? 'Hide' : 'Show';
  });
  const row = h('tr', {},
    h('td', {}, h('code', {}, event.type)),
    h('td', {}, event.tenant_id ? routeLink(`/tenants/${event.tenant_id}`, event.tenant_id, { class: 'mono' }) : '—'),
    h('td', {}, mono(event.id)),
    h('td', {}, timeNode(event.created_at, formatInstant(event.created_at))),
    h('td', {}, toggle));
  return [row, detail];
}

export function renderEvents(main, { signal }) {
  document.title = 'Events · tenantd';
  const typeSelect = h('select', {}, h('option', { value: '' }, 'All'),
    EVENT_TYPES.map((t) => h('option', { value: t }, t)));
  const type = field('Type', typeSelect);
  const body = h('tbody');
  const list = pagedList({
    signal,
    toolbar: h('div', { class: 'toolbar' }, type.field),
    content: h('div', { class: 'table-wrap', tabindex: '0' },
      h('table', {},
        h('caption', { class: 'visually-hidden' }, 'Events'),
        h('thead', {}, h('tr', {}, COLUMNS.map((c) => h('th', { scope: 'col' }, c)))),
        body)),
    fetchPage: (after) => api(`/v1/events${query({ limit: PAGE_SIZE, after, type: typeSelect.value })}`),
    render(page) {
      if (page.data.length) body.replaceChildren(...page.data.flatMap(eventRows));
      else body.replaceChildren(h('tr', {}, h('td', { class: 'empty', colSpan: COLUMNS.length }, 'No events.')));
    },
  });
  typeSelect.addEventListener('change', () => list.reset());

  main.append(h('div', { class: 'page' },
    h('div', { class: 'page-head' }, h('div', {}, h('h1', {}, 'Events'),
      h('p', { class: 'muted' }, 'What changed, oldest first. Reservations and charges are in each budget\'s ledger.'))),
    list.element));
  list.reset();
}
