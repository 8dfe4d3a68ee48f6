//! The [`EventStore`] methods over the stored tree: its head and roots,
//! inclusion and consistency proofs, verification, checkpoints, rebuilding.

use rusqlite::{OptionalExtension, params};
use sandlog_core::Position;
use sandlog_core::merkle::{self, Frontier, MerkleHash};
use sandlog_eventstore::error::{EventStoreError, Result};
use sandlog_eventstore::merkle::{
    MerkleReport, STORED_LEVEL_MIN, StoredCheckpoint, check_consistency_sizes, check_tree_size,
    inclusion_index, missing_node,
};

use super::{StoredNodes, fold_events, to_i64};
use crate::store::EventStore;
use crate::store::SqlResult;
use crate::store::rows::log_length;

impl EventStore {
    /// The tree's size (the log's length) and root, read in one snapshot.
    pub fn merkle_head(&self) -> Result<(u64, MerkleHash)> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        let size = log_length(&snapshot)?;
        let root = merkle::root(
            &StoredNodes {
                connection: &snapshot,
            },
            size,
        )?;
        Ok((size, root))
    }

    /// The root of the tree of the first `size` events.
    pub fn merkle_root(&self, size: u64) -> Result<MerkleHash> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        let head = log_length(&snapshot)?;
        check_tree_size(size, head)?;
        merkle::root(
            &StoredNodes {
                connection: &snapshot,
            },
            size,
        )
    }

    /// RFC 6962 inclusion proof of the event at `position` in the tree of
    /// the first `size` events (`position <= size <= head`).
    pub fn inclusion_proof(&self, position: Position, size: u64) -> Result<Vec<MerkleHash>> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        let index = inclusion_index(position, size, log_length(&snapshot)?)?;
        merkle::inclusion_proof(
            &StoredNodes {
                connection: &snapshot,
            },
            index,
            size,
        )
    }

    /// RFC 6962 consistency proof between the trees of the first `old` and
    /// `new` events (`old <= new <= head`).
    pub fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<MerkleHash>> {
        let mut connection = self.lock_reader();
        let snapshot = connection.transaction().sql()?;
        check_consistency_sizes(old, new, log_length(&snapshot)?)?;
        merkle::consistency_proof(
            &StoredNodes {
                connection: &snapshot,
            },
            old,
            new,
        )
    }

    /// Recomputes the tree from the events and compares every stored node
    /// with it. A node that differs or is missing is
    /// [`EventStoreError::MerkleDamaged`]; the events themselves are
    /// checked by [`EventStore::verify`].
    pub fn verify_merkle(&self) -> Result<MerkleReport> {
        let connection = self.open_read_only_connection()?;
        let snapshot = connection.unchecked_transaction().sql()?;
        let size = log_length(&snapshot)?;
        let mut frontier = Frontier::new();
        let mut select = snapshot
            .prepare("SELECT hash FROM events ORDER BY position")
            .sql()?;
        let mut stored = snapshot
            .prepare("SELECT hash FROM merkle_nodes WHERE level = ?1 AND idx = ?2")
            .sql()?;
        let mut rows = select.query([]).sql()?;
        let mut nodes_checked = 0u64;
        while let Some(row) = rows.next().sql()? {
            let bytes: Vec<u8> = row.get(0).sql()?;
            for (id, node) in frontier.append(&bytes) {
                if id.level < STORED_LEVEL_MIN {
                    continue;
                }
                let found: Option<Vec<u8>> = stored
                    .query_row(params![id.level, to_i64(id.index, "node index")?], |row| {
                        row.get(0)
                    })
                    .optional()
                    .sql()?;
                match found {
                    Some(found) if found == node.0 => nodes_checked += 1,
                    Some(_) => {
                        return Err(EventStoreError::MerkleDamaged {
                            reason: format!(
                                "node level {} index {} differs from the tree of the events (leaves {}..{})",
                                id.level,
                                id.index,
                                id.index << id.level,
                                (id.index + 1) << id.level
                            ),
                        });
                    }
                    None => return Err(missing_node(id)),
                }
            }
        }
        let extra: i64 = snapshot
            .query_row("SELECT count(*) FROM merkle_nodes", [], |row| row.get(0))
            .sql()?;
        if u64::try_from(extra).ok() != Some(nodes_checked) {
            return Err(EventStoreError::MerkleDamaged {
                reason: format!(
                    "{extra} nodes are stored but the events make {nodes_checked}: rebuild the tree"
                ),
            });
        }
        Ok(MerkleReport {
            size,
            root: frontier.root(),
            nodes_checked,
        })
    }

    /// Keeps a signed checkpoint (its note exactly as signed).
    pub fn store_checkpoint(&self, size: u64, root: &MerkleHash, note: &str) -> Result<()> {
        let recorded_at = self.clock.now().unix_micros();
        self.with_write_transaction(|transaction| -> Result<()> {
            transaction.execute(
                "INSERT INTO checkpoints (size, root, note, recorded_at) VALUES (?1, ?2, ?3, ?4)",
                params![
                    to_i64(size, "tree size")?,
                    root.0.as_slice(),
                    note,
                    recorded_at
                ],
            ).sql()?;
            Ok(())
        })
    }

    /// The newest stored checkpoint, if any.
    pub fn latest_checkpoint(&self) -> Result<Option<StoredCheckpoint>> {
        let connection = self.lock_reader();
        let row = connection
            .prepare_cached(
                "SELECT size, root, note, recorded_at FROM checkpoints ORDER BY id DESC LIMIT 1",
            )
            .sql()?
            .query_row([], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })
            .optional()
            .sql()?;
        let Some((size, root, note, recorded_at)) = row else {
            return Ok(None);
        };
        let damaged = |what: &str| EventStoreError::MerkleDamaged {
            reason: format!("stored checkpoint: {what}"),
        };
        Ok(Some(StoredCheckpoint {
            size: u64::try_from(size).map_err(|_| damaged("negative size"))?,
            root: MerkleHash(
                root.try_into()
                    .map_err(|_| damaged("root is not 32 bytes"))?,
            ),
            note,
            recorded_at: sandlog_core::Timestamp::from_unix_micros(recorded_at),
        }))
    }

    /// Drops the stored tree and the map of stream heads and folds them
    /// again from the events, in one transaction: readers see the old
    /// ones or the new ones. The map is rebuilt at the head and at each
    /// stored checkpoint's size.
    pub fn rebuild_merkle(&self) -> Result<u64> {
        let folded = self.with_write_transaction(|transaction| -> Result<u64> {
            transaction.execute("DELETE FROM merkle_nodes", []).sql()?;
            let folded = fold_events(transaction, 0)?;
            crate::store::map::rebuild(transaction)?;
            Ok(folded)
        })?;
        self.frontier.clear();
        Ok(folded)
    }
}
