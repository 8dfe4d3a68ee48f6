//! The filesystem applier: reconciles the disk to the projected state (C1).
//!
//! `reconcile` = observe the disk, [`plan`](plan::plan) against the
//! projections (pure), then execute each action and record it as an event.
//! It finishes pending intents, moves orphan UUID-named directories into
//! `quarantine/` (or purges them on request: unknown data is evidence),
//! leaves other entries alone (P5), records drift, and a second run plans
//! nothing.

pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use sandlog_core::event::{
    Drift, DriftSplit, Event, ReconcileRunCompleted, WorkspaceDriftDetected, WorkspaceOrphanPurged,
    WorkspaceOrphanQuarantined,
};
use sandlog_core::limits::{DRIFT_EVENT_BYTES_MAX, DRIFT_ITEMS_MAX, DRIFT_ITEMS_PER_EVENT_MAX};
use sandlog_core::{Hash, SessionId, StreamId};
use sandlog_eventstore::{ExpectedVersion, LogFilter};
use sandlog_sqlite::query;
use serde::Serialize;
use uuid::Uuid;

use self::plan::{Action, Intent, Observed, ProjectedSession};
use crate::engine::Engine;
use crate::lifecycle::Progress;
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::{Workspace, dir_size, fsync_dir, remove_dir_tree};

/// How young a UUID-named directory with no session may be before it is
/// judged an orphan. Creating a session makes its directory a moment before
/// its event; a reconcile in another process in that moment must not
/// quarantine it.
pub const ORPHAN_GRACE_DEFAULT: Duration = Duration::from_secs(60);

/// How to reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// Plan only.
    pub dry_run: bool,
    /// Delete orphans instead of quarantining them.
    pub purge_orphans: bool,
    /// Also hash every live workspace's files against the projection.
    pub deep: bool,
    /// See [`ORPHAN_GRACE_DEFAULT`].
    pub orphan_grace: Duration,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            dry_run: false,
            purge_orphans: false,
            deep: false,
            orphan_grace: ORPHAN_GRACE_DEFAULT,
        }
    }
}

/// What a reconcile run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// The planned actions.
    pub actions: Vec<Action>,
    /// Orphan directory names handled (or, dry, to handle).
    pub orphans: Vec<String>,
    /// Pending intents finished.
    pub intents_finished: u64,
    /// Drift recorded.
    pub drift: Vec<Action>,
    /// Entries left alone (not UUID-named).
    pub ignored: Vec<String>,
    /// Per-action errors (the run goes on).
    pub errors: BTreeMap<String, String>,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// Pending intents still failing after this run (each recorded once
    /// as `session.intent.failed`).
    pub failed_intents: Vec<crate::lifecycle::FailedIntent>,
    /// Pruned workspaces whose bytes this run freed from `trash/` (see
    /// [`crate::trash`]); nothing in a dry run.
    pub reclaimed: crate::trash::Reclaimed,
}

/// The hash `reconcile --deep` gives a file it did not read because of its
/// bounds (see [`Engine::deep_hashes`]): the file is reported changed
/// (`actual` all zeros).
pub use sandlog_core::NOT_HASHED;

impl Engine {
    /// Observes the disk.
    fn observe(
        &self,
        projected: &BTreeMap<SessionId, ProjectedSession>,
        foreign: &BTreeSet<SessionId>,
        options: &ReconcileOptions,
    ) -> Result<Observed> {
        let mut observed = Observed::default();
        let entries = std::fs::read_dir(&self.layout.workspaces).map_err(RuntimeError::io(
            format!("reading {}", self.layout.workspaces.display()),
        ))?;
        let now = SystemTime::now();
        for entry in entries {
            let entry = entry.map_err(RuntimeError::io(format!(
                "reading {}",
                self.layout.workspaces.display()
            )))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().is_ok_and(|file_type| file_type.is_dir());
            let session_id = match SessionId::parse(&name) {
                // Another node's session (a shared log's) is that node's
                // to judge: its directory here is left alone, never taken
                // for an orphan.
                Ok(id) if is_dir && !foreign.contains(&id) => id,
                _ => {
                    observed.ignored.insert(name);
                    continue;
                }
            };
            let known = projected
                .get(&session_id)
                .is_some_and(|session| session.status.has_workspace());
            let young = !known
                && entry
                    .metadata()
                    .and_then(|metadata| metadata.modified())
                    .is_ok_and(|modified| {
                        now.duration_since(modified).unwrap_or_default() < options.orphan_grace
                    });
            if young {
                observed.young_dirs.insert(session_id);
            } else {
                observed.session_dirs.insert(session_id);
            }
            if options.deep && known {
                let workspace = Workspace::open(&entry.path())?;
                observed
                    .files
                    .insert(session_id, self.deep_hashes(&workspace)?);
            }
        }
        Ok(observed)
    }

    /// The files of a live workspace and their hashes, for `--deep`,
    /// within the bounds an execution's scan has: the scan's entry and
    /// depth limits, a hash budget of the engine's workspace quota and a
    /// deadline of the engine's timeout (at least `SCAN_TIME_MIN`). A
    /// file left unread by the bounds (a huge or sparse file, one past the
    /// budget or the deadline) is given [`NOT_HASHED`], so it shows as
    /// changed without being read: what a guest leaves behind cannot make
    /// a reconcile run for ever.
    fn deep_hashes(
        &self,
        workspace: &Workspace,
    ) -> Result<BTreeMap<sandlog_core::WorkspacePath, Hash>> {
        let limits = &self.options.limits;
        let deadline = Instant::now() + limits.timeout.max(sandlog_sandbox::limits::SCAN_TIME_MIN);
        let scan = workspace.scan_bounded(&sandlog_host::workspace::ScanLimits {
            entries_max: limits.scan_entries_max,
            deadline: Some(deadline),
            ..sandlog_host::workspace::ScanLimits::default()
        })?;
        let mut budget = limits.workspace_bytes_max;
        let mut files = BTreeMap::new();
        for (path, scanned) in scan.files {
            let hash = if scanned.size <= budget && Instant::now() < deadline {
                match workspace.hash_bounded(&path, budget)? {
                    Some((hash, read)) => {
                        budget = budget.saturating_sub(read);
                        hash
                    }
                    None => NOT_HASHED,
                }
            } else {
                NOT_HASHED
            };
            files.insert(path, hash);
        }
        Ok(files)
    }

    /// This node's sessions as the log projects them, and the ids of other
    /// nodes' sessions (whose workspaces are on their disks).
    fn projected(
        &self,
        deep: bool,
    ) -> Result<(BTreeMap<SessionId, ProjectedSession>, BTreeSet<SessionId>)> {
        let mut projected = BTreeMap::new();
        let mut foreign = BTreeSet::new();
        for session in query::sessions(&self.store, None)? {
            if !self.is_own(session.node.as_deref()) {
                foreign.insert(session.session_id);
                continue;
            }
            let files = if deep && session.status.has_workspace() {
                Some(
                    query::files(&self.store, session.session_id, None)?
                        .into_iter()
                        .map(|file| (file.path, file.blake3))
                        .collect(),
                )
            } else {
                None
            };
            projected.insert(
                session.session_id,
                ProjectedSession {
                    status: session.status,
                    files,
                    last_drift: Vec::new(),
                },
            );
        }
        Ok((projected, foreign))
    }

    /// The drift last recorded for a session (the parts of a split
    /// detection put back together; only the recorded items of a
    /// summarised one) and the digest of the whole detection.
    fn last_drift(&self, session_id: SessionId) -> Result<(Vec<Drift>, Option<Hash>)> {
        let filter = LogFilter {
            stream: Some(session_id.stream()),
            kinds: vec!["workspace.drift.detected".to_owned()],
            ..LogFilter::default()
        };
        let mut last = (Vec::new(), None);
        let mut parts: Vec<Drift> = Vec::new();
        for envelope in self.store.query(filter) {
            if let Ok(Some(Event::WorkspaceDriftDetected(detected))) = envelope?.event() {
                match detected.split {
                    None => {
                        let digest = drift_digest(&detected.drift);
                        last = (detected.drift, Some(digest));
                    }
                    Some(split) => {
                        if split.part == 0 {
                            parts.clear();
                        }
                        parts.extend(detected.drift);
                        if split.part.saturating_add(1) >= split.parts {
                            last = (std::mem::take(&mut parts), Some(split.items_digest));
                        }
                    }
                }
            }
        }
        Ok(last)
    }

    /// Plans what reconcile would do now.
    pub fn reconcile_plan(&self, options: &ReconcileOptions) -> Result<(Vec<Action>, Observed)> {
        self.refresh()?;
        let (mut projected, foreign) = self.projected(options.deep)?;
        let observed = self.observe(&projected, &foreign, options)?;
        let mut actions = plan::plan(&projected, &observed);
        // Drift is compared with the last recorded drift only where drift
        // was found (reading a stream per session would cost the common
        // nothing-to-do run its speed).
        if actions
            .iter()
            .any(|action| matches!(action, Action::RecordDrift { .. }))
        {
            let mut last_digests = BTreeMap::new();
            for action in &actions {
                if let Action::RecordDrift { session_id, .. } = action
                    && let Some(session) = projected.get_mut(session_id)
                {
                    let (drift, digest) = self.last_drift(*session_id)?;
                    session.last_drift = drift;
                    last_digests.insert(*session_id, digest);
                }
            }
            actions = plan::plan(&projected, &observed);
            // A summarised detection cannot be put back together from its
            // events; its digest says whether the drift is the same.
            actions.retain(|action| match action {
                Action::RecordDrift { session_id, drift } => {
                    last_digests.get(session_id).copied().flatten() != Some(drift_digest(drift))
                }
                _ => true,
            });
        }
        Ok((actions, observed))
    }

    /// Reconciles the disk to the log (C1).
    pub fn reconcile(
        &self,
        options: &ReconcileOptions,
        progress: Progress<'_>,
    ) -> Result<ReconcileReport> {
        let started = Instant::now();
        let (actions, observed) = self.reconcile_plan(options)?;
        let mut report = ReconcileReport {
            actions: actions.clone(),
            orphans: Vec::new(),
            intents_finished: 0,
            drift: Vec::new(),
            ignored: observed.ignored.iter().cloned().collect(),
            errors: BTreeMap::new(),
            dry_run: options.dry_run,
            duration_ms: 0,
            failed_intents: Vec::new(),
            reclaimed: crate::trash::Reclaimed::default(),
        };
        for action in &actions {
            match action {
                Action::Orphan { dir_name, .. } => report.orphans.push(dir_name.to_string()),
                Action::RecordDrift { .. } => report.drift.push(action.clone()),
                Action::FinishIntent { .. } => {}
            }
        }
        // What a prune moved to `trash/` and a crash or an ended process
        // left there is freed now; pending intents finished below may add
        // to it, which the next pass frees.
        if !options.dry_run {
            match self.reclaim_trash() {
                Ok(reclaimed) => report.reclaimed = reclaimed,
                Err(error) => {
                    report
                        .errors
                        .insert(crate::layout::TRASH_DIR.to_owned(), error.to_string());
                }
            }
        }
        if options.dry_run || actions.is_empty() {
            report.failed_intents = self.failed_intents()?;
            report.duration_ms = started.elapsed().as_millis() as u64;
            return Ok(report);
        }
        let run_id = Uuid::new_v4();
        let total = actions.len() as u64;
        for (index, action) in actions.iter().enumerate() {
            progress(index as u64, total);
            if let Err(error) = self.execute_action(action, options, run_id, &mut report) {
                let key = match action {
                    Action::FinishIntent { session_id, .. }
                    | Action::RecordDrift { session_id, .. } => session_id.to_string(),
                    Action::Orphan { dir_name, .. } => dir_name.to_string(),
                };
                tracing::error!(target: "sandlog::applier", %key, %error, "reconcile action failed");
                report.errors.insert(key, error.to_string());
            }
        }
        progress(total, total);
        report.failed_intents = self.failed_intents()?;
        report.duration_ms = started.elapsed().as_millis() as u64;
        let completed = Event::ReconcileRunCompleted(ReconcileRunCompleted {
            run_id,
            intents_finished: report.intents_finished,
            orphans: report.orphans.len() as u64,
            drift: report.drift.len() as u64,
            errors: report.errors.len() as u64,
            duration_us: started.elapsed().as_micros() as u64,
        });
        let mut event = self
            .event(&completed)
            .correlated(self.run_correlation(run_id));
        event.actor = "applier".to_owned();
        self.append_log(StreamId::System, ExpectedVersion::Any, &[event])?;
        Ok(report)
    }

    fn execute_action(
        &self,
        action: &Action,
        options: &ReconcileOptions,
        run_id: Uuid,
        report: &mut ReconcileReport,
    ) -> Result<()> {
        let applier_event = |event: &Event| {
            let mut new = self.event(event).correlated(self.run_correlation(run_id));
            new.actor = "applier".to_owned();
            new
        };
        match action {
            Action::FinishIntent { session_id, intent } => {
                let session = self.session(*session_id)?;
                let status = match intent {
                    Intent::Prune => sandlog_projections::SessionStatus::Pruning,
                    Intent::Delete => sandlog_projections::SessionStatus::Deleting,
                };
                if session.status == status
                    && self.finish_intent(*session_id, status, session.version)?
                {
                    report.intents_finished += 1;
                }
            }
            Action::Orphan { dir_name, .. } => {
                let name = dir_name.to_string();
                let source = self.layout.workspaces.join(&name);
                let (bytes, event) = if options.purge_orphans {
                    let bytes = remove_dir_tree(&source)
                        .map_err(RuntimeError::io(format!("purging {}", source.display())))?;
                    let event = Event::WorkspaceOrphanPurged(WorkspaceOrphanPurged {
                        dir_name: name.clone(),
                        bytes,
                    });
                    (bytes, event)
                } else {
                    let bytes = dir_size(&source)
                        .map_err(RuntimeError::io(format!("measuring {}", source.display())))?;
                    std::fs::create_dir_all(&self.layout.quarantine).map_err(RuntimeError::io(
                        format!("creating {}", self.layout.quarantine.display()),
                    ))?;
                    let stamp = self.options.clock.now().unix_micros();
                    let target_name = format!("{name}.{stamp}");
                    let target = self.layout.quarantine.join(&target_name);
                    std::fs::rename(&source, &target).map_err(RuntimeError::io(format!(
                        "moving {} to {}",
                        source.display(),
                        target.display()
                    )))?;
                    fsync_dir(&self.layout.quarantine)
                        .map_err(RuntimeError::io("syncing quarantine"))?;
                    let event = Event::WorkspaceOrphanQuarantined(WorkspaceOrphanQuarantined {
                        dir_name: name.clone(),
                        bytes,
                        moved_to: format!("{}/{target_name}", sandlog_host::layout::QUARANTINE_DIR),
                    });
                    (bytes, event)
                };
                fsync_dir(&self.layout.workspaces)
                    .map_err(RuntimeError::io("syncing workspaces"))?;
                self.append_log(
                    StreamId::System,
                    ExpectedVersion::Any,
                    &[applier_event(&event)],
                )?;
                tracing::info!(target: "sandlog::applier", dir = %name, bytes, purged = options.purge_orphans, "orphan handled");
            }
            Action::RecordDrift { session_id, drift } => {
                let events: Vec<_> = drift_events(drift)
                    .into_iter()
                    .map(|detected| applier_event(&Event::WorkspaceDriftDetected(detected)))
                    .collect();
                self.append_log(session_id.stream(), ExpectedVersion::Any, &events)?;
                tracing::warn!(target: "sandlog::applier", %session_id, items = drift.len(), "drift recorded");
            }
        }
        Ok(())
    }
}

/// blake3 of a drift list as a JSON array: what [`DriftSplit::items_digest`]
/// covers.
pub fn drift_digest(drift: &[Drift]) -> Hash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"[");
    for (index, item) in drift.iter().enumerate() {
        if index > 0 {
            hasher.update(b",");
        }
        hasher.update(&drift_item_bytes(item));
    }
    hasher.update(b"]");
    Hash(*hasher.finalize().as_bytes())
}

/// A drift item as JSON. Drift items hold only strings and hashes, which
/// always serialise; an empty encoding would only weaken the digest.
fn drift_item_bytes(item: &Drift) -> Vec<u8> {
    serde_json::to_vec(item).unwrap_or_default()
}

/// The `workspace.drift.detected` payloads recording `drift`: one event as
/// before when it fits, else parts of at most [`DRIFT_ITEMS_PER_EVENT_MAX`]
/// items and [`DRIFT_EVENT_BYTES_MAX`] bytes, holding at most
/// [`DRIFT_ITEMS_MAX`] items in all (past it the detection is summarised:
/// each part carries the total and the digest of every item).
pub fn drift_events(drift: &[Drift]) -> Vec<WorkspaceDriftDetected> {
    let mut groups: Vec<Vec<Drift>> = Vec::new();
    let mut current: Vec<Drift> = Vec::new();
    let mut current_bytes = 0usize;
    for item in drift.iter().take(DRIFT_ITEMS_MAX) {
        let bytes = drift_item_bytes(item).len() + 1;
        if !current.is_empty()
            && (current.len() >= DRIFT_ITEMS_PER_EVENT_MAX
                || current_bytes + bytes > DRIFT_EVENT_BYTES_MAX)
        {
            groups.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
        current_bytes += bytes;
        current.push(item.clone());
    }
    if !current.is_empty() || groups.is_empty() {
        groups.push(current);
    }
    if groups.len() == 1 && drift.len() <= DRIFT_ITEMS_MAX {
        return groups
            .into_iter()
            .map(|drift| WorkspaceDriftDetected { drift, split: None })
            .collect();
    }
    let parts = u32::try_from(groups.len()).unwrap_or(u32::MAX);
    let items_digest = drift_digest(drift);
    let items_total = drift.len() as u64;
    groups
        .into_iter()
        .enumerate()
        .map(|(part, items)| WorkspaceDriftDetected {
            drift: items,
            split: Some(DriftSplit {
                part: u32::try_from(part).unwrap_or(u32::MAX),
                parts,
                items_total,
                items_digest,
            }),
        })
        .collect()
}
