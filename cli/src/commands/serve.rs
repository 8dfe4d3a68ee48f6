//! `serve` and `mcp`: hand the engine to sandlog-server.

use clap::Args;
#[cfg(not(feature = "server"))]
use sandlog_runtime::Engine;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::exit::CliError;

/// `serve` arguments.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed first).
    /// Anything but a loopback address needs a token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// A file holding the bearer token every request must send (else
    /// $SANDLOG_TOKEN). 16 to 4096 printable characters.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Free space the root's filesystem must have for `GET /readyz` to
    /// answer ready (`256MiB`, `10GB`).
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub min_free: String,
}

#[cfg(feature = "server")]
mod built {
    use std::sync::Arc;

    use sandlog_runtime::{Engine, KernelLimits};
    use sandlog_server::auth::Token;
    use sandlog_server::limits::SHUTDOWN_WAIT_MAX;
    use sandlog_server::{ServeError, ServeOptions, WarmExecutor};

    use super::ServeArgs;
    use crate::exit::CliError;

    fn failed(error: ServeError) -> CliError {
        match error {
            ServeError::Io { context, source } => CliError::Io { context, source },
            ServeError::TokenRequired(_) => CliError::Usage {
                kind: "token_required",
                message: error.to_string(),
            },
            ServeError::BadToken(_) => CliError::Usage {
                kind: "bad_token",
                message: error.to_string(),
            },
            _ => CliError::Usage {
                kind: "serve",
                message: error.to_string(),
            },
        }
    }

    pub fn serve(engine: Engine, args: ServeArgs) -> Result<u8, CliError> {
        let token = Token::load(args.token_file.as_deref()).map_err(failed)?;
        let disk_free_min =
            sandlog_runtime::core::human::parse_size(&args.min_free).map_err(|error| {
                CliError::Usage {
                    kind: "bad_size",
                    message: format!("--min-free {:?}: {error}", args.min_free),
                }
            })?;
        engine.set_health_options(sandlog_runtime::health::HealthOptions { disk_free_min });
        let options = ServeOptions {
            listen: args.listen,
            token,
            shutdown_wait: SHUTDOWN_WAIT_MAX,
        };
        // Python runs in a warm kernel per session (docs/kernels.md).
        let executor = Arc::new(WarmExecutor::new(KernelLimits::default()));
        sandlog_server::serve(Arc::new(engine), executor, options).map_err(failed)?;
        Ok(0)
    }

    pub fn mcp(engine: Engine) -> Result<u8, CliError> {
        let executor = Arc::new(WarmExecutor::new(KernelLimits::default()));
        sandlog_server::mcp::run(Arc::new(engine), executor).map_err(failed)?;
        Ok(0)
    }
}

#[cfg(feature = "server")]
pub use built::{mcp, serve};

/// Why `command` cannot run in a build without the `server` feature.
#[cfg_attr(
    all(feature = "server", not(test)),
    expect(dead_code, reason = "only a build without the server calls it")
)]
pub fn not_built(command: &str) -> CliError {
    CliError::Usage {
        kind: "not_built",
        message: format!(
            "`sandlog {command}` is not in this build: it was built without the `server` \
             feature (as `make demo` builds); install the full CLI with \
             `cargo install --path cli` (default features)"
        ),
    }
}

#[cfg(not(feature = "server"))]
pub fn serve(_engine: Engine, _args: ServeArgs) -> Result<u8, CliError> {
    Err(not_built("serve"))
}

#[cfg(not(feature = "server"))]
pub fn mcp(_engine: Engine) -> Result<u8, CliError> {
    Err(not_built("mcp"))
}

#[cfg(test)]
mod tests {
    /// The error of a build without the server names the feature and the
    /// way to get it.
    #[test]
    fn a_missing_server_is_named_with_the_way_to_get_it() {
        let error = super::not_built("serve");
        let text = error.to_string();
        assert!(text.contains("`server` feature"), "{text}");
        assert!(text.contains("cargo install --path cli"), "{text}");
    }
}
