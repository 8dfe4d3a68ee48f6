//! Decoding the `events` table's rows and the small reads of the head and
//! of a stream's version that appends, reads and imports share. Depends
//! only on the shared types and the errors.

use rusqlite::types::ValueRef;
use rusqlite::{OptionalExtension, Row};
use sandlog_core::{Envelope, EventId, Hash, Position, StreamId, StreamVersion, Timestamp};
use sandlog_eventstore::error::{EventStoreError, Result, stored_u64};
use sandlog_eventstore::types::Head;
use uuid::Uuid;

use crate::store::SqlResult;

fn malformed(position: Position, reason: impl Into<String>) -> EventStoreError {
    EventStoreError::Corrupt {
        position,
        reason: reason.into(),
    }
}

fn uuid_column(
    row: &Row<'_>,
    index: usize,
    position: Position,
    name: &str,
) -> Result<Option<Uuid>> {
    match row.get_ref(index).sql()? {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(bytes) => Uuid::from_slice(bytes)
            .map(Some)
            .map_err(|_| malformed(position, format!("{name} is not 16 bytes"))),
        _ => Err(malformed(position, format!("{name} is not a blob"))),
    }
}

fn hash_column(row: &Row<'_>, index: usize, position: Position, name: &str) -> Result<Hash> {
    match row.get_ref(index).sql()? {
        ValueRef::Blob(bytes) => Hash::from_slice(bytes)
            .ok_or_else(|| malformed(position, format!("{name} is not 32 bytes"))),
        _ => Err(malformed(position, format!("{name} is not a blob"))),
    }
}

fn u64_column(row: &Row<'_>, index: usize, position: Position, name: &str) -> Result<u64> {
    match row.get_ref(index).sql()? {
        ValueRef::Integer(value) => {
            u64::try_from(value).map_err(|_| malformed(position, format!("{name} is negative")))
        }
        _ => Err(malformed(position, format!("{name} is not an integer"))),
    }
}

fn str_column<'row>(
    row: &'row Row<'_>,
    index: usize,
    position: Position,
    name: &str,
) -> Result<&'row str> {
    match row.get_ref(index).sql()? {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .map_err(|_| malformed(position, format!("{name} is not UTF-8"))),
        _ => Err(malformed(position, format!("{name} is not text"))),
    }
}

fn text_column(row: &Row<'_>, index: usize, position: Position, name: &str) -> Result<String> {
    str_column(row, index, position, name).map(str::to_owned)
}

/// Builds an envelope from a row selected with [`ENVELOPE_COLUMNS`](sandlog_eventstore::read::ENVELOPE_COLUMNS) (read
/// models catching up inside a write transaction use it too).
/// A row of the wrong shape is [`EventStoreError::Corrupt`], never a panic.
pub fn envelope_from_row(row: &Row<'_>) -> Result<Envelope> {
    let position = Position(u64_column(row, 0, Position::ZERO, "position")?);
    // Parsed in place: the envelope keeps the `StreamId`, not the text.
    let stream = StreamId::parse(str_column(row, 1, position, "stream")?)
        .map_err(|error| malformed(position, error.to_string()))?;
    let event_id = uuid_column(row, 3, position, "event_id")?
        .ok_or_else(|| malformed(position, "event_id is null"))?;
    let payload = match row.get_ref(10).sql()? {
        ValueRef::Blob(bytes) => bytes.to_vec(),
        _ => return Err(malformed(position, "payload is not a blob")),
    };
    let schema = u64_column(row, 5, position, "schema")?;
    let recorded_at = match row.get_ref(6).sql()? {
        ValueRef::Integer(micros) => Timestamp::from_unix_micros(micros),
        _ => return Err(malformed(position, "recorded_at is not an integer")),
    };
    Ok(Envelope {
        position,
        stream,
        version: StreamVersion(u64_column(row, 2, position, "version")?),
        event_id: EventId(event_id),
        kind: text_column(row, 4, position, "kind")?,
        schema: u32::try_from(schema).map_err(|_| malformed(position, "schema is out of range"))?,
        recorded_at,
        actor: text_column(row, 7, position, "actor")?,
        correlation_id: uuid_column(row, 8, position, "correlation_id")?,
        causation_id: uuid_column(row, 9, position, "causation_id")?,
        payload,
        prev_hash: hash_column(row, 11, position, "prev_hash")?,
        hash: hash_column(row, 12, position, "hash")?,
    })
}

/// The log's length (its last position; 0 when empty), read on
/// `connection` in whatever transaction it is in. Reads the rowid only, so
/// it works on every schema version and on rows that do not decode.
pub fn log_length(connection: &rusqlite::Connection) -> Result<u64> {
    let head: i64 = connection
        .query_row("SELECT coalesce(max(position), 0) FROM events", [], |row| {
            row.get(0)
        })
        .sql()?;
    stored_u64(head, "events.position")
}

pub(crate) fn read_head(transaction: &rusqlite::Connection) -> Result<Head> {
    let mut statement = transaction
        .prepare_cached(
            "SELECT position, hash, recorded_at FROM events ORDER BY position DESC LIMIT 1",
        )
        .sql()?;
    let head = statement
        .query_row([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, Vec<u8>>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })
        .optional()
        .sql()?;
    match head {
        None => Ok(Head {
            position: Position::ZERO,
            hash: Hash::GENESIS,
            recorded_at: None,
        }),
        Some((position, hash, recorded_at)) => {
            let position = Position(stored_u64(position, "events.position")?);
            let hash = Hash::from_slice(&hash).ok_or_else(|| EventStoreError::Corrupt {
                position,
                reason: "hash is not 32 bytes".into(),
            })?;
            Ok(Head {
                position,
                hash,
                recorded_at: Some(Timestamp::from_unix_micros(recorded_at)),
            })
        }
    }
}

pub(crate) fn read_stream_version(
    connection: &rusqlite::Connection,
    stream: &str,
) -> Result<Option<StreamVersion>> {
    let mut statement = connection.prepare_cached(
        "SELECT version FROM events WHERE stream_key = (SELECT key FROM streams WHERE stream = ?1) \
         ORDER BY version DESC LIMIT 1",
    ).sql()?;
    let version: Option<i64> = statement
        .query_row([stream], |row| row.get(0))
        .optional()
        .sql()?;
    version
        .map(|v| Ok(StreamVersion(stored_u64(v, "events.version")?)))
        .transpose()
}
