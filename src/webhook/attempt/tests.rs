//! Attempts against real servers on 127.0.0.1, started inside each test: a hyper server that
//! records what it sees, and raw listeners that misbehave.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{HeaderMap, Response};
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::*;
use crate::webhook::secret::signature;
use crate::webhook::url;

/// The event delivered in every test.
const EVENT_ID: &str = "evt_01ARZ3NDEKTSV4RRFFQ69G5FAV";
const TIMESTAMP: i64 = 1_700_000_000;
const BODY: &str =
    r#"{"id":"evt_01ARZ3NDEKTSV4RRFFQ69G5FAV","type":"budget.available_low","data":{}}"#;

/// A timeout no healthy test endpoint comes near.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The timeout of the tests that wait for it, and how late it may fire.
const SHORT_TIMEOUT: Duration = Duration::from_millis(300);
const TIMEOUT_MARGIN: Duration = Duration::from_millis(700);

/// What a test endpoint saw of one request.
#[derive(Debug)]
struct Seen {
    method: String,
    target: String,
    headers: HeaderMap,
    body: Bytes,
}

/// A hyper server on 127.0.0.1 that answers every request `status` (with a `Location` if
/// given), records the requests and counts the connections it accepts.
struct Endpoint {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    accepts: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Endpoint {
    async fn start(status: u16, location: Option<String>, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accepts = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (seen, accepts) = (Arc::clone(&seen), Arc::clone(&accepts));
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    accepts.fetch_add(1, Ordering::SeqCst);
                    let (seen, location, tls) = (Arc::clone(&seen), location.clone(), tls.clone());
                    tokio::spawn(async move {
                        match tls {
                            Some(tls) => {
                                if let Ok(stream) = tls.accept(stream).await {
                                    serve(stream, status, location, seen).await;
                                }
                            }
                            None => serve(stream, status, location, seen).await,
                        }
                    });
                }
            }
        });
        Self {
            addr,
            seen,
            accepts,
            task,
        }
    }

    fn url(&self, scheme: &str, host: &str, target: &str) -> String {
        format!("{scheme}://{host}:{}{target}", self.addr.port())
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().expect("the record"))
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection of an [`Endpoint`].
async fn serve<Io>(io: Io, status: u16, location: Option<String>, seen: Arc<Mutex<Vec<Seen>>>)
where
    Io: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let (seen, location) = (Arc::clone(&seen), location.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            seen.lock().expect("the record").push(Seen {
                method: parts.method.to_string(),
                target: parts.uri.to_string(),
                headers: parts.headers,
                body,
            });
            let mut response = Response::builder().status(status);
            if let Some(location) = location {
                response = response.header("location", location);
            }
            let body = Full::new(Bytes::from_static(b"a body the client never reads"));
            Ok::<_, hyper::Error>(response.body(body).expect("a valid response"))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// A raw listener on 127.0.0.1 that hands each accepted connection to `handle`.
async fn raw_endpoint<F, Fut>(handle: F) -> (SocketAddr, Arc<AtomicUsize>, AbortOnDrop)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let accepts = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&accepts);
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handle(stream));
        }
    });
    (addr, accepts, AbortOnDrop(task))
}

/// Reads a request's head and its `BODY`, whole.
async fn read_request(stream: &mut TcpStream) {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    while !read.ends_with(BODY.as_bytes()) {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => read.extend_from_slice(&buf[..n]),
        }
    }
}

fn client(allow_private: bool, timeout: Duration) -> Client {
    Client::new(ClientConfig {
        timeout,
        allow_private,
        ca_file: None,
    })
    .expect("a client")
}

fn secret(byte: u8) -> Secret {
    Secret::from_bytes(&[byte; 32]).expect("32 bytes")
}

fn headers() -> Headers {
    let id = EventId::parse(EVENT_ID).expect("an event id");
    Headers::sign(&id, TIMESTAMP, BODY.as_bytes(), &secret(1), None)
}

/// One attempt at `raw` (http allowed) with the test event.
async fn send(client: &Client, raw: &str) -> Outcome {
    let url = url::parse(raw, true).unwrap_or_else(|e| panic!("{raw}: url {e}"));
    client
        .send(&url, &headers(), Bytes::from_static(BODY.as_bytes()))
        .await
}

#[tokio::test]
async fn a_2xx_succeeds_and_the_endpoint_gets_the_signed_request() {
    let endpoint = Endpoint::start(200, None, None).await;
    let id = EventId::parse(EVENT_ID).expect("an event id");
    let signed = Headers::sign(
        &id,
        TIMESTAMP,
        BODY.as_bytes(),
        &secret(1),
        Some(&secret(2)),
    );
    let raw = endpoint.url("http", "127.0.0.1", "/hook?tenant=a");
    let url = url::parse(&raw, true).expect("a URL");
    let outcome = client(true, TIMEOUT)
        .send(&url, &signed, Bytes::from_static(BODY.as_bytes()))
        .await;

    assert_eq!(outcome, Outcome::Success(200));
    assert_eq!(outcome.label(), "success");
    assert_eq!(outcome.status(), Some(200));
    assert_eq!(outcome.last_error(), None);
    assert!(outcome.succeeded());

    let seen = endpoint.seen();
    assert_eq!(seen.len(), 1, "one request: {seen:?}");
    let request = &seen[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.target, "/hook?tenant=a");
    assert_eq!(request.body, BODY.as_bytes(), "the exact body");
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("a {name} header: {:?}", request.headers))
            .to_owned()
    };
    assert_eq!(
        header("host"),
        format!("127.0.0.1:{}", endpoint.addr.port())
    );
    assert_eq!(header("content-type"), "application/json");
    assert_eq!(
        header("user-agent"),
        format!("tenantd/{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(header("content-length"), BODY.len().to_string());
    assert_eq!(
        request.headers.get_all("content-length").iter().count(),
        1,
        "one content-length: {:?}",
        request.headers
    );
    assert_eq!(header("webhook-id"), EVENT_ID);
    assert_eq!(header("webhook-timestamp"), TIMESTAMP.to_string());
    let signatures = header("webhook-signature");
    assert_eq!(
        signatures,
        format!(
            "{} {}",
            signature(&secret(1), EVENT_ID, TIMESTAMP, BODY.as_bytes()),
            signature(&secret(2), EVENT_ID, TIMESTAMP, BODY.as_bytes())
        ),
        "both signatures, over what was received"
    );
}

#[tokio::test]
async fn a_status_outside_2xx_fails_the_attempt() {
    let cases: &[(u16, Outcome, Option<&str>)] = &[
        (200, Outcome::Success(200), None),
        (202, Outcome::Success(202), None),
        (204, Outcome::Success(204), None),
        (299, Outcome::Success(299), None),
        (304, Outcome::HttpError(304), Some("HTTP 304")),
        (400, Outcome::HttpError(400), Some("HTTP 400")),
        (410, Outcome::HttpError(410), Some("HTTP 410")),
        (500, Outcome::HttpError(500), Some("HTTP 500")),
        (503, Outcome::HttpError(503), Some("HTTP 503")),
    ];
    let client = client(true, TIMEOUT);
    for &(status, expected, last_error) in cases {
        let endpoint = Endpoint::start(status, None, None).await;
        let outcome = send(&client, &endpoint.url("http", "127.0.0.1", "/")).await;
        assert_eq!(outcome, expected, "status {status}");
        assert_eq!(outcome.status(), Some(status), "status {status}");
        assert_eq!(
            outcome.last_error().as_deref(),
            last_error,
            "status {status}"
        );
        let label = if last_error.is_some() {
            "http_error"
        } else {
            "success"
        };
        assert_eq!(outcome.label(), label, "status {status}");
    }
}

#[tokio::test]
async fn a_status_past_599_is_no_http_answer() {
    let client = client(true, TIMEOUT);
    for status in [600, 999] {
        let endpoint = Endpoint::start(status, None, None).await;
        let outcome = send(&client, &endpoint.url("http", "127.0.0.1", "/")).await;
        assert_eq!(
            outcome,
            Outcome::ConnectError("invalid HTTP answer"),
            "{status}"
        );
        assert_eq!(outcome.status(), None, "{status}: no status is kept");
    }
}

#[tokio::test]
async fn a_redirect_fails_and_is_not_followed() {
    let target = Endpoint::start(200, None, None).await;
    let location = target.url("http", "127.0.0.1", "/elsewhere");
    let redirecting = Endpoint::start(302, Some(location), None).await;
    let outcome = send(
        &client(true, TIMEOUT),
        &redirecting.url("http", "127.0.0.1", "/"),
    )
    .await;
    assert_eq!(outcome, Outcome::HttpError(302));
    assert_eq!(outcome.last_error().as_deref(), Some("HTTP 302"));
    assert_eq!(outcome.label(), "http_error");
    assert_eq!(redirecting.seen().len(), 1);
    assert_eq!(target.accepts(), 0, "the Location is not visited");
}

#[tokio::test]
async fn an_endpoint_that_never_answers_times_out_on_time() {
    let (addr, accepts, _task) = raw_endpoint(|mut stream| async move {
        read_request(&mut stream).await;
        // Holds the connection open, answering nothing.
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    })
    .await;
    let started = Instant::now();
    let outcome = send(
        &client(true, SHORT_TIMEOUT),
        &format!("http://127.0.0.1:{}/", addr.port()),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(outcome, Outcome::Timeout);
    assert_eq!(outcome.label(), "timeout");
    assert_eq!(outcome.status(), None);
    assert_eq!(outcome.last_error().as_deref(), Some("timed out"));
    assert_eq!(accepts.load(Ordering::SeqCst), 1, "it did connect");
    assert!(took >= SHORT_TIMEOUT, "not before the timeout: {took:?}");
    assert!(
        took < SHORT_TIMEOUT + TIMEOUT_MARGIN,
        "soon after it: {took:?}"
    );
}

#[tokio::test]
async fn a_closed_port_is_a_refused_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    let outcome = send(&client(true, TIMEOUT), &format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(outcome, Outcome::ConnectError("connection refused"));
    assert_eq!(outcome.label(), "connect_error");
    assert_eq!(outcome.status(), None);
    assert_eq!(outcome.last_error().as_deref(), Some("connection refused"));
}

#[tokio::test]
async fn an_endpoint_that_closes_without_answering_fails_the_attempt() {
    let (addr, _accepts, _task) = raw_endpoint(|mut stream| async move {
        read_request(&mut stream).await;
        drop(stream);
    })
    .await;
    let outcome = send(
        &client(true, TIMEOUT),
        &format!("http://127.0.0.1:{}/", addr.port()),
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::ConnectError("connection closed before an answer")
    );
    assert_eq!(outcome.label(), "connect_error");
}

#[tokio::test]
async fn an_answer_that_is_not_http_or_too_long_fails_the_attempt() {
    let long_header = format!(
        "HTTP/1.1 200 OK\r\nx-long: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    for (answer, why) in [
        ("this is not HTTP\r\n\r\n".to_owned(), "garbage"),
        (long_header, "a head over the bound"),
    ] {
        let (addr, _accepts, _task) = raw_endpoint(move |mut stream| {
            let answer = answer.clone();
            async move {
                read_request(&mut stream).await;
                let _ = stream.write_all(answer.as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
        .await;
        let outcome = send(
            &client(true, TIMEOUT),
            &format!("http://127.0.0.1:{}/", addr.port()),
        )
        .await;
        assert_eq!(
            outcome,
            Outcome::ConnectError("invalid HTTP answer"),
            "{why}"
        );
    }
}

#[tokio::test]
async fn private_addresses_are_refused_without_connecting() {
    let endpoint = Endpoint::start(200, None, None).await;
    let guarded = client(false, TIMEOUT);
    for host in [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "LOCALHOST",
    ] {
        let outcome = send(&guarded, &endpoint.url("http", host, "/")).await;
        assert_eq!(outcome, Outcome::RefusedAddress, "{host}");
        assert_eq!(outcome.label(), "refused_address", "{host}");
        assert_eq!(outcome.status(), None, "{host}");
        assert_eq!(
            outcome.last_error().as_deref(),
            Some("address not allowed"),
            "{host}"
        );
    }
    assert_eq!(endpoint.accepts(), 0, "no connection was made");

    let open = client(true, TIMEOUT);
    for host in ["127.0.0.1", "localhost"] {
        let outcome = send(&open, &endpoint.url("http", host, "/")).await;
        assert_eq!(outcome, Outcome::Success(200), "{host} with allow_private");
    }
    assert_eq!(endpoint.accepts(), 2);
}

#[tokio::test]
async fn an_unknown_name_is_not_resolved() {
    let outcome = send(&client(true, TIMEOUT), "http://no-such-host.invalid/").await;
    assert_eq!(outcome, Outcome::ConnectError("name not resolved"));
    assert_eq!(outcome.last_error().as_deref(), Some("name not resolved"));
}

/// A certificate authority and a certificate it issued for `localhost` and 127.0.0.1.
struct TestPki {
    ca_pem: String,
    acceptor: TlsAcceptor,
}

fn test_pki() -> TestPki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tenantd test authority");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate().expect("a server key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server parameters");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .expect("the server certificate");

    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .expect("a server configuration");
    TestPki {
        ca_pem: ca_cert.pem(),
        acceptor: TlsAcceptor::from(Arc::new(server)),
    }
}

#[tokio::test]
async fn https_checks_the_certificate_against_the_extra_authorities() {
    let pki = test_pki();
    let endpoint = Endpoint::start(200, None, Some(pki.acceptor.clone())).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).expect("the CA file");
    let trusting = Client::new(ClientConfig {
        timeout: TIMEOUT,
        allow_private: true,
        ca_file: Some(ca_file.to_str().expect("a UTF-8 path").to_owned()),
    })
    .expect("a client trusting the test authority");

    for host in ["localhost", "127.0.0.1"] {
        let outcome = send(&trusting, &endpoint.url("https", host, "/tls")).await;
        assert_eq!(outcome, Outcome::Success(200), "https to {host}");
    }
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body, BODY.as_bytes());

    let outcome = send(
        &client(true, TIMEOUT),
        &endpoint.url("https", "localhost", "/"),
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::ConnectError("TLS certificate not accepted"),
        "the Mozilla roots alone do not know the test authority"
    );

    let plain = Endpoint::start(200, None, None).await;
    let outcome = send(&trusting, &plain.url("https", "localhost", "/")).await;
    assert_eq!(
        outcome,
        Outcome::ConnectError("TLS handshake failed"),
        "https to a plain HTTP server"
    );
    assert!(plain.seen().is_empty());
}

#[tokio::test]
async fn a_missing_ca_file_is_an_error_that_names_it() {
    let Err(error) = Client::new(ClientConfig {
        timeout: TIMEOUT,
        allow_private: false,
        ca_file: Some("/nonexistent/ca.pem".to_owned()),
    }) else {
        panic!("a missing CA file is an error");
    };
    assert!(error.contains("/nonexistent/ca.pem"), "{error}");
}

#[test]
fn every_outcome_has_its_label_and_headers_debug_hides_the_signature() {
    let outcomes = [
        Outcome::Success(200),
        Outcome::HttpError(500),
        Outcome::Timeout,
        Outcome::ConnectError("connection reset"),
        Outcome::RefusedAddress,
    ];
    let labels: Vec<&str> = outcomes.iter().map(Outcome::label).collect();
    assert_eq!(labels, OUTCOME_LABELS);
    assert_eq!(
        Outcome::ConnectError("connection reset")
            .last_error()
            .as_deref(),
        Some("connection reset")
    );

    let signed = headers();
    let shown = format!("{signed:?}");
    assert!(shown.contains(EVENT_ID), "{shown}");
    assert!(!shown.contains(&signed.signature), "{shown}");
    assert!(!shown.contains("v1,"), "{shown}");
}
