//! A session's row in `rm_sessions`: its columns named once, in one order,
//! for every statement that writes or reads it, and the one decoding of a
//! row (a stored value that cannot be read is an integrity failure naming
//! its column, never a default).

use std::sync::LazyLock;

use rusqlite::Row;
use rusqlite::types::ToSql;
use sandlog_core::event::Outcome;
use sandlog_core::{Position, SessionId, StreamVersion, Timestamp};
use sandlog_projections::error::Result;
use sandlog_projections::state::{SessionState, SessionStatus};

use super::values::{corrupt, decode_readonly, encode_readonly, to_i64};
use crate::store::SqlResult;

/// The columns of a session's row after its key, in the order every
/// statement below binds and reads them. `schema.rs` creates the table.
pub(crate) const SESSION_COLUMNS: [&str; 17] = [
    "session_id",
    "status",
    "created_at",
    "updated_at",
    "exec_count",
    "last_outcome",
    "bytes",
    "file_count",
    "legacy",
    "labels",
    "version",
    "last_position",
    "held",
    "group_name",
    "max_size",
    "readonly",
    "node",
];

/// Inserts a row: `?1` the session id, then the other columns in order.
pub(crate) static INSERT_SESSION: LazyLock<String> = LazyLock::new(|| {
    let placeholders: Vec<String> = (1..=SESSION_COLUMNS.len())
        .map(|index| format!("?{index}"))
        .collect();
    format!(
        "INSERT INTO rm_sessions ({}) VALUES ({})",
        SESSION_COLUMNS.join(", "),
        placeholders.join(", ")
    )
});

/// Updates the row keyed `?1`: every column but the session id, bound in
/// the same places as [`INSERT_SESSION`]'s.
pub(crate) static UPDATE_SESSION: LazyLock<String> = LazyLock::new(|| {
    let assignments: Vec<String> = SESSION_COLUMNS
        .iter()
        .enumerate()
        .skip(1)
        .map(|(index, column)| format!("{column} = ?{}", index + 1))
        .collect();
    format!(
        "UPDATE rm_sessions SET {} WHERE session_key = ?1",
        assignments.join(", ")
    )
});

/// Selects rows for [`session_from_row`]: the key, then the columns. A
/// caller appends its `WHERE` and `ORDER BY`.
pub(crate) static SELECT_SESSIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT session_key, {} FROM rm_sessions",
        SESSION_COLUMNS.join(", ")
    )
});

/// A session's values as stored, for [`INSERT_SESSION`] and
/// [`UPDATE_SESSION`].
pub(crate) struct SessionValues<'a> {
    status: &'static str,
    created_at: Option<i64>,
    updated_at: Option<i64>,
    exec_count: i64,
    last_outcome: Option<&'static str>,
    bytes: i64,
    file_count: i64,
    legacy: bool,
    labels: String,
    version: i64,
    last_position: i64,
    held: Option<&'a str>,
    group: Option<&'a str>,
    max_size: Option<i64>,
    readonly: Option<String>,
    node: Option<&'a str>,
}

impl<'a> SessionValues<'a> {
    /// Encodes `session`'s columns.
    pub(crate) fn of(session: &'a SessionState) -> Result<Self> {
        Ok(SessionValues {
            status: session.status.as_str(),
            created_at: session.created_at.map(Timestamp::unix_micros),
            updated_at: session.updated_at.map(Timestamp::unix_micros),
            exec_count: to_i64(session.exec_count),
            last_outcome: session.last_outcome.map(Outcome::as_str),
            bytes: to_i64(session.bytes),
            file_count: to_i64(session.file_count),
            legacy: session.legacy,
            labels: serde_json::to_string(&session.labels)
                .map_err(|error| corrupt(error.to_string()))?,
            version: to_i64(session.version.0),
            last_position: to_i64(session.last_position.0),
            held: session.held.as_deref(),
            group: session.group.as_deref(),
            max_size: session.max_size.map(to_i64),
            readonly: encode_readonly(&session.readonly)?,
            node: session.node.as_deref(),
        })
    }

    /// The parameters in [`SESSION_COLUMNS`]' order, `first` in `?1`'s
    /// place (the session id to insert, the key to update).
    pub(crate) fn params<'p>(&'p self, first: &'p dyn ToSql) -> [&'p dyn ToSql; 17] {
        [
            first,
            &self.status,
            &self.created_at,
            &self.updated_at,
            &self.exec_count,
            &self.last_outcome,
            &self.bytes,
            &self.file_count,
            &self.legacy,
            &self.labels,
            &self.version,
            &self.last_position,
            &self.held,
            &self.group,
            &self.max_size,
            &self.readonly,
            &self.node,
        ]
    }
}

/// The value of column `index` of [`SESSION_COLUMNS`] in a row of
/// [`SELECT_SESSIONS`] (the key is column 0).
fn get<T: rusqlite::types::FromSql>(row: &Row<'_>, index: usize) -> Result<T> {
    Ok(row.get::<_, T>(index + 1).sql()?)
}

/// A stored count or position: a negative one is damage, named by its
/// column, not a zero.
fn count(row: &Row<'_>, index: usize, session: &str) -> Result<u64> {
    let value: i64 = get(row, index)?;
    u64::try_from(value).map_err(|_| {
        corrupt(format!(
            "session {session} has {} {value}",
            SESSION_COLUMNS.get(index).copied().unwrap_or("?")
        ))
    })
}

/// Decodes a row of [`SELECT_SESSIONS`]: its key and the session, without
/// its files (an empty map; the counts are the row's).
pub(crate) fn session_from_row(row: &Row<'_>) -> Result<(i64, SessionState)> {
    let key: i64 = row.get(0).sql()?;
    let id_text: String = get(row, 0)?;
    let session_id =
        SessionId::parse(&id_text).map_err(|_| corrupt(format!("session id {id_text:?}")))?;
    let status_text: String = get(row, 1)?;
    let status = SessionStatus::parse(&status_text)
        .ok_or_else(|| corrupt(format!("session {id_text} has status {status_text:?}")))?;
    let last_outcome = match get::<Option<String>>(row, 5)? {
        None => None,
        Some(text) => Some(
            serde_json::from_value::<Outcome>(serde_json::Value::String(text.clone()))
                .map_err(|_| corrupt(format!("session {id_text} has outcome {text:?}")))?,
        ),
    };
    let labels_text: String = get(row, 9)?;
    let labels = serde_json::from_str(&labels_text)
        .map_err(|error| corrupt(format!("session {id_text} labels: {error}")))?;
    let readonly = decode_readonly(get::<Option<String>>(row, 15)?.as_deref())
        .map_err(|error| corrupt(format!("session {id_text} readonly: {error}")))?;
    let max_size = match get::<Option<i64>>(row, 14)? {
        None => None,
        Some(size) => Some(
            u64::try_from(size)
                .map_err(|_| corrupt(format!("session {id_text} has max_size {size}")))?,
        ),
    };
    let session = SessionState {
        session_id,
        status,
        created_at: get::<Option<i64>>(row, 2)?.map(Timestamp::from_unix_micros),
        updated_at: get::<Option<i64>>(row, 3)?.map(Timestamp::from_unix_micros),
        exec_count: count(row, 4, &id_text)?,
        last_outcome,
        bytes: count(row, 6, &id_text)?,
        file_count: count(row, 7, &id_text)?,
        legacy: get(row, 8)?,
        labels,
        version: StreamVersion(count(row, 10, &id_text)?),
        last_position: Position(count(row, 11, &id_text)?),
        files: Default::default(),
        held: get(row, 12)?,
        group: get(row, 13)?,
        max_size,
        readonly,
        node: get(row, 16)?,
    };
    Ok((key, session))
}
