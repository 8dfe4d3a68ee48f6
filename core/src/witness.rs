//! The C2SP `tlog-witness` protocol, pure: the `add-checkpoint` request's
//! wire format (both sides), and the witness's decision whether to cosign.
//! The caller (the witness server) supplies the log keys it trusts and the
//! head it last cosigned for the log, keeps the new head durably *before*
//! answering, and serialises requests so the check and the update are one
//! step.
//!
//! # The request
//!
//! `POST <prefix>/add-checkpoint` with a body of: `old <size>` (decimal, no
//! leading zeros), zero to [`PROOF_LINES_MAX`] base64 consistency proof
//! hashes one per line, an empty line, then the log's signed checkpoint
//! note. Each line ends with a newline.
//!
//! # The decision, in the specification's order
//!
//! | check | refusal |
//! |---|---|
//! | the body parses | 400 |
//! | the origin is a log the witness knows | 404 |
//! | a signature by one of that log's keys verifies | 403 |
//! | `old` ≤ the checkpoint's size | 400 |
//! | `old` is the size the witness last cosigned (0 if never) | 409, body: that size |
//! | `old` = size: the roots are equal | 409, body: that size |
//! | the proof proves the old tree a prefix of the new one | 422 |
//!
//! Then the witness records the new head and answers 200 with its
//! cosignature lines.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::merkle::{self, MerkleHash};
use crate::note::{Checkpoint, NOTE_BYTES_MAX, VerifierKey, split_note};

/// The path of the submission call, below the witness's URL prefix.
pub const ADD_CHECKPOINT_PATH: &str = "/add-checkpoint";

/// The content type of a 409 answer's body (the witness's size).
pub const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// Consistency proof lines a request may carry (the specification's bound:
/// a proof between trees of up to 2⁶⁴ leaves is shorter).
pub const PROOF_LINES_MAX: usize = 63;

/// Largest `add-checkpoint` body: a note at its longest, the old size line
/// and a full proof (45 bytes a line), with room to spare.
pub const ADD_CHECKPOINT_BYTES_MAX: usize = NOTE_BYTES_MAX + 8 * 1024;

/// Largest answer a client reads from a witness: its cosignature lines
/// (about 130 bytes each) or a refusal's text.
pub const WITNESS_RESPONSE_BYTES_MAX: usize = 64 * 1024;

/// An `add-checkpoint` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size of the checkpoint the proof starts from: the one the
    /// witness last cosigned, as far as the client knows.
    pub old: u64,
    /// RFC 6962 consistency proof from `old` to the checkpoint's size.
    pub proof: Vec<MerkleHash>,
    /// The log's signed checkpoint note.
    pub note: String,
}

/// The head a witness cosigned last for one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WitnessedHead {
    /// Tree size.
    pub size: u64,
    /// Root hash at that size.
    pub root: MerkleHash,
}

/// Why a witness refused a request; each maps to the HTTP status the
/// specification assigns ([`Refusal::status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The body is not an `add-checkpoint` request (400).
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The checkpoint's origin is not a log this witness is configured for
    /// (404).
    #[error("unknown log {origin:?}: this witness is not configured for it (--log VKEY)")]
    UnknownLog {
        /// The origin line.
        origin: String,
    },
    /// No signature by the log's configured keys verifies (403).
    #[error("the checkpoint of {origin:?} has no valid signature by the log's key: {reason}")]
    NotSigned {
        /// The origin line.
        origin: String,
        /// The verifier's reason.
        reason: String,
    },
    /// `old` is past the checkpoint's size (400).
    #[error("old size {old} is larger than the checkpoint's size {size}")]
    OldPastSize {
        /// The old size sent.
        old: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// `old` is not the size the witness last cosigned (409).
    #[error("old size {old} is not the size this witness last cosigned for the log ({latest})")]
    StaleOld {
        /// The old size sent.
        old: u64,
        /// The witness's size.
        latest: u64,
    },
    /// A checkpoint of the size the witness cosigned, with another root: a
    /// split view (409).
    #[error(
        "this witness cosigned another root for size {size}: the log shows two different trees of the same size"
    )]
    RootConflict {
        /// The size both have.
        size: u64,
    },
    /// The consistency proof does not verify (422).
    #[error(
        "the consistency proof from size {old} to {size} does not verify against the root this witness cosigned: {reason}"
    )]
    BadProof {
        /// The old size.
        old: u64,
        /// The checkpoint's size.
        size: u64,
        /// The verifier's reason.
        reason: String,
    },
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Malformed(_) | Refusal::OldPastSize { .. } => 400,
            Refusal::UnknownLog { .. } => 404,
            Refusal::NotSigned { .. } => 403,
            Refusal::StaleOld { .. } | Refusal::RootConflict { .. } => 409,
            Refusal::BadProof { .. } => 422,
        }
    }

    /// For a 409: the witness's size, the body of the answer.
    pub fn latest_size(&self) -> Option<u64> {
        match self {
            Refusal::StaleOld { latest, .. } => Some(*latest),
            Refusal::RootConflict { size } => Some(*size),
            _ => None,
        }
    }
}

/// Parses a decimal size with no leading zeros (`0` itself is allowed).
pub fn parse_size(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

impl AddCheckpoint {
    /// The request body.
    pub fn encode(&self) -> String {
        let mut body = format!("old {}\n", self.old);
        for hash in &self.proof {
            body.push_str(&BASE64.encode(hash.0));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(&self.note);
        body
    }

    /// Parses a request body (bounded by [`ADD_CHECKPOINT_BYTES_MAX`]).
    pub fn parse(bytes: &[u8]) -> Result<AddCheckpoint, Refusal> {
        let bad = |reason: &str| Refusal::Malformed(reason.to_owned());
        if bytes.len() > ADD_CHECKPOINT_BYTES_MAX {
            return Err(Refusal::Malformed(format!(
                "the body is longer than {ADD_CHECKPOINT_BYTES_MAX} bytes"
            )));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| bad("the body is not UTF-8"))?;
        let Some((head, note)) = text.split_once("\n\n") else {
            return Err(bad(
                "no empty line between the old size and proof lines and the checkpoint",
            ));
        };
        let mut lines = head.split('\n');
        let old = lines
            .next()
            .and_then(|line| line.strip_prefix("old "))
            .and_then(parse_size)
            .ok_or_else(|| {
                bad("the first line must be `old <size>` (decimal, no leading zeros)")
            })?;
        let mut proof = Vec::new();
        for line in lines {
            if proof.len() == PROOF_LINES_MAX {
                return Err(Refusal::Malformed(format!(
                    "more than {PROOF_LINES_MAX} consistency proof lines"
                )));
            }
            let hash: [u8; 32] = BASE64
                .decode(line)
                .ok()
                .and_then(|bytes| bytes.try_into().ok())
                .ok_or_else(|| bad("a consistency proof line is not a base64 32-byte hash"))?;
            proof.push(MerkleHash(hash));
        }
        if old == 0 && !proof.is_empty() {
            return Err(bad("the proof must be empty when the old size is 0"));
        }
        Ok(AddCheckpoint {
            old,
            proof,
            note: note.to_owned(),
        })
    }

    /// The note's body: the exact bytes every signature on it covers.
    pub fn body(&self) -> Result<&str, Refusal> {
        split_note(&self.note)
            .map(|(body, _)| body)
            .map_err(|error| Refusal::Malformed(error.to_string()))
    }

    /// The checkpoint, once a signature by one of `logs` (the log keys the
    /// witness trusts) verifies. Keys of other origins are not tried, and
    /// signatures by unknown keys are ignored.
    pub fn verify_note(&self, logs: &[VerifierKey]) -> Result<Checkpoint, Refusal> {
        let (body, _) =
            split_note(&self.note).map_err(|error| Refusal::Malformed(error.to_string()))?;
        let unsigned =
            Checkpoint::parse_body(body).map_err(|error| Refusal::Malformed(error.to_string()))?;
        let mut keys = logs
            .iter()
            .filter(|key| key.name() == unsigned.origin)
            .peekable();
        if keys.peek().is_none() {
            return Err(Refusal::UnknownLog {
                origin: unsigned.origin,
            });
        }
        let mut last_error = String::new();
        for key in keys {
            match Checkpoint::verify(&self.note, key) {
                Ok(checkpoint) => return Ok(checkpoint),
                Err(error) => last_error = error.to_string(),
            }
        }
        Err(Refusal::NotSigned {
            origin: unsigned.origin,
            reason: last_error,
        })
    }

    /// Whether a witness whose last cosigned head for the log is `latest`
    /// (None: never cosigned one) may cosign `checkpoint` (from
    /// [`AddCheckpoint::verify_note`]); the head to record if so.
    pub fn check_extends(
        &self,
        latest: Option<&WitnessedHead>,
        checkpoint: &Checkpoint,
    ) -> Result<WitnessedHead, Refusal> {
        let new = WitnessedHead {
            size: checkpoint.size,
            root: checkpoint.root,
        };
        if self.old > new.size {
            return Err(Refusal::OldPastSize {
                old: self.old,
                size: new.size,
            });
        }
        let latest = latest.copied().unwrap_or(WitnessedHead {
            size: 0,
            root: merkle::empty_root(),
        });
        if self.old != latest.size {
            return Err(Refusal::StaleOld {
                old: self.old,
                latest: latest.size,
            });
        }
        if self.old == new.size && latest.root != new.root {
            return Err(Refusal::RootConflict { size: new.size });
        }
        merkle::verify_consistency(self.old, new.size, &self.proof, &latest.root, &new.root)
            .map_err(|error| Refusal::BadProof {
                old: self.old,
                size: new.size,
                reason: error.to_string(),
            })?;
        Ok(new)
    }
}

/// The head recorded in a note the witness kept (unverified: the witness
/// verified it before keeping it), with its origin.
pub fn kept_head(note: &str) -> Result<(String, WitnessedHead), String> {
    let (body, _) = split_note(note).map_err(|error| error.to_string())?;
    let checkpoint = Checkpoint::parse_body(body).map_err(|error| error.to_string())?;
    Ok((
        checkpoint.origin,
        WitnessedHead {
            size: checkpoint.size,
            root: checkpoint.root,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{Frontier, MerkleError, NodeId, NodeSource};
    use crate::note::SignerKey;
    use std::collections::HashMap;

    struct Tree(HashMap<NodeId, MerkleHash>, u64);

    impl NodeSource for Tree {
        type Error = MerkleError;
        fn node(&self, id: NodeId) -> Result<MerkleHash, MerkleError> {
            self.0.get(&id).copied().ok_or(MerkleError::RootMismatch)
        }
    }

    /// A tree of `size` leaves whose data starts with `seed`.
    fn tree(size: u64, seed: u8) -> Tree {
        let mut frontier = Frontier::default();
        let mut nodes = HashMap::new();
        for leaf in 0..size {
            let mut data = [seed; 32];
            data[..8].copy_from_slice(&leaf.to_be_bytes());
            nodes.extend(frontier.append(&data));
        }
        Tree(nodes, size)
    }

    fn key() -> SignerKey {
        SignerKey::from_seed("sandlog.test/log", [7; 32]).unwrap()
    }

    fn request(old: &Tree, new: &Tree) -> AddCheckpoint {
        let root = merkle::root(new, new.1).unwrap();
        let note = Checkpoint {
            origin: "sandlog.test/log".into(),
            size: new.1,
            root,
            extensions: vec![],
        }
        .sign(&key())
        .unwrap();
        AddCheckpoint {
            old: old.1,
            proof: merkle::consistency_proof(new, old.1, new.1).unwrap(),
            note,
        }
    }

    fn head(tree: &Tree) -> WitnessedHead {
        WitnessedHead {
            size: tree.1,
            root: merkle::root(tree, tree.1).unwrap(),
        }
    }

    fn decide(
        request: &AddCheckpoint,
        latest: Option<&WitnessedHead>,
    ) -> Result<WitnessedHead, Refusal> {
        let checkpoint = request.verify_note(&[key().verifier()])?;
        request.check_extends(latest, &checkpoint)
    }

    #[test]
    fn requests_round_trip_through_their_wire_form() {
        let request = request(&tree(5, 1), &tree(13, 1));
        let text = request.encode();
        assert!(text.starts_with("old 5\n"), "{text}");
        assert_eq!(AddCheckpoint::parse(text.as_bytes()).unwrap(), request);
        for bad in [
            "old 05\n\nx",
            "old -1\n\nx",
            "new 5\n\nx",
            "old 5\nnot base64!\n\nx",
            "old 5\nAAAA\n\nx",
            "old 0\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\nx",
            "old 5\n",
        ] {
            let refused = AddCheckpoint::parse(bad.as_bytes()).unwrap_err();
            assert_eq!(refused.status(), 400, "{bad:?}: {refused}");
        }
        let long = format!(
            "old 1\n{}\nx",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n".repeat(64)
        );
        assert!(AddCheckpoint::parse(long.as_bytes()).is_err());
    }

    #[test]
    fn a_witness_cosigns_only_what_extends_what_it_saw() {
        let (five, thirteen, twenty) = (tree(5, 1), tree(13, 1), tree(20, 1));
        // First contact: old 0, no proof.
        let first = decide(&request(&tree(0, 1), &five), None).unwrap();
        assert_eq!(first, head(&five));
        // Growth with a proof from what it saw.
        let grown = decide(&request(&five, &thirteen), Some(&first)).unwrap();
        assert_eq!(grown, head(&thirteen));
        // The same checkpoint again is fine (same size, same root).
        assert!(decide(&request(&thirteen, &thirteen), Some(&grown)).is_ok());
        // A stale old size gets 409 with the witness's size.
        let stale = decide(&request(&five, &twenty), Some(&grown)).unwrap_err();
        assert_eq!((stale.status(), stale.latest_size()), (409, Some(13)));
        // A fork of the same size: 409.
        let fork = tree(13, 2);
        let conflict = decide(&request(&fork, &fork), Some(&grown)).unwrap_err();
        assert_eq!((conflict.status(), conflict.latest_size()), (409, Some(13)));
        // A fork that grew: the proof fails against the witnessed root, 422.
        let mut forked = request(&thirteen, &tree(20, 2));
        forked.proof = merkle::consistency_proof(&tree(20, 2), 13, 20).unwrap();
        assert_eq!(decide(&forked, Some(&grown)).unwrap_err().status(), 422);
        // old past size: 400.
        let mut backwards = request(&five, &five);
        backwards.old = 13;
        assert_eq!(decide(&backwards, Some(&grown)).unwrap_err().status(), 400);
    }

    proptest::proptest! {
        /// Hostile bodies: any bytes, and any one byte of a valid request
        /// changed, are answered (cosigned or refused), never a panic; a
        /// changed request is never cosigned as another checkpoint.
        #[test]
        fn hostile_bodies_are_refused_without_panicking(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            at in 0usize..4096,
            value in proptest::num::u8::ANY,
        ) {
            let keys = [key().verifier()];
            if let Ok(request) = AddCheckpoint::parse(&bytes)
                && let Ok(checkpoint) = request.verify_note(&keys)
            {
                let _ = request.check_extends(None, &checkpoint);
            }
            let five = tree(5, 1);
            let grown = request(&five, &tree(9, 1));
            let mut encoded = grown.encode().into_bytes();
            let index = at % encoded.len();
            if let Some(byte) = encoded.get_mut(index) {
                *byte = value;
            }
            if let Ok(changed) = AddCheckpoint::parse(&encoded)
                && let Ok(checkpoint) = changed.verify_note(&keys)
                && let Ok(head) = changed.check_extends(Some(&head(&five)), &checkpoint)
            {
                proptest::prop_assert_eq!(head, super::WitnessedHead {
                    size: 9,
                    root: merkle::root(&tree(9, 1), 9).unwrap(),
                });
            }
        }
    }

    #[test]
    fn unknown_logs_and_bad_signatures_are_refused_by_status() {
        let request = request(&tree(0, 1), &tree(3, 1));
        let stranger = SignerKey::from_seed("other.test/log", [7; 32]).unwrap();
        let refused = request.verify_note(&[stranger.verifier()]).unwrap_err();
        assert_eq!(refused.status(), 404);
        let impostor = SignerKey::from_seed("sandlog.test/log", [8; 32]).unwrap();
        let refused = request.verify_note(&[impostor.verifier()]).unwrap_err();
        assert_eq!(refused.status(), 403);
        // A second key for the same origin is tried too.
        assert!(
            request
                .verify_note(&[impostor.verifier(), key().verifier()])
                .is_ok()
        );
    }
}
