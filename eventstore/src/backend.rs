//! The [`Backend`] trait: what any log storage must provide.
//!
//! SQLite ([`crate::EventStore`]) is the embedded default. PostgreSQL
//! (`PgEventStore`, feature `postgres`) carries many writers on many hosts
//! with the same contract: the same positions, hashes, Merkle roots and
//! proofs for the same input. Code that only needs the log (not the SQLite
//! read models) should take `&dyn Backend`.

use sandlog_core::merkle::MerkleHash;
use sandlog_core::{Envelope, Hash, NewEvent, Position, StreamId, StreamVersion};

use crate::chain::{Digest, VerifyReport};
use crate::error::Result;
use crate::read::LogFilter;
use crate::sqlite::EventStore;
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
    /// See [`EventStore::append`].
    fn append(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>>;
    /// See [`EventStore::append_batch`]: several streams, one atomic
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
    fn blob_state(&self, hash: &Hash) -> Result<crate::BlobState>;
    /// Stream a blob's checked bytes to `out`.
    fn read_blob(&self, hash: &Hash, out: &mut dyn std::io::Write) -> Result<crate::BlobState>;
    /// See [`EventStore::merkle_root`]: the RFC 6962 root of the first
    /// `size` events.
    fn merkle_root(&self, size: u64) -> Result<MerkleHash>;
    /// See [`EventStore::inclusion_proof`].
    fn inclusion_proof(&self, position: Position, size: u64) -> Result<Vec<MerkleHash>>;
    /// See [`EventStore::consistency_proof`].
    fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<MerkleHash>>;
}

impl Backend for EventStore {
    fn append(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        EventStore::append(self, stream, expected, events)
    }

    fn append_batch(
        &self,
        batch: &[(StreamId, ExpectedVersion, Vec<NewEvent>)],
    ) -> Result<Vec<Envelope>> {
        EventStore::append_batch(self, batch)
    }

    fn query_page(&self, filter: &LogFilter) -> Result<Vec<Envelope>> {
        self.query(filter.clone()).collect()
    }

    fn head(&self) -> Result<Head> {
        EventStore::head(self)
    }

    fn stream_version(&self, stream: StreamId) -> Result<Option<StreamVersion>> {
        EventStore::stream_version(self, stream)
    }

    fn verify(&self, digest: Option<Digest>) -> Result<VerifyReport> {
        self.verify_with_progress(digest, |_| {})
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<Hash> {
        EventStore::put_blob(self, bytes)
    }

    fn get_blob(&self, hash: &Hash) -> Result<Option<Vec<u8>>> {
        EventStore::get_blob(self, hash)
    }

    fn blob_state(&self, hash: &Hash) -> Result<crate::BlobState> {
        EventStore::blob_state(self, hash)
    }

    fn read_blob(&self, hash: &Hash, out: &mut dyn std::io::Write) -> Result<crate::BlobState> {
        EventStore::read_blob(self, hash, out)
    }

    fn merkle_root(&self, size: u64) -> Result<MerkleHash> {
        EventStore::merkle_root(self, size)
    }

    fn inclusion_proof(&self, position: Position, size: u64) -> Result<Vec<MerkleHash>> {
        EventStore::inclusion_proof(self, position, size)
    }

    fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<MerkleHash>> {
        EventStore::consistency_proof(self, old, new)
    }
}
