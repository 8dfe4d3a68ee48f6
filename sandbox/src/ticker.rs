//! The epoch ticker: one background thread per `Sandbox` that advances the
//! engine's epoch every [`EPOCH_TICK`], which is what lets a running guest
//! notice its wall-clock deadline.
//!
//! One thread for all runs, rather than a timer per run: epoch checks are
//! compiled into the guest's code and only compare a counter, so a single
//! shared counter serves every concurrent run. The thread stops when the
//! `EpochTicker` is dropped (with its `Sandbox`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use wasmtime::Engine;

use super::limits::{EPOCH_TICK, UNBLOCK_AFTER, UNBLOCK_ENTRIES_MAX};

/// Owns the ticker thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct EpochTicker {
    /// Dropping the sender wakes the thread at once (its `recv_timeout`
    /// sees a disconnect), so shutdown never waits a full tick.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Starts ticking `engine`'s epoch, and unblocking `overdue` runs.
    ///
    /// # Errors
    ///
    /// The OS error if the thread cannot be spawned.
    pub(crate) fn start(engine: Engine, overdue: Arc<Overdue>) -> io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("sandlog-epoch-ticker".to_owned())
            .spawn(move || {
                // A message or a disconnect (the `EpochTicker` was dropped)
                // both end the loop; only a timeout means "tick".
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EPOCH_TICK) {
                    engine.increment_epoch();
                    overdue.tick(Instant::now());
                }
            })?;
        Ok(EpochTicker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The thread does not panic (it increments a counter and
            // starts unblocking rounds), and a failed join on drop has nobody to report to.
            let _ = thread.join();
        }
    }
}

/// Runs past their deadline that may be waiting in a host call.
///
/// Epoch checks live in the guest's code, so a guest blocked in the kernel
/// (opening a FIFO in its workspace for reading waits for a writer, and
/// the reverse) never sees its deadline. Every run registers the
/// directories it can open files in; once a run is [`UNBLOCK_AFTER`] past
/// its deadline and still registered, a helper thread opens every FIFO
/// under them with `O_RDWR | O_NONBLOCK` (which on Linux never blocks and
/// counts as both a reader and a writer) and closes it again: a blocked
/// `open` returns, a blocked `read` sees end of file, a blocked `write`
/// fails with `EPIPE`, the guest re-enters wasm, and its next epoch check
/// ends it with `timeout`. A FIFO that another host process holds open
/// as a writer can still keep a guest's `read` waiting; that process is
/// outside the sandbox's reach.
#[derive(Debug, Default)]
pub(crate) struct Overdue {
    watches: Mutex<Vec<Watch>>,
    next_id: AtomicU64,
    /// An unblocking round is running (at most one at a time).
    busy: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Watch {
    id: u64,
    /// When the run's FIFOs are next unblocked.
    due: Instant,
    dirs: Arc<[PathBuf]>,
}

/// Registration of one run; dropping it unregisters the run.
#[derive(Debug)]
pub(crate) struct OverdueWatch<'a> {
    overdue: &'a Overdue,
    id: u64,
}

impl Overdue {
    /// Registers a run that must end by `deadline` and can open files
    /// under `dirs`.
    pub(crate) fn watch(&self, deadline: Instant, dirs: Arc<[PathBuf]>) -> OverdueWatch<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let watch = Watch {
            id,
            due: deadline + UNBLOCK_AFTER,
            dirs,
        };
        self.lock().push(watch);
        OverdueWatch { overdue: self, id }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watch>> {
        // The list holds plain data; a panic while it was locked cannot
        // leave it half-updated in a way that matters here.
        self.watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Called at every tick: starts an unblocking round for the runs that
    /// are due, unless one is still running.
    fn tick(&self, now: Instant) {
        let dirs: Vec<Arc<[PathBuf]>> = {
            let mut watches = self.lock();
            if watches.iter().all(|watch| watch.due > now) {
                return;
            }
            if self.busy.swap(true, Ordering::AcqRel) {
                return;
            }
            watches
                .iter_mut()
                .filter(|watch| watch.due <= now)
                .map(|watch| {
                    watch.due = now + UNBLOCK_AFTER;
                    Arc::clone(&watch.dirs)
                })
                .collect()
        };
        let busy = Arc::clone(&self.busy);
        let spawned = thread::Builder::new()
            .name("sandlog-unblock".to_owned())
            .spawn(move || {
                let mut budget = UNBLOCK_ENTRIES_MAX;
                for dir in dirs.iter().flat_map(|dirs| dirs.iter()) {
                    unblock_fifos(dir, &mut budget);
                }
                busy.store(false, Ordering::Release);
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the thread that unblocks overdue runs");
            self.busy.store(false, Ordering::Release);
        }
    }
}

impl Drop for OverdueWatch<'_> {
    fn drop(&mut self) {
        self.overdue.lock().retain(|watch| watch.id != self.id);
    }
}

/// Opens and closes every FIFO under `root` (symbolic links are not
/// followed), visiting at most `budget` entries.
fn unblock_fifos(root: &Path, budget: &mut u64) {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_dir() {
                pending.push(entry.path());
            } else if file_type.is_fifo() {
                let opened = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                    .open(entry.path());
                if let Err(error) = opened {
                    tracing::debug!(path = %entry.path().display(), %error, "cannot unblock a FIFO");
                }
            }
        }
    }
}
