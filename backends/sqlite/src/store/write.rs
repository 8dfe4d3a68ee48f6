//! The unit of work: several appends (to one or many streams) and the blobs
//! their events name, in one transaction, committed with one fsync.
//!
//! Blobs are written in the transaction of the events that refer to them, so
//! a committed event never names a blob that is not stored, and a crash
//! leaves neither (see [`sandlog_eventstore::blobs`]).

use rusqlite::{Transaction, TransactionBehavior};
use sandlog_core::{Envelope, Hash, NewEvent, StreamId};
use sandlog_eventstore::blobs::{BlobPut, ErasedBlob};
use sandlog_eventstore::error::{EventStoreError, Result};
use sandlog_eventstore::types::ExpectedVersion;

use super::EventStore;
use super::append::{Tip, insert_batch};
use super::blobs;
use crate::store::SqlResult;

/// An open write transaction. Made by [`EventStore::write`]; everything
/// done through it commits together or not at all.
pub struct Write<'s, 't> {
    store: &'s EventStore,
    transaction: &'t Transaction<'t>,
    /// The log's head and tree as this transaction left them.
    tip: Tip,
    /// Everything newly appended, for the append hook, which runs once at
    /// the end (a read model folds one batch, not one per stream).
    appended: Vec<Envelope>,
}

impl Write<'_, '_> {
    /// Appends `events` to `stream` if it is at `expected`, exactly as
    /// [`EventStore::append`] does, inside this transaction.
    pub fn append(
        &mut self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        let (envelopes, fresh) = insert_batch(
            self.store,
            self.transaction,
            &mut self.tip,
            stream,
            expected,
            events,
        )?;
        if fresh {
            self.appended.extend(envelopes.iter().cloned());
        }
        Ok(envelopes)
    }

    /// Stores `bytes` (see [`Write::put_blob_from`]).
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobPut> {
        let mut reader = bytes;
        blobs::put(
            self.transaction,
            &mut reader,
            Some(Hash::of(bytes)),
            bytes.len() as u64,
            self.store.clock.now(),
        )
    }

    /// Stores what `reader` yields, at most `size_max` bytes, streamed in
    /// chunks of [`blobs::CHUNK_BYTES`] (never held whole). With `expected`,
    /// a blob already stored under that hash is not read at all, and bytes
    /// that hash to something else fail with
    /// [`crate::EventStoreError::BlobHashMismatch`] and leave nothing.
    pub fn put_blob_from(
        &mut self,
        reader: &mut dyn std::io::Read,
        expected: Option<Hash>,
        size_max: u64,
    ) -> Result<BlobPut> {
        blobs::put(
            self.transaction,
            reader,
            expected,
            size_max,
            self.store.clock.now(),
        )
    }

    /// Removes a blob's bytes, keeping its address, size and the time of
    /// the erasure. `None` if it was not stored or already erased.
    pub fn erase_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>> {
        blobs::erase(self.transaction, hash, self.store.clock.now())
    }

    /// Deletes a blob entirely (bytes and index row): for blobs no event
    /// names. `None` if it was not stored.
    pub fn remove_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>> {
        blobs::remove(self.transaction, hash)
    }
}

impl sandlog_eventstore::backend::UnitOfWork for Write<'_, '_> {
    fn append(
        &mut self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Envelope>> {
        Write::append(self, stream, expected, events)
    }

    fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobPut> {
        Write::put_blob(self, bytes)
    }

    fn put_blob_from(
        &mut self,
        reader: &mut dyn std::io::Read,
        expected: Option<Hash>,
        size_max: u64,
    ) -> Result<BlobPut> {
        Write::put_blob_from(self, reader, expected, size_max)
    }

    fn erase_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>> {
        Write::erase_blob(self, hash)
    }

    fn remove_blob(&mut self, hash: &Hash) -> Result<Option<ErasedBlob>> {
        Write::remove_blob(self, hash)
    }
}

impl EventStore {
    /// Runs `f` in one write transaction (`BEGIN IMMEDIATE`) and commits if
    /// it succeeds: every append and blob it made lands together, durable
    /// when this returns (at [`super::Durability::Full`], through one fsync
    /// of the WAL that concurrent writers of this store share: see
    /// `group.rs`); if it fails, nothing does. `f` runs with the writer held, so
    /// keep it to storage work.
    pub fn write<T, E>(
        &self,
        f: impl FnOnce(&mut Write<'_, '_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<EventStoreError>,
    {
        self.check_writable()?;
        let mut connection = self.lock_writer();
        // With group commit the connection commits this unit of work at
        // `synchronous = NORMAL` (set outside the transaction, as SQLite
        // requires) and goes back to `FULL` whatever happens in between.
        self.before_grouped_write(&connection)?;
        let outcome = self.write_in(&mut connection, f);
        let pending = self.after_grouped_write(&connection, outcome.is_ok())?;
        let (value, tip) = outcome?;
        if let Some(frontier) = tip.frontier {
            self.frontier.put(frontier);
        }
        // Released before the fsync, so that concurrent writers commit
        // meanwhile and share the next one (see `group.rs`).
        drop(connection);
        self.wait_durable(pending)?;
        Ok(value)
    }

    /// The body of [`EventStore::write`] on the held writer: the
    /// transaction, `f`, the map, the hook and the commit. Returns `f`'s
    /// value and the tip the commit left.
    fn write_in<T, E>(
        &self,
        connection: &mut rusqlite::Connection,
        f: impl FnOnce(&mut Write<'_, '_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<(T, Tip), E>
    where
        E: From<EventStoreError>,
    {
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .sql()
            .map_err(EventStoreError::from)?;
        let (value, tip, appended) = {
            let mut write = Write {
                store: self,
                transaction: &transaction,
                tip: Tip::default(),
                appended: Vec::new(),
            };
            let value = f(&mut write)?;
            (value, write.tip, write.appended)
        };
        // The map of stream heads, once per commit: the map at a commit's
        // size summarises every event up to it.
        if !appended.is_empty() {
            let started = std::time::Instant::now();
            super::map::commit(&transaction, &appended)?;
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.map_nanos
                .fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
        }
        // New envelopes only: a retry's were folded when first appended.
        if let Some(hook) = &self.hook
            && !appended.is_empty()
        {
            hook.after_append(&transaction, &appended)
                .map_err(EventStoreError::Hook)?;
        }
        self.commit(transaction)?;
        Ok((value, tip))
    }
}
