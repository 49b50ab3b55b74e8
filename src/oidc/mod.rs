//! Production authentication: OAuth 2.0 access tokens that are JWTs (RFC 9068) from an
//! OpenID Connect provider, checked against the provider's published keys.
//!
//! [`Oidc::verify`] turns a bearer value into an [`Identity`] (its `sub`, whether it holds
//! the admin scope, and its per-tenant [`Grant`]s), or says why not. The keys come from
//! [`keys::KeyCache`], which finds them through the issuer's discovery document and keeps
//! them while the provider is down. [`flags`] holds the `--oidc-*` flags that set it up.
//! Nothing here logs a token, a claim value beyond `sub`, or key material.

mod fetch;
pub(crate) mod flags;
mod keys;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, Validation, decode, decode_header, errors::ErrorKind};
use serde_json::Value;

use crate::domain::TenantId;

pub(crate) use keys::KeyCache;

/// Seconds of clock skew allowed on `exp`, `nbf` and `iat`.
pub(crate) const LEEWAY_S: u64 = 60;

/// The longest `sub` taken: the longest any OpenID provider is allowed to issue (OpenID
/// Connect Core, section 2).
pub(crate) const SUB_CHARS_MAX: usize = 255;

/// The default admin scope.
pub const ADMIN_SCOPE_DEFAULT: &str = "tenantd:admin";

/// The default name of the permissions claim.
pub const PERMISSIONS_CLAIM_DEFAULT: &str = "tenantd_permissions";

/// The identity provider's settings, checked at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// The issuer exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// The `aud` this service accepts.
    pub audience: String,
    /// The scope that makes a token's holder the admin.
    pub admin_scope: String,
    /// The claim that lists `<tenant id>:<permission>` strings.
    pub permissions_claim: String,
    /// A PEM file of the authorities trusted for the issuer's TLS certificate, in place of
    /// the Mozilla roots.
    pub ca_file: Option<String>,
}

/// What a permission of the permissions claim allows under one tenant's path. Each allows
/// what the ones before it allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Permission {
    /// Every `GET` under the tenant's path.
    Read,
    /// Read, and reserving, committing, releasing and extending: what a tenant token may do.
    Spend,
    /// Everything the admin may do under the tenant's path.
    Manage,
}

impl Permission {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(Self::Read),
            "spend" => Some(Self::Spend),
            "manage" => Some(Self::Manage),
            _ => None,
        }
    }
}

/// One `<tenant id>:<permission>` of the permissions claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) tenant: TenantId,
    pub(crate) permission: Permission,
}

/// Who a valid access token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The token's `sub`: the audit actor is `oidc:` and this.
    pub(crate) sub: Arc<str>,
    /// Whether the token holds the admin scope.
    pub(crate) admin: bool,
    /// The per-tenant permissions, the unparseable entries left out.
    pub(crate) grants: Vec<Grant>,
}

impl Identity {
    /// Whether this identity may do what `permission` allows under `tenant`'s path.
    pub(crate) fn may(&self, tenant: &str, permission: Permission) -> bool {
        self.admin
            || self
                .grants
                .iter()
                .any(|g| g.tenant.as_str() == tenant && g.permission >= permission)
    }
}

/// Why a bearer JWT was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The token fails a check: `401` with `error="invalid_token"`. The phrase names the
    /// check, never a value.
    Invalid(&'static str),
    /// The key set cannot be had, so a token that may be good cannot be checked: `503`. The
    /// text is for the log.
    Unavailable(String),
}

/// The verifier of one issuer's access tokens.
pub(crate) struct Oidc {
    config: OidcConfig,
    keys: Arc<KeyCache>,
}

impl Oidc {
    /// A verifier whose keys are fetched in the background from now on (see
    /// [`KeyCache::spawn_refresher`]); until they are, tokens get `503`.
    pub(crate) fn start(config: OidcConfig) -> Result<Self, String> {
        let keys = Arc::new(KeyCache::new(&config.issuer, config.ca_file.as_deref())?);
        KeyCache::spawn_refresher(&keys);
        Ok(Self { config, keys })
    }

    /// Whether the key set has been had: `/readyz` is not ready before.
    pub(crate) fn ready(&self) -> bool {
        self.keys.has_keys()
    }

    /// Checks `token` as the contract says and reads its identity.
    pub(crate) async fn verify(&self, token: &str) -> Result<Identity, Rejection> {
        let header =
            decode_header(token).map_err(|_| Rejection::Invalid("it is not a well-formed JWT"))?;
        let kid = header
            .kid
            .as_deref()
            .ok_or(Rejection::Invalid("its header names no key (kid)"))?;
        let key = self.keys.key(kid).await?.ok_or(Rejection::Invalid(
            "its key (kid) is not in the issuer's key set",
        ))?;
        if header.alg != key.algorithm {
            return Err(Rejection::Invalid(
                "its algorithm is not the one of the key it names",
            ));
        }
        let mut validation = Validation::new(key.algorithm);
        validation.leeway = LEEWAY_S;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = decode::<serde_json::Map<String, Value>>(token, &key.decoding, &validation)
            .map_err(|e| Rejection::Invalid(refusal(e.kind())))?
            .claims;
        check_issued_at(&claims, now_s())?;
        self.identity(&claims)
    }

    /// The identity a verified token's claims describe.
    fn identity(&self, claims: &serde_json::Map<String, Value>) -> Result<Identity, Rejection> {
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| is_acceptable_sub(s))
            .ok_or(Rejection::Invalid(
                "its sub is not 1 to 255 characters without control characters",
            ))?;
        Ok(Identity {
            sub: sub.into(),
            admin: holds_scope(claims, &self.config.admin_scope),
            grants: grants(claims.get(&self.config.permissions_claim)),
        })
    }
}

/// Seconds since the Unix epoch now.
fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// The phrase for a failed check of the JWT library, naming the check only.
fn refusal(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "it has expired",
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)",
        ErrorKind::InvalidIssuer => "its issuer (iss) is not the configured one",
        ErrorKind::InvalidAudience => "its audience (aud) does not hold this service",
        ErrorKind::InvalidSignature => "its signature does not verify",
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            "its algorithm is not the one of the key it names"
        }
        ErrorKind::MissingRequiredClaim(_) => "it lacks exp, iss, aud or sub",
        _ => "it is not a well-formed JWT",
    }
}

/// `iat`, where given, must not lie in the future beyond the leeway (the JWT library checks
/// `exp` and `nbf` only).
fn check_issued_at(claims: &serde_json::Map<String, Value>, now: u64) -> Result<(), Rejection> {
    match claims.get("iat") {
        None => Ok(()),
        Some(iat) => match iat.as_f64() {
            // A NumericDate may carry a fraction; whole seconds are enough here.
            Some(at) if at.is_finite() && at <= (now + LEEWAY_S) as f64 => Ok(()),
            Some(_) => Err(Rejection::Invalid("it was issued in the future (iat)")),
            None => Err(Rejection::Invalid("its iat is not a number")),
        },
    }
}

/// A `sub` that can stand in the audit chain's `actor` column: a hash line of its own.
fn is_acceptable_sub(sub: &str) -> bool {
    let chars = sub.chars().count();
    (1..=SUB_CHARS_MAX).contains(&chars) && !sub.chars().any(char::is_control)
}

/// Whether `scope` (space-separated, RFC 8693 and 9068) or `scp` (an array, or a
/// space-separated string as Microsoft Entra ID sends it) holds `wanted`.
fn holds_scope(claims: &serde_json::Map<String, Value>, wanted: &str) -> bool {
    let in_text = |v: &Value| {
        v.as_str()
            .is_some_and(|s| s.split(' ').any(|s| s == wanted))
    };
    let in_array = |v: &Value| {
        v.as_array()
            .is_some_and(|a| a.iter().any(|s| s.as_str() == Some(wanted)))
    };
    claims.get("scope").is_some_and(in_text)
        || claims.get("scp").is_some_and(|v| in_text(v) || in_array(v))
}

/// The grants of the permissions claim: an array of strings, or one string. Entries that are
/// not `<tenant id>:read|spend|manage` are another service's, and are left out.
fn grants(claim: Option<&Value>) -> Vec<Grant> {
    let entries: Vec<&str> = match claim {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(one)) => vec![one.as_str()],
        _ => Vec::new(),
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let (tenant, permission) = entry.rsplit_once(':')?;
            Some(Grant {
                tenant: TenantId::parse(tenant)?,
                permission: Permission::parse(permission)?,
            })
        })
        .collect()
}

/// Whether a bearer value has the shape of a JWS in compact form: three base64url parts,
/// the first two not empty. Anything else is not looked at as a JWT.
pub(crate) fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    let base64url = |p: &str| {
        p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    parts.len() == 3
        && !parts[0].is_empty()
        && !parts[1].is_empty()
        && parts.iter().all(|p| base64url(p))
}

/// Whether `host` (as a URL writes it, IPv6 in brackets) is a loopback address, where plain
/// `http://` is allowed.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks a URL of the provider's: `https://`, or `http://` on a loopback host. The error is
/// a phrase that follows the URL's role.
pub(crate) fn check_provider_url(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|_| "is not a valid absolute URL".to_owned())?;
    let host = uri.host().ok_or("has no host")?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback_host(host) => Ok(()),
        Some("http") => Err("must be https:// unless its host is a loopback address".to_owned()),
        _ => Err("must be an https:// URL".to_owned()),
    }
}

/// Algorithms a key may be used with: the contract's four.
fn supported(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::RS256 | Algorithm::PS256 | Algorithm::ES256 | Algorithm::EdDSA
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    const A: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    const B: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAW";

    #[test]
    fn permissions_nest_and_stay_under_their_tenant() {
        let identity = Identity {
            sub: "s".into(),
            admin: false,
            grants: grants(Some(&json!([format!("{A}:spend"), format!("{B}:read")]))),
        };
        let cases = [
            (A, Permission::Read, true),
            (A, Permission::Spend, true),
            (A, Permission::Manage, false),
            (B, Permission::Read, true),
            (B, Permission::Spend, false),
            ("ten_01ARZ3NDEKTSV4RRFFQ69G5FAX", Permission::Read, false),
        ];
        for (tenant, permission, allowed) in cases {
            assert_eq!(
                identity.may(tenant, permission),
                allowed,
                "{tenant} {permission:?}"
            );
        }
        let admin = Identity {
            admin: true,
            grants: vec![],
            ..identity
        };
        assert!(admin.may(B, Permission::Manage));
    }

    #[test]
    fn the_permissions_claim_takes_only_what_it_understands() {
        let cases = [
            (json!([format!("{A}:manage")]), 1),
            (json!(format!("{A}:read")), 1),
            (
                json!([
                    format!("{A}:admin"),
                    "read",
                    7,
                    format!("{A}:"),
                    format!("x:{A}:read")
                ]),
                0,
            ),
            (json!({"a": 1}), 0),
            (
                json!([format!("{A}:READ"), format!("{}:read", A.to_lowercase())]),
                0,
            ),
        ];
        for (claim, n) in cases {
            assert_eq!(grants(Some(&claim)).len(), n, "{claim}");
        }
        assert!(grants(None).is_empty());
    }

    #[test]
    fn the_admin_scope_is_found_in_scope_or_scp() {
        let cases = [
            (json!({"scope": "openid tenantd:admin"}), true),
            (json!({"scope": "tenantd:admin"}), true),
            (json!({"scope": "tenantd:administrator"}), false),
            (json!({"scope": ["tenantd:admin"]}), false),
            (json!({"scp": ["x", "tenantd:admin"]}), true),
            (json!({"scp": "x tenantd:admin"}), true),
            (json!({"scp": "x"}), false),
            (json!({}), false),
        ];
        for (c, want) in cases {
            assert_eq!(
                holds_scope(&claims(c.clone()), "tenantd:admin"),
                want,
                "{c}"
            );
        }
    }

    #[test]
    fn iat_may_not_lie_in_the_future() {
        let now = 1_000_000;
        let cases = [
            (json!({}), true),
            (json!({"iat": now}), true),
            (json!({"iat": now + LEEWAY_S}), true),
            (json!({"iat": now + LEEWAY_S + 1}), false),
            (json!({"iat": "now"}), false),
        ];
        for (c, ok) in cases {
            assert_eq!(check_issued_at(&claims(c.clone()), now).is_ok(), ok, "{c}");
        }
    }

    #[test]
    fn subs_fit_the_audit_chain() {
        assert!(is_acceptable_sub("auth0|5f7c8ec7c33c6c004bbafe82"));
        assert!(is_acceptable_sub("client@clients"));
        assert!(is_acceptable_sub(&"x".repeat(255)));
        assert!(!is_acceptable_sub(&"x".repeat(256)));
        assert!(!is_acceptable_sub(""));
        assert!(!is_acceptable_sub("a\nb"));
    }

    #[test]
    fn jwt_shapes_are_told_from_other_tokens() {
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"));
        assert!(looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."));
        assert!(!looks_like_jwt("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV.abc"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a..c"));
        assert!(!looks_like_jwt("a.b+.c"));
    }

    #[test]
    fn provider_urls_are_https_or_loopback() {
        let cases = [
            ("https://id.example.com/realms/x", true),
            ("http://127.0.0.1:9000", true),
            ("http://[::1]:9000/", true),
            ("http://localhost:9000", true),
            ("http://id.example.com", false),
            ("http://10.0.0.1", false),
            ("ftp://id.example.com", false),
            ("id.example.com", false),
        ];
        for (url, ok) in cases {
            assert_eq!(check_provider_url(url).is_ok(), ok, "{url}");
        }
    }
}
