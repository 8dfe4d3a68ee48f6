//! Host access to one workspace directory, through `cap-std`: every path is
//! resolved inside the directory, so neither `..` nor a symlink planted by
//! a guest can lead the host outside it (S5).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt as _, OpenOptions};
use std::time::Instant;

use sandlog_core::event::ExecutionLimit;
use sandlog_core::limits::{BLOB_BYTES_MAX, PATH_DEPTH_MAX};
use sandlog_core::path::PathError;
use sandlog_core::{Hash, WorkspacePath};

use crate::error::{Result, RuntimeError};
use sandlog_sandbox::tree::Visit;

/// Most entries a workspace scan visits before giving up. Bounds the time
/// and memory of the post-execution comparison; the sandbox's entry quota
/// is lower, so only a workspace changed behind sandlog's back hits this.
pub const SCAN_ENTRIES_MAX: usize = 1_000_000;

/// Deepest directory nesting a scan descends into, in components: the
/// deepest a workspace path can name ([`PATH_DEPTH_MAX`]). Deeper entries
/// cannot be recorded under any name; a scan that meets them says so
/// ([`ExecutionLimit::ScanDepth`]) instead of failing.
pub const SCAN_DEPTH_MAX: usize = PATH_DEPTH_MAX;

/// A scan checks its deadline once per this many entries (a clock read per
/// entry would cost more than the entry).
const DEADLINE_CHECK_ENTRIES: u64 = 256;

/// Buffer for streaming a file through blake3.
const HASH_BUFFER_BYTES: usize = 64 * 1024;

/// A regular file found by a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// Size, bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch (0 if unknown).
    pub mtime_ns: i128,
    /// Inode change time, nanoseconds since the epoch: moves on every
    /// write, rename and attribute change, and unlike the modification
    /// time it cannot be set back by the writer.
    pub ctime_ns: i128,
    /// Inode number: a file replaced by another (renamed over it) differs
    /// here even when its size and times match.
    pub inode: u64,
}

/// One workspace directory, opened as a capability.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    path: PathBuf,
}

fn is_symlink_escape(error: &std::io::Error) -> bool {
    // cap-std reports a resolution that would leave the directory (an
    // absolute symlink, or one climbing out with `..`) as PermissionDenied
    // with this message; a real permission problem has the OS's message.
    error.kind() == std::io::ErrorKind::PermissionDenied
        && error.to_string().contains("outside of the filesystem")
}

impl Workspace {
    /// Opens the directory at `path`.
    pub fn open(path: &Path) -> Result<Workspace> {
        let dir = Dir::open_ambient_dir(path, ambient_authority()).map_err(RuntimeError::io(
            format!("opening workspace {}", path.display()),
        ))?;
        Ok(Workspace {
            dir,
            path: path.to_owned(),
        })
    }

    /// The directory on the host.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn map_error(
        &self,
        path: &WorkspacePath,
        doing: &str,
    ) -> impl FnOnce(std::io::Error) -> RuntimeError {
        let path_text = path.to_string();
        let context = format!("{doing} {path} in {}", self.path.display());
        move |error| {
            if is_symlink_escape(&error) {
                RuntimeError::EscapesWorkspace { path: path_text }
            } else {
                RuntimeError::Io {
                    context,
                    source: error,
                }
            }
        }
    }

    /// Whether `path` is a directory (`None` if it does not exist). Does
    /// not follow a final symlink.
    pub fn is_dir(&self, path: &WorkspacePath) -> Result<Option<bool>> {
        match self.dir.symlink_metadata(path.as_std_path()) {
            Ok(metadata) => Ok(Some(metadata.is_dir())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(self.map_error(path, "inspecting")(error)),
        }
    }

    /// Opens a file for reading (a stream: callers bound what they read).
    pub fn open_read(&self, path: &WorkspacePath) -> Result<cap_std::fs::File> {
        self.dir
            .open(path.as_std_path())
            .map_err(self.map_error(path, "reading"))
    }

    /// Creates a new file for writing (its parent directories too); fails
    /// if anything is at `path` already.
    pub fn create_new(&self, path: &WorkspacePath) -> Result<cap_std::fs::File> {
        let map = || self.map_error(path, "creating");
        if let Some(parent) = path.parent() {
            self.dir
                .create_dir_all(parent.as_std_path())
                .map_err(map())?;
        }
        let mut options = cap_std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        self.dir
            .open_with(path.as_std_path(), &options)
            .map_err(map())
    }

    /// Reads a whole file (at most [`BLOB_BYTES_MAX`] bytes).
    pub fn read(&self, path: &WorkspacePath) -> Result<Vec<u8>> {
        let file = self
            .dir
            .open(path.as_std_path())
            .map_err(self.map_error(path, "reading"))?;
        let mut bytes = Vec::new();
        file.take(BLOB_BYTES_MAX as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(self.map_error(path, "reading"))?;
        if bytes.len() > BLOB_BYTES_MAX {
            return Err(RuntimeError::Io {
                context: format!("reading {path}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::FileTooLarge,
                    format!("larger than {BLOB_BYTES_MAX} bytes"),
                ),
            });
        }
        Ok(bytes)
    }

    /// Writes a whole file atomically: a temporary file beside it, fsynced,
    /// then renamed over the target (a crash leaves the old or the new
    /// contents, never a mix). Creates parent directories.
    pub fn write(&self, path: &WorkspacePath, bytes: &[u8]) -> Result<()> {
        let map = || self.map_error(path, "writing");
        if let Some(parent) = path.parent() {
            self.dir
                .create_dir_all(parent.as_std_path())
                .map_err(map())?;
        }
        // The temporary name leaves out the target's name: a target name
        // of up to `PATH_COMPONENT_BYTES_MAX` bytes plus a prefix and suffix
        // would pass the file system's limit, and the target's path on disk
        // is its decoded bytes, not its text form.
        let mut temporary = path.as_std_path().into_owned();
        temporary.set_file_name(format!(".sandlog-{}.tmp", uuid::Uuid::new_v4().simple()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let written = (|| -> std::io::Result<()> {
            let mut file = self.dir.open_with(&temporary, &options)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            self.dir.rename(&temporary, &self.dir, path.as_std_path())
        })();
        if let Err(error) = written {
            let _ = self.dir.remove_file(&temporary);
            return Err(map()(error));
        }
        Ok(())
    }

    /// Removes a file, or a directory with everything in it. Never follows
    /// a symlink: a symlink is removed itself.
    pub fn remove(&self, path: &WorkspacePath, recursive: bool) -> Result<()> {
        match self.is_dir(path)? {
            None => Ok(()),
            Some(true) if !recursive => Err(RuntimeError::IsDirectory {
                path: path.to_string(),
            }),
            // By handle (cap-std's `remove_dir_all` holds a descriptor
            // per level, which a guest-built deep tree exhausts).
            Some(true) => {
                let parent = match path.parent() {
                    Some(parent) => self.dir.open_dir(parent.as_std_path()),
                    None => self.dir.try_clone(),
                }
                .map_err(self.map_error(path, "deleting"))?;
                sandlog_sandbox::tree::remove_tree(&parent, Path::new(path.file_name()))
                    .map(|_| ())
                    .map_err(self.map_error(path, "deleting"))
            }
            Some(false) => self
                .dir
                .remove_file(path.as_std_path())
                .map_err(self.map_error(path, "deleting")),
        }
    }

    /// blake3 of a file's contents, streamed.
    pub fn hash(&self, path: &WorkspacePath) -> Result<Hash> {
        let mut file = self
            .dir
            .open(path.as_std_path())
            .map_err(self.map_error(path, "hashing"))?;
        let mut hasher = blake3::Hasher::new();
        let mut buffer = vec![0u8; HASH_BUFFER_BYTES];
        loop {
            let read = file
                .read(&mut buffer)
                .map_err(self.map_error(path, "hashing"))?;
            let Some(chunk) = buffer.get(..read) else {
                break;
            };
            if chunk.is_empty() {
                break;
            }
            hasher.update(chunk);
        }
        Ok(Hash(*hasher.finalize().as_bytes()))
    }

    /// blake3 of a file's contents, streamed, reading at most `bytes_max`
    /// bytes: `None` if the file holds more (it is not read past the
    /// budget, so a huge or sparse file costs at most `bytes_max` of
    /// reading). Otherwise the hash and the number of bytes it covers,
    /// which is the file's size as read (a file that changed since it was
    /// listed is recorded as it was read, never with a size its hash does
    /// not cover).
    pub fn hash_bounded(
        &self,
        path: &WorkspacePath,
        bytes_max: u64,
    ) -> Result<Option<(Hash, u64)>> {
        let file = self
            .dir
            .open(path.as_std_path())
            .map_err(self.map_error(path, "hashing"))?;
        let mut reader = file.take(bytes_max.saturating_add(1));
        let mut hasher = blake3::Hasher::new();
        let mut buffer = vec![0u8; HASH_BUFFER_BYTES];
        let mut total = 0u64;
        loop {
            let read = reader
                .read(&mut buffer)
                .map_err(self.map_error(path, "hashing"))?;
            let Some(chunk) = buffer.get(..read) else {
                break;
            };
            if chunk.is_empty() {
                break;
            }
            total = total.saturating_add(chunk.len() as u64);
            if total > bytes_max {
                return Ok(None);
            }
            hasher.update(chunk);
        }
        Ok(Some((Hash(*hasher.finalize().as_bytes()), total)))
    }

    /// Every regular file, by path, without following symlinks, under
    /// [`ScanLimits::default`]. Every name is recorded losslessly (names
    /// that are not UTF-8 or hold a backslash in the escaped text form of
    /// [`WorkspacePath`]).
    ///
    /// # Errors
    ///
    /// More than [`SCAN_ENTRIES_MAX`] entries is an I/O error naming the
    /// limit (callers that must record what they saw use
    /// [`Workspace::scan_bounded`]).
    pub fn scan(&self) -> Result<BTreeMap<WorkspacePath, Scanned>> {
        let scan = self.scan_bounded(&ScanLimits::default())?;
        if scan.stopped == Some(ExecutionLimit::ScanEntries) {
            return Err(RuntimeError::Io {
                context: format!("scanning {}", self.path.display()),
                source: std::io::Error::other(format!("more than {SCAN_ENTRIES_MAX} entries")),
            });
        }
        Ok(scan.files)
    }

    /// Every regular file, by path, walking by directory handle (so depth
    /// costs no file descriptors and no host path length), within `limits`.
    /// Past the entry limit or the deadline the walk stops; deeper than a
    /// workspace path can name (more than [`SCAN_DEPTH_MAX`] components or
    /// [`PATH_BYTES_MAX`](sandlog_core::limits::PATH_BYTES_MAX) bytes) it does not descend. Either way
    /// [`Scan::stopped`] names the limit and the files seen so far are
    /// returned.
    pub fn scan_bounded(&self, limits: &ScanLimits) -> Result<Scan> {
        let mut scanner = Scanner {
            limits,
            files: BTreeMap::new(),
            unreadable_dirs: Vec::new(),
            visited: 0,
            stopped: None,
            workspace: &self.path,
            prefixes: Vec::new(),
            prefix_of: Vec::new(),
        };
        sandlog_sandbox::tree::walk(&self.dir, &mut scanner).map_err(RuntimeError::io(format!(
            "scanning {}",
            self.path.display()
        )))?;
        Ok(Scan {
            files: scanner.files,
            unreadable_dirs: scanner.unreadable_dirs,
            stopped: scanner.stopped,
        })
    }
}

/// Bounds of one workspace scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Most entries visited; past it the scan stops
    /// ([`ExecutionLimit::ScanEntries`]).
    pub entries_max: u64,
    /// Deepest directory nesting descended into, in components; deeper
    /// directories are not descended into ([`ExecutionLimit::ScanDepth`]).
    pub depth_max: usize,
    /// When the scan gives up ([`ExecutionLimit::ScanTime`]); none means no
    /// deadline.
    pub deadline: Option<Instant>,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits {
            entries_max: SCAN_ENTRIES_MAX as u64,
            depth_max: SCAN_DEPTH_MAX,
            deadline: None,
        }
    }
}

/// What a bounded scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Regular files seen.
    pub files: BTreeMap<WorkspacePath, Scanned>,
    /// Directories that could not be opened for lack of permission: what
    /// they hold is unknown (neither written nor deleted).
    pub unreadable_dirs: Vec<WorkspacePath>,
    /// The limit that kept the scan from seeing everything, if any. With
    /// [`ExecutionLimit::ScanDepth`] every directory a workspace path can
    /// name was seen; with the others, the scan ended early.
    pub stopped: Option<ExecutionLimit>,
}

struct Scanner<'a> {
    limits: &'a ScanLimits,
    files: BTreeMap<WorkspacePath, Scanned>,
    unreadable_dirs: Vec<WorkspacePath>,
    visited: u64,
    stopped: Option<ExecutionLimit>,
    workspace: &'a Path,
    /// The workspace paths of the directories on the way to the one being
    /// listed (`None` where a name cannot be a workspace path), for the
    /// `parents` in `prefix_of`.
    prefixes: Vec<Option<WorkspacePath>>,
    prefix_of: Vec<std::ffi::OsString>,
}

impl Scanner<'_> {
    fn prefix(&mut self, parents: &[std::ffi::OsString]) -> Option<Option<WorkspacePath>> {
        // `prefixes[i]` names `parents[..=i]`; keep what the previous
        // directory shares with this one and join only the rest, so a deep
        // walk costs one join per directory, not one per ancestor.
        let shared = self
            .prefix_of
            .iter()
            .zip(parents)
            .take_while(|(old, new)| old == new)
            .count();
        self.prefixes.truncate(shared);
        self.prefix_of.truncate(shared);
        for name in parents.iter().skip(shared) {
            let next = match self.prefixes.last() {
                None => WorkspacePath::from_os_name(name).ok(),
                Some(Some(parent)) => parent.join_os(name).ok(),
                Some(None) => None,
            };
            self.prefixes.push(next);
            self.prefix_of.push(name.clone());
        }
        match self.prefixes.last() {
            None => Some(None),
            Some(Some(path)) => Some(Some(path.clone())),
            Some(None) => None,
        }
    }
}

impl sandlog_sandbox::tree::Visitor for Scanner<'_> {
    fn entry(
        &mut self,
        parents: &[std::ffi::OsString],
        entry: &cap_std::fs::DirEntry,
    ) -> std::io::Result<Visit> {
        self.visited += 1;
        if self.visited > self.limits.entries_max {
            self.stopped = Some(ExecutionLimit::ScanEntries);
            return Ok(Visit::Stop);
        }
        if self.visited.is_multiple_of(DEADLINE_CHECK_ENTRIES)
            && self
                .limits
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
        {
            self.stopped = Some(ExecutionLimit::ScanTime);
            return Ok(Visit::Stop);
        }
        let Some(parent) = self.prefix(parents) else {
            // The directory itself could not be named (it was descended
            // into only because it could): nothing under it can be.
            return Ok(Visit::Next);
        };
        // Every name a directory can hold has a lossless workspace path
        // (the escaped text form); only the length and depth limits refuse.
        let name = entry.file_name();
        let joined = match &parent {
            None => WorkspacePath::from_os_name(&name),
            Some(parent) => parent.join_os(&name),
        };
        let file_type = entry.file_type()?;
        let path = match joined {
            Ok(path) => path,
            Err(sandlog_core::CoreError::InvalidPath {
                reason: PathError::TooLong | PathError::TooDeep,
                ..
            }) => {
                self.note_too_deep();
                return Ok(Visit::Next);
            }
            Err(_) => {
                tracing::warn!(workspace = %self.workspace.display(), name = %name.to_string_lossy(), "skipping an entry sandlog cannot name");
                return Ok(Visit::Next);
            }
        };
        if file_type.is_dir() {
            if parents.len() + 1 >= self.limits.depth_max {
                self.note_too_deep();
                return Ok(Visit::Next);
            }
            return Ok(Visit::Descend);
        }
        if file_type.is_file() {
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(Visit::Next);
                }
                Err(error) => return Err(error),
            };
            let mtime_ns = metadata
                .modified()
                .ok()
                .and_then(|time| time.into_std().duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |duration| duration.as_nanos() as i128);
            let ctime_ns =
                i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec());
            self.files.insert(
                path,
                Scanned {
                    size: metadata.len(),
                    mtime_ns,
                    ctime_ns,
                    inode: metadata.ino(),
                },
            );
        }
        Ok(Visit::Next)
    }

    fn unreadable(
        &mut self,
        parents: &[std::ffi::OsString],
        name: &std::ffi::OsStr,
        _error: std::io::Error,
    ) -> std::io::Result<()> {
        self.note_unreadable(parents, name);
        Ok(())
    }
}

impl Scanner<'_> {
    /// Records a directory the scan may not open, by its workspace path
    /// (one that cannot be named holds nothing nameable either).
    fn note_unreadable(&mut self, parents: &[std::ffi::OsString], name: &std::ffi::OsStr) {
        let Some(parent) = self.prefix(parents) else {
            return;
        };
        let joined = match &parent {
            None => WorkspacePath::from_os_name(name),
            Some(parent) => parent.join_os(name),
        };
        if let Ok(path) = joined {
            tracing::warn!(workspace = %self.workspace.display(), %path, "a directory of the workspace cannot be read");
            self.unreadable_dirs.push(path);
        }
    }

    fn note_too_deep(&mut self) {
        if self.stopped.is_none() {
            self.stopped = Some(ExecutionLimit::ScanDepth);
        }
    }
}

/// Total size of the regular files under `path`, not following symlinks
/// (what deleting it reclaims), walking by directory handle. A missing
/// directory is 0.
pub fn dir_size(path: &Path) -> std::io::Result<u64> {
    match Dir::open_ambient_dir(path, ambient_authority()) {
        Ok(dir) => sandlog_sandbox::tree::tree_bytes(&dir),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(error),
    }
}

/// Removes the directory `path` with everything in it, walking by directory
/// handle (any depth, O(1) file descriptors, never following a symlink);
/// returns the bytes its regular files held. A missing directory is 0.
pub fn remove_dir_tree(path: &Path) -> std::io::Result<u64> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} has no parent directory", path.display()),
        ));
    };
    let parent = match Dir::open_ambient_dir(parent, ambient_authority()) {
        Ok(parent) => parent,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    sandlog_sandbox::tree::remove_tree(&parent, Path::new(name))
}

/// fsyncs a directory, so a create, rename or delete inside it is durable.
pub fn fsync_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// Chunk size of a streamed host write: the most of the input held in
/// memory at once while it is copied into the workspace.
pub const WRITE_CHUNK_BYTES: usize = 64 * 1024;

/// A host write streamed into a temporary file beside its target, not yet
/// durable and not yet renamed. Its contents are made durable through
/// [`StagedWrite::syncer`] before [`StagedWrite::commit`] renames it.
/// Dropped without a commit, the temporary file is removed: a refused or
/// failed write leaves nothing.
#[derive(Debug)]
pub struct StagedWrite<'a> {
    workspace: &'a Workspace,
    file: Option<cap_std::fs::File>,
    temporary: String,
    target: WorkspacePath,
    size: u64,
    blake3: Hash,
}

impl StagedWrite<'_> {
    /// Size of the streamed contents, bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// blake3 of the streamed contents.
    pub fn blake3(&self) -> Hash {
        self.blake3
    }

    /// The staged contents, read back from the temporary file (at most
    /// [`StagedWrite::size`] bytes, which the caller bounded) and checked
    /// against the hash taken while streaming.
    pub fn read(&mut self) -> Result<Vec<u8>> {
        use std::io::Seek;
        let map = self.workspace.map_error(&self.target, "reading back");
        let Some(file) = self.file.as_mut() else {
            return Err(map(std::io::Error::other("the staged file is closed")));
        };
        let mut bytes = Vec::with_capacity(usize::try_from(self.size).unwrap_or(0));
        let read = (|| -> std::io::Result<()> {
            file.seek(std::io::SeekFrom::Start(0))?;
            Read::by_ref(file)
                .take(self.size.saturating_add(1))
                .read_to_end(&mut bytes)?;
            Ok(())
        })();
        read.map_err(map)?;
        if bytes.len() as u64 != self.size || Hash(*blake3::hash(&bytes).as_bytes()) != self.blake3
        {
            return Err(self.workspace.map_error(&self.target, "reading back")(
                std::io::Error::other("the staged file changed while it was written"),
            ));
        }
        Ok(bytes)
    }

    /// The staged file, rewound, to stream its contents (the caller reads
    /// at most [`StagedWrite::size`] bytes and checks them against
    /// [`StagedWrite::blake3`]).
    pub fn reader(&mut self) -> Result<&mut cap_std::fs::File> {
        use std::io::Seek;
        let map = self.workspace.map_error(&self.target, "reading back");
        let Some(file) = self.file.as_mut() else {
            return Err(map(std::io::Error::other("the staged file is closed")));
        };
        file.seek(std::io::SeekFrom::Start(0)).map_err(map)?;
        Ok(file)
    }

    /// A second handle on the staged file, to fsync it on another thread
    /// while the caller records the write: the two overlap, and the
    /// contents are durable before [`StagedWrite::commit`] is called.
    pub fn syncer(&self) -> Result<cap_std::fs::File> {
        let map = self.workspace.map_error(&self.target, "writing");
        let Some(file) = self.file.as_ref() else {
            return Err(map(std::io::Error::other("the staged file is closed")));
        };
        file.try_clone().map_err(map)
    }

    /// Creates the target's parent directories and renames the temporary
    /// file over the target. The caller has made the contents durable
    /// first (see [`StagedWrite::syncer`]), so a rename that survives a
    /// crash never names a torn file.
    pub fn commit(mut self) -> Result<()> {
        self.file = None;
        let temporary = std::mem::take(&mut self.temporary);
        let dir = &self.workspace.dir;
        let moved = (|| -> std::io::Result<()> {
            if let Some(parent) = self.target.parent() {
                dir.create_dir_all(parent.as_std_path())?;
            }
            dir.rename(&temporary, dir, self.target.as_std_path())
        })();
        moved.map_err(|error| {
            let _ = dir.remove_file(&temporary);
            self.workspace.map_error(&self.target, "writing")(error)
        })
    }
}

impl Drop for StagedWrite<'_> {
    fn drop(&mut self) {
        self.file = None;
        if !self.temporary.is_empty() {
            let _ = self.workspace.dir.remove_file(&self.temporary);
        }
    }
}

impl Workspace {
    /// Streams `reader` into a temporary file at the top of the workspace
    /// in chunks of [`WRITE_CHUNK_BYTES`], hashing as it goes; not synced
    /// (see [`StagedWrite`]). An input longer than `bytes_max` stops the copy
    /// as soon as the first byte past the limit is read, removes the
    /// temporary file and fails with [`RuntimeError::InputTooLarge`]:
    /// memory and disk use stay bounded whatever the input (`/dev/zero`
    /// included). The target is untouched until [`StagedWrite::commit`].
    pub fn stage_from(
        &self,
        path: &WorkspacePath,
        reader: &mut dyn Read,
        bytes_max: u64,
    ) -> Result<StagedWrite<'_>> {
        let map = || self.map_error(path, "writing");
        // Staged at the top of the workspace: the parent directories are
        // made only on commit, so a refused write leaves nothing at all.
        // The name leaves out the target's: a 255-byte target name (or its
        // escaped text) would make it too long for the filesystem.
        let temporary = format!(".sandlog-{}.tmp", uuid::Uuid::new_v4().simple());
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(true);
        let file = self.dir.open_with(&temporary, &options).map_err(map())?;
        // From here on, dropping `staged` removes the temporary file.
        let mut staged = StagedWrite {
            workspace: self,
            file: Some(file),
            temporary,
            target: path.clone(),
            size: 0,
            blake3: Hash([0; 32]),
        };
        let mut hasher = blake3::Hasher::new();
        let mut buffer = vec![0u8; WRITE_CHUNK_BYTES];
        let mut size = 0u64;
        loop {
            let read = match reader.read(&mut buffer) {
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(RuntimeError::Io {
                        context: format!("reading the input for {path}"),
                        source: error,
                    });
                }
            };
            let Some(chunk) = buffer.get(..read) else {
                break;
            };
            if chunk.is_empty() {
                break;
            }
            size = size.saturating_add(chunk.len() as u64);
            if size > bytes_max {
                return Err(RuntimeError::InputTooLarge {
                    path: path.to_string(),
                    limit: format!("the limit of {bytes_max} bytes"),
                    bytes_max,
                    read: size,
                    remedy: "Write a smaller file, or raise the limit.",
                });
            }
            hasher.update(chunk);
            if let Some(file) = staged.file.as_mut() {
                file.write_all(chunk).map_err(map())?;
            }
        }
        staged.size = size;
        staged.blake3 = Hash(*hasher.finalize().as_bytes());
        Ok(staged)
    }
}
