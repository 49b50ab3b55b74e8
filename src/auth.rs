//! Bearer tokens: extraction, the constant-time admin check, tenant tokens checked against
//! their stored hash, the identity provider's access tokens, and what each principal may do.

use std::sync::Arc;

use hyper::header::{AUTHORIZATION, HeaderMap};
use subtle::ConstantTimeEq;

use crate::audit::Actor;
use crate::crypto::sha256;
use crate::domain::{TenantId, is_visible_ascii};
use crate::ids::TenantToken;
use crate::oidc::{Identity, Oidc, Permission, Rejection, looks_like_jwt};
use crate::problem::ApiError;
use crate::store::{Store, TokenCheck, admits};

/// The longest bearer token looked at; anything longer is refused unread. An access token
/// with many per-tenant permissions is the longest kind.
pub const TOKEN_BYTES_MAX: usize = 16_384;

/// The longest admin token taken at start-up.
pub const ADMIN_TOKEN_BYTES_MAX: usize = 4096;

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// The holder of the admin token: everything.
    Admin,
    /// A tenant token's holder, who may read that tenant and spend from it.
    Tenant(TenantId),
    /// An identity of the identity provider, with its admin scope and permissions.
    Identity(Identity),
}

impl Principal {
    /// Who the audit chain says acted.
    pub(crate) fn actor(&self) -> Actor {
        match self {
            Self::Admin => Actor::Admin,
            Self::Tenant(_) => Actor::Tenant,
            Self::Identity(identity) => Actor::identity(&identity.sub),
        }
    }

    /// Whose `Idempotency-Key`s these are: principals' keys never meet.
    pub(crate) fn idempotency_scope(&self) -> String {
        match self {
            Self::Admin => "admin".into(),
            Self::Tenant(id) => format!("tenant:{id}"),
            Self::Identity(identity) => format!("oidc:{}", identity.sub),
        }
    }
}

/// The SHA-256 of the admin token: the plaintext is not kept after start-up.
#[derive(Clone, Copy)]
pub struct AdminTokenHash([u8; 32]);

impl AdminTokenHash {
    /// Hashes the token; the caller drops the plaintext.
    pub(crate) fn of(token: &str) -> Self {
        Self(sha256(token.as_bytes()))
    }

    /// Whether two hashes are of the same token (for tests of the configuration).
    #[cfg(test)]
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        self.matches(&other.0)
    }

    /// Hashes of equal length compared in constant time: neither the token's length nor its
    /// first differing byte shows in the timing.
    fn matches(&self, hash: &[u8; 32]) -> bool {
        bool::from(hash.ct_eq(&self.0))
    }
}

impl std::fmt::Debug for AdminTokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminTokenHash(<redacted>)")
    }
}

/// What a request needs of its principal, as the router reads it from the method and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs<'a> {
    /// The admin only (the tenants collection, and every path outside a tenant's).
    Admin,
    /// The admin, or what `Permission` allows under the tenant with this id (as written in
    /// the path). A tenant token has `Spend` on its own tenant.
    Tenant(&'a str, Permission),
}

/// How a request proves who it is.
pub(crate) struct Credentials<'a> {
    /// The admin token's hash; `None` when only the identity provider makes admins.
    pub(crate) admin: Option<&'a AdminTokenHash>,
    /// The identity provider, when one is configured.
    pub(crate) oidc: Option<&'a Oidc>,
    /// Where tenant tokens are checked.
    pub(crate) store: &'a Store,
}

/// Who a request acts as, and, for a tenant token whose check is left to the request's write
/// ([`authenticate`]), that check: until it has passed, nothing but a `401` may answer
/// ([`confirm`]).
pub(crate) type Authenticated = (Principal, Option<Arc<TokenCheck>>);

/// Resolves the request's bearer token to a principal, or `401` (`503` when the identity
/// provider's keys cannot be had to check an access token). A tenant token costs one
/// primary-key lookup on the store's credential path, never a read-queue slot; with
/// `deferred`, none here: it is checked by the request's write, in the round trip that begins
/// the write's batch, and its check comes back with the principal.
pub(crate) async fn authenticate(
    headers: &HeaderMap,
    credentials: &Credentials<'_>,
    deferred: bool,
) -> Result<Authenticated, ApiError> {
    let token = bearer_token(headers).ok_or(ApiError::Unauthorized)?;
    let hash = sha256(token.as_bytes());
    if credentials.admin.is_some_and(|admin| admin.matches(&hash)) {
        return Ok((Principal::Admin, None));
    }
    if let Some(id) = TenantToken::tenant_of(token) {
        if deferred {
            return Ok((
                Principal::Tenant(id.clone()),
                Some(TokenCheck::new(id, hash)),
            ));
        }
        let credential = credentials.store.credential(id.clone()).await?;
        return if admits(credential, &hash) {
            Ok((Principal::Tenant(id), None))
        } else {
            Err(ApiError::Unauthorized)
        };
    }
    match credentials.oidc {
        Some(oidc) if looks_like_jwt(token) => match oidc.verify(token).await {
            Ok(identity) => Ok((Principal::Identity(identity), None)),
            Err(Rejection::Invalid(why)) => {
                log::debug!("an access token was refused: {why}");
                Err(ApiError::InvalidToken(why))
            }
            Err(Rejection::Unavailable(cause)) => Err(ApiError::IdentityProviderUnavailable(cause)),
        },
        _ => Err(ApiError::Unauthorized),
    }
}

/// What answers a request whose tenant token's check was left to its write, once `answer`
/// is what its handler made of it: `answer` if the token was admitted, `401` if not. A check
/// that did not run (the request failed before its write, or had none) runs here; so a
/// request with a bad token is answered `401` before anything else, as it would be had its
/// token been checked first.
pub(crate) async fn confirm<T>(
    store: &Store,
    check: &TokenCheck,
    answer: Result<T, ApiError>,
) -> Result<T, ApiError> {
    let admitted = match check.verdict() {
        Some(admitted) => admitted,
        None => check.judge(store.credential(check.tenant().clone()).await?),
    };
    if admitted {
        answer
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// `403` unless `principal` has what the request `needs`.
pub(crate) fn authorize(principal: &Principal, needs: Needs<'_>) -> Result<(), ApiError> {
    let allowed = match (principal, needs) {
        (Principal::Admin, _) => true,
        (Principal::Tenant(own), Needs::Tenant(id, permission)) => {
            own.as_str() == id && permission <= Permission::Spend
        }
        (Principal::Tenant(_), Needs::Admin) => false,
        (Principal::Identity(identity), Needs::Admin) => identity.admin,
        (Principal::Identity(identity), Needs::Tenant(id, permission)) => {
            identity.may(id, permission)
        }
    };
    if allowed {
        Ok(())
    } else {
        Err(ApiError::Forbidden)
    }
}

/// The token of a single `Authorization: Bearer <token>` header; the scheme's case does not
/// matter. Two `Authorization` headers are ambiguous and refused.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let bytes = value.as_bytes();
    if bytes.len() > TOKEN_BYTES_MAX {
        return None;
    }
    let value = std::str::from_utf8(bytes).ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim_matches(' ');
    let visible = !token.is_empty() && token.bytes().all(is_visible_ascii);
    visible.then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(AUTHORIZATION, HeaderValue::from_str(v).expect("header"));
        }
        map
    }

    #[test]
    fn bearer_tokens_are_extracted_strictly() {
        let cases: &[(&[&str], Option<&str>)] = &[
            (&["Bearer abc"], Some("abc")),
            (&["bearer abc"], Some("abc")),
            (&["BEARER  abc "], Some("abc")),
            (&[], None),
            (&["Basic abc"], None),
            (&["Bearer"], None),
            (&["Bearer "], None),
            (&["Bearer a b"], None),
            (&["Bearerabc"], None),
            (&["Bearer abc", "Bearer abc"], None),
        ];
        for (values, want) in cases {
            assert_eq!(bearer_token(&headers(values)), *want, "{values:?}");
        }
    }

    const OWN: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    const OTHER: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAW";

    fn identity(admin: bool, grants: &[(&str, Permission)]) -> Principal {
        Principal::Identity(Identity {
            sub: "someone".into(),
            admin,
            grants: grants
                .iter()
                .map(|(t, p)| crate::oidc::Grant {
                    tenant: TenantId::parse(t).expect("id"),
                    permission: *p,
                })
                .collect(),
        })
    }

    #[test]
    fn each_principal_reaches_what_its_credential_allows() {
        use Permission::{Manage, Read, Spend};
        let tenant = Principal::Tenant(TenantId::parse(OWN).expect("id"));
        let reader = identity(false, &[(OWN, Read)]);
        let spender = identity(false, &[(OWN, Spend)]);
        let manager = identity(false, &[(OWN, Manage)]);
        let admin = identity(true, &[]);
        let nobody = identity(false, &[]);
        let needs = [
            Needs::Admin,
            Needs::Tenant(OWN, Read),
            Needs::Tenant(OWN, Spend),
            Needs::Tenant(OWN, Manage),
            Needs::Tenant(OTHER, Read),
            Needs::Tenant("ten_garbage", Read),
        ];
        // One row per principal: whether it may do each of `needs`, in order.
        let table: [(&Principal, [bool; 6]); 7] = [
            (&Principal::Admin, [true; 6]),
            (&admin, [true; 6]),
            (&tenant, [false, true, true, false, false, false]),
            (&reader, [false, true, false, false, false, false]),
            (&spender, [false, true, true, false, false, false]),
            (&manager, [false, true, true, true, false, false]),
            (&nobody, [false; 6]),
        ];
        for (principal, allowed) in table {
            for (need, allowed) in needs.iter().zip(allowed) {
                assert_eq!(
                    authorize(principal, *need).is_ok(),
                    allowed,
                    "{principal:?} {need:?}"
                );
            }
        }
    }

    #[test]
    fn principals_keep_their_keys_apart() {
        let a = Principal::Tenant(TenantId::parse(OWN).expect("id"));
        let b = Principal::Tenant(TenantId::parse(OTHER).expect("id"));
        let someone = identity(true, &[]);
        let scopes = [
            Principal::Admin.idempotency_scope(),
            a.idempotency_scope(),
            b.idempotency_scope(),
            someone.idempotency_scope(),
        ];
        for (i, x) in scopes.iter().enumerate() {
            for y in &scopes[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(a.actor(), Actor::Tenant);
        assert_eq!(Principal::Admin.actor(), Actor::Admin);
        assert_eq!(someone.actor().text(), "oidc:someone");
    }

    #[test]
    fn the_admin_hash_never_shows() {
        let hash = AdminTokenHash::of("a-secret-admin-token-0123456789abcdef");
        assert!(hash.matches(&sha256(b"a-secret-admin-token-0123456789abcdef")));
        assert!(!hash.matches(&sha256(b"another")));
        assert_eq!(format!("{hash:?}"), "AdminTokenHash(<redacted>)");
    }
}
