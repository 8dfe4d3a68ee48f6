//! What a seed workspace holds, judged before it moves: each entry
//! inspected without opening it (refused, copied, or taken), private
//! copies of hard-linked files, and hashing files without following links
//! or blocking.

use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, FileTypeExt, MetadataExt, OpenOptions, OpenOptionsExt};
use sandlog_core::WorkspacePath;

use super::*;

/// An entry found by inspection that is not simply taken.
#[derive(Debug)]
pub(super) enum Finding {
    /// Not a regular file, directory or symlink staying inside.
    Refuse {
        path: PathBuf,
        kind: &'static str,
        reason: &'static str,
    },
    /// A regular file with more than one link.
    Copy { path: PathBuf },
}

/// Why a symlink at `link` (relative to the workspace) pointing at `target`
/// could resolve outside the workspace, judged lexically: an absolute
/// target, a leading `..` climbing above the workspace, or a `..` after a
/// name (the name may itself be a symlink, after which `..` is no longer
/// lexical). Leading `..`s climb through the link's parent directories,
/// which inspection found to be directories, so a target of leading `..`s
/// then names stays inside as long as every symlink it goes through does.
pub(super) fn symlink_escape(link: &Path, target: &Path) -> Option<&'static str> {
    let mut depth = link.components().count().saturating_sub(1);
    let mut named = false;
    for component in target.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => {
                return Some("its target is absolute: it points outside the workspace");
            }
            Component::CurDir => {}
            Component::ParentDir if named => {
                return Some(
                    "its target has `..` after a name: through another symlink it could climb out of the workspace",
                );
            }
            Component::ParentDir => {
                if depth == 0 {
                    return Some("its target climbs out of the workspace with `..`");
                }
                depth -= 1;
            }
            Component::Normal(_) => named = true,
        }
    }
    None
}

/// What a special file is, and why it is refused.
pub(super) fn special_kind(file_type: &cap_std::fs::FileType) -> (&'static str, &'static str) {
    if file_type.is_fifo() {
        (
            "fifo",
            "a FIFO is not file contents, and opening it blocks until a writer comes",
        )
    } else if file_type.is_socket() {
        ("socket", "a socket is not file contents")
    } else if file_type.is_char_device() {
        (
            "char_device",
            "a device node is not file contents: opening it reaches a device",
        )
    } else if file_type.is_block_device() {
        (
            "block_device",
            "a device node is not file contents: opening it reaches a device",
        )
    } else {
        ("unknown", "not a regular file, a directory or a symlink")
    }
}

/// What inspecting a workspace found.
#[derive(Debug)]
pub(super) struct Inspection {
    /// Entries to refuse or copy.
    pub(super) findings: Vec<Finding>,
    /// The regular files (the top-level metadata file aside): what the
    /// adoption records.
    pub(super) files: Vec<PathBuf>,
    /// Entries visited (at most [`ADOPT_ENTRIES_MAX`]).
    pub(super) entries: usize,
}

/// Inspects a workspace to be adopted without opening any entry but its
/// directories: what to refuse and which files to copy. The top-level
/// metadata file is left to the metadata handling. `Err` is why the
/// workspace is not adopted (past a limit, unreadable); nothing was
/// changed.
pub(super) fn inspect(source: &Path) -> std::result::Result<Inspection, String> {
    let dir = Dir::open_ambient_dir(source, ambient_authority())
        .map_err(|error| format!("opening {}: {error}", source.display()))?;
    let mut findings = Vec::new();
    let mut files = Vec::new();
    let mut pending: Vec<(PathBuf, usize)> = vec![(PathBuf::new(), 0)];
    let mut visited = 0usize;
    while let Some((directory, depth)) = pending.pop() {
        let entries = if directory.as_os_str().is_empty() {
            dir.entries()
        } else {
            dir.read_dir(&directory)
        }
        .map_err(|error| format!("reading {}: {error}", directory.display()))?;
        for entry in entries {
            visited += 1;
            if visited > ADOPT_ENTRIES_MAX {
                return Err(format!(
                    "more than ADOPT_ENTRIES_MAX = {ADOPT_ENTRIES_MAX} entries; not adopted, left in place"
                ));
            }
            let entry =
                entry.map_err(|error| format!("reading {}: {error}", directory.display()))?;
            let name = entry.file_name();
            if depth == 0 && name == SEED_METADATA_FILE {
                continue;
            }
            let path = directory.join(&name);
            let file_type = entry
                .file_type()
                .map_err(|error| format!("inspecting {}: {error}", path.display()))?;
            if file_type.is_dir() {
                if depth + 1 > ADOPT_DEPTH_MAX {
                    return Err(format!(
                        "directories nested deeper than ADOPT_DEPTH_MAX = {ADOPT_DEPTH_MAX}; not adopted, left in place"
                    ));
                }
                pending.push((path, depth + 1));
            } else if file_type.is_file() {
                let metadata = entry
                    .metadata()
                    .map_err(|error| format!("inspecting {}: {error}", path.display()))?;
                if metadata.nlink() > 1 {
                    findings.push(Finding::Copy { path: path.clone() });
                }
                files.push(path);
            } else if file_type.is_symlink() {
                let target = dir
                    .read_link_contents(&path)
                    .map_err(|error| format!("reading link {}: {error}", path.display()))?;
                if let Some(reason) = symlink_escape(&path, &target) {
                    findings.push(Finding::Refuse {
                        path,
                        kind: "symlink",
                        reason,
                    });
                }
            } else {
                let (kind, reason) = special_kind(&file_type);
                findings.push(Finding::Refuse { path, kind, reason });
            }
        }
    }
    Ok(Inspection {
        findings,
        files,
        entries: visited,
    })
}

/// Replaces the file at `path` (relative to `dir`) by a private copy with
/// the same contents and permissions: copied to a temporary name beside
/// it, fsynced, renamed over it. Opened without following a symlink and
/// without blocking, and refused unless it is (still) a regular file.
pub(super) fn private_copy(dir: &Dir, path: &Path) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?
        .to_string_lossy();
    let temporary =
        path.with_file_name(format!(".{name}.sandlog-{}", uuid::Uuid::new_v4().simple()));
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    let mut from = dir.open_with(path, &options)?;
    let metadata = from.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::other("no longer a regular file"));
    }
    let mut create = OpenOptions::new();
    create.write(true).create_new(true);
    let mut to = dir.open_with(&temporary, &create)?;
    let copied = (|| -> std::io::Result<()> {
        std::io::copy(&mut from, &mut to)?;
        to.set_permissions(metadata.permissions())?;
        to.sync_all()?;
        dir.rename(&temporary, dir, path)
    })();
    if copied.is_err() {
        let _ = dir.remove_file(&temporary);
    }
    copied
}

/// Bytes read at a time when hashing an adopted file.
pub(super) const HASH_CHUNK_BYTES: usize = 64 * 1024;

/// blake3 and length of the file at `path` in `dir`, as read now. Opened
/// without following a symlink and without blocking, and refused unless it
/// is (still) a regular file, so an entry replaced since inspection by a
/// FIFO or a device is never read. `None` when it is gone.
pub(super) fn hash_file(
    dir: &Dir,
    path: &Path,
    buffer: &mut [u8],
) -> std::io::Result<Option<(sandlog_core::Hash, u64)>> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    let mut file = match dir.open_with(path, &options) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(
            "no longer a regular file (changed during adoption)",
        ));
    }
    let mut hasher = blake3::Hasher::new();
    let mut total = 0u64;
    loop {
        let read = std::io::Read::read(&mut file, buffer)?;
        let Some(chunk) = buffer.get(..read).filter(|chunk| !chunk.is_empty()) else {
            break;
        };
        hasher.update(chunk);
        total = total.saturating_add(read as u64);
    }
    Ok(Some((
        sandlog_core::Hash(*hasher.finalize().as_bytes()),
        total,
    )))
}

/// The workspace path of `path` (relative, as inspection built it), or
/// `None` when sandlog cannot name it (too long or too deep).
pub(super) fn workspace_path(path: &Path) -> Option<WorkspacePath> {
    let mut named: Option<WorkspacePath> = None;
    for component in path.components() {
        let Component::Normal(name) = component else {
            return None;
        };
        named = Some(match &named {
            None => WorkspacePath::from_os_name(name).ok()?,
            Some(parent) => parent.join_os(name).ok()?,
        });
    }
    named
}
