//! Responses, parsed incrementally from the front of a byte buffer.
//!
//! [`parse_frame`] finds where a complete response lies without copying a byte, so the load
//! generator can read one per request at full speed; [`Response`] copies one out for the
//! tests, with its headers in order and its body decoded.

use std::io;
use std::ops::Range;

use serde_json::Value;

/// How much of an unparsable response an error message quotes.
const QUOTED_BYTES_MAX: usize = 600;

/// How the body of a response is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body at all: the answer to a `HEAD`, a `1xx`, `204` or `304`.
    Empty,
    /// Exactly this many bytes, from `Content-Length`.
    Length(usize),
    /// The chunked transfer coding, up to the last chunk and its trailers.
    Chunked,
    /// Everything the server sends until it closes the connection.
    UntilClose,
}

/// A response head, read without copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The status code of the status line.
    pub status: u16,
    /// The bytes of the status line and the header fields, the blank line that ends them
    /// included: where the body starts.
    pub len: usize,
    /// How the body after the head is delimited.
    pub framing: Framing,
}

/// A complete response at the front of a buffer, located without copying.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The head, at the front of the buffer.
    pub head: Head,
    /// Where the body lies in the buffer, as sent: with its chunk framing when
    /// [`Framing::Chunked`].
    pub body: Range<usize>,
    /// How many bytes the response takes from the front of the buffer, which is where a
    /// pipelined or keep-alive response that follows it starts.
    pub len: usize,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn cut_short(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, message)
}

/// The front of some bytes as text, for error messages.
fn quote(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(QUOTED_BYTES_MAX)];
    format!("{:?}", String::from_utf8_lossy(shown))
}

/// The lines of `text` separated by CR LF; an empty text has none.
fn crlf_lines(mut text: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if text.is_empty() {
            return None;
        }
        let (line, rest) = match find(text, b"\r\n") {
            Some(end) => (&text[..end], &text[end + 2..]),
            None => (text, &[][..]),
        };
        text = rest;
        Some(line)
    })
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// One header field line: its name (an RFC 9110 token) and its value without the white
/// space around it. A value holding CR, LF or NUL is refused: a server must never send one.
fn field(line: &[u8]) -> io::Result<(&[u8], &[u8])> {
    let bad = || invalid(format!("a malformed header field line: {}", quote(line)));
    let colon = line.iter().position(|&b| b == b':').ok_or_else(bad)?;
    let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
    let token = |b: &u8| b.is_ascii_graphic() && !b"\"(),/:;<=>?@[\\]{}".contains(b);
    if name.is_empty() || !name.iter().all(token) {
        return Err(bad());
    }
    if value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(bad());
    }
    Ok((name, value))
}

/// The status code of a status line `HTTP/1.x SSS reason`.
fn status_code(line: &[u8]) -> io::Result<u16> {
    let bad = || invalid(format!("a malformed status line: {}", quote(line)));
    let rest = line
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| line.strip_prefix(b"HTTP/1.0 "))
        .ok_or_else(bad)?;
    match rest {
        [a, b, c] | [a, b, c, b' ', ..] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
            Ok(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => Err(bad()),
    }
}

/// The value of a `Content-Length` field: decimal digits only.
fn content_length(value: &[u8]) -> io::Result<usize> {
    let bad = || invalid(format!("a malformed Content-Length: {}", quote(value)));
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(bad)
}

/// The head at the front of `buf`, once all of it has arrived; `None` until then.
/// `head_request`: the request was a `HEAD`, so no body follows whatever the head says.
pub fn parse_head(buf: &[u8], head_request: bool) -> io::Result<Option<Head>> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return Ok(None);
    };
    let mut lines = crlf_lines(&buf[..end]);
    let status = status_code(lines.next().unwrap_or_default())?;
    let mut length: Option<usize> = None;
    let mut chunked: Option<bool> = None;
    for line in lines {
        let (name, value) = field(line)?;
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = content_length(value)?;
            if length.is_some_and(|m| m != n) {
                return Err(invalid(format!(
                    "conflicting Content-Length fields in {}",
                    quote(&buf[..end])
                )));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            chunked = Some(trim_ows(last).eq_ignore_ascii_case(b"chunked"));
        }
    }
    let framing = if head_request || matches!(status, 100..=199 | 204 | 304) {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::UntilClose,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        }
    };
    Ok(Some(Head {
        status,
        len: end + 4,
        framing,
    }))
}

/// Walks a chunked body at the front of `data`, handing each chunk's data to `on_data`;
/// returns how many bytes the body takes (last chunk and trailers included), or `None` if it
/// has not all arrived.
fn walk_chunks(data: &[u8], mut on_data: impl FnMut(&[u8])) -> io::Result<Option<usize>> {
    let mut at = 0;
    loop {
        let Some(line_len) = find(&data[at..], b"\r\n") else {
            return Ok(None);
        };
        let line = &data[at..at + line_len];
        let size_text = trim_ows(line.split(|&b| b == b';').next().unwrap_or_default());
        let bad = || invalid(format!("a malformed chunk size line: {}", quote(line)));
        if size_text.is_empty() || !size_text.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad());
        }
        let size = std::str::from_utf8(size_text)
            .ok()
            .and_then(|hex| usize::from_str_radix(hex, 16).ok())
            .ok_or_else(bad)?;
        at += line_len + 2;
        if size == 0 {
            // Trailer fields, if any, then the blank line.
            loop {
                let Some(trailer_len) = find(&data[at..], b"\r\n") else {
                    return Ok(None);
                };
                at += trailer_len + 2;
                if trailer_len == 0 {
                    return Ok(Some(at));
                }
            }
        }
        let end = at.checked_add(size).and_then(|e| e.checked_add(2));
        let Some(end) = end.filter(|&e| e <= data.len()) else {
            return Ok(None);
        };
        if &data[end - 2..end] != b"\r\n" {
            return Err(invalid(format!(
                "chunk data not followed by CR LF near {}",
                quote(&data[at..])
            )));
        }
        on_data(&data[at..end - 2]);
        at = end;
    }
}

/// The data of a whole chunked body, its framing removed.
pub fn decode_chunked(data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len());
    match walk_chunks(data, |piece| out.extend_from_slice(piece))? {
        Some(_) => Ok(out),
        None => Err(cut_short(format!(
            "a truncated chunked body: {}",
            quote(data)
        ))),
    }
}

/// The complete response at the front of `buf`; `None` while more bytes are needed.
/// `head_request`: the request was a `HEAD`, so the response ends with its head. `eof`: the
/// server closed the connection, so nothing more will come: a body delimited by the close
/// ends here, and a response cut short is an error rather than `None`.
pub fn parse_frame(buf: &[u8], head_request: bool, eof: bool) -> io::Result<Option<Frame>> {
    let Some(head) = parse_head(buf, head_request)? else {
        if eof {
            return Err(cut_short(format!(
                "no complete response head in {}",
                quote(buf)
            )));
        }
        return Ok(None);
    };
    let rest = &buf[head.len..];
    let body_len = match head.framing {
        Framing::Empty => Some(0),
        Framing::Length(n) => (rest.len() >= n).then_some(n),
        Framing::Chunked => walk_chunks(rest, |_| {})?,
        Framing::UntilClose => eof.then_some(rest.len()),
    };
    match body_len {
        Some(n) => Ok(Some(Frame {
            head,
            body: head.len..head.len + n,
            len: head.len + n,
        })),
        None if eof => Err(cut_short(format!(
            "a truncated body ({:?}, {} bytes arrived) after {}",
            head.framing,
            rest.len(),
            quote(&buf[..head.len])
        ))),
        None => Ok(None),
    }
}

/// One HTTP response, copied out of the bytes received.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Every header field in the order received: the name as sent and the value's bytes,
    /// without the white space around it.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, chunk framing removed; empty for the answer to a `HEAD`.
    pub body: Vec<u8>,
}

impl Response {
    /// Copies the response that `frame` locates in `buf` out of it.
    pub fn from_frame(buf: &[u8], frame: &Frame) -> io::Result<Response> {
        let head = &buf[..frame.head.len - 4];
        let fields = crlf_lines(head).skip(1).map(|line| {
            let (name, value) = field(line)?;
            Ok((String::from_utf8_lossy(name).into_owned(), value.to_vec()))
        });
        let headers = fields.collect::<io::Result<Vec<_>>>()?;
        let data = &buf[frame.body.clone()];
        let body = match frame.head.framing {
            Framing::Chunked => decode_chunked(data)?,
            _ => data.to_vec(),
        };
        Ok(Response {
            status: frame.head.status,
            headers,
            body,
        })
    }

    /// The value of the first header of that name (case-insensitive). A value that is not
    /// UTF-8 fails the test, since every value tenantd sends is ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header_bytes(name).map(|value| {
            std::str::from_utf8(value)
                .unwrap_or_else(|_| panic!("the {name} header is not UTF-8: {}", self.describe()))
        })
    }

    /// The raw bytes of the first header of that name (case-insensitive).
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the response if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.describe()))
    }

    /// A one-line summary for assertion messages.
    pub fn describe(&self) -> String {
        let mut text = self.text();
        if text.len() > QUOTED_BYTES_MAX {
            let mut cut = QUOTED_BYTES_MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        let headers: Vec<(&str, String)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        format!("status {} headers {headers:?} body {text}", self.status)
    }
}

/// The first complete response at the front of `buf`, copied out, and how many bytes it took
/// (where the next one starts); `None` while more bytes are needed. `head_request` and `eof`
/// as for [`parse_frame`].
pub fn split_response(
    buf: &[u8],
    head_request: bool,
    eof: bool,
) -> io::Result<Option<(Response, usize)>> {
    match parse_frame(buf, head_request, eof)? {
        Some(frame) => Ok(Some((Response::from_frame(buf, &frame)?, frame.len))),
        None => Ok(None),
    }
}

/// The first response in everything a server sent before it closed the connection. A
/// response cut short is an error, so a client killed mid-response never counts as
/// acknowledged.
pub fn parse_response(bytes: &[u8], head_request: bool) -> io::Result<Response> {
    split_response(bytes, head_request, true)?
        .map(|(response, _)| response)
        .ok_or_else(|| cut_short(format!("no complete response in {}", quote(bytes))))
}
