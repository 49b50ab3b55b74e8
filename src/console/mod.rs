//! The web console: a page and its scripts under `/console/`, embedded in the binary at build
//! time and served as they are. The console speaks only to the public `/v1` API, with the
//! token its user pastes (or gets from the identity provider), so everything it shows is
//! something a script can do.
//!
//! Each file is served with a strict Content-Security-Policy (scripts and styles from this
//! origin only, no framing), an `ETag`, and gzip when the client takes it and it is smaller.
//! `--console-dir` serves the files from a directory instead, read at every request, for
//! working on the console without a rebuild. Its flags are in [`flags`].

mod assets;
pub(crate) mod flags;

use std::path::PathBuf;
use std::sync::LazyLock;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};

use crate::crypto::{hex, sha256};
use crate::oidc::OidcConfig;
use crate::problem::ApiError;

/// An answer, as the router takes it (the handlers' type; this module stands beside them).
type HttpResponse = Response<Full<Bytes>>;

/// Where the console lives; `/console` alone is redirected here.
pub(crate) const PREFIX: &str = "/console/";

/// The largest file `--console-dir` serves, in bytes.
const DIR_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// What the console's files may do: load scripts, styles, images and data from this origin
/// only (and, with an identity provider, fetch its discovery document and token endpoint),
/// never be framed, never take a `<base>`, never submit a form elsewhere.
const CSP_SELF: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; \
    object-src 'none'";

/// The console's settings, from the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Whether `/console/` is served at all (`--no-console` turns it off).
    pub enabled: bool,
    /// The identity provider's client id for "Sign in with …" (`--console-oidc-client-id`).
    pub oidc_client_id: Option<String>,
    /// Serve the files from this directory instead of the embedded ones (`--console-dir`).
    pub dir: Option<PathBuf>,
}

/// One file, ready to send.
#[derive(Debug)]
struct Asset {
    content_type: &'static str,
    body: Bytes,
    /// The body gzipped, when that is smaller.
    gzip: Option<Bytes>,
    /// A strong validator of `body`; the gzipped body's is this with `-gzip` appended.
    tag: String,
}

impl Asset {
    fn new(name: &str, body: Bytes) -> Self {
        let gzip = gzip(&body)
            .filter(|z| z.len() < body.len())
            .map(Bytes::from);
        let tag = hex(&sha256(&body)[..12]);
        Self {
            content_type: content_type(name),
            body,
            gzip,
            tag,
        }
    }

    /// The answer to a `GET` or `HEAD` with `headers`: `304` when the client's copy is this
    /// one, else the body, gzipped if the client takes it.
    fn respond(&self, headers: &HeaderMap, csp: &HeaderValue) -> HttpResponse {
        let (body, etag, encoded) = match &self.gzip {
            Some(z) if takes_gzip(headers) => (z.clone(), format!("\"{}-gzip\"", self.tag), true),
            _ => (self.body.clone(), format!("\"{}\"", self.tag), false),
        };
        let fresh = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|list| matches_etag(list, &etag));
        let mut response = if fresh {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            response
        } else {
            let mut response = Response::new(Full::new(body));
            let h = response.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(self.content_type),
            );
            if encoded {
                h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            response
        };
        let h = response.headers_mut();
        h.insert(
            header::ETAG,
            HeaderValue::from_str(&etag).expect("hex in quotes"),
        );
        if self.gzip.is_some() {
            h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        }
        // Kept, but checked with the ETag at every use: a new binary's console shows at once.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        security_headers(h, csp);
        response
    }
}

/// The embedded files, each compressed once, at the first request for any of them.
static EMBEDDED: LazyLock<Vec<(&'static str, Asset)>> = LazyLock::new(|| {
    assets::FILES
        .iter()
        .map(|&(name, body)| (name, Asset::new(name, Bytes::from_static(body))))
        .collect()
});

/// The console as this process serves it.
#[derive(Debug)]
pub(crate) struct Console {
    /// `/console/config.json`: what the page needs to know of this server.
    config: Asset,
    csp: HeaderValue,
    dir: Option<PathBuf>,
}

impl Console {
    /// The console for `config`, or `None` when it is turned off.
    pub(crate) fn new(config: &ConsoleConfig, oidc: Option<&OidcConfig>) -> Option<Self> {
        if !config.enabled {
            return None;
        }
        let provider = oidc.zip(config.oidc_client_id.as_deref());
        let settings = match provider {
            Some((oidc, client_id)) => serde_json::json!({ "oidc": {
                "issuer": oidc.issuer,
                "client_id": client_id,
                "scope": format!("openid {}", oidc.admin_scope),
                "admin_scope": oidc.admin_scope,
                "permissions_claim": oidc.permissions_claim,
            }}),
            None => serde_json::json!({ "oidc": null }),
        };
        let csp = match provider.and_then(|(oidc, _)| origin(&oidc.issuer)) {
            // The page fetches the provider's discovery document and its token endpoint.
            Some(origin) => format!("{CSP_SELF}; connect-src 'self' {origin}"),
            None => format!("{CSP_SELF}; connect-src 'self'"),
        };
        Some(Self {
            config: Asset::new("config.json", Bytes::from(settings.to_string())),
            csp: HeaderValue::from_str(&csp).expect("an issuer URL is visible ASCII"),
            dir: config.dir.clone(),
        })
    }

    /// Answers a request whose path is `/console` or starts with `/console/`.
    pub(crate) async fn serve(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<HttpResponse, ApiError> {
        if *method != Method::GET && *method != Method::HEAD {
            return Err(ApiError::MethodNotAllowed { allow: "GET, HEAD" });
        }
        let Some(name) = path.strip_prefix(PREFIX) else {
            // `/console`: the page's relative links need the slash.
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
            response
                .headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static(PREFIX));
            return Ok(response);
        };
        let name = if name.is_empty() { "index.html" } else { name };
        if name == "config.json" {
            return Ok(self.config.respond(headers, &self.csp));
        }
        match &self.dir {
            Some(dir) => {
                let asset = read_from(dir, name).await?;
                Ok(asset.respond(headers, &self.csp))
            }
            None => EMBEDDED
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, asset)| asset.respond(headers, &self.csp))
                .ok_or(ApiError::RouteNotFound),
        }
    }
}

/// A file of `--console-dir`, read now: a relative path of plain names (letters, digits, `.`,
/// `_`, `-`; none starting with a dot) with an extension the console uses, of at most
/// [`DIR_FILE_BYTES_MAX`] bytes, inside the directory once links are followed. Anything else
/// in the directory (a token file, say) is not served.
async fn read_from(dir: &std::path::Path, name: &str) -> Result<Asset, ApiError> {
    let plain = name.split('/').all(|part| {
        !part.is_empty()
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    });
    if !plain || content_type(name) == OTHER {
        return Err(ApiError::RouteNotFound);
    }
    let (dir, path) = (dir.to_owned(), dir.join(name));
    let read = tokio::task::spawn_blocking(move || {
        let inside = std::fs::canonicalize(&path)
            .ok()?
            .starts_with(std::fs::canonicalize(&dir).ok()?);
        let meta = std::fs::metadata(&path).ok()?;
        let readable = inside && meta.is_file() && meta.len() <= DIR_FILE_BYTES_MAX;
        readable.then(|| std::fs::read(&path).ok())?
    });
    let body = read.await.ok().flatten().ok_or(ApiError::RouteNotFound)?;
    Ok(Asset::new(name, Bytes::from(body)))
}

/// Headers on every console file's answer.
fn security_headers(h: &mut HeaderMap, csp: &HeaderValue) {
    h.insert(header::CONTENT_SECURITY_POLICY, csp.clone());
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// The media type of a file whose extension the console does not use.
const OTHER: &str = "application/octet-stream";

/// The media type of a file, by its extension.
fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map_or("", |(_, ext)| ext) {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "txt" => "text/plain; charset=utf-8",
        _ => OTHER,
    }
}

/// The scheme, host and port of `url` (`https://idp.example:8443`), as CSP names an origin.
fn origin(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&url[..scheme.len() + 3 + end])
}

/// Whether `Accept-Encoding` takes gzip: a `gzip` entry decides if there is one, else a `*`
/// entry; either refuses with `q=0` (`0.0`, `0.000`).
fn takes_gzip(headers: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut any = None;
    let codings = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for coding in codings {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let taken = !parts.any(|p| {
            let (key, q) = p.split_once('=').unwrap_or((p, ""));
            key.trim().eq_ignore_ascii_case("q")
                && (q.trim() == "0" || q.trim().trim_end_matches('0') == "0.")
        });
        if name.eq_ignore_ascii_case("gzip") {
            gzip = Some(taken);
        } else if name == "*" {
            any = Some(taken);
        }
    }
    gzip.or(any).unwrap_or(false)
}

/// Whether an `If-None-Match` list names `etag` (weakly, as RFC 9110 compares for it).
fn matches_etag(list: &str, etag: &str) -> bool {
    list.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
}

/// `data` gzipped at the best compression; `None` if the encoder fails (it does not, on memory).
fn gzip(data: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).ok()?;
    encoder.finish().ok()
}

#[cfg(test)]
mod tests;
