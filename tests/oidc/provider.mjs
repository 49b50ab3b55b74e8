// A real OpenID Connect provider for tenantd's authentication tests: oidc-provider (a certified
// OpenID Provider) on 127.0.0.1, issuing JWT access tokens by client credentials.
//
//   node provider.mjs --port PORT [--tls-port PORT --cert FILE --key FILE]
//                     [--public-client ID --redirect-uri URI]
//
// Prints "listening on http://127.0.0.1:PORT" once it serves. With --tls-port it serves the
// same over HTTPS too (the PEM certificate and key given), and that is its issuer,
// https://127.0.0.1:TLS-PORT; the plain port stays for the tests' own calls.
//
// With --public-client it also knows one public client of that id (no secret, PKCE) for the
// authorization code grant back to URI, as the web console signs in (tests/console/): the
// browser logs in with any login name on the sign-in page of /test/interaction/ (no password,
// consent given at once), and the token endpoint answers cross-origin requests from the
// redirect URI's origin. Its access tokens are like the others below, so a client asking for
// `openid tenantd:admin` gets an admin token.
//
// Other clients are registered dynamically (POST /reg, RFC 7591) with two metadata of
// tenantd's tests:
//   tenantd_permissions  the array put in the access token's `tenantd_permissions` claim
//   tenantd_alg          the algorithm the access token is signed with (RS256, PS256, ES256
//                        or EdDSA; default RS256)
// Access tokens are for the resource `urn:tenantd` (audience `tenantd`, overridable per
// client with `tenantd_audience`), with the scope `tenantd:admin` when asked for.
//
// Beside the provider's own endpoints, /test/* serves what a test needs and no provider does:
//   POST /test/forge   {"mode", "header", "claims"}: a token the provider never issued, for
//                      the hostile-token tests (see forge() below)
//   POST /test/rotate  replaces every signing key with new ones (new kids)
//   GET  /test/stats   {"jwks": N}: how often the key set was fetched
//   GET  /test/interaction/UID, POST /test/interaction/UID/login: the sign-in page of an
//                      authorization request (see interaction() below)
// It stops on SIGTERM or SIGINT, or when its stdin closes (the test process went away).

import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { createHmac, createPublicKey, randomUUID } from 'node:crypto';

import Provider from 'oidc-provider';
import { CompactSign, exportJWK, generateKeyPair, importJWK } from 'jose';

const ALGORITHMS = ['RS256', 'PS256', 'ES256', 'EdDSA'];
const AUDIENCE = 'tenantd';
const RESOURCE = 'urn:tenantd';
const ADMIN_SCOPE = 'tenantd:admin';
const BODY_BYTES_MAX = 65536;

const args = process.argv.slice(2);
/** The value after `flag`, or undefined. */
const option = (flag) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);
const isPort = (n) => Number.isInteger(n) && n > 0 && n <= 65535;
const port = Number(option('--port'));
const tlsPort = option('--tls-port') === undefined ? undefined : Number(option('--tls-port'));
const publicClient = option('--public-client');
const redirectUri = option('--redirect-uri');
if (
  !isPort(port) ||
  (tlsPort !== undefined && (!isPort(tlsPort) || !option('--cert') || !option('--key'))) ||
  (publicClient === undefined) !== (redirectUri === undefined)
) {
  console.error(
    'usage: node provider.mjs --port PORT [--tls-port PORT --cert FILE --key FILE] ' +
      '[--public-client ID --redirect-uri URI]',
  );
  process.exit(2);
}
const issuer = tlsPort === undefined ? `http://127.0.0.1:${port}` : `https://127.0.0.1:${tlsPort}`;

let jwksFetches = 0;

/** One signing key per algorithm, each with its own kid and its `alg` stated. */
async function newKeys() {
  const keys = [];
  for (const alg of ALGORITHMS) {
    const options = alg === 'EdDSA' ? { crv: 'Ed25519', extractable: true } : { extractable: true };
    const { privateKey } = await generateKeyPair(alg, options);
    const jwk = await exportJWK(privateKey);
    keys.push({ ...jwk, alg, use: 'sig', kid: `${alg.toLowerCase()}-${randomUUID()}` });
  }
  return keys;
}

/** The public client of --public-client: authorization code with PKCE, no secret. */
const publicClients =
  publicClient === undefined
    ? []
    : [
        {
          client_id: publicClient,
          token_endpoint_auth_method: 'none',
          grant_types: ['authorization_code'],
          response_types: ['code'],
          redirect_uris: [redirectUri],
          scope: `openid ${ADMIN_SCOPE}`,
        },
      ];
const cookieKeys = [randomUUID()];

function configuration(keys) {
  return {
    jwks: { keys },
    clients: publicClients,
    scopes: [ADMIN_SCOPE],
    cookies: { keys: cookieKeys },
    async findAccount(ctx, sub) {
      return { accountId: sub, claims: async () => ({ sub }) };
    },
    interactions: { url: (ctx, interaction) => `/test/interaction/${interaction.uid}` },
    // Cross-origin calls of the token endpoint: from the origin of a redirect URI of the client.
    clientBasedCORS(ctx, origin, client) {
      return (client.redirectUris ?? []).some((uri) => new URL(uri).origin === origin);
    },
    clientDefaults: {
      grant_types: ['client_credentials'],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_basic',
    },
    extraClientMetadata: {
      properties: ['tenantd_permissions', 'tenantd_alg', 'tenantd_audience'],
      validator(ctx, key, value) {
        const ok = {
          tenantd_permissions: () => value === undefined || (Array.isArray(value) && value.every((v) => typeof v === 'string')),
          tenantd_alg: () => value === undefined || ALGORITHMS.includes(value),
          tenantd_audience: () => value === undefined || typeof value === 'string',
        }[key]();
        if (!ok) {
          throw new Provider.errors.InvalidClientMetadata(`${key} is not valid`);
        }
      },
    },
    async extraTokenClaims(ctx, token) {
      const client = ctx.oidc.client;
      if (token.kind === 'ClientCredentials' && client?.tenantd_permissions) {
        return { tenantd_permissions: client.tenantd_permissions };
      }
      return undefined;
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => RESOURCE,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource, client) => ({
          scope: ADMIN_SCOPE,
          audience: client.tenantd_audience ?? AUDIENCE,
          accessTokenTTL: 300,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: client.tenantd_alg ?? 'RS256' } },
        }),
      },
    },
  };
}

let keys = await newKeys();
let provider = new Provider(issuer, configuration(keys));

/** The private key a kid names, imported for signing. */
async function signingKey(kid) {
  const jwk = keys.find((k) => k.kid === kid) ?? keys[0];
  return { jwk, key: await importJWK(jwk, jwk.alg) };
}

const b64 = (data) => Buffer.from(data).toString('base64url');

/**
 * A token the provider never issued:
 *   signed         signed with the provider's key the header's kid names (claims as given:
 *                  expired, not yet valid, another issuer or audience, ...)
 *   tampered       signed like `signed`, then the claims replaced by `tampered_claims`
 *   none           `alg: none`, no signature
 *   hmac           HS256 with the provider's public key (PEM) as the HMAC secret
 *   attacker       signed with a fresh key of the attacker's, under the header's kid
 */
async function forge({ mode, header, claims, tampered_claims: tampered }) {
  const payload = new TextEncoder().encode(JSON.stringify(claims));
  switch (mode) {
    case 'signed':
    case 'tampered': {
      const { key } = await signingKey(header.kid);
      const token = await new CompactSign(payload).setProtectedHeader(header).sign(key);
      if (mode === 'signed') return token;
      const [h, , s] = token.split('.');
      return `${h}.${b64(JSON.stringify(tampered))}.${s}`;
    }
    case 'none':
      return `${b64(JSON.stringify({ ...header, alg: 'none' }))}.${b64(JSON.stringify(claims))}.`;
    case 'hmac': {
      const { jwk } = await signingKey(header.kid);
      const { d, p, q, dp, dq, qi, ...publicJwk } = jwk;
      const pem = createPublicKey({ key: publicJwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
      const input = `${b64(JSON.stringify({ ...header, alg: 'HS256' }))}.${b64(JSON.stringify(claims))}`;
      return `${input}.${createHmac('sha256', pem).update(input).digest('base64url')}`;
    }
    case 'attacker': {
      const { privateKey } = await generateKeyPair(header.alg ?? 'RS256');
      return new CompactSign(payload).setProtectedHeader(header).sign(privateKey);
    }
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

/** A request's body, at most BODY_BYTES_MAX bytes, as text. */
async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > BODY_BYTES_MAX) throw new Error('body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

const readJson = async (req) => JSON.parse(await readBody(req));
const readForm = async (req) => new URLSearchParams(await readBody(req));

const escapeHtml = (text) =>
  String(text).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

/** The sign-in page of an authorization request: a login name, no password. */
function loginPage(res, uid, clientId) {
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Sign in to the test provider</title></head>
<body>
<main>
<h1>Sign in to the test provider</h1>
<p>${escapeHtml(clientId)} asks to sign you in. Any login name will do.</p>
<form method="post" action="/test/interaction/${escapeHtml(uid)}/login">
<label for="login">Login name</label>
<input id="login" name="login" required autocomplete="username">
<button type="submit">Sign in</button>
</form>
</main>
</body>
</html>
`);
}

/**
 * The interactions of an authorization request. GET /test/interaction/UID shows the sign-in
 * page when a login is due, and when a consent is due gives it at once (every scope asked
 * for, for every resource) and sends the browser back to the authorization endpoint;
 * POST /test/interaction/UID/login signs in with the login name given.
 */
async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('the interaction cookie names another interaction');
  const { prompt, params, session, grantId } = details;
  if (action === 'login') {
    if (req.method !== 'POST') return send(res, 405, { error: 'POST the login form' });
    const login = (await readForm(req)).get('login')?.trim();
    if (!login) return loginPage(res, uid, params.client_id);
    return provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
  }
  if (req.method !== 'GET') return send(res, 405, { error: 'GET the interaction' });
  if (prompt.name === 'login') return loginPage(res, uid, params.client_id);
  if (prompt.name !== 'consent') throw new Error(`unknown prompt ${prompt.name}`);
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const consent = { grantId: await grant.save() };
  return provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
}

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function test(req, res) {
  const step = /^\/test\/interaction\/([A-Za-z0-9_-]+)(\/login)?(?:\?.*)?$/.exec(req.url);
  if (step) {
    return interaction(req, res, step[1], step[2] ? 'login' : undefined);
  }
  if (req.method === 'POST' && req.url === '/test/forge') {
    return send(res, 200, { token: await forge(await readJson(req)) });
  }
  if (req.method === 'POST' && req.url === '/test/rotate') {
    keys = await newKeys();
    provider = new Provider(issuer, configuration(keys));
    return send(res, 200, { kids: keys.map((k) => k.kid) });
  }
  if (req.method === 'GET' && req.url === '/test/stats') {
    return send(res, 200, { jwks: jwksFetches });
  }
  if (req.method === 'GET' && req.url === '/test/kids') {
    return send(res, 200, Object.fromEntries(keys.map((k) => [k.alg, k.kid])));
  }
  return send(res, 404, { error: 'no such test endpoint' });
}

function serve(req, res) {
  if (req.url.startsWith('/test/')) {
    test(req, res).catch((e) => send(res, 400, { error: String(e.message ?? e) }));
    return;
  }
  if (req.url === '/favicon.ico') {
    // A browser on the sign-in page asks for it: no icon, and no 404 in its console.
    res.writeHead(204);
    res.end();
    return;
  }
  if (req.url.split('?')[0] === '/jwks') jwksFetches += 1;
  provider.callback()(req, res);
}

const servers = [createServer(serve)];
if (tlsPort !== undefined) {
  servers.push(createTlsServer({ cert: readFileSync(option('--cert')), key: readFileSync(option('--key')) }, serve));
}
const listening = servers.map(
  (server, i) => new Promise((resolve) => server.listen(i === 0 ? port : tlsPort, '127.0.0.1', resolve)),
);
Promise.all(listening).then(() => console.log(`listening on http://127.0.0.1:${port}`));

const stop = () => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))).then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.resume();
