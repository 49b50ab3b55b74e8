//! Shared machinery of the black-box tests.
//!
//! Every test starts the real `tenantd` binary on port 0 with a fresh database in its own
//! temporary directory, talks HTTP/1.1 to it through the wire-level client of `tests/wire/`
//! (so a test sees the exact bytes the server sends), and checks the database on its own,
//! without trusting the service. The database is a SQLite file, or with
//! `TENANTD_TEST_BACKEND=postgres` a PostgreSQL database of the app's own on the cluster of
//! scripts/with-postgres.sh; tests that need the SQLite file itself are listed in the
//! Makefile's `SQLITE_ONLY_TESTS`.
//!
//! - `app`: a server under test ([`spawn_app`], [`AppBuilder`], [`TestApp`]) and requests
//!   to it; [`try_send`] is the one way a helper sends a POST to the server;
//! - `cli`: the binary run as a command, with a clean environment and bounded waits;
//! - `db`: the database read independently: counts, audit rows, the hash chain;
//! - `files`: private files, permission bits, secrets searched in a directory;
//! - `oidc`: a real OpenID Connect provider (`oidc-provider`) issuing access tokens;
//! - `order`: the members of a JSON object in the order its text has them;
//! - `pg`: the backend of the servers under test (`TENANTD_TEST_BACKEND`), a PostgreSQL
//!   database of a test's own, and `psql`;
//! - `problem`: RFC 9457 problem bodies checked against the contract;
//! - `rand`: random tokens and names, and a seeded generator for timing;
//! - `receiver`: a webhook receiver on the loopback that records every request and answers
//!   as the test says (a status, a redirect, a stall, a dropped connection);
//! - `shapes`: the shapes and bounds the contract fixes: ids, timestamps, names, limits;
//! - `spend`: budgets, reservations, ledger entries and lists: requests, figures, replays.

mod app;
mod cli;
mod db;
mod files;
mod oidc;
mod order;
mod pg;
mod problem;
mod rand;
mod receiver;
mod shapes;
mod spend;
mod tls;

pub use app::*;
pub use cli::*;
pub use db::*;
pub use files::*;
pub use oidc::*;
pub use order::*;
pub use pg::*;
pub use problem::*;
pub use rand::*;
pub use receiver::*;
pub use shapes::*;
pub use spend::*;
pub use tls::*;
