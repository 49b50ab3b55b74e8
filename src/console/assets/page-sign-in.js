// The sign-in page: paste a token, or sign in with the identity provider.

import { h, field, alertBox, showError, showMessages } from './dom.js';
import { api } from './api.js';
import { principalFor, isAdmin } from './session.js';
import { beginSignIn, issuerHost } from './oidc.js';

/** Checks a token against the API before keeping it; throws the server's refusal. */
async function checkToken(token, oidc) {
  const principal = principalFor(token, oidc);
  if (isAdmin(principal)) {
    await api('/v1/tenants?limit=1', { token });
  } else if (principal.tenants.length > 0) {
    await api(`/v1/tenants/${encodeURIComponent(principal.tenants[0].id)}`, { token });
  } else if (principal.kind === 'tenant') {
    throw new Error('This tenant token is incomplete: a tenant token looks like tkn_<26 characters>_<secret>.');
  } else {
    throw new Error('This token grants access to no tenant.');
  }
  return principal;
}

function oidcSection(oidc, alert) {
  const button = h('button', { type: 'button', class: 'button button-block' }, `Sign in with ${issuerHost(oidc.issuer)}`);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await beginSignIn(oidc);
    } catch (error) {
      showError(alert, error);
      button.disabled = false;
    }
  });
  return [h('div', { class: 'divider' }, h('span', {}, 'or')), button];
}

/** Renders the page; onSignedIn(token, principal) is called after a successful check. */
export function renderSignIn(main, { oidc, message, onSignedIn }) {
  document.title = 'Sign in · tenantd';
  const alert = alertBox();
  const input = h('input', { type: 'password', autocomplete: 'off', spellcheck: false, required: true });
  const token = field('Token', input, 'Paste the admin token, or a tenant token (tkn_…) from a sidecar configuration.');
  const submit = h('button', { type: 'submit', class: 'button button-primary button-block' }, 'Sign in');
  const form = h('form', { class: 'stack', noValidate: true }, token.field, submit);

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) {
      showMessages(alert, ['Enter a token to sign in.']);
      input.focus();
      return;
    }
    submit.disabled = true;
    try {
      const principal = await checkToken(value, oidc);
      input.value = '';
      onSignedIn(value, principal);
    } catch (error) {
      input.value = '';
      showError(alert, error);
      input.focus();
    } finally {
      submit.disabled = false;
    }
  });

  main.replaceChildren(h('div', { class: 'signin' },
    h('div', { class: 'card signin-card' },
      h('h1', { tabindex: '-1' }, 'Sign in to tenantd'),
      h('p', { class: 'muted' }, 'The console for tenants, budgets, events and webhooks.'),
      alert,
      form,
      oidc ? oidcSection(oidc, alert) : null)));
  if (message) showMessages(alert, [message]);
  input.focus();
}
