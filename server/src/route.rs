//! [`Route`]: one entry of the route list, from which both the router and
//! the OpenAPI document are made.

use axum::http::Method;
use axum::routing::MethodRouter;

use crate::state::AppState;

/// One route: its method, its path (axum syntax), what it does, and its
/// handler. The router and the OpenAPI document are both made from
/// [`routes`](crate::api::routes), so neither can list a route the other
/// lacks.
pub struct Route {
    /// HTTP method.
    pub method: Method,
    /// Path, axum syntax (`{id}`, `{*path}` for the rest).
    pub path: &'static str,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
    /// Query parameters: name, type, description.
    pub query: &'static [(&'static str, &'static str, &'static str)],
    /// Request body content type, if any.
    pub body: Option<&'static str>,
    /// Success response content type.
    pub response: &'static str,
    pub(crate) handler: MethodRouter<AppState>,
}

/// The content types of the routes' bodies and answers.
pub(crate) const JSON: &str = "application/json";
/// One JSON document a line (a log stream).
pub(crate) const NDJSON: &str = "application/x-ndjson";
