// "New tenant": the create dialog, then the one-time sidecar configuration.

import { h, field, showMessages } from './dom.js';
import { api, newIdempotencyKey } from './api.js';
import { amountProblem } from './money.js';
import { openDialog, cancelButton, submitButton } from './dialog.js';
import { periodFields } from './period-form.js';
import { copyButton } from './clipboard.js';

function dotenv(env) {
  return Object.entries(env).map(([name, value]) => `${name}=${value}`).join('\n');
}

function kubernetesEnv(env) {
  const lines = ['env:'];
  for (const [name, value] of Object.entries(env)) {
    lines.push(`  - name: ${name}`, `    value: ${JSON.stringify(value)}`);
  }
  return lines.join('\n');
}

function configBlock(title, text, copyLabel, status) {
  return h('section', { class: 'config-block' },
    h('div', { class: 'config-head' }, h('h3', {}, title), copyButton(copyLabel, () => text, status)),
    h('pre', { class: 'code code-wrap' }, text));
}

/** Shows the created tenant's sidecar configuration once; Done opens the tenant. */
function openSidecarDialog(created, navigate) {
  let env = created.sidecar_config_env || {};
  const status = h('p', { class: 'status', role: 'status' });
  const done = h('button', { type: 'button', class: 'button button-primary' }, 'Done');
  const { close } = openDialog({
    title: 'Save the sidecar configuration',
    wide: true,
    content: [
      h('p', { class: 'warning' }, h('strong', {}, 'The tenant token is shown only once.'),
        ' Give this configuration to the sidecar of ', h('strong', {}, created.name),
        ' now: it cannot be shown again.'),
      configBlock('.env', dotenv(env), 'Copy .env', status),
      configBlock('Kubernetes env', kubernetesEnv(env), 'Copy Kubernetes env', status),
      status,
    ],
    actions: [done],
    onClose() {
      env = null;
      navigate(`/tenants/${created.id}`);
    },
  });
  done.addEventListener('click', close);
}

/** Opens the "New tenant" dialog. */
export function openNewTenantDialog({ navigate }) {
  const idempotencyKey = newIdempotencyKey();
  const name = field('Name', h('input', { type: 'text', autocomplete: 'off', spellcheck: false, maxLength: 200 }));
  const deposit = field('Opening deposit', h('input', { type: 'text', autocomplete: 'off', inputMode: 'numeric', value: '0' }),
    'In atomic units, the smallest unit of the budget.');
  const period = periodFields(null);

  const { alert, close } = openDialog({
    title: 'New tenant',
    content: [name.field, deposit.field, period.element],
    actions: [cancelButton(), submitButton('Create tenant')],
    async onSubmit() {
      const problems = [];
      const nameValue = name.input.value;
      if (nameValue.trim() === '') problems.push('Name is required.');
      const depositValue = deposit.input.value.trim();
      const depositProblem = amountProblem('Opening deposit', depositValue);
      if (depositProblem) problems.push(depositProblem);
      const { period: periodValue, problems: periodProblems } = period.read();
      problems.push(...periodProblems);
      if (problems.length) {
        showMessages(alert, problems);
        return false;
      }
      const body = { name: nameValue, opening_deposit_atomic: depositValue };
      if (periodValue) body.period = periodValue;
      const created = await api('/v1/tenants', { method: 'POST', body, idempotencyKey });
      // The tenant token is in this answer only: show it whatever became of this dialog.
      close();
      openSidecarDialog(created, navigate);
      return true;
    },
  });
  name.input.focus();
}
