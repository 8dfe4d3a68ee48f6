//! Content-addressed blobs, as every backend sees them: the code of each
//! execution, what it printed, and the bytes of files written by the host
//! or kept as evidence of a guest's writes, so a session can be
//! reconstructed as of any position.
//!
//! A blob is stored once per hash, in chunks of at most [`CHUNK_BYTES`],
//! each zstd-compressed (or kept raw when compression does not pay) and
//! carrying the blake3 of its raw bytes, so memory stays bounded by the
//! chunk size whatever the blob's, and a damaged chunk is caught before any
//! of its bytes are returned. This module holds the types and the chunk
//! codec; each backend stores the chunks in its own tables.

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
