//! Classifying PostgreSQL errors by SQLSTATE and constraint name: a lost
//! race to retry, a full disk, or the database failing. Below the rest of
//! the backend: it depends on nothing of ours but the shared error type.

use postgres::error::SqlState;

/// Name of the primary key on `events.position` (a violation is a race
/// between appends: retried).
pub(crate) const EVENTS_POSITION_KEY: &str = "events_pkey";
/// Name of the unique constraint on `events.event_id`.
pub(crate) const EVENTS_EVENT_ID_KEY: &str = "events_event_id_key";
/// Name of the unique constraint on `events(stream, version)`.
pub(crate) const EVENTS_STREAM_VERSION_KEY: &str = "events_stream_version_key";
/// Name of the primary key on `merkle_nodes(level, idx)`.
pub(crate) const MERKLE_NODES_KEY: &str = "merkle_nodes_pkey";

/// Whether the same call may succeed if made again: another transaction
/// won a race (serialization failure, deadlock, or a unique key of the log
/// taken by an append that did not hold the same lock; the retry's checks
/// see that append and answer as the SQLite store would).
pub(crate) fn is_retryable(error: &postgres::Error) -> bool {
    let Some(code) = error.code() else {
        return false;
    };
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        return true;
    }
    *code == SqlState::UNIQUE_VIOLATION
        && error
            .as_db_error()
            .and_then(|db| db.constraint())
            .is_some_and(|constraint| {
                [
                    EVENTS_POSITION_KEY,
                    EVENTS_EVENT_ID_KEY,
                    EVENTS_STREAM_VERSION_KEY,
                    MERKLE_NODES_KEY,
                ]
                .contains(&constraint)
            })
}

/// The class of a PostgreSQL error: a lost race is a conflict to retry;
/// anything else is the database failing.
pub(crate) fn error_class(error: &postgres::Error) -> sandlog_core::ErrorClass {
    if is_retryable(error) {
        sandlog_core::ErrorClass::Conflict
    } else {
        sandlog_core::ErrorClass::Io
    }
}

/// The stable kind of a PostgreSQL error.
pub(crate) fn error_kind(error: &postgres::Error) -> &'static str {
    match error.code() {
        Some(code) if *code == SqlState::DISK_FULL => "disk_full",
        _ if is_retryable(error) => "busy",
        _ => "database",
    }
}

/// A PostgreSQL error as the shared crates carry it
/// ([`EventStoreError::Backend`](sandlog_eventstore::EventStoreError::Backend)).
pub(crate) fn backend_error(error: postgres::Error) -> sandlog_eventstore::BackendError {
    sandlog_eventstore::BackendError {
        backend: "PostgreSQL",
        class: error_class(&error),
        kind: error_kind(&error),
        retryable: is_retryable(&error),
        source: Box::new(error),
    }
}
