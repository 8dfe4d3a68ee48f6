//! Signed checkpoints: the C2SP `tlog-checkpoint` body wrapped in a C2SP
//! `signed-note` with an Ed25519 key. Pure: keys come in as bytes (the
//! caller draws the randomness), notes go out as text.
//!
//! # Formats
//!
//! A checkpoint body is three lines, each ending in `\n`: the log's
//! *origin* (a name unique to this log, e.g. `sandlog.example/prod`), the
//! tree size in decimal, and the root hash in standard base64; optional
//! extension lines follow.
//!
//! A signed note is the body, one empty line, and one line per signature:
//! `— <key name> <base64(key id ‖ signature)>` (U+2014, an em dash). The
//! signature is Ed25519 over the body's bytes; the key id is the first four
//! bytes of `SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ public key)`, where `0x01`
//! names the Ed25519 algorithm. A verifier key is written
//! `<name>+<key id, 8 hex digits>+<base64(0x01 ‖ public key)>`, and a
//! signer key `PRIVATE+KEY+<name>+<key id>+<base64(0x01 ‖ seed)>`, as Go's
//! `golang.org/x/mod/sumdb/note` and the transparency-log tools write them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::merkle::MerkleHash;

/// The algorithm byte of Ed25519 keys in key ids and key encodings.
pub(crate) const ALGORITHM_ED25519: u8 = 0x01;

/// The signed-note signature type of Ed25519 cosignature/v1 keys (the
/// witnesses' keys, `crate::cosignature`). Defined here with the other
/// signature types, so the note parser needs nothing from above it.
pub const ALGORITHM_COSIGNATURE_V1: u8 = 0x04;

/// The prefix of an encoded signer key.
pub(crate) const SIGNER_KEY_PREFIX: &str = "PRIVATE+KEY+";

/// Longest note this module parses, bytes: a checkpoint is a few hundred
/// bytes; the bound keeps a hostile file from costing more than a read.
pub const NOTE_BYTES_MAX: usize = 64 * 1024;

/// Most signature lines parsed on one note (witness cosignatures included).
pub const NOTE_SIGNATURES_MAX: usize = 100;

/// Why a key, a checkpoint or a note was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoteError {
    /// A key name must be non-empty, printable, without spaces or `+`.
    #[error("key name {0:?} is not allowed: use printable characters without spaces or '+'")]
    BadName(String),
    /// A key string is not in the `name+keyid+base64` form.
    #[error("the key is not a valid {kind} key: {reason}")]
    BadKey {
        /// `signer` or `verifier`.
        kind: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The text is not a well-formed note or checkpoint.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// `note` or `checkpoint`.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// No signature line is by the verifier's key.
    #[error("the note has no signature by key {name} ({key_id})")]
    NoSignatureByKey {
        /// The verifier key's name.
        name: String,
        /// Its key id, hex.
        key_id: String,
    },
    /// A signature by the verifier's key does not verify: the note was
    /// changed after signing, or signed by another key with the same id.
    #[error("the signature by key {name} does not verify: the note was altered or forged")]
    BadSignature {
        /// The verifier key's name.
        name: String,
    },
    /// Fewer witnesses than required cosigned the checkpoint (see
    /// [`crate::cosignature::WitnessPolicy`]).
    #[error(
        "the checkpoint has {valid} valid cosignatures of the {required} required from the {named} named witnesses: {reasons}"
    )]
    TooFewCosignatures {
        /// Named witnesses whose cosignature verified.
        valid: usize,
        /// How many must.
        required: usize,
        /// Witnesses named.
        named: usize,
        /// Why each of the others does not count.
        reasons: String,
    },
}

pub(crate) fn check_name(name: &str) -> Result<(), NoteError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '+');
    if ok {
        Ok(())
    } else {
        Err(NoteError::BadName(name.to_owned()))
    }
}

fn key_id(name: &str, public_key: &[u8; 32]) -> [u8; 4] {
    key_id_of(name, ALGORITHM_ED25519, public_key)
}

/// `SHA-256(name ‖ 0x0A ‖ algorithm ‖ public key)[:4]`, the signed-note
/// key id of a key of signature type `algorithm`.
pub(crate) fn key_id_of(name: &str, algorithm: u8, public_key: &[u8; 32]) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([0x0A, algorithm]);
    hasher.update(public_key);
    let digest: [u8; 32] = hasher.finalize().into();
    [digest[0], digest[1], digest[2], digest[3]]
}

pub(crate) fn hex4(id: &[u8; 4]) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Splits `name+keyid+base64` and checks the key id and algorithm byte;
/// returns the name and the 32 key bytes.
fn parse_key_parts(
    text: &str,
    kind: &'static str,
) -> Result<(String, [u8; 4], [u8; 32]), NoteError> {
    parse_key_parts_of(text, kind, ALGORITHM_ED25519)
}

/// [`parse_key_parts`] for keys of signature type `expected` (0x01 for a
/// log's keys, 0x04 for a witness's cosignature keys).
pub(crate) fn parse_key_parts_of(
    text: &str,
    kind: &'static str,
    expected: u8,
) -> Result<(String, [u8; 4], [u8; 32]), NoteError> {
    let bad = |reason: &str| NoteError::BadKey {
        kind,
        reason: reason.to_owned(),
    };
    let mut parts = text.trim().splitn(3, '+');
    let (Some(name), Some(id_hex), Some(key_b64)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("expected name+keyid+base64"));
    };
    check_name(name)?;
    if id_hex.len() != 8 {
        return Err(bad("the key id must be 8 hex digits"));
    }
    let id_value =
        u32::from_str_radix(id_hex, 16).map_err(|_| bad("the key id must be 8 hex digits"))?;
    let key_bytes = BASE64
        .decode(key_b64)
        .map_err(|_| bad("the key is not valid base64"))?;
    let Some((&algorithm, key)) = key_bytes.split_first() else {
        return Err(bad("the key is empty"));
    };
    if algorithm != expected {
        return Err(bad(&algorithm_mismatch(kind, algorithm, expected)));
    }
    let key: [u8; 32] = key
        .try_into()
        .map_err(|_| bad("an Ed25519 key is 32 bytes"))?;
    Ok((name.to_owned(), id_value.to_be_bytes(), key))
}

/// Why a `kind` key of signature type `found` is not of the `expected`
/// type, in words naming where such a key goes.
fn algorithm_mismatch(kind: &str, found: u8, expected: u8) -> String {
    match (kind, found, expected) {
        ("verifier", ALGORITHM_COSIGNATURE_V1, ALGORITHM_ED25519) => {
            "this is a witness's cosignature key (algorithm 4), not a log's key: give it with \
             --witness-vkey (or --witness URL=VKEY)"
                .into()
        }
        ("signer", ALGORITHM_COSIGNATURE_V1, ALGORITHM_ED25519) => {
            "this is a witness's signing key (algorithm 4), not a log's: it is for \
             `sandlog witness serve --key`"
                .into()
        }
        (_, ALGORITHM_ED25519, ALGORITHM_COSIGNATURE_V1) => {
            "this is a log's key (algorithm 1), not a witness's cosignature key (algorithm 4): \
             make a witness key with `sandlog keygen --witness`"
                .into()
        }
        _ => format!("only algorithm {expected} keys are supported here, not algorithm {found}"),
    }
}

/// An Ed25519 signing key with its name.
#[derive(Clone)]
pub struct SignerKey {
    name: String,
    signing: SigningKey,
}

impl std::fmt::Debug for SignerKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        formatter
            .debug_struct("SignerKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SignerKey {
    /// A key from a 32-byte random seed (the caller draws it from the OS).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<SignerKey, NoteError> {
        check_name(name)?;
        Ok(SignerKey {
            name: name.to_owned(),
            signing: SigningKey::from_bytes(&seed),
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<keyid>+<base64(0x01 ‖ seed)>`.
    pub fn parse(text: &str) -> Result<SignerKey, NoteError> {
        let rest = text
            .trim()
            .strip_prefix(SIGNER_KEY_PREFIX)
            .ok_or(NoteError::BadKey {
                kind: "signer",
                reason: format!("a signer key starts with {SIGNER_KEY_PREFIX}"),
            })?;
        let (name, id, seed) = parse_key_parts(rest, "signer")?;
        let key = SignerKey::from_seed(&name, seed)?;
        if key.verifier().key_id != id {
            return Err(NoteError::BadKey {
                kind: "signer",
                reason: "the key id does not match the key".into(),
            });
        }
        Ok(key)
    }

    /// The encoded signer key (secret: store it with mode 0600).
    pub fn to_private_string(&self) -> String {
        let mut bytes = vec![ALGORITHM_ED25519];
        bytes.extend_from_slice(&self.signing.to_bytes());
        format!(
            "{SIGNER_KEY_PREFIX}{}+{}+{}",
            self.name,
            hex4(&self.verifier().key_id),
            BASE64.encode(bytes)
        )
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> VerifierKey {
        let public = self.signing.verifying_key();
        VerifierKey {
            key_id: key_id(&self.name, public.as_bytes()),
            name: self.name.clone(),
            verifying: public,
        }
    }

    /// Signs `body` (which must end with a newline) into a signed note.
    pub fn sign(&self, body: &str) -> Result<String, NoteError> {
        check_body(body)?;
        let signature = self.signing.sign(body.as_bytes());
        let mut blob = self.verifier().key_id.to_vec();
        blob.extend_from_slice(&signature.to_bytes());
        Ok(format!(
            "{body}\n\u{2014} {} {}\n",
            self.name,
            BASE64.encode(blob)
        ))
    }
}

/// An Ed25519 verifier key with its name: all an auditor needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    key_id: [u8; 4],
    verifying: VerifyingKey,
}

impl VerifierKey {
    /// Parses `<name>+<keyid>+<base64(0x01 ‖ public key)>`.
    pub fn parse(text: &str) -> Result<VerifierKey, NoteError> {
        let (name, id, public) = parse_key_parts(text, "verifier")?;
        let verifying = VerifyingKey::from_bytes(&public).map_err(|_| NoteError::BadKey {
            kind: "verifier",
            reason: "not a valid Ed25519 public key".into(),
        })?;
        if key_id(&name, &public) != id {
            return Err(NoteError::BadKey {
                kind: "verifier",
                reason: "the key id does not match the key".into(),
            });
        }
        Ok(VerifierKey {
            name,
            key_id: id,
            verifying,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks a signed note and returns its body. Signatures by other keys
    /// (witnesses, say) are allowed and ignored.
    pub fn verify<'a>(&self, note: &'a str) -> Result<&'a str, NoteError> {
        let (body, signatures) = split_note(note)?;
        let mut found = false;
        for (name, blob) in signatures {
            let Some((id, signature)) = blob.split_first_chunk::<4>() else {
                continue;
            };
            if name != self.name || *id != self.key_id {
                continue;
            }
            found = true;
            let signature =
                Signature::from_slice(signature).map_err(|_| NoteError::BadSignature {
                    name: self.name.clone(),
                })?;
            if self
                .verifying
                .verify_strict(body.as_bytes(), &signature)
                .is_ok()
            {
                return Ok(body);
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
}

impl std::fmt::Display for VerifierKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut bytes = vec![ALGORITHM_ED25519];
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

pub(crate) fn malformed(what: &'static str, reason: impl Into<String>) -> NoteError {
    NoteError::Malformed {
        what,
        reason: reason.into(),
    }
}

pub(crate) fn check_body(body: &str) -> Result<(), NoteError> {
    if body.len() > NOTE_BYTES_MAX {
        return Err(malformed(
            "note",
            format!("longer than {NOTE_BYTES_MAX} bytes"),
        ));
    }
    if !body.ends_with('\n') {
        return Err(malformed("note", "the text must end with a newline"));
    }
    if body.contains("\n\n") {
        return Err(malformed("note", "the text must not contain an empty line"));
    }
    if body.chars().any(|c| c.is_control() && c != '\n') {
        return Err(malformed("note", "the text holds control characters"));
    }
    Ok(())
}

/// One signature line: the key name and the decoded `key id ‖ signature`.
pub(crate) type SignatureLine<'a> = (&'a str, Vec<u8>);

/// Splits a note into its body and its signatures.
pub(crate) fn split_note(note: &str) -> Result<(&str, Vec<SignatureLine<'_>>), NoteError> {
    if note.len() > NOTE_BYTES_MAX {
        return Err(malformed(
            "note",
            format!("longer than {NOTE_BYTES_MAX} bytes"),
        ));
    }
    let Some(split) = note.rfind("\n\n") else {
        return Err(malformed("note", "no empty line before the signatures"));
    };
    let (body, signature_text) = note.split_at(split + 1);
    check_body(body)?;
    let signature_text = signature_text.strip_prefix('\n').unwrap_or(signature_text);
    if !signature_text.ends_with('\n') {
        return Err(malformed(
            "note",
            "the signature lines must end with a newline",
        ));
    }
    let mut signatures = Vec::new();
    for line in signature_text.lines() {
        if signatures.len() == NOTE_SIGNATURES_MAX {
            return Err(malformed(
                "note",
                format!("more than {NOTE_SIGNATURES_MAX} signatures"),
            ));
        }
        let Some(rest) = line.strip_prefix("\u{2014} ") else {
            return Err(malformed(
                "note",
                "a signature line must start with an em dash and a space",
            ));
        };
        let Some((name, blob)) = rest.split_once(' ') else {
            return Err(malformed("note", "a signature line is `— name base64`"));
        };
        check_name(name)?;
        let blob = BASE64
            .decode(blob)
            .map_err(|_| malformed("note", "a signature is not valid base64"))?;
        signatures.push((name, blob));
    }
    if signatures.is_empty() {
        return Err(malformed("note", "no signature lines"));
    }
    Ok((body, signatures))
}

/// A C2SP `tlog-checkpoint`: the log's identity, size and root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin line.
    pub origin: String,
    /// Leaves (events) in the tree.
    pub size: u64,
    /// The tree's root hash.
    pub root: MerkleHash,
    /// Extension lines, in order (without their newlines).
    pub extensions: Vec<String>,
}

impl Checkpoint {
    /// The body text: origin, size, base64 root, extensions, each ending
    /// in a newline.
    pub fn to_body(&self) -> Result<String, NoteError> {
        check_name(&self.origin).map_err(|_| {
            malformed(
                "checkpoint",
                "the origin must be a non-empty line without spaces or '+'",
            )
        })?;
        let mut body = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            BASE64.encode(self.root.0)
        );
        for line in &self.extensions {
            if line.is_empty() || line.contains('\n') {
                return Err(malformed(
                    "checkpoint",
                    "an extension line must be non-empty and one line",
                ));
            }
            body.push_str(line);
            body.push('\n');
        }
        check_body(&body)?;
        Ok(body)
    }

    /// Parses a body (as returned by [`VerifierKey::verify`]).
    pub fn parse_body(body: &str) -> Result<Checkpoint, NoteError> {
        check_body(body)?;
        let mut lines = body.lines();
        let (Some(origin), Some(size), Some(root)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(malformed(
                "checkpoint",
                "expected origin, size and root lines",
            ));
        };
        let size_ok = !size.is_empty()
            && size.bytes().all(|b| b.is_ascii_digit())
            && (size == "0" || !size.starts_with('0'));
        let size: u64 = size.parse().ok().filter(|_| size_ok).ok_or_else(|| {
            malformed(
                "checkpoint",
                format!("the size {size:?} is not a decimal number"),
            )
        })?;
        let root_bytes = BASE64
            .decode(root)
            .map_err(|_| malformed("checkpoint", "the root hash is not valid base64"))?;
        let root: [u8; 32] = root_bytes
            .try_into()
            .map_err(|_| malformed("checkpoint", "the root hash is not 32 bytes"))?;
        Ok(Checkpoint {
            origin: origin.to_owned(),
            size,
            root: MerkleHash(root),
            extensions: lines.map(str::to_owned).collect(),
        })
    }

    /// Signs the checkpoint into a signed note.
    pub fn sign(&self, key: &SignerKey) -> Result<String, NoteError> {
        key.sign(&self.to_body()?)
    }

    /// Verifies a signed checkpoint note with `key` and parses it; the
    /// origin must be the key's name, so one log's key cannot vouch for
    /// another log's checkpoints.
    pub fn verify(note: &str, key: &VerifierKey) -> Result<Checkpoint, NoteError> {
        let checkpoint = Checkpoint::parse_body(key.verify(note)?)?;
        if checkpoint.origin != key.name() {
            return Err(malformed(
                "checkpoint",
                format!(
                    "the origin {:?} is not the key's name {:?}",
                    checkpoint.origin,
                    key.name()
                ),
            ));
        }
        Ok(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::empty_root;

    fn key() -> SignerKey {
        SignerKey::from_seed("sandlog.test/log", [7; 32]).unwrap()
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            origin: "sandlog.test/log".into(),
            size: 8,
            root: MerkleHash([0xAB; 32]),
            extensions: vec![],
        }
    }

    #[test]
    fn a_signed_checkpoint_round_trips_and_has_the_c2sp_shape() {
        let note = checkpoint().sign(&key()).unwrap();
        let mut lines = note.lines();
        assert_eq!(lines.next(), Some("sandlog.test/log"));
        assert_eq!(lines.next(), Some("8"));
        assert_eq!(lines.next(), Some(BASE64.encode([0xAB; 32]).as_str()));
        assert_eq!(lines.next(), Some(""));
        let signature = lines.next().unwrap();
        assert!(
            signature.starts_with("\u{2014} sandlog.test/log "),
            "{signature}"
        );
        assert_eq!(lines.next(), None);
        let blob = BASE64
            .decode(signature.rsplit(' ').next().unwrap())
            .unwrap();
        assert_eq!(blob.len(), 4 + 64);
        assert_eq!(
            Checkpoint::verify(&note, &key().verifier()).unwrap(),
            checkpoint()
        );
    }

    #[test]
    fn keys_round_trip_through_their_text_forms() {
        let signer = key();
        let again = SignerKey::parse(&signer.to_private_string()).unwrap();
        assert_eq!(again.verifier(), signer.verifier());
        let text = signer.verifier().to_string();
        assert!(text.starts_with("sandlog.test/log+"), "{text}");
        assert_eq!(VerifierKey::parse(&text).unwrap(), signer.verifier());
        assert!(format!("{signer:?}").find("signing").is_none());
    }

    #[test]
    fn any_altered_byte_or_other_key_fails_verification() {
        let note = checkpoint().sign(&key()).unwrap();
        let verifier = key().verifier();
        for index in 0..note.len() {
            let mut bytes = note.clone().into_bytes();
            bytes[index] ^= 0x01;
            let Ok(altered) = String::from_utf8(bytes) else {
                continue;
            };
            assert!(
                Checkpoint::verify(&altered, &verifier).is_err(),
                "byte {index} altered and still verified"
            );
        }
        let other = SignerKey::from_seed("sandlog.test/log", [8; 32])
            .unwrap()
            .verifier();
        assert!(matches!(
            Checkpoint::verify(&note, &other),
            Err(NoteError::NoSignatureByKey { .. })
        ));
        let renamed = SignerKey::from_seed("other.log", [7; 32]).unwrap();
        let foreign = checkpoint().sign(&renamed);
        assert!(
            foreign.is_err() || Checkpoint::verify(&foreign.unwrap(), &renamed.verifier()).is_err()
        );
    }

    #[test]
    fn malformed_keys_and_notes_are_refused_with_reasons() {
        assert!(matches!(
            SignerKey::from_seed("has space", [1; 32]),
            Err(NoteError::BadName(_))
        ));
        assert!(matches!(
            VerifierKey::parse("name+zz+AAAA"),
            Err(NoteError::BadKey { .. })
        ));
        let mut text = key().verifier().to_string();
        text.replace_range(
            text.find('+').unwrap() + 1..text.find('+').unwrap() + 3,
            "00",
        );
        assert!(VerifierKey::parse(&text).is_err());
        for bad in [
            "",
            "x\n",
            "a\n\n",
            "a\n1\nAA==\n\nno dash\n",
            "a\n01\nAA==\n",
        ] {
            assert!(key().verifier().verify(bad).is_err(), "{bad:?}");
        }
        assert!(Checkpoint::parse_body("o\n01\nAA==\n").is_err());
        assert!(Checkpoint::parse_body("o\n-1\nAA==\n").is_err());
        let empty = Checkpoint {
            origin: "o".into(),
            size: 0,
            root: empty_root(),
            extensions: vec![],
        };
        assert_eq!(
            Checkpoint::parse_body(&empty.to_body().unwrap()).unwrap(),
            empty
        );
    }

    #[test]
    fn witness_signatures_beside_ours_are_ignored() {
        let note = checkpoint().sign(&key()).unwrap();
        let witness = SignerKey::from_seed("witness.example", [9; 32]).unwrap();
        let body = key().verifier().verify(&note).unwrap();
        let witness_line = witness.sign(body).unwrap();
        let cosigned = format!("{note}{}", witness_line.rsplit_once("\n\n").unwrap().1);
        assert_eq!(
            Checkpoint::verify(&cosigned, &key().verifier()).unwrap(),
            checkpoint()
        );
        assert!(witness.verifier().verify(&cosigned).is_ok());
    }
}
