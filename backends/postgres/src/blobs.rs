//! Blobs on PostgreSQL: the chunk format of [`sandlog_eventstore::blobs`] (chunks of at
//! most [`CHUNK_BYTES`], zstd or raw, each with the blake3 of its raw
//! bytes), in `blob_index` and `blob_chunks`.

use std::io::Write as IoWrite;

use sandlog_core::limits::BLOB_BYTES_MAX;
use sandlog_core::{Hash, Timestamp};
use sandlog_eventstore::blobs::{
    BlobPut, BlobState, BlobTotals, ErasedBlob, WrittenChunks, decode_chunk, write_chunks,
};
use sandlog_eventstore::error::{EventStoreError, Result, stored_u64};

use crate::PgResult;
use crate::{BLOB_LOCK_CLASS, PgEventStore, Session, to_i64};

fn state_in(session: &mut Session<'_>, hash: &Hash) -> Result<BlobState> {
    let row = session.query_opt(
        "SELECT size, stored, erased_at FROM blob_index WHERE hash = $1",
        &[&hash.0.as_slice()],
    )?;
    let Some(row) = row else {
        return Ok(BlobState::Missing);
    };
    let size: i64 = row.try_get(0).pg()?;
    let stored: i64 = row.try_get(1).pg()?;
    let erased_at: Option<i64> = row.try_get(2).pg()?;
    Ok(match erased_at {
        Some(erased_at) => BlobState::Erased {
            size: stored_u64(size, "blob_index.size")?,
            erased_at: Timestamp::from_unix_micros(erased_at),
        },
        None => BlobState::Kept {
            size: stored_u64(size, "blob_index.size")?,
            stored_bytes: stored_u64(stored, "blob_index.stored")?,
        },
    })
}

/// Writes a kept blob's chunks to `out` in order, one fetched at a time,
/// each checked against its hash before it is written, the whole checked
/// at the end.
fn copy_chunks(
    session: &mut Session<'_>,
    hash: &Hash,
    size: u64,
    out: &mut dyn IoWrite,
) -> Result<()> {
    let statement = session.statement(
        "SELECT seq, codec, raw_len, chunk_hash, data FROM blob_chunks WHERE hash = $1 ORDER BY seq",
    )?;
    let key = hash.0.as_slice();
    let portal = session.transaction.bind(&statement, &[&key]).pg()?;
    let corrupt = |actual: Hash| EventStoreError::BlobCorrupt {
        hash: *hash,
        actual,
    };
    let mut hasher = blake3::Hasher::new();
    let mut written = 0u64;
    let mut expected_seq = 0i64;
    loop {
        let rows = session.transaction.query_portal(&portal, 1).pg()?;
        let Some(row) = rows.first() else {
            break;
        };
        let seq: i64 = row.try_get(0).pg()?;
        let codec: i64 = row.try_get(1).pg()?;
        let raw_len: i64 = row.try_get(2).pg()?;
        let chunk_hash: &[u8] = row.try_get(3).pg()?;
        let data: &[u8] = row.try_get(4).pg()?;
        if seq != expected_seq {
            return Err(corrupt(Hash::GENESIS));
        }
        expected_seq += 1;
        let raw = decode_chunk(codec, raw_len, chunk_hash, data).map_err(corrupt)?;
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

/// Takes the advisory lock of blob `hash` for the rest of the transaction:
/// concurrent puts and erasures of the same blob, from any process, go one
/// after the other.
fn lock_blob(session: &mut Session<'_>, hash: &Hash) -> Result<()> {
    let [a, b, c, d, ..] = hash.0;
    let key = i32::from_be_bytes([a, b, c, d]);
    session.query(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&BLOB_LOCK_CLASS, &key],
    )?;
    Ok(())
}

/// Stores `bytes` under their blake3 inside the open transaction (see
/// [`PgEventStore::put_blob`]).
pub(crate) fn put_in(session: &mut Session<'_>, bytes: &[u8], now: Timestamp) -> Result<BlobPut> {
    if bytes.len() > BLOB_BYTES_MAX {
        return Err(EventStoreError::BlobTooLarge {
            size: bytes.len(),
            max: BLOB_BYTES_MAX,
        });
    }
    let mut reader = bytes;
    put_from_in(
        session,
        &mut reader,
        Some(Hash::of(bytes)),
        bytes.len() as u64,
        now,
    )
}

/// Stores what `reader` yields, at most `size_max` bytes, inside the open
/// transaction, as [`crate::Write::put_blob_from`] does on SQLite: chunks
/// go in as they are read (never the whole blob in memory), under the
/// expected hash or, without one, under a random key renamed once the
/// stream is hashed; a savepoint drops them if the bytes are refused or
/// already stored.
pub(crate) fn put_from_in(
    session: &mut Session<'_>,
    reader: &mut dyn std::io::Read,
    expected: Option<Hash>,
    size_max: u64,
    now: Timestamp,
) -> Result<BlobPut> {
    let size_max = size_max.min(BLOB_BYTES_MAX as u64);
    if let Some(hash) = &expected {
        lock_blob(session, hash)?;
        if let BlobState::Kept { size, .. } = state_in(session, hash)? {
            return Ok(BlobPut {
                hash: *hash,
                size,
                stored_bytes: 0,
                deduplicated: true,
            });
        }
    }
    let pending = *uuid::Uuid::new_v4().as_bytes();
    let key: Vec<u8> = match &expected {
        Some(hash) => hash.0.to_vec(),
        None => pending.to_vec(),
    };
    session
        .transaction
        .batch_execute("SAVEPOINT blob_put")
        .pg()?;
    match put_chunks(session, reader, expected, size_max, &key, now) {
        Ok(put) if put.deduplicated => {
            session
                .transaction
                .batch_execute("ROLLBACK TO SAVEPOINT blob_put; RELEASE SAVEPOINT blob_put")
                .pg()?;
            Ok(put)
        }
        Ok(put) => {
            session
                .transaction
                .batch_execute("RELEASE SAVEPOINT blob_put")
                .pg()?;
            Ok(put)
        }
        Err(error) => {
            session
                .transaction
                .batch_execute("ROLLBACK TO SAVEPOINT blob_put; RELEASE SAVEPOINT blob_put")
                .pg()?;
            Err(error)
        }
    }
}

fn put_chunks(
    session: &mut Session<'_>,
    reader: &mut dyn std::io::Read,
    expected: Option<Hash>,
    size_max: u64,
    key: &[u8],
    now: Timestamp,
) -> Result<BlobPut> {
    // An empty blob is one empty chunk, as on SQLite.
    let WrittenChunks {
        hash,
        size,
        stored,
        chunks: seq,
    } = write_chunks(reader, expected, size_max, |chunk| {
        session.execute(
            "INSERT INTO blob_chunks (hash, seq, codec, raw_len, chunk_hash, data) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &key,
                &chunk.seq,
                &chunk.codec,
                &to_i64(chunk.raw_len as u64, "chunk length")?,
                &chunk.chunk_hash.0.as_slice(),
                &chunk.data,
            ],
        )?;
        Ok(())
    })?;
    match expected {
        Some(_) => {}
        None => {
            lock_blob(session, &hash)?;
            if let BlobState::Kept { size, .. } = state_in(session, &hash)? {
                return Ok(BlobPut {
                    hash,
                    size,
                    stored_bytes: 0,
                    deduplicated: true,
                });
            }
            session.execute(
                "UPDATE blob_chunks SET hash = $2 WHERE hash = $1",
                &[&key, &hash.0.as_slice()],
            )?;
        }
    }
    match state_in(session, &hash)? {
        // Bytes written again after an erasure are new evidence: the row
        // is kept, its chunks come back.
        BlobState::Erased { .. } => {
            session.execute(
                "UPDATE blob_index SET stored = $2, chunks = $3, erased_at = NULL WHERE hash = $1",
                &[&hash.0.as_slice(), &to_i64(stored, "stored bytes")?, &seq],
            )?;
        }
        _ => {
            session.execute(
                "INSERT INTO blob_index (hash, size, stored, chunks, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &hash.0.as_slice(),
                    &to_i64(size, "blob size")?,
                    &to_i64(stored, "stored bytes")?,
                    &seq,
                    &now.unix_micros(),
                ],
            )?;
        }
    }
    Ok(BlobPut {
        hash,
        size,
        stored_bytes: stored,
        deduplicated: false,
    })
}

/// Deletes a blob's chunks; what it held, `None` if it is not stored.
fn delete_chunks(session: &mut Session<'_>, hash: &Hash) -> Result<Option<ErasedBlob>> {
    lock_blob(session, hash)?;
    let row = session.query_opt(
        "SELECT size, stored, erased_at FROM blob_index WHERE hash = $1",
        &[&hash.0.as_slice()],
    )?;
    let Some(row) = row else {
        return Ok(None);
    };
    let size: i64 = row.try_get(0).pg()?;
    let stored: i64 = row.try_get(1).pg()?;
    let erased_at: Option<i64> = row.try_get(2).pg()?;
    session.execute(
        "DELETE FROM blob_chunks WHERE hash = $1",
        &[&hash.0.as_slice()],
    )?;
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

/// Erases a kept blob's bytes inside the open transaction, keeping its
/// index row with the time of the erasure (see [`crate::Write::erase_blob`]).
pub(crate) fn erase_in(
    session: &mut Session<'_>,
    hash: &Hash,
    now: Timestamp,
) -> Result<Option<ErasedBlob>> {
    lock_blob(session, hash)?;
    if !matches!(state_in(session, hash)?, BlobState::Kept { .. }) {
        return Ok(None);
    }
    let erased = delete_chunks(session, hash)?;
    session.execute(
        "UPDATE blob_index SET stored = 0, chunks = 0, erased_at = $2 WHERE hash = $1",
        &[&hash.0.as_slice(), &now.unix_micros()],
    )?;
    Ok(erased)
}

/// Deletes a blob and its index row inside the open transaction.
pub(crate) fn remove_in(session: &mut Session<'_>, hash: &Hash) -> Result<Option<ErasedBlob>> {
    let removed = delete_chunks(session, hash)?;
    session.execute(
        "DELETE FROM blob_index WHERE hash = $1",
        &[&hash.0.as_slice()],
    )?;
    Ok(removed)
}

impl PgEventStore {
    /// Stores `bytes` under their blake3 in a transaction of its own and
    /// returns it. Idempotent, also across processes: a per-blob advisory
    /// lock makes concurrent puts of the same bytes store them once. Blobs
    /// that events name go in with the events instead
    /// ([`PgEventStore::write`]).
    pub fn put_blob(&self, bytes: &[u8]) -> Result<Hash> {
        let now = self.clock.now();
        Ok(self.with_write(|session| put_in(session, bytes, now))?.hash)
    }

    /// What the store knows of a blob.
    pub fn blob_state(&self, hash: &Hash) -> Result<BlobState> {
        self.with_read(|session| state_in(session, hash))
    }

    /// Writes a blob's bytes to `out`, a chunk at a time, each checked
    /// before it is written and the whole checked at the end
    /// ([`EventStoreError::BlobCorrupt`]). Returns the state; bytes are
    /// written only when it is [`BlobState::Kept`].
    pub fn read_blob(&self, hash: &Hash, out: &mut dyn IoWrite) -> Result<BlobState> {
        self.with_read_once(|session| {
            let state = state_in(session, hash)?;
            if let BlobState::Kept { size, .. } = state {
                copy_chunks(session, hash, size, out)?;
            }
            Ok(state)
        })
    }

    /// How many blobs are kept and erased, and their bytes.
    pub fn blob_totals(&self) -> Result<BlobTotals> {
        self.with_read(|session| {
            let rows = session.query(
                "SELECT count(*) FILTER (WHERE erased_at IS NULL), \
                 coalesce(sum(size) FILTER (WHERE erased_at IS NULL), 0)::int8, \
                 coalesce(sum(stored) FILTER (WHERE erased_at IS NULL), 0)::int8, \
                 count(*) FILTER (WHERE erased_at IS NOT NULL) FROM blob_index",
                &[],
            )?;
            let Some(row) = rows.first() else {
                return Ok(BlobTotals::default());
            };
            Ok(BlobTotals {
                kept: stored_u64(row.try_get(0).pg()?, "count of kept blobs")?,
                kept_bytes: stored_u64(row.try_get(1).pg()?, "sum of kept blob_index.size")?,
                stored_bytes: stored_u64(row.try_get(2).pg()?, "sum of kept blob_index.stored")?,
                erased: stored_u64(row.try_get(3).pg()?, "count of erased blobs")?,
            })
        })
    }

    /// Every blob's address, with whether its bytes are kept, in address
    /// order.
    pub fn blob_hashes(&self) -> Result<Vec<(Hash, bool)>> {
        self.with_read(|session| {
            let rows = session.query(
                "SELECT hash, erased_at IS NULL FROM blob_index ORDER BY hash",
                &[],
            )?;
            rows.iter()
                .map(|row| {
                    let bytes: &[u8] = row.try_get(0).pg()?;
                    let hash = Hash::from_slice(bytes).ok_or_else(|| EventStoreError::Corrupt {
                        position: sandlog_core::Position::ZERO,
                        reason: "a blob address is not 32 bytes".into(),
                    })?;
                    Ok((hash, row.try_get(1).pg()?))
                })
                .collect()
        })
    }

    /// The bytes stored under `hash`, checked, up to [`BLOB_BYTES_MAX`];
    /// `None` if never stored or erased.
    pub fn get_blob(&self, hash: &Hash) -> Result<Option<Vec<u8>>> {
        self.with_read(|session| match state_in(session, hash)? {
            BlobState::Kept { size, .. } if size > BLOB_BYTES_MAX as u64 => {
                Err(EventStoreError::BlobTooLarge {
                    size: usize::try_from(size).unwrap_or(usize::MAX),
                    max: BLOB_BYTES_MAX,
                })
            }
            BlobState::Kept { size, .. } => {
                let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                copy_chunks(session, hash, size, &mut bytes)?;
                Ok(Some(bytes))
            }
            _ => Ok(None),
        })
    }
}
