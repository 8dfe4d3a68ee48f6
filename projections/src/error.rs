//! The one error enum of `sandlog-projections`.

use sandlog_core::SessionId;
use sandlog_eventstore::{BackendError, EventStoreError};

/// Errors of the projections.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    /// The log failed (see the inner error for how to handle it).
    #[error(transparent)]
    Store(#[from] EventStoreError),
    /// The read-model tables failed, as the backend classified it.
    #[error("read model: {0}")]
    Backend(#[source] BackendError),
    /// A read-model row does not decode: the read model is damaged. Rebuild
    /// it (`sandlog verify` checks it against a rebuild).
    #[error("read model is corrupt: {0}; rebuild it")]
    Corrupt(String),
    /// No session with this id.
    #[error("no session {0}")]
    UnknownSession(SessionId),
    /// A glob pattern did not parse.
    #[error("invalid pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
}

impl ProjectionError {
    /// The class of the failure.
    pub fn class(&self) -> sandlog_core::ErrorClass {
        use sandlog_core::ErrorClass;
        match self {
            Self::Store(error) => error.class(),
            Self::Backend(error) => error.class,
            Self::Corrupt(_) => ErrorClass::Integrity,
            Self::UnknownSession(_) => ErrorClass::NotFound,
            Self::InvalidPattern { .. } => ErrorClass::BadInput,
        }
    }

    /// The stable kind (`not_found`, `busy`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Store(error) => error.kind(),
            Self::Backend(error) => error.kind,
            Self::Corrupt(_) => "read_model_corrupt",
            Self::UnknownSession(_) => "not_found",
            Self::InvalidPattern { .. } => "invalid_pattern",
        }
    }
}

/// Result alias.
pub type Result<T, E = ProjectionError> = std::result::Result<T, E>;
