//! The in-memory projection state and its pure fold.
//!
//! `apply` only updates state; it decides nothing, reads no clock and does
//! no I/O. Rules ("may this session be pruned?") live in command handlers
//! and in [`crate::prune`]. Unknown event kinds are skipped so an older
//! sandlog can fold a newer log.

use std::collections::BTreeMap;

use sandlog_core::event::{Event, MetadataStatus, Outcome, ReadonlyDir};
use sandlog_core::{
    Envelope, Hash, Position, SessionId, StreamId, StreamVersion, Timestamp, WorkspacePath,
};
use serde::{Deserialize, Serialize};

/// A session's lifecycle status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Usable.
    Active,
    /// A prune intent is recorded; data is kept until `session.pruned`.
    Pruning,
    /// Pruned: the workspace is gone.
    Pruned,
    /// A delete intent is recorded.
    Deleting,
    /// Deleted: the workspace is gone.
    Deleted,
}

impl SessionStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Pruning => "pruning",
            SessionStatus::Pruned => "pruned",
            SessionStatus::Deleting => "deleting",
            SessionStatus::Deleted => "deleted",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(text: &str) -> Option<SessionStatus> {
        Some(match text {
            "active" => SessionStatus::Active,
            "pruning" => SessionStatus::Pruning,
            "pruned" => SessionStatus::Pruned,
            "deleting" => SessionStatus::Deleting,
            "deleted" => SessionStatus::Deleted,
            _ => return None,
        })
    }

    /// Whether the session's directory should exist on disk.
    pub fn has_workspace(self) -> bool {
        matches!(
            self,
            SessionStatus::Active | SessionStatus::Pruning | SessionStatus::Deleting
        )
    }

    /// Whether an intent is pending (the applier must finish it).
    pub fn is_pending(self) -> bool {
        matches!(self, SessionStatus::Pruning | SessionStatus::Deleting)
    }
}

/// One file of a session, as the log says it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Size, bytes.
    pub size: u64,
    /// blake3 of the contents.
    pub blake3: Hash,
    /// When it was last written.
    pub updated_at: Timestamp,
}

/// One session, as the log says it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// Id.
    pub session_id: SessionId,
    /// Status.
    pub status: SessionStatus,
    /// Set once, at creation or adoption (none for legacy).
    pub created_at: Option<Timestamp>,
    /// Last activity; never goes backwards (none for legacy).
    pub updated_at: Option<Timestamp>,
    /// Executions run.
    pub exec_count: u64,
    /// The last execution's outcome.
    pub last_outcome: Option<Outcome>,
    /// Sum of file sizes.
    pub bytes: u64,
    /// Number of files.
    pub file_count: u64,
    /// Adopted without valid metadata: never pruned.
    pub legacy: bool,
    /// Labels given at creation.
    pub labels: BTreeMap<String, String>,
    /// The task group given at creation.
    #[serde(default)]
    pub group: Option<String>,
    /// The size limit given at creation, bytes (else the root's default).
    #[serde(default)]
    pub max_size: Option<u64>,
    /// Host directories its executions see read-only.
    #[serde(default)]
    pub readonly: Vec<ReadonlyDir>,
    /// The node whose disk holds its workspace; none for sessions made
    /// before nodes were recorded, and adopted ones (every node's).
    #[serde(default)]
    pub node: Option<String>,
    /// The stream's version after the last event folded (for optimistic
    /// concurrency of intents).
    pub version: StreamVersion,
    /// Position of the last event folded.
    pub last_position: Position,
    /// Files, by path.
    pub files: BTreeMap<WorkspacePath, FileEntry>,
    /// The reason of a legal hold in force: a held session is never
    /// pruned, deleted or erased.
    #[serde(default)]
    pub held: Option<String>,
}

impl SessionState {
    fn new(session_id: SessionId, envelope: &EventContext) -> Self {
        SessionState {
            session_id,
            status: SessionStatus::Active,
            created_at: None,
            updated_at: None,
            exec_count: 0,
            last_outcome: None,
            bytes: 0,
            file_count: 0,
            legacy: false,
            labels: BTreeMap::new(),
            group: None,
            max_size: None,
            readonly: Vec::new(),
            node: None,
            version: envelope.version,
            last_position: envelope.position,
            files: BTreeMap::new(),
            held: None,
        }
    }

    /// Moves `updated_at` forward to `instant` (never backwards; never for
    /// a legacy session, which has no timestamps).
    fn touch(&mut self, instant: Timestamp) {
        if self.legacy {
            return;
        }
        self.updated_at = Some(
            self.updated_at
                .map_or(instant, |current| current.max(instant)),
        );
    }

    /// Counts `entry` in (`file_count`, `bytes`), or out when `entering`
    /// is false. The counts move with each file that enters or leaves
    /// `files`, so folding a write costs the same whatever the session
    /// holds; and `sandlog_sqlite::read_model` folds with only the file rows an
    /// event touches loaded, the counts coming from the session's row.
    fn count(&mut self, entry: &FileEntry, entering: bool) {
        if entering {
            self.bytes = self.bytes.saturating_add(entry.size);
            self.file_count = self.file_count.saturating_add(1);
        } else {
            self.bytes = self.bytes.saturating_sub(entry.size);
            self.file_count = self.file_count.saturating_sub(1);
        }
    }

    /// Empties the workspace (a prune or delete finished).
    fn clear_files(&mut self) {
        self.files.clear();
        self.bytes = 0;
        self.file_count = 0;
    }
}

/// Cleanup statistics (C3), folded from the `system` stream and the
/// sessions' completion events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupStats {
    /// Prune runs completed.
    pub prune_runs: u64,
    /// Sessions pruned.
    pub sessions_pruned: u64,
    /// Sessions whose prune failed.
    pub prune_errors: u64,
    /// Bytes reclaimed by pruning.
    pub pruned_bytes: u64,
    /// Sessions deleted.
    pub sessions_deleted: u64,
    /// Bytes reclaimed by deletes.
    pub deleted_bytes: u64,
    /// Reconcile runs completed.
    pub reconcile_runs: u64,
    /// Orphan directories moved to quarantine.
    pub orphans_quarantined: u64,
    /// Orphan directories purged.
    pub orphans_purged: u64,
    /// Bytes of orphan directories handled.
    pub orphan_bytes: u64,
    /// Pending intents finished by the applier.
    pub intents_finished: u64,
    /// Drift reports.
    pub drift_reports: u64,
    /// Errors of reconcile runs.
    pub reconcile_errors: u64,
    /// Total wall time of prune and reconcile runs, microseconds.
    pub cleanup_duration_us: u64,
    /// When the last prune or reconcile run completed.
    pub last_cleanup_at: Option<Timestamp>,
}

/// The whole projection: every session with its files, and the cleanup
/// statistics. A *partial* `State` (some sessions only) is what the SQL
/// read model folds into; `apply` never needs sessions other than the
/// event's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Sessions by id.
    pub sessions: BTreeMap<SessionId, SessionState>,
    /// Cleanup statistics.
    pub stats: CleanupStats,
    /// Position of the last event folded.
    pub position: Position,
}

/// Folds one envelope into `state`. Skips (with a trace) what it cannot
/// use: unknown kinds, payloads that do not decode, events for sessions it
/// has never seen created.
pub fn apply(state: &mut State, envelope: &Envelope) {
    state.position = state.position.max(envelope.position);
    let event = match envelope.event() {
        Ok(Some(event)) => event,
        Ok(None) => {
            tracing::debug!(kind = %envelope.kind, position = %envelope.position, "skipping unknown event kind");
            return;
        }
        Err(error) => {
            tracing::warn!(%error, position = %envelope.position, "skipping undecodable event");
            return;
        }
    };
    apply_event(state, envelope, &event);
}

/// The envelope fields the fold reads besides the payload. Readers that
/// fold many stored rows (the read models' catch-up and rebuild) take just
/// these columns instead of building whole [`Envelope`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventContext {
    /// Global position.
    pub position: Position,
    /// The stream (the session, for session events).
    pub stream: StreamId,
    /// Version within the stream.
    pub version: StreamVersion,
    /// When the store recorded it.
    pub recorded_at: Timestamp,
}

impl EventContext {
    /// The session whose stream this is, if any.
    pub fn session(&self) -> Option<SessionId> {
        self.stream.session()
    }
}

impl From<&Envelope> for EventContext {
    fn from(envelope: &Envelope) -> Self {
        EventContext {
            position: envelope.position,
            stream: envelope.stream,
            version: envelope.version,
            recorded_at: envelope.recorded_at,
        }
    }
}

/// [`apply`] for an already decoded event.
pub fn apply_event(state: &mut State, envelope: &Envelope, event: &Event) {
    apply_in_context(state, &EventContext::from(envelope), event);
}

/// [`apply_event`] given only the fields the fold reads. Does not move
/// `state.position` (callers do, for every event, decodable or not).
pub fn apply_in_context(state: &mut State, envelope: &EventContext, event: &Event) {
    let at = envelope.recorded_at;
    apply_stats(&mut state.stats, event, at);
    let Some(session_id) = envelope.session() else {
        return;
    };
    let session = match event {
        Event::SessionCreated(created) => {
            let session = state
                .sessions
                .entry(session_id)
                .or_insert_with(|| SessionState::new(session_id, envelope));
            if session.created_at.is_none() && !session.legacy {
                session.created_at = Some(at);
                session.updated_at = Some(at);
            }
            session.labels = created.labels.clone();
            session.group = created.group.clone();
            session.max_size = created.max_size;
            session.readonly = created.readonly.clone();
            session.node = created.node.clone();
            session
        }
        Event::SessionAdopted(adopted) => {
            let session = state
                .sessions
                .entry(session_id)
                .or_insert_with(|| SessionState::new(session_id, envelope));
            let valid = adopted.metadata == MetadataStatus::Ok && adopted.created_at.is_some();
            session.legacy = !valid;
            if valid {
                session.created_at = adopted.created_at;
                session.updated_at = adopted.updated_at.or(adopted.created_at);
            } else {
                session.created_at = None;
                session.updated_at = None;
            }
            session
        }
        _ => match state.sessions.get_mut(&session_id) {
            Some(session) => session,
            None => {
                tracing::warn!(%session_id, kind = event.kind(), "event for a session never created; skipped");
                return;
            }
        },
    };
    session.version = session.version.max(envelope.version);
    session.last_position = session.last_position.max(envelope.position);
    match event {
        Event::NativeCompleted(completed) if completed.exit_code == Some(0) => session.touch(at),
        Event::SessionExecuted(executed) => {
            session.exec_count += 1;
            session.last_outcome = Some(executed.outcome);
            if executed.outcome == Outcome::Ok {
                session.touch(at);
            }
        }
        Event::FileWritten(written) => {
            let entry = FileEntry {
                size: written.size,
                blake3: written.blake3,
                updated_at: at,
            };
            session.count(&entry, true);
            if let Some(replaced) = session.files.insert(written.path.clone(), entry) {
                session.count(&replaced, false);
            }
            // Only host and native writes are activity (M2). Guest writes
            // ride on their execution, which touches only if it succeeded;
            // an adoption's inventory is not activity, so adopted
            // timestamps stand (M4).
            if written.by.is_activity() {
                session.touch(at);
            }
        }
        Event::FileDeleted(deleted) => {
            let gone: Vec<WorkspacePath> = session
                .files
                .keys()
                .filter(|path| path.starts_with(&deleted.path))
                .cloned()
                .collect();
            for path in gone {
                if let Some(entry) = session.files.remove(&path) {
                    session.count(&entry, false);
                }
            }
            if deleted.by.is_activity() {
                session.touch(at);
            }
        }
        Event::SessionPruneRequested(_) => session.status = SessionStatus::Pruning,
        Event::SessionPruneFailed(_) if session.status == SessionStatus::Pruning => {
            session.status = SessionStatus::Active;
        }
        Event::SessionPruned(_) => {
            session.status = SessionStatus::Pruned;
            session.clear_files();
        }
        Event::SessionHeld(held) => session.held = Some(held.reason.clone()),
        Event::SessionReleased(_) => session.held = None,
        Event::SessionDeleteRequested(_) => session.status = SessionStatus::Deleting,
        Event::SessionDeleted(_) => {
            session.status = SessionStatus::Deleted;
            session.clear_files();
        }
        _ => {}
    }
}

fn apply_stats(stats: &mut CleanupStats, event: &Event, at: Timestamp) {
    match event {
        Event::PruneRunCompleted(run) => {
            stats.prune_runs += 1;
            stats.cleanup_duration_us += run.duration_us;
            stats.last_cleanup_at = Some(at);
        }
        Event::SessionPruned(pruned) => {
            stats.sessions_pruned += 1;
            stats.pruned_bytes += pruned.reclaimed_bytes;
        }
        Event::SessionPruneFailed(_) => stats.prune_errors += 1,
        Event::SessionDeleted(deleted) => {
            stats.sessions_deleted += 1;
            stats.deleted_bytes += deleted.reclaimed_bytes;
        }
        Event::WorkspaceOrphanQuarantined(orphan) => {
            stats.orphans_quarantined += 1;
            stats.orphan_bytes += orphan.bytes;
        }
        Event::WorkspaceOrphanPurged(orphan) => {
            stats.orphans_purged += 1;
            stats.orphan_bytes += orphan.bytes;
        }
        Event::WorkspaceDriftDetected(_) => stats.drift_reports += 1,
        Event::ReconcileRunCompleted(run) => {
            stats.reconcile_runs += 1;
            stats.intents_finished += run.intents_finished;
            stats.reconcile_errors += run.errors;
            stats.cleanup_duration_us += run.duration_us;
            stats.last_cleanup_at = Some(at);
        }
        _ => {}
    }
}

impl State {
    /// Folds every envelope of `envelopes` in order.
    pub fn fold<'a>(envelopes: impl IntoIterator<Item = &'a Envelope>) -> State {
        let mut state = State::default();
        for envelope in envelopes {
            apply(&mut state, envelope);
        }
        state
    }
}
