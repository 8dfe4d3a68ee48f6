//! The blake3 of each module file, remembered across processes so that
//! opening an engine does not re-read and re-hash `python.wasm` (tens of
//! megabytes, a large part of a first load's cost) when the file has not changed.
//!
//! ```text
//! <cache_dir>/module-hashes/<blake3 of the path, hex>.json
//!     {"path": "...", "stamp": {...}, "blake3": "<hex>"}
//! ```
//!
//! A remembered hash is used only while the file's stamp (device, inode,
//! length, modification and status-change times to the nanosecond) is
//! unchanged. Replacing the file (a rename gives a new inode), rewriting it
//! (new mtime and ctime) or even `touch -d` (ctime cannot be set back from
//! user space) all change the stamp. What is left is the "racy" case git
//! knows: a write in the same clock tick as the stamp we read. A hash is
//! therefore remembered only for files whose last change is at least
//! [`RACY_WINDOW`] old when the hashing started.
//!
//! Even a wrong remembered hash would not run unrecorded code: the module
//! run is the precompiled artifact of that hash, which is what
//! `session.executed` records; and when the artifact has to be compiled,
//! the bytes are re-read and must hash to the key (see `Sandbox::load`).
//!
//! Cache failures are never errors: an entry that cannot be read or written
//! only costs a re-hash.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::cache::{create_private_dir, write_atomically};
use super::lock;

/// A file whose metadata changed less than this long before it was hashed
/// is not remembered: the kernel's file timestamps advance in ticks of a
/// few milliseconds, so a write right after our stat could leave the same
/// stamp on different bytes. Two seconds also covers filesystems with
/// one-second timestamps.
pub(crate) const RACY_WINDOW: Duration = Duration::from_secs(2);

/// Name of the directory, under the cache directory, holding the entries.
const DIR_NAME: &str = "module-hashes";

/// Enough of a file's metadata to notice that it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileStamp {
    device: u64,
    inode: u64,
    len: u64,
    mtime_sec: i64,
    mtime_nsec: i64,
    ctime_sec: i64,
    ctime_nsec: i64,
}

impl FileStamp {
    pub(crate) fn of(metadata: &fs::Metadata) -> Self {
        FileStamp {
            device: metadata.dev(),
            inode: metadata.ino(),
            len: metadata.len(),
            mtime_sec: metadata.mtime(),
            mtime_nsec: metadata.mtime_nsec(),
            ctime_sec: metadata.ctime(),
            ctime_nsec: metadata.ctime_nsec(),
        }
    }

    /// Whether the file last changed at least [`RACY_WINDOW`] before `now`.
    fn settled_at(&self, now: SystemTime) -> bool {
        let Ok(since_epoch) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let newest_sec = self.mtime_sec.max(self.ctime_sec);
        let Ok(newest_sec) = u64::try_from(newest_sec) else {
            // Before 1970: nothing sensible to compare; do not remember.
            return false;
        };
        // Whole seconds, rounded up: conservative by up to one second.
        since_epoch.as_secs() >= newest_sec + 1 + RACY_WINDOW.as_secs()
    }
}

/// One remembered hash, as stored on disk.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    path: PathBuf,
    stamp: FileStamp,
    blake3: String,
}

/// Module hashes by file path: in memory for this process, on disk for the
/// next.
#[derive(Debug)]
pub(crate) struct ModuleHashes {
    dir: PathBuf,
    memory: Mutex<HashMap<PathBuf, (FileStamp, blake3::Hash)>>,
}

impl ModuleHashes {
    pub(crate) fn new(cache_dir: &Path) -> Self {
        ModuleHashes {
            dir: cache_dir.join(DIR_NAME),
            memory: Mutex::new(HashMap::new()),
        }
    }

    fn entry_path(&self, wasm_path: &Path) -> PathBuf {
        let key = blake3::hash(wasm_path.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{}.json", key.to_hex()))
    }

    /// The hash of `wasm_path`'s bytes if they were hashed before and the
    /// file's stamp is still `stamp`.
    pub(crate) fn get(&self, wasm_path: &Path, stamp: &FileStamp) -> Option<blake3::Hash> {
        if let Some((known, hash)) = lock(&self.memory).get(wasm_path)
            && known == stamp
        {
            return Some(*hash);
        }
        let text = fs::read_to_string(self.entry_path(wasm_path)).ok()?;
        let entry: Entry = serde_json::from_str(&text).ok()?;
        if entry.path != wasm_path || entry.stamp != *stamp {
            return None;
        }
        let hash = blake3::Hash::from_hex(entry.blake3.as_bytes()).ok()?;
        lock(&self.memory).insert(wasm_path.to_path_buf(), (*stamp, hash));
        Some(hash)
    }

    /// Remembers that `wasm_path`, stamped `stamp` before its bytes were
    /// read at `read_started`, hashes to `hash`, unless the file changed
    /// too recently for its stamp to be trusted.
    pub(crate) fn remember(
        &self,
        wasm_path: &Path,
        stamp: FileStamp,
        read_started: SystemTime,
        hash: blake3::Hash,
    ) {
        if !stamp.settled_at(read_started) {
            return;
        }
        lock(&self.memory).insert(wasm_path.to_path_buf(), (stamp, hash));
        let entry = Entry {
            path: wasm_path.to_path_buf(),
            stamp,
            blake3: hash.to_hex().to_string(),
        };
        let written = serde_json::to_vec(&entry)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                create_private_dir(&self.dir)?;
                write_atomically(&self.entry_path(wasm_path), &bytes)
            });
        if let Err(error) = written {
            tracing::debug!(
                dir = %self.dir.display(),
                %error,
                "could not remember a module hash; it will be recomputed next time"
            );
        }
    }

    /// Drops what is remembered about `wasm_path` (its bytes turned out not
    /// to match).
    pub(crate) fn forget(&self, wasm_path: &Path) {
        lock(&self.memory).remove(wasm_path);
        let _ = fs::remove_file(self.entry_path(wasm_path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_old_file(path: &Path, bytes: &[u8]) -> FileStamp {
        fs::write(path, bytes).unwrap();
        FileStamp::of(&fs::metadata(path).unwrap())
    }

    /// A time comfortably after any file written by the test.
    fn later() -> SystemTime {
        SystemTime::now() + RACY_WINDOW + Duration::from_secs(2)
    }

    #[test]
    fn a_remembered_hash_survives_a_new_instance_while_the_stamp_holds() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("m.wasm");
        let stamp = write_old_file(&wasm, b"module");
        let hash = blake3::hash(b"module");
        ModuleHashes::new(dir.path()).remember(&wasm, stamp, later(), hash);

        let fresh = ModuleHashes::new(dir.path());
        assert_eq!(fresh.get(&wasm, &stamp), Some(hash));
    }

    #[test]
    fn a_rewritten_file_is_not_matched() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("m.wasm");
        let stamp = write_old_file(&wasm, b"module");
        ModuleHashes::new(dir.path()).remember(&wasm, stamp, later(), blake3::hash(b"module"));

        // Same length, new bytes, written through a rename (new inode).
        let replacement = dir.path().join("m.wasm.new");
        fs::write(&replacement, b"MODULE").unwrap();
        fs::rename(&replacement, &wasm).unwrap();
        let new_stamp = FileStamp::of(&fs::metadata(&wasm).unwrap());
        assert_ne!(new_stamp, stamp);
        assert_eq!(ModuleHashes::new(dir.path()).get(&wasm, &new_stamp), None);
    }

    #[test]
    fn a_file_changed_within_the_racy_window_is_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("m.wasm");
        let stamp = write_old_file(&wasm, b"module");
        let hashes = ModuleHashes::new(dir.path());
        hashes.remember(&wasm, stamp, SystemTime::now(), blake3::hash(b"module"));
        assert_eq!(hashes.get(&wasm, &stamp), None);
        assert_eq!(ModuleHashes::new(dir.path()).get(&wasm, &stamp), None);
    }

    #[test]
    fn a_corrupt_or_foreign_entry_is_ignored_and_forget_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("m.wasm");
        let other = dir.path().join("other.wasm");
        let stamp = write_old_file(&wasm, b"module");
        let hashes = ModuleHashes::new(dir.path());
        hashes.remember(&wasm, stamp, later(), blake3::hash(b"module"));
        let entry = hashes.entry_path(&wasm);

        // An entry naming another path (a hash-prefix collision) is not used.
        let text = fs::read_to_string(&entry).unwrap();
        let foreign = text.replace(&*wasm.to_string_lossy(), &other.to_string_lossy());
        fs::write(&entry, foreign).unwrap();
        assert_eq!(ModuleHashes::new(dir.path()).get(&wasm, &stamp), None);

        fs::write(&entry, b"{ not json").unwrap();
        assert_eq!(ModuleHashes::new(dir.path()).get(&wasm, &stamp), None);

        hashes.forget(&wasm);
        assert!(!entry.exists());
        assert_eq!(hashes.get(&wasm, &stamp), None);
    }
}
