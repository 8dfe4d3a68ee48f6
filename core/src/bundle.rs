//! Offline evidence bundles: one session's events, an RFC 6962 inclusion
//! proof for each against a signed checkpoint, and the session's kept
//! blobs, in one JSON file that a verifier checks with nothing but the
//! log's verifier key. Pure: parsing and checking, no I/O.
//!
//! # What a verified bundle proves
//!
//! * The checkpoint was signed by the key's holder (Ed25519, C2SP note).
//! * Every event is exactly as the log recorded it: its chain hash is
//!   recomputed from its fields, and that hash is a leaf of the tree whose
//!   root the checkpoint signs (inclusion proof).
//! * The bundle holds the session's whole stream as of the checkpoint
//!   (format 2): the checkpoint also signs the root of the map of stream
//!   heads (`sandlog_core::map`), the bundle carries the map proof of the
//!   session's head at the checkpoint's size (its last version, position
//!   and event hash), and its events must run from version 1 to exactly
//!   that head. A bundle missing its first, a middle or its last events is
//!   refused, naming the versions missing.
//! * Format 1 bundles (no map proof) still verify, but prove inclusion
//!   only: their versions run 1, 2, 3, … without a gap, and nothing shows
//!   that the last one is the session's last.
//! * Every blob's bytes hash (blake3) to its name. Blobs the events name
//!   but the bundle lacks (erased, pruned, never kept) are listed, not
//!   failures: their hashes stay proven through the events.
//!
//! # Format (`format`: [`BUNDLE_FORMAT`])
//!
//! ```json
//! {"format": "sandlog-evidence-bundle/2", "session_id": "<uuid>",
//!  "checkpoint": "<signed note>",
//!  "events": [{"position": 1, "stream": "session/<uuid>", "version": 1,
//!              "event_id": "<uuid>", "kind": "session.created", "schema": 1,
//!              "recorded_at_us": 0, "actor": "cli:ana",
//!              "correlation_id": null, "causation_id": null,
//!              "payload_base64": "…", "prev_hash": "<hex>", "hash": "<hex>",
//!              "inclusion": ["<hex>", …]}],
//!  "head": {"version": 3, "position": 9, "hash": "<hex>"},
//!  "map_proof": ["<hex>", …],
//!  "blobs": {"<blake3 hex>": "<base64>"}}
//! ```
//!
//! `map_proof` is the map's siblings from the session's leaf up, leaf
//! side first (see `sandlog_core::map`). Format 1 has neither `head` nor
//! `map_proof`.
//!
//! Payloads travel as base64 of the exact stored bytes (the chain hashes
//! bytes, and a JSON re-encoding could change them). Unknown fields are
//! refused: every byte of a bundle either is checked or breaks parsing.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::envelope::{Envelope, Hash, chain_hash};
use crate::ids::{EventId, Position, SessionId, StreamId, StreamVersion};
use crate::map::{self as heads, MapProof, StreamHead, Terminal};
use crate::merkle::{self, MerkleHash};
use crate::note::{Checkpoint, NoteError, VerifierKey};
use crate::time::Timestamp;

/// The `format` value this build writes: bundles that prove their
/// session complete.
pub const BUNDLE_FORMAT: &str = "sandlog-evidence-bundle/2";

/// The first format, still read: inclusion only.
pub const BUNDLE_FORMAT_V1: &str = "sandlog-evidence-bundle/1";

/// Largest bundle file a verifier reads, bytes. A session's events are a
/// few hundred bytes each and its kept blobs are bounded by the evidence
/// budgets, so a real bundle is far below; the bound keeps a hostile file
/// from exhausting memory.
pub const BUNDLE_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// One event in a bundle, with its inclusion proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleEvent {
    /// Global position (leaf index + 1).
    pub position: u64,
    /// The stream, as stored.
    pub stream: String,
    /// Version in the stream.
    pub version: u64,
    /// The event's id.
    pub event_id: Uuid,
    /// Dotted kind.
    pub kind: String,
    /// Payload schema version.
    pub schema: u32,
    /// `recorded_at`, microseconds since the Unix epoch.
    pub recorded_at_us: i64,
    /// Who acted.
    pub actor: String,
    /// Correlation id.
    pub correlation_id: Option<Uuid>,
    /// Causation id.
    pub causation_id: Option<Uuid>,
    /// The exact payload bytes, base64.
    pub payload_base64: String,
    /// The previous event's chain hash, hex.
    pub prev_hash: String,
    /// This event's chain hash, hex.
    pub hash: String,
    /// RFC 6962 audit path for leaf `position - 1` in the checkpoint's
    /// tree, leaf side first, hex.
    pub inclusion: Vec<String>,
}

impl BundleEvent {
    /// The bundle form of a stored envelope and its proof.
    pub fn new(envelope: &Envelope, inclusion: &[MerkleHash]) -> BundleEvent {
        BundleEvent {
            position: envelope.position.0,
            stream: envelope.stream.to_string(),
            version: envelope.version.0,
            event_id: envelope.event_id.0,
            kind: envelope.kind.clone(),
            schema: envelope.schema,
            recorded_at_us: envelope.recorded_at.unix_micros(),
            actor: envelope.actor.clone(),
            correlation_id: envelope.correlation_id,
            causation_id: envelope.causation_id,
            payload_base64: BASE64.encode(&envelope.payload),
            prev_hash: envelope.prev_hash.to_hex(),
            hash: envelope.hash.to_hex(),
            inclusion: inclusion.iter().map(MerkleHash::to_hex).collect(),
        }
    }

    fn envelope(&self) -> Result<Envelope, BundleError> {
        let bad = |what: &str| BundleError::MalformedEvent {
            position: self.position,
            reason: what.to_owned(),
        };
        Ok(Envelope {
            position: Position(self.position),
            stream: StreamId::parse(&self.stream)
                .map_err(|_| bad("the stream is not a valid stream name"))?,
            version: StreamVersion(self.version),
            event_id: EventId(self.event_id),
            kind: self.kind.clone(),
            schema: self.schema,
            recorded_at: Timestamp::from_unix_micros(self.recorded_at_us),
            actor: self.actor.clone(),
            correlation_id: self.correlation_id,
            causation_id: self.causation_id,
            payload: BASE64
                .decode(&self.payload_base64)
                .map_err(|_| bad("the payload is not valid base64"))?,
            prev_hash: Hash::from_hex(&self.prev_hash)
                .map_err(|_| bad("prev_hash is not 64 hex digits"))?,
            hash: Hash::from_hex(&self.hash).map_err(|_| bad("hash is not 64 hex digits"))?,
        })
    }
}

/// An evidence bundle as stored in its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// The session whose history this is.
    pub session_id: SessionId,
    /// The signed checkpoint (C2SP signed note) the proofs are against.
    pub checkpoint: String,
    /// The session's events in position order.
    pub events: Vec<BundleEvent>,
    /// The session's head at the checkpoint's size (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<BundleHead>,
    /// The map proof of `head` against the checkpoint's map root, leaf
    /// side first, hex (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_proof: Option<Vec<String>>,
    /// Kept blob contents by blake3 hex, base64.
    pub blobs: BTreeMap<String, String>,
}

/// A session's head as a bundle carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleHead {
    /// The last version.
    pub version: u64,
    /// The last event's position.
    pub position: u64,
    /// The last event's chain hash, hex.
    pub hash: String,
}

/// Why a bundle failed verification. Every variant names what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    /// Not JSON of the bundle's shape, or another format.
    #[error("not a sandlog evidence bundle: {0}")]
    NotABundle(String),
    /// The checkpoint's signature or shape.
    #[error("checkpoint: {0}")]
    Checkpoint(#[from] NoteError),
    /// An event's fields cannot be read.
    #[error("event at position {position}: {reason}")]
    MalformedEvent {
        /// Its position.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// An event's fields do not hash to its recorded hash: it was altered.
    #[error(
        "event at position {position} was altered: its fields hash to {actual}, not the recorded {recorded}"
    )]
    EventAltered {
        /// Its position.
        position: u64,
        /// The recorded hash.
        recorded: String,
        /// What the fields hash to.
        actual: String,
    },
    /// An event is not in the signed tree (or its proof was altered).
    #[error(
        "event at position {position} is not proven by the checkpoint of size {size}: {reason}"
    )]
    NotIncluded {
        /// Its position.
        position: u64,
        /// The checkpoint's tree size.
        size: u64,
        /// The verifier's reason.
        reason: String,
    },
    /// The events are not the session's stream in order, without gaps.
    #[error("the events are not session {session_id}'s complete stream: {reason}")]
    Incomplete {
        /// The session.
        session_id: SessionId,
        /// What is out of order or missing.
        reason: String,
    },
    /// The map proof of the session's head does not verify against the
    /// checkpoint's map root.
    #[error("the head of session {session_id} is not proven by the checkpoint's map: {reason}")]
    HeadNotProven {
        /// The session.
        session_id: SessionId,
        /// What failed.
        reason: String,
    },
    /// A blob's bytes do not hash to its name.
    #[error("blob {name} was altered: its bytes hash to {actual}")]
    BlobAltered {
        /// Its name (blake3 hex).
        name: String,
        /// What the bytes hash to.
        actual: String,
    },
    /// The bundle carries a blob that none of its events says was stored:
    /// bytes smuggled in beside the evidence.
    #[error(
        "blob {name} is named by none of the bundle's events: a bundle carries only the code, output and files its events name"
    )]
    BlobUnnamed {
        /// Its name (blake3 hex).
        name: String,
    },
}

/// What a verified bundle holds, ready to fold or print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBundle {
    /// The signed checkpoint.
    pub checkpoint: Checkpoint,
    /// The session.
    pub session_id: SessionId,
    /// Its events, each proven.
    pub envelopes: Vec<Envelope>,
    /// Its blobs, each checked.
    pub blobs: BTreeMap<Hash, Vec<u8>>,
    /// The session's head at the checkpoint's size, proven by the map,
    /// which the events end at: the bundle is complete. `None` for a
    /// format 1 bundle, which proves inclusion only.
    pub head: Option<StreamHead>,
}

impl Bundle {
    /// Parses a bundle file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Bundle, BundleError> {
        if bytes.len() as u64 > BUNDLE_BYTES_MAX {
            return Err(BundleError::NotABundle(format!(
                "larger than {BUNDLE_BYTES_MAX} bytes"
            )));
        }
        let bundle: Bundle = serde_json::from_slice(bytes)
            .map_err(|error| BundleError::NotABundle(error.to_string()))?;
        let complete = match bundle.format.as_str() {
            BUNDLE_FORMAT => true,
            BUNDLE_FORMAT_V1 => false,
            other => {
                return Err(BundleError::NotABundle(format!(
                    "format {other:?}, expected {BUNDLE_FORMAT:?} or {BUNDLE_FORMAT_V1:?}"
                )));
            }
        };
        let has_head = bundle.head.is_some() && bundle.map_proof.is_some();
        let has_any = bundle.head.is_some() || bundle.map_proof.is_some();
        if complete && !has_head {
            return Err(BundleError::NotABundle(format!(
                "format {BUNDLE_FORMAT:?} needs \"head\" and \"map_proof\""
            )));
        }
        if !complete && has_any {
            return Err(BundleError::NotABundle(format!(
                "format {BUNDLE_FORMAT_V1:?} has no \"head\" or \"map_proof\""
            )));
        }
        Ok(bundle)
    }

    /// Checks everything that needs no database: the signature, each
    /// event's hash and inclusion proof, the stream's completeness, and
    /// each blob's hash.
    pub fn verify(&self, key: &VerifierKey) -> Result<VerifiedBundle, BundleError> {
        let checkpoint = Checkpoint::verify(&self.checkpoint, key)?;
        let stream = self.session_id.stream().to_string();
        let head = self.proven_head(&checkpoint, &stream)?;
        if let Some(head) = &head {
            self.check_complete(head)?;
        }
        let mut envelopes = Vec::with_capacity(self.events.len());
        let mut last_position = 0u64;
        for (index, event) in self.events.iter().enumerate() {
            let envelope = event.envelope()?;
            let stream_text = envelope.stream.to_string();
            let actual = chain_hash(&envelope.prev_hash, &envelope.fields(&stream_text));
            if actual != envelope.hash {
                return Err(BundleError::EventAltered {
                    position: event.position,
                    recorded: envelope.hash.to_hex(),
                    actual: actual.to_hex(),
                });
            }
            let incomplete = |reason: String| BundleError::Incomplete {
                session_id: self.session_id,
                reason,
            };
            if stream_text != stream {
                return Err(incomplete(format!(
                    "event {} is in stream {stream_text}",
                    event.position
                )));
            }
            if event.version != index as u64 + 1 {
                return Err(incomplete(format!(
                    "event {} has version {}, expected {} (an event is missing)",
                    event.position,
                    event.version,
                    index + 1
                )));
            }
            if event.position <= last_position {
                return Err(incomplete(format!(
                    "event {} is out of order",
                    event.position
                )));
            }
            last_position = event.position;
            let proof = event
                .inclusion
                .iter()
                .map(|text| MerkleHash::from_hex(text))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| BundleError::MalformedEvent {
                    position: event.position,
                    reason: "an inclusion hash is not 64 hex digits".into(),
                })?;
            let not_included = |reason: String| BundleError::NotIncluded {
                position: event.position,
                size: checkpoint.size,
                reason,
            };
            let index = event
                .position
                .checked_sub(1)
                .ok_or_else(|| not_included("position 0 is not a leaf".into()))?;
            merkle::verify_inclusion(
                &merkle::leaf_hash(&envelope.hash.0),
                index,
                checkpoint.size,
                &proof,
                &checkpoint.root,
            )
            .map_err(|error| not_included(error.to_string()))?;
            envelopes.push(envelope);
        }
        let mut blobs = BTreeMap::new();
        for (name, data) in &self.blobs {
            let hash = Hash::from_hex(name).map_err(|_| {
                BundleError::NotABundle(format!("blob name {name:?} is not a blake3 hex digest"))
            })?;
            let bytes = BASE64
                .decode(data)
                .map_err(|_| BundleError::NotABundle(format!("blob {name} is not valid base64")))?;
            let actual = Hash::of(&bytes);
            if actual != hash {
                return Err(BundleError::BlobAltered {
                    name: name.clone(),
                    actual: actual.to_hex(),
                });
            }
            blobs.insert(hash, bytes);
        }
        Ok(VerifiedBundle {
            checkpoint,
            session_id: self.session_id,
            envelopes,
            blobs,
            head,
        })
    }

    /// The session's head the map proves at the checkpoint's size
    /// (format 2), `None` for format 1.
    fn proven_head(
        &self,
        checkpoint: &Checkpoint,
        stream: &str,
    ) -> Result<Option<StreamHead>, BundleError> {
        let (Some(head), Some(proof)) = (&self.head, &self.map_proof) else {
            return Ok(None);
        };
        let not_proven = |reason: String| BundleError::HeadNotProven {
            session_id: self.session_id,
            reason,
        };
        let map_root = heads::root_of_checkpoint(checkpoint)
            .map_err(|error| not_proven(error.to_string()))?
            .ok_or_else(|| not_proven("the checkpoint carries no map root".into()))?;
        let head = StreamHead {
            version: head.version,
            position: head.position,
            hash: Hash::from_hex(&head.hash)
                .map_err(|_| BundleError::NotABundle("head.hash is not 64 hex digits".into()))?,
        };
        let siblings = proof
            .iter()
            .map(|text| MerkleHash::from_hex(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| BundleError::NotABundle("a map_proof hash is not 64 hex digits".into()))?;
        let key = heads::key_of(stream);
        let value = head.value();
        let proof = MapProof {
            siblings,
            terminal: Terminal::Leaf { key, value },
        };
        heads::verify(&map_root, &key, Some(&value), &proof)
            .map_err(|error| not_proven(error.to_string()))?;
        if head.position > checkpoint.size {
            return Err(not_proven(format!(
                "the head's position {} is past the checkpoint's size {}",
                head.position, checkpoint.size
            )));
        }
        Ok(Some(head))
    }

    /// Refuses events that are not versions 1 to exactly `head`, naming
    /// the versions missing.
    fn check_complete(&self, head: &StreamHead) -> Result<(), BundleError> {
        let incomplete = |reason: String| BundleError::Incomplete {
            session_id: self.session_id,
            reason,
        };
        let span = |from: u64, to: u64| match from == to {
            true => format!("version {from}"),
            false => format!("versions {from} to {to}"),
        };
        let mut expected = 1u64;
        for event in &self.events {
            if event.version > expected {
                let what = match expected {
                    1 => "its first event is missing",
                    _ => "an event in the middle is missing",
                };
                return Err(incomplete(format!(
                    "{what}: {} (the bundle jumps to version {} at position {})",
                    span(expected, event.version - 1),
                    event.version,
                    event.position
                )));
            }
            expected = event.version.saturating_add(1);
        }
        if expected <= head.version {
            return Err(incomplete(format!(
                "its last events are missing: {} (the session's head at the checkpoint is \
                 version {} at position {})",
                span(expected, head.version),
                head.version,
                head.position
            )));
        }
        match self.events.last() {
            Some(last)
                if last.version == head.version
                    && last.position == head.position
                    && last.hash == head.hash.to_hex() =>
            {
                Ok(())
            }
            _ => Err(incomplete(format!(
                "its last event is not the session's head the map proves (version {} at \
                 position {})",
                head.version, head.position
            ))),
        }
    }
}
