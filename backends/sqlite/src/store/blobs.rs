//! Blobs in the SQLite file: the code of each execution, what it printed,
//! and the bytes of files written by the host or kept as evidence of a
//! guest's writes, so a session can be reconstructed as of any position.
//!
//! # Storage
//!
//! * `blob_index(hash, size, stored, chunks, created_at, erased_at)`: one row
//!   per blob, keyed by the blake3 of its bytes. A blob is stored once
//!   however many events name it (deduplication is the key).
//! * `blob_chunks(hash, seq, codec, raw_len, chunk_hash, data)`: its bytes in
//!   chunks of at most [`CHUNK_BYTES`], each zstd-compressed (or kept raw
//!   when compression does not pay) and carrying the blake3 of its raw
//!   bytes. Writing and reading go one chunk at a time, so memory stays
//!   bounded by the chunk size whatever the blob's; a damaged chunk is
//!   caught before any of its bytes are returned.
//!
//! **Invariants:** blobs are written in the transaction of the events that
//! name them ([`crate::EventStore::write`]), so a committed event never
//! names a blob that was never stored. A blob is never changed: only
//! *erased* (its chunks deleted with SQLite's `secure_delete`, its index
//! row kept with `erased_at`), so the events and hashes that name it stay
//! valid and a reader is told the bytes were erased, not that they never
//! existed.

use std::io::{Read, Write as IoWrite};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sandlog_core::limits::BLOB_BYTES_MAX;
use sandlog_core::{Hash, Timestamp};
use sandlog_eventstore::blobs::{
    BlobPut, BlobState, BlobTotals, CHUNK_BYTES, ErasedBlob, WrittenChunks, decode_chunk,
    write_chunks,
};
use sandlog_eventstore::error::{EventStoreError, Result, stored_u64};

use super::EventStore;
use crate::store::SqlResult;

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn state_in(connection: &Connection, hash: &Hash) -> Result<BlobState> {
    let row: Option<(i64, i64, Option<i64>)> = connection
        .prepare_cached("SELECT size, stored, erased_at FROM blob_index WHERE hash = ?1")
        .sql()?
        .query_row([hash.0.as_slice()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
        .sql()?;
    Ok(match row {
        None => BlobState::Missing,
        Some((size, _, Some(erased_at))) => BlobState::Erased {
            size: stored_u64(size, "blob_index.size")?,
            erased_at: Timestamp::from_unix_micros(erased_at),
        },
        Some((size, stored, None)) => BlobState::Kept {
            size: stored_u64(size, "blob_index.size")?,
            stored_bytes: stored_u64(stored, "blob_index.stored")?,
        },
    })
}

/// Streams a blob into the open transaction. See [`crate::Write::put_blob_from`].
pub(crate) fn put(
    transaction: &Transaction<'_>,
    reader: &mut dyn Read,
    expected: Option<Hash>,
    size_max: u64,
    now: Timestamp,
) -> Result<BlobPut> {
    let size_max = size_max.min(BLOB_BYTES_MAX as u64);
    if let Some(hash) = expected
        && let BlobState::Kept { size, .. } = state_in(transaction, &hash)?
    {
        return Ok(BlobPut {
            hash,
            size,
            stored_bytes: 0,
            deduplicated: true,
        });
    }
    // With the hash expected, chunks go in under it at once (no stored
    // blob has it: a kept one returned above, an erased one has no
    // chunks) and are dropped with the savepoint if the bytes hash to
    // something else. Without, they go in under a key no blob can have (a
    // fresh random id, not a blake3) until the whole stream is hashed,
    // then are renamed to the hash or dropped with the savepoint if that
    // blob is stored already.
    let pending = *uuid::Uuid::new_v4().as_bytes();
    let key: &[u8] = match &expected {
        Some(hash) => hash.0.as_slice(),
        None => pending.as_slice(),
    };
    transaction.execute_batch("SAVEPOINT blob_put").sql()?;
    let outcome = put_chunks(transaction, reader, expected, size_max, key, now);
    match outcome {
        Ok(put) if put.deduplicated => {
            transaction
                .execute_batch("ROLLBACK TO blob_put; RELEASE blob_put")
                .sql()?;
            Ok(put)
        }
        Ok(put) => {
            transaction.execute_batch("RELEASE blob_put").sql()?;
            Ok(put)
        }
        Err(error) => {
            transaction
                .execute_batch("ROLLBACK TO blob_put; RELEASE blob_put")
                .sql()?;
            Err(error)
        }
    }
}

fn put_chunks(
    transaction: &Transaction<'_>,
    reader: &mut dyn Read,
    expected: Option<Hash>,
    size_max: u64,
    key: &[u8],
    now: Timestamp,
) -> Result<BlobPut> {
    let mut insert = transaction.prepare_cached(
        "INSERT INTO blob_chunks (hash, seq, codec, raw_len, chunk_hash, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    ).sql()?;
    let WrittenChunks {
        hash,
        size,
        stored,
        chunks: seq,
    } = write_chunks(reader, expected, size_max, |chunk| {
        insert
            .execute(params![
                key,
                chunk.seq,
                chunk.codec,
                chunk.raw_len as i64,
                chunk.chunk_hash.0.as_slice(),
                chunk.data
            ])
            .sql()?;
        Ok(())
    })?;
    match state_in(transaction, &hash)? {
        BlobState::Kept { size, .. } => {
            return Ok(BlobPut {
                hash,
                size,
                stored_bytes: 0,
                deduplicated: true,
            });
        }
        // Bytes written again after an erasure are new evidence: the row
        // is kept, its chunks come back.
        BlobState::Erased { .. } => {
            transaction
                .prepare_cached(
                    "UPDATE blob_index SET stored = ?2, chunks = ?3, erased_at = NULL WHERE hash = ?1",
                ).sql()?
                .execute(params![hash.0.as_slice(), to_i64(stored), seq]).sql()?;
        }
        BlobState::Missing => {
            transaction
                .prepare_cached(
                    "INSERT INTO blob_index (hash, size, stored, chunks, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                ).sql()?
                .execute(params![
                    hash.0.as_slice(),
                    to_i64(size),
                    to_i64(stored),
                    seq,
                    now.unix_micros()
                ]).sql()?;
        }
    }
    if key != hash.0.as_slice() {
        // Rewrites each row; the old copies' space is zeroed (the store's
        // connections run with secure_delete on).
        transaction
            .prepare_cached("UPDATE blob_chunks SET hash = ?1 WHERE hash = ?2")
            .sql()?
            .execute(params![hash.0.as_slice(), key])
            .sql()?;
    }
    Ok(BlobPut {
        hash,
        size,
        stored_bytes: stored,
        deduplicated: false,
    })
}

fn delete_chunks(transaction: &Transaction<'_>, hash: &Hash) -> Result<Option<ErasedBlob>> {
    let row: Option<(i64, i64, Option<i64>)> = transaction
        .prepare_cached("SELECT size, stored, erased_at FROM blob_index WHERE hash = ?1")
        .sql()?
        .query_row([hash.0.as_slice()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
        .sql()?;
    let Some((size, stored, erased_at)) = row else {
        return Ok(None);
    };
    // The store's connections run with secure_delete on (see
    // `sqlite::open_connection`): the freed cells and pages are overwritten
    // with zeros, so erased bytes do not linger in the file.
    transaction
        .prepare_cached("DELETE FROM blob_chunks WHERE hash = ?1")
        .sql()?
        .execute([hash.0.as_slice()])
        .sql()?;
    Ok(Some(ErasedBlob {
        hash: *hash,
        size: stored_u64(size, "blob_index.size")?,
        stored_bytes: if erased_at.is_some() {
            0
        } else {
            stored_u64(stored, "blob_index.stored")?
        },
    }))
}

/// Erases a blob's bytes, keeping its index row. `None` if not stored or
/// already erased.
pub(crate) fn erase(
    transaction: &Transaction<'_>,
    hash: &Hash,
    now: Timestamp,
) -> Result<Option<ErasedBlob>> {
    if !matches!(state_in(transaction, hash)?, BlobState::Kept { .. }) {
        return Ok(None);
    }
    let erased = delete_chunks(transaction, hash)?;
    transaction
        .prepare_cached(
            "UPDATE blob_index SET stored = 0, chunks = 0, erased_at = ?2 WHERE hash = ?1",
        )
        .sql()?
        .execute(params![hash.0.as_slice(), now.unix_micros()])
        .sql()?;
    Ok(erased)
}

/// Deletes a blob and its index row. `None` if not stored.
pub(crate) fn remove(transaction: &Transaction<'_>, hash: &Hash) -> Result<Option<ErasedBlob>> {
    let removed = delete_chunks(transaction, hash)?;
    transaction
        .prepare_cached("DELETE FROM blob_index WHERE hash = ?1")
        .sql()?
        .execute([hash.0.as_slice()])
        .sql()?;
    Ok(removed)
}

/// Writes a kept blob's chunks to `out` in order, each checked against its
/// hash before it is written, the whole checked at the end.
fn copy_chunks(
    connection: &Connection,
    hash: &Hash,
    size: u64,
    out: &mut dyn IoWrite,
) -> Result<()> {
    let mut statement = connection.prepare_cached(
        "SELECT seq, codec, raw_len, chunk_hash, data FROM blob_chunks WHERE hash = ?1 ORDER BY seq",
    ).sql()?;
    let mut rows = statement.query([hash.0.as_slice()]).sql()?;
    let mut hasher = blake3::Hasher::new();
    let mut written = 0u64;
    let mut expected_seq = 0i64;
    let corrupt = |actual: Hash| EventStoreError::BlobCorrupt {
        hash: *hash,
        actual,
    };
    while let Some(row) = rows.next().sql()? {
        let seq: i64 = row.get(0).sql()?;
        let codec: i64 = row.get(1).sql()?;
        let raw_len: i64 = row.get(2).sql()?;
        let chunk_hash: Vec<u8> = row.get(3).sql()?;
        let data = row
            .get_ref(4)
            .sql()?
            .as_blob()
            .map_err(|_| corrupt(Hash::GENESIS))?;
        if seq != expected_seq {
            return Err(corrupt(Hash::GENESIS));
        }
        expected_seq += 1;
        let raw = decode_chunk(codec, raw_len, &chunk_hash, data).map_err(corrupt)?;
        hasher.update(&raw);
        written += raw.len() as u64;
        out.write_all(&raw).map_err(|source| EventStoreError::Io {
            context: format!("writing blob {hash}"),
            source,
        })?;
    }
    let actual = Hash(*hasher.finalize().as_bytes());
    if actual != *hash || written != size {
        return Err(corrupt(actual));
    }
    Ok(())
}

impl EventStore {
    /// Stores `bytes` under their blake3 in a transaction of its own and
    /// returns it. Idempotent. Blobs that events name are stored with the
    /// events instead ([`EventStore::write`]); a blob stored alone is
    /// unreferenced until an event names it, and `gc` may remove it.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<Hash> {
        if bytes.len() > BLOB_BYTES_MAX {
            return Err(EventStoreError::BlobTooLarge {
                size: bytes.len(),
                max: BLOB_BYTES_MAX,
            });
        }
        Ok(self.write(|write| write.put_blob(bytes))?.hash)
    }

    /// What the store knows of a blob.
    pub fn blob_state(&self, hash: &Hash) -> Result<BlobState> {
        let connection = self.lock_reader();
        state_in(&connection, hash)
    }

    /// Writes a blob's bytes to `out`, a chunk at a time, each checked
    /// against its hash before it is written, and the whole checked at the
    /// end ([`EventStoreError::BlobCorrupt`]). Returns the state; bytes are
    /// written only when it is [`BlobState::Kept`].
    pub fn read_blob(&self, hash: &Hash, out: &mut dyn IoWrite) -> Result<BlobState> {
        // A blob of one chunk is read under the shared reader and written
        // out after it is released; a longer one streams from a connection
        // of its own, so a slow `out` never holds up other readers.
        let small = {
            let mut connection = self.lock_reader();
            let snapshot = connection.transaction().sql()?;
            let state = state_in(&snapshot, hash)?;
            match state {
                BlobState::Kept { size, .. } if size <= CHUNK_BYTES as u64 => {
                    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                    copy_chunks(&snapshot, hash, size, &mut bytes)?;
                    Some((state, bytes))
                }
                BlobState::Kept { .. } => None,
                _ => return Ok(state),
            }
        };
        if let Some((state, bytes)) = small {
            out.write_all(&bytes)
                .map_err(|source| EventStoreError::Io {
                    context: format!("writing blob {hash}"),
                    source,
                })?;
            return Ok(state);
        }
        let connection = self.open_read_only_connection()?;
        let snapshot = connection.unchecked_transaction().sql()?;
        let state = state_in(&snapshot, hash)?;
        if let BlobState::Kept { size, .. } = state {
            copy_chunks(&snapshot, hash, size, out)?;
        }
        Ok(state)
    }

    /// The bytes stored under `hash`, checked against it, for blobs known
    /// to be small (at most `size_max` bytes, else
    /// [`EventStoreError::BlobTooLarge`]). `None` if never stored;
    /// [`EventStoreError::BlobErased`] if erased.
    pub fn get_blob_bounded(&self, hash: &Hash, size_max: u64) -> Result<Option<Vec<u8>>> {
        match self.blob_state(hash)? {
            BlobState::Missing => Ok(None),
            BlobState::Erased { erased_at, .. } => Err(EventStoreError::BlobErased {
                hash: *hash,
                erased_at,
            }),
            BlobState::Kept { size, .. } if size > size_max => Err(EventStoreError::BlobTooLarge {
                size: usize::try_from(size).unwrap_or(usize::MAX),
                max: usize::try_from(size_max).unwrap_or(usize::MAX),
            }),
            BlobState::Kept { size, .. } => {
                let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                match self.read_blob(hash, &mut bytes)? {
                    BlobState::Kept { .. } => Ok(Some(bytes)),
                    // Erased or removed between the two reads.
                    _ => self.get_blob_bounded(hash, size_max),
                }
            }
        }
    }

    /// [`EventStore::get_blob_bounded`] up to [`BLOB_BYTES_MAX`]; an erased
    /// blob reads as `None`.
    pub fn get_blob(&self, hash: &Hash) -> Result<Option<Vec<u8>>> {
        match self.get_blob_bounded(hash, BLOB_BYTES_MAX as u64) {
            Err(EventStoreError::BlobErased { .. }) => Ok(None),
            other => other,
        }
    }

    /// Whether a blob's bytes are stored.
    pub fn has_blob(&self, hash: &Hash) -> Result<bool> {
        Ok(matches!(self.blob_state(hash)?, BlobState::Kept { .. }))
    }

    /// Every blob's address, with whether its bytes are kept, in address
    /// order (for `gc` and audits).
    pub fn blob_hashes(&self) -> Result<Vec<(Hash, bool)>> {
        let connection = self.lock_reader();
        let mut statement = connection
            .prepare("SELECT hash, erased_at IS NULL FROM blob_index ORDER BY hash")
            .sql()?;
        let rows = statement
            .query_map([], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, bool>(1)?))
            })
            .sql()?;
        let mut hashes = Vec::new();
        for row in rows {
            let (bytes, kept) = row.sql()?;
            let hash = Hash::from_slice(&bytes).ok_or_else(|| EventStoreError::Corrupt {
                position: sandlog_core::Position::ZERO,
                reason: "a blob address is not 32 bytes".into(),
            })?;
            hashes.push((hash, kept));
        }
        Ok(hashes)
    }

    /// Totals of the blob store.
    pub fn blob_totals(&self) -> Result<BlobTotals> {
        let connection = self.lock_reader();
        let (kept, kept_bytes, stored_bytes, erased): (i64, i64, i64, i64) = connection
            .query_row(
                "SELECT count(*) FILTER (WHERE erased_at IS NULL), \
             coalesce(sum(size) FILTER (WHERE erased_at IS NULL), 0), \
             coalesce(sum(stored) FILTER (WHERE erased_at IS NULL), 0), \
             count(*) FILTER (WHERE erased_at IS NOT NULL) FROM blob_index",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .sql()?;
        Ok(BlobTotals {
            kept: stored_u64(kept, "count of kept blobs")?,
            kept_bytes: stored_u64(kept_bytes, "sum of kept blob_index.size")?,
            stored_bytes: stored_u64(stored_bytes, "sum of kept blob_index.stored")?,
            erased: stored_u64(erased, "count of erased blobs")?,
        })
    }

    /// Copies every frame of the WAL into the database file and truncates
    /// the WAL to zero bytes, so bytes just erased survive in neither.
    /// Returns false if a reader kept the checkpoint from finishing (the
    /// next checkpoint completes it).
    pub fn checkpoint_wal(&self) -> Result<bool> {
        let connection = self.lock_writer();
        let busy: i64 = connection
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
            .sql()?;
        Ok(busy == 0)
    }
}
