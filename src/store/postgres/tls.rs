//! `sslmode` and `sslrootcert` as libpq reads them, over rustls.
//!
//! tokio-postgres knows `disable`, `prefer` and `require`, and nothing of certificates; libpq's
//! URLs also say `verify-ca`, `verify-full` and `sslrootcert`. Those two parameters are taken
//! out of the URL here, the rest is left to tokio-postgres, and the TLS configuration follows
//! libpq's meaning of each mode:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default, as in libpq) | if the server offers it | not checked |
//! | `require` | always | not checked, unless `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and issued for the host connected to |
//!
//! The trusted roots are those of the `sslrootcert` file (PEM) if one is given, else the
//! Mozilla roots compiled into the binary.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::crypto::tls_roots;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Nothing: the connection is encrypted, not authenticated (libpq's `prefer`, `require`).
    Nothing,
    /// The chain to a trusted root.
    Chain,
    /// The chain, and the host name.
    ChainAndHost,
}

/// What the URL asked of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tls {
    /// `sslmode`, as tokio-postgres is to negotiate it.
    pub(super) mode: tokio_postgres::config::SslMode,
    pub(super) check: Check,
    /// `sslrootcert`, if given.
    pub(super) root_cert: Option<String>,
}

/// Splits `sslmode` and `sslrootcert` off a `postgres://` URL: the URL without them, and what
/// they ask for.
pub(super) fn split_url(url: &str) -> Result<(String, Tls), String> {
    use tokio_postgres::config::SslMode;
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let (mut mode, mut root_cert) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => mode = Some(percent_decode(value)?),
            "sslrootcert" => root_cert = Some(percent_decode(value)?),
            _ => kept.push(pair),
        }
    }
    let (mode, mut check) = match mode.as_deref().unwrap_or("prefer") {
        "disable" => (SslMode::Disable, Check::Nothing),
        "allow" | "prefer" => (SslMode::Prefer, Check::Nothing),
        "require" => (SslMode::Require, Check::Nothing),
        "verify-ca" => (SslMode::Require, Check::Chain),
        "verify-full" => (SslMode::Require, Check::ChainAndHost),
        other => {
            return Err(format!(
                "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, \
                 verify-full"
            ));
        }
    };
    if check == Check::Nothing && mode == SslMode::Require && root_cert.is_some() {
        check = Check::Chain;
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((
        url,
        Tls {
            mode,
            check,
            root_cert,
        },
    ))
}

/// `%XX` escapes of a URL's query value (and `+` left as it is, as libpq does).
fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a bad %-escape in {value:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{value:?} is not UTF-8 once decoded"))
}

/// The rustls configuration for `tls`.
pub(super) fn client_config(tls: &Tls) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = match tls.check {
        Check::Nothing => Arc::new(Unchecked(provider)),
        Check::Chain | Check::ChainAndHost => {
            let roots =
                tls_roots(tls.root_cert.as_deref()).map_err(|e| format!("sslrootcert {e}"))?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("TLS: {e}"))?;
            if tls.check == Check::Chain {
                Arc::new(AnyHost(webpki))
            } else {
                webpki
            }
        }
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// Accepts any certificate: TLS for privacy only, as libpq's `prefer` and `require`. The
/// handshake's signatures are still checked, with the certificate's own key.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain checked, the host name not: libpq's `verify-ca`.
#[derive(Debug)]
struct AnyHost(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHost {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use tokio_postgres::config::SslMode;

    use super::*;

    #[test]
    fn the_tls_parameters_leave_the_url_and_say_what_is_checked() {
        let cases = [
            (
                "postgres://h/db",
                "postgres://h/db",
                SslMode::Prefer,
                Check::Nothing,
            ),
            (
                "postgres://h/db?sslmode=disable",
                "postgres://h/db",
                SslMode::Disable,
                Check::Nothing,
            ),
            (
                "postgres://h/db?application_name=x&sslmode=require",
                "postgres://h/db?application_name=x",
                SslMode::Require,
                Check::Nothing,
            ),
            (
                "postgres://h/db?sslmode=require&sslrootcert=%2Fetc%2Fca.pem",
                "postgres://h/db",
                SslMode::Require,
                Check::Chain,
            ),
            (
                "postgres://h/db?sslmode=verify-ca",
                "postgres://h/db",
                SslMode::Require,
                Check::Chain,
            ),
            (
                "postgres://a,b/db?sslmode=verify-full&target_session_attrs=read-write",
                "postgres://a,b/db?target_session_attrs=read-write",
                SslMode::Require,
                Check::ChainAndHost,
            ),
        ];
        for (url, rest, mode, check) in cases {
            let (kept, tls) = split_url(url).expect(url);
            assert_eq!(kept, rest, "{url}");
            assert_eq!((tls.mode, tls.check), (mode, check), "{url}");
        }
        let (_, tls) = split_url("postgres://h/db?sslrootcert=%2Fetc%2Fca.pem").expect("a URL");
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/ca.pem"));
        for bad in [
            "postgres://h/db?sslmode=verify",
            "postgres://h/db?sslrootcert=%zz",
        ] {
            assert!(split_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_root_file_without_a_certificate_is_refused() {
        let dir = tempfile::tempdir().expect("a directory");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("a file");
        let tls = Tls {
            mode: SslMode::Require,
            check: Check::ChainAndHost,
            root_cert: Some(empty.display().to_string()),
        };
        let error = client_config(&tls).expect_err("no roots");
        assert!(error.contains("no certificate"), "{error}");
        let mozilla = Tls {
            root_cert: None,
            ..tls
        };
        assert!(client_config(&mozilla).is_ok());
    }
}
