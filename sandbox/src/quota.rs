//! Workspace quota: measure a workspace's size and entry count, stopping as
//! soon as either cap is passed, and decide when to measure during a run.
//!
//! Trade-off chosen: the sandbox does not intercept the guest's writes
//! (that would mean re-implementing WASI's file calls). Instead it walks the
//! workspace (a) periodically while the guest runs, from the epoch callback,
//! trapping the guest as soon as it is over quota, and (b) once after the
//! run, which is authoritative. Between two checks a fast writer can
//! overshoot by what it writes in one interval (see
//! [`QUOTA_CHECK_INTERVAL`]); the overshoot stays on disk and the run is
//! reported as `quota`, for the Engine to record and act on.
//!
//! Sizes are apparent sizes (`len`) of regular files, so a sparse file
//! counts at its full length: what an export or copy of the workspace would
//! cost. Symlinks are never followed (a guest-made link to a big host file
//! must not count, nor be read), and count as entries.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirEntry};

use crate::tree::{Visit, Visitor, Walked, walk};

use super::limits::{QUOTA_CHECK_COST_RATIO, QUOTA_CHECK_INTERVAL};

/// What one walk of a workspace found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Usage {
    /// Within both caps, with the totals found.
    Within {
        /// Sum of regular files' lengths.
        bytes: u64,
        /// Files, directories and symlinks, the root excluded.
        entries: u64,
    },
    /// Over the byte cap or the entry cap; the walk stopped early.
    Exceeded,
}

/// Walks `root` without following symlinks and sums what it finds, stopping
/// as soon as `bytes_max` or `entries_max` is passed (which bounds the walk's
/// cost by `entries_max`). The walk goes by directory handle
/// ([`crate::tree::walk`]): a tree of any depth is measured with O(1) file
/// descriptors and no host path length limit, and a sparse file counts at
/// its apparent length without being read.
///
/// # Errors
///
/// The first I/O error, except entries that vanish mid-walk (the guest may
/// be deleting files while we look), which are skipped.
pub(crate) fn measure(root: &Path, bytes_max: u64, entries_max: u64) -> io::Result<Usage> {
    struct Measurer {
        bytes: u64,
        entries: u64,
        bytes_max: u64,
        entries_max: u64,
    }
    impl Visitor for Measurer {
        fn entry(&mut self, _parents: &[OsString], entry: &DirEntry) -> io::Result<Visit> {
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Visit::Next),
                Err(error) => return Err(error),
            };
            self.entries = self.entries.saturating_add(1);
            if file_type.is_file() {
                // `DirEntry::metadata` does not traverse symlinks.
                match entry.metadata() {
                    Ok(metadata) => self.bytes = self.bytes.saturating_add(metadata.len()),
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error),
                }
            }
            if self.bytes > self.bytes_max || self.entries > self.entries_max {
                return Ok(Visit::Stop);
            }
            Ok(if file_type.is_dir() {
                Visit::Descend
            } else {
                Visit::Next
            })
        }
    }
    let dir = Dir::open_ambient_dir(root, ambient_authority())?;
    let mut measurer = Measurer {
        bytes: 0,
        entries: 0,
        bytes_max,
        entries_max,
    };
    match walk(&dir, &mut measurer)? {
        Walked::Stopped => Ok(Usage::Exceeded),
        Walked::Complete => Ok(Usage::Within {
            bytes: measurer.bytes,
            entries: measurer.entries,
        }),
    }
}

/// Decides when the running guest's workspace is measured next, and
/// measures it.
#[derive(Debug)]
pub(crate) struct QuotaWatch {
    workspace: PathBuf,
    bytes_max: u64,
    entries_max: u64,
    next_check: Instant,
}

impl QuotaWatch {
    /// A watch whose first check is one interval after `started`.
    pub(crate) fn new(
        workspace: PathBuf,
        bytes_max: u64,
        entries_max: u64,
        started: Instant,
    ) -> Self {
        QuotaWatch {
            workspace,
            bytes_max,
            entries_max,
            next_check: started + QUOTA_CHECK_INTERVAL,
        }
    }

    /// If a check is due at `now`, measures the workspace and returns true
    /// when it is over quota. The next check is scheduled at least
    /// `QUOTA_CHECK_COST_RATIO` × this walk's duration later, so a big
    /// workspace is walked less often and checking stays cheap.
    pub(crate) fn check_if_due(&mut self, now: Instant) -> bool {
        if now < self.next_check {
            return false;
        }
        let usage = measure(&self.workspace, self.bytes_max, self.entries_max);
        let finished = Instant::now();
        let walk_duration = finished.saturating_duration_since(now);
        self.next_check = finished + interval_after(walk_duration);
        match usage {
            Ok(Usage::Exceeded) => true,
            Ok(Usage::Within { .. }) => false,
            Err(error) => {
                // Not fatal during the run: the check after the run is
                // authoritative and reports the error if it persists.
                tracing::warn!(
                    workspace = %self.workspace.display(),
                    %error,
                    "quota check during run failed; will retry"
                );
                false
            }
        }
    }
}

/// How long to wait after a walk that took `walk_duration`: at least
/// `QUOTA_CHECK_INTERVAL`, and long enough that walking costs at most
/// 1/`QUOTA_CHECK_COST_RATIO` of the guest's time.
fn interval_after(walk_duration: Duration) -> Duration {
    QUOTA_CHECK_INTERVAL.max(walk_duration.saturating_mul(QUOTA_CHECK_COST_RATIO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Goal: sizes and entries are summed, symlinks not followed, and the
    /// caps stop the walk. Method: a small tree in a temp dir.
    #[test]
    fn quota_measures_tree_without_following_symlinks() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        fs::write(root.path().join("a"), [0u8; 10])?;
        fs::create_dir(root.path().join("d"))?;
        fs::write(root.path().join("d").join("b"), [0u8; 5])?;
        std::os::unix::fs::symlink("/etc/passwd", root.path().join("link"))?;
        assert_eq!(
            measure(root.path(), 100, 100)?,
            Usage::Within {
                bytes: 15,
                entries: 4
            }
        );
        assert_eq!(measure(root.path(), 14, 100)?, Usage::Exceeded);
        assert_eq!(measure(root.path(), 100, 3)?, Usage::Exceeded);
        Ok(())
    }

    /// Goal: slow walks are scheduled proportionally less often.
    /// Method: compare intervals for a fast and a slow walk.
    #[test]
    fn quota_check_interval_stretches_with_walk_cost() {
        assert_eq!(
            interval_after(Duration::from_micros(10)),
            QUOTA_CHECK_INTERVAL
        );
        assert_eq!(
            interval_after(Duration::from_millis(50)),
            Duration::from_millis(50) * QUOTA_CHECK_COST_RATIO
        );
    }
}
