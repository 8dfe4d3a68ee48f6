//! Blobs on PostgreSQL: the chunk format of [`crate::blobs`] (chunks of at
//! most [`CHUNK_BYTES`], zstd or raw, each with the blake3 of its raw
//! bytes), in `blob_index` and `blob_chunks`.

use std::io::Write as IoWrite;

use sandlog_core::limits::BLOB_BYTES_MAX;
use sandlog_core::{Hash, Timestamp};

use crate::blobs::{BlobPut, BlobState, CHUNK_BYTES, decode_chunk, encode};
use crate::error::{EventStoreError, Result};

use super::{BLOB_LOCK_CLASS, PgEventStore, Session, to_i64};

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn state_in(session: &mut Session<'_>, hash: &Hash) -> Result<BlobState> {
    let row = session.query_opt(
        "SELECT size, stored, erased_at FROM blob_index WHERE hash = $1",
        &[&hash.0.as_slice()],
    )?;
    let Some(row) = row else {
        return Ok(BlobState::Missing);
    };
    let size: i64 = row.try_get(0)?;
    let stored: i64 = row.try_get(1)?;
    let erased_at: Option<i64> = row.try_get(2)?;
    Ok(match erased_at {
        Some(erased_at) => BlobState::Erased {
            size: to_u64(size),
            erased_at: Timestamp::from_unix_micros(erased_at),
        },
        None => BlobState::Kept {
            size: to_u64(size),
            stored_bytes: to_u64(stored),
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
    let portal = session.transaction.bind(&statement, &[&key])?;
    let corrupt = |actual: Hash| EventStoreError::BlobCorrupt {
        hash: *hash,
        actual,
    };
    let mut hasher = blake3::Hasher::new();
    let mut written = 0u64;
    let mut expected_seq = 0i64;
    loop {
        let rows = session.transaction.query_portal(&portal, 1)?;
        let Some(row) = rows.first() else {
            break;
        };
        let seq: i64 = row.try_get(0)?;
        let codec: i64 = row.try_get(1)?;
        let raw_len: i64 = row.try_get(2)?;
        let chunk_hash: &[u8] = row.try_get(3)?;
        let data: &[u8] = row.try_get(4)?;
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

/// Stores `bytes` under their blake3 inside the open transaction (see
/// [`PgEventStore::put_blob`]), after the blob's advisory lock.
pub(crate) fn put_in(session: &mut Session<'_>, bytes: &[u8], now: Timestamp) -> Result<BlobPut> {
    if bytes.len() > BLOB_BYTES_MAX {
        return Err(EventStoreError::BlobTooLarge {
            size: bytes.len(),
            max: BLOB_BYTES_MAX,
        });
    }
    let hash = Hash::of(bytes);
    let [a, b, c, d, ..] = hash.0;
    let key = i32::from_be_bytes([a, b, c, d]);
    session.query(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&BLOB_LOCK_CLASS, &key],
    )?;
    let state = state_in(session, &hash)?;
    if let BlobState::Kept { size, .. } = state {
        return Ok(BlobPut {
            hash,
            size,
            stored_bytes: 0,
            deduplicated: true,
        });
    }
    let mut stored = 0u64;
    let mut seq = 0i64;
    // An empty blob is one empty chunk, as on SQLite.
    let mut chunks = bytes.chunks(CHUNK_BYTES).peekable();
    let empty: [&[u8]; 1] = [&[]];
    let chunks: Box<dyn Iterator<Item = &[u8]>> = if chunks.peek().is_none() {
        Box::new(empty.into_iter())
    } else {
        Box::new(chunks)
    };
    for raw in chunks {
        let (codec, data) = encode(raw)?;
        stored += data.len() as u64;
        session.execute(
            "INSERT INTO blob_chunks (hash, seq, codec, raw_len, chunk_hash, data) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &hash.0.as_slice(),
                &seq,
                &codec,
                &to_i64(raw.len() as u64, "chunk length")?,
                &Hash::of(raw).0.as_slice(),
                &data,
            ],
        )?;
        seq += 1;
    }
    match state {
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
                    &to_i64(bytes.len() as u64, "blob size")?,
                    &to_i64(stored, "stored bytes")?,
                    &seq,
                    &now.unix_micros(),
                ],
            )?;
        }
    }
    Ok(BlobPut {
        hash,
        size: bytes.len() as u64,
        stored_bytes: stored,
        deduplicated: false,
    })
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
