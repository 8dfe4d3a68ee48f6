//! The seed systems' metadata file, read and judged, and moving a seed
//! directory under the root (a rename, else a copy).

use std::path::Path;
use std::time::Duration;

use sandlog_core::{SessionId, Timestamp};
use serde::Deserialize;

use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct SeedMetadata {
    pub(super) session_id: String,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) version: u32,
}

/// How far in the future (by this engine's clock) an adopted timestamp may
/// lie and still be taken: the clocks of the host that wrote it and of this
/// one can disagree by that much. Later than that, the metadata is
/// corrupted, not trusted: the seeds let guest code rewrite its own
/// `.metadata.json`, and an `updated_at` years ahead would keep a session
/// from ever being old enough to prune while looking valid.
pub const ADOPTED_CLOCK_SKEW_MAX: Duration = Duration::from_secs(5 * 60);

/// Reads and validates seed metadata: the file must parse, name this
/// session, be version 1, and carry two valid timestamps, `created_at` no
/// later than `updated_at`, neither beyond `now` by more than
/// [`ADOPTED_CLOCK_SKEW_MAX`]. Corrupted metadata comes with the reason.
pub(super) fn read_seed_metadata(
    path: &Path,
    session_id: SessionId,
    now: Timestamp,
) -> std::result::Result<Option<(Timestamp, Timestamp)>, &'static str> {
    let metadata = match std::fs::symlink_metadata(path) {
        Err(_) => return Ok(None),
        Ok(metadata) => metadata,
    };
    if !metadata.is_file() {
        return Err("not a regular file");
    }
    if metadata.len() > SEED_METADATA_BYTES_MAX {
        return Err("larger than SEED_METADATA_BYTES_MAX");
    }
    let bytes = std::fs::read(path).map_err(|_| "unreadable")?;
    let seed: SeedMetadata =
        serde_json::from_slice(&bytes).map_err(|_| "not seed metadata JSON")?;
    if seed.version != 1 {
        return Err("version is not 1");
    }
    if SessionId::parse(&seed.session_id).ok() != Some(session_id) {
        return Err("session_id names another session");
    }
    let created_at = Timestamp::parse(&seed.created_at).map_err(|_| "created_at is not a time")?;
    let updated_at = Timestamp::parse(&seed.updated_at).map_err(|_| "updated_at is not a time")?;
    if updated_at < created_at {
        return Err("updated_at is before created_at");
    }
    if updated_at > now.saturating_add(ADOPTED_CLOCK_SKEW_MAX) {
        return Err("updated_at is in the future");
    }
    Ok(Some((created_at, updated_at)))
}

/// Moves a directory, across filesystems if need be (copy, then remove).
pub(super) fn move_dir(source: &Path, target: &Path) -> std::io::Result<()> {
    match std::fs::rename(source, target) {
        Ok(()) => Ok(()),
        Err(error) if error.raw_os_error() == Some(18) => {
            // EXDEV: not on the same filesystem.
            copy_dir(source, target)?;
            std::fs::remove_dir_all(source)
        }
        Err(error) => Err(error),
    }
}

/// Copies a directory tree (inspected first, so its depth is bounded):
/// directories, regular files (a copy has one link) and symlinks as links;
/// anything else is never opened and stays behind. A failed copy removes
/// what it made.
pub(super) fn copy_dir(source: &Path, target: &Path) -> std::io::Result<()> {
    let copied = copy_tree(source, target);
    if copied.is_err() {
        let _ = std::fs::remove_dir_all(target);
    }
    copied
}

pub(super) fn copy_tree(source: &Path, target: &Path) -> std::io::Result<()> {
    std::fs::create_dir(target)?;
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let file_type = entry.file_type()?;
        let to = target.join(entry.file_name());
        if file_type.is_dir() {
            copy_tree(&entry.path(), &to)?;
        } else if file_type.is_file() {
            std::fs::copy(entry.path(), &to)?;
        } else if file_type.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &to)?;
        }
    }
    Ok(())
}
