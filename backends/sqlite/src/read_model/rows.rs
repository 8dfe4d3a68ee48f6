//! Reading the read-model rows back: sessions (with or without their
//! files), single files, totals and statistics, and the column encodings.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};
use sandlog_core::{Hash, SessionId, Timestamp, WorkspacePath};
use sandlog_projections::error::Result;
use sandlog_projections::state::{CleanupStats, FileEntry, SessionState};

use super::session_row::{SELECT_SESSIONS, session_from_row};
use super::values::{corrupt, stored_u64};
use crate::store::SqlResult;

/// A session as loaded from `rm_sessions`, with its row's key.
pub(crate) struct KeyedSession {
    pub(super) key: i64,
    pub(super) session: SessionState,
}

/// Loads one session (with its files) from the tables.
pub(crate) fn load_session(
    connection: &Connection,
    session_id: SessionId,
) -> Result<Option<SessionState>> {
    Ok(load_keyed_session(connection, session_id, true)?.map(|keyed| keyed.session))
}

/// [`load_session`], with the session's key; without its files (an empty
/// map, the counts still the row's) unless `with_files`.
pub(super) fn load_keyed_session(
    connection: &Connection,
    session_id: SessionId,
    with_files: bool,
) -> Result<Option<KeyedSession>> {
    let row = connection
        .prepare_cached(&format!("{} WHERE session_id = ?1", *SELECT_SESSIONS))
        .sql()?
        .query_row([session_id.to_string()], |row| Ok(session_from_row(row)))
        .optional()
        .sql()?;
    let Some((key, mut session)) = row.transpose()? else {
        return Ok(None);
    };
    if with_files {
        session.files = load_files_by_key(connection, key)?;
    }
    Ok(Some(KeyedSession { key, session }))
}

/// Loads one session's files (none if the session has no row).
pub(crate) fn load_files(
    connection: &Connection,
    session_id: SessionId,
) -> Result<BTreeMap<WorkspacePath, FileEntry>> {
    let key: Option<i64> = connection
        .prepare_cached("SELECT session_key FROM rm_sessions WHERE session_id = ?1")
        .sql()?
        .query_row([session_id.to_string()], |row| row.get(0))
        .optional()
        .sql()?;
    match key {
        Some(key) => load_files_by_key(connection, key),
        None => Ok(BTreeMap::new()),
    }
}

/// One file of a session, or `None` (unknown session or file).
pub(crate) fn load_file(
    connection: &Connection,
    session_id: SessionId,
    path: &WorkspacePath,
) -> Result<Option<FileEntry>> {
    let row = connection
        .prepare_cached(
            "SELECT f.size, f.blake3, f.updated_at FROM rm_files f \
             JOIN rm_sessions s ON s.session_key = f.session_key \
             WHERE s.session_id = ?1 AND f.path = ?2",
        )
        .sql()?
        .query_row(
            rusqlite::params![session_id.to_string(), path.as_str()],
            file_row,
        )
        .optional()
        .sql()?;
    row.map(|row| decode_file_row(row, path)).transpose()
}

/// The columns `size, blake3, updated_at` of a file row.
type FileRow = (i64, Vec<u8>, i64);

fn file_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
}

fn decode_file_row(
    (size, hash_bytes, updated_at): FileRow,
    path: &WorkspacePath,
) -> Result<FileEntry> {
    let blake3 = Hash::from_slice(&hash_bytes)
        .ok_or_else(|| corrupt(format!("hash of {:?}", path.as_str())))?;
    Ok(FileEntry {
        size: stored_u64(size, "rm_files.size")?,
        blake3,
        updated_at: Timestamp::from_unix_micros(updated_at),
    })
}

/// One file of the session whose row has `session_key`.
pub(super) fn load_file_by_key(
    connection: &Connection,
    session_key: i64,
    path: &WorkspacePath,
) -> Result<Option<FileEntry>> {
    let row = connection
        .prepare_cached(
            "SELECT size, blake3, updated_at FROM rm_files WHERE session_key = ?1 AND path = ?2",
        )
        .sql()?
        .query_row(params![session_key, path.as_str()], file_row)
        .optional()
        .sql()?;
    row.map(|row| decode_file_row(row, path)).transpose()
}

/// The files of the session whose row has `session_key`.
pub(super) fn load_files_by_key(
    connection: &Connection,
    session_key: i64,
) -> Result<BTreeMap<WorkspacePath, FileEntry>> {
    let mut statement = connection
        .prepare_cached(
            "SELECT path, size, blake3, updated_at FROM rm_files WHERE session_key = ?1",
        )
        .sql()?;
    let mut rows = statement.query([session_key]).sql()?;
    let mut files = BTreeMap::new();
    while let Some(row) = rows.next().sql()? {
        let path_text: String = row.get(0).sql()?;
        let path = WorkspacePath::parse(&path_text)
            .map_err(|error| corrupt(format!("file path {path_text:?}: {error}")))?;
        let hash_bytes: Vec<u8> = row.get(2).sql()?;
        let blake3 = Hash::from_slice(&hash_bytes)
            .ok_or_else(|| corrupt(format!("hash of {path_text:?}")))?;
        files.insert(
            path,
            FileEntry {
                size: stored_u64(row.get(1).sql()?, "rm_files.size")?,
                blake3,
                updated_at: Timestamp::from_unix_micros(row.get(3).sql()?),
            },
        );
    }
    Ok(files)
}

/// `(active sessions, their bytes)` from `rm_totals`.
pub(crate) fn load_active_totals(connection: &Connection) -> Result<(u64, u64)> {
    let (sessions, bytes): (i64, i64) = connection
        .prepare_cached("SELECT active_sessions, active_bytes FROM rm_totals WHERE id = 1")
        .sql()?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .sql()?;
    Ok((
        stored_u64(sessions, "rm_totals.active_sessions")?,
        stored_u64(bytes, "rm_totals.active_bytes")?,
    ))
}

pub(crate) fn load_stats(connection: &Connection) -> Result<CleanupStats> {
    let json: Option<String> = connection
        .prepare_cached("SELECT json FROM rm_stats WHERE id = 1")
        .sql()?
        .query_row([], |row| row.get(0))
        .optional()
        .sql()?;
    match json {
        None => Ok(CleanupStats::default()),
        Some(json) => {
            serde_json::from_str(&json).map_err(|error| corrupt(format!("stats: {error}")))
        }
    }
}
