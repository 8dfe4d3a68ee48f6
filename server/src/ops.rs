//! What operators and orchestrators ask of a running server: `/healthz`
//! (the process answers), `/readyz` (the engine's readiness checks, see
//! `sandlog_runtime::health`) and `/metrics` (the engine's metrics in the
//! Prometheus text format), and the middleware that counts every request
//! by route, method and status.
//!
//! The checks and the scrape run on a blocking thread of their own, not
//! under the engine-call slots: a server whose slots are all taken by long
//! executions still answers its probes.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::Instrument as _;

use crate::error::{ApiError, ErrorKind};
use crate::state::AppState;

/// `GET /healthz`: the process is up and serving.
pub(crate) async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}))
}

/// `GET /readyz`: 200 with every check when all passed, else 503 with the
/// same body (`{"ready", "checks": [{name, ok, detail, fix}]}`).
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    let engine = state.engine().clone();
    let checks = tokio::task::spawn_blocking(move || engine.health())
        .await
        .map_err(|error| ApiError::internal(format!("the readiness checks failed: {error}")))?;
    let ready = sandlog_runtime::health::all_ok(&checks);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok((
        status,
        axum::Json(json!({"ready": ready, "checks": checks})),
    )
        .into_response())
}

/// `GET /metrics`: the OpenMetrics text of the engine's metrics, the warm
/// kernels' figures taken now.
pub(crate) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let engine = state.engine().clone();
    let kernels = state.executor().kernel_stats();
    let text = tokio::task::spawn_blocking(move || {
        if let Some(stats) = kernels {
            engine.metrics().kernels(&stats);
        }
        engine.metrics_text()
    })
    .await
    .map_err(|error| ApiError::internal(format!("encoding the metrics failed: {error}")))?;
    let mut response = Response::new(Body::from(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(sandlog_runtime::metrics::CONTENT_TYPE),
    );
    Ok(response)
}

/// Counts every request (`sandlog_http_requests_total`) by its route's
/// template (`unmatched` for a path no route has), its method (`other`
/// past the common ones) and its status, and every error answer by its
/// kind: the labels come from fixed sets, so a caller cannot grow them.
pub(crate) async fn count_requests(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    };
    // The request's span (exported as a trace when the OTEL_* variables
    // ask for it); engine calls made for it run inside it.
    let span = tracing::info_span!(
        target: "sandlog::otel",
        "request",
        otel.name = %format_args!("{method} {route}"),
        http.request.method = method,
        http.route = route.as_str(),
        http.response.status_code = tracing::field::Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    // An i64: OpenTelemetry's integer attributes are signed.
    span.record(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    let metrics = state.engine().metrics();
    if let Some(ErrorKind { class, kind }) = response.extensions().get::<ErrorKind>() {
        metrics.error(class, kind);
    }
    metrics.http_request(
        &route,
        method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
