//! Creating sessions with everything a task gives its agents up front (a
//! task group, a size limit, read-only task data, context files), and the
//! size limit every later write is held to.
//!
//! A session's creation is one append: `session.created` and a
//! `file.written` (by the host, caused by the creation) per context file,
//! so no reader ever sees the session without its context. The files are
//! written (and fsynced) into the new directory first; a crash before the
//! append leaves an orphan directory that `reconcile` quarantines, never
//! an event without its files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sandlog_core::event::{Event, FileWritten, ReadonlyDir, SessionCreated, WrittenBy};
use sandlog_core::human::{format_size, parse_size};
use sandlog_core::{NewEvent, SessionId, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use sandlog_projections::query::SessionSummary;

use crate::engine::{Engine, check_labels};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::{Workspace, fsync_dir, remove_dir_tree};
use sandlog_sandbox::limits::WORKSPACE_BYTES_MAX;
use sandlog_sandbox::{ReadonlyMount, RunRequest};

/// The root setting holding the size limit of sessions created without
/// one (a size).
pub const SESSION_MAX_SIZE_SETTING: &str = "session.max_size";

/// Longest task group name, bytes: a task id, not a document.
pub const GROUP_BYTES_MAX: usize = 256;

/// Context files one creation writes: a task's CLAUDE.md and metadata,
/// not a repository (copy that in with `files put` or a native command).
pub const CONTEXT_FILES_MAX: usize = 64;

/// Bytes of context files one creation writes: they are held in memory
/// and stored as blobs in the creation's one transaction.
pub const CONTEXT_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Where a read-only directory declared without a guest path is seen:
/// `/data/<its name>`.
pub const READONLY_GUEST_PARENT: &str = "/data";

/// A file written into a new workspace at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    /// Where in the workspace.
    pub path: WorkspacePath,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Everything a new session starts with. `NewSession::default()` is a
/// session with nothing but a fresh id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSession {
    /// Free-form labels.
    pub labels: BTreeMap<String, String>,
    /// The task group (a task id, say): listed, deleted and pruned
    /// together.
    pub group: Option<String>,
    /// The size limit, bytes (else the root's `session.max_size`, else the
    /// engine's workspace quota).
    pub max_size: Option<u64>,
    /// Host directories its executions see read-only, besides the engine's.
    pub readonly: Vec<ReadonlyMount>,
    /// Files written into the workspace in the creation's transaction.
    pub context: Vec<ContextFile>,
}

fn invalid(what: &str, reason: String) -> RuntimeError {
    RuntimeError::Invalid(sandlog_core::CoreError::InvalidPayload {
        kind: what.to_owned(),
        schema: 0,
        reason,
    })
}

/// Refuses a group name that is empty, longer than [`GROUP_BYTES_MAX`] or
/// holds control characters (it is shown in tables and matched exactly).
pub fn check_group(group: &str) -> Result<()> {
    if group.is_empty() || group.len() > GROUP_BYTES_MAX || group.chars().any(char::is_control) {
        return Err(invalid(
            "group",
            format!(
                "{group:?}: a group is 1 to {GROUP_BYTES_MAX} bytes without control characters"
            ),
        ));
    }
    Ok(())
}

/// Parses a session size limit, bounded by the largest workspace quota.
pub fn parse_max_size(text: &str) -> Result<u64> {
    let bytes = parse_size(text).map_err(RuntimeError::Invalid)?;
    check_max_size(bytes)?;
    Ok(bytes)
}

fn check_max_size(bytes: u64) -> Result<()> {
    if bytes == 0 || bytes > WORKSPACE_BYTES_MAX {
        return Err(invalid(
            "max_size",
            format!(
                "{bytes} bytes: a session's size limit is above 0 and at most WORKSPACE_BYTES_MAX = {}",
                format_size(WORKSPACE_BYTES_MAX)
            ),
        ));
    }
    Ok(())
}

/// The default guest path of a read-only directory: `/data/<its name>`.
pub fn default_guest_path(host_path: &Path) -> Result<String> {
    let name = host_path
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| {
            invalid(
                "readonly",
                format!(
                    "{}: the directory's name is not UTF-8 (or it has none); give the guest path as GUEST=DIR",
                    host_path.display()
                ),
            )
        })?;
    Ok(format!("{READONLY_GUEST_PARENT}/{name}"))
}

impl Engine {
    /// Creates a session (S1): a fresh UUIDv4, its workspace directory, and
    /// `session.created`. The directory is made (and fsynced) first: a crash
    /// before the event leaves an empty orphan directory that `reconcile`
    /// quarantines, never an event without a directory.
    pub fn create_session(&self, labels: BTreeMap<String, String>) -> Result<SessionSummary> {
        self.create_session_with(crate::engine::sessions::NewSession {
            labels,
            ..Default::default()
        })
    }

    /// Creates a session (S1) with a group, a size limit, read-only
    /// directories and context files (see the module documentation).
    /// Everything is checked before anything is written: a bad group,
    /// limit, mount or context path, or context files past the size
    /// limit, fail with nothing created.
    pub fn create_session_with(&self, new: NewSession) -> Result<SessionSummary> {
        self.require_writable()?;
        check_labels(&new.labels)?;
        if let Some(group) = &new.group {
            check_group(group)?;
        }
        if let Some(max_size) = new.max_size {
            check_max_size(max_size)?;
        }
        let readonly = self.check_readonly(&new.readonly)?;
        let quota = self.session_quota(new.max_size, None)?;
        check_context(&new.context, quota)?;

        let session_id = SessionId::new_v4();
        let directory = self.layout.workspace(session_id);
        std::fs::create_dir(&directory).map_err(RuntimeError::io(format!(
            "creating {}",
            directory.display()
        )))?;
        sandlog_host::lease::prepare(&self.layout.root, session_id);
        let created = self.fill_and_record(session_id, &directory, &new, readonly);
        if let Err(error) = created {
            let _ = remove_dir_tree(&directory);
            let _ = std::fs::remove_file(sandlog_host::lease::lease_path(
                &self.layout.root,
                session_id,
            ));
            return Err(error);
        }
        tracing::info!(target: "sandlog::lifecycle", event = "session.created", %session_id, context_files = new.context.len(), "session created");
        self.maybe_checkpoint(false);
        self.session(session_id)
    }

    fn fill_and_record(
        &self,
        session_id: SessionId,
        directory: &Path,
        new: &NewSession,
        readonly: Vec<ReadonlyDir>,
    ) -> Result<()> {
        let workspace = Workspace::open(directory)?;
        for file in &new.context {
            // Each write is fsynced; the directory entries with the one
            // below.
            workspace.write(&file.path, &file.bytes)?;
        }
        fsync_dir(&self.layout.workspaces).map_err(RuntimeError::io(format!(
            "syncing {}",
            self.layout.workspaces.display()
        )))?;
        let created = SessionCreated {
            session_id,
            labels: new.labels.clone(),
            group: new.group.clone(),
            max_size: new.max_size,
            readonly,
            node: Some(self.node().to_owned()),
        };
        self.write_log(|write| -> Result<()> {
            let created = self.event(&Event::SessionCreated(created.clone()));
            let cause = Some(created.event_id.0);
            let mut events: Vec<NewEvent> = vec![created];
            for file in &new.context {
                let blob = write.put_blob(&file.bytes)?;
                let written = FileWritten::kept(
                    file.path.clone(),
                    file.bytes.len() as u64,
                    blob.hash,
                    WrittenBy::Host,
                );
                let mut event = self.event(&Event::FileWritten(written));
                event.causation_id = cause;
                events.push(event);
            }
            write.append(session_id.stream(), ExpectedVersion::NoStream, &events)?;
            Ok(())
        })
    }

    /// Checks read-only directories declared at creation: each an existing
    /// directory named by an absolute UTF-8 path, seen at a guest path that
    /// overlaps neither the workspace nor another mount (the engine's
    /// included), within the sandbox's mount limit.
    fn check_readonly(&self, mounts: &[ReadonlyMount]) -> Result<Vec<ReadonlyDir>> {
        let mut declared = Vec::with_capacity(mounts.len());
        for mount in mounts {
            let canonical = std::fs::canonicalize(&mount.host_path).map_err(|error| {
                invalid(
                    "readonly",
                    format!(
                        "{}: {error}; give an existing directory",
                        mount.host_path.display()
                    ),
                )
            })?;
            if !canonical.is_dir() {
                return Err(invalid(
                    "readonly",
                    format!(
                        "{} is not a directory; give a directory",
                        mount.host_path.display()
                    ),
                ));
            }
            let host_path = canonical.to_str().ok_or_else(|| {
                invalid(
                    "readonly",
                    format!(
                        "{}: the path is not UTF-8; link it from a UTF-8 path",
                        canonical.display()
                    ),
                )
            })?;
            declared.push(ReadonlyDir {
                host_path: host_path.to_owned(),
                guest_path: mount.guest_path.clone(),
            });
        }
        let mut request = RunRequest::new(&self.layout.workspaces);
        request.readonly_mounts = self.readonly_mounts(&declared);
        sandlog_sandbox::validate_request(&request).map_err(RuntimeError::Sandbox)?;
        Ok(declared)
    }

    /// The read-only mounts of a session's executions: the engine's, then
    /// the session's own.
    pub(crate) fn readonly_mounts(&self, declared: &[ReadonlyDir]) -> Vec<ReadonlyMount> {
        let mut mounts = self.options.readonly_mounts.clone();
        mounts.extend(declared.iter().map(|dir| ReadonlyMount {
            host_path: PathBuf::from(&dir.host_path),
            guest_path: dir.guest_path.clone(),
        }));
        mounts
    }

    /// The root's default session size limit (`session.max_size`), if set.
    pub fn default_max_size(&self) -> Result<Option<u64>> {
        match self.setting(SESSION_MAX_SIZE_SETTING)? {
            Some(text) => parse_max_size(&text).map(Some),
            None => Ok(None),
        }
    }

    /// The bytes a session's workspace may hold: its own size limit, else
    /// the root's `session.max_size`, else the engine's workspace quota.
    /// A `requested` quota (one execution's) applies below a session or
    /// root limit, and replaces the engine's default.
    pub fn session_quota(&self, max_size: Option<u64>, requested: Option<u64>) -> Result<u64> {
        let limit = match max_size {
            Some(limit) => Some(limit),
            None => self.default_max_size()?,
        };
        Ok(match (limit, requested) {
            (Some(limit), Some(requested)) => limit.min(requested),
            (Some(limit), None) => limit,
            (None, Some(requested)) => requested,
            (None, None) => self.options.limits.workspace_bytes_max,
        })
    }

    /// Sessions, optionally of one status and one task group.
    pub fn sessions_in(
        &self,
        status: Option<sandlog_projections::SessionStatus>,
        group: Option<&str>,
    ) -> Result<Vec<SessionSummary>> {
        Ok(sandlog_sqlite::query::sessions_where(
            &self.store,
            status,
            group,
        )?)
    }

    /// The workspace directory of an active session, for a trusted agent
    /// to work in natively (its cwd). What it changes there is recorded by
    /// `session sync` or by running it through `run`.
    pub fn session_path(&self, session_id: SessionId) -> Result<PathBuf> {
        let session = self.session(session_id)?;
        if !session.status.has_workspace() {
            return Err(RuntimeError::SessionNotActive {
                session_id,
                status: session.status,
            });
        }
        Ok(self.layout.workspace(session_id))
    }
}

/// Refuses context files past [`CONTEXT_FILES_MAX`] or
/// [`CONTEXT_BYTES_MAX`], two files at one path or one inside another, and
/// files that together pass the session's size limit `quota`.
fn check_context(context: &[ContextFile], quota: u64) -> Result<()> {
    if context.len() > CONTEXT_FILES_MAX {
        return Err(invalid(
            "context",
            format!(
                "{} context files; at most CONTEXT_FILES_MAX = {CONTEXT_FILES_MAX} (write more with `files put` after creating the session)",
                context.len()
            ),
        ));
    }
    let mut paths = BTreeSet::new();
    let mut total: u64 = 0;
    for file in context {
        if !paths.insert(&file.path) {
            return Err(invalid(
                "context",
                format!("two context files at {}; give each its own DEST", file.path),
            ));
        }
        total = total.saturating_add(file.bytes.len() as u64);
    }
    if let Some((outer, inner)) = paths.iter().find_map(|outer| {
        paths
            .iter()
            .find(|inner| *inner != outer && inner.starts_with(outer))
            .map(|inner| (outer, inner))
    }) {
        return Err(invalid(
            "context",
            format!("context file {inner} would be inside context file {outer}"),
        ));
    }
    if total > CONTEXT_BYTES_MAX {
        return Err(invalid(
            "context",
            format!(
                "context files of {} in all; at most CONTEXT_BYTES_MAX = {} (write larger files with `files put`)",
                format_size(total),
                format_size(CONTEXT_BYTES_MAX)
            ),
        ));
    }
    if total > quota {
        return Err(RuntimeError::ContextTooLarge {
            would_be: total,
            max_size: quota,
        });
    }
    Ok(())
}
