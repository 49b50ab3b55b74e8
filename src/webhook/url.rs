//! An endpoint's URL, parsed once when an endpoint is created or changed: an absolute
//! `https://` URL (`http://` only under `--webhook-allow-http`) of at most
//! [`URL_CHARS_MAX`] characters, with a host, without user information or a fragment.
//!
//! The grammar is the OpenAPI document's, `^https?://[^/?#@\s]+(?:[/?][^#\s]*)?$`, and a little
//! stricter: schemes in lower case only (`HTTPS://` is refused), ASCII only (a host in
//! punycode, a path percent-encoded), a host that is a DNS name, an IPv4 address in dotted
//! decimal or an IPv6 address in brackets (no zone), and a port, if given, from 1 to 65535.
//! A name whose last label is a number (`2130706433`, `0x7f.1`) is refused: resolvers read it
//! as an IPv4 address.
//!
//! Whether the host's addresses may be connected to is decided at each attempt
//! (`address::refused`), not here: a name's addresses change.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr as _;

use hyper::http::uri::PathAndQuery;
use rustls::pki_types::DnsName;

/// The longest URL taken, in characters, as the contract says.
pub(crate) const URL_CHARS_MAX: usize = 2048;

/// How an attempt talks to the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// TLS, the server's certificate checked against the trusted roots and the host.
    Https,
    /// Plain HTTP, only under `--webhook-allow-http` (demos and tests).
    Http,
}

impl Scheme {
    /// The port used when the URL names none.
    pub(crate) fn default_port(self) -> u16 {
        match self {
            Self::Https => 443,
            Self::Http => 80,
        }
    }
}

/// The host of an endpoint's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A DNS name, in lower case, resolved at each attempt.
    Name(String),
    /// An IP address written in the URL (an IPv6 one in brackets there).
    Ip(IpAddr),
}

/// An endpoint's URL: the text as given, and its parts as an attempt uses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EndpointUrl {
    text: String,
    scheme: Scheme,
    host: Host,
    port: u16,
    path_and_query: String,
}

impl EndpointUrl {
    /// The URL as it was given.
    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// `https` or `http`.
    pub(crate) fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host to resolve (or the address to connect to) and to name in TLS.
    pub(crate) fn host(&self) -> &Host {
        &self.host
    }

    /// The port, the scheme's default if the URL names none.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The request target: the path and the query, `/` if the URL has neither.
    pub(crate) fn path_and_query(&self) -> &str {
        &self.path_and_query
    }

    /// The `Host` header: the host (an IPv6 address in brackets), and the port unless it is
    /// the scheme's default.
    pub(crate) fn host_header(&self) -> String {
        let host = match &self.host {
            Host::Name(name) => name.clone(),
            Host::Ip(IpAddr::V4(ip)) => ip.to_string(),
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Parses an endpoint's URL; `http://` is taken only if `allow_http`. The error completes the
/// sentence "url …".
pub(crate) fn parse(raw: &str, allow_http: bool) -> Result<EndpointUrl, &'static str> {
    if raw.len() > URL_CHARS_MAX && raw.chars().count() > URL_CHARS_MAX {
        return Err("must be at most 2048 characters");
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain white space or control characters");
    }
    let (scheme, rest) = if let Some(rest) = raw.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = raw.strip_prefix("http://") {
        if !allow_http {
            return Err("may be http:// only when the server runs with --webhook-allow-http");
        }
        (Scheme::Http, rest)
    } else if allow_http {
        return Err("must be an absolute https:// or http:// URL");
    } else {
        return Err("must be an absolute https:// URL");
    };
    if rest.contains('#') {
        return Err("must not have a fragment");
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(split);
    if authority.contains('@') {
        return Err("must not hold user information");
    }
    if !raw.is_ascii() {
        return Err("must be ASCII: a host in punycode, a path percent-encoded");
    }
    let (host, port) = host_and_port(authority)?;
    Ok(EndpointUrl {
        text: raw.to_owned(),
        scheme,
        host,
        port: port.unwrap_or(scheme.default_port()),
        path_and_query: path_and_query(target)?,
    })
}

/// The host and the port, if any, of an authority without user information.
fn host_and_port(authority: &str) -> Result<(Host, Option<u16>), &'static str> {
    if authority.is_empty() {
        return Err("must have a host");
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (inside, after) = bracketed
            .split_once(']')
            .ok_or("must close the brackets of an IPv6 host")?;
        let ip = Ipv6Addr::from_str(inside)
            .map_err(|_| "must have a valid IPv6 address in brackets (without a zone)")?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or("must have a valid host")?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        if port.is_some_and(|p| p.contains(':')) {
            return Err("must write an IPv6 host in brackets");
        }
        (name_or_ipv4(host)?, port)
    };
    let port = port.map(|p| valid_port(p).ok_or("must have a port from 1 to 65535"));
    Ok((host, port.transpose()?))
}

/// A host that is not in brackets: an IPv4 address in dotted decimal, or a DNS name.
fn name_or_ipv4(host: &str) -> Result<Host, &'static str> {
    if host.is_empty() {
        return Err("must have a host");
    }
    if let Ok(ip) = Ipv4Addr::from_str(host) {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    // The DNS name rules TLS uses for the server's name, so every name taken here can be
    // named in the handshake; they also refuse a last label that reads as a number.
    DnsName::try_from(host).map_err(|_| "must have a valid host name or IP address")?;
    Ok(Host::Name(host.to_ascii_lowercase()))
}

/// A port: decimal digits only, from 1 to 65535.
fn valid_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|&port| port != 0)
}

/// The request target of what follows the authority (empty, or starting with `/` or `?`).
fn path_and_query(target: &str) -> Result<String, &'static str> {
    let target = if target.starts_with('/') {
        target.to_owned()
    } else {
        format!("/{target}")
    };
    PathAndQuery::from_str(&target)
        .map_err(|_| "must have a valid path and query (percent-encode other characters)")?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rule, with the phrase it answers.
    #[test]
    fn each_rule_refuses_with_its_phrase() {
        let long = format!("https://example.com/{}", "a".repeat(URL_CHARS_MAX));
        let cases: &[(&str, bool, &str)] = &[
            ("", false, "must be an absolute https:// URL"),
            (
                "example.com/hook",
                false,
                "must be an absolute https:// URL",
            ),
            (
                "//example.com/hook",
                false,
                "must be an absolute https:// URL",
            ),
            (
                "ftp://example.com/",
                false,
                "must be an absolute https:// URL",
            ),
            (
                "HTTPS://example.com/",
                false,
                "must be an absolute https:// URL",
            ),
            (
                "Https://example.com/",
                false,
                "must be an absolute https:// URL",
            ),
            (
                "https:/example.com/",
                false,
                "must be an absolute https:// URL",
            ),
            (
                "ftp://example.com/",
                true,
                "must be an absolute https:// or http:// URL",
            ),
            (
                "http://example.com/",
                false,
                "may be http:// only when the server runs with --webhook-allow-http",
            ),
            (&long, false, "must be at most 2048 characters"),
            (
                "https://user:pw@example.com/",
                false,
                "must not hold user information",
            ),
            (
                "https://user@example.com/",
                false,
                "must not hold user information",
            ),
            (
                "https://@example.com/",
                false,
                "must not hold user information",
            ),
            (
                "https://example.com/#top",
                false,
                "must not have a fragment",
            ),
            ("https://example.com#", false, "must not have a fragment"),
            (
                "https://example.com/a?b#c",
                false,
                "must not have a fragment",
            ),
            ("https://", false, "must have a host"),
            ("https:///hook", false, "must have a host"),
            ("https://?q=1", false, "must have a host"),
            ("https://:443/", false, "must have a host"),
            (
                "https://exa mple.com/",
                false,
                "must not contain white space or control characters",
            ),
            (
                "https://example.com/a b",
                false,
                "must not contain white space or control characters",
            ),
            (
                "https://example.com/\t",
                false,
                "must not contain white space or control characters",
            ),
            (
                " https://example.com/",
                false,
                "must not contain white space or control characters",
            ),
            (
                "https://example.com/\n",
                false,
                "must not contain white space or control characters",
            ),
            (
                "https://example.com/\u{7f}",
                false,
                "must not contain white space or control characters",
            ),
            (
                "https://example.com/\u{a0}",
                false,
                "must not contain white space or control characters",
            ),
            (
                "https://bücher.example/",
                false,
                "must be ASCII: a host in punycode, a path percent-encoded",
            ),
            (
                "https://example.com/café",
                false,
                "must be ASCII: a host in punycode, a path percent-encoded",
            ),
            (
                "https://example.com:0/",
                false,
                "must have a port from 1 to 65535",
            ),
            (
                "https://example.com:65536/",
                false,
                "must have a port from 1 to 65535",
            ),
            (
                "https://example.com:/",
                false,
                "must have a port from 1 to 65535",
            ),
            (
                "https://example.com:+443/",
                false,
                "must have a port from 1 to 65535",
            ),
            (
                "https://example.com:44a/",
                false,
                "must have a port from 1 to 65535",
            ),
            ("https://::1/", false, "must write an IPv6 host in brackets"),
            (
                "https://[::1/",
                false,
                "must close the brackets of an IPv6 host",
            ),
            (
                "https://[fe80::1%25eth0]/",
                false,
                "must have a valid IPv6 address in brackets (without a zone)",
            ),
            (
                "https://[127.0.0.1]/",
                false,
                "must have a valid IPv6 address in brackets (without a zone)",
            ),
            ("https://[::1]x/", false, "must have a valid host"),
            (
                "https://ex_ample..com/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://-example.com/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://example%2ecom/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://2130706433/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://0x7f.1/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://127.1/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://010.0.0.1/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://256.0.0.1/",
                false,
                "must have a valid host name or IP address",
            ),
            (
                "https://example.com/<script>",
                false,
                "must have a valid path and query (percent-encode other characters)",
            ),
            (
                "https://example.com/?a=\"b\"",
                false,
                "must have a valid path and query (percent-encode other characters)",
            ),
        ];
        for &(raw, allow_http, expected) in cases {
            assert_eq!(
                parse(raw, allow_http).map(|u| u.as_str().to_owned()),
                Err(expected),
                "{raw:?} (allow_http {allow_http})"
            );
        }
    }

    /// What is taken, and the parts an attempt uses.
    #[test]
    fn valid_urls_give_their_parts() {
        let v4 = |a, b, c, d| Host::Ip(IpAddr::V4(Ipv4Addr::new(a, b, c, d)));
        let name = |n: &str| Host::Name(n.to_owned());
        let cases: &[(&str, bool, Scheme, Host, u16, &str, &str)] = &[
            (
                "https://hooks.example.com/tenantd",
                false,
                Scheme::Https,
                name("hooks.example.com"),
                443,
                "/tenantd",
                "hooks.example.com",
            ),
            (
                "https://Hooks.Example.COM",
                false,
                Scheme::Https,
                name("hooks.example.com"),
                443,
                "/",
                "hooks.example.com",
            ),
            (
                "https://example.com?x=1",
                false,
                Scheme::Https,
                name("example.com"),
                443,
                "/?x=1",
                "example.com",
            ),
            (
                "https://example.com:8443/a/b?c=d&e=%20",
                false,
                Scheme::Https,
                name("example.com"),
                8443,
                "/a/b?c=d&e=%20",
                "example.com:8443",
            ),
            (
                "https://example.com:443/",
                false,
                Scheme::Https,
                name("example.com"),
                443,
                "/",
                "example.com",
            ),
            (
                "https://example.com/a@b",
                false,
                Scheme::Https,
                name("example.com"),
                443,
                "/a@b",
                "example.com",
            ),
            (
                "https://xn--bcher-kva.example/",
                false,
                Scheme::Https,
                name("xn--bcher-kva.example"),
                443,
                "/",
                "xn--bcher-kva.example",
            ),
            (
                "https://my_host.internal/",
                false,
                Scheme::Https,
                name("my_host.internal"),
                443,
                "/",
                "my_host.internal",
            ),
            (
                "https://93.184.215.14/hook",
                false,
                Scheme::Https,
                v4(93, 184, 215, 14),
                443,
                "/hook",
                "93.184.215.14",
            ),
            (
                "https://[2606:4700::1111]:8443/",
                false,
                Scheme::Https,
                Host::Ip("2606:4700::1111".parse().expect("IPv6")),
                8443,
                "/",
                "[2606:4700::1111]:8443",
            ),
            (
                "http://127.0.0.1:8080/hook",
                true,
                Scheme::Http,
                v4(127, 0, 0, 1),
                8080,
                "/hook",
                "127.0.0.1:8080",
            ),
            (
                "http://localhost",
                true,
                Scheme::Http,
                name("localhost"),
                80,
                "/",
                "localhost",
            ),
            (
                "https://[::ffff:127.0.0.1]/",
                false,
                Scheme::Https,
                Host::Ip("::ffff:127.0.0.1".parse().expect("IPv6")),
                443,
                "/",
                "[::ffff:127.0.0.1]",
            ),
        ];
        for (raw, allow_http, scheme, host, port, target, host_header) in cases {
            let url = parse(raw, *allow_http).unwrap_or_else(|e| panic!("{raw}: url {e}"));
            assert_eq!(url.as_str(), *raw, "the text is kept");
            assert_eq!(url.scheme(), *scheme, "{raw}");
            assert_eq!(url.host(), host, "{raw}");
            assert_eq!(url.port(), *port, "{raw}");
            assert_eq!(url.path_and_query(), *target, "{raw}");
            assert_eq!(url.host_header(), *host_header, "{raw}");
        }
    }

    #[test]
    fn the_length_bound_is_in_characters_and_inclusive() {
        let base = "https://example.com/";
        let at_max = format!("{base}{}", "a".repeat(URL_CHARS_MAX - base.len()));
        assert_eq!(at_max.chars().count(), URL_CHARS_MAX);
        assert!(parse(&at_max, false).is_ok(), "2048 characters are taken");
        let over = format!("{at_max}a");
        assert_eq!(parse(&over, false), Err("must be at most 2048 characters"));
    }

    #[test]
    fn https_is_taken_whether_or_not_http_is() {
        for allow_http in [false, true] {
            assert!(parse("https://example.com/", allow_http).is_ok());
        }
    }
}
