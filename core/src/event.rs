//! Every event kind, as a typed payload with its dotted kind name and
//! schema version, and the decoding (with an upcasting hook) of stored ones.
//!
//! Kinds are past tense. A payload holds the minimum a projection needs plus
//! what forensics needs; contents (file bytes, code) are blobs referenced by
//! blake3, never inlined.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::CoreError;
use crate::hash::Hash;
use crate::ids::SessionId;
use crate::path::WorkspacePath;
use crate::policy::PrunePolicy;
use crate::time::Timestamp;

/// Who changed a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WrittenBy {
    /// The host API (`files put`, `files rm`): user activity, which moves
    /// the session's `updated_at` (M2).
    Host,
    /// Guest code, found by comparing the workspace after an execution.
    Guest,
    /// The inventory of a workspace taken when it was adopted. Not
    /// activity: the adopted metadata's timestamps stand (M4), so an old
    /// adopted session stays prunable by age (P1). Without this variant the
    /// adoption's `file.written` events would have to claim `Host` and
    /// would reset `updated_at` to the moment of adoption.
    Adoption,
    /// A trusted native process working in the workspace: a command run by
    /// `sandlog run`, or changes found by `session sync` and attributed to
    /// the actor that made them. Activity, like a host write.
    Native,
}

impl WrittenBy {
    /// Whether a change by this writer is activity that moves the
    /// session's `updated_at` on its own (M2): host and native writes are;
    /// guest writes ride on their execution, and an adoption's inventory
    /// is not (M4).
    pub fn is_activity(self) -> bool {
        matches!(self, WrittenBy::Host | WrittenBy::Native)
    }
}

/// How an execution ended. Each limit hit is its own outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exited 0.
    Ok,
    /// Exited non-zero (an uncaught Python exception exits 1).
    Error,
    /// Ran out of fuel (the deterministic CPU limit).
    OutOfFuel,
    /// Ran past the wall-clock limit.
    Timeout,
    /// Tried to grow linear memory past the limit.
    Memory,
    /// Wrote more to the workspace than its quota allows.
    Quota,
    /// Any other wasm trap (unreachable, stack overflow, bad module).
    Trap,
    /// The guest finished, but what it left in the workspace is past a
    /// bound of the host's work after the run (see [`ExecutionLimit`]): the
    /// execution is recorded with what could be recorded, and its
    /// [`ExecutionScan`] says which bound and what was left out.
    LimitExceeded,
    /// The caller cancelled the run while the guest ran (a Python task
    /// cancelled, say); the guest was stopped and what it had done is
    /// recorded.
    Cancelled,
}

impl Outcome {
    /// The snake_case name used in events, JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::OutOfFuel => "out_of_fuel",
            Outcome::Timeout => "timeout",
            Outcome::Memory => "memory",
            Outcome::Quota => "quota",
            Outcome::Trap => "trap",
            Outcome::LimitExceeded => "limit_exceeded",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// What an adopted workspace's `.metadata.json` looked like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetadataStatus {
    /// Present and valid: its timestamps were taken.
    Ok,
    /// Absent: the session is legacy (never pruned).
    Missing,
    /// Present but unreadable or invalid: legacy, and the file was kept as
    /// evidence outside the workspace.
    Corrupted,
}

/// `session.created`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCreated {
    /// The new session.
    pub session_id: SessionId,
    /// Free-form labels given at creation.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The task group it belongs to (a task id, say), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Its size limit, bytes (apparent size of the workspace's files), if
    /// one was set at creation; else the root's `session.max_size` applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u64>,
    /// Host directories its executions see read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readonly: Vec<ReadonlyDir>,
    /// The node (host) whose disk holds its workspace: with a shared log,
    /// only that node runs in, writes to, prunes or reconciles it. None for
    /// sessions created before nodes were recorded: every node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl SessionCreated {
    /// A session with labels only: no group, size limit or read-only
    /// directories.
    pub fn new(session_id: SessionId, labels: BTreeMap<String, String>) -> SessionCreated {
        SessionCreated {
            session_id,
            labels,
            group: None,
            max_size: None,
            readonly: Vec::new(),
            node: None,
        }
    }
}

/// A host directory a session's executions see read-only, declared when
/// the session was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadonlyDir {
    /// The directory on the host: an absolute path, valid UTF-8.
    pub host_path: String,
    /// Where the guest sees it (absolute, for example `/data/task`).
    pub guest_path: String,
}

/// A workspace found larger than its session's size limit after native
/// work (which sandlog records but cannot stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeExceeded {
    /// The workspace's files, bytes.
    pub bytes: u64,
    /// The session's limit, bytes.
    pub max_size: u64,
}

/// `native.started`: a trusted native command began in the workspace
/// (`sandlog run`). Appended before the command starts, so a run whose
/// recorder was killed still shows in the log, without its completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeStarted {
    /// The command line, each argument in the escaped text form of
    /// `docs/names.md` (lossless for arguments that are not UTF-8).
    pub argv: Vec<String>,
}

/// `native.completed`: the command of the `native.started` this event's
/// causation names ended; the files it changed follow as `file.written` /
/// `file.deleted` events (`by: native`) caused by this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeCompleted {
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Wall time, microseconds.
    pub duration_us: u64,
    /// Bytes of stdout kept (after truncation).
    pub stdout_bytes: u64,
    /// blake3 of stdout kept.
    pub stdout_blake3: Hash,
    /// Whether stdout was longer than what was kept.
    pub stdout_truncated: bool,
    /// Bytes of stderr kept (after truncation).
    pub stderr_bytes: u64,
    /// blake3 of stderr kept.
    pub stderr_blake3: Hash,
    /// Whether stderr was longer than what was kept.
    pub stderr_truncated: bool,
    /// The host's scan of the workspace afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<Box<ExecutionScan>>,
    /// What was kept as evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ExecEvidence>,
    /// Set when the workspace is past the session's size limit afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_exceeded: Option<SizeExceeded>,
    /// Whether its timeout passed and its process group was killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// Why the command did not run or was stopped (it could not be
    /// started; its timeout killed it), when it did not simply exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `session.synced`: changes made in the workspace outside sandlog since
/// the last record, found by `session sync` and attributed to the actor;
/// the files follow as `file.written` / `file.deleted` events
/// (`by: native`) caused by this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSynced {
    /// The host's scan of the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<Box<ExecutionScan>>,
    /// What was kept as evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ExecEvidence>,
    /// Set when the workspace is past the session's size limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_exceeded: Option<SizeExceeded>,
}

/// `session.adopted`: an existing workspace directory was imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAdopted {
    /// The directory's UUID.
    pub session_id: SessionId,
    /// From valid seed metadata, else none.
    pub created_at: Option<Timestamp>,
    /// From valid seed metadata, else none.
    pub updated_at: Option<Timestamp>,
    /// What the metadata file looked like.
    pub metadata: MetadataStatus,
    /// Where the directory was adopted from.
    pub source: String,
    /// Where a corrupted metadata file was kept, if any.
    #[serde(default)]
    pub evidence: Option<String>,
    /// Entries adoption refused to take into the workspace (anything but a
    /// regular file, a directory, or a symlink that stays inside), each
    /// with the reason. Empty lists are not serialised, so events written
    /// before the field existed hash the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedEntry>,
    /// Files that had other hard links (possibly to files outside the
    /// workspace), replaced by private copies so a write through the
    /// workspace never reaches another file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copied_links: Vec<String>,
    /// Entries refused or copied but left out of the two lists above, which
    /// are bounded so the event stays under the payload limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unrecorded: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// An entry adoption did not take into a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedEntry {
    /// Its path relative to the workspace (lossy UTF-8).
    pub path: String,
    /// What it was: `fifo`, `socket`, `char_device`, `block_device`,
    /// `symlink` or `unknown`.
    pub kind: String,
    /// Why it was refused.
    pub reason: String,
    /// Where it was moved, relative to the root (under `quarantine/`);
    /// none when it was deleted or never copied in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
}

/// The limits an execution ran under, recorded for forensics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedLimits {
    /// Fuel granted, if metered.
    pub fuel: Option<u64>,
    /// Wall-clock limit, milliseconds.
    pub timeout_ms: u64,
    /// Linear memory limit, bytes.
    pub memory_bytes: u64,
    /// Workspace quota, bytes.
    pub workspace_bytes: u64,
}

/// `session.executed`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionExecuted {
    /// `python`, `javascript`, or a module file name.
    pub runtime: String,
    /// blake3 of the wasm module that ran.
    pub runtime_blake3: Hash,
    /// blake3 of the code (a blob).
    pub code_blake3: Hash,
    /// Length of the code, bytes.
    pub code_bytes: u64,
    /// How it ended: `ok`, `error`, `out_of_fuel`, `timeout`, `memory`,
    /// `quota`, `trap`, `limit_exceeded`, or `cancelled` (the caller
    /// stopped the run: a cancelled Python task, an MCP cancellation).
    pub outcome: Outcome,
    /// The guest's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Fuel consumed, when metered.
    pub fuel_consumed: Option<u64>,
    /// Wall time, microseconds.
    pub duration_us: u64,
    /// Bytes of stdout produced (after truncation).
    pub stdout_bytes: u64,
    /// blake3 of stdout kept.
    pub stdout_blake3: Hash,
    /// Whether stdout hit its cap.
    pub stdout_truncated: bool,
    /// Bytes of stderr produced (after truncation).
    pub stderr_bytes: u64,
    /// blake3 of stderr kept.
    pub stderr_blake3: Hash,
    /// Whether stderr hit its cap.
    pub stderr_truncated: bool,
    /// The limits it ran under.
    pub limits: RecordedLimits,
    /// The host's scan of the workspace after the run (absent in events
    /// recorded before it was reported). Boxed: most events never carry it
    /// and `Event` stays small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<Box<ExecutionScan>>,
    /// What was kept as evidence (absent in events recorded before
    /// evidence was kept: only the code was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ExecEvidence>,
    /// Whether it ran in a warm session kernel: `Some(true)` in one that
    /// had run earlier executions, `Some(false)` in one started for it;
    /// absent for a one-shot run (and in events recorded before kernels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<bool>,
}

/// A bound of the host's work after a run, past which not everything the
/// guest left could be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionLimit {
    /// More changed files than one execution may record.
    ChangedFiles,
    /// Directories nested deeper than a workspace path can name.
    ScanDepth,
    /// More workspace entries than a scan visits.
    ScanEntries,
    /// More bytes of changed files than the hash budget.
    HashBytes,
    /// The scan and hashing ran past their deadline.
    ScanTime,
}

impl ExecutionLimit {
    /// The snake_case name used in events, JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionLimit::ChangedFiles => "changed_files",
            ExecutionLimit::ScanDepth => "scan_depth",
            ExecutionLimit::ScanEntries => "scan_entries",
            ExecutionLimit::HashBytes => "hash_bytes",
            ExecutionLimit::ScanTime => "scan_time",
        }
    }
}

/// What the host's scan after a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionScan {
    /// Wall time of the scan and hashing after the run, milliseconds.
    pub scan_ms: u64,
    /// The bound that kept some changes from being recorded, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<ExecutionLimit>,
    /// Changes found (files written or deleted), recorded or not.
    pub files_changed_total: u64,
    /// Changes recorded as `file.written` / `file.deleted` events.
    pub files_recorded: u64,
    /// With a limit: blake3 of the full sorted change list that was found
    /// (see the engine's `changes_digest` for the encoding), so what was
    /// left out is still pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_digest: Option<Hash>,
}

/// `file.written`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileWritten {
    /// Workspace-relative path.
    pub path: WorkspacePath,
    /// Size, bytes.
    pub size: u64,
    /// blake3 of the contents (a blob when written by the host); all zeros
    /// when the scan could not read the file (`not_kept: unreadable`).
    pub blake3: Hash,
    /// Who wrote it.
    pub by: WrittenBy,
    /// Whether the bytes were kept as a blob (absent in events recorded
    /// before evidence was kept: host writes kept them, guest writes did
    /// not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_kept: Option<bool>,
    /// Why the bytes were not kept, when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_kept: Option<NotKept>,
}

impl FileWritten {
    /// A write whose bytes are kept under `blake3`.
    pub fn kept(path: WorkspacePath, size: u64, blake3: Hash, by: WrittenBy) -> FileWritten {
        FileWritten {
            path,
            size,
            blake3,
            by,
            content_kept: Some(true),
            not_kept: None,
        }
    }

    /// Whether the event says its bytes were stored: explicitly, or (for
    /// events from before evidence was kept) because the host wrote them.
    pub fn content_stored(&self) -> bool {
        self.content_kept.unwrap_or(self.by == WrittenBy::Host)
    }
}

/// Why a file's bytes were not kept as evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotKept {
    /// The execution's evidence budget was used up by other files.
    Budget,
    /// The file alone is larger than the execution's evidence budget.
    TooLarge,
    /// Evidence is off for this execution (budget 0).
    Off,
    /// The file changed between the scan and the copy (something outside
    /// the guest wrote it), so the bytes no longer match the hash recorded.
    Changed,
    /// The file could not be read: not permitted (mode 000, another
    /// user's), or removed or replaced before its bytes were copied.
    Unreadable,
    /// An adoption's inventory: the bytes are in the adopted workspace,
    /// not copied into the log.
    Adopted,
}

impl NotKept {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            NotKept::Budget => "budget",
            NotKept::TooLarge => "too_large",
            NotKept::Off => "off",
            NotKept::Changed => "changed",
            NotKept::Unreadable => "unreadable",
            NotKept::Adopted => "adopted",
        }
    }

    /// What it means, for a person.
    pub fn describe(self) -> &'static str {
        match self {
            NotKept::Budget => "the execution's evidence budget was used up by other files",
            NotKept::TooLarge => "the file is larger than the execution's evidence budget",
            NotKept::Off => "evidence was off for the execution",
            NotKept::Changed => "the file changed after the scan, before its bytes were copied",
            NotKept::Unreadable => "the file could not be read back after the run",
            NotKept::Adopted => "files of an adopted workspace are inventoried, not copied",
        }
    }
}

/// What an execution kept as evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecEvidence {
    /// The budget for file bytes, bytes (0: evidence off).
    pub budget_bytes: u64,
    /// Bytes of files kept (counted whole, deduplicated or not).
    pub kept_bytes: u64,
    /// Files kept.
    pub kept_files: u64,
    /// Files written but not kept (each says why).
    pub not_kept_files: u64,
    /// Whether stdout and stderr were kept as blobs.
    pub output_kept: bool,
}

/// `file.deleted`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDeleted {
    /// Workspace-relative path.
    pub path: WorkspacePath,
    /// Who deleted it.
    pub by: WrittenBy,
}

/// `session.prune.requested`: the intent, appended before anything is
/// deleted, with the stream version the candidate was read at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPruneRequested {
    /// The prune run.
    pub run_id: Uuid,
    /// Age from `updated_at`, microseconds.
    pub age_us: u64,
    /// The policy's threshold, microseconds.
    pub threshold_us: u64,
    /// Projected size, bytes.
    pub size_bytes: u64,
}

/// `session.pruned`: the directory is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPruned {
    /// The prune run (none when the applier finished a crashed run's intent
    /// it could not attribute).
    pub run_id: Option<Uuid>,
    /// Bytes measured on disk just before deletion.
    pub reclaimed_bytes: u64,
}

/// `session.prune.failed`: the intent could not be carried out; the
/// session is active again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPruneFailed {
    /// The prune run.
    pub run_id: Option<Uuid>,
    /// What went wrong.
    pub error: String,
}

/// `session.delete.requested`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDeleteRequested {
    /// Why.
    pub reason: String,
}

/// `session.deleted`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDeleted {
    /// Why.
    pub reason: String,
    /// Bytes measured on disk just before deletion.
    pub reclaimed_bytes: u64,
}

/// `workspace.orphan.quarantined`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceOrphanQuarantined {
    /// The directory's name under `workspaces/`.
    pub dir_name: String,
    /// Its size, bytes.
    pub bytes: u64,
    /// Where it was moved, relative to the root.
    pub moved_to: String,
}

/// `workspace.orphan.purged`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceOrphanPurged {
    /// The directory's name under `workspaces/`.
    pub dir_name: String,
    /// Its size, bytes.
    pub bytes: u64,
}

/// `workspace.reclaimed`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceReclaimed {
    /// Workspaces whose directories this pass removed from `trash/`,
    /// where a prune moved them.
    pub workspaces: u64,
    /// Bytes of the files they held, measured as they were removed.
    pub bytes: u64,
    /// Directories this pass could not remove, left in `trash/` for the
    /// next pass.
    pub failed: u64,
}

/// One difference between the projection and the disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Drift {
    /// A live session's directory is missing.
    MissingDirectory,
    /// A file the projection knows is missing.
    FileMissing {
        /// Path.
        path: WorkspacePath,
        /// The projected hash.
        expected: Hash,
    },
    /// A file's contents differ from the projection.
    FileChanged {
        /// Path.
        path: WorkspacePath,
        /// The projected hash.
        expected: Hash,
        /// The hash on disk; all zeros when the file was past the
        /// hashing bounds of the run that looked and was not read.
        actual: Hash,
    },
    /// A file on disk the projection does not know.
    FileUnexpected {
        /// Path.
        path: WorkspacePath,
        /// The hash on disk; all zeros when the file was past the
        /// hashing bounds of the run that looked and was not read.
        actual: Hash,
    },
}

/// `workspace.drift.detected`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceDriftDetected {
    /// What differs.
    pub drift: Vec<Drift>,
    /// Present when one detection was split over several events (appended
    /// in one batch) or summarised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<DriftSplit>,
}

/// One part of a drift detection too big for one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftSplit {
    /// This event's index among the detection's events, from 0.
    pub part: u32,
    /// How many events the detection was recorded in.
    pub parts: u32,
    /// Items in the whole detection; more than the parts hold when it was
    /// summarised.
    pub items_total: u64,
    /// blake3 of the whole detection's items (JSON array of them).
    pub items_digest: Hash,
}

/// `prune.run.started`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneRunStarted {
    /// The run.
    pub run_id: Uuid,
    /// The policy.
    pub policy: PrunePolicy,
    /// Candidates selected.
    pub candidates: u64,
}

/// `prune.run.completed`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneRunCompleted {
    /// The run.
    pub run_id: Uuid,
    /// Sessions pruned.
    pub deleted: u64,
    /// Sessions skipped (legacy, or used during the run).
    pub skipped: u64,
    /// Sessions that failed.
    pub errors: u64,
    /// Bytes reclaimed.
    pub reclaimed_bytes: u64,
    /// Wall time, microseconds.
    pub duration_us: u64,
}

/// `reconcile.run.completed`: a summary of one applier run (C3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileRunCompleted {
    /// The run.
    pub run_id: Uuid,
    /// Pending intents finished.
    pub intents_finished: u64,
    /// Orphan directories quarantined or purged.
    pub orphans: u64,
    /// Sessions with drift.
    pub drift: u64,
    /// Actions that failed.
    pub errors: u64,
    /// Wall time, microseconds.
    pub duration_us: u64,
}

/// `session.intent.failed`: finishing a pending prune or delete intent
/// failed (the directory could not be removed, say). The intent stays
/// pending and is retried by `reconcile` and on open; the same failure is
/// recorded once, not on every retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIntentFailed {
    /// `prune` or `delete`.
    pub intent: String,
    /// The prune run of a prune intent, when known.
    #[serde(default)]
    pub run_id: Option<Uuid>,
    /// What went wrong.
    pub error: String,
}

/// `session.held`: a legal hold. A held session is never pruned, deleted
/// or erased until released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeld {
    /// Why (a case number, say).
    pub reason: String,
}

/// `session.released`: the hold is lifted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionReleased {
    /// Why, if given.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `session.forked`: the session's workspace was made from another
/// session's as it was at a position. Follows the new session's
/// `session.created`; the files come as `file.written` events after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionForked {
    /// The origin session.
    pub from: SessionId,
    /// The position the origin was taken at.
    pub at: u64,
    /// Files copied.
    pub files: u64,
    /// Files of the origin at that point whose bytes were not kept (or were
    /// erased), so the fork lacks them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<WorkspacePath>,
}

/// `evidence.erased`: kept bytes were removed (erasure or retention); the
/// events and hashes naming them remain, so the chain still verifies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceErased {
    /// Why (the legal basis, or the retention policy).
    pub reason: String,
    /// The path given to limit the erasure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<WorkspacePath>,
    /// The blobs erased (at most `ERASED_HASHES_PER_EVENT_MAX` per event).
    pub blobs: Vec<Hash>,
    /// Their raw bytes.
    pub bytes: u64,
    /// Blobs this erasure left because a held session also names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_for_hold: Vec<Hash>,
}

/// `root.configured`: a root setting changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootConfigured {
    /// The setting (`evidence.budget`, say).
    pub key: String,
    /// Its new value as given; none unsets it (the default applies).
    pub value: Option<String>,
}

/// `kernel.restarted`: a session's warm kernel was dropped after an
/// execution that ended it (a limit, a trap, a broken protocol); the
/// session's next execution starts a fresh kernel, without the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRestarted {
    /// Why the kernel ended.
    pub reason: String,
    /// Executions the kernel ran, the last included.
    pub executions: u64,
}

/// `kernel.evicted`: a session's idle warm kernel was dropped by the host
/// (kernel cap, memory total, idle timeout, shutdown, the session ending);
/// the next execution starts a fresh kernel, without the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEvicted {
    /// Why it was dropped.
    pub reason: String,
    /// Executions the kernel ran.
    pub executions: u64,
    /// Its linear memory, bytes.
    pub memory_bytes: u64,
}

macro_rules! events {
    ($($variant:ident($payload:ident) = $kind:literal, schema $schema:literal;)*) => {
        /// A typed event.
        ///
        /// Deliberately not `#[non_exhaustive]`: the readers that describe
        /// every kind (`sandlog_projections::describe`, the report) match
        /// it without a catch-all arm, so a new kind does not compile
        /// until each of them handles it.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Event {
            $(
                #[doc = concat!("`", $kind, "`")]
                $variant($payload),
            )*
        }

        /// Every kind this version knows, with its current schema.
        pub const KNOWN_KINDS: &[(&str, u32)] = &[$(($kind, $schema)),*];

        impl Event {
            /// The dotted kind name.
            pub fn kind(&self) -> &'static str {
                match self { $(Event::$variant(_) => $kind,)* }
            }

            /// The current payload schema version of this kind.
            pub fn schema(&self) -> u32 {
                match self { $(Event::$variant(_) => $schema,)* }
            }

            /// The payload as JSON bytes.
            pub fn to_payload(&self) -> Vec<u8> {
                match self { $(Event::$variant(payload) => encode_payload(payload),)* }
            }

            /// Decodes a stored payload. `Ok(None)` for an unknown kind.
            pub fn decode(kind: &str, schema: u32, payload: &[u8]) -> Result<Option<Event>, CoreError> {
                let invalid = |reason: String| CoreError::InvalidPayload { kind: kind.to_owned(), schema, reason };
                match kind {
                    $($kind => {
                        // A payload at the current schema (or a newer one,
                        // read as current) has nothing to migrate: decode it
                        // straight from the bytes. Going through a
                        // `serde_json::Value` for the upcaster costs about
                        // two thirds of decoding, and a rebuild decodes
                        // every event of the log.
                        if schema >= $schema {
                            return serde_json::from_slice::<$payload>(payload)
                                .map(|p| Some(Event::$variant(p)))
                                .map_err(|e| invalid(e.to_string()));
                        }
                        let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| invalid(e.to_string()))?;
                        let value = upcast(kind, schema, $schema, value).map_err(invalid)?;
                        serde_json::from_value::<$payload>(value).map(|p| Some(Event::$variant(p))).map_err(|e| invalid(e.to_string()))
                    })*
                    _ => Ok(None),
                }
            }
        }
    };
}

events! {
    SessionCreated(SessionCreated) = "session.created", schema 1;
    SessionAdopted(SessionAdopted) = "session.adopted", schema 1;
    SessionExecuted(SessionExecuted) = "session.executed", schema 1;
    FileWritten(FileWritten) = "file.written", schema 1;
    FileDeleted(FileDeleted) = "file.deleted", schema 1;
    SessionPruneRequested(SessionPruneRequested) = "session.prune.requested", schema 1;
    SessionPruned(SessionPruned) = "session.pruned", schema 1;
    SessionPruneFailed(SessionPruneFailed) = "session.prune.failed", schema 1;
    SessionDeleteRequested(SessionDeleteRequested) = "session.delete.requested", schema 1;
    SessionDeleted(SessionDeleted) = "session.deleted", schema 1;
    WorkspaceOrphanQuarantined(WorkspaceOrphanQuarantined) = "workspace.orphan.quarantined", schema 1;
    WorkspaceOrphanPurged(WorkspaceOrphanPurged) = "workspace.orphan.purged", schema 1;
    WorkspaceDriftDetected(WorkspaceDriftDetected) = "workspace.drift.detected", schema 1;
    WorkspaceReclaimed(WorkspaceReclaimed) = "workspace.reclaimed", schema 1;
    PruneRunStarted(PruneRunStarted) = "prune.run.started", schema 1;
    PruneRunCompleted(PruneRunCompleted) = "prune.run.completed", schema 1;
    ReconcileRunCompleted(ReconcileRunCompleted) = "reconcile.run.completed", schema 1;
    SessionIntentFailed(SessionIntentFailed) = "session.intent.failed", schema 1;
    SessionHeld(SessionHeld) = "session.held", schema 1;
    SessionReleased(SessionReleased) = "session.released", schema 1;
    SessionForked(SessionForked) = "session.forked", schema 1;
    EvidenceErased(EvidenceErased) = "evidence.erased", schema 1;
    RootConfigured(RootConfigured) = "root.configured", schema 1;
    KernelRestarted(KernelRestarted) = "kernel.restarted", schema 1;
    KernelEvicted(KernelEvicted) = "kernel.evicted", schema 1;
    NativeStarted(NativeStarted) = "native.started", schema 1;
    NativeCompleted(NativeCompleted) = "native.completed", schema 1;
    SessionSynced(SessionSynced) = "session.synced", schema 1;
}

/// Serialises a payload struct.
#[expect(
    clippy::expect_used,
    reason = "payloads have only string map keys and plain values; serde_json cannot fail on them"
)]
fn encode_payload<T: Serialize>(payload: &T) -> Vec<u8> {
    serde_json::to_vec(payload).expect("event payloads always serialise") // invariant: see reason above
}

/// The upcasting hook: turns a payload stored at `stored` schema into the
/// shape of the `current` schema of `kind`. Only called when `stored` is
/// older than `current` (`Event::decode` decodes current payloads directly).
///
/// Every kind is at schema 1 today, so there is nothing to migrate yet; when
/// a payload changes shape, bump its schema above and add an arm here that
/// rewrites the old JSON (never the stored bytes, which the chain covers).
/// A schema newer than this build knows is decoded as the current one, which
/// works for additive changes and fails clearly for others.
fn upcast(
    kind: &str,
    stored: u32,
    current: u32,
    value: serde_json::Value,
) -> Result<serde_json::Value, String> {
    match (kind, stored) {
        (_, 0) => Err(format!("schema 0 is not a valid schema for {kind}")),
        _ => {
            debug_assert!(current >= 1, "current schemas start at 1");
            Ok(value)
        }
    }
}

impl Event {
    /// The session an event names in its payload, for events that do.
    pub fn named_session(&self) -> Option<SessionId> {
        match self {
            Event::SessionCreated(created) => Some(created.session_id),
            Event::SessionAdopted(adopted) => Some(adopted.session_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_through_decode() {
        let event = Event::FileWritten(FileWritten::kept(
            WorkspacePath::parse("a/b.txt").unwrap(),
            3,
            Hash::of(b"abc"),
            WrittenBy::Guest,
        ));
        let decoded = Event::decode(event.kind(), event.schema(), &event.to_payload()).unwrap();
        assert_eq!(decoded, Some(event));
    }

    #[test]
    fn unknown_kinds_are_skipped_not_fatal() {
        assert_eq!(Event::decode("session.teleported", 1, b"{}").unwrap(), None);
    }

    #[test]
    fn invalid_payload_of_known_kind_is_an_error_naming_the_kind() {
        let error = Event::decode("file.written", 1, b"{\"path\":\"../x\"}").unwrap_err();
        assert!(
            matches!(error, CoreError::InvalidPayload { ref kind, .. } if kind == "file.written"),
            "{error}"
        );
    }

    #[test]
    fn kinds_are_unique() {
        let mut kinds: Vec<_> = KNOWN_KINDS.iter().map(|(kind, _)| *kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), KNOWN_KINDS.len());
    }
}
