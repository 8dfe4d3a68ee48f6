//! The projections kept in the log's SQLite file: the read models, folded
//! inside the append transaction, and the queries over them. Every
//! `rusqlite` type this crate uses stays in this module and its children;
//! the rest of the crate sees the eventstore's [`EventStore`] and its own
//! types, and [`ProjectionError::Sqlite`] carries the eventstore's
//! [`SqliteError`].

pub mod evidence;
pub mod query;
pub mod read_model;

#[cfg(doc)]
use sandlog_eventstore::EventStore;
use sandlog_eventstore::SqliteError;

use crate::error::ProjectionError;

impl From<rusqlite::Error> for ProjectionError {
    fn from(error: rusqlite::Error) -> Self {
        ProjectionError::Sqlite(SqliteError::from(error))
    }
}
