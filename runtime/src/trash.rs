//! Prune at the speed of a rename: a pruned workspace is moved into the
//! root's `trash/` by one atomic rename, and its bytes are freed later,
//! in the background, with a recorded `workspace.reclaimed`.
//!
//! A prune records each session's intent, renames its workspace from
//! `workspaces/<id>` to `trash/<id>` (both under the root, so on one file
//! system), fsyncs both directories once per batch and records the
//! completion (`session.pruned`, whose `reclaimed_bytes` is then the
//! planned size: the projection's). Emptying `trash/` is a separate pass
//! (`Engine::reclaim_trash`, in `lifecycle/reclaim.rs`): a thread started by the prune (and by
//! opening a root that has trash), or `reconcile`, which finishes whatever
//! is left. A pass removes each directory (measuring what it frees),
//! fsyncs `trash/` and records one `workspace.reclaimed` with the count
//! and the bytes.
//!
//! Crash safety: a rename is atomic, so a workspace is in `workspaces/` or
//! in `trash/`, never half in each. Killed before a completion is
//! recorded, the session stays `pruning` and the applier finishes it (its
//! workspace already gone from `workspaces/` counts as removed). Killed
//! during a pass, the directories not yet removed (one of them perhaps
//! partly) stay in `trash/`, and the next pass removes them; what the cut
//! pass had freed goes unrecorded. Only names that are session ids are
//! ever removed from `trash/`.
//!
//! Passes in several processes exclude each other through an exclusive
//! lock on `trash/` itself (held by an open descriptor, so the kernel
//! releases a dead holder's); a pass that finds it held leaves the work to
//! its holder. A background pass only touches the disk: its event is
//! recorded by the thread that joins it (the next prune, `reconcile`, or
//! dropping the engine), so it never appends in the middle of another
//! command's events.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sandlog_core::SessionId;
use serde::Serialize;

use crate::error::{Result, RuntimeError};
use crate::fault::SharedFaultInjector;
use crate::layout::Layout;
use crate::workspace::fsync_dir;

/// What a reclaim pass (or several) freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Reclaimed {
    /// Workspaces removed from `trash/`.
    pub workspaces: u64,
    /// Bytes of the files they held.
    pub bytes: u64,
    /// Directories that could not be removed (left for the next pass).
    pub failed: u64,
}

impl Reclaimed {
    pub(crate) fn add(&mut self, other: Reclaimed) {
        self.workspaces += other.workspaces;
        self.bytes += other.bytes;
        self.failed += other.failed;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.workspaces == 0 && self.failed == 0
    }
}

/// Opens `trash/`, making it (and making its entry in the root durable)
/// when missing.
pub(crate) fn open_trash(layout: &Layout) -> std::io::Result<Dir> {
    match std::fs::create_dir(&layout.trash) {
        Ok(()) => fsync_dir(&layout.root)?,
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    Dir::open_ambient_dir(&layout.trash, ambient_authority())
}

/// Moves the workspace `name` from `workspaces` into `trash` (one rename;
/// neither directory synced). `Ok(None)`: moved, its bytes are still to be
/// reclaimed. `Ok(Some(bytes))`: removed in place instead, because there
/// is no usable trash, the trash is on another file system, or it already
/// holds that name; or missing (`Some(0)`).
pub(crate) fn move_to_trash(
    workspaces: &Dir,
    trash: Option<&Dir>,
    name: &str,
) -> std::io::Result<Option<u64>> {
    use rustix::io::Errno;
    if let Some(trash) = trash {
        match rustix::fs::renameat(workspaces, name, trash, name) {
            Ok(()) => return Ok(None),
            Err(Errno::NOENT) => return Ok(Some(0)),
            Err(Errno::XDEV | Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    sandlog_sandbox::tree::remove_tree(workspaces, Path::new(name)).map(Some)
}

/// One pass over `trash/`: removes every directory named by a session id,
/// then fsyncs `trash/`. Nothing to do (no trash, or another process's
/// pass holds its lock): an empty result.
pub(crate) fn reclaim_pass(
    layout: &Layout,
    fault: Option<&SharedFaultInjector>,
) -> Result<Reclaimed> {
    let mut reclaimed = Reclaimed::default();
    let lock = match File::open(&layout.trash) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(reclaimed),
        Err(source) => {
            return Err(RuntimeError::Io {
                context: format!("opening {}", layout.trash.display()),
                source,
            });
        }
    };
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(reclaimed),
        Err(TryLockError::Error(source)) => {
            return Err(RuntimeError::Io {
                context: format!("locking {}", layout.trash.display()),
                source,
            });
        }
    }
    let trash = Dir::open_ambient_dir(&layout.trash, ambient_authority()).map_err(
        RuntimeError::io(format!("opening {}", layout.trash.display())),
    )?;
    // Read lazily while removing: memory stays constant however many
    // workspaces wait. An entry removed before the listing reaches it is
    // simply not there (`remove_tree` counts a missing one as 0 bytes).
    let entries = trash.entries().map_err(RuntimeError::io(format!(
        "reading {}",
        layout.trash.display()
    )))?;
    for entry in entries {
        let entry = entry.map_err(RuntimeError::io(format!(
            "reading {}",
            layout.trash.display()
        )))?;
        let name = entry.file_name();
        let Some(text) = name.to_str() else {
            continue;
        };
        if text.parse::<SessionId>().is_err() {
            tracing::warn!(target: "sandlog::trash", name = %text, "left alone in trash/: not a session's workspace");
            continue;
        }
        let path = layout.trash.join(text);
        let removed = match fault {
            Some(fault) => fault.before_reclaim(&path),
            None => Ok(()),
        }
        .and_then(|()| sandlog_sandbox::tree::remove_tree(&trash, Path::new(text)));
        match removed {
            Ok(bytes) => {
                reclaimed.workspaces += 1;
                reclaimed.bytes += bytes;
            }
            Err(error) => {
                tracing::warn!(target: "sandlog::trash", path = %path.display(), %error, "reclaiming a pruned workspace failed; the next pass retries");
                reclaimed.failed += 1;
            }
        }
    }
    if !reclaimed.is_empty() {
        lock.sync_all().map_err(RuntimeError::io(format!(
            "syncing {}",
            layout.trash.display()
        )))?;
    }
    Ok(reclaimed)
}

/// Whether `trash/` holds anything (false when it is missing or
/// unreadable: nothing a pass could do).
pub(crate) fn has_trash(layout: &Layout) -> bool {
    std::fs::read_dir(&layout.trash).is_ok_and(|mut entries| entries.next().is_some())
}

/// Whether the background pass runs, and whether more trash arrived since
/// it last listed `trash/`.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    pub(crate) running: bool,
    pub(crate) again: bool,
}

/// The engine's background reclaim: at most one thread, which passes
/// over `trash/` until no prune of this engine added to it meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Reclaimer {
    pub(crate) flags: Arc<Mutex<Flags>>,
    pub(crate) thread: Mutex<Option<JoinHandle<Reclaimed>>>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
