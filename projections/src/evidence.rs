//! Which events name which blobs: what `gc` keeps, what `erase` removes
//! and what a legal hold protects. The queries, over the read model's
//! `rm_blob_refs`, are in [`crate::sqlite::evidence`] and re-exported.

use sandlog_core::{Hash, Position, SessionId, WorkspacePath};

pub use crate::sqlite::evidence::{
    expired_blobs, held_sessions_naming, is_referenced, referenced_blobs, refs_to, session_refs,
};

/// One event's reference to a blob whose bytes it says were stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// The blob.
    pub hash: Hash,
    /// The session whose event names it.
    pub session_id: SessionId,
    /// The event.
    pub position: Position,
    /// `code`, `stdout`, `stderr` or `file`.
    pub role: String,
    /// The file's path, for `file`.
    pub path: Option<WorkspacePath>,
}
