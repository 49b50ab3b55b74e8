//! Certificate authorities of the tests' own, made with `openssl` (which Debian has with
//! PostgreSQL): one to sign a server's certificate, another that signed nothing of it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A self-signed P-256 authority whose files are in a test's directory.
pub struct Authority {
    /// The authority's certificate (PEM): what a client is told to trust.
    pub cert: PathBuf,
    key: PathBuf,
}

impl Authority {
    /// Makes an authority named `name` in `dir` (its files are `<name>-ca.pem` and its key).
    pub fn new(dir: &Path, name: &str) -> Self {
        let cert = dir.join(format!("{name}-ca.pem"));
        let key = dir.join(format!("{name}-ca.key"));
        openssl(
            Command::new("openssl")
                .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
                .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
                .arg("-subj")
                .arg(format!("/CN={name} test authority"))
                .arg("-keyout")
                .arg(&key)
                .arg("-out")
                .arg(&cert),
        );
        Self { cert, key }
    }

    /// A server certificate for 127.0.0.1 that this authority signed, and its key (PEM).
    pub fn server_certificate(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let key = dir.join("server.key");
        let request = dir.join("server.csr");
        let cert = dir.join("server.pem");
        let extensions = dir.join("server.ext");
        std::fs::write(&extensions, "subjectAltName=IP:127.0.0.1\n").expect("writing server.ext");
        openssl(
            Command::new("openssl")
                .args([
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                ])
                .args(["-nodes", "-subj", "/CN=127.0.0.1", "-keyout"])
                .arg(&key)
                .arg("-out")
                .arg(&request),
        );
        openssl(
            Command::new("openssl")
                .args(["x509", "-req", "-days", "1", "-in"])
                .arg(&request)
                .arg("-CA")
                .arg(&self.cert)
                .arg("-CAkey")
                .arg(&self.key)
                .arg("-extfile")
                .arg(&extensions)
                .arg("-out")
                .arg(&cert),
        );
        (cert, key)
    }
}

/// Runs one `openssl` command; panics with its output if it fails.
fn openssl(command: &mut Command) {
    let out = command
        .output()
        .expect("running openssl (is it installed?)");
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
