//! Webhook delivery, after the Standard Webhooks specification: the endpoints' signing secrets
//! and the `webhook-signature` header ([`secret`]), the URL an endpoint is created with
//! ([`url`]), the guard that keeps attempts off loopback, private and link-local addresses
//! ([`address`]), one bounded `POST` to an endpoint ([`attempt`]), and the sender that leases
//! endpoints, sends each due delivery and records its outcome ([`send`]); and the `--webhook-*`
//! flags the sender is started with ([`flags`]).
//!
//! Nothing here logs a header value or a body: a signature derives from the secret.

pub(crate) mod address;
pub(crate) mod attempt;
pub(crate) mod flags;
pub(crate) mod secret;
pub(crate) mod send;
pub(crate) mod url;

pub(crate) use attempt::{Client, ClientConfig, Headers, Outcome};
pub(crate) use secret::Secret;
