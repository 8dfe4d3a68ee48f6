//! The map of stream heads: a sparse Merkle tree from each stream to its
//! head (last version, last position, last event hash), derived from the
//! log and committed in every signed checkpoint. Pure: hashing, updates
//! and proofs over a node-loading trait; the stores keep the nodes.
//!
//! # Shape
//!
//! Keys are `SHA-256(stream name)`, 256 bits, read most significant bit
//! first: bit 0 picks the root's child (0 left, 1 right). The tree is the
//! *compressed* sparse Merkle tree of Diem's Jellyfish Merkle tree (one
//! radix, no extension nodes): a subtree holding no key is empty, a
//! subtree holding one key is that key's leaf, placed where its prefix
//! first becomes unique, and only a subtree holding two or more keys is an
//! internal node. The shape is a function of the key set alone, so anyone
//! holding the log computes the same root.
//!
//! ```text
//!  empty          = 32 zero bytes
//!  leaf(key, v)   = SHA-256(0x00 ‖ key ‖ v)
//!  internal(l, r) = SHA-256(0x01 ‖ l ‖ r)
//!  v              = SHA-256(version u64 BE ‖ position u64 BE ‖ event hash)
//! ```
//!
//! A proof is the siblings on the way from the key's place up to the
//! root, leaf side first, and what is at that place: the key's own leaf
//! (membership), nothing, or another key's leaf whose key shares the path
//! (non-membership). With `n` keys it has about `log2 n` hashes.
//!
//! Streams are never removed from the log, so the map only gains keys and
//! changes values: a node, once present at a place, stays present. The
//! stores use this to keep every version (see [`MapNodes`]).

use sha2::{Digest, Sha256};

use crate::envelope::Hash;
use crate::merkle::MerkleHash;

/// Bits in a key: the depth of the deepest possible leaf.
pub const KEY_BITS: u16 = 256;

/// The hash of an empty subtree, and the root of an empty map.
pub const EMPTY: MerkleHash = MerkleHash([0; 32]);

/// The checkpoint extension line that carries the map root: this prefix,
/// a space, and the root in standard base64.
pub const CHECKPOINT_LINE_PREFIX: &str = "sandlog-map/v1";

/// The checkpoint extension line that carries `root`.
pub fn checkpoint_line(root: &MerkleHash) -> String {
    use base64::Engine as _;
    format!(
        "{CHECKPOINT_LINE_PREFIX} {}",
        base64::engine::general_purpose::STANDARD.encode(root.0)
    )
}

/// The map root a checkpoint signs, from its extension line; `None` if
/// it has none (a checkpoint signed before the map existed).
pub fn root_of_checkpoint(
    checkpoint: &crate::note::Checkpoint,
) -> Result<Option<MerkleHash>, MapError> {
    use base64::Engine as _;
    let mut found = None;
    for line in &checkpoint.extensions {
        let Some(rest) = line
            .strip_prefix(CHECKPOINT_LINE_PREFIX)
            .and_then(|rest| rest.strip_prefix(' '))
        else {
            continue;
        };
        if found.is_some() {
            return Err(MapError::Malformed(
                "the checkpoint has two map root lines".into(),
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| MapError::Malformed("the map root is not valid base64".into()))?;
        let root: [u8; 32] = bytes
            .try_into()
            .map_err(|_| MapError::Malformed("the map root is not 32 bytes".into()))?;
        found = Some(MerkleHash(root));
    }
    Ok(found)
}

/// A stream's key in the map: `SHA-256(stream name)`.
pub fn key_of(stream: &str) -> [u8; 32] {
    Sha256::digest(stream.as_bytes()).into()
}

/// Bit `index` of `key`, most significant first.
pub fn bit(key: &[u8; 32], index: u16) -> bool {
    key.get(usize::from(index / 8))
        .is_some_and(|byte| (byte >> (7 - (index % 8))) & 1 == 1)
}

/// A stream's head: what the map holds for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHead {
    /// The stream's last version.
    pub version: u64,
    /// Its last event's position.
    pub position: u64,
    /// Its last event's chain hash.
    pub hash: Hash,
}

impl StreamHead {
    /// The value the map commits to for this head.
    pub fn value(&self) -> MerkleHash {
        let mut hasher = Sha256::new();
        hasher.update(self.version.to_be_bytes());
        hasher.update(self.position.to_be_bytes());
        hasher.update(self.hash.0);
        MerkleHash(hasher.finalize().into())
    }
}

/// `SHA-256(0x00 ‖ key ‖ value)`.
pub fn leaf_hash(key: &[u8; 32], value: &MerkleHash) -> MerkleHash {
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(key);
    hasher.update(value.0);
    MerkleHash(hasher.finalize().into())
}

/// `SHA-256(0x01 ‖ left ‖ right)`.
pub fn internal_hash(left: &MerkleHash, right: &MerkleHash) -> MerkleHash {
    let mut hasher = Sha256::new();
    hasher.update([0x01]);
    hasher.update(left.0);
    hasher.update(right.0);
    MerkleHash(hasher.finalize().into())
}

/// A place in the tree: the first `depth` bits of a key (the rest zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodePath {
    /// Bits from the root, `0..=KEY_BITS`.
    pub depth: u16,
    /// The key's first `depth` bits, the others zero.
    pub bits: [u8; 32],
}

impl NodePath {
    /// The root's place.
    pub const ROOT: NodePath = NodePath {
        depth: 0,
        bits: [0; 32],
    };

    /// The first `depth` bits of `key`.
    pub fn of(key: &[u8; 32], depth: u16) -> NodePath {
        let mut bits = [0u8; 32];
        for ((out, byte), start) in bits.iter_mut().zip(key).zip((0u16..).step_by(8)) {
            let kept = depth.saturating_sub(start).min(8);
            *out = match kept {
                0 => 0,
                8 => *byte,
                kept => byte & (0xFFu8 << (8 - kept)),
            };
        }
        NodePath { depth, bits }
    }

    /// The child on side `right`.
    pub fn child(&self, right: bool) -> NodePath {
        let mut bits = self.bits;
        if right && let Some(byte) = bits.get_mut(usize::from(self.depth / 8)) {
            *byte |= 0x80 >> (self.depth % 8);
        }
        NodePath {
            depth: self.depth + 1,
            bits,
        }
    }

    /// The bytes that hold the path's bits (`ceil(depth / 8)` of them):
    /// how stores key it.
    pub fn prefix(&self) -> &[u8] {
        let len = usize::from(self.depth.div_ceil(8));
        self.bits.get(..len).unwrap_or(self.bits.as_slice())
    }

    /// A path from its stored form; `None` if the bytes do not fit the
    /// depth (a damaged row).
    pub fn from_prefix(depth: u16, prefix: &[u8]) -> Option<NodePath> {
        if depth > KEY_BITS || prefix.len() != usize::from(depth.div_ceil(8)) {
            return None;
        }
        let mut key = [0u8; 32];
        key.get_mut(..prefix.len())?.copy_from_slice(prefix);
        let path = NodePath::of(&key, depth);
        (path.bits == key).then_some(path)
    }
}

/// A stored node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapNode {
    /// The only key of its subtree.
    Leaf {
        /// The key.
        key: [u8; 32],
        /// Its value ([`StreamHead::value`]).
        value: MerkleHash,
    },
    /// A subtree of two keys or more: its children's hashes.
    Internal {
        /// The `0` side.
        left: MerkleHash,
        /// The `1` side.
        right: MerkleHash,
    },
}

impl MapNode {
    /// The node's hash.
    pub fn hash(&self) -> MerkleHash {
        match self {
            MapNode::Leaf { key, value } => leaf_hash(key, value),
            MapNode::Internal { left, right } => internal_hash(left, right),
        }
    }
}

/// Why a map proof or a stored map was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// The proof does not lead to the root it is checked against.
    #[error("the map proof does not lead to the map root: {0}")]
    RootMismatch(String),
    /// The proof's shape is impossible.
    #[error("malformed map proof: {0}")]
    Malformed(String),
    /// A stored node is missing or in a place it cannot be.
    #[error("the stored map is damaged at depth {depth}: {reason}")]
    Damaged {
        /// The place's depth.
        depth: u16,
        /// What is wrong.
        reason: String,
    },
}

/// Reads the nodes of one version of the map (a store reads the newest
/// node at each place as of that version).
pub trait MapNodes {
    /// The store's error.
    type Error: From<MapError>;
    /// The node at `path`, `None` for an empty subtree.
    fn node(&self, path: &NodePath) -> Result<Option<MapNode>, Self::Error>;
}

/// What [`update`] wrote: the new root and the nodes to store (each
/// replaces whatever was at its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapUpdate {
    /// The map's new root.
    pub root: MerkleHash,
    /// New nodes, by place.
    pub nodes: Vec<(NodePath, MapNode)>,
}

/// Sets `changes` (key, value; at most one per key) on the map `source`
/// reads and returns the nodes that changed. Only the paths to changed
/// keys are read and written: `O(changes × log n)`.
pub fn update<S: MapNodes>(
    source: &S,
    changes: &[([u8; 32], MerkleHash)],
) -> Result<MapUpdate, S::Error> {
    let mut sorted = changes.to_vec();
    sorted.sort_by_key(|change| change.0);
    sorted.dedup_by(|a, b| a.0 == b.0);
    let mut nodes = Vec::new();
    let root = match sorted.is_empty() {
        true => match source.node(&NodePath::ROOT)? {
            Some(node) => node.hash(),
            None => EMPTY,
        },
        false => {
            let existing = source.node(&NodePath::ROOT)?;
            update_at(source, NodePath::ROOT, existing, &sorted, &mut nodes)?
        }
    };
    Ok(MapUpdate { root, nodes })
}

/// Splits sorted `keys` at place `path` into the `0` side and the `1` side.
fn split(keys: &[([u8; 32], MerkleHash)], depth: u16) -> usize {
    keys.partition_point(|(key, _)| !bit(key, depth))
}

fn damaged<E: From<MapError>>(depth: u16, reason: &str) -> E {
    E::from(MapError::Damaged {
        depth,
        reason: reason.to_owned(),
    })
}

/// Rewrites the subtree at `path` (which holds `existing`) with `changes`
/// (sorted, non-empty, all under `path`); returns its new hash.
fn update_at<S: MapNodes>(
    source: &S,
    path: NodePath,
    existing: Option<MapNode>,
    changes: &[([u8; 32], MerkleHash)],
    nodes: &mut Vec<(NodePath, MapNode)>,
) -> Result<MerkleHash, S::Error> {
    match existing {
        None => Ok(build(path, changes, nodes)),
        Some(MapNode::Leaf { key, value }) => {
            if NodePath::of(&key, path.depth) != path {
                return Err(damaged(path.depth, "a leaf's key is not under its place"));
            }
            // The old leaf joins the changes unless one of them is its key.
            let mut merged = changes.to_vec();
            if let Err(index) = merged.binary_search_by(|(other, _)| other.cmp(&key)) {
                merged.insert(index, (key, value));
            }
            Ok(build(path, &merged, nodes))
        }
        Some(MapNode::Internal { left, right }) => {
            if path.depth >= KEY_BITS {
                return Err(damaged(path.depth, "an internal node below the last bit"));
            }
            let at = split(changes, path.depth);
            let (zeros, ones) = changes.split_at(at);
            let mut side = |right_side: bool, keep: MerkleHash, changes: &[_]| {
                if changes.is_empty() {
                    return Ok(keep);
                }
                let child = path.child(right_side);
                let existing = source.node(&child)?;
                if existing.is_none() && keep != EMPTY {
                    return Err(damaged(child.depth, "a node the parent names is missing"));
                }
                update_at(source, child, existing, changes, nodes)
            };
            let left = side(false, left, zeros)?;
            let right = side(true, right, ones)?;
            let node = MapNode::Internal { left, right };
            nodes.push((path, node));
            Ok(node.hash())
        }
    }
}

/// The subtree at `path` holding exactly `keys` (sorted, unique), written
/// whole; returns its hash.
fn build(
    path: NodePath,
    keys: &[([u8; 32], MerkleHash)],
    nodes: &mut Vec<(NodePath, MapNode)>,
) -> MerkleHash {
    match keys {
        [] => EMPTY,
        [(key, value)] => {
            let node = MapNode::Leaf {
                key: *key,
                value: *value,
            };
            nodes.push((path, node));
            node.hash()
        }
        [(key, value), ..] if path.depth >= KEY_BITS => {
            // Unreachable with distinct keys (two differ at some bit
            // below 256); stops the recursion whatever the input.
            let node = MapNode::Leaf {
                key: *key,
                value: *value,
            };
            nodes.push((path, node));
            node.hash()
        }
        _ => {
            // Two distinct keys differ at some bit below 256, so the
            // recursion ends before the last bit.
            let (zeros, ones) = keys.split_at(split(keys, path.depth));
            let left = build(path.child(false), zeros, nodes);
            let right = build(path.child(true), ones, nodes);
            let node = MapNode::Internal { left, right };
            nodes.push((path, node));
            node.hash()
        }
    }
}

/// The root of the map `source` reads.
pub fn root<S: MapNodes>(source: &S) -> Result<MerkleHash, S::Error> {
    Ok(source
        .node(&NodePath::ROOT)?
        .map_or(EMPTY, |node| node.hash()))
}

/// What a proof ends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// An empty subtree: the key is absent.
    Empty,
    /// A leaf: the key's own (present) or another key's with the same
    /// path so far (absent).
    Leaf {
        /// The leaf's key.
        key: [u8; 32],
        /// Its value.
        value: MerkleHash,
    },
}

/// A membership or non-membership proof of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapProof {
    /// Siblings from the terminal's place up to the root's children, leaf
    /// side first.
    pub siblings: Vec<MerkleHash>,
    /// What is at the key's place.
    pub terminal: Terminal,
}

impl MapProof {
    /// The value the proof shows for `key`, `None` if it shows the key
    /// absent.
    pub fn value_for(&self, key: &[u8; 32]) -> Option<MerkleHash> {
        match self.terminal {
            Terminal::Leaf { key: leaf, value } if &leaf == key => Some(value),
            _ => None,
        }
    }
}

/// The proof for `key` in the map `source` reads.
pub fn prove<S: MapNodes>(source: &S, key: &[u8; 32]) -> Result<MapProof, S::Error> {
    let mut siblings = Vec::new();
    let mut path = NodePath::ROOT;
    let mut node = source.node(&path)?;
    loop {
        match node {
            None => {
                siblings.reverse();
                return Ok(MapProof {
                    siblings,
                    terminal: Terminal::Empty,
                });
            }
            Some(MapNode::Leaf { key: leaf, value }) => {
                siblings.reverse();
                return Ok(MapProof {
                    siblings,
                    terminal: Terminal::Leaf { key: leaf, value },
                });
            }
            Some(MapNode::Internal { left, right }) => {
                if path.depth >= KEY_BITS {
                    return Err(damaged(path.depth, "an internal node below the last bit"));
                }
                let right_side = bit(key, path.depth);
                let (sibling, own) = if right_side {
                    (left, right)
                } else {
                    (right, left)
                };
                siblings.push(sibling);
                path = path.child(right_side);
                node = source.node(&path)?;
                let found = node.map_or(EMPTY, |node| node.hash());
                if found != own {
                    return Err(damaged(
                        path.depth,
                        "a node's hash is not the one its parent names",
                    ));
                }
            }
        }
    }
}

/// Checks `proof` shows `key` with `value` (`None`: absent) in the map of
/// root `root`.
pub fn verify(
    root: &MerkleHash,
    key: &[u8; 32],
    value: Option<&MerkleHash>,
    proof: &MapProof,
) -> Result<(), MapError> {
    let depth = proof.siblings.len();
    if depth > usize::from(KEY_BITS) {
        return Err(MapError::Malformed(format!(
            "{depth} siblings, more than the {KEY_BITS} bits of a key"
        )));
    }
    let depth_bits = depth as u16;
    let terminal = match (proof.terminal, value) {
        (
            Terminal::Leaf {
                key: leaf,
                value: shown,
            },
            Some(expected),
        ) => {
            if &leaf != key {
                return Err(MapError::RootMismatch(
                    "the proof ends on another key's leaf: the key is absent".into(),
                ));
            }
            if &shown != expected {
                return Err(MapError::RootMismatch(
                    "the proof shows another value for the key".into(),
                ));
            }
            leaf_hash(&leaf, &shown)
        }
        (Terminal::Empty, Some(_)) => {
            return Err(MapError::RootMismatch(
                "the proof ends on an empty subtree: the key is absent".into(),
            ));
        }
        (
            Terminal::Leaf {
                key: leaf,
                value: shown,
            },
            None,
        ) => {
            if &leaf == key {
                return Err(MapError::RootMismatch(
                    "the proof ends on the key's own leaf: the key is present".into(),
                ));
            }
            if NodePath::of(&leaf, depth_bits) != NodePath::of(key, depth_bits) {
                return Err(MapError::Malformed(
                    "the leaf it ends on is not on the key's path".into(),
                ));
            }
            leaf_hash(&leaf, &shown)
        }
        (Terminal::Empty, None) => EMPTY,
    };
    let mut hash = terminal;
    for (up, sibling) in proof.siblings.iter().enumerate() {
        let level = depth_bits - 1 - up as u16;
        hash = if bit(key, level) {
            internal_hash(sibling, &hash)
        } else {
            internal_hash(&hash, sibling)
        };
    }
    if &hash != root {
        return Err(MapError::RootMismatch(format!(
            "it leads to {}, not {}",
            hash.to_hex(),
            root.to_hex()
        )));
    }
    Ok(())
}

/// A whole map in memory, for folding a log (an upgrade, an audit):
/// every node by place. Memory grows with the number of streams, never
/// with the number of events.
#[derive(Debug, Clone)]
pub struct MemoryMap {
    nodes: std::collections::HashMap<NodePath, MapNode>,
    root: MerkleHash,
}

impl Default for MemoryMap {
    fn default() -> Self {
        MemoryMap::new()
    }
}

impl MapNodes for MemoryMap {
    type Error = MapError;

    fn node(&self, path: &NodePath) -> Result<Option<MapNode>, MapError> {
        Ok(self.nodes.get(path).copied())
    }
}

impl MemoryMap {
    /// An empty map.
    pub fn new() -> MemoryMap {
        MemoryMap {
            nodes: Default::default(),
            root: EMPTY,
        }
    }

    /// Applies `changes` and returns the new root.
    pub fn apply(&mut self, changes: &[([u8; 32], MerkleHash)]) -> Result<MerkleHash, MapError> {
        let update = update(self, changes)?;
        self.nodes.extend(update.nodes);
        self.root = update.root;
        Ok(self.root)
    }

    /// The current root.
    pub fn root(&self) -> MerkleHash {
        self.root
    }

    /// Nodes held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The streams' heads of a log being replayed in position order: keeps
/// the changes since the last [`HeadFold::take`], one per stream, so a
/// folder applies them to a [`MemoryMap`] at the sizes it needs.
#[derive(Debug, Default)]
pub struct HeadFold {
    pending: std::collections::HashMap<[u8; 32], MerkleHash>,
}

impl HeadFold {
    /// Notes the event at `position`, version `version` of `stream`, with
    /// chain hash `hash`, as its stream's head.
    pub fn push(&mut self, stream: &str, version: u64, position: u64, hash: Hash) {
        self.pending.insert(
            key_of(stream),
            StreamHead {
                version,
                position,
                hash,
            }
            .value(),
        );
    }

    /// The changes noted since the last call.
    pub fn take(&mut self) -> Vec<([u8; 32], MerkleHash)> {
        self.pending.drain().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(n: u64) -> MerkleHash {
        StreamHead {
            version: n,
            position: n * 10,
            hash: Hash([n as u8; 32]),
        }
        .value()
    }

    /// The root by definition, from the whole key set.
    fn reference_root(keys: &[([u8; 32], MerkleHash)], depth: u16) -> MerkleHash {
        match keys {
            [] => EMPTY,
            [(key, value)] => leaf_hash(key, value),
            _ => {
                let (zeros, ones): (Vec<_>, Vec<_>) =
                    keys.iter().partition(|(key, _)| !bit(key, depth));
                internal_hash(
                    &reference_root(&zeros, depth + 1),
                    &reference_root(&ones, depth + 1),
                )
            }
        }
    }

    #[test]
    fn incremental_updates_give_the_root_of_the_whole_set() {
        let mut map = MemoryMap::new();
        let mut all = std::collections::BTreeMap::new();
        for round in 0..20u64 {
            let changes: Vec<_> = (0..round % 7 + 1)
                .map(|i| (key_of(&format!("s{}", (round * 5 + i) % 40)), head(round)))
                .collect();
            let root = map.apply(&changes).unwrap();
            for (key, value) in changes {
                all.insert(key, value);
            }
            let set: Vec<_> = all.iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(root, reference_root(&set, 0), "round {round}");
        }
        assert_eq!(MemoryMap::new().root(), EMPTY);
    }

    #[test]
    fn proofs_of_presence_and_absence_verify_and_cannot_be_swapped() {
        let mut map = MemoryMap::new();
        let changes: Vec<_> = (0..100)
            .map(|i| (key_of(&format!("session/{i}")), head(i)))
            .collect();
        let root = map.apply(&changes).unwrap();
        for (key, value) in &changes {
            let proof = prove(&map, key).unwrap();
            verify(&root, key, Some(value), &proof).unwrap();
            assert!(verify(&root, key, None, &proof).is_err());
            assert!(verify(&root, key, Some(&head(999)), &proof).is_err());
        }
        for i in 100..200 {
            let key = key_of(&format!("session/{i}"));
            let proof = prove(&map, &key).unwrap();
            verify(&root, &key, None, &proof).unwrap();
            assert!(verify(&root, &key, Some(&head(1)), &proof).is_err());
        }
        // A present key's path ends on its own leaf; no other proof
        // reaches the root claiming it is absent.
        let (key, _) = changes[3];
        let mut forged = prove(&map, &key).unwrap();
        forged.terminal = Terminal::Empty;
        assert!(verify(&root, &key, None, &forged).is_err());
        let other = prove(&map, &changes[4].0).unwrap();
        assert!(verify(&root, &key, None, &other).is_err());
    }

    #[test]
    fn paths_round_trip_through_their_stored_form() {
        let key = key_of("x");
        for depth in [0, 1, 7, 8, 9, 255, 256] {
            let path = NodePath::of(&key, depth);
            assert_eq!(
                NodePath::from_prefix(depth, path.prefix()),
                Some(path),
                "{depth}"
            );
        }
        assert_eq!(NodePath::from_prefix(3, &[0xFF]), None);
        assert_eq!(NodePath::from_prefix(257, &[0; 33]), None);
    }
}
