//! What a run changed: the workspace after the run compared with the files
//! projection, within the execution's bounds on the host's work.
//!
//! Bounds (each named where it is defined): the scan visits at most
//! `ExecLimits::scan_entries_max` entries and descends only as deep as a
//! workspace path can name; hashing reads at most the run's workspace
//! quota in bytes (a guest cannot legitimately leave more to hash, and a
//! sparse file over it is never read); everything stops at a deadline (the
//! run's timeout, at least `SCAN_TIME_MIN`); at most
//! `ExecLimits::changed_files_max` changes are recorded as events. Past any
//! of them the changes that could be established are still recorded, the
//! first bound met is named, and the full change list found is pinned by a
//! digest.
//!
//! A file the scan may not read (mode 000, another user's) is recorded as
//! written with its size, the all-zero hash [`NOT_HASHED`] and
//! `content_kept: false`, reason `unreadable`, so every readable change
//! is still recorded and the unreadable one is named; a directory it may
//! not open hides its contents, so nothing under it is inferred deleted.
//!
//! What is recorded past a bound: a file that could not be hashed (over
//! the byte budget, or after the deadline) is counted as written with the
//! size the scan saw, in the totals and the digest, but gets no
//! `file.written` event (that event's hash would be unknown). When the scan
//! itself stopped early (entries or deadline), files it did not reach are
//! unknown, so no deletion is inferred at all; a depth stop still infers
//! deletions, because no recordable path lies below it.

use std::collections::BTreeMap;
use std::time::Instant;

use sandlog_core::event::{ExecutionLimit, FileDeleted, FileWritten, NotKept, WrittenBy};
use sandlog_core::{Hash, NOT_HASHED, WorkspacePath};
use sandlog_projections::state::FileEntry;

use sandlog_host::error::Result;
use sandlog_host::workspace::{Scan, Scanned, Workspace};

/// Bounds of the comparison after a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Most changes recorded as events.
    pub changed_files_max: u64,
    /// Most bytes read to hash changed files.
    pub hash_bytes_max: u64,
    /// When hashing gives up.
    pub deadline: Instant,
}

/// One change found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// Written; `blake3` is `None` when it could not be hashed in bounds.
    Written {
        path: WorkspacePath,
        size: u64,
        blake3: Option<Hash>,
    },
    /// Present but not readable by this process: size known, bytes not.
    Unreadable {
        path: WorkspacePath,
        size: u64,
    },
    Deleted {
        path: WorkspacePath,
    },
}

impl Change {
    fn path(&self) -> &WorkspacePath {
        match self {
            Change::Written { path, .. }
            | Change::Unreadable { path, .. }
            | Change::Deleted { path } => path,
        }
    }
}

/// What the comparison found and what of it is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Writes to record, in path order.
    pub written: Vec<FileWritten>,
    /// Deletions to record, in path order.
    pub deleted: Vec<FileDeleted>,
    /// Every change found, recorded or not.
    pub total: u64,
    /// The first bound met, if any.
    pub limit: Option<ExecutionLimit>,
    /// [`changes_digest`] of every change found.
    pub digest: Hash,
    /// Files hashed and found as the projection has them (a stat cache
    /// may trust them next time).
    pub verified: Vec<WorkspacePath>,
    /// Files and directories this process may not read, in path order
    /// (a file among them is in `written`, not kept, unless it was already
    /// recorded so at its size).
    pub unreadable: Vec<WorkspacePath>,
}

/// Compares `after` (a scan taken after the run) with the projection's
/// `known` files, using `before` (a scan taken before the run) to skip
/// hashing files the run did not touch.
pub(crate) fn changes(
    workspace: &Workspace,
    known: &BTreeMap<WorkspacePath, FileEntry>,
    before: &BTreeMap<WorkspacePath, Scanned>,
    after: &Scan,
    bounds: &Bounds,
) -> Result<Changes> {
    let mut limit = after.stopped;
    let mut found: Vec<Change> = Vec::new();
    let mut budget = bounds.hash_bytes_max;
    let mut verified = Vec::new();
    let mut unreadable: Vec<WorkspacePath> = after.unreadable_dirs.clone();
    for (path, scanned) in &after.files {
        let entry = known.get(path);
        let untouched = before.get(path) == Some(scanned)
            && entry.is_some_and(|file| file.size == scanned.size);
        if untouched {
            continue;
        }
        let unhashed = || Change::Written {
            path: path.clone(),
            size: scanned.size,
            blake3: None,
        };
        if Instant::now() >= bounds.deadline {
            limit.get_or_insert(ExecutionLimit::ScanTime);
            found.push(unhashed());
            continue;
        }
        if scanned.size > budget {
            limit.get_or_insert(ExecutionLimit::HashBytes);
            found.push(unhashed());
            continue;
        }
        let hashed = match workspace.hash_bounded(path, budget) {
            Ok(hashed) => hashed,
            // Gone since the scan (not the guest's doing: it has ended):
            // as if the scan had not seen it.
            Err(crate::RuntimeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            Err(crate::RuntimeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                unreadable.push(path.clone());
                // Already recorded as unreadable at this size: nothing new
                // can be said about it.
                if entry.is_some_and(|file| file.blake3 == NOT_HASHED && file.size == scanned.size)
                {
                    continue;
                }
                tracing::warn!(%path, "a changed file cannot be read; recorded without its hash or bytes");
                found.push(Change::Unreadable {
                    path: path.clone(),
                    size: scanned.size,
                });
                continue;
            }
            Err(error) => return Err(error),
        };
        let Some((blake3, size)) = hashed else {
            limit.get_or_insert(ExecutionLimit::HashBytes);
            found.push(unhashed());
            continue;
        };
        budget = budget.saturating_sub(size);
        if entry.is_some_and(|file| file.blake3 == blake3 && file.size == size) {
            verified.push(path.clone());
            continue;
        }
        found.push(Change::Written {
            path: path.clone(),
            size,
            blake3: Some(blake3),
        });
    }
    let scan_complete = matches!(after.stopped, None | Some(ExecutionLimit::ScanDepth));
    if scan_complete {
        let hidden = |path: &WorkspacePath| {
            after
                .unreadable_dirs
                .iter()
                .any(|dir| path.starts_with(dir))
        };
        for path in known.keys() {
            if !after.files.contains_key(path) && !hidden(path) {
                found.push(Change::Deleted { path: path.clone() });
            }
        }
    }
    found.sort_by(|a, b| a.path().cmp(b.path()));

    let mut written = Vec::new();
    let mut deleted = Vec::new();
    let mut recorded = 0u64;
    for change in &found {
        let recordable = !matches!(change, Change::Written { blake3: None, .. });
        if !recordable {
            continue;
        }
        if recorded >= bounds.changed_files_max {
            limit.get_or_insert(ExecutionLimit::ChangedFiles);
            break;
        }
        recorded += 1;
        match change {
            Change::Written {
                path,
                size,
                blake3: Some(blake3),
            } => written.push(FileWritten {
                content_kept: None,
                not_kept: None,
                path: path.clone(),
                size: *size,
                blake3: *blake3,
                by: WrittenBy::Guest,
            }),
            Change::Unreadable { path, size } => written.push(FileWritten {
                content_kept: Some(false),
                not_kept: Some(NotKept::Unreadable),
                path: path.clone(),
                size: *size,
                blake3: NOT_HASHED,
                by: WrittenBy::Guest,
            }),
            Change::Deleted { path } => deleted.push(FileDeleted {
                path: path.clone(),
                by: WrittenBy::Guest,
            }),
            Change::Written { blake3: None, .. } => {}
        }
    }
    unreadable.sort();
    Ok(Changes {
        unreadable,
        written,
        deleted,
        total: found.len() as u64,
        limit,
        digest: changes_digest(&found),
        verified,
    })
}

/// blake3 over the change list in path order, each change encoded as: one
/// byte `w` (written) or `d` (deleted), the size as 8 bytes little-endian
/// (0 for a deletion), the path's length as 4 bytes little-endian, then the
/// path's bytes. Hashes are left out: a change past the hash budget has
/// none, and the digest must cover every change found.
fn changes_digest(changes: &[Change]) -> Hash {
    let mut hasher = blake3::Hasher::new();
    for change in changes {
        let (tag, size, path) = match change {
            Change::Written { path, size, .. } | Change::Unreadable { path, size } => {
                (b'w', *size, path)
            }
            Change::Deleted { path } => (b'd', 0, path),
        };
        hasher.update(&[tag]);
        hasher.update(&size.to_le_bytes());
        let length = u32::try_from(path.as_str().len()).unwrap_or(u32::MAX);
        hasher.update(&length.to_le_bytes());
        hasher.update(path.as_str().as_bytes());
    }
    Hash(*hasher.finalize().as_bytes())
}
