//! SQLite's failures, classified here and nowhere else: [`SqliteError`]
//! wraps the client's error, and turns into the shared crates'
//! [`EventStoreError::Backend`] and [`ProjectionError::Backend`] with its
//! class, stable kind and whether it is retryable decided from SQLite's own
//! codes. [`SqlResult::sql`] is how a `rusqlite` result reaches `?`.

use std::fmt;

use sandlog_core::ErrorClass;
use sandlog_eventstore::{BackendError, EventStoreError};
use sandlog_projections::ProjectionError;

/// A failure SQLite reported (disk full, locked past the busy timeout, an
/// I/O error, a constraint). Classified by [`SqliteError::is_busy`],
/// [`SqliteError::is_disk_full`] and [`SqliteError::is_corrupt`]; its text
/// is SQLite's own.
#[derive(Debug)]
pub struct SqliteError(rusqlite::Error);

impl SqliteError {
    /// Whether SQLite said "database or disk is full".
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self.0.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DiskFull)
        )
    }

    /// Whether SQLite said the file is damaged ("database disk image is
    /// malformed") or is not a database at all: stored data that cannot
    /// be read, an integrity failure rather than an I/O one.
    pub fn is_corrupt(&self) -> bool {
        matches!(
            self.0.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
        )
    }

    /// Whether SQLite said "database is locked" or "busy": the busy
    /// timeout ran out while another connection held a lock.
    pub fn is_busy(&self) -> bool {
        matches!(
            self.0.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }

    /// The failure as the shared crates carry it: busy is a retryable
    /// conflict, a damaged file an integrity failure, anything else
    /// (a full disk included) the database failing.
    pub fn classify(self) -> BackendError {
        let (class, kind) = if self.is_disk_full() {
            (ErrorClass::Io, "disk_full")
        } else if self.is_busy() {
            (ErrorClass::Conflict, "busy")
        } else if self.is_corrupt() {
            (ErrorClass::Integrity, "database_corrupt")
        } else {
            (ErrorClass::Io, "database")
        };
        BackendError {
            backend: "database",
            class,
            kind,
            retryable: self.is_busy(),
            source: Box::new(self),
        }
    }
}

impl fmt::Display for SqliteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SqliteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl From<rusqlite::Error> for SqliteError {
    fn from(error: rusqlite::Error) -> Self {
        SqliteError(error)
    }
}

impl From<SqliteError> for EventStoreError {
    fn from(error: SqliteError) -> Self {
        EventStoreError::Backend(error.classify())
    }
}

impl From<SqliteError> for ProjectionError {
    fn from(error: SqliteError) -> Self {
        ProjectionError::Backend(error.classify())
    }
}

/// A `rusqlite` result with its error as a [`SqliteError`], which `?`
/// turns into the caller's error (the shared crates' error types cannot
/// name the client, so the conversion goes through this crate's type).
pub trait SqlResult<T> {
    /// The result with its error wrapped.
    fn sql(self) -> Result<T, SqliteError>;
}

impl<T> SqlResult<T> for Result<T, rusqlite::Error> {
    fn sql(self) -> Result<T, SqliteError> {
        self.map_err(SqliteError)
    }
}
