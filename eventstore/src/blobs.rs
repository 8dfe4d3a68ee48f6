//! Content-addressed blobs, as every backend sees them: the code of each
//! execution, what it printed, and the bytes of files written by the host
//! or kept as evidence of a guest's writes, so a session can be
//! reconstructed as of any position.
//!
//! A blob is stored once per hash, in chunks of at most [`CHUNK_BYTES`],
//! each zstd-compressed (or kept raw when compression does not pay) and
//! carrying the blake3 of its raw bytes, so memory stays bounded by the
//! chunk size whatever the blob's, and a damaged chunk is caught before any
//! of its bytes are returned. This module holds the types, the chunk codec
//! and the loop that cuts a stream into chunks ([`write_chunks`]); each
//! backend stores the chunks in its own tables.

use std::io::Read;

use sandlog_core::limits::BLOB_BYTES_MAX;
use sandlog_core::{Hash, Timestamp};

use crate::error::{EventStoreError, Result};

/// Most raw bytes per chunk: the unit of compression, of integrity checks
/// on read, and of the memory a blob read or write holds.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// zstd's level for chunks: its default, fast enough to stay off the
/// execution's critical path.
const ZSTD_LEVEL: i32 = 3;

/// A chunk's bytes as given.
pub const CODEC_RAW: i64 = 0;
/// A chunk's bytes as one zstd frame.
pub const CODEC_ZSTD: i64 = 1;

/// What storing a blob did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobPut {
    /// Its address.
    pub hash: Hash,
    /// Its length, bytes.
    pub size: u64,
    /// Bytes this put added to the database (chunks as stored); 0 when the
    /// blob was stored already.
    pub stored_bytes: u64,
    /// Whether it was stored already (nothing written).
    pub deduplicated: bool,
}

/// What erasing or removing a blob freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErasedBlob {
    /// Its address.
    pub hash: Hash,
    /// Its length, bytes.
    pub size: u64,
    /// Bytes of chunks deleted.
    pub stored_bytes: u64,
}

/// What the store knows of a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobState {
    /// Never stored (or removed as unreferenced).
    Missing,
    /// Stored.
    Kept {
        /// Length, bytes.
        size: u64,
        /// Bytes as stored (compressed).
        stored_bytes: u64,
    },
    /// Stored once, its bytes since erased.
    Erased {
        /// Length, bytes.
        size: u64,
        /// When.
        erased_at: Timestamp,
    },
}

/// Totals of the blob store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobTotals {
    /// Blobs with their bytes.
    pub kept: u64,
    /// Their raw length, bytes.
    pub kept_bytes: u64,
    /// Their length as stored, bytes.
    pub stored_bytes: u64,
    /// Blobs erased.
    pub erased: u64,
}

/// One chunk of a blob being written, encoded, for a backend to store.
#[derive(Debug, Clone, Copy)]
pub struct EncodedChunk<'a> {
    /// Its place in the blob, from 0.
    pub seq: i64,
    /// [`CODEC_RAW`] or [`CODEC_ZSTD`].
    pub codec: i64,
    /// Its raw length, bytes (at most [`CHUNK_BYTES`]).
    pub raw_len: usize,
    /// The blake3 of its raw bytes.
    pub chunk_hash: Hash,
    /// Its bytes as stored.
    pub data: &'a [u8],
}

/// What [`write_chunks`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenChunks {
    /// The blake3 of the whole stream.
    pub hash: Hash,
    /// Its length, bytes.
    pub size: u64,
    /// Bytes of chunks as stored.
    pub stored: u64,
    /// How many chunks.
    pub chunks: i64,
}

/// Cuts what `reader` yields into chunks of [`CHUNK_BYTES`], encodes each
/// and hands it to `store`, holding one chunk in memory at a time. An
/// empty stream is one empty chunk. Fails with
/// [`EventStoreError::BlobTooLarge`] past `size_max` bytes and, when the
/// stream does not hash to `expected`, with
/// [`EventStoreError::BlobHashMismatch`]: the caller drops what `store`
/// wrote (every backend writes a blob under a savepoint). The same loop
/// for every backend, so the same bytes give the same chunks everywhere.
pub fn write_chunks(
    reader: &mut dyn Read,
    expected: Option<Hash>,
    size_max: u64,
    mut store: impl FnMut(EncodedChunk<'_>) -> Result<()>,
) -> Result<WrittenChunks> {
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let (mut size, mut stored, mut seq) = (0u64, 0u64, 0i64);
    loop {
        let read = fill(reader, &mut buffer).map_err(|source| EventStoreError::Io {
            context: "reading the bytes of a blob".into(),
            source,
        })?;
        let Some(raw) = buffer.get(..read) else {
            break;
        };
        if raw.is_empty() && seq > 0 {
            break;
        }
        size += read as u64;
        if size > size_max {
            return Err(EventStoreError::BlobTooLarge {
                size: usize::try_from(size).unwrap_or(usize::MAX),
                max: usize::try_from(size_max).unwrap_or(usize::MAX),
            });
        }
        hasher.update(raw);
        let (codec, data) = encode(raw)?;
        stored += data.len() as u64;
        store(EncodedChunk {
            seq,
            codec,
            raw_len: read,
            chunk_hash: Hash::of(raw),
            data: &data,
        })?;
        seq += 1;
        if read < CHUNK_BYTES {
            break;
        }
    }
    let hash = Hash(*hasher.finalize().as_bytes());
    if let Some(expected) = expected
        && expected != hash
    {
        return Err(EventStoreError::BlobHashMismatch {
            expected,
            actual: hash,
        });
    }
    Ok(WrittenChunks {
        hash,
        size,
        stored,
        chunks: seq,
    })
}

/// Fills `buffer` from `reader` as far as it goes; returns how much.
pub fn fill(reader: &mut dyn Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        let Some(rest) = buffer.get_mut(filled..) else {
            break;
        };
        match reader.read(rest) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Compresses one chunk, or keeps it raw when that is not smaller.
pub fn encode(raw: &[u8]) -> Result<(i64, Vec<u8>)> {
    let compressed =
        zstd::bulk::compress(raw, ZSTD_LEVEL).map_err(|source| EventStoreError::Io {
            context: "compressing a blob chunk".into(),
            source,
        })?;
    Ok(if compressed.len() < raw.len() {
        (CODEC_ZSTD, compressed)
    } else {
        (CODEC_RAW, raw.to_vec())
    })
}

/// One stored chunk's raw bytes, checked against its length and hash.
/// Pure, shared by every backend. The error is what the bytes hash to
/// (the zero hash when they cannot even be decoded), for
/// [`EventStoreError::BlobCorrupt`].
pub fn decode_chunk(
    codec: i64,
    raw_len: i64,
    chunk_hash: &[u8],
    data: &[u8],
) -> std::result::Result<Vec<u8>, Hash> {
    let raw_len = usize::try_from(raw_len)
        .ok()
        .filter(|len| *len <= CHUNK_BYTES.max(BLOB_BYTES_MAX))
        .ok_or(Hash::GENESIS)?;
    let raw = match codec {
        CODEC_RAW => data.to_vec(),
        CODEC_ZSTD => zstd::bulk::decompress(data, raw_len).map_err(|_| Hash::GENESIS)?,
        _ => return Err(Hash::GENESIS),
    };
    let actual = Hash::of(&raw);
    if raw.len() != raw_len || Hash::from_slice(chunk_hash) != Some(actual) {
        return Err(actual);
    }
    Ok(raw)
}
