//! Bearer tokens: extraction, the constant-time admin check, tenant tokens checked against
//! their stored hash, and what each principal may do.

use hyper::header::{AUTHORIZATION, HeaderMap};
use subtle::ConstantTimeEq;

use crate::audit::Actor;
use crate::crypto::sha256;
use crate::domain::{TenantId, is_visible_ascii};
use crate::ids::TenantToken;
use crate::problem::ApiError;
use crate::store::Store;

/// The longest bearer token looked at; anything longer is refused unread.
pub const TOKEN_BYTES_MAX: usize = 4096;

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// The holder of the admin token: everything.
    Admin,
    /// A tenant token's holder, who may read that tenant only.
    Tenant(TenantId),
}

impl Principal {
    /// Who the audit chain says acted.
    pub(crate) fn actor(&self) -> Actor {
        match self {
            Self::Admin => Actor::Admin,
            Self::Tenant(_) => Actor::Tenant,
        }
    }

    /// Whose `Idempotency-Key`s these are: principals' keys never meet.
    pub(crate) fn idempotency_scope(&self) -> String {
        match self {
            Self::Admin => "admin".into(),
            Self::Tenant(id) => format!("tenant:{id}"),
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
    /// The admin only (also every path the router does not know).
    Admin,
    /// The admin, or the token of the tenant with this id (as written in the path).
    AdminOrTenant(&'a str),
}

/// Resolves the request's bearer token to a principal, or `401`. A tenant token costs one
/// primary-key lookup on the store's credential path, never a read-queue slot.
pub(crate) async fn authenticate(
    headers: &HeaderMap,
    admin: &AdminTokenHash,
    store: &Store,
) -> Result<Principal, ApiError> {
    let token = bearer_token(headers).ok_or(ApiError::Unauthorized)?;
    let hash = sha256(token.as_bytes());
    if admin.matches(&hash) {
        return Ok(Principal::Admin);
    }
    let id = TenantToken::tenant_of(token).ok_or(ApiError::Unauthorized)?;
    let credential = store.credential(id.clone()).await?;
    let valid = credential.is_some_and(|c| bool::from(c.token_hash.ct_eq(&hash)) & c.active);
    if valid {
        Ok(Principal::Tenant(id))
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// `403` unless `principal` has what the request `needs`.
pub(crate) fn authorize(principal: &Principal, needs: Needs<'_>) -> Result<(), ApiError> {
    match (principal, needs) {
        (Principal::Admin, _) => Ok(()),
        (Principal::Tenant(own), Needs::AdminOrTenant(id)) if own.as_str() == id => Ok(()),
        (Principal::Tenant(_), _) => Err(ApiError::Forbidden),
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

    #[test]
    fn a_tenant_token_reaches_only_its_own_tenant() {
        let own = TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        let tenant = Principal::Tenant(own.clone());
        let cases = [
            (Needs::AdminOrTenant(own.as_str()), true),
            (
                Needs::AdminOrTenant("ten_01ARZ3NDEKTSV4RRFFQ69G5FAW"),
                false,
            ),
            (Needs::AdminOrTenant("ten_garbage"), false),
            (Needs::Admin, false),
        ];
        for (needs, allowed) in cases {
            assert_eq!(authorize(&tenant, needs).is_ok(), allowed, "{needs:?}");
            assert!(authorize(&Principal::Admin, needs).is_ok(), "{needs:?}");
        }
    }

    #[test]
    fn principals_keep_their_keys_apart() {
        let a = Principal::Tenant(TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id"));
        let b = Principal::Tenant(TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAW").expect("id"));
        let scopes = [
            Principal::Admin.idempotency_scope(),
            a.idempotency_scope(),
            b.idempotency_scope(),
        ];
        assert_ne!(scopes[0], scopes[1]);
        assert_ne!(scopes[1], scopes[2]);
        assert_eq!(a.actor(), Actor::Tenant);
        assert_eq!(Principal::Admin.actor(), Actor::Admin);
    }

    #[test]
    fn the_admin_hash_never_shows() {
        let hash = AdminTokenHash::of("a-secret-admin-token-0123456789abcdef");
        assert!(hash.matches(&sha256(b"a-secret-admin-token-0123456789abcdef")));
        assert!(!hash.matches(&sha256(b"another")));
        assert_eq!(format!("{hash:?}"), "AdminTokenHash(<redacted>)");
    }
}
