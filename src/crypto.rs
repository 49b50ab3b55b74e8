//! The few primitives every secret and every hash here rests on: SHA-256, lower-case hex, the
//! OS random source, and the roots TLS clients trust. Kept apart so that `domain`, `ids`,
//! `audit`, `oidc` and `store` can share them without importing each other.

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

/// Fills `buf` from the OS CSPRNG, with no userspace generator in between.
///
/// # Panics
/// If the OS has no random source: the service cannot mint a safe id or token without one,
/// and this never happens on a Linux kernel since 3.17.
pub(crate) fn random_bytes(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the OS random source is available");
}

/// The SHA-256 digest of `data`.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Lower-case hex of `bytes`, as the audit chain and the tokens write them.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The roots a TLS client trusts: every certificate of the PEM file `file` if one is given (a
/// private CA), else the Mozilla roots compiled in. The error names the file.
pub(crate) fn tls_roots(file: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let Some(path) = file else {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(roots);
    };
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| format!("{path}: {e}"))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("{path}: {e}"))?;
        roots.add(cert).map_err(|e| format!("{path}: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{path}: no certificate in it"));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_sha256_match_known_values() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&[0x00, 0x0f, 0xf0, 0xff]), "000ff0ff");
    }

    #[test]
    fn random_bytes_are_not_all_equal() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        random_bytes(&mut a);
        random_bytes(&mut b);
        assert_ne!(a, b, "two draws of 128 bits must differ");
    }
}
