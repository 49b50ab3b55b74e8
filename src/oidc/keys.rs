//! The issuer's signing keys: found through its discovery document, cached, fetched again
//! for an unknown `kid` (at most once per [`REFETCH_INTERVAL`]) and refreshed in the
//! background, and kept while the provider is down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::fetch::Fetcher;
use super::{Rejection, check_provider_url, supported};

/// The least time between two fetches for an unknown `kid`: a stream of tokens with made-up
/// key ids cannot make this service hammer the provider.
pub(crate) const REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// How often the key set is fetched again while all is well, so that a key the provider has
/// withdrawn stops being accepted.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(300);

/// The first wait before another try when no key set could be had; it doubles up to
/// [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(500);

/// The longest wait between tries while no key set could be had.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Keys kept from one key set, at most: a bound on what a provider's answer can make this
/// service hold.
pub(crate) const KEYS_MAX: usize = 100;

/// One verification key and the one algorithm it is used with.
pub(crate) struct Key {
    pub(crate) algorithm: Algorithm,
    pub(crate) decoding: DecodingKey,
}

/// Keys by `kid`.
type KeySet = HashMap<String, Arc<Key>>;

/// What the cache holds.
#[derive(Default)]
struct State {
    /// The last key set had, if any.
    keys: Option<Arc<KeySet>>,
    /// When the last fetch for an unknown `kid` began, and whether it brought a key set.
    last_refetch: Option<(Instant, bool)>,
}

/// The key cache of one issuer.
pub(crate) struct KeyCache {
    issuer: String,
    discovery_url: String,
    fetcher: Fetcher,
    state: Mutex<State>,
    /// Held while fetching for an unknown `kid`, so that concurrent requests wait for one
    /// fetch rather than each making their own.
    refetching: tokio::sync::Mutex<()>,
}

impl KeyCache {
    /// A cache with no keys yet for `issuer`, whose TLS certificate one of the authorities in
    /// the PEM file `ca_file` signed (else one of the Mozilla roots).
    pub(crate) fn new(issuer: &str, ca_file: Option<&str>) -> Result<Self, String> {
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        Ok(Self {
            issuer: issuer.to_owned(),
            discovery_url,
            fetcher: Fetcher::new(ca_file)?,
            state: Mutex::new(State::default()),
            refetching: tokio::sync::Mutex::new(()),
        })
    }

    /// Whether a key set has been had.
    pub(crate) fn has_keys(&self) -> bool {
        self.lock().keys.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key named `kid`: `None` when the issuer's key set, fetched again if allowed, does
    /// not hold it; [`Rejection::Unavailable`] when no key set can be had to tell.
    pub(crate) async fn key(&self, kid: &str) -> Result<Option<Arc<Key>>, Rejection> {
        let keys = self.lock().keys.clone().ok_or_else(|| {
            Rejection::Unavailable("the identity provider's key set has not been had yet".into())
        })?;
        if let Some(key) = keys.get(kid) {
            return Ok(Some(Arc::clone(key)));
        }
        let _one = self.refetching.lock().await;
        let (keys, last) = {
            let state = self.lock();
            (state.keys.clone(), state.last_refetch)
        };
        if let Some(key) = keys.as_ref().and_then(|k| k.get(kid)) {
            return Ok(Some(Arc::clone(key)));
        }
        if let Some((at, succeeded)) = last
            && at.elapsed() < REFETCH_INTERVAL
        {
            return if succeeded {
                Ok(None)
            } else {
                Err(Rejection::Unavailable(
                    "the identity provider's key set could not be fetched again".into(),
                ))
            };
        }
        let began = Instant::now();
        match self.fetch().await {
            Ok(fetched) => {
                let found = fetched.get(kid).cloned();
                let mut state = self.lock();
                state.keys = Some(Arc::new(fetched));
                state.last_refetch = Some((began, true));
                Ok(found)
            }
            Err(e) => {
                log::warn!("cannot fetch the identity provider's keys again: {e}");
                self.lock().last_refetch = Some((began, false));
                Err(Rejection::Unavailable(e))
            }
        }
    }

    /// Fetches the key set from now on: until the first success every [`RETRY_MIN`] to
    /// [`RETRY_MAX`], then every [`REFRESH_INTERVAL`]. A failed refresh keeps the keys held.
    /// The task ends when the cache is dropped.
    pub(crate) fn spawn_refresher(cache: &Arc<Self>) {
        let cache: Weak<Self> = Arc::downgrade(cache);
        tokio::spawn(async move {
            let mut retry = RETRY_MIN;
            loop {
                let wait = {
                    let Some(cache) = cache.upgrade() else { return };
                    match cache.fetch().await {
                        Ok(fetched) => {
                            if !cache.has_keys() {
                                log::info!(
                                    "identity provider {}: {} signing keys",
                                    cache.issuer,
                                    fetched.len()
                                );
                            }
                            cache.lock().keys = Some(Arc::new(fetched));
                            retry = RETRY_MIN;
                            REFRESH_INTERVAL
                        }
                        Err(e) => {
                            log::warn!("cannot fetch the identity provider's keys: {e}");
                            let wait = if cache.has_keys() {
                                REFETCH_INTERVAL
                            } else {
                                retry
                            };
                            retry = (retry * 2).min(RETRY_MAX);
                            wait
                        }
                    }
                };
                tokio::time::sleep(wait).await;
            }
        });
    }

    /// The issuer's key set, through its discovery document.
    async fn fetch(&self) -> Result<KeySet, String> {
        let discovery = self.fetcher.get_json(&self.discovery_url).await?;
        match discovery.get("issuer").and_then(Value::as_str) {
            Some(issuer) if issuer == self.issuer => {}
            _ => {
                return Err(format!(
                    "the discovery document {} does not name the issuer {}",
                    self.discovery_url, self.issuer
                ));
            }
        }
        let jwks_uri = discovery
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!(
                    "the discovery document {} has no jwks_uri",
                    self.discovery_url
                )
            })?;
        check_provider_url(jwks_uri).map_err(|e| format!("the jwks_uri {jwks_uri} {e}"))?;
        let set = self.fetcher.get_json(jwks_uri).await?;
        let keys = key_set(&set);
        if keys.is_empty() {
            return Err(format!(
                "the key set at {jwks_uri} holds no signing key for RS256, PS256, ES256 or EdDSA"
            ));
        }
        Ok(keys)
    }
}

/// The usable signing keys of a JWK set: each with a `kid`, meant for signatures, of a type
/// and algorithm the contract allows. Others (encryption keys, other algorithms) are left
/// out; of two keys with one `kid`, the first counts.
fn key_set(set: &Value) -> KeySet {
    let mut keys = KeySet::new();
    let items = set
        .get("keys")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for item in items {
        if keys.len() == KEYS_MAX {
            break;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(item.clone()) else {
            continue;
        };
        let Some(kid) = jwk.common.key_id.clone() else {
            continue;
        };
        let for_signing = matches!(
            jwk.common.public_key_use,
            None | Some(PublicKeyUse::Signature)
        );
        let (Some(algorithm), true) = (algorithm_of(&jwk), for_signing) else {
            continue;
        };
        let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        keys.entry(kid).or_insert_with(|| {
            Arc::new(Key {
                algorithm,
                decoding,
            })
        });
    }
    keys
}

/// The one algorithm a key is used with: the one its `alg` names, or for a key without
/// `alg`, its type's (RS256 for RSA, ES256 for P-256, EdDSA for Ed25519). `None` for a key
/// whose `alg` does not fit its type, or that the contract does not allow.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    let algorithm = match jwk.common.key_algorithm {
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::PS256) => Algorithm::PS256,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return None,
        None => match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Algorithm::RS256,
            AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
            AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
            _ => return None,
        },
    };
    let fits = match (&jwk.algorithm, algorithm) {
        (AlgorithmParameters::RSA(_), Algorithm::RS256 | Algorithm::PS256) => true,
        (AlgorithmParameters::EllipticCurve(p), Algorithm::ES256) => p.curve == EllipticCurve::P256,
        (AlgorithmParameters::OctetKeyPair(p), Algorithm::EdDSA) => {
            p.curve == EllipticCurve::Ed25519
        }
        _ => false,
    };
    (fits && supported(algorithm)).then_some(algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A real RSA public key (2048 bits) and a real P-256 point, as JWKs print them.
    const N: &str = "u1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0_IzW7yWR7QkrmBL7jTKEn5u-qKhbwKfBstIs-bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW_VDL5AaWTg0nLVkjRo9z-40RQzuVaE8AkAFmxZzow3x-VJYKdjykkJ0iT9wCS0DRTXu269V264Vf_3jvredZiKRkgwlL9xNAwxXFg0x_XFw005UWVRIkdgcKWTjpBP2dPwVZ4WWC-9aGVd-Gyn1o0CLelf4rEjGoXbAAEgAqeGUxrcIlbjXfbcmw";
    const X: &str = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU";
    const Y: &str = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0";
    const ED: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    fn rsa(extra: Value) -> Value {
        let mut key = json!({"kty": "RSA", "n": N, "e": "AQAB"});
        key.as_object_mut()
            .expect("an object")
            .extend(extra.as_object().expect("an object").clone());
        key
    }

    #[test]
    fn each_key_gets_its_one_algorithm() {
        let set = json!({"keys": [
            rsa(json!({"kid": "rs", "alg": "RS256", "use": "sig"})),
            rsa(json!({"kid": "rs-bare"})),
            rsa(json!({"kid": "ps", "alg": "PS256"})),
            {"kty": "EC", "crv": "P-256", "x": X, "y": Y, "kid": "ec"},
            {"kty": "OKP", "crv": "Ed25519", "x": ED, "kid": "ed", "alg": "EdDSA"},
        ]});
        let keys = key_set(&set);
        let algorithms: Vec<(&str, Algorithm)> = ["rs", "rs-bare", "ps", "ec", "ed"]
            .iter()
            .map(|kid| (*kid, keys.get(*kid).map(|k| k.algorithm).expect(kid)))
            .collect();
        assert_eq!(
            algorithms,
            vec![
                ("rs", Algorithm::RS256),
                ("rs-bare", Algorithm::RS256),
                ("ps", Algorithm::PS256),
                ("ec", Algorithm::ES256),
                ("ed", Algorithm::EdDSA),
            ]
        );
    }

    #[test]
    fn keys_the_contract_does_not_allow_are_left_out() {
        let set = json!({"keys": [
            rsa(json!({"alg": "RS256"})),
            rsa(json!({"kid": "enc", "use": "enc", "alg": "RSA-OAEP"})),
            rsa(json!({"kid": "rs512", "alg": "RS512"})),
            rsa(json!({"kid": "es-on-rsa", "alg": "ES256"})),
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac", "alg": "HS256"},
            {"kty": "EC", "crv": "P-256", "x": X, "y": Y, "kid": "p256-as-eddsa", "alg": "EdDSA"},
            {"kty": "EC", "crv": "P-384", "x": X, "y": Y, "kid": "p384"},
            {"kty": "XYZ", "kid": "unknown"},
            "not a key",
        ]});
        assert!(key_set(&set).is_empty());
        assert!(key_set(&json!({"keys": "none"})).is_empty());
        assert!(key_set(&json!([])).is_empty());
    }

    #[test]
    fn the_first_of_two_keys_with_one_kid_counts() {
        let set = json!({"keys": [
            rsa(json!({"kid": "k", "alg": "PS256"})),
            rsa(json!({"kid": "k", "alg": "RS256"})),
        ]});
        assert_eq!(
            key_set(&set).get("k").map(|k| k.algorithm),
            Some(Algorithm::PS256)
        );
    }

    #[test]
    fn a_key_set_is_bounded() {
        let keys: Vec<Value> = (0..KEYS_MAX + 5)
            .map(|i| rsa(json!({"kid": format!("k{i}")})))
            .collect();
        assert_eq!(key_set(&json!({ "keys": keys })).len(), KEYS_MAX);
    }
}
