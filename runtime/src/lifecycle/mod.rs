//! Destroying data, two-phase: prune by policy, delete a session, and
//! finishing intents a crash left pending.
//!
//! Every deletion is an intent (`session.prune.requested`,
//! `session.delete.requested`) appended with the session's stream version as
//! the expected version, then the removal, then a completion event. An
//! execution or write that landed after the candidate was read makes the
//! intent's append fail, so the session is kept (P7). A crash between
//! intent and completion is finished by [`Engine::finish_pending_intents`],
//! which `Engine::open` runs.
//!
//! Destroying holds the session's exclusive [`Lease`], so a workspace is
//! never removed under a running execution: prune skips such a session as
//! [`BUSY_SKIP_REASON`], delete waits a bounded time and then fails with
//! [`RuntimeError::Busy`]. An intent that cannot be finished is recorded
//! once as `session.intent.failed`, stays pending, and never keeps the
//! root from opening or other sessions from working.

pub mod adopt;
pub mod applier;
mod intents;
pub mod migrate;
mod reclaim;
pub(crate) mod removal;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use sandlog_core::event::{
    Event, PruneRunCompleted, PruneRunStarted, SessionPruneFailed, SessionPruneRequested,
    SessionPruned,
};
use sandlog_core::human::format_size;
use sandlog_core::{NewEvent, PrunePolicy, SessionId, StreamId, Timestamp};
use sandlog_eventstore::{EventStoreError, ExpectedVersion};
use sandlog_projections::SessionStatus;
use sandlog_projections::prune::PruneCandidate;
use sandlog_sqlite::query;
use serde::Serialize;
use uuid::Uuid;

use crate::engine::Engine;
use crate::lifecycle::removal::{RemovalPool, Ticket, before_remove, sync_workspaces};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::lease::{Lease, LeaseMode};

/// The reason prune gives for a session it kept because another execution,
/// write or delete held its lease.
pub const BUSY_SKIP_REASON: &str = "busy";

/// A pending prune or delete intent whose last attempt to finish failed
/// (for `reconcile` and `stats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedIntent {
    /// The session, still `pruning` or `deleting`.
    pub session_id: SessionId,
    /// `prune` or `delete`.
    pub intent: String,
    /// What went wrong, as recorded.
    pub error: String,
    /// When the failure was first recorded.
    pub recorded_at: Timestamp,
    /// Position of the `session.intent.failed` event.
    pub position: u64,
}

/// The intent name recorded for a pending status.
fn intent_name(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Pruning => "prune",
        _ => "delete",
    }
}

/// Why a session was not pruned although it was selected or considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The session.
    pub session_id: SessionId,
    /// Why.
    pub reason: String,
}

/// What a prune run did (P3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Sessions deleted (or, in a dry run, that would be).
    pub deleted_sessions: Vec<SessionId>,
    /// Sessions skipped: legacy ones, and ones used during the run.
    pub skipped_sessions: Vec<SessionId>,
    /// Why each was skipped.
    pub skipped_reasons: BTreeMap<SessionId, String>,
    /// Bytes planned or reclaimed: the deleted workspaces' projected sizes,
    /// whose bytes a background pass frees after the run moved them to
    /// `trash/` (recorded as `workspace.reclaimed`, see [`crate::trash`]),
    /// or the sizes measured as a workspace was removed in place (no
    /// usable trash). In a dry run, the projected sizes.
    pub reclaimed_bytes: u64,
    /// Per-session errors; the run went on past each (P4).
    pub errors: BTreeMap<SessionId, String>,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// The candidates, with age and size.
    pub candidates: Vec<PruneCandidate>,
    /// The run's id (nil for a dry run).
    pub run_id: Uuid,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
}

impl PruneReport {
    /// `3 sessions deleted, 1 skipped, 1.5 MiB reclaimed`; in a dry run
    /// `3 sessions would be deleted, 1 skipped, 1.5 MiB would be reclaimed
    /// (dry run)`.
    pub fn summary(&self) -> String {
        let deleted = self.deleted_sessions.len();
        let (deleted_verb, reclaimed_verb) = if self.dry_run {
            ("would be deleted", "would be reclaimed")
        } else {
            ("deleted", "reclaimed")
        };
        let mut text = format!(
            "{deleted} {} {deleted_verb}, {} skipped, {} {reclaimed_verb}",
            if deleted == 1 { "session" } else { "sessions" },
            self.skipped_sessions.len(),
            format_size(self.reclaimed_bytes)
        );
        if !self.errors.is_empty() {
            text.push_str(&format!(", {} failed", self.errors.len()));
        }
        if self.dry_run {
            text.push_str(" (dry run)");
        }
        text
    }
}

/// What deleting a session did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// The session.
    pub session_id: SessionId,
    /// Bytes measured just before deletion.
    pub reclaimed_bytes: u64,
}

/// Progress of a long operation, for progress bars.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Most sessions one prune batch destroys. A batch's intents are one
/// append and its completions another (each shared with a neighbouring
/// batch's), so the commits (each an fsync of the log) and the one fsync
/// of `workspaces/` are shared by the whole batch: the bigger the batch,
/// the fewer of them a run makes and the fewer pages it writes. Past this
/// the log's part of a run no longer shrinks noticeably, and a run of a
/// few thousand sessions would lose the overlap of one batch's removals
/// with its neighbours' appends.
pub const PRUNE_BATCH_SESSIONS_MAX: usize = 512;

/// Fewest sessions one prune batch destroys, however few descriptors the
/// process may open.
pub const PRUNE_BATCH_SESSIONS_MIN: usize = 16;

/// Batches whose leases a prune run holds at once (see [`Engine::prune`]):
/// one being recorded, one being removed, one whose lease files are being
/// removed, and the one just taken. Each held session's lease is one open
/// file.
pub const PRUNE_BATCHES_HELD: usize = 4;

/// The part of the process's open-descriptor limit a prune's leases may
/// take: half. The other half is left to the embedding application,
/// SQLite's files and the removal threads (a few descriptors each).
const PRUNE_DESCRIPTOR_SHARE: u64 = 2;

/// The batch size of a prune run in a process that may open `limit`
/// descriptors (`None`: unlimited): [`PRUNE_BATCHES_HELD`] batches take at
/// most half the limit, within [`PRUNE_BATCH_SESSIONS_MIN`] and
/// [`PRUNE_BATCH_SESSIONS_MAX`]. With the usual soft limit of 1,024 a
/// batch is 128 sessions; from 4,096 on it is the maximum.
pub fn prune_batch_sessions_for(limit: Option<u64>) -> usize {
    let Some(limit) = limit else {
        return PRUNE_BATCH_SESSIONS_MAX;
    };
    let per_batch = limit / PRUNE_DESCRIPTOR_SHARE / PRUNE_BATCHES_HELD as u64;
    usize::try_from(per_batch)
        .unwrap_or(usize::MAX)
        .clamp(PRUNE_BATCH_SESSIONS_MIN, PRUNE_BATCH_SESSIONS_MAX)
}

/// The soft descriptor limit at which a prune's batches are
/// [`PRUNE_BATCH_SESSIONS_MAX`] sessions.
pub const PRUNE_DESCRIPTORS_WANTED: u64 =
    PRUNE_DESCRIPTOR_SHARE * PRUNE_BATCHES_HELD as u64 * PRUNE_BATCH_SESSIONS_MAX as u64;

/// Raises this process's soft limit of open descriptors to
/// [`PRUNE_DESCRIPTORS_WANTED`] if it is lower and the hard limit allows
/// (up to the hard limit otherwise), so that a prune runs in its largest
/// batches. For programs, not libraries: the limit is the whole
/// process's, so only a `main` should change it. Returns the soft limit
/// now in force (`None`: unlimited).
pub fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    // No soft limit: nothing to raise.
    let current = limit.current?;
    let wanted = limit.maximum.map_or(PRUNE_DESCRIPTORS_WANTED, |hard| {
        hard.min(PRUNE_DESCRIPTORS_WANTED)
    });
    if wanted <= current {
        return Some(current);
    }
    let raised = Rlimit {
        current: Some(wanted),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => Some(wanted),
        Err(error) => {
            tracing::debug!(%error, current, wanted, "raising the descriptor limit failed; prune batches stay smaller");
            Some(current)
        }
    }
}

/// The batch size of a prune run in this process, by its current (soft)
/// limit of open descriptors: see [`prune_batch_sessions_for`].
/// [`EngineOptions::prune_batch_sessions`](crate::EngineOptions) overrides
/// it.
pub fn prune_batch_sessions() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    prune_batch_sessions_for(limit.current)
}

/// Most threads doing one step of a batch's filesystem work at once
/// (taking leases, removing workspaces, removing lease files, preparing
/// adopted workspaces). Each item is a few metadata operations whose
/// latency (the filesystem's journal, a busy disk, a busy CPU to wake up
/// on) is mostly waiting, so many in flight overlap it even on few cores;
/// removals in one directory still take its lock in turn, so more threads
/// than this only add contention.
pub const FS_THREADS_MAX: usize = 16;

/// Most threads removing workspaces at once (the prune's removal pool,
/// its own thread included). A removal mostly waits: on
/// a file system mounted with `discard`, freeing a file's or directory's
/// blocks discards them synchronously, so several removals in flight
/// overlap those waits even on few cores. Each frees its directory after
/// the `rmdir` has released `workspaces/` (see `tree::remove_tree`), so
/// they do not queue on that directory's lock; past this many they only
/// compete with the appends for the CPU.
pub const REMOVE_THREADS_MAX: usize = 16;

/// Fewest items a thread is given: below that, starting the thread costs
/// more than it saves.
const ITEMS_PER_THREAD_MIN: usize = 8;

/// How many threads `items` items are worth, at most `threads_max`: each
/// gets at least [`ITEMS_PER_THREAD_MIN`].
pub(crate) fn in_parallel_threads(items: usize, threads_max: usize) -> usize {
    threads_max.min(items / ITEMS_PER_THREAD_MIN).max(1)
}

/// Runs `work` on every item, on up to `threads_max` threads (the calling
/// one included; each given at least [`ITEMS_PER_THREAD_MIN`] items);
/// returns the results in the order of the items. A thread that cannot be
/// started leaves its share to the others.
pub(crate) fn in_parallel<T: Send, R: Send>(
    items: Vec<T>,
    threads_max: usize,
    work: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let threads = threads_max.min(items.len() / ITEMS_PER_THREAD_MIN).max(1);
    if threads == 1 {
        return items.into_iter().map(work).collect();
    }
    let slots: Vec<Mutex<Option<T>>> = items
        .into_iter()
        .map(|item| Mutex::new(Some(item)))
        .collect();
    let results: Vec<Mutex<Option<R>>> = slots.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let run = || {
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let (Some(slot), Some(result)) = (slots.get(index), results.get(index)) else {
                break;
            };
            let item = slot
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            if let Some(item) = item {
                let done = work(item);
                *result
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(done);
            }
        }
    };
    // A worker that panics makes the scope panic when it ends: results are
    // never silently missing.
    std::thread::scope(|scope| {
        for _ in 1..threads {
            if let Err(error) = std::thread::Builder::new()
                .name("sandlog-fs".to_owned())
                .spawn_scoped(scope, run)
            {
                tracing::warn!(%error, "starting a worker thread failed; doing its share here");
                break;
            }
        }
        run();
    });
    results
        .into_iter()
        .filter_map(|result| {
            result
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        })
        .collect()
}

/// A prune candidate whose session this run holds: its in-process lock and
/// its exclusive lease.
struct Held<'a, 'l> {
    candidate: &'a PruneCandidate,
    lease: Lease,
    guard: MutexGuard<'l, ()>,
    /// The event id of its recorded intent, which its completion names as
    /// its cause.
    intent_id: Option<Uuid>,
}

/// Closes a removal pool when dropped, however the run ends, so that its
/// workers end too.
struct ClosePool<'p, 'a>(&'p RemovalPool<'a>);

impl Drop for ClosePool<'_, '_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// What every event of one prune run shares.
struct PruneRun {
    run_id: Uuid,
    /// The id of the run's start event, which every intent names as its
    /// cause.
    started_id: Uuid,
    correlation: Option<Uuid>,
    /// The policy's age threshold, recorded in every intent.
    threshold_us: u64,
}

/// One stream's part of a batch append.
type BatchEntry = (StreamId, ExpectedVersion, Vec<NewEvent>);

/// A prune batch whose completions are recorded: the leases of its
/// sessions whose terminal event is recorded (their files are removed by
/// the holder, after that event), and the in-process locks of all its
/// sessions, released after the lease files are removed.
#[derive(Default)]
struct Finished<'l> {
    leases: Vec<(SessionId, Lease)>,
    guards: Vec<MutexGuard<'l, ()>>,
}

impl Engine {
    /// Removes a session's workspace directory and fsyncs its parent;
    /// returns the bytes it held.
    pub(crate) fn remove_workspace(&self, session_id: SessionId) -> Result<u64> {
        let path = self.layout.workspace(session_id);
        before_remove(self.options.fault.as_ref(), session_id, &path)?;
        // By directory handle: any tree a guest can build (deeper than
        // PATH_MAX, say) is measured and removed with O(1) descriptors.
        let bytes = sandlog_host::workspace::remove_dir_tree(&path)
            .map_err(RuntimeError::io(format!("removing {}", path.display())))?;
        sync_workspaces(&self.layout)?;
        Ok(bytes)
    }

    /// Prunes by policy (P1–P7). With `dry_run`, appends nothing, deletes
    /// nothing, and lists exactly the sessions a real run would delete now.
    ///
    /// A real run works in batches (of
    /// [`EngineOptions::prune_batch_sessions`](crate::EngineOptions), by
    /// default [`prune_batch_sessions`]):
    /// it takes each session's lock and exclusive lease (a busy session is
    /// skipped), appends every intent in one transaction (each expecting
    /// the version the candidate was read at), removes the directories in
    /// parallel by renaming them into `trash/`, fsyncs `workspaces/` and
    /// `trash/` once, appends every completion in one transaction, and
    /// then removes the lease files; a background pass frees the moved
    /// workspaces' bytes ([`crate::trash`]). The batches
    /// overlap: while one batch's directories are removed, the previous
    /// one's completions and the next one's intents are appended in one
    /// transaction. A crash anywhere leaves each session either untouched
    /// (its intent was not committed) or pending (committed), which
    /// `Engine::open` finishes. `progress` is first called before any
    /// session is taken.
    pub fn prune(
        &self,
        policy: &PrunePolicy,
        dry_run: bool,
        progress: Progress<'_>,
    ) -> Result<PruneReport> {
        let started = Instant::now();
        let now = self.options.clock.now();
        // An earlier run's reclaim, if it ended, is recorded before this
        // run's events.
        self.settle_reclaim(false);
        // A node of a shared log prunes the workspaces on its disk: its
        // own sessions, counted alone against the retention limits.
        self.refresh()?;
        let scoped;
        let policy = if self.is_shared() && policy.node.is_none() {
            scoped = PrunePolicy {
                node: Some(self.node().to_owned()),
                ..policy.clone()
            };
            &scoped
        } else {
            policy
        };
        let plan = query::prune_candidates(&self.store, policy, now)?;
        let run_id = if dry_run { Uuid::nil() } else { Uuid::new_v4() };
        let mut report = PruneReport {
            deleted_sessions: Vec::new(),
            skipped_sessions: Vec::new(),
            skipped_reasons: BTreeMap::new(),
            reclaimed_bytes: 0,
            errors: BTreeMap::new(),
            dry_run,
            candidates: plan.candidates.clone(),
            run_id,
            duration_ms: 0,
        };
        tracing::info!(target: "sandlog::prune", event = "session.prune.started", %run_id, candidates = plan.candidates.len(), dry_run, "prune started");
        for skipped in &plan.skipped {
            tracing::info!(target: "sandlog::prune", event = "session.prune.skipped", session_id = %skipped.session_id, reason = %skipped.reason, "skipped");
            report.skipped_sessions.push(skipped.session_id);
            report
                .skipped_reasons
                .insert(skipped.session_id, skipped.reason.clone());
        }
        if dry_run {
            for candidate in &plan.candidates {
                tracing::info!(target: "sandlog::prune", event = "session.prune.candidate", session_id = %candidate.session_id, age_us = candidate.age_us, bytes = candidate.bytes, "candidate (dry run)");
                report.deleted_sessions.push(candidate.session_id);
                report.reclaimed_bytes += candidate.bytes;
            }
            report.duration_ms = started.elapsed().as_millis() as u64;
            tracing::info!(target: "sandlog::prune", event = "session.prune.completed", summary = %report.summary(), "prune completed");
            self.metrics.prune_run(true, 0);
            return Ok(report);
        }
        let correlation = self.run_correlation(run_id);
        let started_event = self
            .event(&Event::PruneRunStarted(PruneRunStarted {
                run_id,
                policy: policy.clone(),
                candidates: plan.candidates.len() as u64,
            }))
            .correlated(correlation);
        // Every event of the run names the one that caused it: the intents
        // and the run's completion this start, each session's completion
        // its intent.
        let started_id = started_event.event_id.0;
        self.append_log(
            StreamId::System,
            ExpectedVersion::Any,
            std::slice::from_ref(&started_event),
        )?;
        let total = plan.candidates.len() as u64;
        progress(0, total);
        let done = AtomicU64::new(0);
        let advance = || {
            let done = done.fetch_add(1, Ordering::Relaxed) + 1;
            progress(done.min(total), total);
        };
        let batch_sessions = self
            .options
            .prune_batch_sessions
            .unwrap_or_else(prune_batch_sessions)
            .max(1);
        let locks: Vec<_> = plan
            .candidates
            .iter()
            .map(|candidate| self.lock_session(candidate.session_id))
            .collect();
        let batches: Vec<_> = plan
            .candidates
            .chunks(batch_sessions)
            .zip(locks.chunks(batch_sessions))
            .collect();
        let run = PruneRun {
            run_id,
            started_id,
            correlation,
            threshold_us: u64::try_from(policy.older_than.as_micros()).unwrap_or(u64::MAX),
        };
        let hold = |index: usize, report: &mut PruneReport| -> Vec<Held<'_, '_>> {
            let Some((batch, locks)) = batches.get(index) else {
                return Vec::new();
            };
            let held = self.prune_hold(batch, locks, report);
            // Sessions kept or failed before removal count as done.
            for _ in held.len()..batch.len() {
                advance();
            }
            held
        };
        let record = |removed, next, report: &mut PruneReport| {
            let (next, settled, finished) = self.prune_record(removed, next, &run, report);
            for _ in 0..settled {
                advance();
            }
            (next, finished)
        };
        // Batch k's directories are removed by the pool while this thread
        // takes batch k + 1 (locks and leases) and records batch k - 1's
        // completions and batch k + 1's intents in one transaction; then
        // batch k - 1's lease files and batch k + 1's directories are
        // queued behind batch k's. Each session still goes intent,
        // removal, completion, lease file, and at most four batches hold
        // leases at once.
        let pool = RemovalPool::new(&self.layout, self.options.fault.as_ref(), &advance);
        let ids = |held: &[Held<'_, '_>]| -> Vec<(SessionId, u64)> {
            held.iter()
                .map(|held| (held.candidate.session_id, held.candidate.bytes))
                .collect()
        };
        std::thread::scope(|scope| {
            let _closing = ClosePool(&pool);
            // This thread works too while it waits.
            let workers = in_parallel_threads(plan.candidates.len(), REMOVE_THREADS_MAX);
            for _ in 1..workers {
                if let Err(error) = std::thread::Builder::new()
                    .name("sandlog-prune".to_owned())
                    .spawn_scoped(scope, || pool.work())
                {
                    tracing::warn!(%error, "starting a removal thread failed; the others do its share");
                    break;
                }
            }
            let first = hold(0, &mut report);
            let (first, _) = record(None, first, &mut report);
            let mut current = (pool.submit_workspaces(&ids(&first)), first);
            let mut removed: Option<(Vec<Held<'_, '_>>, Vec<Result<u64>>)> = None;
            // Lease files being removed, and the locks to release after.
            let mut unleasing: Option<(Ticket, Vec<MutexGuard<'_, ()>>)> = None;
            for index in 1..=batches.len() {
                let next = hold(index, &mut report);
                let (next, finished) = record(removed.take(), next, &mut report);
                let unleased = pool.submit_lease_files(finished.leases);
                let next = (pool.submit_workspaces(&ids(&next)), next);
                let (ticket, held) = std::mem::replace(&mut current, next);
                removed = Some((held, pool.wait(ticket)));
                if let Some((ticket, guards)) = unleasing.replace((unleased, finished.guards)) {
                    pool.wait(ticket);
                    drop(guards);
                }
            }
            let (_, last) = record(removed.take(), Vec::new(), &mut report);
            let unleased = pool.submit_lease_files(last.leases);
            for (ticket, guards) in unleasing.into_iter().chain([(unleased, last.guards)]) {
                pool.wait(ticket);
                drop(guards);
            }
        });
        progress(total, total);
        // The moved workspaces' bytes are freed behind the run.
        self.reclaim_in_background();
        report.duration_ms = started.elapsed().as_millis() as u64;
        let completed = Event::PruneRunCompleted(PruneRunCompleted {
            run_id,
            deleted: report.deleted_sessions.len() as u64,
            skipped: report.skipped_sessions.len() as u64,
            errors: report.errors.len() as u64,
            reclaimed_bytes: report.reclaimed_bytes,
            duration_us: started.elapsed().as_micros() as u64,
        });
        let mut completed = self.event(&completed).correlated(correlation);
        completed.causation_id = Some(started_id);
        self.append_log(StreamId::System, ExpectedVersion::Any, &[completed])?;
        tracing::info!(target: "sandlog::prune", event = "session.prune.completed", summary = %report.summary(), "prune completed");
        self.metrics.prune_run(false, report.deleted_sessions.len());
        self.maybe_checkpoint(true);
        Ok(report)
    }

    /// Skips a session in a prune run's report.
    fn prune_skip(report: &mut PruneReport, session_id: SessionId, reason: String) {
        tracing::info!(target: "sandlog::prune", event = "session.prune.skipped", %session_id, %reason, "skipped");
        report.skipped_sessions.push(session_id);
        report.skipped_reasons.insert(session_id, reason);
    }

    /// Holds one batch of a prune run (see [`Engine::prune`]): each
    /// session's in-process lock and exclusive lease. A busy session is
    /// skipped, one whose lease cannot be taken is an error; both are
    /// kept.
    fn prune_hold<'a, 'l>(
        &self,
        batch: &'a [PruneCandidate],
        locks: &'l [Arc<Mutex<()>>],
        report: &mut PruneReport,
    ) -> Vec<Held<'a, 'l>> {
        // Held through intent, removal and completion: an execution cannot
        // start in between, and one that runs now (in this process: the
        // lock; in any: the lease) keeps its workspace.
        let mut locked = Vec::with_capacity(batch.len());
        for (candidate, lock) in batch.iter().zip(locks) {
            match lock.try_lock() {
                Ok(guard) => locked.push((candidate, guard)),
                Err(TryLockError::Poisoned(poisoned)) => {
                    locked.push((candidate, poisoned.into_inner()));
                }
                Err(TryLockError::WouldBlock) => {
                    Self::prune_skip(report, candidate.session_id, BUSY_SKIP_REASON.to_owned());
                }
            }
        }
        let root = &self.layout.root;
        let leases = in_parallel(
            locked
                .iter()
                .map(|(candidate, _)| candidate.session_id)
                .collect(),
            FS_THREADS_MAX,
            |session_id| Lease::acquire(root, session_id, LeaseMode::Exclusive, Duration::ZERO),
        );
        let mut held: Vec<Held<'a, 'l>> = Vec::with_capacity(locked.len());
        for ((candidate, guard), lease) in locked.into_iter().zip(leases) {
            let session_id = candidate.session_id;
            match lease {
                Ok(Some(lease)) => held.push(Held {
                    candidate,
                    lease,
                    guard,
                    intent_id: None,
                }),
                Ok(None) => {
                    Self::prune_skip(report, session_id, BUSY_SKIP_REASON.to_owned());
                }
                Err(error) => {
                    tracing::error!(target: "sandlog::prune", %session_id, %error, "taking the lease failed");
                    report.errors.insert(session_id, error.to_string());
                }
            }
        }
        held
    }

    /// Records, in one transaction, the completions of a batch whose
    /// directories were removed (`removed`: its sessions and their removal
    /// results, in order) and the intents of the next batch (`next`, held;
    /// each intent expects the version its candidate was read at). Returns
    /// `next` with its intents recorded, how many of `next` were settled
    /// otherwise (kept or failed), and the removed batch's leases and
    /// locks, to be released once its lease files are removed.
    fn prune_record<'a, 'l>(
        &self,
        removed: Option<(Vec<Held<'a, 'l>>, Vec<Result<u64>>)>,
        mut next: Vec<Held<'a, 'l>>,
        run: &PruneRun,
        report: &mut PruneReport,
    ) -> (Vec<Held<'a, 'l>>, usize, Finished<'l>) {
        let (removed, removals) = removed.unwrap_or_default();
        let completions = removed
            .iter()
            .zip(&removals)
            .map(|(held, removal)| {
                let done = match removal {
                    Ok(bytes) => Event::SessionPruned(SessionPruned {
                        run_id: Some(run.run_id),
                        reclaimed_bytes: *bytes,
                    }),
                    Err(error) => Event::SessionPruneFailed(SessionPruneFailed {
                        run_id: Some(run.run_id),
                        error: error.to_string(),
                    }),
                };
                let mut done = self.event(&done).correlated(run.correlation);
                done.causation_id = held.intent_id;
                (
                    held.candidate.session_id.stream(),
                    ExpectedVersion::Exact(held.candidate.version.next()),
                    vec![done],
                )
            })
            .collect();
        let held = next.len();
        let unrecorded = self.prune_append(completions, &mut next, run, report);
        for held in &next {
            let candidate = held.candidate;
            tracing::info!(target: "sandlog::prune", event = "session.prune.candidate", session_id = %candidate.session_id, age_us = candidate.age_us, bytes = candidate.bytes, "candidate");
        }
        let finished = Self::prune_report(removed, removals, unrecorded, report);
        let settled = held - next.len();
        (next, settled, finished)
    }

    /// Appends `completions` and the intents of `next` in one transaction.
    /// A session of `next` used since its candidate was read fails the
    /// append; it is dropped from `next` (kept) and the rest appended
    /// again. Returns the completions that could not be recorded (their
    /// sessions stay pending, for the applier), with why.
    fn prune_append(
        &self,
        completions: Vec<BatchEntry>,
        next: &mut Vec<Held<'_, '_>>,
        run: &PruneRun,
        report: &mut PruneReport,
    ) -> BTreeMap<SessionId, String> {
        let mut unrecorded = BTreeMap::new();
        let mut split = completions.len();
        let mut entries = completions;
        entries.extend(next.iter().map(|held| {
            let candidate = held.candidate;
            let intent = Event::SessionPruneRequested(SessionPruneRequested {
                run_id: run.run_id,
                age_us: candidate.age_us,
                threshold_us: run.threshold_us,
                size_bytes: candidate.bytes,
            });
            let mut intent = self.event(&intent).correlated(run.correlation);
            intent.causation_id = Some(run.started_id);
            (
                candidate.session_id.stream(),
                ExpectedVersion::Exact(candidate.version),
                vec![intent],
            )
        }));
        let mut rechecked = false;
        while !entries.is_empty() {
            let error = match self.append_log_batch(&entries) {
                Ok(_) => {
                    for (held, (_, _, events)) in next.iter_mut().zip(entries.iter().skip(split)) {
                        held.intent_id = events.first().map(|event| event.event_id.0);
                    }
                    break;
                }
                Err(error) => error,
            };
            let conflict = match &error {
                EventStoreError::VersionConflict { stream, .. } => entries
                    .iter()
                    .position(|(other, _, _)| other == stream)
                    .map(|index| (index, *stream)),
                _ => None,
            };
            match conflict {
                Some((index, stream)) if index < split => {
                    // Nothing else appends to a session whose lease this run
                    // holds; if something did, that one stays pending for
                    // the applier and the others are recorded.
                    entries.remove(index);
                    split -= 1;
                    if let StreamId::Session(session_id) = stream {
                        unrecorded.insert(
                            session_id,
                            format!("the session's log moved during its prune ({stream})"),
                        );
                    }
                }
                Some((_, stream)) => {
                    // Re-read every session once so that many sessions used
                    // during the run cost one retry, not one each; the one
                    // named is dropped in any case, so the loop ends.
                    let recheck = !rechecked;
                    rechecked = true;
                    let intents = entries.split_off(split);
                    let mut kept = Vec::with_capacity(next.len());
                    for (held, intent) in std::mem::take(next).into_iter().zip(intents) {
                        let candidate = held.candidate;
                        let moved = candidate.session_id.stream() == stream
                            || (recheck
                                && !matches!(
                                    self.store.stream_version(candidate.session_id.stream()),
                                    Ok(Some(version)) if version == candidate.version
                                ));
                        if moved {
                            Self::prune_skip(
                                report,
                                candidate.session_id,
                                "used during the prune run (its log moved past the candidate's version): kept".to_owned(),
                            );
                        } else {
                            kept.push(held);
                            entries.push(intent);
                        }
                    }
                    *next = kept;
                }
                None => {
                    // Both parts fail: the removed sessions stay pending
                    // (the applier finishes them), the next ones are kept.
                    tracing::error!(target: "sandlog::prune", %error, completions = split, intents = next.len(), "recording a prune batch failed");
                    for (stream, _, _) in entries.iter().take(split) {
                        if let StreamId::Session(session_id) = stream {
                            unrecorded.insert(*session_id, error.to_string());
                        }
                    }
                    for held in next.drain(..) {
                        report
                            .errors
                            .insert(held.candidate.session_id, error.to_string());
                    }
                    break;
                }
            }
        }
        unrecorded
    }

    /// Reports one removed batch of a prune run (`removals`, in the order
    /// of `removed`), given the completions that could not be recorded;
    /// returns the leases and locks of the batch, the leases of the
    /// sessions whose terminal event is recorded to be removed.
    fn prune_report<'l>(
        removed: Vec<Held<'_, 'l>>,
        removals: Vec<Result<u64>>,
        mut unrecorded: BTreeMap<SessionId, String>,
        report: &mut PruneReport,
    ) -> Finished<'l> {
        let mut finished = Finished::default();
        for (held, removal) in removed.into_iter().zip(removals) {
            let session_id = held.candidate.session_id;
            finished.guards.push(held.guard);
            match (removal, unrecorded.remove(&session_id)) {
                (Ok(bytes), None) => {
                    tracing::info!(target: "sandlog::prune", event = "session.prune.deleted", %session_id, bytes, "deleted");
                    report.deleted_sessions.push(session_id);
                    report.reclaimed_bytes += bytes;
                    finished.leases.push((session_id, held.lease));
                }
                (Ok(_), Some(error)) => {
                    tracing::error!(target: "sandlog::prune", %session_id, %error, "deleted, but recording it failed; the applier will finish the intent");
                    report.errors.insert(
                        session_id,
                        format!("deleted, but recording it failed: {error}"),
                    );
                }
                (Err(error), recorded) => {
                    tracing::error!(target: "sandlog::prune", event = "session.prune.failed", %session_id, %error, "prune failed");
                    if let Some(append_error) = recorded {
                        tracing::error!(%session_id, %append_error, "recording the prune failure failed; the applier will retry the intent");
                    }
                    report.errors.insert(session_id, error.to_string());
                }
            }
        }
        finished
    }
}
