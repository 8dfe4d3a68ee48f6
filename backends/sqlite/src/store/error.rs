//! SQLite's errors behind the crate's own type: [`SqliteError`] is what
//! [`EventStoreError::Sqlite`](crate::EventStoreError::Sqlite) carries, so
//! no `rusqlite` type appears in the crate's public signatures outside this
//! backend. A leaf: it imports nothing of the crate, so `error.rs` can name
//! it without a cycle.

use std::fmt;

/// A failure SQLite reported (disk full, locked past the busy timeout, an
/// I/O error, a constraint). Classified by [`SqliteError::is_busy`] and
/// [`SqliteError::is_disk_full`]; its text is SQLite's own.
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
