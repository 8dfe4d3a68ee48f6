//! Content-addressed blobs: file contents written through the host API and
//! the code of each execution, so a session can be reconstructed as of any
//! position.

use rusqlite::OptionalExtension;
use sandlog_core::Hash;
use sandlog_core::limits::BLOB_BYTES_MAX;

use crate::error::{EventStoreError, Result};
use crate::sqlite::EventStore;

impl EventStore {
    /// Stores `bytes` under their blake3 and returns it. Idempotent: storing
    /// the same bytes again writes nothing.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<Hash> {
        if bytes.len() > BLOB_BYTES_MAX {
            return Err(EventStoreError::BlobTooLarge {
                size: bytes.len(),
                max: BLOB_BYTES_MAX,
            });
        }
        self.check_not_poisoned()?;
        let hash = Hash::of(bytes);
        let connection = self.lock_writer();
        let mut statement = connection
            .prepare_cached("INSERT OR IGNORE INTO blobs (hash, size, data) VALUES (?1, ?2, ?3)")?;
        statement.execute(rusqlite::params![
            hash.0.as_slice(),
            bytes.len() as i64,
            bytes
        ])?;
        Ok(hash)
    }

    /// The bytes stored under `hash`, checked against it: a damaged blob is
    /// [`EventStoreError::BlobCorrupt`], never returned.
    pub fn get_blob(&self, hash: &Hash) -> Result<Option<Vec<u8>>> {
        let connection = self.lock_reader();
        let mut statement = connection.prepare_cached("SELECT data FROM blobs WHERE hash = ?1")?;
        let bytes: Option<Vec<u8>> = statement
            .query_row([hash.0.as_slice()], |row| row.get(0))
            .optional()?;
        match bytes {
            None => Ok(None),
            Some(bytes) => {
                let actual = Hash::of(&bytes);
                if actual != *hash {
                    return Err(EventStoreError::BlobCorrupt {
                        hash: *hash,
                        actual,
                    });
                }
                Ok(Some(bytes))
            }
        }
    }

    /// Whether a blob is stored.
    pub fn has_blob(&self, hash: &Hash) -> Result<bool> {
        let connection = self.lock_reader();
        let mut statement = connection.prepare_cached("SELECT 1 FROM blobs WHERE hash = ?1")?;
        Ok(statement.exists([hash.0.as_slice()])?)
    }
}
