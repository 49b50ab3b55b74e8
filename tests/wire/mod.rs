//! A wire-level HTTP/1.1 client: the one request writer and the one response parser of the
//! black-box tests and of the load generator (`benches/load/`).
//!
//! It is written by hand rather than taken from an HTTP crate, so that a test sees the exact
//! bytes the server sends and can send bytes no well-behaved client would: a NUL in a header,
//! conflicting framing, a body that never ends. It has three parts:
//!
//! - `request`: the bytes of a request, appended to a buffer the caller may reuse;
//! - `response`: a response parsed incrementally from the front of a byte buffer, either
//!   located without copying ([`Frame`]) or copied out ([`Response`]);
//! - `conn`: a blocking connection over `std::net::TcpStream`, and one-shot exchanges on it.

mod conn;
mod request;
mod response;

pub use conn::*;
pub use request::*;
pub use response::*;
