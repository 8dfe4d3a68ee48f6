//! sandlog-server: the HTTP JSON API behind `sandlog serve` ([`serve`]) and
//! the Model Context Protocol server behind `sandlog mcp` ([`mcp`]), both
//! over one shared [`Engine`].
//!
//! Owns: transport (HTTP, MCP on stdio), authentication, request and
//! response bounds, the mapping of engine errors to HTTP statuses, and the
//! bounded hand-off of the synchronous engine to blocking threads.
//! Never does: decide anything the engine decides. Every handler is one
//! engine call (or a small fixed sequence of them) run on a blocking thread.
//!
//! # Layout
//!
//! * [`api`]: the axum router, its handlers and [`serve`].
//! * [`executor`]: how an execution is run ([`Executor`]; [`ColdExecutor`]
//!   is one-shot `Engine::execute`).
//! * [`error`]: `RuntimeError` → HTTP status and `{error, message, hint}`.
//! * [`auth`]: the bearer token (loading, constant-time comparison).
//! * [`limits`]: every bound the servers put on requests and responses.
//! * [`openapi`]: the OpenAPI document served at `/openapi.json`.
//! * [`mcp`]: the MCP tools.
//! * `ops`: `/healthz`, `/readyz`, `/metrics` and the request counter.
//! * [`witness`]: `sandlog witness serve`, a C2SP tlog-witness with its
//!   durable state (no engine, no root).

pub mod api;
pub mod auth;
pub mod error;
pub mod executor;
pub mod guard;
mod handlers;
pub mod limits;
pub mod mcp;
pub mod mcp_lines;
pub mod openapi;
mod ops;
pub mod route;
pub mod state;
pub mod witness;

pub use api::{ServeOptions, serve};
pub use executor::{ColdExecutor, ExecOutcome, Executor, WarmExecutor};
pub use sandlog_runtime::Engine;

/// Why a server could not start or stopped with an error (request errors
/// are answered, never returned here).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Listening beyond loopback without a token.
    #[error(
        "refusing to listen on {0} without a token: anything but a loopback address needs one; pass --token-file FILE or set SANDLOG_TOKEN"
    )]
    TokenRequired(std::net::SocketAddr),
    /// The token file or `$SANDLOG_TOKEN` is unusable.
    #[error("{0}")]
    BadToken(String),
    /// Binding, reading the token file, the runtime, stdio.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The MCP transport failed.
    #[error("mcp: {0}")]
    Mcp(String),
}

impl ServeError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
        let context = context.into();
        move |source| ServeError::Io { context, source }
    }
}
