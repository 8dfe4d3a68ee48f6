//! Witnesses, from the log's side: the `add-checkpoint` request a witness
//! needs to cosign a checkpoint (with the consistency proof from the size
//! it last cosigned), keeping a checkpoint with its cosignatures, and the
//! K-of-N check a verifier applies. The HTTP exchange is the caller's (the
//! CLI); the formats are `sandlog_core::{cosignature, witness}`'s.

use sandlog_core::cosignature::{QuorumReport, WitnessPolicy, WitnessVerifierKey};
use sandlog_core::note::{Checkpoint, VerifierKey};
use sandlog_core::witness::AddCheckpoint;

use crate::engine::Engine;
use crate::proofs::checkpoint::SignedCheckpoint;
use sandlog_host::error::{Result, RuntimeError};
pub use sandlog_host::keys::{
    generate_witness_key_file, read_witness_key, read_witness_verifier_key,
};

/// Checks a checkpoint note for a verifier: the log's signature (and that
/// its origin is the key's name), then that at least the policy's
/// threshold of its witnesses cosigned it. Fails with an integrity error
/// naming how many cosignatures were valid and why each other witness does
/// not count.
pub fn check_witnesses(
    note: &str,
    key: &VerifierKey,
    policy: &WitnessPolicy,
) -> Result<QuorumReport> {
    Checkpoint::verify(note, key).map_err(RuntimeError::Note)?;
    policy.check(note).map_err(RuntimeError::Note)
}

/// The size of `note` if `witness` cosigned it (its cosignature verifies),
/// else 0: where the consistency proof sent to that witness starts. A
/// witness that has since cosigned a larger size answers 409 with it.
pub fn witnessed_size(note: Option<&str>, witness: &WitnessVerifierKey) -> u64 {
    note.filter(|note| witness.verify(note).is_ok())
        .and_then(|note| note.lines().nth(1))
        .and_then(sandlog_core::witness::parse_size)
        .unwrap_or(0)
}

impl Engine {
    /// The `add-checkpoint` request for `signed` to a witness that last
    /// cosigned size `old`: the note and the consistency proof from `old`
    /// to its size. Refused if `old` is past the checkpoint.
    pub fn witness_request(&self, signed: &SignedCheckpoint, old: u64) -> Result<AddCheckpoint> {
        let proof = if old == 0 {
            Vec::new()
        } else {
            self.store.consistency_proof(old, signed.size)?
        };
        Ok(AddCheckpoint {
            old,
            proof,
            note: signed.note.clone(),
        })
    }

    /// Keeps `signed` with `cosignatures` (signature lines, each ending in
    /// a newline) appended: the newest stored checkpoint becomes the
    /// cosigned note. The log's signature is checked again with `key`, so
    /// only a note of this log is stored.
    pub fn store_cosigned_checkpoint(
        &self,
        signed: &SignedCheckpoint,
        cosignatures: &[String],
        key: &VerifierKey,
    ) -> Result<SignedCheckpoint> {
        let mut note = signed.note.clone();
        for line in cosignatures {
            note.push_str(line);
        }
        let checkpoint = Checkpoint::verify(&note, key).map_err(RuntimeError::Note)?;
        self.store
            .store_checkpoint(checkpoint.size, &checkpoint.root, &note)?;
        tracing::info!(
            target: "sandlog::lifecycle",
            event = "checkpoint.cosigned",
            size = checkpoint.size,
            cosignatures = cosignatures.len(),
            "checkpoint cosigned"
        );
        Ok(SignedCheckpoint {
            size: signed.size,
            root: signed.root.clone(),
            note,
        })
    }
}
