//! What users ask about sessions, as the read models answer it: sessions,
//! metadata in the seed's shape, files (glob, tree), prune plans,
//! statistics. The types are here; each backend's queries over its read
//! models return them (`sandlog_sqlite::query`).

use std::collections::BTreeMap;

use sandlog_core::event::{Outcome, ReadonlyDir};
use sandlog_core::{Hash, SessionId, StreamVersion, Timestamp, WorkspacePath};
use serde::Serialize;

use crate::prune::{PruneCandidate, SkippedSession};
use crate::state::{CleanupStats, SessionState, SessionStatus};

/// A session without its file list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// Id.
    pub session_id: SessionId,
    /// Status.
    pub status: SessionStatus,
    /// Created (none for legacy).
    pub created_at: Option<Timestamp>,
    /// Last activity (none for legacy).
    pub updated_at: Option<Timestamp>,
    /// Executions run.
    pub exec_count: u64,
    /// The last execution's outcome.
    pub last_outcome: Option<Outcome>,
    /// Sum of file sizes.
    pub bytes: u64,
    /// Number of files.
    pub file_count: u64,
    /// Adopted without valid metadata.
    pub legacy: bool,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Stream version.
    #[serde(skip)]
    pub version: StreamVersion,
    /// The reason of a legal hold in force (never pruned, deleted or
    /// erased while held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// The task group given at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The size limit given at creation, bytes (else the root's default
    /// applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u64>,
    /// Host directories its executions see read-only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub readonly: Vec<ReadonlyDir>,
    /// The node whose disk holds its workspace (none: every node's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl From<&SessionState> for SessionSummary {
    fn from(session: &SessionState) -> Self {
        SessionSummary {
            session_id: session.session_id,
            status: session.status,
            created_at: session.created_at,
            updated_at: session.updated_at,
            exec_count: session.exec_count,
            last_outcome: session.last_outcome,
            bytes: session.bytes,
            file_count: session.file_count,
            legacy: session.legacy,
            labels: session.labels.clone(),
            version: session.version,
            held: session.held.clone(),
            group: session.group.clone(),
            max_size: session.max_size,
            readonly: session.readonly.clone(),
            node: session.node.clone(),
        }
    }
}

/// The seed systems' `.metadata.json` shape (M1), for tooling that reads
/// it: `{session_id, created_at, updated_at, version: 1}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeedMetadata {
    /// Id.
    pub session_id: SessionId,
    /// Created (null for legacy).
    pub created_at: Option<Timestamp>,
    /// Last activity (null for legacy).
    pub updated_at: Option<Timestamp>,
    /// Always 1.
    pub version: u32,
}

/// The seed metadata schema version.
pub const SEED_METADATA_VERSION: u32 = 1;

impl SessionSummary {
    /// The seed-format metadata.
    pub fn seed_metadata(&self) -> SeedMetadata {
        SeedMetadata {
            session_id: self.session_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
            version: SEED_METADATA_VERSION,
        }
    }
}

/// One file, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileView {
    /// Path.
    pub path: WorkspacePath,
    /// Size, bytes.
    pub size: u64,
    /// blake3.
    pub blake3: Hash,
    /// Last written.
    pub updated_at: Timestamp,
}

/// A nested view of files: directories map names to nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TreeNode {
    /// A file.
    File {
        /// Size, bytes.
        size: u64,
        /// blake3.
        blake3: Hash,
    },
    /// A directory.
    Dir(BTreeMap<String, TreeNode>),
}

/// Builds the nested tree of `files`.
pub fn file_tree(files: &[FileView]) -> BTreeMap<String, TreeNode> {
    let mut root = BTreeMap::new();
    for file in files {
        let components: Vec<&str> = file.path.components().collect();
        insert_into_tree(&mut root, &components, file);
    }
    root
}

fn insert_into_tree(level: &mut BTreeMap<String, TreeNode>, components: &[&str], file: &FileView) {
    match components {
        [] => {}
        [name] => {
            level.entry((*name).to_owned()).or_insert(TreeNode::File {
                size: file.size,
                blake3: file.blake3,
            });
        }
        [parent, rest @ ..] => {
            let node = level
                .entry((*parent).to_owned())
                .or_insert_with(|| TreeNode::Dir(BTreeMap::new()));
            // A file and a directory of the same name cannot both exist on
            // disk; if the log says so, the directory wins the view.
            if let TreeNode::File { .. } = node {
                *node = TreeNode::Dir(BTreeMap::new());
            }
            if let TreeNode::Dir(children) = node {
                insert_into_tree(children, rest, file);
            }
        }
    }
}

/// What a prune run would do: candidates oldest first, and the sessions it
/// skips on purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrunePlan {
    /// Would be deleted, oldest first.
    pub candidates: Vec<PruneCandidate>,
    /// Left alone, with reasons (legacy sessions).
    pub skipped: Vec<SkippedSession>,
}

/// Counts and sizes for `sandlog stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Sessions by status.
    pub sessions: BTreeMap<String, u64>,
    /// Legacy sessions (active).
    pub legacy_sessions: u64,
    /// Bytes in sessions that have a workspace.
    pub workspace_bytes: u64,
    /// Files in sessions that have a workspace.
    pub files: u64,
    /// Executions run, all sessions.
    pub executions: u64,
    /// Cleanup statistics (C3).
    pub cleanup: CleanupStats,
}
