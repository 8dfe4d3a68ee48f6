//! Host access to one workspace directory, through `cap-std`: every path is
//! resolved inside the directory, so neither `..` nor a symlink planted by
//! a guest can lead the host outside it (S5).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use sandlog_core::limits::BLOB_BYTES_MAX;
use sandlog_core::{Hash, WorkspacePath};

use crate::error::{Result, RuntimeError};

/// Most entries a workspace scan visits before giving up. Bounds the time
/// and memory of the post-execution comparison; the sandbox's entry quota
/// is lower, so only a workspace changed behind sandlog's back hits this.
pub const SCAN_ENTRIES_MAX: usize = 1_000_000;

/// Buffer for streaming a file through blake3.
const HASH_BUFFER_BYTES: usize = 64 * 1024;

/// A regular file found by a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// Size, bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch (0 if unknown).
    pub mtime_ns: i128,
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
        let temporary = match path.parent() {
            Some(parent) => format!(
                "{parent}/.{}.sandlog-{}",
                path.file_name(),
                uuid::Uuid::new_v4().simple()
            ),
            None => format!(
                ".{}.sandlog-{}",
                path.file_name(),
                uuid::Uuid::new_v4().simple()
            ),
        };
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
            Some(true) => self
                .dir
                .remove_dir_all(path.as_std_path())
                .map_err(self.map_error(path, "deleting")),
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

    /// Every regular file, by path, without following symlinks. Entries
    /// whose names are not valid workspace paths (not UTF-8, say) are
    /// skipped with a warning: sandlog cannot name them.
    pub fn scan(&self) -> Result<BTreeMap<WorkspacePath, Scanned>> {
        let mut files = BTreeMap::new();
        let mut pending: Vec<Option<WorkspacePath>> = vec![None];
        let mut visited = 0usize;
        while let Some(directory) = pending.pop() {
            let entries = match &directory {
                None => self.dir.entries(),
                Some(path) => self.dir.read_dir(path.as_std_path()),
            }
            .map_err(RuntimeError::io(format!(
                "scanning {}",
                self.path.display()
            )))?;
            for entry in entries {
                visited += 1;
                if visited > SCAN_ENTRIES_MAX {
                    return Err(RuntimeError::Io {
                        context: format!("scanning {}", self.path.display()),
                        source: std::io::Error::other(format!(
                            "more than {SCAN_ENTRIES_MAX} entries"
                        )),
                    });
                }
                let entry = entry.map_err(RuntimeError::io(format!(
                    "scanning {}",
                    self.path.display()
                )))?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    tracing::warn!(workspace = %self.path.display(), "skipping an entry whose name is not UTF-8");
                    continue;
                };
                let joined = match &directory {
                    None => WorkspacePath::parse(name),
                    Some(parent) => parent.join(name),
                };
                let Ok(path) = joined else {
                    tracing::warn!(workspace = %self.path.display(), name, "skipping an entry sandlog cannot name");
                    continue;
                };
                let file_type = entry
                    .file_type()
                    .map_err(RuntimeError::io(format!("scanning {path}")))?;
                if file_type.is_dir() {
                    pending.push(Some(path));
                } else if file_type.is_file() {
                    let metadata = entry
                        .metadata()
                        .map_err(RuntimeError::io(format!("scanning {path}")))?;
                    let mtime_ns = metadata
                        .modified()
                        .ok()
                        .and_then(|time| time.into_std().duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |duration| duration.as_nanos() as i128);
                    files.insert(
                        path,
                        Scanned {
                            size: metadata.len(),
                            mtime_ns,
                        },
                    );
                }
            }
        }
        Ok(files)
    }
}

/// Total size of the regular files under `path`, not following symlinks
/// (what deleting it reclaims). A missing directory is 0.
pub fn dir_size(path: &Path) -> std::io::Result<u64> {
    let mut total = 0u64;
    let mut pending = vec![path.to_owned()];
    while let Some(directory) = pending.pop() {
        let entries = match std::fs::read_dir(&directory) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && directory == path => {
                return Ok(0);
            }
            Err(error) => return Err(error),
        };
        for entry in entries {
            let entry = entry?;
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                pending.push(entry.path());
            } else if file_type.is_file() {
                total = total.saturating_add(entry.metadata()?.len());
            }
        }
    }
    Ok(total)
}

/// fsyncs a directory, so a create, rename or delete inside it is durable.
pub fn fsync_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// Chunk size of a streamed host write: the most of the input held in
/// memory at once while it is copied into the workspace.
pub const WRITE_CHUNK_BYTES: usize = 64 * 1024;

/// A host write streamed into a temporary file beside its target, fsynced
/// and not yet renamed. Dropped without [`StagedWrite::commit`], the
/// temporary file is removed: a refused or failed write leaves nothing.
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

    /// Creates the target's parent directories and renames the temporary
    /// file over the target.
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
    /// in chunks of [`WRITE_CHUNK_BYTES`], hashing as it goes, and fsyncs
    /// it. An input longer than `bytes_max` stops the copy
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
        let temporary = format!(
            ".{}.sandlog-{}",
            path.file_name(),
            uuid::Uuid::new_v4().simple()
        );
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
        if let Some(file) = staged.file.as_mut() {
            file.sync_all().map_err(map())?;
        }
        staged.size = size;
        staged.blake3 = Hash(*hasher.finalize().as_bytes());
        Ok(staged)
    }

    /// [`Workspace::stage_from`], then the rename: the whole streamed write
    /// of a file, atomic as [`Workspace::write`]. Returns the size and the
    /// blake3 of what was written.
    pub fn write_from(
        &self,
        path: &WorkspacePath,
        reader: &mut dyn Read,
        bytes_max: u64,
    ) -> Result<(u64, Hash)> {
        let staged = self.stage_from(path, reader, bytes_max)?;
        let written = (staged.size(), staged.blake3());
        staged.commit()?;
        Ok(written)
    }
}
