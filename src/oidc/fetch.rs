//! `GET` of the provider's JSON documents (discovery and key set), bounded in time and size,
//! over rustls with the Mozilla roots compiled in or a private authority's (or plain HTTP to a
//! loopback address).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{ACCEPT, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::crypto::tls_roots;

/// The longest a fetch may take, connecting and reading included.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest document taken from the provider.
pub(crate) const DOCUMENT_BYTES_MAX: usize = 1 << 20;

/// An HTTP client for the provider's documents. Redirects are not followed: the issuer's
/// URLs are configuration, and a redirect is an error to fix there.
pub(crate) struct Fetcher {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl Fetcher {
    /// A client that trusts the authorities of the PEM file `ca_file`, else the Mozilla roots.
    pub(crate) fn new(ca_file: Option<&str>) -> Result<Self, String> {
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(tls_roots(ca_file)?)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(1)
            .build(connector);
        Ok(Self { client })
    }

    /// The JSON document at `url` (a `200` with a JSON body of at most
    /// [`DOCUMENT_BYTES_MAX`]), or why not, in a phrase naming the URL.
    pub(crate) async fn get_json(&self, url: &str) -> Result<Value, String> {
        match tokio::time::timeout(FETCH_TIMEOUT, self.get(url)).await {
            Ok(result) => result.map_err(|e| format!("GET {url}: {e}")),
            Err(_) => Err(format!(
                "GET {url}: no answer within {} s",
                FETCH_TIMEOUT.as_secs()
            )),
        }
    }

    async fn get(&self, url: &str) -> Result<Value, String> {
        let request = Request::get(url)
            .header(ACCEPT, HeaderValue::from_static("application/json"))
            .body(Empty::new())
            .map_err(|_| "not a valid URL".to_owned())?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| connect_error(&e))?;
        let status = response.status();
        if status != StatusCode::OK {
            return Err(format!("answered {status}"));
        }
        let body = Limited::new(response.into_body(), DOCUMENT_BYTES_MAX)
            .collect()
            .await
            .map_err(|_| format!("the body failed or exceeded {DOCUMENT_BYTES_MAX} bytes"))?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| format!("the body is not JSON: {e}"))
    }
}

/// The innermost cause of a client error (the outer ones say only "client error").
fn connect_error(error: &hyper_util::client::legacy::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}
