//! The console's flags (`--no-console`, `--console-*`), flattened into `serve`'s command
//! line, and the [`ConsoleConfig`] they make.

use std::path::PathBuf;

use clap::Args;

use super::ConsoleConfig;
use crate::oidc::flags::visible_word;

/// The console's flags as clap reads them; the fields' names are clap's ids.
#[derive(Args, Debug)]
pub(crate) struct ConsoleArgs {
    /// Serve no web console at /console/
    #[arg(
        long,
        env = "TENANTD_NO_CONSOLE",
        hide_env_values = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_console: bool,

    /// The identity provider's client id for the console's "Sign in with …"
    ///
    /// A public client (no secret) that may use the authorization code flow with PKCE and
    /// redirect to <public URL>/console/. Needs --oidc-issuer.
    #[arg(
        long,
        next_line_help = true,
        value_name = "ID",
        env = "TENANTD_CONSOLE_OIDC_CLIENT_ID",
        hide_env_values = true,
        requires = "oidc_issuer",
        conflicts_with = "no_console",
        value_parser = visible_word
    )]
    console_oidc_client_id: Option<String>,

    /// Serve the console's files from DIR, read at every request (for working on them)
    #[arg(
        long,
        next_line_help = true,
        value_name = "DIR",
        env = "TENANTD_CONSOLE_DIR",
        hide_env_values = true,
        conflicts_with = "no_console"
    )]
    console_dir: Option<PathBuf>,
}

impl ConsoleArgs {
    /// The console's settings; clap has already refused the flags that conflict.
    pub(crate) fn config(self) -> ConsoleConfig {
        ConsoleConfig {
            enabled: !self.no_console,
            oidc_client_id: self.console_oidc_client_id,
            dir: self.console_dir,
        }
    }
}
