//! Appending on PostgreSQL: the rules of [`sandlog_eventstore::batch`] (expected
//! versions, idempotent retries by event id, gapless positions, the hash
//! chain, `recorded_at` never going backwards, the Merkle nodes in the same
//! transaction), under the append lock.

use std::collections::HashMap;

use sandlog_core::merkle::Frontier;
use sandlog_core::{Envelope, Hash, NewEvent, Position, StreamId, StreamVersion, Timestamp};
use sandlog_eventstore::batch::{
    batch_recorded_at, chain_batch, check_version, is_same_event, validate_batch, validate_multi,
};
use sandlog_eventstore::blobs::{BlobPut, ErasedBlob};
use sandlog_eventstore::error::{EventStoreError, Result};
use sandlog_eventstore::merkle::nodes_to_store;
use sandlog_eventstore::types::{ExpectedVersion, Head};

use crate::read::envelope_from_row_at;
use crate::{APPEND_ATTEMPTS_MAX, PgEventStore, Session, to_i64};

/// The events and the Merkle nodes they complete, in one statement (one
/// round trip): both from arrays, one element per row.
const INSERT_EVENTS_AND_NODES: &str = "WITH inserted_events AS (\
     INSERT INTO events (position, stream, version, event_id, kind, schema, \
     recorded_at, actor, correlation_id, causation_id, payload, prev_hash, hash) \
     SELECT * FROM unnest($1::int8[], $2::text[], $3::int8[], $4::bytea[], $5::text[], \
     $6::int8[], $7::int8[], $8::text[], $9::bytea[], $10::bytea[], $11::bytea[], $12::bytea[], \
     $13::bytea[])), \
     inserted_nodes AS (INSERT INTO merkle_nodes (level, idx, hash) \
     SELECT * FROM unnest($14::int8[], $15::int8[], $16::bytea[])) \
     SELECT 1";

/// What an append needs to know before it inserts, in one statement: the
/// head, the stream's version, and the stored events of any of the batch's
/// ids (one row each; none gives one row of nulls). Run after the append
/// lock, it sees every append committed before, and this transaction's own.
const LOG_STATE: &str = "SELECT head.position, head.hash, head.recorded_at, \
     (SELECT version FROM events WHERE stream = $1 ORDER BY version DESC LIMIT 1), stored.* \
     FROM (SELECT 1) AS one \
     LEFT JOIN LATERAL (SELECT position, hash, recorded_at FROM events \
     ORDER BY position DESC LIMIT 1) AS head ON true \
     LEFT JOIN (SELECT position, stream, version, event_id, kind, schema, recorded_at, actor, \
     correlation_id, causation_id, payload, prev_hash, hash FROM events \
     WHERE event_id = ANY($2)) AS stored ON true";

/// The column of [`LOG_STATE`] where the stored envelope starts.
const LOG_STATE_STORED_AT: usize = 4;

/// The first retry's pause ceiling, doubled at each further attempt.
const RETRY_PAUSE_MICROS: u64 = 200;

/// The state of one append transaction after the lock: the tree's right
/// edge (loaded when first needed).
struct Tail {
    frontier: Option<Frontier>,
    /// The events this transaction appended, for the map's update at its
    /// end.
    appended: Vec<Envelope>,
}

/// An open write transaction on PostgreSQL, made by
/// [`PgEventStore::write`]: everything done through it commits together or
/// not at all.
pub struct PgWrite<'s, 'a, 't> {
    store: &'s PgEventStore,
    session: &'a mut Session<'t>,
    tail: Tail,
}

impl PgWrite<'_, '_, '_> {
    /// Appends `events` to `stream` if it is at `expected`, exactly as
    /// [`PgEventStore::append`] does, inside this transaction.
    pub fn append(
        &mut self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        self.store
            .insert_stream(self.session, &mut self.tail, stream, expected, events)
    }

    /// Stores `bytes` as a blob in this transaction (see
    /// [`PgEventStore::put_blob`]).
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobPut> {
        crate::blobs::put_in(self.session, bytes, self.store.clock.now())
    }
}

impl sandlog_eventstore::backend::UnitOfWork for PgWrite<'_, '_, '_> {
    fn append(
        &mut self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        PgWrite::append(self, stream, expected, events)
    }

    fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobPut> {
        PgWrite::put_blob(self, bytes)
    }

    fn put_blob_from(
        &mut self,
        reader: &mut dyn std::io::Read,
        expected: Option<Hash>,
        size_max: u64,
    ) -> Result<BlobPut> {
        let now = self.store.clock.now();
        crate::blobs::put_from_in(self.session, reader, expected, size_max, now)
    }

    fn erase_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>> {
        let now = self.store.clock.now();
        crate::blobs::erase_in(self.session, hash, now)
    }

    fn remove_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>> {
        crate::blobs::remove_in(self.session, hash)
    }
}

impl PgEventStore {
    /// Appends `events` to `stream` atomically if it is at `expected`;
    /// exactly [`crate::EventStore::append`]'s contract (a retry of a
    /// stored batch returns the stored envelopes, a reused id is
    /// [`EventStoreError::EventIdReused`]).
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
        self.append_streams(&[(stream, expected, events)])
    }

    /// Appends to several streams in one transaction; exactly
    /// [`crate::EventStore::append_batch`]'s contract.
    pub fn append_batch(
        &self,
        batch: &[(StreamId, ExpectedVersion, Vec<NewEvent>)],
    ) -> Result<Vec<Envelope>> {
        if validate_multi(batch)? == 0 {
            return Ok(Vec::new());
        }
        let streams: Vec<(StreamId, ExpectedVersion, &[NewEvent])> = batch
            .iter()
            .map(|(stream, expected, events)| (*stream, *expected, events.as_slice()))
            .collect();
        self.append_streams(&streams)
    }

    fn append_streams(
        &self,
        batch: &[(StreamId, ExpectedVersion, &[NewEvent])],
    ) -> Result<Vec<Envelope>> {
        let mut attempt = 1;
        loop {
            match self.append_once(batch) {
                Err(EventStoreError::Backend(error))
                    if error.retryable && attempt < APPEND_ATTEMPTS_MAX =>
                {
                    tracing::debug!(%error, attempt, "append lost a race; retrying");
                    self.frontier.clear();
                    // A random pause, growing with each loss, so that two
                    // writers that keep colliding stop doing so in step.
                    let ceiling = RETRY_PAUSE_MICROS << attempt;
                    let pause = uuid::Uuid::new_v4().as_u128() % u128::from(ceiling);
                    std::thread::sleep(std::time::Duration::from_micros(
                        u64::try_from(pause).unwrap_or(0),
                    ));
                    attempt += 1;
                }
                Err(error) => {
                    self.frontier.clear();
                    return Err(error);
                }
                Ok(envelopes) => return Ok(envelopes),
            }
        }
    }

    fn append_once(
        &self,
        batch: &[(StreamId, ExpectedVersion, &[NewEvent])],
    ) -> Result<Vec<Envelope>> {
        self.write(|write| {
            let mut envelopes = Vec::new();
            for (stream, expected, events) in batch {
                envelopes.extend(write.append(*stream, *expected, events)?);
            }
            Ok(envelopes)
        })
    }

    /// Runs `f` in one write transaction under the append lock and commits
    /// if it succeeds: every append and blob it made lands together (one
    /// WAL flush); if it fails, nothing does. The PostgreSQL counterpart of
    /// [`crate::EventStore::write`]; `f` runs with the append lock held, so
    /// keep it to storage work. Not retried: a lost race (only possible
    /// against a writer without the lock) returns the retryable error.
    pub fn write<T, E>(
        &self,
        f: impl FnOnce(&mut PgWrite<'_, '_, '_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<EventStoreError>,
    {
        let outcome = self.with_write_fallible(|session| {
            // The append lock first, before any blob's: every transaction
            // that takes both takes them in this order, so none waits for
            // another in a cycle.
            self.take_append_lock(session)?;
            let mut write = PgWrite {
                store: self,
                session,
                tail: Tail {
                    frontier: None,
                    appended: Vec::new(),
                },
            };
            let value = f(&mut write)?;
            // The map of stream heads, once per commit, as on SQLite.
            crate::map::commit(write.session, &write.tail.appended)?;
            Ok((value, write.tail.frontier))
        });
        match outcome {
            Ok((value, frontier)) => {
                if let Some(frontier) = frontier {
                    self.frontier.put(frontier);
                }
                Ok(value)
            }
            Err(error) => {
                self.frontier.clear();
                Err(error)
            }
        }
    }

    /// One stream's events inside the append transaction.
    fn insert_stream(
        &self,
        session: &mut Session<'_>,
        tail: &mut Tail,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        validate_batch(events)?;
        let Some(first) = events.first() else {
            return Ok(Vec::new());
        };
        let stream_text = stream.to_string();
        let (head, actual, stored) = log_state(session, &stream_text, events)?;
        if let Some(first_stored) = stored.get(&first.event_id.0.into_bytes()) {
            return retried_batch(&stored, first_stored, events, &stream_text);
        }
        check_version(stream, expected, actual)?;
        // An id stored elsewhere, not a retry: the insert would fail on it.
        if let Some((event, envelope)) = events.iter().find_map(|event| {
            stored
                .get(&event.event_id.0.into_bytes())
                .map(|envelope| (event, envelope))
        }) {
            return Err(EventStoreError::EventIdReused {
                event_id: event.event_id,
                position: envelope.position,
            });
        }

        let recorded_at = batch_recorded_at(&head, self.clock.now());
        let envelopes = chain_batch(&head, stream, actual, recorded_at, events);
        // The tree grows in the same transaction: it always covers the log.
        let size = head.position.0;
        let frontier = match tail.frontier.take() {
            Some(frontier) if frontier.size() == size => frontier,
            _ => match self.frontier.take_if(size) {
                Some(frontier) => frontier,
                None => crate::read::load_frontier(session, size)?,
            },
        };
        let frontier = tail.frontier.insert(frontier);
        let mut nodes = Nodes::default();
        for envelope in &envelopes {
            for (id, node) in nodes_to_store(frontier, &envelope.hash) {
                nodes.levels.push(i64::from(id.level));
                nodes.indexes.push(to_i64(id.index, "node index")?);
                nodes.hashes.push(node.0.to_vec());
            }
        }
        // Under the append lock no constraint can fail here: the checks
        // above saw every committed append. A writer that appended without
        // the lock makes it fail on a unique constraint, which is retried
        // (see `is_retryable`): the retry's checks then see that append.
        insert_rows(session, &envelopes, &nodes)?;
        tail.appended.extend(envelopes.iter().cloned());
        Ok(envelopes)
    }
}

/// The first event's id is stored: this is a retry if the whole batch is
/// stored, in order, unchanged (then its envelopes are returned), else a
/// reused id.
fn retried_batch(
    stored: &Stored,
    first_stored: &Envelope,
    events: &[NewEvent],
    stream_text: &str,
) -> Result<Vec<Envelope>> {
    let mut envelopes = Vec::with_capacity(events.len());
    let mut expected_position = first_stored.position;
    for event in events {
        let Some(envelope) = stored.get(&event.event_id.0.into_bytes()) else {
            return Err(EventStoreError::EventIdReused {
                event_id: events
                    .first()
                    .map_or(event.event_id, |first| first.event_id),
                position: first_stored.position,
            });
        };
        if !is_same_event(envelope, event, stream_text, expected_position) {
            return Err(EventStoreError::EventIdReused {
                event_id: event.event_id,
                position: envelope.position,
            });
        }
        expected_position = expected_position.next();
        envelopes.push(envelope.clone());
    }
    tracing::debug!(
        events = events.len(),
        "append was a retry of a stored batch; nothing appended"
    );
    Ok(envelopes)
}

/// Merkle nodes to insert, as columns.
#[derive(Default)]
pub(crate) struct Nodes {
    pub(crate) levels: Vec<i64>,
    pub(crate) indexes: Vec<i64>,
    pub(crate) hashes: Vec<Vec<u8>>,
}

/// The stored envelopes of a batch's ids, by id.
type Stored = HashMap<[u8; 16], Envelope>;

/// The head (genesis when the log is empty), `stream`'s version, and the
/// stored envelopes of any of `events`' ids ([`LOG_STATE`]).
fn log_state(
    session: &mut Session<'_>,
    stream: &str,
    events: &[NewEvent],
) -> Result<(Head, Option<StreamVersion>, Stored)> {
    let ids: Vec<&[u8]> = events
        .iter()
        .map(|event| event.event_id.0.as_bytes().as_slice())
        .collect();
    let rows = session.query(LOG_STATE, &[&stream, &ids])?;
    let corrupt =
        |position: Position, reason: String| EventStoreError::Corrupt { position, reason };
    let Some(row) = rows.first() else {
        return Err(corrupt(
            Position::ZERO,
            "the log state query returned no row".into(),
        ));
    };
    let unreadable =
        |what: &str, error: postgres::Error| corrupt(Position::ZERO, format!("{what}: {error}"));
    let position: Option<i64> = row.try_get(0).map_err(|e| unreadable("head position", e))?;
    let head = match position {
        None => Head {
            position: Position::ZERO,
            hash: Hash::GENESIS,
            recorded_at: None,
        },
        Some(position) => {
            let position = Position(
                u64::try_from(position)
                    .map_err(|_| corrupt(Position::ZERO, "head position is negative".into()))?,
            );
            let hash: &[u8] = row.try_get(1).map_err(|e| unreadable("head hash", e))?;
            let recorded_at: i64 = row.try_get(2).map_err(|e| unreadable("head time", e))?;
            Head {
                position,
                hash: Hash::from_slice(hash)
                    .ok_or_else(|| corrupt(position, "hash is not 32 bytes".into()))?,
                recorded_at: Some(Timestamp::from_unix_micros(recorded_at)),
            }
        }
    };
    let version: Option<i64> = row
        .try_get(3)
        .map_err(|e| unreadable("stream version", e))?;
    let version = version
        .map(|v| {
            u64::try_from(v)
                .map(StreamVersion)
                .map_err(|_| corrupt(Position::ZERO, "stream version is negative".into()))
        })
        .transpose()?;
    let mut stored = Stored::with_capacity(rows.len());
    for row in &rows {
        let found: Option<i64> = row
            .try_get(LOG_STATE_STORED_AT)
            .map_err(|e| unreadable("stored position", e))?;
        if found.is_some() {
            let envelope = envelope_from_row_at(row, LOG_STATE_STORED_AT)?;
            stored.insert(envelope.event_id.0.into_bytes(), envelope);
        }
    }
    Ok((head, version, stored))
}

/// Inserts `envelopes` as they are and the Merkle `nodes` (also used by
/// the verbatim import, whose batches span streams).
pub(crate) fn insert_rows(
    session: &mut Session<'_>,
    envelopes: &[Envelope],
    nodes: &Nodes,
) -> Result<u64> {
    let mut positions = Vec::with_capacity(envelopes.len());
    let mut versions = Vec::with_capacity(envelopes.len());
    let mut schemas = Vec::with_capacity(envelopes.len());
    let mut recorded = Vec::with_capacity(envelopes.len());
    for envelope in envelopes {
        positions.push(to_i64(envelope.position.0, "position")?);
        versions.push(to_i64(envelope.version.0, "version")?);
        schemas.push(i64::from(envelope.schema));
        recorded.push(envelope.recorded_at.unix_micros());
    }
    let streams: Vec<String> = envelopes.iter().map(|e| e.stream.to_string()).collect();
    let ids: Vec<&[u8]> = envelopes
        .iter()
        .map(|envelope| envelope.event_id.0.as_bytes().as_slice())
        .collect();
    let kinds: Vec<&str> = envelopes.iter().map(|e| e.kind.as_str()).collect();
    let actors: Vec<&str> = envelopes.iter().map(|e| e.actor.as_str()).collect();
    let correlations: Vec<Option<&[u8]>> = envelopes
        .iter()
        .map(|e| e.correlation_id.as_ref().map(|id| id.as_bytes().as_slice()))
        .collect();
    let causations: Vec<Option<&[u8]>> = envelopes
        .iter()
        .map(|e| e.causation_id.as_ref().map(|id| id.as_bytes().as_slice()))
        .collect();
    let payloads: Vec<&[u8]> = envelopes.iter().map(|e| e.payload.as_slice()).collect();
    let prevs: Vec<&[u8]> = envelopes.iter().map(|e| e.prev_hash.0.as_slice()).collect();
    let hashes: Vec<&[u8]> = envelopes.iter().map(|e| e.hash.0.as_slice()).collect();
    session.execute(
        INSERT_EVENTS_AND_NODES,
        &[
            &positions,
            &streams,
            &versions,
            &ids,
            &kinds,
            &schemas,
            &recorded,
            &actors,
            &correlations,
            &causations,
            &payloads,
            &prevs,
            &hashes,
            &nodes.levels,
            &nodes.indexes,
            &nodes.hashes,
        ],
    )
}
