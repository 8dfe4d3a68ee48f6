//! The [`Backend`] trait: what any log storage must provide.
//!
//! SQLite (`sandlog_sqlite::EventStore`) is the embedded default. PostgreSQL
//! (`sandlog_postgres::PgEventStore`) carries many writers on many hosts
//! with the same contract: the same positions, hashes, Merkle roots and
//! proofs for the same input. Code that only needs the log (not the SQLite
//! read models) should take `&dyn Backend`.

use sandlog_core::merkle::MerkleHash;
use sandlog_core::{Envelope, Hash, NewEvent, Position, StreamId, StreamVersion};

use crate::blobs::{BlobPut, BlobState, BlobTotals, ErasedBlob};
use crate::chain::{Digest, VerifyReport};
use crate::error::{EventStoreError, Result};
use crate::read::LogFilter;
use crate::types::{ExpectedVersion, Head};

/// The storage contract of the log.
///
/// * `append` (one stream) and `append_batch` (several) are atomic per
///   batch, check each stream's `expected` against its version, assign
///   gapless global positions, chain hashes, and are idempotent by event
///   id.
/// * Reads return envelopes in position order.
/// * `verify` names the first bad position.
pub trait Backend: Send + Sync {
    /// The store's name in messages (a file path, a database name).
    fn name(&self) -> String;
    /// See `sandlog_sqlite::EventStore::append`.
    fn append(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>>;
    /// See `sandlog_sqlite::EventStore::append_batch`: several streams, one atomic
    /// append, each stream checked against its own expected version.
    fn append_batch(
        &self,
        batch: &[(StreamId, ExpectedVersion, Vec<NewEvent>)],
    ) -> Result<Vec<Envelope>>;
    /// Events matching `filter`, collected (callers that need streaming use
    /// the concrete backend's iterator).
    fn query_page(&self, filter: &LogFilter) -> Result<Vec<Envelope>>;
    /// The head.
    fn head(&self) -> Result<Head>;
    /// A stream's version.
    fn stream_version(&self, stream: StreamId) -> Result<Option<StreamVersion>>;
    /// Walk the chain.
    fn verify(&self, digest: Option<Digest>) -> Result<VerifyReport>;
    /// Store a blob.
    fn put_blob(&self, bytes: &[u8]) -> Result<Hash>;
    /// Fetch a blob.
    fn get_blob(&self, hash: &Hash) -> Result<Option<Vec<u8>>>;
    /// What the store knows of a blob.
    fn blob_state(&self, hash: &Hash) -> Result<BlobState>;
    /// Stream a blob's checked bytes to `out`.
    fn read_blob(&self, hash: &Hash, out: &mut dyn std::io::Write) -> Result<BlobState>;
    /// See `sandlog_sqlite::EventStore::merkle_root`: the RFC 6962 root of the first
    /// `size` events.
    fn merkle_root(&self, size: u64) -> Result<MerkleHash>;
    /// See `sandlog_sqlite::EventStore::map_root`: the root of the map of stream
    /// heads at a size an append committed at.
    fn map_root(&self, size: u64) -> Result<MerkleHash>;
    /// See `sandlog_sqlite::EventStore::inclusion_proof`.
    fn inclusion_proof(&self, position: Position, size: u64) -> Result<Vec<MerkleHash>>;
    /// See `sandlog_sqlite::EventStore::consistency_proof`.
    fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<MerkleHash>>;
    /// How many blobs are kept and erased, and their bytes.
    fn blob_totals(&self) -> Result<BlobTotals>;
    /// Every blob's address, with whether its bytes are kept, in address
    /// order (for `gc` and audits).
    fn blob_hashes(&self) -> Result<Vec<(Hash, bool)>>;
    /// Runs `f` in one write transaction (see `sandlog_sqlite::EventStore::write`) and
    /// commits if it returns `Ok(true)`; `Ok(false)` or an error rolls
    /// everything back. Returns whether it committed. `f` is called once.
    fn write_unit(&self, f: &mut dyn FnMut(&mut dyn UnitOfWork) -> Result<bool>) -> Result<bool>;
}

/// Why a [`Backend::write_unit`] did not commit: the store failed, or the
/// caller said no.
pub enum Unwritten {
    /// The store failed.
    Store(EventStoreError),
    /// The caller's closure said not to commit.
    Declined,
}

impl From<EventStoreError> for Unwritten {
    fn from(error: EventStoreError) -> Self {
        Unwritten::Store(error)
    }
}

impl Unwritten {
    /// A write's outcome as [`Backend::write_unit`] returns it.
    pub fn outcome(outcome: std::result::Result<(), Unwritten>) -> Result<bool> {
        match outcome {
            Ok(()) => Ok(true),
            Err(Unwritten::Declined) => Ok(false),
            Err(Unwritten::Store(error)) => Err(error),
        }
    }

    /// `f`'s answer as a write closure's result.
    pub fn decide(commit: Result<bool>) -> std::result::Result<(), Unwritten> {
        match commit {
            Ok(true) => Ok(()),
            Ok(false) => Err(Unwritten::Declined),
            Err(error) => Err(Unwritten::Store(error)),
        }
    }
}

/// One open write transaction of either backend (`sandlog_sqlite::Write` on
/// SQLite, `PgWrite` on PostgreSQL): appends and the blobs their events
/// name, committed together or not at all. Code that writes the log
/// without caring where it lives takes `&mut dyn UnitOfWork`.
pub trait UnitOfWork {
    /// Appends `events` to `stream` if it is at `expected` (see
    /// `sandlog_sqlite::EventStore::append`), inside this transaction.
    fn append(
        &mut self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>>;
    /// Stores `bytes` as a blob in this transaction.
    fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobPut>;
    /// Stores what `reader` yields, at most `size_max` bytes, streamed in
    /// chunks. With `expected`, a blob already stored under that hash is
    /// not read at all, and bytes that hash to something else fail with
    /// [`crate::EventStoreError::BlobHashMismatch`] and store nothing.
    fn put_blob_from(
        &mut self,
        reader: &mut dyn std::io::Read,
        expected: Option<Hash>,
        size_max: u64,
    ) -> Result<BlobPut>;
    /// Removes a blob's bytes, keeping its address, size and the time of
    /// the erasure. `None` if it was not stored or already erased.
    fn erase_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>>;
    /// Deletes a blob entirely (bytes and index row): for blobs no event
    /// names. `None` if it was not stored.
    fn remove_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>>;
}
