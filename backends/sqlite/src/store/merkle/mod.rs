//! The Merkle tree's nodes in the SQLite file (`merkle_nodes`): reading
//! them (levels below [`STORED_LEVEL_MIN`] recomputed from the events),
//! adding the nodes an append completes, folding a log into the tree.

use rusqlite::{Connection, OptionalExtension, params};
use sandlog_core::merkle::{Frontier, MerkleHash, NodeId, NodeSource, frontier_ids};
use sandlog_core::{Envelope, Hash, Position};
use sandlog_eventstore::error::{EventStoreError, Result};
use sandlog_eventstore::merkle::{
    STORED_LEVEL_MIN, leaf_span, missing_node, nodes_to_store, stored_node_hash, subtree_of_events,
};

use crate::store::SqlResult;

mod store;

/// Events folded per transaction when the tree is rebuilt.
const REBUILD_BATCH_EVENTS: u64 = 50_000;

fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| EventStoreError::Corrupt {
        position: Position(value),
        reason: format!("{what} {value} is past the largest storable integer"),
    })
}

/// Reads nodes from one connection (or transaction), recomputing levels
/// below [`STORED_LEVEL_MIN`] from the events.
pub(crate) struct StoredNodes<'a> {
    pub(crate) connection: &'a Connection,
}

impl StoredNodes<'_> {
    /// Chain hashes of the events at leaf indexes `start..end`.
    fn event_hashes(&self, start: u64, end: u64) -> Result<Vec<Hash>> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT position, hash FROM events WHERE position > ?1 AND position <= ?2 ORDER BY position").sql()?;
        let mut rows = statement
            .query(params![to_i64(start, "leaf")?, to_i64(end, "leaf")?])
            .sql()?;
        let mut hashes = Vec::new();
        let mut expected = start + 1;
        while let Some(row) = rows.next().sql()? {
            let position: i64 = row.get(0).sql()?;
            let bytes: Vec<u8> = row.get(1).sql()?;
            let hash: [u8; 32] = bytes.try_into().map_err(|_| EventStoreError::Corrupt {
                position: Position(expected),
                reason: "hash is not 32 bytes".into(),
            })?;
            if u64::try_from(position).ok() != Some(expected) {
                return Err(EventStoreError::Corrupt {
                    position: Position(expected),
                    reason: "missing from the log".into(),
                });
            }
            expected += 1;
            hashes.push(Hash(hash));
        }
        if expected != end + 1 {
            return Err(EventStoreError::Corrupt {
                position: Position(expected),
                reason: "missing from the log".into(),
            });
        }
        Ok(hashes)
    }
}

impl NodeSource for StoredNodes<'_> {
    type Error = EventStoreError;

    fn node(&self, id: NodeId) -> Result<MerkleHash> {
        if id.level >= STORED_LEVEL_MIN {
            let hash: Option<Vec<u8>> = self
                .connection
                .prepare_cached("SELECT hash FROM merkle_nodes WHERE level = ?1 AND idx = ?2")
                .sql()?
                .query_row(params![id.level, to_i64(id.index, "node index")?], |row| {
                    row.get(0)
                })
                .optional()
                .sql()?;
            let hash = hash.ok_or_else(|| missing_node(id))?;
            return stored_node_hash(id, &hash);
        }
        let (start, end) = leaf_span(id)?;
        let leaves = self.event_hashes(start, end)?;
        subtree_of_events(id, &leaves)
    }
}

/// The frontier of the stored tree of `size` leaves.
pub(crate) fn load_frontier(connection: &Connection, size: u64) -> Result<Frontier> {
    let source = StoredNodes { connection };
    let hashes = frontier_ids(size)
        .into_iter()
        .map(|id| source.node(id))
        .collect::<Result<Vec<_>>>()?;
    Ok(Frontier::from_nodes(size, &hashes)?)
}

/// Adds `envelopes` (just inserted, in position order, right after leaf
/// `frontier.size()`) to the tree: the complete nodes at stored levels.
pub(crate) fn append_leaves(
    connection: &Connection,
    frontier: &mut Frontier,
    envelopes: &[Envelope],
) -> Result<()> {
    let mut insert = connection
        .prepare_cached("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?1, ?2, ?3)")
        .sql()?;
    for envelope in envelopes {
        debug_assert_eq!(envelope.position.0, frontier.size() + 1);
        for (id, hash) in nodes_to_store(frontier, &envelope.hash) {
            insert
                .execute(params![
                    id.level,
                    to_i64(id.index, "node index")?,
                    hash.0.as_slice()
                ])
                .sql()?;
        }
    }
    Ok(())
}

/// Folds the events after leaf `from` into the tree, in batches on the
/// given connection (a migration's or a rebuild's transaction).
pub(crate) fn fold_events(connection: &Connection, from: u64) -> Result<u64> {
    let head = crate::store::rows::log_length(connection)?;
    let mut frontier = load_frontier(connection, from)?;
    let mut insert = connection
        .prepare_cached("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?1, ?2, ?3)")
        .sql()?;
    let mut select = connection
        .prepare_cached("SELECT position, hash FROM events WHERE position > ?1 AND position <= ?2 ORDER BY position").sql()?;
    let mut done = from;
    while done < head {
        let until = head.min(done + REBUILD_BATCH_EVENTS);
        let mut rows = select
            .query(params![to_i64(done, "leaf")?, to_i64(until, "leaf")?])
            .sql()?;
        while let Some(row) = rows.next().sql()? {
            let position: i64 = row.get(0).sql()?;
            let bytes: Vec<u8> = row.get(1).sql()?;
            if u64::try_from(position).ok() != Some(frontier.size() + 1) {
                return Err(EventStoreError::Corrupt {
                    position: Position(frontier.size() + 1),
                    reason: "missing from the log".into(),
                });
            }
            let hash: [u8; 32] = bytes.try_into().map_err(|_| EventStoreError::Corrupt {
                position: Position(frontier.size() + 1),
                reason: "hash is not 32 bytes".into(),
            })?;
            for (id, node) in frontier.append(&hash) {
                if id.level >= STORED_LEVEL_MIN {
                    insert
                        .execute(params![
                            id.level,
                            to_i64(id.index, "node index")?,
                            node.0.as_slice()
                        ])
                        .sql()?;
                }
            }
        }
        done = until;
    }
    Ok(head - from)
}
