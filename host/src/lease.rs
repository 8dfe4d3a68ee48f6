//! Session leases: an OS advisory lock on `<root>/leases/<session>.lock`
//! that a process holds while it uses or destroys a session's workspace.
//!
//! Executions and host writes hold the lease *shared*; prune, delete and the
//! applier's finishing of intents hold it *exclusive*. So a workspace is
//! never removed under a running guest, yet executions in several processes
//! still run side by side. The lock belongs to an open file description, so
//! the kernel releases it when the holder closes the file or dies (SIGKILL
//! included): a crashed process never leaves a session busy. Two engines in
//! one process open their own descriptions and exclude each other too.
//!
//! A lease file is made with its session's workspace ([`prepare`]), so
//! prune and delete, which take thousands of exclusive leases at once,
//! open existing files instead of allocating an inode each (the dominant
//! cost of a mass prune on ext4, which scans for recently freed inodes on
//! every allocation). A missing file (a root from before, a failed
//! prepare) is created by the first acquirer: correctness never depends on
//! it being there.
//!
//! A lease file is removed only by the holder of the exclusive lease, after
//! the session's terminal event (`session.pruned`, `session.deleted`) is
//! recorded. A process that was waiting on the removed file may then lock
//! the unlinked inode; it is harmless because every holder re-reads the
//! session's status after locking, and a terminal status never changes.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandlog_core::SessionId;

use crate::error::{Result, RuntimeError};

/// Lease files under the root.
pub const LEASES_DIR: &str = "leases";

/// How often a waiting acquirer retries the lock. Advisory locks cannot be
/// waited on with a deadline, so waiting is polling; 10 ms keeps the delay
/// after a release small against runs that take seconds, at a negligible
/// cost of one syscall per poll.
pub const LEASE_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How long `session delete` waits for a running execution or write to
/// release the session, by default. Longer than a typical snippet's run,
/// short enough that an operator sees `busy` promptly; a longer wait is
/// asked for explicitly.
pub const DELETE_WAIT_DEFAULT: Duration = Duration::from_secs(10);

/// How long an execution or host write waits for a prune or delete that
/// holds the exclusive lease. Those hold it for one removal and two
/// appends; the append itself may wait up to the store's 60 s busy timeout,
/// so the same bound applies. Past it the command fails with `busy`.
pub const USE_WAIT_MAX: Duration = Duration::from_secs(60);

/// How long a writer of a session (an execution, a native run, a sync,
/// a host write) waits by default for another writer of the same session,
/// in this or any other process, to finish. Longer than a run at the
/// default timeout plus its scan, so a few runs queued behind each other
/// proceed in turn; past it the writer fails with `busy` before it has
/// changed anything. `EngineOptions::session_wait` and `--wait DUR` set it.
pub const WRITER_WAIT_DEFAULT: Duration = Duration::from_secs(60);

/// How a lease is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseMode {
    /// Using the workspace (executions, host writes): many at once.
    Shared,
    /// Destroying the workspace (prune, delete, finishing an intent): alone.
    Exclusive,
}

/// A held lease; dropping it releases the lock.
#[derive(Debug)]
pub struct Lease {
    file: File,
    path: PathBuf,
}

/// The lease file of `session_id` under `root`.
pub fn lease_path(root: &Path, session_id: SessionId) -> PathBuf {
    root.join(LEASES_DIR).join(format!("{session_id}.lock"))
}

fn open_lease_file(path: &Path) -> Result<File> {
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    };
    match open() {
        Ok(file) => Ok(file),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(RuntimeError::io(format!("creating {}", parent.display())))?;
            }
            open().map_err(RuntimeError::io(format!("opening {}", path.display())))
        }
        Err(error) => Err(RuntimeError::Io {
            context: format!("opening {}", path.display()),
            source: error,
        }),
    }
}

/// Makes the lease file of a new session (see the module documentation).
/// Not synced: a file lost in a crash is made again by its first acquirer,
/// and so is one that could not be made now (a warning says why).
pub fn prepare(root: &Path, session_id: SessionId) {
    if let Err(error) = open_lease_file(&lease_path(root, session_id)) {
        tracing::warn!(%session_id, %error, "making the lease file failed; its first user makes it");
    }
}

/// The writer lock of a session: an exclusive OS advisory lock on its
/// workspace directory, held by whoever changes the workspace (an
/// execution from before its guest starts until its record commits, a
/// native run, a sync, a host write). It makes a session's writers take
/// turns across processes, so the scan after a run sees only what that
/// run did and each change is credited to the writer that made it.
///
/// Taken after the shared [`Lease`] (prune and delete, holding the lease
/// exclusively, never wait on it, so the two cannot deadlock). The lock
/// belongs to an open file description of the directory, released by the
/// kernel when the holder closes it or dies; it needs no file of its own,
/// so a session costs no extra inode and a prune removes nothing more.
#[derive(Debug)]
pub struct WriterLock {
    _dir: File,
}

/// A writer's hold on a session: its shared [`Lease`], then its
/// [`WriterLock`]. Dropping it releases the writer lock, then the lease.
#[derive(Debug)]
pub struct WriterHold {
    // Field order is drop order: the writer lock goes first.
    _writer: WriterLock,
    _lease: Lease,
}

impl WriterHold {
    /// Holds both until dropped.
    pub fn new(lease: Lease, writer: WriterLock) -> WriterHold {
        WriterHold {
            _writer: writer,
            _lease: lease,
        }
    }
}

impl WriterLock {
    /// Takes the writer lock of the workspace at `workspace`, retrying
    /// every [`LEASE_POLL_INTERVAL`] for up to `wait`; still held by
    /// another writer then, [`RuntimeError::Busy`].
    pub fn acquire(workspace: &Path, session_id: SessionId, wait: Duration) -> Result<WriterLock> {
        let dir = File::open(workspace).map_err(RuntimeError::io(format!(
            "opening workspace {}",
            workspace.display()
        )))?;
        let started = Instant::now();
        loop {
            match dir.try_lock() {
                Ok(()) => return Ok(WriterLock { _dir: dir }),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(source)) => {
                    return Err(RuntimeError::Io {
                        context: format!("locking workspace {}", workspace.display()),
                        source,
                    });
                }
            }
            let elapsed = started.elapsed();
            if elapsed >= wait {
                return Err(RuntimeError::Busy { session_id, wait });
            }
            std::thread::sleep(LEASE_POLL_INTERVAL.min(wait.saturating_sub(elapsed)));
        }
    }
}

impl Lease {
    /// Takes the lease of `session_id` in `mode`, retrying every
    /// [`LEASE_POLL_INTERVAL`] for up to `wait` (zero: one attempt).
    /// `Ok(None)` when another holder still has it at the deadline.
    pub fn acquire(
        root: &Path,
        session_id: SessionId,
        mode: LeaseMode,
        wait: Duration,
    ) -> Result<Option<Lease>> {
        let path = lease_path(root, session_id);
        let file = open_lease_file(&path)?;
        let started = Instant::now();
        loop {
            let attempt = match mode {
                LeaseMode::Shared => file.try_lock_shared(),
                LeaseMode::Exclusive => file.try_lock(),
            };
            match attempt {
                Ok(()) => return Ok(Some(Lease { file, path })),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(source)) => {
                    return Err(RuntimeError::Io {
                        context: format!("locking {}", path.display()),
                        source,
                    });
                }
            }
            let elapsed = started.elapsed();
            if elapsed >= wait {
                return Ok(None);
            }
            std::thread::sleep(LEASE_POLL_INTERVAL.min(wait.saturating_sub(elapsed)));
        }
    }

    /// Like [`Lease::acquire`], but a lease still held at the deadline is
    /// [`RuntimeError::Busy`].
    pub fn acquire_or_busy(
        root: &Path,
        session_id: SessionId,
        mode: LeaseMode,
        wait: Duration,
    ) -> Result<Lease> {
        Lease::acquire(root, session_id, mode, wait)?.ok_or(RuntimeError::Busy { session_id, wait })
    }

    /// Removes the lease file, then releases the lock. Only for the holder
    /// of the exclusive lease of a session whose terminal event is recorded
    /// (see the module documentation for why that is safe).
    pub fn remove(self) -> Result<()> {
        // The session's stat cache (`native.rs`) goes with it: nothing
        // syncs a finished session.
        if let (Some(root), Some(name)) = (
            self.path.parent().and_then(Path::parent),
            self.path.file_stem(),
        ) {
            let cache = root
                .join(crate::statcache::SCANS_DIR)
                .join(Path::new(name).with_extension("bin"));
            if let Err(error) = crate::statcache::remove_stat_cache(&cache) {
                tracing::warn!(cache = %cache.display(), %error, "removing the stat cache failed");
            }
        }
        let result = match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(RuntimeError::Io {
                context: format!("removing {}", self.path.display()),
                source,
            }),
        };
        drop(self.file);
        result
    }
}
