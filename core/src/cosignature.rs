//! Witness cosignatures: C2SP `tlog-cosignature` v1 (Ed25519), and the
//! K-of-N policy a verifier applies to them. Pure: keys come in as bytes
//! and times as numbers; the caller draws the randomness and reads the
//! clock.
//!
//! # What a cosignature says
//!
//! A witness that cosigns a checkpoint states that, at the cosignature's
//! time, the largest tree of that log it has seen *and checked to be
//! consistent with every earlier one it saw* has this size and root. It
//! does not vouch for what the log's leaves mean, nor for extension lines
//! of the body: only the origin, size and root lines. A log that showed
//! two different trees of the same size to two parties can get at most one
//! of them cosigned by an honest witness, so a verifier that requires K
//! cosignatures from witnesses it trusts is safe from a split view unless
//! K of them collude with the log.
//!
//! # Formats
//!
//! A cosignature is a signed-note signature line:
//! `— <witness name> base64(key id ‖ timestamp ‖ signature)`, where the
//! key id is `SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key)[:4]`, the timestamp
//! is 8 bytes big-endian (POSIX seconds, at most 2⁶³ − 1), and the
//! signature is Ed25519 over `cosignature/v1\ntime <timestamp>\n` followed
//! by the note's whole body. Keys are written as for the log
//! ([`crate::note`]) with signature type `0x04`: verifier
//! `<name>+<key id hex>+base64(0x04 ‖ public key)`, signer
//! `PRIVATE+KEY+<name>+<key id hex>+base64(0x04 ‖ seed)`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use crate::note::{
    NoteError, SIGNER_KEY_PREFIX, check_name, hex4, key_id_of, malformed, parse_key_parts_of,
    split_note,
};

pub use crate::note::ALGORITHM_COSIGNATURE_V1;

/// The first line of every cosigned message (domain separation).
const COSIGNATURE_HEADER: &str = "cosignature/v1";

/// Latest timestamp a cosignature may carry (the specification's bound).
pub const COSIGNATURE_TIME_MAX: u64 = i64::MAX as u64;

/// Bytes of a decoded cosignature: key id, timestamp, Ed25519 signature.
const COSIGNATURE_BYTES: usize = 4 + 8 + 64;

/// Witnesses one verification names at most (`--witness-vkey`), and
/// witnesses one checkpoint is sent to at most (`--witness`).
pub const WITNESSES_MAX: usize = 32;

/// The message a cosignature signs.
fn cosigned_message(body: &str, timestamp: u64) -> Vec<u8> {
    let mut message = format!("{COSIGNATURE_HEADER}\ntime {timestamp}\n").into_bytes();
    message.extend_from_slice(body.as_bytes());
    message
}

/// A witness's Ed25519 signing key with its name.
#[derive(Clone)]
pub struct WitnessKey {
    name: String,
    signing: SigningKey,
}

impl std::fmt::Debug for WitnessKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        formatter
            .debug_struct("WitnessKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl WitnessKey {
    /// A key from a 32-byte random seed (the caller draws it from the OS).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<WitnessKey, NoteError> {
        check_name(name)?;
        Ok(WitnessKey {
            name: name.to_owned(),
            signing: SigningKey::from_bytes(&seed),
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<keyid>+<base64(0x04 ‖ seed)>`.
    pub fn parse(text: &str) -> Result<WitnessKey, NoteError> {
        let rest = text
            .trim()
            .strip_prefix(SIGNER_KEY_PREFIX)
            .ok_or(NoteError::BadKey {
                kind: "witness signer",
                reason: format!("a signer key starts with {SIGNER_KEY_PREFIX}"),
            })?;
        let (name, id, seed) =
            parse_key_parts_of(rest, "witness signer", ALGORITHM_COSIGNATURE_V1)?;
        let key = WitnessKey::from_seed(&name, seed)?;
        if key.verifier().key_id != id {
            return Err(NoteError::BadKey {
                kind: "witness signer",
                reason: "the key id does not match the key".into(),
            });
        }
        Ok(key)
    }

    /// The encoded signer key (secret: store it with mode 0600).
    pub fn to_private_string(&self) -> String {
        let mut bytes = vec![ALGORITHM_COSIGNATURE_V1];
        bytes.extend_from_slice(&self.signing.to_bytes());
        format!(
            "{SIGNER_KEY_PREFIX}{}+{}+{}",
            self.name,
            hex4(&self.verifier().key_id),
            BASE64.encode(bytes)
        )
    }

    /// The witness's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> WitnessVerifierKey {
        let public = self.signing.verifying_key();
        WitnessVerifierKey {
            key_id: key_id_of(&self.name, ALGORITHM_COSIGNATURE_V1, public.as_bytes()),
            name: self.name.clone(),
            verifying: public,
        }
    }

    /// The cosignature line (ending in a newline) over a checkpoint `body`
    /// at `timestamp` (POSIX seconds).
    pub fn cosign(&self, body: &str, timestamp: u64) -> Result<String, NoteError> {
        crate::note::check_body(body)?;
        if timestamp > COSIGNATURE_TIME_MAX {
            return Err(malformed(
                "cosignature",
                format!("the timestamp {timestamp} is past 2^63 - 1"),
            ));
        }
        let signature = self.signing.sign(&cosigned_message(body, timestamp));
        let mut blob = Vec::with_capacity(COSIGNATURE_BYTES);
        blob.extend_from_slice(&self.verifier().key_id);
        blob.extend_from_slice(&timestamp.to_be_bytes());
        blob.extend_from_slice(&signature.to_bytes());
        Ok(format!("\u{2014} {} {}\n", self.name, BASE64.encode(blob)))
    }
}

/// A witness's verifier key: what a log and an auditor configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessVerifierKey {
    name: String,
    key_id: [u8; 4],
    verifying: VerifyingKey,
}

/// Why one signature line is not a valid cosignature by a key.
enum LineCheck {
    /// Another key's line (name or key id differ).
    NotOurs,
    /// Ours, and it verifies: the timestamp.
    Valid(u64),
    /// Ours, and it does not verify.
    Invalid,
}

impl WitnessVerifierKey {
    /// Parses `<name>+<keyid>+<base64(0x04 ‖ public key)>`.
    pub fn parse(text: &str) -> Result<WitnessVerifierKey, NoteError> {
        let (name, id, public) =
            parse_key_parts_of(text, "witness verifier", ALGORITHM_COSIGNATURE_V1)?;
        let verifying = VerifyingKey::from_bytes(&public).map_err(|_| NoteError::BadKey {
            kind: "witness verifier",
            reason: "not a valid Ed25519 public key".into(),
        })?;
        if key_id_of(&name, ALGORITHM_COSIGNATURE_V1, &public) != id {
            return Err(NoteError::BadKey {
                kind: "witness verifier",
                reason: "the key id does not match the key".into(),
            });
        }
        Ok(WitnessVerifierKey {
            name,
            key_id: id,
            verifying,
        })
    }

    /// The witness's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id, 8 hex digits.
    pub fn key_id_hex(&self) -> String {
        hex4(&self.key_id)
    }

    fn check(&self, body: &str, name: &str, blob: &[u8]) -> LineCheck {
        let Some((id, rest)) = blob.split_first_chunk::<4>() else {
            return LineCheck::NotOurs;
        };
        if name != self.name || *id != self.key_id {
            return LineCheck::NotOurs;
        }
        let Some((time, signature)) = rest.split_first_chunk::<8>() else {
            return LineCheck::Invalid;
        };
        let timestamp = u64::from_be_bytes(*time);
        let Ok(signature) = Signature::from_slice(signature) else {
            return LineCheck::Invalid;
        };
        if timestamp > COSIGNATURE_TIME_MAX {
            return LineCheck::Invalid;
        }
        match self
            .verifying
            .verify_strict(&cosigned_message(body, timestamp), &signature)
        {
            Ok(()) => LineCheck::Valid(timestamp),
            Err(_) => LineCheck::Invalid,
        }
    }

    /// Checks this witness's cosignature on a signed note; returns the
    /// timestamp of one that verifies. Lines by other keys are ignored.
    pub fn verify(&self, note: &str) -> Result<u64, NoteError> {
        let (body, signatures) = split_note(note)?;
        let mut found = false;
        for (name, blob) in &signatures {
            match self.check(body, name, blob) {
                LineCheck::Valid(timestamp) => return Ok(timestamp),
                LineCheck::Invalid => found = true,
                LineCheck::NotOurs => {}
            }
        }
        if found {
            Err(NoteError::BadSignature {
                name: self.name.clone(),
            })
        } else {
            Err(NoteError::NoSignatureByKey {
                name: self.name.clone(),
                key_id: hex4(&self.key_id),
            })
        }
    }

    /// The lines of `response` (a witness's reply: signature lines) that
    /// are valid cosignatures by this key on `note`'s body, each ending in
    /// a newline; other keys' lines are dropped, as the protocol asks.
    pub fn cosignatures_in(&self, note: &str, response: &str) -> Result<Vec<String>, NoteError> {
        let (body, _) = split_note(note)?;
        let mut valid = Vec::new();
        for line in response.lines() {
            let Some((name, blob)) = line
                .strip_prefix("\u{2014} ")
                .and_then(|rest| rest.split_once(' '))
            else {
                continue;
            };
            let Ok(blob) = BASE64.decode(blob) else {
                continue;
            };
            if let LineCheck::Valid(_) = self.check(body, name, &blob) {
                valid.push(format!("{line}\n"));
            }
        }
        Ok(valid)
    }
}

impl std::fmt::Display for WitnessVerifierKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut bytes = vec![ALGORITHM_COSIGNATURE_V1];
        bytes.extend_from_slice(self.verifying.as_bytes());
        write!(
            formatter,
            "{}+{}+{}",
            self.name,
            hex4(&self.key_id),
            BASE64.encode(bytes)
        )
    }
}

/// K of N: the witnesses a verifier trusts and how many of them must have
/// cosigned a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessPolicy {
    witnesses: Vec<WitnessVerifierKey>,
    threshold: usize,
}

/// One witness's verdict on a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WitnessVerdict {
    /// The witness's name.
    pub name: String,
    /// Its key id, hex.
    pub key_id: String,
    /// When it cosigned (POSIX seconds), if its cosignature verified.
    pub cosigned_at: Option<u64>,
    /// Why it does not count, if it does not.
    pub failure: Option<String>,
}

/// What checking a checkpoint against a [`WitnessPolicy`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QuorumReport {
    /// Valid cosignatures required.
    pub required: usize,
    /// Valid cosignatures found (distinct witnesses).
    pub valid: usize,
    /// Every named witness, in the order given.
    pub witnesses: Vec<WitnessVerdict>,
}

impl WitnessPolicy {
    /// A policy requiring `threshold` of `witnesses` (default: all). Refused:
    /// no witness, more than [`WITNESSES_MAX`], one named twice, a
    /// threshold of 0 or above the number of witnesses.
    pub fn new(
        witnesses: Vec<WitnessVerifierKey>,
        threshold: Option<usize>,
    ) -> Result<WitnessPolicy, String> {
        if witnesses.is_empty() {
            return Err("no witness key given: name each with --witness-vkey".into());
        }
        if witnesses.len() > WITNESSES_MAX {
            return Err(format!(
                "{} witnesses given; at most {WITNESSES_MAX} are supported",
                witnesses.len()
            ));
        }
        for (index, witness) in witnesses.iter().enumerate() {
            if witnesses
                .iter()
                .skip(index + 1)
                .any(|other| other.key_id == witness.key_id && other.name == witness.name)
            {
                return Err(format!(
                    "witness {} is named twice: each witness counts once",
                    witness.name
                ));
            }
        }
        let threshold = threshold.unwrap_or(witnesses.len());
        if threshold == 0 || threshold > witnesses.len() {
            return Err(format!(
                "--witnesses {threshold} is not between 1 and the {} witness keys given",
                witnesses.len()
            ));
        }
        Ok(WitnessPolicy {
            witnesses,
            threshold,
        })
    }

    /// The witnesses, in the order given.
    pub fn witnesses(&self) -> &[WitnessVerifierKey] {
        &self.witnesses
    }

    /// Valid cosignatures required.
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Checks `note`'s cosignatures: at least the threshold of the named
    /// witnesses must have a cosignature that verifies over its body. Does
    /// not check the log's own signature (the caller does, first).
    pub fn check(&self, note: &str) -> Result<QuorumReport, NoteError> {
        let mut verdicts = Vec::with_capacity(self.witnesses.len());
        for witness in &self.witnesses {
            let (cosigned_at, failure) = match witness.verify(note) {
                Ok(timestamp) => (Some(timestamp), None),
                Err(NoteError::NoSignatureByKey { .. }) => (
                    None,
                    Some("no cosignature by this key in the note".to_owned()),
                ),
                Err(NoteError::BadSignature { .. }) => (
                    None,
                    Some("its cosignature does not verify: altered, or forged".to_owned()),
                ),
                Err(error) => return Err(error),
            };
            verdicts.push(WitnessVerdict {
                name: witness.name.clone(),
                key_id: witness.key_id_hex(),
                cosigned_at,
                failure,
            });
        }
        let valid = verdicts
            .iter()
            .filter(|verdict| verdict.cosigned_at.is_some())
            .count();
        if valid < self.threshold {
            let reasons: Vec<String> = verdicts
                .iter()
                .filter_map(|verdict| {
                    verdict
                        .failure
                        .as_ref()
                        .map(|failure| format!("{} ({}): {failure}", verdict.name, verdict.key_id))
                })
                .collect();
            return Err(NoteError::TooFewCosignatures {
                valid,
                required: self.threshold,
                named: self.witnesses.len(),
                reasons: reasons.join("; "),
            });
        }
        Ok(QuorumReport {
            required: self.threshold,
            valid,
            witnesses: verdicts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::MerkleHash;
    use crate::note::{Checkpoint, SignerKey};

    fn log_key() -> SignerKey {
        SignerKey::from_seed("sandlog.test/log", [7; 32]).unwrap()
    }

    fn witness(seed: u8) -> WitnessKey {
        WitnessKey::from_seed(&format!("witness.test/w{seed}"), [seed; 32]).unwrap()
    }

    fn note() -> String {
        Checkpoint {
            origin: "sandlog.test/log".into(),
            size: 5,
            root: MerkleHash([0x11; 32]),
            extensions: vec![],
        }
        .sign(&log_key())
        .unwrap()
    }

    fn cosigned(note: &str, witnesses: &[WitnessKey], timestamp: u64) -> String {
        let body = log_key().verifier().verify(note).unwrap().to_owned();
        let mut out = note.to_owned();
        for witness in witnesses {
            out.push_str(&witness.cosign(&body, timestamp).unwrap());
        }
        out
    }

    #[test]
    fn a_cosignature_has_the_c2sp_shape_and_verifies() {
        let note = note();
        let line = witness(1)
            .cosign(log_key().verifier().verify(&note).unwrap(), 1_679_315_147)
            .unwrap();
        let (name, blob) = line
            .trim_end()
            .strip_prefix("\u{2014} ")
            .unwrap()
            .split_once(' ')
            .unwrap();
        assert_eq!(name, "witness.test/w1");
        let blob = BASE64.decode(blob).unwrap();
        assert_eq!(blob.len(), COSIGNATURE_BYTES);
        assert_eq!(&blob[..4], &witness(1).verifier().key_id);
        assert_eq!(&blob[4..12], &1_679_315_147u64.to_be_bytes());
        // The signature is over the header, the time line and the body.
        let message = cosigned_message(log_key().verifier().verify(&note).unwrap(), 1_679_315_147);
        assert!(
            message.starts_with(b"cosignature/v1\ntime 1679315147\nsandlog.test/log\n5\n"),
            "{}",
            String::from_utf8_lossy(&message)
        );
        let together = format!("{note}{line}");
        assert_eq!(witness(1).verifier().verify(&together), Ok(1_679_315_147));
        // The log's signature still verifies beside it.
        assert!(Checkpoint::verify(&together, &log_key().verifier()).is_ok());
    }

    #[test]
    fn keys_round_trip_and_use_signature_type_4() {
        let key = witness(3);
        let again = WitnessKey::parse(&key.to_private_string()).unwrap();
        assert_eq!(again.verifier(), key.verifier());
        let text = key.verifier().to_string();
        let raw = BASE64.decode(text.rsplit('+').next().unwrap()).unwrap();
        assert_eq!(raw[0], 0x04);
        assert_eq!(WitnessVerifierKey::parse(&text).unwrap(), key.verifier());
        // A log key is not a witness key and the other way round, with a
        // message naming which is which.
        let log_vkey = log_key().verifier().to_string();
        let error = WitnessVerifierKey::parse(&log_vkey)
            .unwrap_err()
            .to_string();
        assert!(error.contains("log's key"), "{error}");
        let error = crate::note::VerifierKey::parse(&text)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--witness-vkey"), "{error}");
        assert!(format!("{key:?}").find("signing").is_none());
    }

    #[test]
    fn a_quorum_counts_only_valid_cosignatures_of_named_witnesses() {
        let note = cosigned(&note(), &[witness(1), witness(2)], 100);
        let policy = |seeds: &[u8], k| {
            WitnessPolicy::new(seeds.iter().map(|s| witness(*s).verifier()).collect(), k).unwrap()
        };
        let report = policy(&[1, 2], Some(2)).check(&note).unwrap();
        assert_eq!(report.valid, 2);
        assert_eq!(report.witnesses[0].cosigned_at, Some(100));
        let error = policy(&[1, 2, 3], Some(3)).check(&note).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("2 valid cosignatures"), "{text}");
        assert!(text.contains("witness.test/w3"), "{text}");
        assert!(text.contains("no cosignature by this key"), "{text}");
        // A witness with another key under a known name does not count.
        let impostor = WitnessKey::from_seed("witness.test/w1", [9; 32]).unwrap();
        let forged = cosigned(&self::note(), &[impostor], 100);
        assert!(policy(&[1], None).check(&forged).is_err());
        // An altered cosignature is named as such.
        let mut altered = note.clone();
        let at = altered.rfind('\u{2014}').unwrap() + 30;
        let replacement = if &altered[at..=at] == "A" { "B" } else { "A" };
        altered.replace_range(at..=at, replacement);
        let text = policy(&[1, 2], Some(2))
            .check(&altered)
            .unwrap_err()
            .to_string();
        assert!(text.contains("does not verify"), "{text}");
        // A cosignature over another body does not count.
        let other = Checkpoint {
            origin: "sandlog.test/log".into(),
            size: 6,
            root: MerkleHash([0x22; 32]),
            extensions: vec![],
        }
        .sign(&log_key())
        .unwrap();
        let moved = format!(
            "{other}{}",
            note.lines()
                .filter(|l| l.starts_with("\u{2014} witness"))
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
        assert!(policy(&[1], None).check(&moved).is_err());
    }

    #[test]
    fn policies_refuse_impossible_thresholds_and_duplicates() {
        let one = vec![witness(1).verifier()];
        assert!(WitnessPolicy::new(vec![], None).is_err());
        assert!(WitnessPolicy::new(one.clone(), Some(0)).is_err());
        assert!(WitnessPolicy::new(one.clone(), Some(2)).is_err());
        assert!(WitnessPolicy::new(vec![witness(1).verifier(); 2], None).is_err());
        assert_eq!(WitnessPolicy::new(one, None).unwrap().threshold(), 1);
    }

    #[test]
    fn a_response_keeps_only_this_witness_s_valid_lines() {
        let note = note();
        let body = log_key().verifier().verify(&note).unwrap().to_owned();
        let response = format!(
            "{}{}garbage\n\u{2014} witness.test/w1 !!!\n",
            witness(1).cosign(&body, 5).unwrap(),
            witness(2).cosign(&body, 5).unwrap()
        );
        let kept = witness(1)
            .verifier()
            .cosignatures_in(&note, &response)
            .unwrap();
        assert_eq!(kept.len(), 1);
        assert!(kept[0].starts_with("\u{2014} witness.test/w1 "));
    }
}
