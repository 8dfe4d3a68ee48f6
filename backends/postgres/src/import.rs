//! [`Portable`] on PostgreSQL: the verbatim copy of [`sandlog_eventstore::import`].

use postgres::Row;
use sandlog_core::Envelope;
use sandlog_eventstore::error::{ChainProblem, EventStoreError, Result, stored_u64};
use sandlog_eventstore::import::{BlobRecord, CheckpointRecord, ChunkRecord, Portable};
use sandlog_eventstore::merkle::nodes_to_store;

use crate::PgResult;
use crate::append::{Nodes, insert_rows};
use crate::read::{load_frontier, read_head};
use crate::{PgEventStore, to_i64};

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn blob_of(row: &Row) -> Result<BlobRecord> {
    Ok(BlobRecord {
        hash: row.try_get(0).pg()?,
        size: row.try_get(1).pg()?,
        stored: row.try_get(2).pg()?,
        chunks: row.try_get(3).pg()?,
        created_at: row.try_get(4).pg()?,
        erased_at: row.try_get(5).pg()?,
    })
}

fn chunk_of(row: &Row) -> Result<ChunkRecord> {
    Ok(ChunkRecord {
        seq: row.try_get(0).pg()?,
        codec: row.try_get(1).pg()?,
        raw_len: row.try_get(2).pg()?,
        chunk_hash: row.try_get(3).pg()?,
        data: row.try_get(4).pg()?,
    })
}

fn checkpoint_of(row: &Row) -> Result<CheckpointRecord> {
    Ok(CheckpointRecord {
        id: row.try_get(0).pg()?,
        size: row.try_get(1).pg()?,
        root: row.try_get(2).pg()?,
        note: row.try_get(3).pg()?,
        recorded_at: row.try_get(4).pg()?,
    })
}

impl Portable for PgEventStore {
    fn blob_count(&self) -> Result<u64> {
        self.with_read(|session| {
            let row = session.query_opt("SELECT count(*) FROM blob_index", &[])?;
            let count: i64 = match row {
                Some(row) => row.try_get(0).pg()?,
                None => 0,
            };
            stored_u64(count, "count of blob_index")
        })
    }

    fn export_blobs(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<BlobRecord>> {
        self.with_read(|session| {
            let rows = session.query(
                "SELECT hash, size, stored, chunks, created_at, erased_at FROM blob_index \
                 WHERE $1::bytea IS NULL OR hash > $1 ORDER BY hash LIMIT $2",
                &[&after, &limit_of(limit)],
            )?;
            rows.iter().map(blob_of).collect()
        })
    }

    fn export_chunks(
        &self,
        hash: &[u8],
        after: Option<i64>,
        limit: usize,
    ) -> Result<Vec<ChunkRecord>> {
        let after = after.unwrap_or(-1);
        self.with_read(|session| {
            let rows = session.query(
                "SELECT seq, codec, raw_len, chunk_hash, data FROM blob_chunks \
                 WHERE hash = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&hash, &after, &limit_of(limit)],
            )?;
            rows.iter().map(chunk_of).collect()
        })
    }

    fn export_checkpoints(&self, after: i64, limit: usize) -> Result<Vec<CheckpointRecord>> {
        self.with_read(|session| {
            let rows = session.query(
                "SELECT id, size, root, note, recorded_at FROM checkpoints \
                 WHERE id > $1 ORDER BY id LIMIT $2",
                &[&after, &limit_of(limit)],
            )?;
            rows.iter().map(checkpoint_of).collect()
        })
    }

    fn import_events(&self, envelopes: &[Envelope]) -> Result<()> {
        let Some(first) = envelopes.first() else {
            return Ok(());
        };
        let outcome = self.with_write(|session| {
            // Under the append lock, so no append interleaves with the copy.
            self.take_append_lock(session)?;
            let head = read_head(session)?;
            if first.position != head.position.next() {
                return Err(EventStoreError::ChainBroken {
                    position: head.position.next(),
                    problem: ChainProblem::Missing {
                        found: first.position,
                    },
                });
            }
            let mut frontier = load_frontier(session, head.position.0)?;
            let mut nodes = Nodes::default();
            for envelope in envelopes {
                for (id, node) in nodes_to_store(&mut frontier, &envelope.hash) {
                    nodes.levels.push(i64::from(id.level));
                    nodes.indexes.push(to_i64(id.index, "node index")?);
                    nodes.hashes.push(node.0.to_vec());
                }
            }
            insert_rows(session, envelopes, &nodes)?;
            crate::map::commit(session, envelopes)?;
            Ok(())
        });
        // The cached right edge of the tree (if any) is of an older head.
        self.frontier.clear();
        outcome
    }

    fn import_chunks(&self, hash: &[u8], chunks: &[ChunkRecord]) -> Result<()> {
        self.with_write(|session| {
            for chunk in chunks {
                session.execute(
                    "INSERT INTO blob_chunks (hash, seq, codec, raw_len, chunk_hash, data) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &hash,
                        &chunk.seq,
                        &chunk.codec,
                        &chunk.raw_len,
                        &chunk.chunk_hash,
                        &chunk.data,
                    ],
                )?;
            }
            Ok(())
        })
    }

    fn import_blobs(&self, blobs: &[BlobRecord]) -> Result<()> {
        self.with_write(|session| {
            for blob in blobs {
                session.execute(
                    "INSERT INTO blob_index (hash, size, stored, chunks, created_at, erased_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &blob.hash,
                        &blob.size,
                        &blob.stored,
                        &blob.chunks,
                        &blob.created_at,
                        &blob.erased_at,
                    ],
                )?;
            }
            Ok(())
        })
    }

    fn import_checkpoints(&self, checkpoints: &[CheckpointRecord]) -> Result<()> {
        self.with_write(|session| {
            for checkpoint in checkpoints {
                session.execute(
                    "INSERT INTO checkpoints (size, root, note, recorded_at) \
                     VALUES ($1, $2, $3, $4)",
                    &[
                        &checkpoint.size,
                        &checkpoint.root,
                        &checkpoint.note,
                        &checkpoint.recorded_at,
                    ],
                )?;
            }
            Ok(())
        })
    }
}
