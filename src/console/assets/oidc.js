// OpenID Connect sign-in: the authorization-code flow with PKCE (S256) as a public client.

const STATE_KEY = 'tenantd.oidc.state';
const VERIFIER_KEY = 'tenantd.oidc.verifier';

function base64url(bytes) {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomToken(size = 32) {
  return base64url(crypto.getRandomValues(new Uint8Array(size)));
}

async function challengeFor(verifier) {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

function redirectUri() {
  return `${location.origin}/console/`;
}

/** host[:port] of the issuer, for the button's label. */
export function issuerHost(issuer) {
  try {
    return new URL(issuer).host;
  } catch {
    return issuer;
  }
}

async function discover(issuer) {
  const url = `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`;
  let response;
  try {
    response = await fetch(url, { credentials: 'omit', cache: 'no-store' });
  } catch {
    throw new Error('The identity provider could not be reached.');
  }
  if (!response.ok) throw new Error(`The identity provider's configuration could not be read (${response.status}).`);
  const doc = await response.json();
  if (!doc.authorization_endpoint || !doc.token_endpoint) {
    throw new Error("The identity provider's configuration names no authorization or token endpoint.");
  }
  return doc;
}

/** Leaves for the identity provider's sign-in page. */
export async function beginSignIn(oidc) {
  if (!crypto.subtle) throw new Error('Sign-in with the identity provider needs a secure (https or localhost) page.');
  const doc = await discover(oidc.issuer);
  const verifier = randomToken(32);
  const state = randomToken(16);
  sessionStorage.setItem(VERIFIER_KEY, verifier);
  sessionStorage.setItem(STATE_KEY, state);
  const params = new URLSearchParams({
    response_type: 'code',
    client_id: oidc.client_id,
    redirect_uri: redirectUri(),
    scope: oidc.scope,
    code_challenge: await challengeFor(verifier),
    code_challenge_method: 'S256',
    state,
  });
  const separator = doc.authorization_endpoint.includes('?') ? '&' : '?';
  location.assign(`${doc.authorization_endpoint}${separator}${params}`);
}

/** Whether the page was loaded as the identity provider's redirect back. */
export function isReturn() {
  const params = new URLSearchParams(location.search);
  return params.has('code') || params.has('error');
}

function clearFlow() {
  sessionStorage.removeItem(STATE_KEY);
  sessionStorage.removeItem(VERIFIER_KEY);
}

/** A return to the console that no sign-in of this tab started. */
export class ForeignReturn extends Error {}

/**
 * Takes the code off the URL and trades it for an access token; returns the token.
 * The answer's state is checked first: only an answer to the sign-in started in this tab
 * may end it or show the provider's error. Anything else (such as a crafted link) gets a
 * generic message and leaves a sign-in under way as it was.
 */
export async function completeSignIn(oidc) {
  const params = new URLSearchParams(location.search);
  const expectedState = sessionStorage.getItem(STATE_KEY);
  const verifier = sessionStorage.getItem(VERIFIER_KEY);
  if (!expectedState || !verifier || params.get('state') !== expectedState) {
    // Not the answer to a sign-in of this tab (a link from elsewhere): whoever is signed in
    // stays signed in.
    history.replaceState(null, '', '/console/');
    throw new ForeignReturn('The sign-in answer did not match a sign-in started here.');
  }
  history.replaceState(null, '', '/console/#/sign-in');
  clearFlow();
  if (params.has('error')) {
    const description = params.get('error_description');
    throw new Error(description ? `Sign-in failed: ${description}` : `Sign-in failed: ${params.get('error')}`);
  }
  if (!oidc) throw new Error('Sign-in with an identity provider is not configured.');
  const doc = await discover(oidc.issuer);
  let response;
  try {
    response = await fetch(doc.token_endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: params.get('code') || '',
        redirect_uri: redirectUri(),
        client_id: oidc.client_id,
        code_verifier: verifier,
      }),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch {
    throw new Error('The identity provider could not be reached.');
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok || typeof body.access_token !== 'string') {
    const reason = body.error_description || body.error || `status ${response.status}`;
    throw new Error(`The identity provider refused the sign-in: ${reason}`);
  }
  return body.access_token;
}
