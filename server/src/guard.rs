//! What a request must show before any handler sees it, so that a web
//! page in the operator's browser cannot drive the server.
//!
//! A page on any site can send requests to `127.0.0.1`: directly (a
//! cross-site `fetch` or form post, which the browser sends without
//! asking when its content type is one a form can produce) or through DNS
//! rebinding (the page's own name made to resolve to `127.0.0.1`, so the
//! browser counts the server as the page's origin and lets it read the
//! answers). Three rules close both:
//!
//! * **Host**: the `Host` header must be a loopback name (`localhost`, a
//!   loopback IP), the address the server listens on, or a name the
//!   operator gave with `--public-host`. A rebinding page's requests carry
//!   its own name and are refused.
//! * **Origin**: a request that carries an `Origin` (every cross-site
//!   request a browser makes with a method other than GET does, and
//!   `fetch` always does) must come from the server's own origin or one
//!   the operator allowed with `--allow-origin`; CORS headers are sent to
//!   those origins only. `Sec-Fetch-Site: cross-site` without an allowed
//!   origin is refused the same way.
//! * **Content type**: a state-changing request (POST, PUT, PATCH, DELETE)
//!   with a body must not use a type a plain HTML form can send
//!   (`text/plain`, `application/x-www-form-urlencoded`,
//!   `multipart/form-data`); JSON routes want `application/json` and the
//!   file route `application/octet-stream`, neither of which a page can
//!   send across sites without a preflight that is never approved.
//!
//! Refusals use the same JSON error body as every other answer.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::limits::ERROR_TEXT_BYTES_MAX;

/// How long a browser may cache an approved CORS preflight.
const PREFLIGHT_MAX_AGE_SECONDS: &str = "600";

/// The names and origins a server answers beyond loopback.
#[derive(Debug, Clone, Default)]
pub struct RequestPolicy {
    /// The address the server listens on: its IP is an accepted `Host`
    /// when it is not the unspecified address.
    pub listen: Option<SocketAddr>,
    /// Extra accepted `Host` values (`--public-host`), lower case: a name
    /// alone accepts it on any port, `name:port` on that port only.
    pub public_hosts: Vec<String>,
    /// Origins allowed to call across sites (`--allow-origin`), lower
    /// case, as browsers send them (`https://app.example.com`).
    pub allowed_origins: Vec<String>,
}

impl RequestPolicy {
    /// Whether `host` (a `Host` header's value) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let Some((name, port)) = split_host(&host) else {
            return false;
        };
        if name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            if ip.is_loopback() {
                return true;
            }
            if let Some(listen) = self.listen
                && !listen.ip().is_unspecified()
                && listen.ip() == ip
            {
                return true;
            }
        }
        // `name` alone accepts any port; `name:port` that port only.
        let with_port = port.map(|port| format!("{name}:{port}"));
        self.public_hosts
            .iter()
            .any(|allowed| allowed == name || Some(allowed) == with_port.as_ref())
    }

    /// Whether a request from `origin` to a server reached as `host` may
    /// proceed: the server's own origin, or one the operator allowed.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.trim().to_ascii_lowercase();
        if self.allowed_origins.contains(&origin) {
            return true;
        }
        host.is_some_and(|host| origin == format!("http://{}", host.trim().to_ascii_lowercase()))
    }

    fn cors_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim().to_ascii_lowercase();
        self.allowed_origins.contains(&origin)
    }
}

/// `(name, port)` of a `Host` value: `name`, `name:port`, `[v6]`,
/// `[v6]:port`. `None` for anything else (an empty name, a bad port).
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            after => Some(after.strip_prefix(':')?),
        };
        (inside, port)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() {
        return None;
    }
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    Some((name, port))
}

fn header_text<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn forbidden(kind: &str, message: String, hint: &'static str) -> Response {
    ApiError {
        status: StatusCode::FORBIDDEN,
        class: sandlog_runtime::core::ErrorClass::Refused,
        kind: kind.to_owned(),
        message,
        hint,
    }
    .into_response()
}

/// Media types a plain HTML form (or a "simple" cross-site request) can
/// send without a CORS preflight.
const FORM_MEDIA_TYPES: [&str; 3] = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
];

fn changes_state(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The middleware: the three rules of the module documentation, then CORS
/// headers for allowed origins.
pub async fn check(
    State(policy): State<std::sync::Arc<RequestPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = header_text(headers, &header::HOST);
    match host {
        Some(host) if policy.host_allowed(host) => {}
        Some(host) => {
            let shown: String = host.chars().take(ERROR_TEXT_BYTES_MAX).collect();
            return forbidden(
                "forbidden_host",
                format!(
                    "Host {shown:?} is not a name of this server: it answers loopback names (localhost, 127.0.0.1, [::1]), the address it listens on, and names given with --public-host (a web page may be trying DNS rebinding)"
                ),
                "reach the server by a loopback name, or start it with `--public-host NAME`",
            );
        }
        None => {
            return forbidden(
                "forbidden_host",
                "the request has no Host header (or one that is not text)".to_owned(),
                "send a Host header naming the server",
            );
        }
    }
    let origin = header_text(headers, &header::ORIGIN).map(str::to_owned);
    if let Some(origin) = &origin
        && !policy.origin_allowed(origin, host)
    {
        let shown: String = origin.chars().take(ERROR_TEXT_BYTES_MAX).collect();
        return forbidden(
            "foreign_origin",
            format!(
                "requests from origin {shown:?} are refused: a web page of another site may not call this server"
            ),
            "call the server from a program, not a web page; or start it with `--allow-origin ORIGIN` for a page you trust",
        );
    }
    if origin.is_none()
        && headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return forbidden(
            "foreign_origin",
            "a cross-site request from a web page is refused".to_owned(),
            "call the server from a program, not a web page; or start it with `--allow-origin ORIGIN` for a page you trust",
        );
    }
    let method = request.method().clone();
    let cors = origin.filter(|origin| policy.cors_allowed(origin));
    if method == Method::OPTIONS
        && let Some(origin) = &cors
    {
        return preflight(origin);
    }
    if changes_state(&method)
        && let Some(media) = header_text(request.headers(), &header::CONTENT_TYPE)
    {
        let media = media
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if FORM_MEDIA_TYPES.contains(&media.as_str()) {
            return ApiError {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                class: sandlog_runtime::core::ErrorClass::Refused,
                kind: "unsupported_media_type".to_owned(),
                message: format!(
                    "{method} with Content-Type {media} is refused: a web form can send that type across sites"
                ),
                hint: "send JSON bodies as `application/json` and file bytes as `application/octet-stream`",
            }
            .into_response();
        }
    }
    let mut response = next.run(request).await;
    if let Some(origin) = cors
        && let Ok(value) = HeaderValue::from_str(&origin)
    {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

fn preflight(origin: &str) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type"),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(PREFLIGHT_MAX_AGE_SECONDS),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// Gives every error answer the JSON body docs/api.md promises, whoever
/// made it: the router's 405, a body-limit 413, an extractor's plain-text
/// rejection. Answers that already are JSON pass unchanged.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, ERROR_TEXT_BYTES_MAX)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let (kind, hint) = match status {
        StatusCode::NOT_FOUND => ("no_route", "GET /openapi.json lists every route"),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "GET /openapi.json lists each route's methods",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "too_large",
            "send less; for large files use `sandlog files put`, which streams",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            "send JSON bodies as `application/json` and file bytes as `application/octet-stream`",
        ),
        status if status.is_server_error() => ("internal", "see the server's log; retry"),
        _ => (
            "bad_request",
            "fix the request; /openapi.json describes every route",
        ),
    };
    let message = if text.is_empty() {
        format!(
            "{method} {path}: {}",
            status.canonical_reason().unwrap_or("error")
        )
    } else {
        format!("{method} {path}: {text}")
    };
    let mut rebuilt = ApiError {
        status,
        class: ApiError::class_of_status(status),
        kind: kind.to_owned(),
        message,
        hint,
    }
    .into_response();
    // Keep what the original answer said beyond its body (`Allow` on a
    // 405, `WWW-Authenticate` on a 401).
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            rebuilt.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rebuilt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RequestPolicy {
        RequestPolicy {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 8787))),
            public_hosts: vec!["sandlog.example.com".into(), "api.example.com:443".into()],
            allowed_origins: vec!["https://app.example.com".into()],
        }
    }

    #[test]
    fn loopback_and_public_hosts_are_accepted_others_refused() {
        let policy = policy();
        for host in [
            "localhost",
            "localhost:8787",
            "127.0.0.1:8787",
            "127.1.2.3",
            "[::1]:8787",
            "[::1]",
            "LOCALHOST:1",
            "sandlog.example.com",
            "sandlog.example.com:9000",
            "api.example.com:443",
        ] {
            assert!(policy.host_allowed(host), "{host} should be accepted");
        }
        for host in [
            "evil.example",
            "evil.example:8787",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1:8787",
            "api.example.com:444",
            "",
            ":8787",
            "[::1",
            "[::1]x",
            "localhost:99999",
        ] {
            assert!(!policy.host_allowed(host), "{host:?} should be refused");
        }
    }

    #[test]
    fn only_the_own_and_allowed_origins_pass() {
        let policy = policy();
        assert!(policy.origin_allowed("http://localhost:8787", Some("localhost:8787")));
        assert!(policy.origin_allowed("https://app.example.com", Some("localhost:8787")));
        assert!(!policy.origin_allowed("http://evil.example", Some("localhost:8787")));
        assert!(!policy.origin_allowed("null", Some("localhost:8787")));
        assert!(!policy.origin_allowed("http://localhost:3000", Some("localhost:8787")));
        assert!(!policy.origin_allowed("https://localhost:8787", Some("localhost:8787")));
    }
}
