//! The HTTP JSON API: the route list, the router, authentication, and
//! [`serve`]. The handlers are in `handlers.rs`, the state they share in
//! `state.rs`.
//!
//! Every handler makes its engine calls on a blocking thread
//! ([`tokio::task::spawn_blocking`]), at most
//! [`BLOCKING_CALLS_MAX`](crate::limits::BLOCKING_CALLS_MAX) at once. An
//! execution whose client went away still runs to its end and is recorded:
//! the blocking task is never cancelled, and shutdown waits for it (up to
//! [`SHUTDOWN_WAIT_MAX`](crate::limits::SHUTDOWN_WAIT_MAX)).

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use sandlog_runtime::{Engine, RegisteredModules};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::auth::Token;
use crate::error::ApiError;
use crate::executor::Executor;
use crate::guard::RequestPolicy;
use crate::limits::{REQUEST_BODY_BYTES_MAX, SHUTDOWN_WAIT_MAX};
use crate::{ServeError, openapi};
pub use sandlog_runtime::documents::{execution_document, session_document};

use crate::handlers::{
    create_session, delete_file, delete_session, evidence, exec, list_files, list_sessions, log,
    prune, read_file, report, show_session, timeline, verify, write_file,
};
pub use crate::route::Route;
use crate::route::{JSON, NDJSON};
pub use crate::state::AppState;

/// How `sandlog serve` listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address and port; port 0 picks a free one. The bound address is
    /// printed on stdout as the first line.
    pub listen: SocketAddr,
    /// Required unless `listen` is a loopback address; checked on every
    /// request when set.
    pub token: Option<Token>,
    /// How long shutdown waits for running requests.
    pub shutdown_wait: Duration,
    /// `Host` names accepted beyond loopback and the listen address
    /// (`--public-host`; see [`crate::guard`]).
    pub public_hosts: Vec<String>,
    /// Origins allowed to call across sites (`--allow-origin`).
    pub allowed_origins: Vec<String>,
    /// Guest modules clients may name as a runtime (`--module`).
    pub modules: RegisteredModules,
}

impl ServeOptions {
    /// Loopback on `port`, no token, the default shutdown wait.
    pub fn loopback(port: u16) -> ServeOptions {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], port)),
            token: None,
            shutdown_wait: SHUTDOWN_WAIT_MAX,
            public_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            modules: RegisteredModules::new(),
        }
    }
}

/// Every route the server answers.
pub fn routes() -> Vec<Route> {
    let route = |method: Method,
                 path: &'static str,
                 summary: &'static str,
                 query: &'static [(&'static str, &'static str, &'static str)],
                 body: Option<&'static str>,
                 response: &'static str,
                 handler: MethodRouter<AppState>| Route {
        method,
        path,
        summary,
        query,
        body,
        response,
        handler,
    };
    vec![
        route(
            Method::GET,
            "/openapi.json",
            "This document",
            &[],
            None,
            JSON,
            get(openapi_document),
        ),
        route(
            Method::GET,
            "/v1/health",
            "The server is up: {\"ok\": true, \"version\"}",
            &[],
            None,
            JSON,
            get(health),
        ),
        route(
            Method::GET,
            "/healthz",
            "Liveness: the process answers → {\"ok\": true, \"version\"}",
            &[],
            None,
            JSON,
            get(crate::ops::healthz),
        ),
        route(
            Method::GET,
            "/readyz",
            "Readiness: the log writable, runtimes present, disk space → 200 or 503 with {\"ready\", \"checks\": [{\"name\", \"ok\", \"detail\", \"fix\"}]}",
            &[],
            None,
            JSON,
            get(crate::ops::readyz),
        ),
        route(
            Method::GET,
            "/metrics",
            "Metrics in the Prometheus (OpenMetrics) text format (docs/operations.md)",
            &[],
            None,
            "application/openmetrics-text",
            get(crate::ops::metrics),
        ),
        route(
            Method::POST,
            "/v1/sessions",
            "Create a session; body {\"labels\"?: {k: v}, \"group\"?, \"max_size\"?: SIZE} → {\"session_id\"} (read-only host directories are not taken over HTTP: a client must not name the server's files)",
            &[],
            Some(JSON),
            JSON,
            post(create_session),
        ),
        route(
            Method::GET,
            "/v1/sessions",
            "Sessions with metadata (as `session list --json`)",
            &[
                (
                    "status",
                    "string",
                    "active, pruning, pruned, deleting or deleted",
                ),
                ("group", "string", "only this task group's sessions"),
            ],
            None,
            JSON,
            get(list_sessions),
        ),
        route(
            Method::GET,
            "/v1/sessions/{id}",
            "One session (as `session show --json`)",
            &[],
            None,
            JSON,
            get(show_session),
        ),
        route(
            Method::DELETE,
            "/v1/sessions/{id}",
            "Delete a session → {\"session_id\", \"reclaimed_bytes\"}",
            &[("reason", "string", "recorded in the log")],
            None,
            JSON,
            delete(delete_session),
        ),
        route(
            Method::GET,
            "/v1/sessions/{id}/timeline",
            "The session's events in order, payloads decoded",
            &[],
            None,
            JSON,
            get(timeline),
        ),
        route(
            Method::POST,
            "/v1/sessions/{id}/exec",
            "Run code; body {\"code\", \"runtime\"?, \"timeout_ms\"?, \"fuel\"?, \"memory_bytes\"?} → the `exec --json` object plus \"warm\" and \"state_lost\"; with Accept: text/event-stream or application/x-ndjson, \"output\" frames while it runs, then the \"result\"",
            &[],
            Some(JSON),
            JSON,
            post(exec),
        ),
        route(
            Method::GET,
            "/v1/sessions/{id}/files",
            "Files (as `files ls --json`)",
            &[("pattern", "string", "a glob")],
            None,
            JSON,
            get(list_files),
        ),
        route(
            Method::GET,
            "/v1/sessions/{id}/files/{*path}",
            "A file's bytes",
            &[],
            None,
            "application/octet-stream",
            get(read_file),
        ),
        route(
            Method::PUT,
            "/v1/sessions/{id}/files/{*path}",
            "Write a file from the body's bytes → {\"path\", \"size\", \"blake3\"}",
            &[("overwrite", "boolean", "replace an existing file")],
            Some("application/octet-stream"),
            JSON,
            put(write_file),
        ),
        route(
            Method::DELETE,
            "/v1/sessions/{id}/files/{*path}",
            "Delete a file → {\"deleted\": [...]}",
            &[(
                "recursive",
                "boolean",
                "delete a directory and what it holds",
            )],
            None,
            JSON,
            delete(delete_file),
        ),
        route(
            Method::GET,
            "/v1/sessions/{id}/report",
            "The session's self-contained HTML report (header x-sandlog-verify-ok)",
            &[],
            None,
            "text/html",
            get(report),
        ),
        route(
            Method::GET,
            "/v1/sessions/{id}/evidence",
            "The session's evidence bundle, with the latest signed checkpoint",
            &[],
            None,
            JSON,
            get(evidence),
        ),
        route(
            Method::GET,
            "/v1/log",
            "Events as JSON Lines (as `log --json`); with follow=true, keeps streaming new events",
            &[
                ("session", "string", "only this session's events"),
                ("kind", "string", "only this kind (`session.*` by prefix)"),
                ("since", "string", "recorded at or after (RFC 3339)"),
                ("until", "string", "recorded before (RFC 3339)"),
                ("from", "integer", "at or after this position"),
                (
                    "correlation",
                    "string",
                    "only events with this correlation id (a UUID, or a task id mapped as `--correlation-id` maps it)",
                ),
                (
                    "limit",
                    "integer",
                    "at most this many (default and maximum 10000 without follow)",
                ),
                ("follow", "boolean", "keep the response open for new events"),
            ],
            None,
            NDJSON,
            get(log),
        ),
        route(
            Method::POST,
            "/v1/verify",
            "Check the hash chain and the read models → {\"ok\", \"events\", \"head\", ...}",
            &[],
            None,
            JSON,
            post(verify),
        ),
        route(
            Method::POST,
            "/v1/prune",
            "Prune by policy; body {\"older_than\"?, \"dry_run\"?, \"max_deletions\"?, \"max_sessions\"?, \"max_bytes\"?, \"group\"?}: an age, a cap or both (max_deletions alone selects nothing)",
            &[],
            Some(JSON),
            JSON,
            post(prune),
        ),
    ]
}

/// The router over `state`: every route of [`routes`], the token check,
/// the body limit, and a JSON 404 for anything else.
pub fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for route in routes() {
        router = router.route(route.path, route.handler);
    }
    let policy = state.policy.clone();
    router
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(policy, crate::guard::check))
        .layer(middleware::from_fn(crate::guard::json_errors))
        // Outermost, so refused requests (a foreign Host or Origin, a
        // missing token) are counted with the status they got.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::ops::count_requests,
        ))
        .with_state(state)
}

/// Runs the server until SIGTERM or SIGINT, then lets running requests
/// finish (up to `options.shutdown_wait`). Prints the bound address on
/// stdout first (`listening on http://ADDR`), so a caller that asked for
/// port 0 learns the port.
pub fn serve(
    engine: Arc<Engine>,
    executor: Arc<dyn Executor>,
    options: ServeOptions,
) -> Result<(), ServeError> {
    if !options.listen.ip().is_loopback() && options.token.is_none() {
        return Err(ServeError::TokenRequired(options.listen));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sandlog-serve")
        .build()
        .map_err(ServeError::io("starting the server's runtime"))?;
    let shutdown_wait = options.shutdown_wait;
    let result = runtime.block_on(run(engine.clone(), executor.clone(), options));
    // Blocking engine calls whose handler is gone (client disconnected)
    // still get to finish and record their work.
    runtime.shutdown_timeout(shutdown_wait);
    // Then the kept kernels go, each with its `kernel.evicted` event.
    executor.shutdown(&engine);
    result
}

async fn run(
    engine: Arc<Engine>,
    executor: Arc<dyn Executor>,
    options: ServeOptions,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(ServeError::io(format!("listening on {}", options.listen)))?;
    let bound = listener
        .local_addr()
        .map_err(ServeError::io("reading the bound address"))?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{bound}")
            .and_then(|()| stdout.flush())
            .map_err(ServeError::io("writing the bound address to stdout"))?;
    }
    tracing::info!(%bound, token = options.token.is_some(), "serving");
    let (stop, stopping) = watch::channel(false);
    let (engine_for_upkeep, executor_for_upkeep) = (engine.clone(), executor.clone());
    let policy = RequestPolicy {
        listen: Some(bound),
        public_hosts: lower(options.public_hosts),
        allowed_origins: lower(options.allowed_origins),
    };
    let state = AppState::new(
        engine,
        executor,
        options.token,
        stopping,
        policy,
        options.modules,
    );
    let app = router(state);
    crate::executor::spawn_upkeep(engine_for_upkeep, executor_for_upkeep);
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        wait_for_signal().await;
        tracing::info!("shutting down: finishing running requests");
        let _ = stop.send(true);
        let _ = signalled_tx.send(());
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown);
    let wait = options.shutdown_wait;
    let deadline = async move {
        if signalled_rx.await.is_ok() {
            tokio::time::sleep(wait).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = server => result.map_err(ServeError::io("serving")),
        () = deadline => {
            tracing::warn!(wait_s = wait.as_secs(), "requests still running after the shutdown wait; exiting");
            Ok(())
        }
    }
}

fn lower(names: Vec<String>) -> Vec<String> {
    names
        .into_iter()
        .map(|name| name.trim().trim_end_matches('/').to_ascii_lowercase())
        .collect()
}

pub(crate) async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot watch SIGTERM; only SIGINT stops the server");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// Refuses a request without the right bearer token (when one is set).
async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let offered = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "));
        if !offered.is_some_and(|offered| token.matches(offered)) {
            let mut response = ApiError::unauthorized().into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sandlog\""),
            );
            return response;
        }
    }
    next.run(request).await
}

async fn no_route(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        class: sandlog_runtime::core::ErrorClass::NotFound,
        kind: "no_route".to_owned(),
        message: format!("no route {method} {}", uri.path()),
        hint: "GET /openapi.json lists every route",
    }
}

async fn openapi_document() -> axum::Json<Value> {
    axum::Json(openapi::document(&routes()))
}

async fn health() -> axum::Json<Value> {
    axum::Json(json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}))
}
