//! The map of stream heads on PostgreSQL: the same tables, rows and roots
//! as the SQLite file's (see `crate::sqlite::map`), written in the append's
//! transaction under the append lock.

use std::cell::RefCell;

use sandlog_core::Envelope;
use sandlog_core::map::{self, MapNode, MapNodes, NodePath};
use sandlog_core::merkle::MerkleHash;
use sandlog_eventstore::error::{EventStoreError, Result, stored_u64};
use sandlog_eventstore::merkle::{head_changes, map_node_columns, map_node_from_columns};

use crate::PgResult;
use crate::{PgEventStore, Session, to_i64};

/// The map as of tree size `size`, read in one session.
struct PgMap<'s, 't> {
    session: RefCell<&'s mut Session<'t>>,
    size: i64,
}

impl MapNodes for PgMap<'_, '_> {
    type Error = EventStoreError;

    fn node(&self, path: &NodePath) -> Result<Option<MapNode>> {
        let row = self.session.borrow_mut().query_opt(
            "SELECT kind, a, b FROM map_nodes WHERE depth = $1 AND prefix = $2 AND size <= $3 \
             ORDER BY size DESC LIMIT 1",
            &[&i64::from(path.depth), &path.prefix(), &self.size],
        )?;
        row.map(|row| {
            let kind: i64 = row.try_get(0).pg()?;
            let a: &[u8] = row.try_get(1).pg()?;
            let b: &[u8] = row.try_get(2).pg()?;
            map_node_from_columns(path.depth, kind, a, b)
        })
        .transpose()
    }
}

fn write_version(
    session: &mut Session<'_>,
    size: u64,
    changes: &[([u8; 32], MerkleHash)],
) -> Result<MerkleHash> {
    let update = {
        let reader = PgMap {
            session: RefCell::new(&mut *session),
            size: i64::MAX,
        };
        map::update(&reader, changes)?
    };
    let size = to_i64(size, "tree size")?;
    let mut depths = Vec::with_capacity(update.nodes.len());
    let mut prefixes = Vec::with_capacity(update.nodes.len());
    let mut kinds = Vec::with_capacity(update.nodes.len());
    let mut lefts = Vec::with_capacity(update.nodes.len());
    let mut rights = Vec::with_capacity(update.nodes.len());
    for (path, node) in &update.nodes {
        let (kind, a, b) = map_node_columns(node);
        depths.push(i64::from(path.depth));
        prefixes.push(path.prefix().to_vec());
        kinds.push(kind);
        lefts.push(a.to_vec());
        rights.push(b.to_vec());
    }
    session.execute(
        "WITH nodes AS (INSERT INTO map_nodes (depth, prefix, size, kind, a, b) \
         SELECT d, p, $1, k, a, b FROM unnest($2::int8[], $3::bytea[], $4::int8[], $5::bytea[], \
         $6::bytea[]) AS n(d, p, k, a, b)) \
         INSERT INTO map_roots (size, root) VALUES ($1, $7)",
        &[
            &size,
            &depths,
            &prefixes,
            &kinds,
            &lefts,
            &rights,
            &update.root.0.as_slice(),
        ],
    )?;
    Ok(update.root)
}

/// Updates the map for the events one commit appended, in its transaction.
pub(crate) fn commit(session: &mut Session<'_>, envelopes: &[Envelope]) -> Result<()> {
    let Some(last) = envelopes.last() else {
        return Ok(());
    };
    write_version(session, last.position.0, &head_changes(envelopes))?;
    Ok(())
}

/// Drops the stored map and builds it from the log at its head (a
/// migration's transaction).
pub(crate) fn rebuild(session: &mut Session<'_>) -> Result<MerkleHash> {
    session.execute("DELETE FROM map_nodes", &[])?;
    session.execute("DELETE FROM map_roots", &[])?;
    let rows = session.query(
        "SELECT DISTINCT ON (stream) stream, version, position, hash FROM events \
         ORDER BY stream, version DESC",
        &[],
    )?;
    let mut changes = Vec::with_capacity(rows.len());
    let mut head = 0u64;
    for row in &rows {
        let stream: &str = row.try_get(0).pg()?;
        let version: i64 = row.try_get(1).pg()?;
        let position: i64 = row.try_get(2).pg()?;
        let hash: &[u8] = row.try_get(3).pg()?;
        let position = stored_u64(position, "events.position")?;
        head = head.max(position);
        let hash =
            sandlog_core::Hash::from_slice(hash).ok_or_else(|| EventStoreError::Corrupt {
                position: sandlog_core::Position(position),
                reason: "hash is not 32 bytes".into(),
            })?;
        changes.push((
            map::key_of(stream),
            map::StreamHead {
                version: stored_u64(version, "events.version")?,
                position,
                hash,
            }
            .value(),
        ));
    }
    if head == 0 {
        return Ok(map::EMPTY);
    }
    write_version(session, head, &changes)
}

impl PgEventStore {
    /// The map root at tree size `size` (a size an append committed at);
    /// see [`crate::EventStore::map_root`].
    pub fn map_root(&self, size: u64) -> Result<MerkleHash> {
        if size == 0 {
            return Ok(map::EMPTY);
        }
        self.with_read(|session| {
            let row = session.query_opt(
                "SELECT root FROM map_roots WHERE size = $1",
                &[&to_i64(size, "tree size")?],
            )?;
            let row = row.ok_or(EventStoreError::NoMapAt { size })?;
            let root: &[u8] = row.try_get(0).pg()?;
            let root: [u8; 32] = root
                .try_into()
                .map_err(|_| EventStoreError::MerkleDamaged {
                    reason: format!("the map root at size {size} is not 32 bytes"),
                })?;
            Ok(MerkleHash(root))
        })
    }
}
