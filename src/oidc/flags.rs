//! The identity provider's flags (`--oidc-*`), flattened into `serve`'s command line, and
//! their check into an [`OidcConfig`].

use clap::Args;

use super::{ADMIN_SCOPE_DEFAULT, OidcConfig, PERMISSIONS_CLAIM_DEFAULT, check_provider_url};
use crate::domain::is_visible_ascii;

/// The `--oidc-*` flags as clap reads them. The fields' names are clap's ids, which the
/// console's flags name in their `requires` (`oidc_issuer`).
#[derive(Args, Debug)]
pub(crate) struct OidcArgs {
    /// OpenID Connect issuer whose access tokens are taken
    ///
    /// Its keys are found through URL/.well-known/openid-configuration. https:// unless the
    /// host is a loopback address. Needs --oidc-audience.
    #[arg(
        long,
        next_line_help = true,
        value_name = "URL",
        env = "TENANTD_OIDC_ISSUER",
        hide_env_values = true,
        requires = "oidc_audience",
        value_parser = issuer
    )]
    oidc_issuer: Option<String>,

    /// The aud an access token must hold (needed with --oidc-issuer)
    #[arg(
        long,
        next_line_help = true,
        value_name = "AUD",
        env = "TENANTD_OIDC_AUDIENCE",
        hide_env_values = true,
        requires = "oidc_issuer",
        value_parser = visible_word
    )]
    oidc_audience: Option<String>,

    /// The scope (in scope or scp) that makes a token's holder the admin
    #[arg(
        long,
        next_line_help = true,
        value_name = "SCOPE",
        env = "TENANTD_OIDC_ADMIN_SCOPE",
        hide_env_values = true,
        default_value = ADMIN_SCOPE_DEFAULT,
        value_parser = visible_word
    )]
    oidc_admin_scope: String,

    /// The claim listing "<tenant id>:read|spend|manage" permissions
    #[arg(
        long,
        next_line_help = true,
        value_name = "CLAIM",
        env = "TENANTD_OIDC_PERMISSIONS_CLAIM",
        hide_env_values = true,
        default_value = PERMISSIONS_CLAIM_DEFAULT,
        value_parser = visible_word
    )]
    oidc_permissions_claim: String,

    /// PEM file of the authorities trusted for an https:// issuer
    ///
    /// For a provider whose certificate a private authority signed. It replaces the Mozilla
    /// roots compiled in, which are trusted when this is not given.
    #[arg(
        long,
        next_line_help = true,
        value_name = "FILE",
        env = "TENANTD_OIDC_CA_FILE",
        hide_env_values = true,
        requires = "oidc_issuer",
        value_parser = ca_file
    )]
    oidc_ca_file: Option<String>,
}

impl OidcArgs {
    /// The provider's settings, or `None` without an issuer. A CA file beside a plain-http
    /// issuer is refused: it would be silently unused. The error is the sentence to show.
    pub(crate) fn config(self) -> Result<Option<OidcConfig>, String> {
        match (self.oidc_issuer, self.oidc_audience) {
            (Some(issuer), Some(_))
                if self.oidc_ca_file.is_some() && !issuer.starts_with("https://") =>
            {
                Err(format!(
                    "--oidc-ca-file is for an https:// issuer; {issuer} is plain http"
                ))
            }
            (Some(issuer), Some(audience)) => Ok(Some(OidcConfig {
                issuer,
                audience,
                admin_scope: self.oidc_admin_scope,
                permissions_claim: self.oidc_permissions_claim,
                ca_file: self.oidc_ca_file,
            })),
            // clap's `requires` has refused one without the other.
            _ => Ok(None),
        }
    }
}

/// The issuer: a URL of the provider's (see [`check_provider_url`]), compared with each
/// token's `iss` exactly as given.
fn issuer(url: &str) -> Result<String, String> {
    check_provider_url(url).map(|()| url.to_owned())
}

/// The authorities' file, read now so that a wrong path or a file without a certificate stops
/// the start; it is read again when the verifier starts.
fn ca_file(path: &str) -> Result<String, String> {
    crate::crypto::tls_roots(Some(path)).map(|_| path.to_owned())
}

/// A setting that is compared with token contents or handed to the provider: visible ASCII,
/// not empty (so a scope is one word of a space-separated `scope`).
pub(crate) fn visible_word(text: &str) -> Result<String, String> {
    if !text.is_empty() && text.bytes().all(is_visible_ascii) {
        Ok(text.to_owned())
    } else {
        Err("must be visible ASCII characters, not empty".to_owned())
    }
}
