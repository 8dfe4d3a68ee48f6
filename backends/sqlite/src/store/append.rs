//! Appending: one `BEGIN IMMEDIATE` transaction per batch, an
//! expected-version check per stream, gapless positions, the hash link, and
//! idempotent retries by event id.

use std::sync::atomic::Ordering;

use rusqlite::{OptionalExtension, Transaction, params};
use sandlog_core::{Envelope, NewEvent, StreamId, StreamVersion};
use sandlog_eventstore::batch::{
    batch_recorded_at, chain_batch, check_version, is_same_event, validate_batch, validate_multi,
};
use sandlog_eventstore::error::{EventStoreError, Result};
use sandlog_eventstore::types::{ExpectedVersion, Head};

use super::EventStore;
use super::rows::{envelope_from_row, read_head};
use crate::store::{SqlResult, SqliteError};

fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value)
        .map_err(|_| EventStoreError::InvalidBatch(format!("{what} {value} is out of range")))
}

/// The statement that inserts one event row; [`insert_event`] binds it.
pub(crate) const INSERT_EVENT: &str = "INSERT INTO events (position, stream, version, event_id, kind, \
     schema, recorded_at, actor, correlation_id, causation_id, payload, prev_hash, hash, stream_key) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// The key of `stream` (its text) in `streams`, given to it now if it has
/// none: one more than the largest, so streams written together get
/// neighbouring keys (see the module documentation of `sqlite`).
pub(crate) fn stream_key(connection: &rusqlite::Connection, stream: &str) -> Result<i64> {
    let mut select = connection
        .prepare_cached("SELECT key FROM streams WHERE stream = ?1")
        .sql()?;
    if let Some(key) = select
        .query_row([stream], |row| row.get(0))
        .optional()
        .sql()?
    {
        return Ok(key);
    }
    new_stream_key(connection, stream)
}

/// Gives `stream`, which has no key yet, the next one.
fn new_stream_key(connection: &rusqlite::Connection, stream: &str) -> Result<i64> {
    let mut insert = connection
        .prepare_cached("INSERT INTO streams (stream) VALUES (?1) RETURNING key")
        .sql()?;
    Ok(insert.query_row([stream], |row| row.get(0)).sql()?)
}

/// Inserts `envelope` (`stream` is its stream's text, `key` the stream's
/// [`stream_key`]) with `insert`, prepared from [`INSERT_EVENT`]: every
/// column as the envelope has it. The outer error is a position or version
/// out of range; the inner one is the insert's own, for the caller to
/// classify (a duplicate event id, a full disk).
pub(crate) fn insert_event(
    insert: &mut rusqlite::CachedStatement<'_>,
    stream: &str,
    key: i64,
    envelope: &Envelope,
) -> Result<rusqlite::Result<usize>> {
    Ok(insert.execute(params![
        to_i64(envelope.position.0, "position")?,
        stream,
        to_i64(envelope.version.0, "version")?,
        envelope.event_id.0.as_bytes().as_slice(),
        envelope.kind,
        envelope.schema,
        envelope.recorded_at.unix_micros(),
        envelope.actor,
        envelope
            .correlation_id
            .as_ref()
            .map(|id| id.as_bytes().as_slice()),
        envelope
            .causation_id
            .as_ref()
            .map(|id| id.as_bytes().as_slice()),
        envelope.payload,
        envelope.prev_hash.0.as_slice(),
        envelope.hash.0.as_slice(),
        key,
    ]))
}

impl EventStore {
    /// Refuses a write on a store opened read-only, or poisoned.
    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(EventStoreError::ReadOnly {
                path: self.path.clone(),
            });
        }
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(EventStoreError::Poisoned);
        }
        Ok(())
    }

    /// Commits, and poisons the store if the commit failed with an I/O
    /// error: after a failed fsync the kernel may have dropped dirty pages,
    /// so what is on disk is unknown and further writes could build on a
    /// state that is not there (the fsyncgate lesson). A full disk is not an
    /// I/O error: SQLite rolls that transaction back cleanly.
    pub(crate) fn commit(&self, transaction: Transaction<'_>) -> Result<()> {
        transaction.commit().map_err(|error| {
            if matches!(
                error.sqlite_error_code(),
                Some(rusqlite::ErrorCode::SystemIoFailure)
            ) {
                tracing::error!(%error, "commit failed with an I/O error; refusing further writes");
                self.poisoned.store(true, Ordering::SeqCst);
            }
            EventStoreError::from(SqliteError::from(error))
        })
    }

    /// Appends `events` to `stream` atomically, if the stream is at
    /// `expected`.
    ///
    /// Returns the stored envelopes. If the first event's id is already
    /// stored, this is a retry: the stored envelopes of the whole batch are
    /// returned and nothing is appended (if the stored batch differs, the
    /// call fails with [`EventStoreError::EventIdReused`]). The append hook,
    /// if any, runs inside the transaction. An empty batch appends nothing.
    pub fn append(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        validate_batch(events)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.write(|write| write.append(stream, expected, events))
    }

    /// Appends to several streams in one transaction: all of it or none.
    ///
    /// Every invariant of [`EventStore::append`] holds for the whole batch:
    /// each stream is checked against its own expected version (the first
    /// stream, in the order given, that does not match fails the call with
    /// [`EventStoreError::VersionConflict`] naming it, and nothing is
    /// appended), positions stay gapless in the order given, the hash chain
    /// and the Merkle tree cover every event, the append hook sees every
    /// envelope in the same transaction, and a retry of a stored batch
    /// returns the stored envelopes. The events of all streams together are
    /// bounded by `BATCH_EVENTS_MAX`; a stream may appear once. Entries
    /// without events are ignored.
    ///
    /// Returns the envelopes in position order.
    pub fn append_batch(
        &self,
        batch: &[(StreamId, ExpectedVersion, Vec<NewEvent>)],
    ) -> Result<Vec<Envelope>> {
        let total = validate_multi(batch)?;
        if total == 0 {
            return Ok(Vec::new());
        }
        self.write(|write| {
            let mut envelopes = Vec::with_capacity(total);
            for (stream, expected, events) in batch {
                envelopes.extend(write.append(*stream, *expected, events)?);
            }
            Ok(envelopes)
        })
    }
}

/// What a write transaction knows of the log's tip, carried from one
/// stream's batch to the next so that a write of many streams reads the
/// head and loads the Merkle frontier once, not once per stream.
#[derive(Default)]
pub(crate) struct Tip {
    /// The head as of the last batch inserted, if read yet.
    head: Option<Head>,
    /// The tree of the log up to `head`, if loaded yet.
    pub(crate) frontier: Option<sandlog_core::merkle::Frontier>,
}

/// Inserts one batch inside an open write transaction: the expected-version
/// check, positions, chain hashes and the Merkle leaves (growing the tip's
/// frontier). Returns the envelopes and whether they are new (false for a
/// retry of a stored batch). The caller runs the append hook and commits.
///
/// The idempotency lookup (is the first event's id stored?) runs only when
/// the batch cannot be appended as it is: a retry of a stored batch either
/// finds its stream moved past `expected` or, with
/// [`ExpectedVersion::Any`], fails the unique event-id index on its first
/// insert, before anything of it is inserted. Either way the stored batch
/// is returned, as if it had been looked up first.
pub(crate) fn insert_batch(
    store: &EventStore,
    transaction: &Transaction<'_>,
    tip: &mut Tip,
    stream: StreamId,
    expected: ExpectedVersion,
    events: &[NewEvent],
) -> Result<(Vec<Envelope>, bool)> {
    validate_batch(events)?;
    let Some(first) = events.first() else {
        return Ok((Vec::new(), false));
    };
    let stream_text = stream.to_string();
    let (key, actual) = stream_state(transaction, &stream_text)?;
    if let Err(conflict) = check_version(stream, expected, actual) {
        return match stored_batch(transaction, &stream_text, events, first)? {
            Some(stored) => Ok((stored, false)),
            None => Err(conflict),
        };
    }
    let head = match tip.head.take() {
        Some(head) => head,
        None => read_head(transaction)?,
    };
    let recorded_at = batch_recorded_at(&head, store.clock.now());
    let envelopes = chain_batch(&head, stream, actual, recorded_at, events);
    {
        let key = match key {
            Some(key) => key,
            None => new_stream_key(transaction, &stream_text)?,
        };
        let mut insert = transaction.prepare_cached(INSERT_EVENT).sql()?;
        for (index, (envelope, event)) in envelopes.iter().zip(events).enumerate() {
            let inserted = insert_event(&mut insert, &stream_text, key, envelope)?;
            if let Err(error) = inserted {
                // Nothing of this batch is inserted yet when its first
                // event is refused: the head stays as it was.
                if index == 0 {
                    tip.head = Some(head);
                    if let Some(stored) = stored_batch(transaction, &stream_text, events, first)? {
                        return Ok((stored, false));
                    }
                }
                return Err(map_insert_error(transaction, error, event)?);
            }
        }
    }
    // The tree grows in the same transaction: it always covers the log.
    let tree_started = std::time::Instant::now();
    let tree = match tip.frontier.take() {
        Some(tree) if tree.size() == head.position.0 => tree,
        _ => match store.frontier.take_if(head.position.0) {
            Some(tree) => tree,
            None => super::merkle::load_frontier(transaction, head.position.0)?,
        },
    };
    let tree = tip.frontier.insert(tree);
    super::merkle::append_leaves(transaction, tree, &envelopes)?;
    let tree_nanos = u64::try_from(tree_started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    store
        .merkle_nanos
        .fetch_add(tree_nanos, std::sync::atomic::Ordering::Relaxed);
    tip.head = envelopes.last().map(|last| Head {
        position: last.position,
        hash: last.hash,
        recorded_at: Some(last.recorded_at),
    });
    Ok((envelopes, true))
}

/// A stream's key in `streams` (none before its first event) and its
/// version (its last event's), in one statement.
fn stream_state(
    transaction: &Transaction<'_>,
    stream_text: &str,
) -> Result<(Option<i64>, Option<StreamVersion>)> {
    let mut select = transaction
        .prepare_cached(
            "SELECT key, (SELECT version FROM events WHERE stream_key = streams.key \
         ORDER BY version DESC LIMIT 1) FROM streams WHERE stream = ?1",
        )
        .sql()?;
    let row: Option<(i64, Option<i64>)> = select
        .query_row([stream_text], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .sql()?;
    let Some((key, version)) = row else {
        return Ok((None, None));
    };
    let version = version
        .map(|version| {
            u64::try_from(version).map_err(|_| EventStoreError::Corrupt {
                position: sandlog_core::Position::ZERO,
                reason: format!("stream {stream_text} has a negative version {version}"),
            })
        })
        .transpose()?;
    Ok((Some(key), version.map(StreamVersion)))
}

/// The idempotency check: if `first`'s id is stored, returns the stored
/// batch (or an error if it is not the same batch).
fn stored_batch(
    transaction: &Transaction<'_>,
    stream_text: &str,
    events: &[NewEvent],
    first: &NewEvent,
) -> Result<Option<Vec<Envelope>>> {
    let Some(first_stored) = stored_by_id(transaction, first)? else {
        return Ok(None);
    };
    let mut stored = Vec::with_capacity(events.len());
    let mut expected_position = first_stored.position;
    for event in events {
        let envelope = match stored_by_id(transaction, event)? {
            Some(envelope) => envelope,
            None => {
                return Err(EventStoreError::EventIdReused {
                    event_id: first.event_id,
                    position: first_stored.position,
                });
            }
        };
        if !is_same_event(&envelope, event, stream_text, expected_position) {
            return Err(EventStoreError::EventIdReused {
                event_id: event.event_id,
                position: envelope.position,
            });
        }
        expected_position = expected_position.next();
        stored.push(envelope);
    }
    tracing::debug!(
        events = events.len(),
        "append was a retry of a stored batch; nothing appended"
    );
    Ok(Some(stored))
}

fn stored_by_id(transaction: &Transaction<'_>, event: &NewEvent) -> Result<Option<Envelope>> {
    let mut statement = transaction.prepare_cached(
        "SELECT position, stream, version, event_id, kind, schema, recorded_at, actor, correlation_id, \
         causation_id, payload, prev_hash, hash FROM events WHERE event_id = ?1",
    ).sql()?;
    let mut rows = statement
        .query([event.event_id.0.as_bytes().as_slice()])
        .sql()?;
    match rows.next().sql()? {
        Some(row) => Ok(Some(envelope_from_row(row)?)),
        None => Ok(None),
    }
}

/// Turns a failed insert into the error that explains it.
fn map_insert_error(
    transaction: &Transaction<'_>,
    error: rusqlite::Error,
    event: &NewEvent,
) -> Result<EventStoreError> {
    if matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation)
    ) && let Some(stored) = stored_by_id(transaction, event)?
    {
        return Ok(EventStoreError::EventIdReused {
            event_id: event.event_id,
            position: stored.position,
        });
    }
    Ok(SqliteError::from(error).into())
}
