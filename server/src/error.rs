//! Engine errors as HTTP answers: a status chosen by the error's class and
//! a JSON body `{"error": kind, "message": text, "hint": what to do}`. The
//! `error` field is the same stable kind the CLI prints with `--json`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlog_runtime::RuntimeError;
use sandlog_runtime::core::ErrorClass;
use sandlog_runtime::sandbox::SandboxError;
use serde_json::json;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The class of the failure (what the metrics count errors by).
    pub class: ErrorClass,
    /// The stable kind (`not_found`, `busy`, `too_large`, …).
    pub kind: String,
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    pub hint: &'static str,
}

impl ApiError {
    /// An error of the request itself (malformed id, JSON, parameter).
    pub fn bad_request(kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            class: ErrorClass::BadInput,
            kind: kind.to_owned(),
            message: message.into(),
            hint: "fix the request; /openapi.json describes every route",
        }
    }

    /// A request or response past one of the server's limits.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            class: ErrorClass::Limit,
            kind: "too_large".to_owned(),
            message: message.into(),
            hint: "send or ask for less; for large files use `sandlog files put` / `files cat`, which stream",
        }
    }

    /// A missing or wrong bearer token.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            class: ErrorClass::Refused,
            kind: "unauthorized".to_owned(),
            message: "missing or wrong bearer token".to_owned(),
            hint: "send `Authorization: Bearer TOKEN` with the server's token",
        }
    }

    /// The server failed internally (a blocking task died).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            class: ErrorClass::Io,
            kind: "internal".to_owned(),
            message: message.into(),
            hint: "see the server's log; retry",
        }
    }

    /// The class an answer of `status` has when no engine error says
    /// otherwise (a rejection by the HTTP layer or the request guard).
    pub fn class_of_status(status: StatusCode) -> ErrorClass {
        match status {
            StatusCode::NOT_FOUND => ErrorClass::NotFound,
            StatusCode::CONFLICT => ErrorClass::Conflict,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorClass::Limit,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::GONE => {
                ErrorClass::Refused
            }
            status if status.is_server_error() => ErrorClass::Io,
            _ => ErrorClass::BadInput,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": self.kind, "message": self.message, "hint": self.hint})
    }
}

/// The HTTP status of an engine error, by its class: not found 404;
/// conflicting with the session's state (busy, exists, held, not active)
/// 409; past a size limit 413; a bad input value 422; the log's integrity,
/// I/O and the sandbox's setup 500.
pub fn status_of(error: &RuntimeError) -> (StatusCode, &'static str) {
    use RuntimeError as E;
    if error.is_integrity() {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the log failed an integrity check: stop writing, run `sandlog verify` and restore from a backup if it fails",
        );
    }
    if error.is_not_found() {
        return (
            StatusCode::NOT_FOUND,
            "check the id or path (GET /v1/sessions, GET /v1/sessions/{id}/files)",
        );
    }
    match error {
        E::Busy { .. } | E::Conflict(_) => (
            StatusCode::CONFLICT,
            "another operation holds the session; retry when it finishes",
        ),
        E::FileExists { .. } => (
            StatusCode::CONFLICT,
            "pass ?overwrite=true to replace the file",
        ),
        E::IsDirectory { .. } => (
            StatusCode::CONFLICT,
            "name a file, or pass ?recursive=true to delete a directory",
        ),
        E::SessionNotActive { .. } | E::Held { .. } | E::NotEmpty { .. } => (
            StatusCode::CONFLICT,
            "the session's state forbids this; GET /v1/sessions/{id} shows it",
        ),
        E::CodeTooLarge { .. } | E::InputTooLarge { .. } | E::QuotaExceeded { .. } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "send less, or free space in the workspace",
        ),
        E::ContentNotKept { .. } | E::ContentErased { .. } => {
            (StatusCode::GONE, "only the hash of these bytes is recorded")
        }
        E::Invalid(_) | E::EscapesWorkspace { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "fix the value the message names",
        ),
        E::Sandbox(SandboxError::InvalidLimit { .. } | SandboxError::InvalidRequest { .. }) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "fix the limit the message names",
        ),
        E::Store(sandlog_runtime::eventstore::EventStoreError::ReadOnly { .. }) => (
            StatusCode::FORBIDDEN,
            "this root is open read-only (read-only media or another user's root): reads work, writes need a writable root",
        ),
        _ => match error.class() {
            ErrorClass::Conflict => (
                StatusCode::CONFLICT,
                "the state changed or is in use; retry",
            ),
            ErrorClass::Limit => (StatusCode::PAYLOAD_TOO_LARGE, "send less"),
            ErrorClass::BadInput => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "fix the value the message names",
            ),
            ErrorClass::Refused => (StatusCode::GONE, "only the hash of these bytes is recorded"),
            _ => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "see the server's log; the request may be retried",
            ),
        },
    }
}

impl From<RuntimeError> for ApiError {
    fn from(error: RuntimeError) -> ApiError {
        let (status, hint) = status_of(&error);
        ApiError {
            status,
            class: error.class(),
            kind: error.kind().to_owned(),
            message: error.to_string(),
            hint,
        }
    }
}

/// The class and kind of an error answer, left on the response for the
/// metrics (`sandlog_errors_total{class, kind}`).
#[derive(Debug, Clone)]
pub struct ErrorKind {
    /// The class's name (`not_found`, `conflict`, …).
    pub class: &'static str,
    /// The stable kind.
    pub kind: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        response.extensions_mut().insert(ErrorKind {
            class: self.class.as_str(),
            kind: self.kind,
        });
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandlog_runtime::core::SessionId;

    #[test]
    fn classes_map_to_statuses() -> Result<(), String> {
        let id = SessionId::new_v4();
        let Err(invalid) = sandlog_runtime::core::WorkspacePath::parse("../x") else {
            return Err("`../x` was accepted as a workspace path".into());
        };
        let cases = [
            (RuntimeError::UnknownSession(id), StatusCode::NOT_FOUND),
            (
                RuntimeError::Store(sandlog_runtime::eventstore::EventStoreError::ReadOnly {
                    path: "sandlog.db".into(),
                }),
                StatusCode::FORBIDDEN,
            ),
            (
                RuntimeError::Busy {
                    session_id: id,
                    wait: std::time::Duration::ZERO,
                },
                StatusCode::CONFLICT,
            ),
            (
                RuntimeError::CodeTooLarge { size: 2, max: 1 },
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (
                RuntimeError::Invalid(invalid),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                RuntimeError::Io {
                    context: "x".into(),
                    source: std::io::Error::other("disk"),
                },
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(ApiError::from(error).status, status);
        }
        Ok(())
    }
}
