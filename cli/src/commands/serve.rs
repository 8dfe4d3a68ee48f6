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
    /// A name clients reach the server by beyond loopback (`Host`
    /// header), `NAME` on any port or `NAME:PORT` (repeatable). Requests
    /// naming any other host are refused (403): a web page could
    /// otherwise reach the server through DNS rebinding.
    #[arg(long = "public-host", value_name = "NAME")]
    pub public_hosts: Vec<String>,
    /// A web origin (`https://app.example.com`) whose pages may call the
    /// server (CORS; repeatable). Requests from any other origin are
    /// refused (403).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// A guest module clients may run by NAME as `runtime` (repeatable).
    /// Clients name `python`, `javascript` or these, never a path.
    #[arg(long = "module", value_name = "NAME=PATH.wasm", value_parser = parse_module)]
    pub modules: Vec<(String, PathBuf)>,
}

/// `mcp` arguments.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// A guest module clients may run by NAME as `runtime` (repeatable).
    /// Clients name `python`, `javascript` or these, never a path.
    #[arg(long = "module", value_name = "NAME=PATH.wasm", value_parser = parse_module)]
    pub modules: Vec<(String, PathBuf)>,
}

/// Longest module name `--module` takes.
const MODULE_NAME_BYTES_MAX: usize = 64;

fn parse_module(text: &str) -> Result<(String, PathBuf), String> {
    let Some((name, path)) = text.split_once('=') else {
        return Err(format!("{text:?} is not NAME=PATH.wasm"));
    };
    let valid = !name.is_empty()
        && name.len() <= MODULE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if !valid {
        return Err(format!(
            "module name {name:?}: 1 to {MODULE_NAME_BYTES_MAX} letters, digits, `-`, `_` or `.`"
        ));
    }
    if matches!(name, "python" | "py" | "javascript" | "js") {
        return Err(format!("module name {name:?} is a built-in runtime's"));
    }
    if path.is_empty() {
        return Err(format!("module {name:?}: give the path of its .wasm file"));
    }
    Ok((name.to_owned(), PathBuf::from(path)))
}

#[cfg(feature = "server")]
mod built {
    use std::sync::Arc;

    use sandlog_runtime::{Engine, KernelLimits};
    use sandlog_server::auth::Token;
    use sandlog_server::limits::SHUTDOWN_WAIT_MAX;
    use sandlog_server::{ServeError, ServeOptions, WarmExecutor};

    use super::{McpArgs, ServeArgs};
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
            public_hosts: args.public_hosts,
            allowed_origins: args.allowed_origins,
            modules: args.modules.into_iter().collect(),
        };
        // Python runs in a warm kernel per session (docs/kernels.md).
        let executor = Arc::new(WarmExecutor::new(KernelLimits::default()));
        sandlog_server::serve(Arc::new(engine), executor, options).map_err(failed)?;
        Ok(0)
    }

    pub fn mcp(engine: Engine, args: McpArgs) -> Result<u8, CliError> {
        let executor = Arc::new(WarmExecutor::new(KernelLimits::default()));
        sandlog_server::mcp::run(
            Arc::new(engine),
            executor,
            args.modules.into_iter().collect(),
        )
        .map_err(failed)?;
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
pub fn mcp(_engine: Engine, _args: McpArgs) -> Result<u8, CliError> {
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
