//! The RFC 6962 Merkle tree over the log, stored beside the events and
//! updated in the same transaction as every append.
//!
//! # Storage
//!
//! ```text
//!  level
//!    6   ·                                 (64 leaves)
//!    5   ·               ·                 (32)
//!    4   ▢       ▢       ▢       ▢         (16)  ← stored from here up
//!   0-3  ┄┄┄┄┄┄┄ recomputed from events.hash ┄┄┄┄┄┄┄
//!        leaf i = SHA-256(0x00 ‖ hash of the event at position i + 1)
//! ```
//!
//! `merkle_nodes(level, idx, hash)` holds every *complete* subtree of
//! level [`STORED_LEVEL_MIN`] or more: about one row per eight events. The
//! levels below are recomputed on demand from the events' chain hashes (one
//! range read of at most 2^[`STORED_LEVEL_MIN`] rows), which is what makes
//! the tree cheap to maintain: a row per event would cost more than the
//! event itself. Nodes are never changed once written, so the table grows
//! like the log.
//!
//! **Invariant:** the stored tree always covers the whole log. Every append
//! adds the nodes its events complete, in its own transaction; the
//! migration that created the table folded the events already there.
//! Appends find the right edge (the [`Frontier`]) in memory when no other
//! process appended since, else read it back: O(log n) point reads.

use std::sync::{Mutex, MutexGuard};

use sandlog_core::merkle::{self, Frontier, MerkleError, MerkleHash, NodeId};
use sandlog_core::{Hash, Position};

use crate::error::{EventStoreError, Result};

/// The lowest level stored. Proofs recompute the levels below from at most
/// `2^STORED_LEVEL_MIN` event hashes per stored node they stand in for.
pub const STORED_LEVEL_MIN: u8 = 4;

/// The right edge of the tree as of the last append this process made.
#[derive(Debug, Default)]
pub struct FrontierCache(Mutex<Option<Frontier>>);

impl FrontierCache {
    fn lock(&self) -> MutexGuard<'_, Option<Frontier>> {
        // A panic cannot leave a half-updated frontier behind: it is
        // replaced whole after a commit. Take it back.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The cached frontier if it is for a tree of `size` leaves.
    pub fn take_if(&self, size: u64) -> Option<Frontier> {
        let mut cached = self.lock();
        match cached.as_ref() {
            Some(frontier) if frontier.size() == size => cached.take(),
            _ => None,
        }
    }

    /// Remembers the frontier after a commit.
    pub fn put(&self, frontier: Frontier) {
        *self.lock() = Some(frontier);
    }

    /// Forgets it (after a rebuild, or a failed append).
    pub fn clear(&self) {
        *self.lock() = None;
    }
}

/// The error for a stored node the tree needs but does not hold.
pub fn missing_node(id: NodeId) -> EventStoreError {
    EventStoreError::MerkleDamaged {
        reason: format!(
            "node level {} index {} is missing; rebuild the tree from the events",
            id.level, id.index
        ),
    }
}

impl From<MerkleError> for EventStoreError {
    fn from(error: MerkleError) -> Self {
        EventStoreError::Merkle(error)
    }
}

/// A stored node's hash from its column: 32 bytes, else the stored tree
/// is damaged. Shared by every backend.
pub fn stored_node_hash(id: NodeId, bytes: &[u8]) -> Result<MerkleHash> {
    let hash: [u8; 32] = bytes
        .try_into()
        .map_err(|_| EventStoreError::MerkleDamaged {
            reason: format!("node level {} index {} is not 32 bytes", id.level, id.index),
        })?;
    Ok(MerkleHash(hash))
}

/// The leaves `start..end` a node below the stored levels covers.
/// Shared by every backend.
pub fn leaf_span(id: NodeId) -> Result<(u64, u64)> {
    let span = 1u64 << id.level;
    let start = id.index.checked_mul(span).ok_or_else(|| missing_node(id))?;
    let end = start.checked_add(span).ok_or_else(|| missing_node(id))?;
    Ok((start, end))
}

/// The hash of node `id`, below the stored levels, from the chain hashes
/// of the events it covers (see [`leaf_span`]). Pure: every backend reads
/// the hashes its own way and folds them here, so roots and proofs agree
/// across backends.
pub fn subtree_of_events(id: NodeId, leaves: &[Hash]) -> Result<MerkleHash> {
    let mut level: Vec<MerkleHash> = leaves
        .iter()
        .map(|hash| merkle::leaf_hash(&hash.0))
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| match pair {
                [left, right] => merkle::node_hash(left, right),
                [single] => *single,
                _ => merkle::empty_root(),
            })
            .collect();
    }
    level.first().copied().ok_or_else(|| missing_node(id))
}

/// The nodes a backend stores when `leaf` (an event's chain hash) is
/// appended to `frontier`: the completed ones at levels
/// [`STORED_LEVEL_MIN`] and up.
pub fn nodes_to_store(
    frontier: &mut Frontier,
    leaf: &Hash,
) -> impl Iterator<Item = (NodeId, MerkleHash)> {
    frontier
        .append(&leaf.0)
        .into_iter()
        .filter(|(id, _)| id.level >= STORED_LEVEL_MIN)
}

/// A signed checkpoint this store issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// Tree size it signs.
    pub size: u64,
    /// Root it signs.
    pub root: MerkleHash,
    /// The signed note, as handed out.
    pub note: String,
    /// When it was stored.
    pub recorded_at: sandlog_core::Timestamp,
}

/// What `sandlog_sqlite::EventStore::verify_merkle` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MerkleReport {
    /// Leaves (events) covered.
    pub size: u64,
    /// The root recomputed from the events.
    pub root: MerkleHash,
    /// Stored nodes compared.
    pub nodes_checked: u64,
}

/// The leaf index of the event at `position` for an inclusion proof in the
/// tree of the first `size` events of a log of `head` events: refused when
/// `size` is past the head or `position` is 0 (positions start at 1). Both
/// stores ask this before building the proof.
pub fn inclusion_index(position: Position, size: u64, head: u64) -> Result<u64> {
    check_tree_size(size, head)?;
    Ok(position
        .0
        .checked_sub(1)
        .ok_or(MerkleError::IndexOutOfRange { index: 0, size })?)
}

/// Refuses a tree of `size` leaves past the head (a root, or the tree an
/// inclusion proof is for).
pub fn check_tree_size(size: u64, head: u64) -> Result<()> {
    if size > head {
        return Err(MerkleError::BadSizes {
            old: size,
            new: head,
        }
        .into());
    }
    Ok(())
}

/// Refuses a consistency proof to a tree size `new` past the head.
pub fn check_consistency_sizes(old: u64, new: u64, head: u64) -> Result<()> {
    if new > head {
        return Err(MerkleError::BadSizes { old, new }.into());
    }
    Ok(())
}

impl From<sandlog_core::map::MapError> for EventStoreError {
    fn from(error: sandlog_core::map::MapError) -> Self {
        EventStoreError::MerkleDamaged {
            reason: format!("the map of stream heads: {error}"),
        }
    }
}

/// The map changes one commit makes: each stream's last envelope among
/// `envelopes` (in position order) becomes its head. Shared by every
/// backend, so their maps agree.
pub fn head_changes(envelopes: &[sandlog_core::Envelope]) -> Vec<([u8; 32], MerkleHash)> {
    let mut heads = std::collections::HashMap::new();
    for envelope in envelopes {
        heads.insert(envelope.stream, envelope);
    }
    heads
        .into_values()
        .map(|envelope| {
            (
                sandlog_core::map::key_of(&envelope.stream.to_string()),
                sandlog_core::map::StreamHead {
                    version: envelope.version.0,
                    position: envelope.position.0,
                    hash: envelope.hash,
                }
                .value(),
            )
        })
        .collect()
}

/// A map node's stored columns: its kind (0 leaf, 1 internal) and two
/// 32-byte values (key and value, or left and right).
pub fn map_node_columns(node: &sandlog_core::map::MapNode) -> (i64, [u8; 32], [u8; 32]) {
    match node {
        sandlog_core::map::MapNode::Leaf { key, value } => (0, *key, value.0),
        sandlog_core::map::MapNode::Internal { left, right } => (1, left.0, right.0),
    }
}

/// A map node from its stored columns, else the stored map is damaged.
pub fn map_node_from_columns(
    depth: u16,
    kind: i64,
    a: &[u8],
    b: &[u8],
) -> Result<sandlog_core::map::MapNode> {
    use sandlog_core::map::{MapError, MapNode};
    let damaged = |reason: &str| {
        EventStoreError::from(MapError::Damaged {
            depth,
            reason: reason.to_owned(),
        })
    };
    let a: [u8; 32] = a
        .try_into()
        .map_err(|_| damaged("a node value is not 32 bytes"))?;
    let b: [u8; 32] = b
        .try_into()
        .map_err(|_| damaged("a node value is not 32 bytes"))?;
    match kind {
        0 => Ok(MapNode::Leaf {
            key: a,
            value: MerkleHash(b),
        }),
        1 => Ok(MapNode::Internal {
            left: MerkleHash(a),
            right: MerkleHash(b),
        }),
        _ => Err(damaged("a node of unknown kind")),
    }
}
