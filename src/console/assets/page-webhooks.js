// The webhook endpoints page: the list, and "New endpoint".

import { h, field, table, routeLink, badge, timeNode, showMessages, uid } from './dom.js';
import { api, query, newIdempotencyKey } from './api.js';
import { formatInstant } from './time.js';
import { pagedList } from './list-page.js';
import { openDialog, cancelButton, submitButton } from './dialog.js';
import { openSecretDialog } from './secret-dialog.js';
import { EVENT_TYPES } from './event-types.js';

const PAGE_SIZE = 25;

/** "all events" or the list of types. */
export function describeEventTypes(types) {
  return !types || types.includes('*') ? 'all events' : types.join(', ');
}

function endpointRow(endpoint) {
  return h('tr', {},
    h('td', { class: 'wrap' }, routeLink(`/webhooks/${endpoint.id}`, endpoint.url, { class: 'strong-link' })),
    h('td', {}, badge(endpoint.state)),
    h('td', { class: 'wrap' }, describeEventTypes(endpoint.event_types)),
    h('td', {}, endpoint.tenant_id ? routeLink(`/tenants/${endpoint.tenant_id}`, endpoint.tenant_id, { class: 'mono' }) : 'all tenants'),
    h('td', {}, timeNode(endpoint.created_at, formatInstant(endpoint.created_at))));
}

function eventsFieldset() {
  const hintId = uid('hint');
  const boxes = EVENT_TYPES.map((type) => {
    const input = h('input', { type: 'checkbox', value: type, id: uid('evt') });
    return { input, node: h('div', { class: 'check' }, input, h('label', { for: input.id }, type)) };
  });
  const fieldset = h('fieldset', { class: 'fieldset', 'aria-describedby': hintId },
    h('legend', {}, 'Events'),
    h('p', { class: 'hint', id: hintId }, 'Leave every box unchecked to receive all events, including types added later.'),
    h('div', { class: 'checks' }, boxes.map((b) => b.node)));
  return { element: fieldset, read: () => boxes.filter((b) => b.input.checked).map((b) => b.input.value) };
}

function validateEndpointForm(url, tenant) {
  const problems = [];
  if (!/^https?:\/\/[^/?#@\s]+(?:[/?][^#\s]*)?$/.test(url)) {
    problems.push('URL must be an absolute https:// address without user information or a fragment.');
  }
  if (tenant && !/^ten_[0-7][0-9A-HJKMNP-TV-Z]{25}$/.test(tenant)) problems.push('Tenant must be a tenant id (ten_…).');
  return problems;
}

function openNewEndpointDialog(onCreated) {
  const idempotencyKey = newIdempotencyKey();
  const url = field('URL', h('input', { type: 'url', autocomplete: 'off', spellcheck: false, placeholder: 'https://' }),
    'Where events are POSTed, signed after the Standard Webhooks specification.');
  const description = field('Description', h('input', { type: 'text', autocomplete: 'off', maxLength: 200 }), 'Optional.');
  const events = eventsFieldset();
  const tenant = field('Tenant', h('input', { type: 'text', autocomplete: 'off', spellcheck: false }),
    'Optional. A tenant id, to receive only that tenant\'s events.');
  const { alert, close } = openDialog({
    title: 'New endpoint',
    content: [url.field, description.field, events.element, tenant.field],
    actions: [cancelButton(), submitButton('Create endpoint')],
    async onSubmit() {
      const urlValue = url.input.value.trim();
      const tenantValue = tenant.input.value.trim();
      const problems = validateEndpointForm(urlValue, tenantValue);
      if (problems.length) {
        showMessages(alert, problems);
        return false;
      }
      const body = { url: urlValue };
      const types = events.read();
      if (types.length) body.event_types = types;
      if (description.input.value !== '') body.description = description.input.value;
      if (tenantValue) body.tenant_id = tenantValue;
      const created = await api('/v1/webhook-endpoints', { method: 'POST', body, idempotencyKey });
      // The signing secret is in this answer only: show it whatever became of this dialog.
      close();
      openSecretDialog(created, onCreated);
      return true;
    },
  });
  url.input.focus();
}

export function renderWebhooks(main, { signal }) {
  document.title = 'Webhook endpoints · tenantd';
  const holder = h('div', {});
  const list = pagedList({
    signal,
    content: holder,
    fetchPage: (after) => api(`/v1/webhook-endpoints${query({ limit: PAGE_SIZE, after })}`),
    render: (page) => holder.replaceChildren(table({
      caption: 'Endpoints',
      captionHidden: true,
      columns: ['URL', 'State', 'Events', 'Tenant', 'Created'],
      rows: page.data.map(endpointRow),
      empty: 'No endpoints yet. Add one with “New endpoint” to have events POSTed to your service.',
    })),
  });
  const create = h('button', { type: 'button', class: 'button button-primary' }, 'New endpoint');
  create.addEventListener('click', () => openNewEndpointDialog(() => list.reset()));

  main.append(h('div', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Webhook endpoints'), create),
    list.element));
  list.reset();
}
