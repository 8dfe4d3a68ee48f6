//! Copying a whole log from one store to another, verbatim: SQLite to
//! PostgreSQL and back (`sandlog migrate`).
//!
//! **Verbatim.** Every envelope keeps its position, stream version, event
//! id, `recorded_at`, actor, correlation and causation, payload bytes,
//! `prev_hash` and hash: nothing is re-stamped, so the head hash and the
//! Merkle root are the same on both sides, and proofs and digests issued
//! by the old store stay valid against the new one.
//!
//! **Checked on the way in.** Each event's chain hash is recomputed from
//! its fields and checked against the stored one and against the next
//! event's `prev_hash`; positions must follow each other. A source whose
//! chain is broken is refused at the first bad position
//! ([`EventStoreError::ChainBroken`]), with the events before it already
//! copied (the destination is then a partial copy to throw away).
//!
//! **Into an empty store only.** A destination that holds any event or
//! blob is refused ([`EventStoreError::ImportTargetNotEmpty`]): merging two
//! logs would fork positions and chains.
//!
//! **Bounded.** Events are copied [`IMPORT_BATCH_EVENTS`] per destination
//! transaction, blob chunks [`IMPORT_BATCH_CHUNKS`] per transaction, blob
//! index rows and checkpoints [`IMPORT_BATCH_ROWS`] per transaction. The
//! destination folds the Merkle nodes of each batch with its ordinary
//! code, in the batch's transaction.
//!
//! **Blobs** move as stored: chunk rows (codec, lengths, chunk hashes,
//! compressed bytes) and index rows (size, creation time, erasure time).
//! An erased blob stays erased: its index row moves, and it has no chunks.
//! Signed checkpoints (`checkpoints`) move in order, with their notes
//! byte for byte. Consumers' checkpoints do not: the PostgreSQL store has
//! no subscriptions, and a consumer re-reads from its own position.

use sandlog_core::{Envelope, Hash, Position, chain_hash};

use crate::backend::Backend;
use crate::error::{ChainProblem, EventStoreError, Result};
use crate::read::LogFilter;

/// Events per destination transaction. With payloads of at most
/// [`sandlog_core::limits::PAYLOAD_BYTES_MAX`], a batch holds at most
/// 256 MiB of payload in memory; real events are far smaller.
pub const IMPORT_BATCH_EVENTS: usize = 256;

/// Blob chunks per destination transaction: at most this many times
/// [`crate::blobs::CHUNK_BYTES`] in memory.
pub const IMPORT_BATCH_CHUNKS: usize = 8;

/// Blob index rows and signed checkpoints per destination transaction.
pub const IMPORT_BATCH_ROWS: usize = 1000;

/// A blob's index row, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRecord {
    /// Its address.
    pub hash: Vec<u8>,
    /// Its size, bytes.
    pub size: i64,
    /// Bytes stored (compressed).
    pub stored: i64,
    /// Its chunk count.
    pub chunks: i64,
    /// When it was first stored, microseconds since the epoch.
    pub created_at: i64,
    /// When its bytes were erased, if they were.
    pub erased_at: Option<i64>,
}

/// One stored chunk of a blob, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    /// Its place in the blob.
    pub seq: i64,
    /// How `data` is encoded.
    pub codec: i64,
    /// Its length before encoding.
    pub raw_len: i64,
    /// The hash of its raw bytes.
    pub chunk_hash: Vec<u8>,
    /// The stored bytes.
    pub data: Vec<u8>,
}

/// A signed checkpoint, as stored (its row id is the source's; the
/// destination numbers its own, in the same order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    /// The source's row id (the paging key).
    pub id: i64,
    /// Tree size.
    pub size: i64,
    /// Merkle root.
    pub root: Vec<u8>,
    /// The note exactly as signed.
    pub note: String,
    /// When it was stored.
    pub recorded_at: i64,
}

/// What a store must offer to be copied from and into. Both stores
/// implement it; PostgreSQL's behind the `postgres` feature.
pub trait Portable: Backend {
    /// How many blobs its index holds (kept and erased).
    fn blob_count(&self) -> Result<u64>;
    /// Up to `limit` blob index rows with addresses after `after`, in
    /// address order.
    fn export_blobs(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<BlobRecord>>;
    /// Up to `limit` chunks of blob `hash` with `seq` after `after`, in
    /// order.
    fn export_chunks(
        &self,
        hash: &[u8],
        after: Option<i64>,
        limit: usize,
    ) -> Result<Vec<ChunkRecord>>;
    /// Up to `limit` signed checkpoints with ids after `after`, in order.
    fn export_checkpoints(&self, after: i64, limit: usize) -> Result<Vec<CheckpointRecord>>;
    /// Inserts `envelopes` verbatim in one transaction, right after the
    /// store's head, with the Merkle nodes they complete.
    fn import_events(&self, envelopes: &[Envelope]) -> Result<()>;
    /// Inserts chunks of blob `hash` verbatim in one transaction.
    fn import_chunks(&self, hash: &[u8], chunks: &[ChunkRecord]) -> Result<()>;
    /// Inserts blob index rows verbatim in one transaction.
    fn import_blobs(&self, blobs: &[BlobRecord]) -> Result<()>;
    /// Inserts signed checkpoints in one transaction, in order.
    fn import_checkpoints(&self, checkpoints: &[CheckpointRecord]) -> Result<()>;
}

/// What [`copy_log`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// Events copied.
    pub events: u64,
    /// The head's position.
    pub head: Position,
    /// The head's hash.
    pub head_hash: Hash,
    /// Blob index rows copied (kept and erased).
    pub blobs: u64,
    /// Of those, erased.
    pub erased_blobs: u64,
    /// Blob chunks copied.
    pub chunks: u64,
    /// Signed checkpoints copied.
    pub checkpoints: u64,
}

fn broken(position: Position, problem: ChainProblem) -> EventStoreError {
    EventStoreError::ChainBroken { position, problem }
}

/// Checks `envelope` follows `(position, hash)` in a chain: the next
/// position, its `prev_hash` the previous hash, its hash that of its
/// fields.
pub fn check_link(previous: (Position, Hash), envelope: &Envelope) -> Result<()> {
    let (position, hash) = previous;
    if envelope.position != position.next() {
        return Err(broken(
            position.next(),
            ChainProblem::Missing {
                found: envelope.position,
            },
        ));
    }
    if envelope.prev_hash != hash {
        return Err(broken(envelope.position, ChainProblem::PrevHashMismatch));
    }
    let stream = envelope.stream.to_string();
    if chain_hash(&envelope.prev_hash, &envelope.fields(&stream)) != envelope.hash {
        return Err(broken(envelope.position, ChainProblem::HashMismatch));
    }
    Ok(())
}

/// Copies the log of `from` (as of its head when the copy starts), its
/// blobs and its signed checkpoints into the empty store `to`, checking
/// the chain on the way in. `progress` is called with the events copied
/// so far after each batch.
pub fn copy_log(
    from: &dyn Portable,
    to: &dyn Portable,
    progress: &mut dyn FnMut(u64),
) -> Result<ImportReport> {
    let events = to.head()?.position.0;
    let blobs = to.blob_count()?;
    if events > 0 || blobs > 0 {
        return Err(EventStoreError::ImportTargetNotEmpty {
            target: to.name(),
            events,
            blobs,
        });
    }
    let end = from.head()?.position;
    let mut last = (Position::ZERO, Hash::GENESIS);
    let mut copied = 0u64;
    while last.0 < end {
        let batch = from.query_page(&LogFilter {
            from: Some(last.0.next()),
            to: Some(end),
            limit: Some(IMPORT_BATCH_EVENTS as u64),
            ..LogFilter::default()
        })?;
        if batch.is_empty() {
            // The source's head says there is more, but no row follows.
            return Err(broken(last.0.next(), ChainProblem::Missing { found: end }));
        }
        for envelope in &batch {
            check_link(last, envelope)?;
            last = (envelope.position, envelope.hash);
        }
        to.import_events(&batch)?;
        copied += batch.len() as u64;
        progress(copied);
    }

    let mut report = ImportReport {
        events: copied,
        head: last.0,
        head_hash: last.1,
        blobs: 0,
        erased_blobs: 0,
        chunks: 0,
        checkpoints: 0,
    };
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = from.export_blobs(after.as_deref(), IMPORT_BATCH_ROWS)?;
        let Some(tail) = page.last() else { break };
        after = Some(tail.hash.clone());
        for blob in &page {
            let mut seq = None;
            loop {
                let chunks = from.export_chunks(&blob.hash, seq, IMPORT_BATCH_CHUNKS)?;
                let Some(tail) = chunks.last() else { break };
                seq = Some(tail.seq);
                to.import_chunks(&blob.hash, &chunks)?;
                report.chunks += chunks.len() as u64;
            }
            if blob.erased_at.is_some() {
                report.erased_blobs += 1;
            }
        }
        // Index rows after their chunks: a reader of the destination never
        // sees a blob whose chunks are still to come.
        to.import_blobs(&page)?;
        report.blobs += page.len() as u64;
    }
    let mut after = 0;
    loop {
        let page = from.export_checkpoints(after, IMPORT_BATCH_ROWS)?;
        let Some(tail) = page.last() else { break };
        after = tail.id;
        to.import_checkpoints(&page)?;
        report.checkpoints += page.len() as u64;
    }
    Ok(report)
}
