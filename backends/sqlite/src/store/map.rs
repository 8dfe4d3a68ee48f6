//! The map of stream heads in the SQLite file (see `sandlog_core::map`):
//! every version of it, written in the transaction of the append it
//! summarises.
//!
//! # Storage
//!
//! `map_nodes(depth, prefix, size, kind, a, b)` holds a node each time one
//! is written: the place (`depth` bits of the key, `prefix` the bytes that
//! hold them), the tree size of the commit that wrote it, and the node.
//! The map at size `N` reads, at each place, the newest row of size
//! `<= N`: a persistent tree, where a commit writes only the paths to the
//! streams it changed (about `log2(streams)` rows each). Streams are never
//! removed, so a place once filled stays filled and the newest row at a
//! place is always the right one.
//!
//! `map_roots(size, root)` names the sizes a map is kept at: one row per
//! commit; after a build from the log (an upgrade, a rebuild), one at the
//! head and one at each stored checkpoint's size. A proof is only given
//! at those sizes.

use rusqlite::{Connection, OptionalExtension, params};
use sandlog_core::map::{self, MapNode, MapNodes, MapProof, NodePath, StreamHead};
use sandlog_core::merkle::MerkleHash;
use sandlog_core::{Envelope, Hash, Position};
use sandlog_eventstore::error::{EventStoreError, Result, stored_u64};
use sandlog_eventstore::merkle::{head_changes, map_node_columns, map_node_from_columns};

use super::EventStore;
use super::rows::log_length;
use crate::store::SqlResult;

/// The schema version that added the map.
pub(crate) const MAP_SCHEMA_VERSION: i64 = 6;

/// The migration script (`MIGRATIONS[5]`).
pub(crate) const MIGRATION: &str = r#"
    CREATE TABLE map_nodes (
        depth  INTEGER NOT NULL,
        prefix BLOB    NOT NULL,
        size   INTEGER NOT NULL,
        kind   INTEGER NOT NULL,
        a      BLOB    NOT NULL,
        b      BLOB    NOT NULL,
        PRIMARY KEY (depth, prefix, size)
    ) WITHOUT ROWID;
    CREATE TABLE map_roots (
        size INTEGER PRIMARY KEY,
        root BLOB    NOT NULL
    );
"#;

fn to_i64(value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| EventStoreError::Corrupt {
        position: Position(value),
        reason: format!("tree size {value} is past the largest storable integer"),
    })
}

/// The map as of tree size `size`, read on one connection.
pub(crate) struct StoredMap<'a> {
    pub(crate) connection: &'a Connection,
    pub(crate) size: i64,
}

impl MapNodes for StoredMap<'_> {
    type Error = EventStoreError;

    fn node(&self, path: &NodePath) -> Result<Option<MapNode>> {
        let row: Option<(i64, Vec<u8>, Vec<u8>)> = self
            .connection
            .prepare_cached(
                "SELECT kind, a, b FROM map_nodes WHERE depth = ?1 AND prefix = ?2 AND size <= ?3 \
                 ORDER BY size DESC LIMIT 1",
            )
            .sql()?
            .query_row(params![path.depth, path.prefix(), self.size], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()
            .sql()?;
        row.map(|(kind, a, b)| map_node_from_columns(path.depth, kind, &a, &b))
            .transpose()
    }
}

/// Writes `changes` as the map of tree size `size` (a commit's last
/// position), on top of the newest map.
fn write_version(
    connection: &Connection,
    size: u64,
    changes: &[([u8; 32], MerkleHash)],
) -> Result<MerkleHash> {
    let update = map::update(
        &StoredMap {
            connection,
            size: i64::MAX,
        },
        changes,
    )?;
    let size = to_i64(size)?;
    let mut insert = connection.prepare_cached(
        "INSERT INTO map_nodes (depth, prefix, size, kind, a, b) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    ).sql()?;
    for (path, node) in &update.nodes {
        let (kind, a, b) = map_node_columns(node);
        insert
            .execute(params![
                path.depth,
                path.prefix(),
                size,
                kind,
                a.as_slice(),
                b.as_slice()
            ])
            .sql()?;
    }
    connection
        .prepare_cached("INSERT INTO map_roots (size, root) VALUES (?1, ?2)")
        .sql()?
        .execute(params![size, update.root.0.as_slice()])
        .sql()?;
    Ok(update.root)
}

/// Updates the map for `envelopes`, the events one commit appended (in
/// position order), in that commit's transaction.
pub(crate) fn commit(connection: &Connection, envelopes: &[Envelope]) -> Result<()> {
    let Some(last) = envelopes.last() else {
        return Ok(());
    };
    write_version(connection, last.position.0, &head_changes(envelopes))?;
    Ok(())
}

/// Every stream's head in the log, read from the events (each stream's
/// highest version).
fn log_heads(connection: &Connection) -> Result<Vec<([u8; 32], MerkleHash)>> {
    let mut select = connection
        .prepare_cached(
            "SELECT streams.stream, events.version, events.position, events.hash \
         FROM streams JOIN events ON events.stream_key = streams.key \
         AND events.version = (SELECT max(version) FROM events WHERE stream_key = streams.key)",
        )
        .sql()?;
    let mut rows = select.query([]).sql()?;
    let mut heads = map::HeadFold::default();
    while let Some(row) = rows.next().sql()? {
        let (stream, version, position, hash) = head_row(row)?;
        heads.push(&stream, version, position, hash);
    }
    Ok(heads.take())
}

/// One `(stream, version, position, hash)` row.
fn head_row(row: &rusqlite::Row<'_>) -> Result<(String, u64, u64, Hash)> {
    let stream: String = row.get(0).sql()?;
    let version: i64 = row.get(1).sql()?;
    let position: i64 = row.get(2).sql()?;
    let hash: Vec<u8> = row.get(3).sql()?;
    let position = stored_u64(position, "events.position")?;
    let hash = Hash::from_slice(&hash).ok_or_else(|| EventStoreError::Corrupt {
        position: Position(position),
        reason: "hash is not 32 bytes".into(),
    })?;
    Ok((
        stream,
        stored_u64(version, "events.version")?,
        position,
        hash,
    ))
}

/// Drops the stored map and builds it again from the log, on the given
/// connection (a migration's or a rebuild's transaction): at the size of
/// every stored checkpoint (so each can still be proven against) and at
/// the head. Commit sizes in between keep no map. Memory grows with the
/// number of streams and of checkpoints, not of events.
pub(crate) fn rebuild(connection: &Connection) -> Result<MerkleHash> {
    connection
        .execute_batch("DELETE FROM map_nodes; DELETE FROM map_roots;")
        .sql()?;
    let head = log_length(connection)?;
    if head == 0 {
        return Ok(map::EMPTY);
    }
    let mut sizes: Vec<u64> = {
        let mut select = connection
            .prepare("SELECT DISTINCT size FROM checkpoints WHERE size > 0 ORDER BY size")
            .sql()?;
        let rows = select.query_map([], |row| row.get::<_, i64>(0)).sql()?;
        let mut sizes = Vec::new();
        for size in rows {
            if let Ok(size) = u64::try_from(size.sql()?)
                && size < head
            {
                sizes.push(size);
            }
        }
        sizes
    };
    if sizes.is_empty() {
        // The head alone: one query for each stream's last event.
        return write_version(connection, head, &log_heads(connection)?);
    }
    sizes.push(head);
    let mut select = connection
        .prepare("SELECT stream, version, position, hash FROM events ORDER BY position")
        .sql()?;
    let mut rows = select.query([]).sql()?;
    let mut heads = map::HeadFold::default();
    let mut root = map::EMPTY;
    let mut next = sizes.iter().copied().peekable();
    while let Some(row) = rows.next().sql()? {
        let (stream, version, position, hash) = head_row(row)?;
        heads.push(&stream, version, position, hash);
        if next.peek() == Some(&position) {
            next.next();
            root = write_version(connection, position, &heads.take())?;
        }
    }
    Ok(root)
}

/// A stream's head as of tree size `size`: its last event at a position
/// `<= size`.
fn stream_head_at(connection: &Connection, stream: &str, size: u64) -> Result<Option<StreamHead>> {
    let row: Option<(i64, i64, Vec<u8>)> = connection
        .prepare_cached(
            "SELECT version, position, hash FROM events \
             WHERE stream_key = (SELECT key FROM streams WHERE stream = ?1) AND position <= ?2 \
             ORDER BY version DESC LIMIT 1",
        )
        .sql()?
        .query_row(params![stream, to_i64(size)?], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
        .sql()?;
    row.map(|(version, position, hash)| {
        let position = stored_u64(position, "events.position")?;
        Ok(StreamHead {
            version: stored_u64(version, "events.version")?,
            position,
            hash: Hash::from_slice(&hash).ok_or_else(|| EventStoreError::Corrupt {
                position: Position(position),
                reason: "hash is not 32 bytes".into(),
            })?,
        })
    })
    .transpose()
}

fn stored_root(connection: &Connection, size: u64) -> Result<MerkleHash> {
    if size == 0 {
        return Ok(map::EMPTY);
    }
    let root: Option<Vec<u8>> = connection
        .prepare_cached("SELECT root FROM map_roots WHERE size = ?1")
        .sql()?
        .query_row([to_i64(size)?], |row| row.get(0))
        .optional()
        .sql()?;
    let root = root.ok_or(EventStoreError::NoMapAt { size })?;
    let root: [u8; 32] = root
        .try_into()
        .map_err(|_| EventStoreError::MerkleDamaged {
            reason: format!("the map root at size {size} is not 32 bytes"),
        })?;
    Ok(MerkleHash(root))
}

/// A stream's head at a tree size, with its map proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeadProof {
    /// The tree size.
    pub size: u64,
    /// The map root at that size.
    pub map_root: MerkleHash,
    /// The stream's head then, `None` if it had no event yet.
    pub head: Option<StreamHead>,
    /// The proof of `head` (or of absence) against `map_root`.
    pub proof: MapProof,
}

impl EventStore {
    /// The tree's size, root and map root at the head, read in one
    /// snapshot: what a checkpoint signs.
    pub fn checkpoint_head(&self) -> Result<(u64, MerkleHash, MerkleHash)> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        let size = log_length(&snapshot)?;
        let root = sandlog_core::merkle::root(
            &super::merkle::StoredNodes {
                connection: &snapshot,
            },
            size,
        )?;
        let map_root = stored_root(&snapshot, size)?;
        Ok((size, root, map_root))
    }

    /// The map root at tree size `size` (a size an append committed at).
    pub fn map_root(&self, size: u64) -> Result<MerkleHash> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        sandlog_eventstore::merkle::check_tree_size(size, log_length(&snapshot)?)?;
        stored_root(&snapshot, size)
    }

    /// `stream`'s head at tree size `size` and its map proof (or the
    /// proof that it had no event yet). The proof is checked against the
    /// stored root before it is returned, and the head it proves against
    /// the events, so a damaged map is an error here, not a bad proof.
    pub fn stream_head_proof(&self, stream: &str, size: u64) -> Result<StreamHeadProof> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        sandlog_eventstore::merkle::check_tree_size(size, log_length(&snapshot)?)?;
        let map_root = stored_root(&snapshot, size)?;
        let proof = map::prove(
            &StoredMap {
                connection: &snapshot,
                size: to_i64(size)?,
            },
            &map::key_of(stream),
        )?;
        let head = stream_head_at(&snapshot, stream, size)?;
        let value = head.map(|head| head.value());
        map::verify(&map_root, &map::key_of(stream), value.as_ref(), &proof).map_err(|error| {
            EventStoreError::MerkleDamaged {
                reason: format!(
                    "the map at size {size} disagrees with the events of {stream}: {error}; \
                     rebuild it with `sandlog tree rebuild`"
                ),
            }
        })?;
        Ok(StreamHeadProof {
            size,
            map_root,
            head,
            proof,
        })
    }

    /// The stored map roots with sizes in `from..`, in size order, at
    /// most `limit` of them (an auditor pages through them).
    pub fn map_roots(&self, from: u64, limit: u32) -> Result<Vec<(u64, MerkleHash)>> {
        let connection = self.lock_reader();
        let mut select = connection
            .prepare_cached(
                "SELECT size, root FROM map_roots WHERE size >= ?1 ORDER BY size LIMIT ?2",
            )
            .sql()?;
        let mut rows = select.query(params![to_i64(from)?, limit]).sql()?;
        let mut roots = Vec::new();
        while let Some(row) = rows.next().sql()? {
            let size: i64 = row.get(0).sql()?;
            let root: Vec<u8> = row.get(1).sql()?;
            let size = stored_u64(size, "map_roots.size")?;
            let root: [u8; 32] = root
                .try_into()
                .map_err(|_| EventStoreError::MerkleDamaged {
                    reason: format!("the map root at size {size} is not 32 bytes"),
                })?;
            roots.push((size, MerkleHash(root)));
        }
        Ok(roots)
    }

    /// Drops the stored map and builds it again from the log (at its head
    /// and at each stored checkpoint's size; other sizes keep no map), in
    /// one transaction.
    pub fn rebuild_map(&self) -> Result<MerkleHash> {
        self.with_write_transaction(|transaction| rebuild(transaction))
    }

    /// Time appends through this handle spent updating the map since it
    /// was opened (see [`EventStore::merkle_time`]).
    pub fn map_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.map_nanos.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Recomputes the map at the head from the events (each stream's last
    /// event) and compares it with the stored root. Returns the root.
    pub fn verify_map(&self) -> Result<MerkleHash> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        let size = log_length(&snapshot)?;
        let stored = stored_root(&snapshot, size)?;
        let mut fresh = map::MemoryMap::new();
        let computed = fresh.apply(&log_heads(&snapshot)?)?;
        if stored != computed {
            return Err(EventStoreError::MerkleDamaged {
                reason: format!(
                    "the stored map root at size {size} is {}, the events make {}: \
                     rebuild it with `sandlog tree rebuild`",
                    stored.to_hex(),
                    computed.to_hex()
                ),
            });
        }
        Ok(stored)
    }
}
