// A webhook endpoint's page: its settings, enable/disable, secret rotation, deletion and deliveries.

import { h, table, routeLink, badge, mono, timeNode, alertBox, showError, hideAlert } from './dom.js';
import { api, query } from './api.js';
import { formatInstant } from './time.js';
import { pagedList } from './list-page.js';
import { confirmDialog } from './dialog.js';
import { openSecretDialog } from './secret-dialog.js';
import { describeEventTypes } from './page-webhooks.js';

const PAGE_SIZE = 25;

function endpointPath(id) {
  return `/v1/webhook-endpoints/${encodeURIComponent(id)}`;
}

function endpointFacts(endpoint) {
  const state = endpoint.disabled_reason
    ? [badge(endpoint.state), ` ${endpoint.disabled_reason === 'failing' ? 'after repeated failed deliveries' : 'manually'}`]
    : [badge(endpoint.state)];
  const facts = [
    ['Id', mono(endpoint.id)],
    ['State', state],
    ['Events', describeEventTypes(endpoint.event_types)],
    ['Tenant', endpoint.tenant_id ? routeLink(`/tenants/${endpoint.tenant_id}`, endpoint.tenant_id, { class: 'mono' }) : 'all tenants'],
    ['Description', endpoint.description === null ? h('span', { class: 'muted' }, 'none') : endpoint.description],
    ['Created', timeNode(endpoint.created_at, formatInstant(endpoint.created_at))],
  ];
  return h('dl', { class: 'facts' }, facts.map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value))));
}

/**
 * What the last attempt got, under "Last result": its error when it failed ("HTTP 500",
 * "timed out"), else its status ("HTTP 204" after a success, which is no error); a dash
 * before the first attempt.
 */
function lastResult(delivery) {
  if (delivery.last_error) return delivery.last_error;
  if (delivery.last_status !== null) return `HTTP ${delivery.last_status}`;
  return h('span', { class: 'muted' }, '—');
}

export function renderWebhook(main, { params, signal, navigate }) {
  const endpointId = params[0];
  document.title = 'Webhook endpoint · tenantd';
  const alert = alertBox();
  const heading = h('h1', { class: 'wrap' }, 'Webhook endpoint');
  const facts = h('div', {});
  const actions = h('div', { class: 'actions' });
  const holder = h('div', {});

  async function retry(delivery, button) {
    button.disabled = true;
    try {
      await api(`${endpointPath(endpointId)}/deliveries/${encodeURIComponent(delivery.id)}/retry`, { method: 'POST' });
      await deliveryList.reload();
    } catch (error) {
      if (!signal.aborted) showError(deliveryList.alert, error);
      button.disabled = false;
    }
  }

  function deliveryRow(delivery) {
    const button = h('button', { type: 'button', class: 'button button-small' }, 'Retry');
    button.addEventListener('click', () => retry(delivery, button));
    return [
      mono(delivery.event_id),
      delivery.event_type ? h('code', {}, delivery.event_type) : '—',
      badge(delivery.state),
      String(delivery.attempts),
      lastResult(delivery),
      timeNode(delivery.next_attempt_at, formatInstant(delivery.next_attempt_at)),
      button,
    ];
  }

  const deliveryList = pagedList({
    signal,
    content: holder,
    fetchPage: (after) => api(`${endpointPath(endpointId)}/deliveries${query({ limit: PAGE_SIZE, after })}`),
    render: (page) => holder.replaceChildren(table({
      caption: 'Deliveries',
      captionHidden: true,
      columns: ['Event id', 'Event type', 'State', 'Attempts', 'Last result', 'Next attempt', 'Action'],
      rows: page.data.map(deliveryRow),
      empty: 'No deliveries yet.',
    })),
  });

  function actionButton(text, handler, variant = '') {
    const button = h('button', { type: 'button', class: `button ${variant}` }, text);
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        await handler();
      } catch (error) {
        if (!signal.aborted) showError(alert, error);
      } finally {
        button.disabled = false;
      }
    });
    return button;
  }

  function showEndpoint(endpoint) {
    document.title = `${endpoint.url} · tenantd`;
    heading.textContent = endpoint.url;
    facts.replaceChildren(endpointFacts(endpoint));
    const enabled = endpoint.state === 'enabled';
    actions.replaceChildren(
      actionButton(enabled ? 'Disable' : 'Enable', async () => {
        const updated = await api(endpointPath(endpointId), { method: 'PATCH', body: { enabled: !enabled } });
        hideAlert(alert);
        showEndpoint(updated);
      }),
      actionButton('Rotate secret', async () => {
        const rotated = await api(`${endpointPath(endpointId)}/rotate-secret`, { method: 'POST' });
        hideAlert(alert);
        openSecretDialog(rotated, () => showEndpoint(rotated));
      }),
      actionButton('Delete endpoint', async () => {
        confirmDialog({
          title: 'Delete this endpoint?',
          text: `Events will no longer be delivered to ${endpoint.url}, and its pending deliveries stop. This cannot be undone.`,
          confirmLabel: 'Delete endpoint',
          async action() {
            await api(endpointPath(endpointId), { method: 'DELETE' });
            navigate('/webhooks');
            return true;
          },
        });
      }, 'button-danger'));
  }

  async function loadEndpoint() {
    try {
      const endpoint = await api(endpointPath(endpointId));
      if (signal.aborted) return;
      showEndpoint(endpoint);
      if (deliveries.hidden) {
        deliveries.hidden = false;
        deliveryList.reset();
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error.status === 404) heading.textContent = 'Endpoint not found';
      showError(alert, error);
    }
  }

  const refresh = h('button', { type: 'button', class: 'button button-small' }, 'Refresh');
  refresh.addEventListener('click', () => {
    loadEndpoint();
    deliveryList.reload();
  });

  const deliveries = h('section', { class: 'section', 'aria-labelledby': 'deliveries-heading', hidden: true },
    h('div', { class: 'section-head' }, h('h2', { id: 'deliveries-heading' }, 'Deliveries'), refresh),
    deliveryList.element);
  main.append(h('div', { class: 'page' },
    h('p', { class: 'crumbs' }, routeLink('/webhooks', '← Webhook endpoints')),
    h('div', { class: 'page-head' }, h('div', { class: 'grow' }, heading, facts), actions),
    alert,
    deliveries));
  loadEndpoint();
}
