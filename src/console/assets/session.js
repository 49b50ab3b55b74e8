// The signed-in token (kept in sessionStorage only) and what it may do.

const TOKEN_KEY = 'tenantd.token';

export function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** The tenant id a tenant token (tkn_<ULID>_<secret>) belongs to, or null. */
export function tenantOfToken(token) {
  const match = /^tkn_([0-9A-Za-z]{26})_/.exec(token);
  return match ? `ten_${match[1]}` : null;
}

function looksLikeJwt(token) {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token);
}

/** Decodes a JWT's payload without verifying it (the server verifies). */
export function jwtPayload(token) {
  const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
  const padded = part + '='.repeat((4 - (part.length % 4)) % 4);
  const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(bytes));
}

function principalFromJwt(token, oidc) {
  let claims;
  try {
    claims = jwtPayload(token);
  } catch {
    return { kind: 'admin', tenants: [] };
  }
  const scopes = typeof claims.scope === 'string' ? claims.scope.split(' ')
    : Array.isArray(claims.scp) ? claims.scp : [];
  if (scopes.includes(oidc.admin_scope)) return { kind: 'admin', tenants: [] };
  const grants = Array.isArray(claims[oidc.permissions_claim]) ? claims[oidc.permissions_claim] : [];
  const tenants = [];
  for (const grant of grants) {
    const match = typeof grant === 'string' && /^(ten_[0-9A-Za-z]{26}):(read|spend|manage)$/.exec(grant);
    if (!match) continue;
    const existing = tenants.find((t) => t.id === match[1]);
    if (existing) existing.permissions.push(match[2]);
    else tenants.push({ id: match[1], permissions: [match[2]] });
  }
  return { kind: 'identity', tenants, subject: typeof claims.sub === 'string' ? claims.sub : null };
}

/**
 * Who a token signs in as: {kind: 'admin'|'tenant'|'identity', tenants: [{id, permissions}]}.
 * A tenant token reads and spends for its own tenant; an OIDC access token says in its claims.
 */
export function principalFor(token, oidc) {
  if (token.startsWith('tkn_')) {
    const tenant = tenantOfToken(token);
    return { kind: 'tenant', tenants: tenant ? [{ id: tenant, permissions: ['read', 'spend'] }] : [] };
  }
  if (oidc && looksLikeJwt(token)) return principalFromJwt(token, oidc);
  return { kind: 'admin', tenants: [] };
}

export function isAdmin(principal) {
  return principal.kind === 'admin';
}

/** Whether the principal may manage (credit, debit, close, edit, tombstone) under a tenant. */
export function canManage(principal, tenantId) {
  if (isAdmin(principal)) return true;
  const grant = principal.tenants.find((t) => t.id === tenantId);
  return Boolean(grant && grant.permissions.includes('manage'));
}

export function canRead(principal, tenantId) {
  return isAdmin(principal) || principal.tenants.some((t) => t.id === tenantId);
}

/** The route a principal starts on. */
export function homeRoute(principal) {
  if (!isAdmin(principal) && principal.tenants.length === 1) return `/tenants/${principal.tenants[0].id}`;
  return '/tenants';
}

/** "Signed in as …" */
export function describePrincipal(principal) {
  if (isAdmin(principal)) return 'Signed in as admin';
  if (principal.tenants.length === 1) return `Signed in as tenant ${principal.tenants[0].id}`;
  if (principal.subject) return `Signed in as ${principal.subject}`;
  return 'Signed in';
}
