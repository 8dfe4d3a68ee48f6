//! The removal pool of a prune run: threads that move the workspaces of
//! the run's batches into `trash/` (see [`crate::trash`]) and remove their
//! lease files, one after another without a pause between batches.
//!
//! The run submits a batch once its intents are recorded and waits for it
//! before recording its completions. Jobs are taken in the order they were
//! submitted, so the workers go on with the next batch while the last
//! removals of the previous one finish, instead of idling at a barrier per
//! batch. The thread that finishes a batch's last removal fsyncs
//! `workspaces/` and `trash/` before the batch counts as done, so a
//! removal reported `Ok` is durable when the run records it. A thread that waits for a
//! batch works through queued jobs meanwhile, so the pool makes progress
//! even if no worker could be started.

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sandlog_core::SessionId;

use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::layout::Layout;
use sandlog_host::lease::Lease;
use sandlog_host::workspace::fsync_dir;

/// A submitted batch, to wait for with [`RemovalPool::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ticket(u64);

enum Job {
    /// Remove a session's workspace; its result goes to `slot` of `batch`.
    Workspace {
        batch: Ticket,
        slot: usize,
        session_id: SessionId,
        /// Its projected size: what a move into `trash/` reports.
        planned_bytes: u64,
    },
    /// Remove a finished session's lease file (by its holder).
    LeaseFile {
        batch: Ticket,
        session_id: SessionId,
        lease: Lease,
    },
}

struct Batch {
    /// One per workspace job, in the order submitted.
    results: Vec<Option<Result<u64>>>,
    /// Jobs not finished yet.
    remaining: usize,
    /// Whether `workspaces/` is fsynced when the last job finishes.
    syncs: bool,
    done: bool,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    batches: BTreeMap<Ticket, Batch>,
    submitted: u64,
    closed: bool,
    /// The first panic of a job, resumed by the next `wait`.
    panic: Option<Box<dyn std::any::Any + Send>>,
}

/// Removes workspaces and lease files for one prune run (see the module
/// documentation). Workers run [`RemovalPool::work`] until
/// [`RemovalPool::close`].
pub(crate) struct RemovalPool<'a> {
    layout: &'a Layout,
    fault: Option<&'a sandlog_host::fault::SharedFaultInjector>,
    /// `workspaces/`, opened once; why not, if it could not be.
    workspaces: std::result::Result<Dir, (std::io::ErrorKind, String)>,
    /// `trash/`, opened (made) once; without it workspaces are removed in
    /// place.
    trash: Option<Dir>,
    /// Called after each workspace removal.
    removed: &'a (dyn Fn() + Sync),
    state: Mutex<State>,
    changed: Condvar,
}

impl<'a> RemovalPool<'a> {
    pub(crate) fn new(
        layout: &'a Layout,
        fault: Option<&'a sandlog_host::fault::SharedFaultInjector>,
        removed: &'a (dyn Fn() + Sync),
    ) -> RemovalPool<'a> {
        let workspaces =
            Dir::open_ambient_dir(&layout.workspaces, ambient_authority()).map_err(|error| {
                (
                    error.kind(),
                    format!("opening {}: {error}", layout.workspaces.display()),
                )
            });
        let trash = crate::trash::open_trash(layout)
            .map_err(|error| {
                tracing::warn!(target: "sandlog::prune", %error, path = %layout.trash.display(), "no trash directory; pruned workspaces are removed in place");
            })
            .ok();
        RemovalPool {
            layout,
            fault,
            workspaces,
            trash,
            removed,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn submit(&self, syncs: bool, jobs: impl FnOnce(Ticket) -> Vec<Job>) -> Ticket {
        let mut state = self.lock();
        state.submitted += 1;
        let ticket = Ticket(state.submitted);
        let jobs = jobs(ticket);
        let workspaces = jobs
            .iter()
            .filter(|job| matches!(job, Job::Workspace { .. }))
            .count();
        state.batches.insert(
            ticket,
            Batch {
                results: (0..workspaces).map(|_| None).collect(),
                remaining: jobs.len(),
                syncs,
                done: jobs.is_empty(),
            },
        );
        state.jobs.extend(jobs);
        drop(state);
        self.changed.notify_all();
        ticket
    }

    /// Queues the removal of `sessions`' workspaces (each with its
    /// projected size).
    pub(crate) fn submit_workspaces(&self, sessions: &[(SessionId, u64)]) -> Ticket {
        self.submit(true, |batch| {
            sessions
                .iter()
                .enumerate()
                .map(|(slot, (session_id, planned_bytes))| Job::Workspace {
                    batch,
                    slot,
                    session_id: *session_id,
                    planned_bytes: *planned_bytes,
                })
                .collect()
        })
    }

    /// Queues the removal of the lease files of finished sessions.
    pub(crate) fn submit_lease_files(&self, leases: Vec<(SessionId, Lease)>) -> Ticket {
        self.submit(false, |batch| {
            leases
                .into_iter()
                .map(|(session_id, lease)| Job::LeaseFile {
                    batch,
                    session_id,
                    lease,
                })
                .collect()
        })
    }

    /// Waits until every job of `ticket` is done (working on queued jobs
    /// meanwhile); returns its workspace removals' results, in the order
    /// submitted.
    pub(crate) fn wait(&self, ticket: Ticket) -> Vec<Result<u64>> {
        let mut state = self.lock();
        loop {
            if let Some(payload) = state.panic.take() {
                drop(state);
                std::panic::resume_unwind(payload);
            }
            match state.batches.get(&ticket) {
                None => return Vec::new(),
                Some(batch) if batch.done => break,
                Some(_) => {}
            }
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                self.run(job);
                state = self.lock();
            } else {
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        }
        let Some(batch) = state.batches.remove(&ticket) else {
            return Vec::new();
        };
        batch
            .results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(RuntimeError::Io {
                        context: "removing a workspace".to_owned(),
                        source: std::io::Error::other("the removal never ran"),
                    })
                })
            })
            .collect()
    }

    /// A worker: runs jobs until the pool is closed and its queue empty.
    pub(crate) fn work(&self) {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                self.run(job);
                state = self.lock();
            } else if state.closed {
                return;
            } else {
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        }
    }

    /// Lets the workers end once the queue is empty.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    fn run(&self, job: Job) {
        let (batch, slot) = match &job {
            Job::Workspace { batch, slot, .. } => (*batch, Some(*slot)),
            Job::LeaseFile { batch, .. } => (*batch, None),
        };
        // A panic (in a fault injector or a progress callback) must not
        // leave its batch unfinished, or the run would wait for it forever:
        // the job counts as failed and the run panics in turn (see `wait`).
        let result = match std::panic::catch_unwind(AssertUnwindSafe(|| self.execute(job))) {
            Ok(result) => result,
            Err(payload) => {
                self.lock().panic.get_or_insert(payload);
                slot.map(|_| {
                    Err(RuntimeError::Io {
                        context: "removing a workspace".to_owned(),
                        source: std::io::Error::other("the removal panicked"),
                    })
                })
            }
        };
        let mut state = self.lock();
        let Some(entry) = state.batches.get_mut(&batch) else {
            return;
        };
        if let (Some(slot), Some(result)) = (slot, result)
            && let Some(place) = entry.results.get_mut(slot)
        {
            *place = Some(result);
        }
        entry.remaining = entry.remaining.saturating_sub(1);
        if entry.remaining > 0 {
            return;
        }
        let syncs = entry.syncs;
        drop(state);
        let synced = if syncs {
            sync_workspaces(self.layout).and_then(|()| match &self.trash {
                Some(_) => fsync_dir(&self.layout.trash).map_err(RuntimeError::io(format!(
                    "syncing {}",
                    self.layout.trash.display()
                ))),
                None => Ok(()),
            })
        } else {
            Ok(())
        };
        let mut state = self.lock();
        if let Some(entry) = state.batches.get_mut(&batch) {
            if let Err(error) = synced {
                // Whether the removals reached the disk is unknown: none
                // is reported done.
                let message = error.to_string();
                for result in entry.results.iter_mut().flatten() {
                    if result.is_ok() {
                        *result = Err(RuntimeError::Io {
                            context: message.clone(),
                            source: std::io::Error::other("the removal may not be durable"),
                        });
                    }
                }
            }
            entry.done = true;
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Does one job; a workspace removal's result, if it was one.
    fn execute(&self, job: Job) -> Option<Result<u64>> {
        match job {
            Job::Workspace {
                session_id,
                planned_bytes,
                ..
            } => {
                let result = self.remove_workspace(session_id, planned_bytes);
                (self.removed)();
                Some(result)
            }
            Job::LeaseFile {
                session_id, lease, ..
            } => {
                if let Err(error) = lease.remove() {
                    tracing::warn!(%session_id, %error, "removing the lease file failed");
                }
                None
            }
        }
    }

    /// Moves a session's workspace directory from `workspaces/` into
    /// `trash/` (syncing neither): the fault injector first, then the
    /// rename; returns `planned_bytes`, the bytes its reclaim will free, or
    /// the bytes it held if it had to be removed in place.
    fn remove_workspace(&self, session_id: SessionId, planned_bytes: u64) -> Result<u64> {
        let path = self.layout.workspace(session_id);
        let workspaces = self
            .workspaces
            .as_ref()
            .map_err(|(kind, message)| RuntimeError::Io {
                context: message.clone(),
                source: std::io::Error::from(*kind),
            })?;
        before_remove(self.fault, session_id, &path)?;
        // In place only when there is no usable trash: by directory
        // handle, so any tree a guest can build (deeper than PATH_MAX,
        // say) is measured and removed with O(1) descriptors.
        let moved =
            crate::trash::move_to_trash(workspaces, self.trash.as_ref(), &session_id.to_string())
                .map_err(RuntimeError::io(format!("removing {}", path.display())))?;
        Ok(moved.unwrap_or(planned_bytes))
    }
}

/// The fault injector's hook before a workspace at `path` is removed (a
/// no-op without one): what every workspace removal runs first.
pub(crate) fn before_remove(
    fault: Option<&sandlog_host::fault::SharedFaultInjector>,
    session_id: SessionId,
    path: &Path,
) -> Result<()> {
    match fault {
        Some(fault) => fault
            .before_remove(session_id, path)
            .map_err(RuntimeError::io(format!("removing {}", path.display()))),
        None => Ok(()),
    }
}

/// fsyncs `workspaces/`, so the removals in it are durable.
pub(crate) fn sync_workspaces(layout: &Layout) -> Result<()> {
    fsync_dir(&layout.workspaces).map_err(RuntimeError::io(format!(
        "syncing {}",
        layout.workspaces.display()
    )))
}
