//! One delivery attempt: a `POST` of an event's JSON to an endpoint, bounded as a whole by
//! one timeout (resolving, connecting, TLS, sending, the status line), answered by its
//! [`Outcome`].
//!
//! An attempt resolves the host itself, every time, and connects to the addresses it checked
//! (so a name cannot pass the SSRF guard with one address and be connected to at another). It
//! reads the response head and nothing more: no body, no redirect followed, no connection
//! kept for the next attempt. What it reports of the endpoint is the status code or a fixed
//! phrase, never a byte of the answer; and it logs nothing, since a header's value derives
//! from the secret.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::{DnsName, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::address;
use super::secret::{Secret, signature_header};
use super::url::{EndpointUrl, Host, Scheme};
use crate::crypto::tls_roots;
use crate::domain::EventId;

/// The outcome labels of the `/metrics` counter, one per [`Outcome`] variant.
pub(crate) const OUTCOME_LABELS: [&str; 5] = [
    "success",
    "http_error",
    "timeout",
    "connect_error",
    "refused_address",
];

/// How many of a name's addresses are connected to, one after the other, before the attempt
/// gives up (all of them are checked against the guard first). Each try shares the one
/// timeout, so an address that does not answer at all uses it up.
pub(crate) const ADDRESSES_TRIED_MAX: usize = 4;

/// The largest response head read (status line and headers; hyper's smallest buffer): an
/// endpoint that sends more fails the attempt rather than filling memory.
pub(crate) const RESPONSE_HEAD_BYTES_MAX: usize = 8 * 1024;

/// The `user-agent` of every attempt.
const USER_AGENT_VALUE: &str = concat!("tenantd/", env!("CARGO_PKG_VERSION"));

/// The fixed phrases of a failed connection or exchange, as `last_error` shows them.
mod phrase {
    /// The resolver found no address for the name, or failed.
    pub(super) const NAME_NOT_RESOLVED: &str = "name not resolved";
    /// Nothing listens on the port.
    pub(super) const CONNECTION_REFUSED: &str = "connection refused";
    /// No route to the address's network.
    pub(super) const NETWORK_UNREACHABLE: &str = "network unreachable";
    /// No route to the host.
    pub(super) const HOST_UNREACHABLE: &str = "host unreachable";
    /// Any other failure to connect.
    pub(super) const CONNECT_FAILED: &str = "connection failed";
    /// The server's certificate is not trusted, expired, or not issued for the host.
    pub(super) const TLS_CERTIFICATE: &str = "TLS certificate not accepted";
    /// Any other failure of the TLS handshake (a server that does not speak TLS, say).
    pub(super) const TLS_HANDSHAKE: &str = "TLS handshake failed";
    /// The server reset the connection.
    pub(super) const CONNECTION_RESET: &str = "connection reset";
    /// The server closed the connection before a status line.
    pub(super) const CLOSED: &str = "connection closed before an answer";
    /// The answer is not HTTP/1.1, or its head is over [`super::RESPONSE_HEAD_BYTES_MAX`].
    pub(super) const INVALID_ANSWER: &str = "invalid HTTP answer";
    /// Any other failure of the exchange.
    pub(super) const REQUEST_FAILED: &str = "request failed";
}

/// How attempts are made; from the `--webhook-*` flags.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfig {
    /// One attempt's whole time: resolving, connecting, TLS, the request, the status line.
    pub(crate) timeout: Duration,
    /// Whether attempts may connect to the addresses [`address::refused`] names.
    pub(crate) allow_private: bool,
    /// A PEM file of certificate authorities trusted besides the Mozilla roots.
    pub(crate) ca_file: Option<String>,
}

/// Makes attempts; built once, shared by every delivery.
pub(crate) struct Client {
    tls: TlsConnector,
    timeout: Duration,
    allow_private: bool,
}

/// The Standard Webhooks headers of one attempt. Built only by [`Headers::sign`]; its `Debug`
/// leaves the signature out.
pub(crate) struct Headers {
    id: String,
    timestamp: i64,
    signature: String,
}

impl Headers {
    /// The headers of an attempt made at `timestamp` (Unix seconds) to deliver event `id` with
    /// `body`: signed with the endpoint's `current` secret and, in the 24 hours after a
    /// rotation, its `previous` one.
    pub(crate) fn sign(
        id: &EventId,
        timestamp: i64,
        body: &[u8],
        current: &Secret,
        previous: Option<&Secret>,
    ) -> Self {
        let signature = signature_header(current, previous, id.as_str(), timestamp, body);
        Self {
            id: id.as_str().to_owned(),
            timestamp,
            signature,
        }
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Headers")
            .field("id", &self.id)
            .field("timestamp", &self.timestamp)
            .field("signature", &"<redacted>")
            .finish()
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A `2xx` status.
    Success(u16),
    /// Any other status, a `3xx` included: redirects are not followed.
    HttpError(u16),
    /// No status line within the attempt's timeout.
    Timeout,
    /// No connection, or no answer on it: a fixed phrase saying which.
    ConnectError(&'static str),
    /// The host has an address the guard refuses; nothing was connected to.
    RefusedAddress,
}

impl Outcome {
    /// The `/metrics` label, one of [`OUTCOME_LABELS`].
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Success(_) => OUTCOME_LABELS[0],
            Self::HttpError(_) => OUTCOME_LABELS[1],
            Self::Timeout => OUTCOME_LABELS[2],
            Self::ConnectError(_) => OUTCOME_LABELS[3],
            Self::RefusedAddress => OUTCOME_LABELS[4],
        }
    }

    /// Whether the attempt delivered the event.
    pub(crate) fn succeeded(&self) -> bool {
        matches!(self, Self::Success(_))
    }

    /// The status the endpoint answered, if it answered one (a delivery's `last_status`).
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Success(status) | Self::HttpError(status) => Some(*status),
            _ => None,
        }
    }

    /// A delivery's `last_error`: `None` after a success, else a short sentence made of the
    /// status code or a fixed phrase, never of what the endpoint sent.
    pub(crate) fn last_error(&self) -> Option<String> {
        match self {
            Self::Success(_) => None,
            Self::HttpError(status) => Some(format!("HTTP {status}")),
            Self::Timeout => Some("timed out".to_owned()),
            Self::ConnectError(phrase) => Some((*phrase).to_owned()),
            Self::RefusedAddress => Some("address not allowed".to_owned()),
        }
    }
}

impl Client {
    /// A client trusting the Mozilla roots and, if `config.ca_file` names one, the authorities
    /// of that PEM file. The error names the file.
    pub(crate) fn new(config: ClientConfig) -> Result<Self, String> {
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots(config.ca_file.as_deref())?)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            tls: TlsConnector::from(Arc::new(tls)),
            timeout: config.timeout,
            allow_private: config.allow_private,
        })
    }

    /// One attempt: `POST body` to `url` with `headers`, within the configured timeout.
    pub(crate) async fn send(&self, url: &EndpointUrl, headers: &Headers, body: Bytes) -> Outcome {
        match tokio::time::timeout(self.timeout, self.attempt(url, headers, body)).await {
            Ok(Ok(status)) if (200..300).contains(&status) => Outcome::Success(status),
            // HTTP's status codes end at 599; hyper reads any three digits.
            Ok(Ok(status)) if status <= 599 => Outcome::HttpError(status),
            Ok(Ok(_)) => Outcome::ConnectError("invalid HTTP answer"),
            Ok(Err(outcome)) => outcome,
            Err(_) => Outcome::Timeout,
        }
    }

    /// The attempt without its timeout: the status, or how it failed.
    async fn attempt(
        &self,
        url: &EndpointUrl,
        headers: &Headers,
        body: Bytes,
    ) -> Result<u16, Outcome> {
        let addresses = resolve(url).await?;
        if !self.allow_private && addresses.iter().any(|a| address::refused(a.ip())) {
            return Err(Outcome::RefusedAddress);
        }
        let tcp = connect(&addresses).await?;
        let request = request(url, headers, body);
        match url.scheme() {
            Scheme::Http => exchange(tcp, request).await,
            Scheme::Https => {
                let tls = self
                    .tls
                    .connect(server_name(url.host()), tcp)
                    .await
                    .map_err(|e| Outcome::ConnectError(tls_error(&e)))?;
                exchange(tls, request).await
            }
        }
    }
}

/// The Mozilla roots, and those of the PEM file `ca_file` if one is given: the flag adds
/// authorities, it does not replace the public ones.
fn roots(ca_file: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = tls_roots(None)?;
    if let Some(file) = ca_file {
        roots.roots.extend(tls_roots(Some(file))?.roots);
    }
    Ok(roots)
}

/// The addresses to connect to: the URL's address, or every address its name resolves to now.
async fn resolve(url: &EndpointUrl) -> Result<Vec<SocketAddr>, Outcome> {
    let name = match url.host() {
        Host::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, url.port())]),
        Host::Name(name) => name.as_str(),
    };
    let not_resolved = Outcome::ConnectError(phrase::NAME_NOT_RESOLVED);
    let found: Vec<SocketAddr> = tokio::net::lookup_host((name, url.port()))
        .await
        .map_err(|_| not_resolved)?
        .collect();
    if found.is_empty() {
        return Err(not_resolved);
    }
    Ok(found)
}

/// A connection to the first of `addresses` that takes one (of the first
/// [`ADDRESSES_TRIED_MAX`]), or why the last one did not.
async fn connect(addresses: &[SocketAddr]) -> Result<TcpStream, Outcome> {
    let mut failure = phrase::CONNECT_FAILED;
    for address in addresses.iter().take(ADDRESSES_TRIED_MAX) {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                // Without Nagle's delay: the head and the body leave in one go.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => failure = connect_error(&e),
        }
    }
    Err(Outcome::ConnectError(failure))
}

/// The name the endpoint's certificate must be issued for.
fn server_name(host: &Host) -> ServerName<'static> {
    match host {
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        Host::Name(name) => ServerName::DnsName(
            DnsName::try_from(name.clone()).expect("a parsed host name is a valid DNS name"),
        ),
    }
}

/// The attempt's request: `POST` to the path and query, the fixed headers, the caller's.
fn request(url: &EndpointUrl, headers: &Headers, body: Bytes) -> Request<Full<Bytes>> {
    Request::post(url.path_and_query())
        .header(HOST, url.host_header())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, USER_AGENT_VALUE)
        .header(CONTENT_LENGTH, body.len())
        .header(CONNECTION, "close")
        .header("webhook-id", headers.id.as_str())
        .header("webhook-timestamp", headers.timestamp)
        .header("webhook-signature", headers.signature.as_str())
        .body(Full::new(body))
        .expect("a parsed URL and signed headers make a valid request")
}

/// Aborts the task that drives a connection when the attempt ends, in any way (its timeout
/// included), so the connection is closed then and never read further.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `request` over `io` as HTTP/1.1 and returns the response's status, once its head is
/// read.
async fn exchange<Io>(io: Io, request: Request<Full<Bytes>>) -> Result<u16, Outcome>
where
    Io: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(RESPONSE_HEAD_BYTES_MAX)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| Outcome::ConnectError(exchange_error(&e)))?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        // Its errors are those `send_request` reports.
        let _ = connection.await;
    }));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Outcome::ConnectError(exchange_error(&e)))?;
    Ok(response.status().as_u16())
}

/// The phrase for a failed TCP connection.
fn connect_error(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => phrase::CONNECTION_REFUSED,
        io::ErrorKind::NetworkUnreachable => phrase::NETWORK_UNREACHABLE,
        io::ErrorKind::HostUnreachable => phrase::HOST_UNREACHABLE,
        io::ErrorKind::ConnectionReset => phrase::CONNECTION_RESET,
        _ => phrase::CONNECT_FAILED,
    }
}

/// The phrase for a failed TLS handshake: the certificate, or the rest.
fn tls_error(error: &io::Error) -> &'static str {
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(_)) => phrase::TLS_CERTIFICATE,
        _ => phrase::TLS_HANDSHAKE,
    }
}

/// The phrase for a failed HTTP exchange.
fn exchange_error(error: &hyper::Error) -> &'static str {
    if error.is_incomplete_message() || error.is_canceled() || error.is_closed() {
        return phrase::CLOSED;
    }
    if error.is_parse() || error.is_parse_status() || error.is_parse_too_large() {
        return phrase::INVALID_ANSWER;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::ConnectionReset => phrase::CONNECTION_RESET,
                io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof => phrase::CLOSED,
                _ => phrase::REQUEST_FAILED,
            };
        }
        cause = inner.source();
    }
    phrase::REQUEST_FAILED
}

#[cfg(test)]
mod tests;
