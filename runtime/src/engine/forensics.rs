//! Reading the log for forensics through the [`Engine`]: the log itself,
//! its head and digest, the state as of a point, statistics, blobs and the
//! Merkle tree. Front ends (the CLI, the server, the Python package) read
//! through these, never through the store, so the store behind the engine
//! can change without them noticing.

use sandlog_core::{Envelope, Hash, SessionId, StreamId};
use sandlog_eventstore::{BlobState, BlobTotals, Digest, Head, LogFilter, MerkleReport};
use sandlog_projections::replay::{self, Cut};
use sandlog_projections::{SessionState, State};
use sandlog_sqlite::query::{self, StoreStats};

use crate::engine::Engine;
use sandlog_host::error::Result;

impl Engine {
    /// The events matching `filter`, in position order, read a page at a
    /// time.
    pub fn log(&self, filter: LogFilter) -> impl Iterator<Item = Result<Envelope>> + '_ {
        // A shared log is copied first; a failure to is the first item.
        let refreshed = self.refresh().err();
        refreshed.into_iter().map(Err).chain(
            self.store
                .query(filter)
                .map(|envelope| envelope.map_err(Into::into)),
        )
    }

    /// One stream's events, in order.
    pub fn stream_events(&self, stream: StreamId) -> Result<Vec<Envelope>> {
        self.refresh()?;
        Ok(self.store.read_stream(stream)?)
    }

    /// The log's head: the last position and its hash.
    pub fn head(&self) -> Result<Head> {
        self.refresh()?;
        Ok(self.store.head()?)
    }

    /// The head as a digest (`POS:HASH`) to keep where the database's
    /// writer cannot reach.
    pub fn digest(&self) -> Result<Digest> {
        self.refresh()?;
        Ok(self.store.digest()?)
    }

    /// The whole state as of `cut`, folded from the log; `progress` gets
    /// (events folded, events to fold).
    pub fn state_at(&self, cut: Cut, progress: impl FnMut(u64, u64)) -> Result<State> {
        self.refresh()?;
        Ok(replay::state_at_with_progress(&self.store, cut, progress)?)
    }

    /// One session as of `cut`, folded from its events (`None` if it did
    /// not exist then).
    pub fn session_at(&self, session_id: SessionId, cut: Cut) -> Result<Option<SessionState>> {
        self.refresh()?;
        Ok(replay::session_at(&self.store, session_id, cut)?)
    }

    /// Counts and sizes from the read models.
    pub fn stats(&self) -> Result<StoreStats> {
        Ok(query::stats(&self.store)?)
    }

    /// What the store holds of blobs: counts and bytes, kept and erased.
    pub fn blob_totals(&self) -> Result<BlobTotals> {
        Ok(self.backend().blob_totals()?)
    }

    /// What the store knows of one blob.
    pub fn blob_state(&self, hash: &Hash) -> Result<BlobState> {
        Ok(self.backend().blob_state(hash)?)
    }

    /// Drops the stored Merkle nodes and folds them again from the events
    /// (one transaction); returns the tree's size and root.
    pub fn rebuild_merkle(&self) -> Result<(u64, sandlog_core::merkle::MerkleHash)> {
        self.store.rebuild_merkle()?;
        Ok(self.store.merkle_head()?)
    }

    /// Compares every stored Merkle node with a fold of the events, and
    /// the map of stream heads at the head with the one the events make.
    pub fn verify_merkle(&self) -> Result<MerkleReport> {
        let report = self.store.verify_merkle()?;
        self.store.verify_map()?;
        Ok(report)
    }
}
