//! The one error enum of `sandlog-core`: every variant is a rejected input.

use crate::path_error::PathError;

/// What kind of failure an error is: every error of every crate has one,
/// so callers map errors to exit codes, HTTP statuses or exception classes
/// by this enum, never by comparing kind strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Something named does not exist: a root, a session, a file, a blob,
    /// a runtime, a point in history.
    NotFound,
    /// The state changed or is in use: re-read and decide again, or retry
    /// later (a version conflict, a busy database or session, a file that
    /// exists, a session no longer active or under a hold).
    Conflict,
    /// Stored data failed verification: the chain, a blob, the read
    /// models, the root's anchor, a signature.
    Integrity,
    /// A named bound was reached: a quota, a size limit, an input past its
    /// largest size.
    Limit,
    /// The input was malformed or names something it may not (a path
    /// leaving the workspace, a directory where a file is needed).
    BadInput,
    /// The operation is refused as such: content that was not kept or was
    /// erased.
    Refused,
    /// The environment failed: the disk, the database, the sandbox's
    /// machinery.
    Io,
}

impl ErrorClass {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::NotFound => "not_found",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Integrity => "integrity",
            ErrorClass::Limit => "limit",
            ErrorClass::BadInput => "bad_input",
            ErrorClass::Refused => "refused",
            ErrorClass::Io => "io",
        }
    }
}

/// A value handed to `sandlog-core` was not valid. Nothing was changed.
///
/// Callers show the message to whoever supplied the input; none of these is
/// worth retrying with the same input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A session id was not a UUID in canonical hyphenated form.
    #[error(
        "invalid session id {input:?}: expected a UUID such as 550e8400-e29b-41d4-a716-446655440000"
    )]
    InvalidSessionId {
        /// What was given.
        input: String,
    },
    /// A stream name was neither `system` nor `session/<uuid>`.
    #[error("invalid stream {input:?}: expected `system` or `session/<uuid>`")]
    InvalidStream {
        /// What was given.
        input: String,
    },
    /// A correlation id was neither a UUID nor acceptable text (see
    /// [`crate::correlation`]).
    #[error("invalid correlation id {input:?}: {reason}")]
    InvalidCorrelationId {
        /// What was given (cut to a readable length).
        input: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A node name was refused (see [`crate::node`]).
    #[error("invalid node name {input:?}: {reason}")]
    InvalidNodeName {
        /// What was given (cut to a readable length).
        input: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A workspace path was refused; the reason says why.
    #[error("invalid workspace path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given, in the text form (`docs/names.md`) when it
        /// came from names on disk.
        path: String,
        /// Why it was refused.
        reason: PathError,
    },
    /// A timestamp was not RFC 3339 / ISO 8601, or was out of range.
    #[error("invalid timestamp {input:?}: {reason}")]
    InvalidTimestamp {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A human duration such as `90s`, `15m`, `24h`, `7d` did not parse.
    #[error("invalid duration {input:?}: {reason} (examples: 90s, 15m, 24h, 7d)")]
    InvalidDuration {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A human size such as `512K`, `10MB`, `1GiB` did not parse.
    #[error("invalid size {input:?}: {reason} (examples: 512K, 10MB, 1GiB)")]
    InvalidSize {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A stored payload did not decode as its kind and schema say.
    #[error("payload of {kind} (schema {schema}) does not decode: {reason}")]
    InvalidPayload {
        /// The event kind.
        kind: String,
        /// The payload schema version.
        schema: u32,
        /// The decoder's message.
        reason: String,
    },
    /// A prune was asked to select nothing: no age and no retention cap
    /// (see [`crate::PrunePolicy::new`]).
    #[error(
        "say what to prune: an age (older_than: idle sessions), max_sessions or max_bytes \
         (the oldest beyond a cap); max_deletions only caps a run"
    )]
    NothingToPrune,
    /// A hex hash was not 64 hex digits.
    #[error("invalid hash {input:?}: expected 64 hex digits")]
    InvalidHash {
        /// What was given.
        input: String,
    },
}

impl CoreError {
    /// A stable, machine-readable name for the CLI's `{"error":{"kind"}}`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InvalidSessionId { .. } => "invalid_session_id",
            Self::InvalidStream { .. } => "invalid_stream",
            Self::InvalidCorrelationId { .. } => "invalid_correlation_id",
            Self::InvalidNodeName { .. } => "invalid_node_name",
            Self::InvalidPath { .. } => "invalid_path",
            Self::InvalidTimestamp { .. } => "invalid_timestamp",
            Self::InvalidDuration { .. } => "invalid_duration",
            Self::InvalidSize { .. } => "invalid_size",
            Self::InvalidPayload { .. } => "invalid_payload",
            Self::InvalidHash { .. } => "invalid_hash",
            Self::NothingToPrune => "nothing_to_prune",
        }
    }

    /// Every rejected input is [`ErrorClass::BadInput`].
    pub fn class(&self) -> ErrorClass {
        ErrorClass::BadInput
    }
}
