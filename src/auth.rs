//! Bearer tokens: extraction, the constant-time admin check, tenant-token lookup by hash, and
//! what each principal may do.

use hyper::Method;
use hyper::header::{AUTHORIZATION, HeaderMap};
use subtle::ConstantTimeEq;

use crate::domain::{TenantId, is_visible_ascii};
use crate::ids::{TenantToken, sha256};
use crate::problem::ApiError;
use crate::router::Target;
use crate::store::Store;

/// The longest bearer token looked at; anything longer is refused unread.
pub const TOKEN_BYTES_MAX: usize = 4096;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    /// A tenant token's holder, who may read that tenant only.
    Tenant(TenantId),
}

/// The SHA-256 of the admin token: the plaintext is not kept after start-up.
#[derive(Clone, Copy)]
pub struct AdminTokenHash(pub [u8; 32]);

impl std::fmt::Debug for AdminTokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminTokenHash(<redacted>)")
    }
}

/// Resolves the request's bearer token to a principal, or `401`.
pub async fn authenticate(
    headers: &HeaderMap,
    admin: &AdminTokenHash,
    store: &Store,
) -> Result<Principal, ApiError> {
    let token = bearer_token(headers).ok_or(ApiError::Unauthorized)?;
    let hash = sha256(token.as_bytes());
    // Hashes of equal length compared in constant time: neither the token's length nor its
    // first differing byte shows in the timing.
    if bool::from(hash.ct_eq(&admin.0)) {
        return Ok(Principal::Admin);
    }
    let id = TenantToken::tenant_of(token).ok_or(ApiError::Unauthorized)?;
    if store.token_matches(id.clone(), hash).await? {
        Ok(Principal::Tenant(id))
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// `403` unless `principal` may call `method` on `target`. The admin may do everything; a
/// tenant token may read its own tenant and nothing else, whether or not a route exists.
pub fn authorize(
    principal: &Principal,
    method: &Method,
    target: &Target<'_>,
) -> Result<(), ApiError> {
    match principal {
        Principal::Admin => Ok(()),
        Principal::Tenant(own) => match target {
            Target::Tenant(id) if *method == Method::GET && *id == own.as_str() => Ok(()),
            _ => Err(ApiError::Forbidden),
        },
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
    fn a_tenant_token_reads_only_its_own_tenant() {
        let own = TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        let tenant = Principal::Tenant(own.clone());
        let mine = Target::Tenant(own.as_str());
        let other = Target::Tenant("ten_01ARZ3NDEKTSV4RRFFQ69G5FAW");
        assert!(authorize(&tenant, &Method::GET, &mine).is_ok());
        assert!(authorize(&tenant, &Method::DELETE, &mine).is_err());
        assert!(authorize(&tenant, &Method::GET, &other).is_err());
        assert!(authorize(&tenant, &Method::POST, &Target::Tenants).is_err());
        assert!(authorize(&tenant, &Method::GET, &Target::Unknown).is_err());
        assert!(authorize(&Principal::Admin, &Method::DELETE, &other).is_ok());
    }
}
