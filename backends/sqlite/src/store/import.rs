//! The SQLite file's side of a log copy: [`Portable`] for the SQLite store,
//! and [`EventStore::replicate_from`], which keeps a node's file a verbatim
//! replica of a shared log.

use rusqlite::params;
use sandlog_core::{Envelope, Position};
use sandlog_eventstore::backend::Backend;
use sandlog_eventstore::error::{ChainProblem, EventStoreError, Result, stored_u64};
use sandlog_eventstore::import::{
    BlobRecord, CheckpointRecord, ChunkRecord, IMPORT_BATCH_EVENTS, Portable, check_link,
};
use sandlog_eventstore::read::LogFilter;

use super::EventStore;
use super::append::{INSERT_EVENT, insert_event, stream_key};
use super::rows::read_head;
use crate::store::SqlResult;

/// Inserts `envelopes` verbatim after `head` with the Merkle nodes they
/// complete.
fn insert_verbatim(
    transaction: &rusqlite::Transaction<'_>,
    head: Position,
    envelopes: &[Envelope],
) -> Result<()> {
    let mut insert = transaction.prepare_cached(INSERT_EVENT).sql()?;
    // Each stream's key is looked up (or made) once per batch: a batch of
    // a session's run holds many events of one stream. Bounded by the
    // batch's length.
    let mut keys = std::collections::HashMap::new();
    for envelope in envelopes {
        let stream = envelope.stream.to_string();
        let key = match keys.get(&stream) {
            Some(key) => *key,
            None => {
                let key = stream_key(transaction, &stream)?;
                keys.insert(stream.clone(), key);
                key
            }
        };
        insert_event(&mut insert, &stream, key, envelope)?.sql()?;
    }
    let mut frontier = super::merkle::load_frontier(transaction, head.0)?;
    super::merkle::append_leaves(transaction, &mut frontier, envelopes)?;
    super::map::commit(transaction, envelopes)?;
    Ok(())
}

impl EventStore {
    /// Makes this store a replica of `source`: copies every event
    /// `source` holds after this store's head, verbatim (positions,
    /// hashes, the Merkle nodes), [`IMPORT_BATCH_EVENTS`] per
    /// transaction, each checked to extend the chain this store holds,
    /// and folded by the append hook in its transaction, so the read
    /// models follow. Blobs stay in `source`. Returns how many events
    /// were copied.
    ///
    /// Safe with several processes replicating into the same file:
    /// each page is read from `source` after the write lock is taken,
    /// starting at the head seen under it.
    ///
    /// Fails with [`EventStoreError::ChainBroken`] when `source`'s
    /// next event does not extend this store's head, and with
    /// [`EventStoreError::ReplicaAhead`] when `source` ends before it:
    /// either way `source` is not the log this store copied.
    pub fn replicate_from(&self, source: &dyn Backend) -> Result<u64> {
        let mut copied = 0u64;
        loop {
            let page = self.with_write_transaction(|transaction| -> Result<usize> {
                let head = read_head(transaction)?;
                let page = source.query_page(&LogFilter {
                    from: Some(head.position.next()),
                    limit: Some(IMPORT_BATCH_EVENTS as u64),
                    ..LogFilter::default()
                })?;
                if page.is_empty() {
                    let shared = source.head()?.position;
                    if shared < head.position {
                        return Err(EventStoreError::ReplicaAhead {
                            replica: head.position,
                            log: source.name(),
                            shared,
                        });
                    }
                    return Ok(0);
                }
                let mut last = (head.position, head.hash);
                for envelope in &page {
                    check_link(last, envelope)?;
                    last = (envelope.position, envelope.hash);
                }
                insert_verbatim(transaction, head.position, &page)?;
                if let Some(hook) = &self.hook {
                    hook.after_append(transaction, &page)
                        .map_err(EventStoreError::Hook)?;
                }
                Ok(page.len())
            });
            // The cached right edge of the tree (if any) is of an older
            // head, whatever happened.
            self.frontier.clear();
            let page = page?;
            copied += page as u64;
            if page < IMPORT_BATCH_EVENTS {
                return Ok(copied);
            }
        }
    }
}

impl Portable for EventStore {
    fn blob_count(&self) -> Result<u64> {
        let count: i64 = self
            .with_reader(|connection| {
                connection.query_row("SELECT count(*) FROM blob_index", [], |row| row.get(0))
            })
            .sql()?;
        stored_u64(count, "count of blob_index")
    }

    fn export_blobs(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<BlobRecord>> {
        self.with_reader(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT hash, size, stored, chunks, created_at, erased_at FROM blob_index \
                 WHERE ?1 IS NULL OR hash > ?1 ORDER BY hash LIMIT ?2",
                )
                .sql()?;
            let rows = statement
                .query_map(params![after, limit as i64], |row| {
                    Ok(BlobRecord {
                        hash: row.get(0)?,
                        size: row.get(1)?,
                        stored: row.get(2)?,
                        chunks: row.get(3)?,
                        created_at: row.get(4)?,
                        erased_at: row.get(5)?,
                    })
                })
                .sql()?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>().sql()?)
        })
    }

    fn export_chunks(
        &self,
        hash: &[u8],
        after: Option<i64>,
        limit: usize,
    ) -> Result<Vec<ChunkRecord>> {
        self.with_reader(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT seq, codec, raw_len, chunk_hash, data FROM blob_chunks \
                 WHERE hash = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .sql()?;
            let rows = statement
                .query_map(params![hash, after.unwrap_or(-1), limit as i64], |row| {
                    Ok(ChunkRecord {
                        seq: row.get(0)?,
                        codec: row.get(1)?,
                        raw_len: row.get(2)?,
                        chunk_hash: row.get(3)?,
                        data: row.get(4)?,
                    })
                })
                .sql()?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>().sql()?)
        })
    }

    fn export_checkpoints(&self, after: i64, limit: usize) -> Result<Vec<CheckpointRecord>> {
        self.with_reader(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT id, size, root, note, recorded_at FROM checkpoints \
                 WHERE id > ?1 ORDER BY id LIMIT ?2",
                )
                .sql()?;
            let rows = statement
                .query_map(params![after, limit as i64], |row| {
                    Ok(CheckpointRecord {
                        id: row.get(0)?,
                        size: row.get(1)?,
                        root: row.get(2)?,
                        note: row.get(3)?,
                        recorded_at: row.get(4)?,
                    })
                })
                .sql()?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>().sql()?)
        })
    }

    fn import_events(&self, envelopes: &[Envelope]) -> Result<()> {
        let Some(first) = envelopes.first() else {
            return Ok(());
        };
        self.with_write_transaction(|transaction| -> Result<()> {
            let head = read_head(transaction)?;
            if first.position != head.position.next() {
                return Err(EventStoreError::ChainBroken {
                    position: head.position.next(),
                    problem: ChainProblem::Missing {
                        found: first.position,
                    },
                });
            }
            insert_verbatim(transaction, head.position, envelopes)
        })?;
        // The cached right edge of the tree (if any) is of an older head.
        self.frontier.clear();
        Ok(())
    }

    fn import_chunks(&self, hash: &[u8], chunks: &[ChunkRecord]) -> Result<()> {
        self.with_write_transaction(|transaction| -> Result<()> {
            let mut insert = transaction
                .prepare_cached(
                    "INSERT INTO blob_chunks (hash, seq, codec, raw_len, chunk_hash, data) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .sql()?;
            for chunk in chunks {
                insert
                    .execute(params![
                        hash,
                        chunk.seq,
                        chunk.codec,
                        chunk.raw_len,
                        chunk.chunk_hash,
                        chunk.data
                    ])
                    .sql()?;
            }
            Ok(())
        })
    }

    fn import_blobs(&self, blobs: &[BlobRecord]) -> Result<()> {
        self.with_write_transaction(|transaction| -> Result<()> {
            let mut insert = transaction
                .prepare_cached(
                    "INSERT INTO blob_index (hash, size, stored, chunks, created_at, erased_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .sql()?;
            for blob in blobs {
                insert
                    .execute(params![
                        blob.hash,
                        blob.size,
                        blob.stored,
                        blob.chunks,
                        blob.created_at,
                        blob.erased_at
                    ])
                    .sql()?;
            }
            Ok(())
        })
    }

    fn import_checkpoints(&self, checkpoints: &[CheckpointRecord]) -> Result<()> {
        self.with_write_transaction(|transaction| -> Result<()> {
            let mut insert = transaction
                .prepare_cached(
                    "INSERT INTO checkpoints (size, root, note, recorded_at) \
                 VALUES (?1, ?2, ?3, ?4)",
                )
                .sql()?;
            for checkpoint in checkpoints {
                insert
                    .execute(params![
                        checkpoint.size,
                        checkpoint.root,
                        checkpoint.note,
                        checkpoint.recorded_at
                    ])
                    .sql()?;
            }
            Ok(())
        })
    }
}
