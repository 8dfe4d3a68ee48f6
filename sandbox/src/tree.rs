//! Walks and removals of directory trees by directory handle, holding one
//! directory handle at a time, so any tree a guest can build the host can
//! also measure, scan and delete.
//!
//! A guest can build a tree far deeper than `PATH_MAX` (renaming one deep
//! chain into the leaf of another, or creating relative to directory
//! descriptors). Walking it by absolute host path fails with
//! `ENAMETOOLONG`, and walking it with one open handle per level (as
//! `std::fs::remove_dir_all` and cap-std's `remove_dir_all` do) runs out of
//! file descriptors. Here a walk descends by opening a child relative to
//! the current handle and climbs back by opening `..` of the current
//! handle, so it holds O(1) descriptors whatever the depth; its memory is
//! the names still to visit, which the caller bounds by stopping.
//!
//! Invariant: the walk never leaves the tree it started in. A child is
//! opened through cap-std (which refuses to resolve outside the current
//! directory) and must be the directory the listing showed (same inode),
//! and a climb must land on the directory it came from (same device and
//! inode); anything else means the tree changed under the walk, which is
//! an error (`ErrorKind::Other` naming the directory), never a walk
//! elsewhere.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::DirEntryExt;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirEntry, MetadataExt};

/// What the walk does after an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go on with the next entry.
    Next,
    /// The entry is a directory: visit its entries (after the other
    /// entries of the current directory have been listed).
    Descend,
    /// End the walk now.
    Stop,
}

/// What a walk calls back.
pub trait Visitor {
    /// One entry of the directory whose path from the root is `parents`.
    fn entry(&mut self, parents: &[OsString], entry: &DirEntry) -> io::Result<Visit>;

    /// The directory `name` in `parent` has been fully walked (its parent
    /// handle is given, so a removal can remove it now).
    fn left(&mut self, _parent: &Dir, _name: &OsStr) -> io::Result<()> {
        Ok(())
    }

    /// The directory `name` under `parents` could not be opened for lack
    /// of permission: `Ok` skips it, an error ends the walk (the default:
    /// a walk that must see everything cannot go on).
    fn unreadable(
        &mut self,
        _parents: &[OsString],
        _name: &OsStr,
        error: io::Error,
    ) -> io::Result<()> {
        Err(error)
    }
}

/// Whether a walk went to the end or was stopped by its visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walked {
    /// Every entry was visited.
    Complete,
    /// The visitor returned [`Visit::Stop`].
    Stopped,
}

/// A directory being walked: the subdirectories still to descend into,
/// with the inode the listing showed, and its own identity.
struct Frame {
    subdirs: Vec<(OsString, u64)>,
    identity: (u64, u64),
}

fn identity(dir: &Dir) -> io::Result<(u64, u64)> {
    let metadata = dir.dir_metadata()?;
    Ok((metadata.dev(), metadata.ino()))
}

fn changed(what: &str, parents: &[OsString]) -> io::Error {
    let path: Vec<_> = parents.iter().map(|name| name.to_string_lossy()).collect();
    io::Error::other(format!(
        "the tree changed during the walk: {what} at /{}",
        path.join("/")
    ))
}

/// Lists `dir`, calling the visitor on each entry; returns the
/// subdirectories to descend into, or `None` if the visitor stopped.
/// What listing a directory gave.
enum Listing {
    /// The subdirectories to descend into, with the inode the listing
    /// showed.
    Listed(Vec<(OsString, u64)>),
    /// The visitor returned [`Visit::Stop`].
    Stopped,
    /// The directory may not be read (`EACCES` on listing it).
    Unreadable(io::Error),
}

fn list(dir: &Dir, parents: &[OsString], visitor: &mut dyn Visitor) -> io::Result<Listing> {
    let mut subdirs = Vec::new();
    let entries = match dir.entries() {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
            return Ok(Listing::Unreadable(error));
        }
        Err(error) => return Err(error),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        match visitor.entry(parents, &entry)? {
            Visit::Next => {}
            Visit::Descend => subdirs.push((entry.file_name(), entry.ino())),
            Visit::Stop => return Ok(Listing::Stopped),
        }
    }
    Ok(Listing::Listed(subdirs))
}

/// Walks the tree under `root` depth-first (not following symlinks: only
/// entries the visitor asks to descend into are opened, and only as
/// directories whose inode matches the listing).
pub fn walk(root: &Dir, visitor: &mut dyn Visitor) -> io::Result<Walked> {
    let mut current = root.try_clone()?;
    let mut parents: Vec<OsString> = Vec::new();
    let subdirs = match list(&current, &parents, visitor)? {
        Listing::Listed(subdirs) => subdirs,
        Listing::Stopped => return Ok(Walked::Stopped),
        // The walk's own root must be readable.
        Listing::Unreadable(error) => return Err(error),
    };
    let mut stack = vec![Frame {
        subdirs,
        identity: identity(&current)?,
    }];
    while let Some(frame) = stack.last_mut() {
        if let Some((name, inode)) = frame.subdirs.pop() {
            let child = match current.open_dir(&name) {
                Ok(child) => child,
                // Gone since the listing (the guest may still be running
                // during a quota check): nothing left to visit.
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                    visitor.unreadable(&parents, &name, error)?;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let child_identity = identity(&child)?;
            if child_identity.1 != inode {
                parents.push(name);
                return Err(changed("a directory was replaced", &parents));
            }
            parents.push(name);
            let subdirs = match list(&child, &parents, visitor)? {
                Listing::Listed(subdirs) => subdirs,
                Listing::Stopped => return Ok(Walked::Stopped),
                Listing::Unreadable(error) => {
                    if let Some(name) = parents.pop() {
                        visitor.unreadable(&parents, &name, error)?;
                    }
                    continue;
                }
            };
            current = child;
            stack.push(Frame {
                subdirs,
                identity: child_identity,
            });
        } else {
            stack.pop();
            let Some(parent_frame) = stack.last() else {
                break;
            };
            let parent = current.open_parent_dir(ambient_authority())?;
            if identity(&parent)? != parent_frame.identity {
                return Err(changed("a directory was moved", &parents));
            }
            current = parent;
            if let Some(name) = parents.pop() {
                visitor.left(&current, &name)?;
            }
        }
    }
    Ok(Walked::Complete)
}

/// Removes everything under `root` (not `root` itself), never following a
/// symlink; returns the bytes the regular files held (apparent sizes).
pub fn remove_contents(root: &Dir) -> io::Result<u64> {
    struct Remover {
        bytes: u64,
    }
    impl Visitor for Remover {
        fn entry(&mut self, _parents: &[OsString], entry: &DirEntry) -> io::Result<Visit> {
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                return Ok(Visit::Descend);
            }
            if file_type.is_file() {
                let bytes = entry.metadata().map_or(0, |metadata| metadata.len());
                self.bytes = self.bytes.saturating_add(bytes);
            }
            match entry.remove_file() {
                Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
                _ => Ok(Visit::Next),
            }
        }

        fn left(&mut self, parent: &Dir, name: &OsStr) -> io::Result<()> {
            match parent.remove_dir(name) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
                _ => Ok(()),
            }
        }
    }
    let mut remover = Remover { bytes: 0 };
    walk(root, &mut remover)?;
    Ok(remover.bytes)
}

/// Removes the directory `name` in `parent` with everything in it (a
/// symlink or file of that name is removed itself); returns the bytes its
/// regular files held. A missing `name` is 0 bytes.
///
/// The top level is removed by descriptor directly: `name` is opened as a
/// directory without following a symlink (so what is listed is what was
/// opened), its files are measured and unlinked as they are listed, and
/// each subdirectory goes through [`remove_tree_walk`], whose descriptors
/// stay O(1) whatever the depth. A flat workspace, the common case, costs
/// one open, its listing, a stat and an unlink per file, and the `rmdir`.
pub fn remove_tree(parent: &Dir, name: &std::path::Path) -> io::Result<u64> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use rustix::io::Errno;
    let opened = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    );
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(0),
        // A file, a symlink (to anything) or a special file: the general
        // path removes it itself.
        Err(Errno::NOTDIR | Errno::LOOP) => return remove_tree_walk(parent, name),
        Err(error) => return Err(error.into()),
    };
    let mut bytes = 0u64;
    let mut subdirs = Vec::new();
    // The listing's descriptor stays open until after the `rmdir` below.
    // While it holds the directory, `rmdir` only unlinks the name; the
    // inode is freed when the descriptor closes, after the parent's lock
    // is released. Freed under that lock instead, every removal in
    // `workspaces/` waits in turn for the freeing, which on a file system
    // mounted with `discard` includes a synchronous discard of the
    // directory's block: the removals could not overlap at all.
    let mut entries = rustix::fs::Dir::new(fd)?;
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let entry_name = entry.file_name();
        if entry_name == c"." || entry_name == c".." {
            continue;
        }
        let dir_fd = entries.fd()?;
        // One stat at most: for a regular file's size, or for the type
        // when the listing does not give it.
        let listed = entry.file_type();
        let stat = match listed {
            rustix::fs::FileType::Unknown | rustix::fs::FileType::RegularFile => {
                match rustix::fs::statat(dir_fd, entry_name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => Some(stat),
                    Err(Errno::NOENT) => continue,
                    Err(error) => return Err(error.into()),
                }
            }
            _ => None,
        };
        let file_type = stat.as_ref().map_or(listed, |stat| {
            rustix::fs::FileType::from_raw_mode(stat.st_mode)
        });
        match (file_type, &stat) {
            (rustix::fs::FileType::Directory, _) => {
                subdirs.push(entry_name.to_owned());
                continue;
            }
            (rustix::fs::FileType::RegularFile, Some(stat)) => {
                bytes = bytes.saturating_add(u64::try_from(stat.st_size).unwrap_or(0));
            }
            _ => {}
        }
        match rustix::fs::unlinkat(dir_fd, entry_name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(error) => return Err(error.into()),
        }
    }
    if !subdirs.is_empty() {
        let dir = Dir::from_std_file(std::fs::File::from(entries.fd()?.try_clone_to_owned()?));
        for subdir in subdirs {
            let subdir = std::ffi::OsString::from_vec(subdir.into_bytes());
            bytes = bytes.saturating_add(remove_tree_walk(&dir, std::path::Path::new(&subdir))?);
        }
    }
    let removed = match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(bytes),
        Err(error) => Err(error.into()),
    };
    drop(entries);
    removed
}

/// [`remove_tree`] by the walk alone: checks what `name` is, then removes
/// a directory's contents with [`remove_contents`].
fn remove_tree_walk(parent: &Dir, name: &std::path::Path) -> io::Result<u64> {
    let metadata = match parent.symlink_metadata(name) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    if !metadata.is_dir() {
        parent.remove_file(name)?;
        return Ok(if metadata.is_file() {
            metadata.len()
        } else {
            0
        });
    }
    let dir = parent.open_dir(name)?;
    if identity(&dir)? != (metadata.dev(), metadata.ino()) {
        return Err(io::Error::other(format!(
            "{} changed while being removed",
            name.display()
        )));
    }
    let bytes = remove_contents(&dir)?;
    drop(dir);
    parent.remove_dir(name)?;
    Ok(bytes)
}

/// Total apparent size of the regular files under `root`, not following
/// symlinks (what removing it reclaims).
pub fn tree_bytes(root: &Dir) -> io::Result<u64> {
    struct Sizer {
        bytes: u64,
    }
    impl Visitor for Sizer {
        fn entry(&mut self, _parents: &[OsString], entry: &DirEntry) -> io::Result<Visit> {
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                return Ok(Visit::Descend);
            }
            if file_type.is_file() {
                let bytes = entry.metadata().map_or(0, |metadata| metadata.len());
                self.bytes = self.bytes.saturating_add(bytes);
            }
            Ok(Visit::Next)
        }
    }
    let mut sizer = Sizer { bytes: 0 };
    walk(root, &mut sizer)?;
    Ok(sizer.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep_chain(root: &Dir, depth: usize) -> io::Result<()> {
        let mut current = root.try_clone()?;
        for _ in 0..depth {
            current.create_dir("d")?;
            current.write("f", b"xy")?;
            current = current.open_dir("d")?;
        }
        Ok(())
    }

    /// Goal: a tree deeper than PATH_MAX is measured and removed by
    /// handle. Method: build 3000 levels (6000+ bytes of path) relative to
    /// handles, then size and remove it.
    #[test]
    fn tree_deeper_than_path_max_is_measured_and_removed() -> io::Result<()> {
        let temp = tempfile::tempdir()?;
        std::fs::create_dir(temp.path().join("w"))?;
        let parent = Dir::open_ambient_dir(temp.path(), ambient_authority())?;
        deep_chain(&parent.open_dir("w")?, 3000)?;
        assert_eq!(tree_bytes(&parent.open_dir("w")?)?, 6000);
        assert_eq!(remove_tree(&parent, "w".as_ref())?, 6000);
        assert!(!temp.path().join("w").exists());
        assert_eq!(remove_tree(&parent, "w".as_ref())?, 0);
        Ok(())
    }

    /// Goal: symlinks are removed, never followed. Method: a link to a
    /// directory outside the tree survives the removal of the tree.
    #[test]
    fn removal_does_not_follow_symlinks() -> io::Result<()> {
        let temp = tempfile::tempdir()?;
        std::fs::create_dir_all(temp.path().join("w/sub"))?;
        std::fs::create_dir(temp.path().join("outside"))?;
        std::fs::write(temp.path().join("outside/keep"), b"k")?;
        std::os::unix::fs::symlink(temp.path().join("outside"), temp.path().join("w/sub/link"))?;
        std::os::unix::fs::symlink(".", temp.path().join("w/loop"))?;
        let parent = Dir::open_ambient_dir(temp.path(), ambient_authority())?;
        remove_tree(&parent, "w".as_ref())?;
        assert!(temp.path().join("outside/keep").exists());
        assert!(!temp.path().join("w").exists());
        Ok(())
    }

    /// Goal: the by-descriptor top level removes every kind of entry a
    /// guest can leave and counts only regular files' bytes, following no
    /// symlink. Method: a workspace with files, a symlink to a file and one
    /// to a directory outside, a FIFO, an empty and a nested directory;
    /// then the same names as the workspace itself: a symlink to a
    /// directory, a file, nothing.
    #[test]
    fn removal_counts_files_and_removes_every_kind() -> io::Result<()> {
        let temp = tempfile::tempdir()?;
        let root = temp.path();
        std::fs::create_dir_all(root.join("w/empty"))?;
        std::fs::create_dir_all(root.join("w/a/b"))?;
        std::fs::create_dir(root.join("outside"))?;
        std::fs::write(root.join("outside/keep"), b"12345")?;
        std::fs::write(root.join("w/one"), b"abc")?;
        std::fs::write(root.join("w/a/b/two"), b"defgh")?;
        std::os::unix::fs::symlink(root.join("outside/keep"), root.join("w/file-link"))?;
        std::os::unix::fs::symlink(root.join("outside"), root.join("w/dir-link"))?;
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            root.join("w/fifo"),
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        let parent = Dir::open_ambient_dir(root, ambient_authority())?;
        assert_eq!(remove_tree(&parent, "w".as_ref())?, 8);
        assert!(!root.join("w").exists());
        assert_eq!(std::fs::read(root.join("outside/keep"))?, b"12345");

        std::os::unix::fs::symlink(root.join("outside"), root.join("as-link"))?;
        assert_eq!(remove_tree(&parent, "as-link".as_ref())?, 0);
        assert!(root.join("outside/keep").exists());
        assert!(std::fs::symlink_metadata(root.join("as-link")).is_err());
        std::fs::write(root.join("as-file"), b"xy")?;
        assert_eq!(remove_tree(&parent, "as-file".as_ref())?, 2);
        assert_eq!(remove_tree(&parent, "missing".as_ref())?, 0);
        Ok(())
    }
}
