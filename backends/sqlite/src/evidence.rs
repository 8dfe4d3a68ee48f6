//! Queries on which events name which blobs (`rm_blob_refs`): what `gc`
//! keeps, what `erase` removes and what a legal hold protects. The pure rules
//! (which events name which blobs, the digest of them) are
//! `sandlog-projections`', re-exported here so a caller names one module.

use rusqlite::params;
use sandlog_core::{Hash, Position, SessionId, WorkspacePath};
use sandlog_projections::error::{ProjectionError, Result};
pub use sandlog_projections::evidence::*;

use super::query::session_id_column;
use crate::EventStore;
use crate::read_model::stored_u64;
use crate::store::SqlResult;

fn hash_column(bytes: &[u8]) -> Result<Hash> {
    Hash::from_slice(bytes)
        .ok_or_else(|| ProjectionError::Corrupt("a blob reference is not 32 bytes".into()))
}

fn ref_from_row(row: &rusqlite::Row<'_>) -> Result<BlobRef> {
    let hash: Vec<u8> = row.get(0).sql()?;
    let path: Option<String> = row.get(4).sql()?;
    Ok(BlobRef {
        hash: hash_column(&hash)?,
        session_id: session_id_column(row, 1)?,
        position: Position(stored_u64(row.get(2).sql()?, "rm_blob_refs.position")?),
        role: row.get(3).sql()?,
        path: match path {
            None => None,
            Some(text) => Some(WorkspacePath::parse(&text).map_err(|error| {
                ProjectionError::Corrupt(format!("blob reference path {text:?}: {error}"))
            })?),
        },
    })
}

/// The blob references of a session's events, in position order.
pub fn session_refs(store: &EventStore, session_id: SessionId) -> Result<Vec<BlobRef>> {
    store.with_reader(|connection| {
        let mut statement = connection.prepare_cached(
            "SELECT hash, session_id, position, role, path FROM rm_blob_refs \
             WHERE session_key = (SELECT session_key FROM rm_sessions WHERE session_id = ?1) ORDER BY position",
        ).sql()?;
        let mut rows = statement.query([session_id.to_string()]).sql()?;
        let mut refs = Vec::new();
        while let Some(row) = rows.next().sql()? {
            refs.push(ref_from_row(row)?);
        }
        Ok(refs)
    })
}

/// Every reference to `hash`, in position order.
pub fn refs_to(store: &EventStore, hash: &Hash) -> Result<Vec<BlobRef>> {
    store.with_reader(|connection| {
        let mut statement = connection.prepare_cached(
            "SELECT hash, session_id, position, role, path FROM rm_blob_refs WHERE hash = ?1 ORDER BY position",
        ).sql()?;
        let mut rows = statement.query([hash.0.as_slice()]).sql()?;
        let mut refs = Vec::new();
        while let Some(row) = rows.next().sql()? {
            refs.push(ref_from_row(row)?);
        }
        Ok(refs)
    })
}

/// Whether any event names `hash`.
pub fn is_referenced(store: &EventStore, hash: &Hash) -> Result<bool> {
    store.with_reader(|connection| {
        Ok(connection
            .prepare_cached("SELECT 1 FROM rm_blob_refs WHERE hash = ?1")
            .sql()?
            .exists([hash.0.as_slice()])
            .sql()?)
    })
}

/// Blobs whose newest reference is at or before `position` and that no
/// held session names: what a retention policy may erase.
pub fn expired_blobs(store: &EventStore, position: Position) -> Result<Vec<Hash>> {
    store.with_reader(|connection| {
        let mut statement = connection
            .prepare_cached(
                "SELECT refs.hash FROM rm_blob_refs AS refs \
             GROUP BY refs.hash HAVING max(refs.position) <= ?1 \
             AND NOT EXISTS (SELECT 1 FROM rm_blob_refs AS other JOIN rm_sessions AS held \
                 ON held.session_key = other.session_key \
                 WHERE other.hash = refs.hash AND held.held IS NOT NULL) \
             ORDER BY refs.hash",
            )
            .sql()?;
        let mut rows = statement
            .query(params![i64::try_from(position.0).unwrap_or(i64::MAX)])
            .sql()?;
        let mut hashes = Vec::new();
        while let Some(row) = rows.next().sql()? {
            let bytes: Vec<u8> = row.get(0).sql()?;
            hashes.push(hash_column(&bytes)?);
        }
        Ok(hashes)
    })
}

/// The held sessions (with their reasons) among those naming `hash`.
pub fn held_sessions_naming(store: &EventStore, hash: &Hash) -> Result<Vec<(SessionId, String)>> {
    store.with_reader(|connection| {
        let mut statement = connection.prepare_cached(
            "SELECT DISTINCT s.session_id, s.held FROM rm_blob_refs AS r JOIN rm_sessions AS s \
             ON s.session_key = r.session_key WHERE r.hash = ?1 AND s.held IS NOT NULL ORDER BY s.session_id",
        ).sql()?;
        let mut rows = statement.query([hash.0.as_slice()]).sql()?;
        let mut held = Vec::new();
        while let Some(row) = rows.next().sql()? {
            held.push((session_id_column(row, 0)?, row.get(1).sql()?));
        }
        Ok(held)
    })
}

/// Every blob some event says was stored, once each, in address order.
pub fn referenced_blobs(store: &EventStore) -> Result<Vec<Hash>> {
    store.with_reader(|connection| {
        let mut statement = connection
            .prepare_cached("SELECT DISTINCT hash FROM rm_blob_refs ORDER BY hash")
            .sql()?;
        let mut rows = statement.query([]).sql()?;
        let mut hashes = Vec::new();
        while let Some(row) = rows.next().sql()? {
            let bytes: Vec<u8> = row.get(0).sql()?;
            hashes.push(hash_column(&bytes)?);
        }
        Ok(hashes)
    })
}

/// The digest of every row of `rm_blob_refs`, in the order
/// [`sandlog_projections::evidence::log_refs_digest`] feeds the log's references, read
/// in one snapshot without holding the rows. A row that cannot be read
/// is a corrupt read model.
pub fn stored_refs_digest(store: &EventStore) -> Result<sandlog_projections::evidence::RefsDigest> {
    store.with_reader(|connection| {
        let mut statement = connection
            .prepare(
                "SELECT position, session_id, role, hash, path FROM rm_blob_refs \
             ORDER BY position, role, hash, path",
            )
            .sql()?;
        let mut rows = statement.query([]).sql()?;
        let mut digester = sandlog_projections::evidence::RefsDigester::default();
        while let Some(row) = rows.next().sql()? {
            let position = u64::try_from(row.get::<_, i64>(0).sql()?).map_err(|_| {
                ProjectionError::Corrupt("a blob reference has a negative position".into())
            })?;
            let session_id = session_id_column(row, 1)?;
            let role: String = row.get(2).sql()?;
            let hash: Vec<u8> = row.get(3).sql()?;
            let path: Option<String> = row.get(4).sql()?;
            digester.add(
                Position(position),
                session_id,
                &role,
                &hash_column(&hash)?,
                path.as_deref(),
            );
        }
        Ok(digester.finish())
    })
}
