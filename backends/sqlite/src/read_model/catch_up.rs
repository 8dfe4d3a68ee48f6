//! Catching the read models up with the log: folding the events after the
//! checkpoint in chunks, on one thread or with decoding pipelined.

use std::sync::mpsc::{self, Receiver, SyncSender};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, Row, params};
use sandlog_core::event::Event;
use sandlog_core::{CoreError, Position, StreamId, StreamVersion, Timestamp};
use sandlog_eventstore::EventStoreError;
use sandlog_projections::error::{ProjectionError, Result};
use sandlog_projections::state::EventContext;

use super::batch::{Batch, as_refs};
use super::schema::checkpoint;
use super::values::to_i64;
use crate::EventStore;
use crate::store::SqlResult;

/// Events folded per chunk during catch-up and rebuild. Bounds the memory
/// of the partial state (it is flushed and cleared per chunk) and, for a
/// catch-up (one transaction per chunk), how long other writers wait for
/// the write lock; a rebuild is one transaction of many chunks.
pub const CATCH_UP_CHUNK_EVENTS: usize = 50_000;

/// The columns of `events` that catch-up reads: what the fold needs and no
/// more. The event id, actor and hashes are the chain's business; building
/// whole envelopes (four allocations and a payload copy per row) was a
/// tenth of a rebuild's time.
const FOLD_COLUMNS: &str = "position, stream, version, kind, schema, recorded_at, payload";

/// Reads a row selected with [`FOLD_COLUMNS`]: the fields the fold reads,
/// and the payload decoded in place from the row's bytes. A row of the
/// wrong shape is [`EventStoreError::Corrupt`], as when the store reads it.
fn fold_row(
    row: &Row<'_>,
) -> Result<(EventContext, std::result::Result<Option<Event>, CoreError>)> {
    let malformed = |position: Position, reason: &str| {
        ProjectionError::Store(EventStoreError::Corrupt {
            position,
            reason: reason.to_owned(),
        })
    };
    let integer = |index: usize, position: Position, name: &str| -> Result<i64> {
        match row.get_ref(index).sql()? {
            ValueRef::Integer(value) => Ok(value),
            _ => Err(malformed(position, &format!("{name} is not an integer"))),
        }
    };
    let unsigned = |index: usize, position: Position, name: &str| -> Result<u64> {
        u64::try_from(integer(index, position, name)?)
            .map_err(|_| malformed(position, &format!("{name} is negative")))
    };
    let position = Position(unsigned(0, Position::ZERO, "position")?);
    let stream = match row.get_ref(1).sql()? {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| StreamId::parse(text).ok())
            .ok_or_else(|| malformed(position, "stream is not a stream id"))?,
        _ => return Err(malformed(position, "stream is not text")),
    };
    let kind = match row.get_ref(3).sql()? {
        ValueRef::Text(bytes) => {
            std::str::from_utf8(bytes).map_err(|_| malformed(position, "kind is not UTF-8"))?
        }
        _ => return Err(malformed(position, "kind is not text")),
    };
    let schema = u32::try_from(unsigned(4, position, "schema")?)
        .map_err(|_| malformed(position, "schema is out of range"))?;
    let payload = match row.get_ref(6).sql()? {
        ValueRef::Blob(bytes) => bytes,
        _ => return Err(malformed(position, "payload is not a blob")),
    };
    let context = EventContext {
        position,
        stream,
        version: StreamVersion(unsigned(2, position, "version")?),
        recorded_at: Timestamp::from_unix_micros(integer(5, position, "recorded_at")?),
    };
    Ok((context, Event::decode(kind, schema, payload)))
}

/// The statement selecting, with [`FOLD_COLUMNS`], the events after
/// position `?1` in position order, at most `?2` of them.
fn fold_rows_after(connection: &Connection) -> rusqlite::Result<rusqlite::CachedStatement<'_>> {
    connection.prepare_cached(&format!(
        "SELECT {FOLD_COLUMNS} FROM events WHERE position > ?1 ORDER BY position LIMIT ?2"
    ))
}

/// Folds the events after the checkpoint, up to `CATCH_UP_CHUNK_EVENTS`;
/// returns how many were folded.
pub(super) fn catch_up_chunk(connection: &Connection) -> Result<usize> {
    let Some((position, _)) = checkpoint(connection)? else {
        return Ok(0);
    };
    let mut batch = Batch::new(connection, position)?;
    let mut statement = fold_rows_after(connection).sql()?;
    let mut rows = statement
        .query(params![
            to_i64(position.0),
            to_i64(CATCH_UP_CHUNK_EVENTS as u64)
        ])
        .sql()?;
    let mut folded = 0;
    while let Some(row) = rows.next().sql()? {
        let (context, decoded) = fold_row(row)?;
        batch.apply_decoded(&context, as_refs(&decoded))?;
        folded += 1;
    }
    drop(rows);
    if folded > 0 {
        batch.flush()?;
    }
    Ok(folded)
}

/// Folds every event after the checkpoint in the caller's transaction,
/// chunk by chunk; returns how many were folded.
pub(super) fn catch_up_in(connection: &Connection) -> Result<u64> {
    let mut total = 0u64;
    loop {
        match catch_up_chunk(connection)? {
            0 => return Ok(total),
            folded => total += folded as u64,
        }
    }
}

/// Below this many events behind, catch-up folds on one thread: a second
/// thread and connection cost more than they save.
pub(super) const PIPELINED_CATCH_UP_EVENTS_MIN: u64 = 10_000;

/// Decoded events per hand-off from the catch-up reader to the folding
/// thread: enough work per hand-off that hand-offs cost next to nothing.
const DECODED_BATCH_EVENTS: usize = 1024;

/// Hand-offs in flight: a whole chunk. While the folding thread writes and
/// commits one chunk, the reader decodes the next instead of stalling; with
/// fewer in flight the reader stalls early in each chunk and the two threads
/// take turns instead of overlapping.
/// Costs about 15 MiB of decoded events, bounded by the chunk size.
const DECODED_BATCHES_IN_FLIGHT: usize = CATCH_UP_CHUNK_EVENTS / DECODED_BATCH_EVENTS;

/// One event as the fold needs it: its context and its decoded payload.
type DecodedEvent = (EventContext, std::result::Result<Option<Event>, CoreError>);

/// Consecutive events in log order, or the error that stopped the reader.
type DecodedBatch = Result<Vec<DecodedEvent>>;

/// The reading half of a pipelined catch-up: every event after `start`,
/// decoded and sent in batches, each read in its own snapshot. Positions
/// never change once written, so batches read in different snapshots join
/// up exactly. Stops at the first short batch (the head, then), at the
/// first error (sent), or when the folding side hangs up.
fn read_decoded(
    connection: &Connection,
    start: Position,
    batches: &SyncSender<DecodedBatch>,
    folded: &Receiver<Vec<DecodedEvent>>,
) {
    let result = (|| -> Result<()> {
        let mut after = start;
        loop {
            // Freeing folded events here, not on the folding thread (the
            // busier of the two), is a tenth of its work.
            while let Ok(done) = folded.try_recv() {
                drop(done);
            }
            // One short read transaction per batch, ended before the
            // (blocking) send: a reader that held its snapshot while waiting
            // would keep every checkpoint from resetting the WAL, which then
            // grew with the rebuild.
            let batch = {
                let transaction = connection.unchecked_transaction().sql()?;
                let mut statement = fold_rows_after(&transaction).sql()?;
                let mut rows = statement
                    .query(params![
                        to_i64(after.0),
                        to_i64(DECODED_BATCH_EVENTS as u64)
                    ])
                    .sql()?;
                let mut batch = Vec::with_capacity(DECODED_BATCH_EVENTS);
                while let Some(row) = rows.next().sql()? {
                    batch.push(fold_row(row)?);
                }
                batch
            };
            let Some((last, _)) = batch.last() else {
                return Ok(());
            };
            after = last.position;
            let complete = batch.len() == DECODED_BATCH_EVENTS;
            if batches.send(Ok(batch)).is_err() || !complete {
                // The folding side hung up, or this was the head.
                return Ok(());
            }
        }
    })();
    if let Err(error) = result {
        let _ = batches.send(Err(error));
    }
}

/// The batches of decoded events a pipelined catch-up receives, and the
/// way back for folded ones (freed by the reader).
pub(super) struct DecodedEvents {
    pub(super) batches: Receiver<DecodedBatch>,
    pub(super) folded: mpsc::Sender<Vec<DecodedEvent>>,
}

impl DecodedEvents {
    /// The next batch; `None` once the reader is done.
    fn next_batch(&mut self) -> Option<Result<Vec<DecodedEvent>>> {
        self.batches.recv().ok()
    }

    /// Hands a folded batch back to the reader to free.
    fn done(&self, batch: Vec<DecodedEvent>) {
        // A reader that has finished frees nothing more: drop it here.
        let _ = self.folded.send(batch);
    }
}

/// Runs `fold` with the events after `start` arriving, decoded, from a
/// reader thread on its own read-only connection. The reader stops at the
/// head, or when `fold` returns and drops its end of the channel.
pub(super) fn with_decoded_events<T>(
    store: &EventStore,
    start: Position,
    fold: impl FnOnce(&mut DecodedEvents) -> Result<T>,
) -> Result<T> {
    let connection = store.open_read_only_connection()?;
    let (sender, receiver) = mpsc::sync_channel(DECODED_BATCHES_IN_FLIGHT);
    let (folded_sender, folded_receiver) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || read_decoded(&connection, start, &sender, &folded_receiver));
        let mut events = DecodedEvents {
            batches: receiver,
            folded: folded_sender,
        };
        fold(&mut events)
    })
}

/// Folds, in `transaction`, what the reader sends after `start`: every
/// event to the head, or whole batches until at least `limit` events.
/// Flushes the partial state every [`CATCH_UP_CHUNK_EVENTS`] (a chunk may
/// run past it by less than one batch), so memory does not grow with the
/// number folded. Returns the events folded and the last one's position.
pub(super) fn fold_decoded(
    transaction: &Connection,
    events: &mut DecodedEvents,
    start: Position,
    limit: Option<u64>,
) -> Result<(u64, Position)> {
    let mut position = start;
    let mut total = 0u64;
    loop {
        let mut batch = Batch::new(transaction, position)?;
        let mut folded = 0u64;
        while folded < CATCH_UP_CHUNK_EVENTS as u64 {
            let Some(decoded_batch) = events.next_batch() else {
                break;
            };
            let decoded_batch = decoded_batch?;
            for (context, decoded) in &decoded_batch {
                batch.apply_decoded(context, as_refs(decoded))?;
            }
            folded += decoded_batch.len() as u64;
            events.done(decoded_batch);
        }
        if folded == 0 {
            return Ok((total, position));
        }
        batch.flush()?;
        position = batch.state.position;
        total += folded;
        if limit.is_some_and(|limit| total >= limit) {
            return Ok((total, position));
        }
    }
}

/// Folds what the reader sends, one chunk per transaction, while the
/// checkpoint stays where the folded events left it. Returns the events
/// folded; the caller folds whatever is left.
pub(super) fn pipelined_catch_up(store: &EventStore, start: Position) -> Result<u64> {
    with_decoded_events(store, start, |events| {
        let mut expected = start;
        let mut total = 0u64;
        loop {
            let folded = store.with_write_transaction(|transaction| -> Result<u64> {
                match checkpoint(transaction)? {
                    Some((position, _)) if position == expected => {}
                    // Someone else folded (or rebuilt) meanwhile.
                    _ => return Ok(0),
                }
                let (folded, position) = fold_decoded(
                    transaction,
                    events,
                    expected,
                    Some(CATCH_UP_CHUNK_EVENTS as u64),
                )?;
                expected = position;
                Ok(folded)
            })?;
            if folded == 0 {
                return Ok(total);
            }
            total += folded;
        }
    })
}
