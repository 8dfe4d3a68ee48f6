//! [`Backend`] for the SQLite file: each method is the [`EventStore`]
//! method of the same name.

use sandlog_core::merkle::MerkleHash;
use sandlog_core::{Envelope, Hash, NewEvent, Position, StreamId, StreamVersion};
use sandlog_eventstore::backend::{Backend, UnitOfWork, Unwritten};
use sandlog_eventstore::blobs::{BlobState, BlobTotals};
use sandlog_eventstore::chain::{Digest, VerifyReport};
use sandlog_eventstore::error::Result;
use sandlog_eventstore::read::LogFilter;
use sandlog_eventstore::types::{ExpectedVersion, Head};

use super::EventStore;

impl Backend for EventStore {
    fn name(&self) -> String {
        self.path().display().to_string()
    }

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

    fn blob_state(&self, hash: &Hash) -> Result<BlobState> {
        EventStore::blob_state(self, hash)
    }

    fn read_blob(&self, hash: &Hash, out: &mut dyn std::io::Write) -> Result<BlobState> {
        EventStore::read_blob(self, hash, out)
    }

    fn merkle_root(&self, size: u64) -> Result<MerkleHash> {
        EventStore::merkle_root(self, size)
    }

    fn map_root(&self, size: u64) -> Result<MerkleHash> {
        EventStore::map_root(self, size)
    }

    fn inclusion_proof(&self, position: Position, size: u64) -> Result<Vec<MerkleHash>> {
        EventStore::inclusion_proof(self, position, size)
    }

    fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<MerkleHash>> {
        EventStore::consistency_proof(self, old, new)
    }

    fn blob_totals(&self) -> Result<BlobTotals> {
        EventStore::blob_totals(self)
    }

    fn blob_hashes(&self) -> Result<Vec<(Hash, bool)>> {
        EventStore::blob_hashes(self)
    }

    fn write_unit(&self, f: &mut dyn FnMut(&mut dyn UnitOfWork) -> Result<bool>) -> Result<bool> {
        Unwritten::outcome(EventStore::write(self, |write| Unwritten::decide(f(write))))
    }
}

impl sandlog_projections::LogReader for EventStore {
    fn stream(&self, filter: LogFilter) -> Box<dyn Iterator<Item = Result<Envelope>> + '_> {
        Box::new(self.query(filter))
    }

    fn position_before(&self, instant: sandlog_core::Timestamp) -> Result<sandlog_core::Position> {
        EventStore::position_before(self, instant)
    }
}
