//! RFC 6962 Merkle tree arithmetic over the log: hashing, the append
//! frontier, proof construction from stored subtree nodes, and proof
//! verification. Pure: a verifier needs nothing but this module.
//!
//! # The tree
//!
//! One leaf per event, in position order (leaf index = position − 1). The
//! leaf data is the event's 32-byte chain hash, so the tree commits to every
//! field of every event. Hashing is SHA-256 with RFC 6962's domain prefixes
//! (`0x00` for leaves, `0x01` for interior nodes), so the root, the
//! inclusion proofs and the consistency proofs are checkable by any
//! standard RFC 6962 / RFC 9162 verifier and by C2SP tooling.
//!
//! # What is stored
//!
//! Only *complete* subtrees: the node at [`NodeId`] `{ level, index }`
//! covers leaves `index·2^level .. (index+1)·2^level` and exists once all
//! of them do. Appending leaf `n` creates the leaf node and then one node
//! per level while the new node is a right child — one node on average,
//! at most `log2(n) + 1` — and never changes an existing node, so the node
//! table is append-only like the log. The hash of any other range (the
//! ragged right edge of a tree whose size is not a power of two) is
//! recomputed from O(log n) complete nodes, see [`range_hash`].

use sha2::{Digest, Sha256};

use crate::error::CoreError;

/// Tree sizes and leaf indexes are `u64`; a level is at most 64.
pub const LEVELS_MAX: u8 = 64;

/// A SHA-256 node hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MerkleHash(pub [u8; 32]);

impl MerkleHash {
    /// Lower-case hex, 64 digits.
    pub fn to_hex(&self) -> String {
        crate::envelope::Hash(self.0).to_hex()
    }

    /// Parses 64 hex digits.
    pub fn from_hex(input: &str) -> Result<MerkleHash, CoreError> {
        crate::envelope::Hash::from_hex(input).map(|hash| MerkleHash(hash.0))
    }
}

impl std::fmt::Display for MerkleHash {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.to_hex())
    }
}

/// The root of the empty tree: SHA-256 of the empty string.
pub fn empty_root() -> MerkleHash {
    MerkleHash(Sha256::digest([]).into())
}

/// `SHA-256(0x00 ‖ data)`: a leaf's hash.
pub fn leaf_hash(data: &[u8]) -> MerkleHash {
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(data);
    MerkleHash(hasher.finalize().into())
}

/// `SHA-256(0x01 ‖ left ‖ right)`: an interior node's hash.
pub fn node_hash(left: &MerkleHash, right: &MerkleHash) -> MerkleHash {
    let mut hasher = Sha256::new();
    hasher.update([0x01]);
    hasher.update(left.0);
    hasher.update(right.0);
    MerkleHash(hasher.finalize().into())
}

/// A complete subtree: leaves `index << level .. (index + 1) << level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// Height above the leaves (0 = a leaf).
    pub level: u8,
    /// Position among the nodes of that level, from the left.
    pub index: u64,
}

/// Where proof construction reads complete subtree nodes from (the store's
/// node table, or memory in tests).
pub trait NodeSource {
    /// The error of a failed read.
    type Error: From<MerkleError>;

    /// The hash of a complete subtree. Asking for one that does not exist
    /// yet is the caller's bug; a store reports it as an integrity error.
    fn node(&self, id: NodeId) -> Result<MerkleHash, Self::Error>;
}

/// Why a proof could not be made or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MerkleError {
    /// A leaf index at or past the tree size.
    #[error("leaf index {index} is not in a tree of size {size}")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// Sizes that cannot be compared (`old > new`, or a size past the log).
    #[error(
        "tree sizes {old} and {new} do not form a valid pair (need old <= new <= the log's size)"
    )]
    BadSizes {
        /// The older (smaller) size.
        old: u64,
        /// The newer (larger) size.
        new: u64,
    },
    /// The proof has the wrong number of hashes for its sizes.
    #[error("the proof has {actual} hashes; sizes {old}..{new} need {expected}")]
    WrongLength {
        /// Leaf index (inclusion) or old size (consistency).
        old: u64,
        /// Tree size.
        new: u64,
        /// Hashes the sizes call for.
        expected: usize,
        /// Hashes given.
        actual: usize,
    },
    /// The proof is well formed but recomputes another root.
    #[error("the proof does not lead to the expected root hash")]
    RootMismatch,
}

/// The largest power of two strictly below `n` (`n >= 2`).
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The hash of leaves `start..end` (`start < end`), from complete nodes:
/// an aligned power-of-two range is one stored node; any other range splits
/// at the largest power of two below its length, as RFC 6962's MTH does.
/// Every range RFC 6962's recursions ask for starts at a multiple of its
/// left part's size, so the left part is always one stored node and only
/// the ragged right edge recurses: O(log n) reads.
pub fn range_hash<S: NodeSource>(source: &S, start: u64, end: u64) -> Result<MerkleHash, S::Error> {
    let length = end.saturating_sub(start);
    if length == 0 {
        return Err(MerkleError::BadSizes {
            old: start,
            new: end,
        }
        .into());
    }
    if length.is_power_of_two() && start.is_multiple_of(length) {
        let level = length.trailing_zeros() as u8;
        return source.node(NodeId {
            level,
            index: start >> level,
        });
    }
    let split = split_point(length);
    let left = range_hash(source, start, start + split)?;
    let right = range_hash(source, start + split, end)?;
    Ok(node_hash(&left, &right))
}

/// The root of the tree of the first `size` leaves.
pub fn root<S: NodeSource>(source: &S, size: u64) -> Result<MerkleHash, S::Error> {
    if size == 0 {
        return Ok(empty_root());
    }
    range_hash(source, 0, size)
}

/// RFC 6962 §2.1.1 `PATH(index, D[size])`: the audit path for one leaf,
/// leaf-side first.
pub fn inclusion_proof<S: NodeSource>(
    source: &S,
    index: u64,
    size: u64,
) -> Result<Vec<MerkleHash>, S::Error> {
    if index >= size {
        return Err(MerkleError::IndexOutOfRange { index, size }.into());
    }
    let mut proof = Vec::new();
    // Walk down from the whole tree, remembering each sibling; the path is
    // the siblings bottom-up.
    let (mut start, mut end) = (0u64, size);
    while end - start > 1 {
        let split = split_point(end - start);
        let middle = start + split;
        if index < middle {
            proof.push(range_hash(source, middle, end)?);
            end = middle;
        } else {
            proof.push(range_hash(source, start, middle)?);
            start = middle;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// RFC 6962 §2.1.2 `PROOF(old, D[new])`: the consistency proof that the
/// tree of `old` leaves is a prefix of the tree of `new` leaves. Empty when
/// `old` is 0 or equals `new`.
pub fn consistency_proof<S: NodeSource>(
    source: &S,
    old: u64,
    new: u64,
) -> Result<Vec<MerkleHash>, S::Error> {
    if old > new {
        return Err(MerkleError::BadSizes { old, new }.into());
    }
    let mut proof = Vec::new();
    if old == 0 || old == new {
        return Ok(proof);
    }
    // SUBPROOF(m, D[start..end], complete), unrolled: each step either
    // descends left (pushing the right part's hash) or right (pushing the
    // left part's hash, and the old tree is no longer a complete subtree).
    let (mut start, mut end) = (0u64, new);
    let mut m = old;
    let mut complete = true;
    loop {
        if m == end - start {
            if !complete {
                proof.push(range_hash(source, start, end)?);
            }
            break;
        }
        let split = split_point(end - start);
        if m <= split {
            proof.push(range_hash(source, start + split, end)?);
            end = start + split;
        } else {
            proof.push(range_hash(source, start, start + split)?);
            start += split;
            m -= split;
            complete = false;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// RFC 9162 §2.1.3.2: checks that `leaf` (a leaf *hash*) is at `index` in
/// the tree of `size` leaves whose root is `root`.
pub fn verify_inclusion(
    leaf: &MerkleHash,
    index: u64,
    size: u64,
    proof: &[MerkleHash],
    root: &MerkleHash,
) -> Result<(), MerkleError> {
    if index >= size {
        return Err(MerkleError::IndexOutOfRange { index, size });
    }
    let expected = inclusion_proof_length(index, size);
    if proof.len() != expected {
        return Err(MerkleError::WrongLength {
            old: index,
            new: size,
            expected,
            actual: proof.len(),
        });
    }
    let mut node = index;
    let mut last = size - 1;
    let mut hash = *leaf;
    for sibling in proof {
        if last == 0 {
            return Err(MerkleError::RootMismatch);
        }
        if node & 1 == 1 || node == last {
            hash = node_hash(sibling, &hash);
            if node & 1 == 0 {
                while node & 1 == 0 && node != 0 {
                    node >>= 1;
                    last >>= 1;
                }
            }
        } else {
            hash = node_hash(&hash, sibling);
        }
        node >>= 1;
        last >>= 1;
    }
    if last != 0 || hash != *root {
        return Err(MerkleError::RootMismatch);
    }
    Ok(())
}

/// RFC 9162 §2.1.4.2: checks that the tree of `old` leaves with root
/// `old_root` is a prefix of the tree of `new` leaves with root `new_root`.
pub fn verify_consistency(
    old: u64,
    new: u64,
    proof: &[MerkleHash],
    old_root: &MerkleHash,
    new_root: &MerkleHash,
) -> Result<(), MerkleError> {
    if old > new {
        return Err(MerkleError::BadSizes { old, new });
    }
    let expected = consistency_proof_length(old, new);
    if proof.len() != expected {
        return Err(MerkleError::WrongLength {
            old,
            new,
            expected,
            actual: proof.len(),
        });
    }
    if old == new {
        return if old_root == new_root {
            Ok(())
        } else {
            Err(MerkleError::RootMismatch)
        };
    }
    if old == 0 {
        // Every tree extends the empty one; RFC 9162 proves nothing here.
        return if *old_root == empty_root() {
            Ok(())
        } else {
            Err(MerkleError::RootMismatch)
        };
    }
    // When the old tree is a complete subtree its root is the proof's
    // implicit first element.
    let mut path: Vec<MerkleHash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return Err(MerkleError::RootMismatch);
    };
    let mut node = old - 1;
    let mut last = new - 1;
    while node & 1 == 1 {
        node >>= 1;
        last >>= 1;
    }
    let mut old_hash = *first;
    let mut new_hash = *first;
    for sibling in rest {
        if last == 0 {
            return Err(MerkleError::RootMismatch);
        }
        if node & 1 == 1 || node == last {
            old_hash = node_hash(sibling, &old_hash);
            new_hash = node_hash(sibling, &new_hash);
            if node & 1 == 0 {
                while node & 1 == 0 && node != 0 {
                    node >>= 1;
                    last >>= 1;
                }
            }
        } else {
            new_hash = node_hash(&new_hash, sibling);
        }
        node >>= 1;
        last >>= 1;
    }
    if last != 0 || old_hash != *old_root || new_hash != *new_root {
        return Err(MerkleError::RootMismatch);
    }
    Ok(())
}

/// How many hashes `PATH(index, D[size])` has (`index < size`).
pub fn inclusion_proof_length(index: u64, size: u64) -> usize {
    let (mut start, mut end) = (0u64, size);
    let mut length = 0;
    while end - start > 1 {
        let middle = start + split_point(end - start);
        if index < middle {
            end = middle;
        } else {
            start = middle;
        }
        length += 1;
    }
    length
}

/// How many hashes `PROOF(old, D[new])` has (`old <= new`).
pub fn consistency_proof_length(old: u64, new: u64) -> usize {
    if old == 0 || old >= new {
        return 0;
    }
    let (mut start, mut end) = (0u64, new);
    let mut m = old;
    let mut complete = true;
    let mut length = 0;
    loop {
        if m == end - start {
            if !complete {
                length += 1;
            }
            return length;
        }
        let split = split_point(end - start);
        if m <= split {
            end = start + split;
        } else {
            start += split;
            m -= split;
            complete = false;
        }
        length += 1;
    }
}

/// The complete-subtree nodes a tree of `size` leaves ends with, largest
/// first: one per set bit of `size`. Their hashes are all an appender needs
/// to add the next leaf and to compute the root.
pub fn frontier_ids(size: u64) -> Vec<NodeId> {
    let mut ids = Vec::new();
    let mut covered = 0u64;
    for level in (0..LEVELS_MAX).rev() {
        let span = 1u64 << level;
        if size & span != 0 {
            ids.push(NodeId {
                level,
                index: covered >> level,
            });
            covered += span;
        }
    }
    ids
}

/// The right edge of a tree in memory: the complete subtrees covering its
/// leaves, largest first. Appending a leaf yields exactly the nodes that
/// become complete, which is what a store writes per append.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    nodes: Vec<(NodeId, MerkleHash)>,
}

impl Frontier {
    /// The frontier of the empty tree.
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// A frontier of a tree of `size` leaves from its [`frontier_ids`]
    /// nodes' hashes, in that order.
    pub fn from_nodes(size: u64, hashes: &[MerkleHash]) -> Result<Frontier, MerkleError> {
        let ids = frontier_ids(size);
        if ids.len() != hashes.len() {
            return Err(MerkleError::WrongLength {
                old: 0,
                new: size,
                expected: ids.len(),
                actual: hashes.len(),
            });
        }
        Ok(Frontier {
            size,
            nodes: ids.into_iter().zip(hashes.iter().copied()).collect(),
        })
    }

    /// Leaves so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends one leaf (its data, hashed here) and returns the nodes that
    /// became complete, leaf first.
    pub fn append(&mut self, leaf_data: &[u8]) -> Vec<(NodeId, MerkleHash)> {
        let mut id = NodeId {
            level: 0,
            index: self.size,
        };
        let mut hash = leaf_hash(leaf_data);
        let mut created = vec![(id, hash)];
        while let Some(&(left_id, left_hash)) = self.nodes.last() {
            if left_id.level != id.level {
                break;
            }
            self.nodes.pop();
            hash = node_hash(&left_hash, &hash);
            id = NodeId {
                level: id.level + 1,
                index: left_id.index >> 1,
            };
            created.push((id, hash));
        }
        self.nodes.push((id, hash));
        self.size += 1;
        created
    }

    /// The root of the tree so far.
    pub fn root(&self) -> MerkleHash {
        let mut nodes = self.nodes.iter().rev();
        let Some(&(_, mut hash)) = nodes.next() else {
            return empty_root();
        };
        for (_, left) in nodes {
            hash = node_hash(left, &hash);
        }
        hash
    }
}

#[cfg(test)]
mod tests {
    //! Known answers from the RFC 6962 test data of Certificate
    //! Transparency, as carried by transparency-dev/merkle
    //! (`testonly/constants.go`: `LeafInputs`, `RootHashes`,
    //! `InclusionProofs`, `ConsistencyProofs`), plus properties over random
    //! trees against a direct recursive MTH.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Default)]
    struct Memory(BTreeMap<NodeId, MerkleHash>);

    impl NodeSource for Memory {
        type Error = MerkleError;
        fn node(&self, id: NodeId) -> Result<MerkleHash, MerkleError> {
            self.0.get(&id).copied().ok_or(MerkleError::BadSizes {
                old: u64::from(id.level),
                new: id.index,
            })
        }
    }

    fn tree(leaves: &[Vec<u8>]) -> (Memory, Frontier) {
        let mut memory = Memory::default();
        let mut frontier = Frontier::new();
        for leaf in leaves {
            memory.0.extend(frontier.append(leaf));
        }
        (memory, frontier)
    }

    /// RFC 6962 §2.1's MTH, written straight from the definition.
    fn mth(leaves: &[Vec<u8>]) -> MerkleHash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaf_hash(&leaves[0]),
            n => {
                let k = split_point(n as u64) as usize;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn hex(text: &str) -> MerkleHash {
        MerkleHash::from_hex(text).unwrap()
    }

    fn ct_leaves() -> Vec<Vec<u8>> {
        [
            "",
            "00",
            "10",
            "2021",
            "3031",
            "40414243",
            "5051525354555657",
            "606162636465666768696a6b6c6d6e6f",
        ]
        .iter()
        .map(|text| {
            (0..text.len() / 2)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        })
        .collect()
    }

    const CT_ROOTS: [&str; 8] = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];

    #[test]
    fn empty_tree_root_is_sha256_of_nothing() {
        assert_eq!(
            empty_root().to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Frontier::new().root(), empty_root());
        assert_eq!(root(&Memory::default(), 0).unwrap(), empty_root());
    }

    #[test]
    fn roots_match_the_certificate_transparency_vectors() {
        let leaves = ct_leaves();
        for size in 1..=8 {
            let (memory, frontier) = tree(&leaves[..size]);
            let expected = hex(CT_ROOTS[size - 1]);
            assert_eq!(frontier.root(), expected, "frontier root, size {size}");
            assert_eq!(
                root(&memory, size as u64).unwrap(),
                expected,
                "stored nodes, size {size}"
            );
        }
    }

    #[test]
    fn inclusion_proofs_match_the_certificate_transparency_vectors() {
        let leaves = ct_leaves();
        let (memory, _) = tree(&leaves);
        let cases: [(u64, u64, &[&str]); 5] = [
            (0, 1, &[]),
            (
                0,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                5,
                8,
                &[
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                3,
                &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
            ),
            (
                1,
                5,
                &[
                    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
        ];
        for (index, size, expected) in cases {
            let proof = inclusion_proof(&memory, index, size).unwrap();
            let expected: Vec<MerkleHash> = expected.iter().map(|text| hex(text)).collect();
            assert_eq!(proof, expected, "PATH({index}, D[{size}])");
            let leaf = leaf_hash(&leaves[index as usize]);
            verify_inclusion(
                &leaf,
                index,
                size,
                &proof,
                &hex(CT_ROOTS[size as usize - 1]),
            )
            .unwrap();
        }
    }

    #[test]
    fn consistency_proofs_match_the_certificate_transparency_vectors() {
        let leaves = ct_leaves();
        let (memory, _) = tree(&leaves);
        let cases: [(u64, u64, &[&str]); 4] = [
            (1, 1, &[]),
            (
                1,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                6,
                8,
                &[
                    "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                5,
                &[
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
        ];
        for (old, new, expected) in cases {
            let proof = consistency_proof(&memory, old, new).unwrap();
            let expected: Vec<MerkleHash> = expected.iter().map(|text| hex(text)).collect();
            assert_eq!(proof, expected, "PROOF({old}, D[{new}])");
            verify_consistency(
                old,
                new,
                &proof,
                &hex(CT_ROOTS[old as usize - 1]),
                &hex(CT_ROOTS[new as usize - 1]),
            )
            .unwrap();
        }
    }

    /// Every pair of sizes up to 64: the proof verifies against the true
    /// roots, and fails against a neighbour's root or with a flipped bit.
    #[test]
    fn consistency_proofs_between_every_pair_of_sizes_up_to_64_verify() {
        let leaves: Vec<Vec<u8>> = (0u32..64).map(|i| i.to_be_bytes().to_vec()).collect();
        let (memory, _) = tree(&leaves);
        let roots: Vec<MerkleHash> = (0..=64).map(|n| mth(&leaves[..n])).collect();
        for new in 1..=64u64 {
            for old in 0..=new {
                let proof = consistency_proof(&memory, old, new).unwrap();
                assert_eq!(proof.len(), consistency_proof_length(old, new));
                let (old_root, new_root) = (&roots[old as usize], &roots[new as usize]);
                verify_consistency(old, new, &proof, old_root, new_root)
                    .unwrap_or_else(|error| panic!("{old} -> {new}: {error}"));
                if old > 0 && old < new {
                    assert!(
                        verify_consistency(old, new, &proof, &roots[old as usize - 1], new_root)
                            .is_err(),
                        "{old} -> {new} accepted a wrong old root"
                    );
                    for (which, hash) in proof.iter().enumerate() {
                        let mut bad = proof.clone();
                        bad[which].0[which % 32] ^= 1;
                        assert_eq!(
                            verify_consistency(old, new, &bad, old_root, new_root),
                            Err(MerkleError::RootMismatch),
                            "{old} -> {new}: flipped hash {which} ({hash}) accepted"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn malformed_requests_are_refused_not_panics() {
        let leaves = ct_leaves();
        let (memory, frontier) = tree(&leaves);
        let root8 = frontier.root();
        assert_eq!(
            inclusion_proof(&memory, 8, 8),
            Err(MerkleError::IndexOutOfRange { index: 8, size: 8 })
        );
        assert_eq!(
            consistency_proof(&memory, 9, 8),
            Err(MerkleError::BadSizes { old: 9, new: 8 })
        );
        let leaf = leaf_hash(&leaves[0]);
        assert!(matches!(
            verify_inclusion(&leaf, 0, 8, &[], &root8),
            Err(MerkleError::WrongLength {
                expected: 3,
                actual: 0,
                ..
            })
        ));
        assert_eq!(
            verify_inclusion(&leaf, u64::MAX, 8, &[], &root8),
            Err(MerkleError::IndexOutOfRange {
                index: u64::MAX,
                size: 8
            })
        );
        assert!(verify_consistency(0, 8, &[], &root8, &root8).is_err());
        assert_eq!(verify_consistency(0, 8, &[], &empty_root(), &root8), Ok(()));
        assert!(Frontier::from_nodes(3, &[root8]).is_err());
    }

    #[test]
    fn frontier_ids_cover_the_tree_with_one_node_per_set_bit() {
        assert_eq!(frontier_ids(0), vec![]);
        assert_eq!(
            frontier_ids(6),
            vec![NodeId { level: 2, index: 0 }, NodeId { level: 1, index: 2 }]
        );
        let leaves = ct_leaves();
        let (memory, frontier) = tree(&leaves[..7]);
        let hashes: Vec<MerkleHash> = frontier_ids(7)
            .into_iter()
            .map(|id| memory.node(id).unwrap())
            .collect();
        let rebuilt = Frontier::from_nodes(7, &hashes).unwrap();
        assert_eq!(rebuilt, frontier);
    }

    proptest! {
        /// For random trees: the stored-node root equals the recursive MTH,
        /// every leaf's inclusion proof verifies, and flipping any bit of
        /// any proof hash, or moving the index by one, makes it fail.
        #[test]
        fn every_inclusion_proof_of_random_trees_verifies_and_no_flipped_one_does(
            leaves in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 1..80),
            flip_bit in 0usize..256,
        ) {
            let (memory, frontier) = tree(&leaves);
            let size = leaves.len() as u64;
            let expected = mth(&leaves);
            prop_assert_eq!(frontier.root(), expected);
            prop_assert_eq!(root(&memory, size).unwrap(), expected);
            for index in 0..size {
                let leaf = leaf_hash(&leaves[index as usize]);
                let proof = inclusion_proof(&memory, index, size).unwrap();
                prop_assert!(verify_inclusion(&leaf, index, size, &proof, &expected).is_ok());
                for which in 0..proof.len() {
                    let mut bad = proof.clone();
                    bad[which].0[flip_bit / 8] ^= 1 << (flip_bit % 8);
                    prop_assert!(verify_inclusion(&leaf, index, size, &bad, &expected).is_err());
                }
                if index + 1 < size && leaves[index as usize] != leaves[index as usize + 1] {
                    prop_assert!(verify_inclusion(&leaf, index + 1, size, &proof, &expected).is_err());
                }
            }
        }

        /// Proof construction from stored nodes reads O(log n) of them and
        /// never needs a node that is not complete yet.
        #[test]
        fn proofs_at_any_earlier_size_use_only_complete_nodes(
            count in 1usize..300,
            size_fraction in 0.0f64..1.0,
        ) {
            let leaves: Vec<Vec<u8>> = (0..count).map(|i| (i as u32).to_le_bytes().to_vec()).collect();
            let (memory, _) = tree(&leaves);
            let size = 1 + ((count - 1) as f64 * size_fraction) as u64;
            let expected = mth(&leaves[..size as usize]);
            prop_assert_eq!(root(&memory, size).unwrap(), expected);
            let index = size / 2;
            let proof = inclusion_proof(&memory, index, size).unwrap();
            prop_assert!(verify_inclusion(&leaf_hash(&leaves[index as usize]), index, size, &proof, &expected).is_ok());
        }
    }
}
