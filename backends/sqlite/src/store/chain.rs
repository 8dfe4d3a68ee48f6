//! The hash chain of the SQLite file: `verify` walks the whole log once,
//! in constant memory, and names the first bad position.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, SyncSender};

use rusqlite::OptionalExtension;
use rusqlite::types::ValueRef;
use sandlog_core::envelope::EnvelopeFields;
use sandlog_core::{Hash, Position, append_chain_input};
use sandlog_eventstore::chain::{Digest, VerifyReport};
use sandlog_eventstore::error::{ChainProblem, EventStoreError, Result};

use super::EventStore;
use crate::store::SqlResult;

fn blob<'a>(value: ValueRef<'a>, position: Position, name: &str) -> Result<&'a [u8]> {
    match value {
        ValueRef::Blob(bytes) => Ok(bytes),
        ValueRef::Null if name == "correlation_id" || name == "causation_id" => Ok(&[]),
        _ => Err(broken(
            position,
            ChainProblem::Malformed(format!("{name} is not a blob")),
        )),
    }
}

fn text<'a>(value: ValueRef<'a>, position: Position, name: &str) -> Result<&'a str> {
    match value {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes).map_err(|_| {
            broken(
                position,
                ChainProblem::Malformed(format!("{name} is not UTF-8")),
            )
        }),
        _ => Err(broken(
            position,
            ChainProblem::Malformed(format!("{name} is not text")),
        )),
    }
}

fn integer(value: ValueRef<'_>, position: Position, name: &str) -> Result<i64> {
    match value {
        ValueRef::Integer(number) => Ok(number),
        _ => Err(broken(
            position,
            ChainProblem::Malformed(format!("{name} is not an integer")),
        )),
    }
}

fn broken(position: Position, problem: ChainProblem) -> EventStoreError {
    EventStoreError::ChainBroken { position, problem }
}

impl EventStore {
    /// Walks the whole chain: every position from 1 is present once and in
    /// order, every `prev_hash` is the previous `hash`, and every `hash` is
    /// the hash of its row. Constant memory: a few batches of rows in flight
    /// between a reading and a hashing thread.
    ///
    /// Errors with [`EventStoreError::ChainBroken`] naming the first bad
    /// position.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_inner(None, |_| {})
    }

    /// [`EventStore::verify`], and also that the log still extends `digest`:
    /// the event at the digest's position has the digest's hash.
    pub fn verify_against(&self, digest: Digest) -> Result<VerifyReport> {
        self.verify_inner(Some(digest), |_| {})
    }

    /// [`EventStore::verify`] with a progress callback (events checked so
    /// far, every [`sandlog_eventstore::read::PAGE_EVENTS`] events).
    pub fn verify_with_progress(
        &self,
        digest: Option<Digest>,
        progress: impl FnMut(u64),
    ) -> Result<VerifyReport> {
        self.verify_inner(digest, progress)
    }

    fn verify_inner(
        &self,
        digest: Option<Digest>,
        mut progress: impl FnMut(u64),
    ) -> Result<VerifyReport> {
        // Two threads: this one hashes and checks, a reader steps SQLite and
        // lays each row's chain input out in batches. Each row's hash check
        // needs only that row and its stored `prev_hash`, so the two halves
        // overlap and the walk runs at the speed of the slower one instead
        // of their sum. Batches are recycled: memory stays constant.
        let (batches_tx, batches_rx) = mpsc::sync_channel::<Batch>(VERIFY_BATCHES_IN_FLIGHT);
        let (spare_tx, spare_rx) = mpsc::channel::<Batch>();
        std::thread::scope(|scope| {
            scope.spawn(move || read_rows(self, &batches_tx, &spare_rx));
            let mut prev_hash = Hash::GENESIS;
            let mut events = 0u64;
            let mut digest_checked = false;
            // Ends when the reader has sent its last batch; returning early
            // drops the receiver, which stops the reader.
            for batch in batches_rx {
                let mut start = 0;
                for row in &batch.rows {
                    let input = batch.bytes.get(start..row.end).unwrap_or_default();
                    start = row.end;
                    // The row must hash to what it stores (catches an edited
                    // field) and link to the previous row (catches an inserted
                    // or swapped row whose own hash was recomputed).
                    if Hash::of(input) != row.stored_hash {
                        return Err(broken(row.position, ChainProblem::HashMismatch));
                    }
                    if row.stored_prev != prev_hash {
                        return Err(broken(row.position, ChainProblem::PrevHashMismatch));
                    }
                    // The key is outside the hash (checked after it, so an
                    // edited stream is reported as the edit it is): a key
                    // pointed at another stream would hand this event to
                    // that stream's readers unnoticed.
                    if !row.keyed {
                        return Err(broken(
                            row.position,
                            ChainProblem::Malformed(
                                "stream_key does not name the row's stream in streams".into(),
                            ),
                        ));
                    }
                    if let Some(digest) = digest
                        && digest.position == row.position
                    {
                        if digest.hash != row.stored_hash {
                            return Err(broken(
                                row.position,
                                ChainProblem::DigestMismatch {
                                    expected: digest.hash,
                                    actual: row.stored_hash,
                                },
                            ));
                        }
                        digest_checked = true;
                    }
                    prev_hash = row.stored_hash;
                    events += 1;
                    if events.is_multiple_of(sandlog_eventstore::read::PAGE_EVENTS as u64) {
                        progress(events);
                    }
                }
                if let Some(failure) = batch.failure {
                    return Err(failure);
                }
                // The reader may have finished; a spare it never takes is
                // simply dropped.
                let _ = spare_tx.send(batch.emptied());
            }
            let head = Position(events);
            if let Some(digest) = digest {
                if !digest_checked && digest.position != Position::ZERO {
                    return Err(broken(digest.position, ChainProblem::Truncated { head }));
                }
                if digest.position == Position::ZERO && digest.hash != Hash::GENESIS {
                    return Err(broken(
                        Position::ZERO,
                        ChainProblem::DigestMismatch {
                            expected: digest.hash,
                            actual: Hash::GENESIS,
                        },
                    ));
                }
            }
            progress(events);
            Ok(VerifyReport {
                events,
                head,
                head_hash: prev_hash,
            })
        })
    }

    /// The current head as a digest to store elsewhere.
    pub fn digest(&self) -> Result<Digest> {
        let head = self.head()?;
        Ok(Digest {
            position: head.position,
            hash: head.hash,
        })
    }
}

/// Rows per batch handed from `verify`'s reading thread to its hashing
/// thread: each hand-off carries enough work that channel costs vanish,
/// and a batch of typical events (~450 bytes of chain input each) stays
/// under half a MiB.
const VERIFY_BATCH_ROWS: usize = 1024;

/// Batches in flight between the two threads: enough to ride out a stall
/// of either side, and with recycling the whole of `verify`'s memory.
const VERIFY_BATCHES_IN_FLIGHT: usize = 4;

/// Stream keys whose stream `verify`'s reader remembers (see
/// `read_rows_into`); past it the memory is emptied and refilled.
const VERIFY_KEYS_CACHED: usize = 4096;

/// What the hashing side needs of one row; its chain input is
/// `bytes[previous row's end..end]` of the batch.
struct RowCheck {
    position: Position,
    stored_prev: Hash,
    stored_hash: Hash,
    /// Whether the row's `stream_key` names its stream in `streams`.
    keyed: bool,
    end: usize,
}

/// Consecutive rows in log order, possibly ending with the error that
/// stopped the reader (a row that cannot be hashed at all, or SQLite).
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    rows: Vec<RowCheck>,
    failure: Option<EventStoreError>,
}

impl Batch {
    fn emptied(mut self) -> Batch {
        self.bytes.clear();
        self.rows.clear();
        self.failure = None;
        self
    }
}

/// `verify`'s reading half: steps every row in position order, checks
/// what can be checked without hashing (gapless positions, well-formed
/// columns), and sends rows in batches. Stops at the first failure (sent as
/// the last batch's `failure`) or when the receiver is gone.
fn read_rows(store: &EventStore, batches: &SyncSender<Batch>, spares: &Receiver<Batch>) {
    let mut batch = Batch::default();
    if let Err(failure) = read_rows_into(store, batches, spares, &mut batch) {
        batch.failure = Some(failure);
    }
    // The final (or failing) batch; the receiver may be gone already.
    let _ = batches.send(batch);
}

fn read_rows_into(
    store: &EventStore,
    batches: &SyncSender<Batch>,
    spares: &Receiver<Batch>,
    batch: &mut Batch,
) -> Result<()> {
    // Its own connection, and one read transaction: a concurrent append
    // cannot make the walk see half a batch.
    let connection = store.open_read_only_connection()?;
    let transaction = connection.unchecked_transaction().sql()?;
    let mut statement = transaction.prepare(
        "SELECT position, stream, version, event_id, kind, schema, recorded_at, actor, \
         correlation_id, causation_id, payload, prev_hash, hash, stream_key FROM events ORDER BY position",
    ).sql()?;
    let mut stream_of_key = transaction
        .prepare("SELECT stream FROM streams WHERE key = ?1")
        .sql()?;
    // Keys seen lately and their streams' text: a stream's events sit
    // close together in the log, so most rows need no lookup, and the
    // memory stays bounded whatever the log holds.
    let mut keys: HashMap<i64, Option<Box<[u8]>>> = HashMap::new();
    let mut rows = statement.query([]).sql()?;
    let mut expected = Position(1);
    while let Some(row) = rows.next().sql()? {
        let position_value = integer(row.get_ref(0).sql()?, expected, "position")?;
        let position = Position(u64::try_from(position_value).unwrap_or(0));
        if position != expected {
            return Err(broken(expected, ChainProblem::Missing { found: position }));
        }
        let stored_prev = Hash::from_slice(blob(row.get_ref(11).sql()?, position, "prev_hash")?)
            .ok_or_else(|| {
                broken(
                    position,
                    ChainProblem::Malformed("prev_hash is not 32 bytes".into()),
                )
            })?;
        let stored_hash = Hash::from_slice(blob(row.get_ref(12).sql()?, position, "hash")?)
            .ok_or_else(|| {
                broken(
                    position,
                    ChainProblem::Malformed("hash is not 32 bytes".into()),
                )
            })?;
        let fields = EnvelopeFields {
            position: position.0,
            stream: text(row.get_ref(1).sql()?, position, "stream")?,
            version: u64::try_from(integer(row.get_ref(2).sql()?, position, "version")?)
                .unwrap_or(u64::MAX),
            event_id: blob(row.get_ref(3).sql()?, position, "event_id")?,
            kind: text(row.get_ref(4).sql()?, position, "kind")?,
            schema: u32::try_from(integer(row.get_ref(5).sql()?, position, "schema")?)
                .unwrap_or(u32::MAX),
            recorded_at_micros: integer(row.get_ref(6).sql()?, position, "recorded_at")?,
            actor: text(row.get_ref(7).sql()?, position, "actor")?,
            correlation_id: blob(row.get_ref(8).sql()?, position, "correlation_id")?,
            causation_id: blob(row.get_ref(9).sql()?, position, "causation_id")?,
            payload: blob(row.get_ref(10).sql()?, position, "payload")?,
        };
        let keyed = match row.get_ref(13).sql()? {
            ValueRef::Integer(key) => {
                if !keys.contains_key(&key) {
                    if keys.len() >= VERIFY_KEYS_CACHED {
                        keys.clear();
                    }
                    let stream = stream_of_key
                        .query_row([key], |row| {
                            Ok(match row.get_ref(0)? {
                                ValueRef::Text(text) => Some(Box::<[u8]>::from(text)),
                                _ => None,
                            })
                        })
                        .optional()
                        .sql()?
                        .flatten();
                    keys.insert(key, stream);
                }
                matches!(keys.get(&key), Some(Some(stream)) if **stream == *fields.stream.as_bytes())
            }
            _ => false,
        };
        append_chain_input(&mut batch.bytes, &stored_prev, &fields);
        batch.rows.push(RowCheck {
            position,
            stored_prev,
            stored_hash,
            keyed,
            end: batch.bytes.len(),
        });
        expected = expected.next();
        if batch.rows.len() == VERIFY_BATCH_ROWS {
            let next = spares.try_recv().unwrap_or_default();
            let full = std::mem::replace(batch, next);
            if batches.send(full).is_err() {
                // The hashing side found a bad row and returned.
                return Ok(());
            }
        }
    }
    Ok(())
}
