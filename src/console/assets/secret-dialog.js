// The one-time display of a webhook endpoint's signing secret.

import { h } from './dom.js';
import { openDialog } from './dialog.js';
import { copyButton } from './clipboard.js';

/** Shows the secret once; onDone runs when the dialog closes. */
export function openSecretDialog(endpoint, onDone) {
  let secret = endpoint.secret;
  const status = h('p', { class: 'status', role: 'status' });
  const done = h('button', { type: 'button', class: 'button button-primary' }, 'Done');
  const { close } = openDialog({
    title: 'Signing secret',
    content: [
      h('p', { class: 'warning' }, h('strong', {}, 'Shown only once.'),
        ' Store it where the receiver of ', h('span', { class: 'mono' }, endpoint.url),
        ' checks the webhook-signature header.'),
      h('div', { class: 'secret' }, h('code', { class: 'mono' }, secret)),
      h('div', { class: 'actions' }, copyButton('Copy secret', () => secret, status)),
      status,
    ],
    actions: [done],
    onClose() {
      secret = null;
      if (onDone) onDone();
    },
  });
  done.addEventListener('click', close);
}
