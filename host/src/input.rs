//! Reading what a user names: key and checkpoint files, evidence bundles,
//! code files, uploads, code on stdin. Every such read checks what the
//! path is before reading it and stops at a named bound, so a FIFO, a
//! device (`/dev/zero`, `/dev/random`) or a huge file is refused at once,
//! in bounded memory, and never hangs the command or exhausts memory.
//!
//! A path is opened without blocking (`O_NONBLOCK`: opening a FIFO for
//! reading would otherwise wait for a writer), then the *opened* file's
//! type is checked (`fstat`), so the check and the read are of the same
//! file.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Result, RuntimeError};

/// What a path turned out to be, for an error that names it.
fn file_kind(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading, refusing anything but a regular file (after
/// following symlinks) without blocking on it, and returns it with its
/// metadata. `what` names the input in errors (`signing key`, `bundle`).
pub fn open_regular(path: &Path, what: &str) -> Result<(File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(RuntimeError::io(format!(
            "reading {what} {}",
            path.display()
        )))?;
    let metadata = file.metadata().map_err(RuntimeError::io(format!(
        "reading {what} {}",
        path.display()
    )))?;
    if !metadata.is_file() {
        return Err(RuntimeError::NotAFile {
            path: path.display().to_string(),
            what: what.to_owned(),
            found: file_kind(&metadata),
        });
    }
    Ok((file, metadata))
}

/// The whole of the regular file at `path`, at most `max` bytes (named
/// `limit` in the error, e.g. `KEY_FILE_BYTES_MAX`). A larger file is
/// refused by its size before any byte is read; one that grows while
/// being read is cut off at `max + 1` bytes and refused the same way.
pub fn read_file_bounded(
    path: &Path,
    what: &str,
    max: u64,
    limit: &'static str,
) -> Result<Vec<u8>> {
    let (file, metadata) = open_regular(path, what)?;
    read_opened_bounded(file, &metadata, path, what, max, limit)
}

/// [`read_file_bounded`] of a file already opened by [`open_regular`].
pub fn read_opened_bounded(
    file: File,
    metadata: &std::fs::Metadata,
    path: &Path,
    what: &str,
    max: u64,
    limit: &'static str,
) -> Result<Vec<u8>> {
    if metadata.len() > max {
        return Err(too_large(what, path, limit, max));
    }
    read_bounded(file, max, || too_large(what, path, limit, max))
        .map_err(|error| with_context(error, what, path))
}

/// [`read_file_bounded`] for text: the bytes must be UTF-8.
pub fn read_text_bounded(path: &Path, what: &str, max: u64, limit: &'static str) -> Result<String> {
    let bytes = read_file_bounded(path, what, max, limit)?;
    String::from_utf8(bytes).map_err(|_| RuntimeError::NotText {
        path: path.display().to_string(),
        what: what.to_owned(),
    })
}

/// At most `max` bytes of a stream (stdin): past them, `too_large()`; no
/// more than `max + 1` bytes are ever held.
pub fn read_stream_bounded(
    reader: impl Read,
    what: &str,
    max: u64,
    limit: &'static str,
) -> Result<Vec<u8>> {
    read_bounded(reader, max, || RuntimeError::ReadTooLarge {
        what: what.to_owned(),
        limit,
        max,
    })
    .map_err(|error| match error {
        RuntimeError::Io { source, .. } => RuntimeError::Io {
            context: format!("reading {what}"),
            source,
        },
        other => other,
    })
}

fn read_bounded(
    reader: impl Read,
    max: u64,
    too_large: impl FnOnce() -> RuntimeError,
) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(RuntimeError::io(String::new()))?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

fn too_large(what: &str, path: &Path, limit: &'static str, max: u64) -> RuntimeError {
    RuntimeError::ReadTooLarge {
        what: format!("{what} {}", path.display()),
        limit,
        max,
    }
}

fn with_context(error: RuntimeError, what: &str, path: &Path) -> RuntimeError {
    match error {
        RuntimeError::Io { source, .. } => RuntimeError::Io {
            context: format!("reading {what} {}", path.display()),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_unread() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status()?;
        assert!(status.success());
        for (path, found) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (dir.path(), "directory"),
        ] {
            match read_file_bounded(path, "key", 1024, "KEY_FILE_BYTES_MAX") {
                Err(RuntimeError::NotAFile { found: kind, .. }) => {
                    assert!(kind.contains(found), "{kind}");
                }
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2048])?;
        let error = read_file_bounded(&big, "key", 1024, "KEY_FILE_BYTES_MAX").unwrap_err();
        assert!(error.to_string().contains("KEY_FILE_BYTES_MAX"), "{error}");
        assert_eq!(error.kind(), "too_large");
        let zero = std::fs::File::open("/dev/zero")?;
        let error = read_stream_bounded(zero, "code on stdin", 4096, "CODE_BYTES_MAX").unwrap_err();
        assert!(error.to_string().contains("CODE_BYTES_MAX"), "{error}");
        Ok(())
    }
}
