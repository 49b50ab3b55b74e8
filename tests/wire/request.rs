//! The bytes of a request.

use std::io::Write as _;

/// The version of every request unless a test says otherwise.
pub const HTTP_11: &str = "HTTP/1.1";

/// The version of the HTTP/1.0 tests, whose connections close after one answer by default.
pub const HTTP_10: &str = "HTTP/1.0";

/// Appends one request to `out`: the request line `method target version`, then `headers` in
/// the order given, each written exactly as given (so a test may send bytes no client should),
/// then a `Content-Length` for `body` unless the headers already frame it with a
/// `Content-Length` or a `Transfer-Encoding` of their own, then the blank line and `body` as
/// given. Nothing else is added: no `Host`, no `Connection`. It allocates nothing beyond the
/// growth of `out`, so a load generator can call it for every request.
pub fn write_request<N, V>(
    out: &mut Vec<u8>,
    method: &str,
    target: &str,
    version: &str,
    headers: &[(N, V)],
    body: Option<&[u8]>,
) where
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.push(b' ');
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut framed = false;
    for (name, value) in headers {
        let name = name.as_ref();
        framed |= name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding");
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_ref());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(body) = body
        && !framed
    {
        write!(out, "Content-Length: {}\r\n", body.len()).expect("writing to a Vec cannot fail");
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
}

/// The bytes of one request, as [`write_request`] writes them, in a new buffer.
pub fn request_bytes<N, V>(
    method: &str,
    target: &str,
    version: &str,
    headers: &[(N, V)],
    body: Option<&[u8]>,
) -> Vec<u8>
where
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut out = Vec::with_capacity(256 + body.map_or(0, <[u8]>::len));
    write_request(&mut out, method, target, version, headers, body);
    out
}

/// Appends `body` in chunked framing to `out`, `chunk_bytes` bytes a chunk, then the last
/// chunk and no trailers. The caller sends the `Transfer-Encoding` header it wants.
pub fn write_chunked(out: &mut Vec<u8>, body: &[u8], chunk_bytes: usize) {
    assert!(chunk_bytes > 0, "a chunk holds at least one byte");
    for piece in body.chunks(chunk_bytes) {
        write!(out, "{:x}\r\n", piece.len()).expect("writing to a Vec cannot fail");
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
}

/// `body` in chunked framing, `chunk_bytes` bytes a chunk, in a new buffer.
pub fn chunked(body: &[u8], chunk_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / chunk_bytes.max(1) * 12 + 16);
    write_chunked(&mut out, body, chunk_bytes);
    out
}
