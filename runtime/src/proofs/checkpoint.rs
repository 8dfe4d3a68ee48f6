//! A signed checkpoint as stored and handed out: what signing makes and
//! what a witness cosigns, below both.

use serde::Serialize;

/// A checkpoint signed now, as stored and handed out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignedCheckpoint {
    /// Events covered.
    pub size: u64,
    /// The tree's root, base64 (as in the note).
    pub root: String,
    /// The signed note: publish it, or hand it to a witness.
    pub note: String,
}
