//! The verifiable log for embedders and the CLI: signing keys, signed
//! checkpoints, inclusion and consistency proofs, checking that the log
//! still extends a checkpoint signed earlier, and offline evidence bundles.
//!
//! The arithmetic and formats are `sandlog-core`'s (`merkle`, `note`,
//! `bundle`), so an auditor's verifier needs no database; this module adds
//! what needs the store (reading nodes, events and blobs) or the OS (the
//! randomness of a new key, key files).

pub mod audit;
pub mod checkpoint;
pub mod verify;
pub mod witness;

use std::collections::BTreeMap;
use std::path::Path;

use sandlog_core::bundle::{
    BUNDLE_FORMAT, BUNDLE_FORMAT_V1, Bundle, BundleEvent, BundleHead, VerifiedBundle,
};
use sandlog_core::map;
use sandlog_core::merkle::{self, MerkleHash};
use sandlog_core::note::{Checkpoint, SignerKey, VerifierKey};
use sandlog_core::{Envelope, Hash, Position, SessionId, StreamId};
use sandlog_projections::SessionState;
use sandlog_projections::state::State;
use serde::Serialize;

pub use crate::proofs::checkpoint::SignedCheckpoint;

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};
pub use sandlog_host::keys::{
    KEY_FILE_BYTES_MAX, generate_key_file, read_signer_key, read_verifier_key,
};

/// An RFC 6962 proof, ready to print as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InclusionProof {
    /// Tree size the proof is for.
    pub size: u64,
    /// Leaf index (the event's position − 1).
    pub leaf_index: u64,
    /// The leaf's hash: SHA-256(0x00 ‖ event hash), hex.
    pub leaf_hash: String,
    /// The tree's root at `size`, hex.
    pub root: String,
    /// The audit path, leaf side first, hex.
    pub hashes: Vec<String>,
}

/// An RFC 6962 consistency proof, ready to print as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsistencyProof {
    /// The older size.
    pub old: u64,
    /// The newer size.
    pub new: u64,
    /// The root at `old`, hex.
    pub old_root: String,
    /// The root at `new`, hex.
    pub new_root: String,
    /// The proof, hex.
    pub hashes: Vec<String>,
}

/// What checking the log against an earlier checkpoint found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointCheck {
    /// The checkpoint's size.
    pub checkpoint_size: u64,
    /// The log's size now.
    pub log_size: u64,
    /// The log's root now, recomputed from the events, hex.
    pub log_root: String,
}

/// What a verified evidence bundle holds, for people and scripts.
#[derive(Debug, Clone, Serialize)]
pub struct BundleReport {
    /// Always true when returned (failures are errors).
    pub ok: bool,
    /// The session.
    pub session_id: SessionId,
    /// Events proven.
    pub events: usize,
    /// The checkpoint's size and origin.
    pub checkpoint_size: u64,
    /// The log's name in the checkpoint.
    pub origin: String,
    /// Blobs carried and checked.
    pub blobs: usize,
    /// Blobs the events name that the bundle does not carry (erased,
    /// pruned, or never kept); their hashes stay proven.
    pub missing_blobs: Vec<String>,
    /// The session as its events make it.
    pub state: Option<SessionState>,
    /// The witnesses' cosignatures, when a policy was given
    /// ([`verify_bundle_witnessed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witnesses: Option<sandlog_core::cosignature::QuorumReport>,
    /// Whether the bundle is proven to hold the session's whole stream as
    /// of the checkpoint (format 2: its last event is the head the
    /// checkpoint's map proves). False for a format 1 bundle.
    pub complete: bool,
    /// What the bundle proves: `"inclusion and completeness"`, or
    /// `"inclusion only"` for a format 1 bundle (events may be missing
    /// from its end).
    pub proves: &'static str,
    /// The session's head at the checkpoint's size, as the map proves it
    /// (format 2).
    pub head: Option<HeadReport>,
}

/// A stream's head, ready to print as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeadReport {
    /// Its last version.
    pub version: u64,
    /// Its last event's position.
    pub position: u64,
    /// Its last event's chain hash, hex.
    pub hash: String,
}

impl From<&map::StreamHead> for HeadReport {
    fn from(head: &map::StreamHead) -> Self {
        HeadReport {
            version: head.version,
            position: head.position,
            hash: head.hash.to_hex(),
        }
    }
}

/// A session's head at a tree size with its map proof, or the proof it
/// had no event then, ready to print as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionProof {
    /// The session.
    pub session_id: SessionId,
    /// Whether it had an event at `size`.
    pub present: bool,
    /// Its last version then (present only).
    pub version: Option<u64>,
    /// Its last event's position then (present only).
    pub position: Option<u64>,
    /// Its last event's chain hash then, hex (present only).
    pub hash: Option<String>,
    /// The tree size.
    pub size: u64,
    /// The map root at `size`, hex.
    pub map_root: String,
    /// The map proof: siblings from the key's place up, leaf side first,
    /// hex.
    pub proof: Vec<String>,
    /// For an absent session whose path ends on another stream's leaf:
    /// that leaf's key and value, hex (`null` when it ends on an empty
    /// subtree, or the session is present).
    pub other_leaf: Option<OtherLeaf>,
}

/// The leaf a non-membership proof ends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtherLeaf {
    /// Its key, hex.
    pub key: String,
    /// Its value, hex.
    pub value: String,
}

/// Raw bytes of blobs one bundle carries at most; past it the remaining
/// blobs are left out (the verifier lists them as missing, their hashes
/// still proven), so a bundle of a session that kept gigabytes stays a
/// file that can be mailed and loaded whole.
pub const BUNDLE_BLOB_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// The blobs an event says were stored (code, output kept as evidence,
/// file contents kept).
/// The blobs an event says were stored: the read model's rule
/// (`sandlog_projections::evidence::named_blobs`), so a bundle and the
/// root agree on what evidence an event names.
fn blob_refs(envelope: &Envelope) -> Vec<Hash> {
    match envelope.event() {
        Ok(Some(event)) => sandlog_projections::evidence::named_blobs(&event)
            .into_iter()
            .map(|(_, hash, _)| hash)
            .collect(),
        _ => Vec::new(),
    }
}

/// Verifies an evidence bundle with no database: the checkpoint signature,
/// every event hash and inclusion proof, the stream's completeness, every
/// blob hash, and the session's state recomputed from its events.
pub fn verify_bundle(bytes: &[u8], key: &VerifierKey) -> Result<BundleReport> {
    verify_bundle_witnessed(bytes, key, None)
}

/// [`verify_bundle`], and with `witnesses`, first that the checkpoint
/// carries enough valid cosignatures ([`crate::proofs::witness::check_witnesses`]).
pub fn verify_bundle_witnessed(
    bytes: &[u8],
    key: &VerifierKey,
    witnesses: Option<&sandlog_core::cosignature::WitnessPolicy>,
) -> Result<BundleReport> {
    let bundle = Bundle::parse(bytes).map_err(RuntimeError::Bundle)?;
    let quorum = witnesses
        .map(|policy| crate::proofs::witness::check_witnesses(&bundle.checkpoint, key, policy))
        .transpose()?;
    let VerifiedBundle {
        checkpoint,
        session_id,
        envelopes,
        blobs,
        head,
    } = bundle.verify(key).map_err(RuntimeError::Bundle)?;
    let mut missing: Vec<String> = envelopes
        .iter()
        .flat_map(blob_refs)
        .filter(|hash| !blobs.contains_key(hash))
        .map(|hash| hash.to_hex())
        .collect();
    missing.sort();
    missing.dedup();
    let named: std::collections::BTreeSet<Hash> = envelopes.iter().flat_map(blob_refs).collect();
    if let Some(unnamed) = blobs.keys().find(|hash| !named.contains(hash)) {
        return Err(RuntimeError::Bundle(
            sandlog_core::bundle::BundleError::BlobUnnamed {
                name: unnamed.to_hex(),
            },
        ));
    }
    let state = State::fold(envelopes.iter());
    Ok(BundleReport {
        ok: true,
        session_id,
        events: envelopes.len(),
        checkpoint_size: checkpoint.size,
        origin: checkpoint.origin,
        blobs: blobs.len(),
        missing_blobs: missing,
        state: state.sessions.get(&session_id).cloned(),
        witnesses: quorum,
        complete: head.is_some(),
        proves: match head {
            Some(_) => "inclusion and completeness",
            None => "inclusion only",
        },
        head: head.as_ref().map(HeadReport::from),
    })
}

impl Engine {
    /// Signs a checkpoint of the whole log with `key`, stores it, and
    /// returns it.
    /// The note carries the root of the map of stream heads as an
    /// extension line (see [`map::checkpoint_line`]).
    pub fn sign_checkpoint(&self, key: &SignerKey) -> Result<SignedCheckpoint> {
        let (size, root, map_root) = self.store.checkpoint_head()?;
        let checkpoint = Checkpoint {
            origin: key.name().to_owned(),
            size,
            root,
            extensions: vec![map::checkpoint_line(&map_root)],
        };
        let note = checkpoint.sign(key).map_err(RuntimeError::Note)?;
        self.store.store_checkpoint(size, &root, &note)?;
        tracing::info!(target: "sandlog::lifecycle", event = "checkpoint.signed", size, "checkpoint signed");
        let root = note.lines().nth(2).unwrap_or_default().to_owned();
        Ok(SignedCheckpoint { size, root, note })
    }

    /// The newest checkpoint this root signed, if any.
    /// Signs a checkpoint if the root's settings ask for one now: on
    /// `after_prune` with `checkpoint.on_prune`, or once `checkpoint.every`
    /// events were appended since the last checkpoint. Needs
    /// `checkpoint.key`. A failure is logged, not returned: the command
    /// that triggered it has already been recorded.
    pub fn maybe_checkpoint(&self, after_prune: bool) -> Option<SignedCheckpoint> {
        match self.auto_checkpoint(after_prune) {
            Ok(signed) => signed,
            Err(error) => {
                tracing::warn!(%error, "the automatic checkpoint failed; sign one with `sandlog checkpoint`");
                None
            }
        }
    }

    fn auto_checkpoint(&self, after_prune: bool) -> Result<Option<SignedCheckpoint>> {
        use crate::evidence::{
            CHECKPOINT_EVERY_SETTING, CHECKPOINT_KEY_SETTING, CHECKPOINT_ON_PRUNE_SETTING,
        };
        let settings = self.settings()?;
        let Some(key_path) = settings.get(CHECKPOINT_KEY_SETTING) else {
            return Ok(None);
        };
        let on_prune = after_prune
            && settings
                .get(CHECKPOINT_ON_PRUNE_SETTING)
                .is_some_and(|value| value == "true");
        let due = match settings
            .get(CHECKPOINT_EVERY_SETTING)
            .and_then(|value| value.parse::<u64>().ok())
        {
            Some(every) => {
                let (size, _) = self.store.merkle_head()?;
                let last = self
                    .store
                    .latest_checkpoint()?
                    .map_or(0, |stored| stored.size);
                size.saturating_sub(last) >= every
            }
            None => false,
        };
        if !on_prune && !due {
            return Ok(None);
        }
        let key = read_signer_key(Path::new(key_path))?;
        self.sign_checkpoint(&key).map(Some)
    }

    /// The newest stored checkpoint's note.
    pub fn latest_checkpoint(&self) -> Result<Option<String>> {
        Ok(self.store.latest_checkpoint()?.map(|stored| stored.note))
    }

    /// The inclusion proof of the event at `position` in the tree of the
    /// first `size` events (default: the whole log).
    pub fn prove_inclusion(&self, position: Position, size: Option<u64>) -> Result<InclusionProof> {
        let size = match size {
            Some(size) => size,
            None => self.store.merkle_head()?.0,
        };
        let hashes = self.store.inclusion_proof(position, size)?;
        let root = self.store.merkle_root(size)?;
        let event =
            self.store
                .get(position)?
                .ok_or(sandlog_eventstore::EventStoreError::Merkle(
                    merkle::MerkleError::IndexOutOfRange {
                        index: position.0,
                        size,
                    },
                ))?;
        Ok(InclusionProof {
            size,
            leaf_index: position.0 - 1,
            leaf_hash: merkle::leaf_hash(&event.hash.0).to_hex(),
            root: root.to_hex(),
            hashes: hashes.iter().map(MerkleHash::to_hex).collect(),
        })
    }

    /// The head of session `session_id` at tree size `size` (default: the
    /// whole log) with its map proof, or the proof that it had no event
    /// then. `size` must be a size the map is kept at (a checkpoint's).
    pub fn prove_session(&self, session_id: SessionId, size: Option<u64>) -> Result<SessionProof> {
        let size = match size {
            Some(size) => size,
            None => self.store.merkle_head()?.0,
        };
        let proven = self
            .store
            .stream_head_proof(&session_id.stream().to_string(), size)?;
        let other_leaf = match proven.proof.terminal {
            map::Terminal::Leaf { key, value } if proven.head.is_none() => Some(OtherLeaf {
                key: MerkleHash(key).to_hex(),
                value: value.to_hex(),
            }),
            _ => None,
        };
        Ok(SessionProof {
            session_id,
            present: proven.head.is_some(),
            version: proven.head.map(|head| head.version),
            position: proven.head.map(|head| head.position),
            hash: proven.head.map(|head| head.hash.to_hex()),
            size,
            map_root: proven.map_root.to_hex(),
            proof: proven
                .proof
                .siblings
                .iter()
                .map(MerkleHash::to_hex)
                .collect(),
            other_leaf,
        })
    }

    /// The consistency proof between the trees of the first `old` and `new`
    /// events (default: the whole log).
    pub fn prove_consistency(&self, old: u64, new: Option<u64>) -> Result<ConsistencyProof> {
        let new = match new {
            Some(new) => new,
            None => self.store.merkle_head()?.0,
        };
        let hashes = self.store.consistency_proof(old, new)?;
        Ok(ConsistencyProof {
            old,
            new,
            old_root: self.store.merkle_root(old)?.to_hex(),
            new_root: self.store.merkle_root(new)?.to_hex(),
            hashes: hashes.iter().map(MerkleHash::to_hex).collect(),
        })
    }

    /// Checks that today's log extends the log a checkpoint signed earlier:
    /// the signature, the hash chain, then a consistency proof from the checkpoint's size
    /// to now against the checkpoint's root and a root recomputed from the
    /// events (so neither rewritten events nor rewritten tree nodes pass).
    pub fn verify_checkpoint(&self, note: &str, key: &VerifierKey) -> Result<CheckpointCheck> {
        let checkpoint = Checkpoint::verify(note, key).map_err(RuntimeError::Note)?;
        // The chain first: the tree's leaves are the stored hashes, so an
        // event altered without re-chaining is caught here, not there.
        self.store.verify()?;
        let report = self.store.verify_merkle()?;
        if checkpoint.size > report.size {
            return Err(RuntimeError::NotConsistent {
                checkpoint_size: checkpoint.size,
                log_size: report.size,
                reason: "the log is shorter than the checkpoint: events were removed".into(),
            });
        }
        let proof = self.store.consistency_proof(checkpoint.size, report.size)?;
        merkle::verify_consistency(checkpoint.size, report.size, &proof, &checkpoint.root, &report.root)
            .map_err(|error| RuntimeError::NotConsistent {
                checkpoint_size: checkpoint.size,
                log_size: report.size,
                reason: format!(
                    "{error}: the first {} events are not the ones the checkpoint signed (history was rewritten)",
                    checkpoint.size
                ),
            })?;
        Ok(CheckpointCheck {
            checkpoint_size: checkpoint.size,
            log_size: report.size,
            log_root: report.root.to_hex(),
        })
    }

    /// An offline evidence bundle of one session: its events up to the
    /// checkpoint, an inclusion proof for each, the checkpoint, and the
    /// blobs its events name that are still kept. With `key`, a new
    /// checkpoint is signed first; without, the newest stored one is used.
    pub fn export_bundle(&self, session_id: SessionId, key: Option<&SignerKey>) -> Result<Bundle> {
        let note = match key {
            Some(key) => self.sign_checkpoint(key)?.note,
            None => self
                .latest_checkpoint()?
                .ok_or(RuntimeError::NoCheckpoint)?,
        };
        let body_size = note
            .lines()
            .nth(1)
            .and_then(|line| line.parse::<u64>().ok())
            .ok_or(RuntimeError::NoCheckpoint)?;
        let envelopes = self.store.read_stream(StreamId::Session(session_id))?;
        if envelopes.is_empty() {
            return Err(RuntimeError::UnknownSession(session_id));
        }
        // A checkpoint signed before the map existed (or whose size keeps
        // no map since a rebuild) gives a format 1 bundle: inclusion only.
        let signs_map = note
            .lines()
            .skip(3)
            .take_while(|line| !line.is_empty())
            .any(|line| line.starts_with(map::CHECKPOINT_LINE_PREFIX));
        let proven = match signs_map {
            true => match self
                .store
                .stream_head_proof(&session_id.stream().to_string(), body_size)
            {
                Ok(proven) => Some(proven),
                Err(sandlog_eventstore::EventStoreError::NoMapAt { .. }) => None,
                Err(error) => return Err(error.into()),
            },
            false => None,
        };
        if proven.is_none() {
            tracing::warn!(
                size = body_size,
                "the checkpoint has no map proof here; the bundle proves inclusion only \
                 (sign a fresh checkpoint with --key for a complete one)"
            );
        }
        // A session made after the checkpoint has no head in it.
        if proven.as_ref().is_some_and(|proven| proven.head.is_none()) {
            return Err(RuntimeError::UnknownSession(session_id));
        }
        let mut events = Vec::new();
        let mut blobs = BTreeMap::new();
        let mut carried = 0u64;
        for envelope in envelopes
            .iter()
            .filter(|envelope| envelope.position.0 <= body_size)
        {
            let proof = self.store.inclusion_proof(envelope.position, body_size)?;
            events.push(BundleEvent::new(envelope, &proof));
            for hash in blob_refs(envelope) {
                let size = match self.backend().blob_state(&hash)? {
                    sandlog_eventstore::BlobState::Kept { size, .. } => size,
                    _ => continue,
                };
                if blobs.contains_key(&hash.to_hex()) || carried + size > BUNDLE_BLOB_BYTES_MAX {
                    continue;
                }
                if let Some(bytes) = self.backend().get_blob(&hash)? {
                    use base64::Engine as _;
                    carried += size;
                    blobs.insert(
                        hash.to_hex(),
                        base64::engine::general_purpose::STANDARD.encode(bytes),
                    );
                }
            }
        }
        let (format, head, map_proof) = match proven {
            Some(proven) => (
                BUNDLE_FORMAT,
                proven.head.map(|head| BundleHead {
                    version: head.version,
                    position: head.position,
                    hash: head.hash.to_hex(),
                }),
                Some(
                    proven
                        .proof
                        .siblings
                        .iter()
                        .map(MerkleHash::to_hex)
                        .collect(),
                ),
            ),
            None => (BUNDLE_FORMAT_V1, None, None),
        };
        Ok(Bundle {
            format: format.to_owned(),
            session_id,
            checkpoint: note,
            events,
            head,
            map_proof,
            blobs,
        })
    }
}
