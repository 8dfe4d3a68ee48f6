//! Group commit: concurrent appends in one process share an fsync.
//!
//! At [`Durability::Full`](super::Durability) an append is acknowledged
//! only once its commit is on disk. SQLite's own way (`synchronous =
//! FULL`) fsyncs the WAL inside every commit, with the writer held, so
//! concurrent writers queue behind one fsync each. Here the commit of a
//! unit of work ([`EventStore::write`]) is made at `synchronous = NORMAL`
//! (set just before its transaction and put back to `FULL` just after:
//! the WAL frames are written, not synced), the writer is released, and
//! the caller then waits until the WAL has been fsynced past its commit:
//! the first waiter with no sync in flight fsyncs the WAL for every commit
//! made so far, the others wait for it, and a commit that lands during a
//! sync is covered by the next. Each caller is still answered only after
//! its own commit is durable; many commits share one fsync.
//!
//! The WAL is appended in commit order and recovered as a prefix (each
//! frame checksums the ones before it), so syncing it past commit N
//! makes every commit up to N durable, whoever wrote them. A commit is
//! visible to readers from the moment it is made, one fsync before its
//! writer is answered, as under `synchronous = NORMAL`; only its writer
//! acknowledges it, after the sync. Checkpoints keep SQLite's own syncs
//! (at `NORMAL` the WAL is synced before a checkpoint and the database
//! after it). A failed fsync poisons the store, as a failed commit does:
//! what reached the disk is unknown.
//!
//! Only with a WAL (the store asks for one; a file system that refuses it
//! keeps SQLite's `FULL`), and only for [`EventStore::write`] (every
//! append): other commits (read-model rebuilds, consumer checkpoints,
//! migrations) keep `FULL`.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, MutexGuard};

use rusqlite::Connection;

use sandlog_eventstore::error::{EventStoreError, Result};

use super::EventStore;
use crate::store::SqlResult;

/// Commits made and synced, by sequence number (this process's, this
/// store's).
#[derive(Debug, Default)]
struct Progress {
    /// The last commit made.
    committed: u64,
    /// The last commit known durable.
    synced: u64,
    /// Whether a thread is fsyncing the WAL.
    syncing: bool,
    /// The WAL file, opened at the first sync, with its inode (reopened if
    /// the file at the path is another one).
    wal: Option<(File, u64)>,
    /// fsyncs of the WAL made, and commits they covered.
    syncs: u64,
}

/// The group commit of one store (see the module documentation).
#[derive(Debug)]
pub(crate) struct GroupSync {
    wal_path: PathBuf,
    progress: Mutex<Progress>,
    changed: Condvar,
}

/// A commit made, not yet durable: [`EventStore::wait_durable`] waits for
/// it.
#[must_use = "a grouped commit is durable only after `wait_durable`"]
pub(crate) struct Pending(Option<u64>);

impl GroupSync {
    /// The group commit of the store at `database`, whose WAL is
    /// `<database>-wal`.
    pub(crate) fn new(database: &std::path::Path) -> GroupSync {
        let mut wal = database.as_os_str().to_owned();
        wal.push("-wal");
        GroupSync {
            wal_path: PathBuf::from(wal),
            progress: Mutex::new(Progress::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// fsyncs the WAL (opening it, or again if it was replaced).
    fn sync_wal(&self, wal: &mut Option<(File, u64)>) -> std::io::Result<()> {
        let current = std::fs::metadata(&self.wal_path)?.ino();
        if wal.as_ref().is_none_or(|(_, inode)| *inode != current) {
            let file = File::open(&self.wal_path)?;
            let inode = file.metadata()?.ino();
            *wal = Some((file, inode));
        }
        match wal {
            Some((file, _)) => file.sync_data(),
            None => Ok(()),
        }
    }
}

impl EventStore {
    /// Before a unit of work's transaction, on the held writer: with
    /// group commit, its commit is to be made at `synchronous = NORMAL`
    /// (the WAL written, not synced). SQLite refuses the change inside a
    /// transaction.
    pub(crate) fn before_grouped_write(&self, connection: &Connection) -> Result<()> {
        if self.group.is_some() {
            connection
                .execute_batch("PRAGMA synchronous = NORMAL")
                .sql()?;
        }
        Ok(())
    }

    /// After a unit of work (`committed`: whether it committed), on the
    /// still held writer: puts the connection back to `FULL` for every
    /// other commit, and returns the commit to wait for once the writer is
    /// released. A connection that cannot be put back poisons the store:
    /// its next commits would not be synced.
    pub(crate) fn after_grouped_write(
        &self,
        connection: &Connection,
        committed: bool,
    ) -> Result<Pending> {
        let Some(group) = &self.group else {
            return Ok(Pending(None));
        };
        if let Err(error) = connection.execute_batch("PRAGMA synchronous = FULL") {
            tracing::error!(%error, "restoring synchronous = FULL failed; refusing further writes");
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(super::SqliteError::from(error).into());
        }
        if !committed {
            return Ok(Pending(None));
        }
        let mut progress = group.lock();
        progress.committed += 1;
        Ok(Pending(Some(progress.committed)))
    }

    /// Waits until the commit `pending` is durable: fsyncs the WAL for
    /// every commit so far unless another thread's sync in flight or done
    /// covers it.
    pub(crate) fn wait_durable(&self, pending: Pending) -> Result<()> {
        let (Some(group), Pending(Some(ticket))) = (&self.group, pending) else {
            return Ok(());
        };
        let mut progress = group.lock();
        loop {
            if progress.synced >= ticket {
                return Ok(());
            }
            self.check_writable()?;
            if progress.syncing {
                progress = group
                    .changed
                    .wait(progress)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            progress.syncing = true;
            let target = progress.committed;
            let mut wal = progress.wal.take();
            drop(progress);
            let synced = group.sync_wal(&mut wal);
            progress = group.lock();
            progress.syncing = false;
            progress.wal = wal;
            match synced {
                Ok(()) => {
                    progress.synced = progress.synced.max(target);
                    progress.syncs += 1;
                    group.changed.notify_all();
                }
                Err(source) => {
                    tracing::error!(error = %source, "fsyncing the WAL failed; refusing further writes");
                    self.poisoned.store(true, Ordering::SeqCst);
                    group.changed.notify_all();
                    return Err(EventStoreError::Io {
                        context: format!("syncing {}", group.wal_path.display()),
                        source,
                    });
                }
            }
        }
    }

    /// How many fsyncs of the WAL group commit made since open, and how
    /// many commits they made durable (equal without concurrent writers;
    /// `(0, 0)` without group commit).
    pub fn group_commit_counts(&self) -> (u64, u64) {
        match &self.group {
            Some(group) => {
                let progress = group.lock();
                (progress.syncs, progress.synced)
            }
            None => (0, 0),
        }
    }
}
