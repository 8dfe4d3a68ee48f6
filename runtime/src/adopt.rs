//! Adopting workspaces made by the seed systems (M4): UUID-named
//! directories, with a `.metadata.json` that may be valid, corrupted or
//! missing.
//!
//! Each directory is moved under the root, its metadata (when valid) gives
//! the session's timestamps, and the metadata file leaves the workspace so
//! no guest ever sees it (M3). Without valid metadata the session is
//! recorded as legacy: it keeps working and is never pruned; a corrupted
//! file is kept as evidence under `<root>/evidence/`. Metadata that parses
//! but cannot be true (`updated_at` before `created_at`, or in the future
//! beyond [`ADOPTED_CLOCK_SKEW_MAX`]) is corrupted: the seeds let guests
//! rewrite it. Every file found
//! becomes a `file.written` event so the files projection is complete.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandlog_core::event::{Event, FileWritten, MetadataStatus, SessionAdopted, WrittenBy};
use sandlog_core::{NewEvent, SessionId, Timestamp, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::lifecycle::Progress;
use crate::workspace::{Workspace, fsync_dir};

/// The seed systems' metadata file name.
pub const SEED_METADATA_FILE: &str = ".metadata.json";

/// Largest metadata file read, bytes; anything bigger is corrupted.
const SEED_METADATA_BYTES_MAX: u64 = 64 * 1024;

/// What adoption did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AdoptReport {
    /// Adopted with valid metadata (timestamps kept).
    pub adopted: Vec<SessionId>,
    /// Adopted without metadata: legacy.
    pub legacy: Vec<SessionId>,
    /// Adopted with corrupted metadata: legacy, evidence kept.
    pub corrupted: Vec<SessionId>,
    /// Entries not adopted, with the reason (not UUID-named, already known,
    /// failed).
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug, Deserialize)]
struct SeedMetadata {
    session_id: String,
    created_at: String,
    updated_at: String,
    version: u32,
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
fn read_seed_metadata(
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
fn move_dir(source: &Path, target: &Path) -> std::io::Result<()> {
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

fn copy_dir(source: &Path, target: &Path) -> std::io::Result<()> {
    std::fs::create_dir(target)?;
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let file_type = entry.file_type()?;
        let to = target.join(entry.file_name());
        if file_type.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else if file_type.is_file() {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

impl Engine {
    /// Adopts every UUID-named directory in `source` (M4).
    pub fn adopt(&self, source: &Path, progress: Progress<'_>) -> Result<AdoptReport> {
        let mut report = AdoptReport::default();
        let entries: Vec<_> = std::fs::read_dir(source)
            .map_err(RuntimeError::io(format!("reading {}", source.display())))?
            .collect::<std::io::Result<_>>()
            .map_err(RuntimeError::io(format!("reading {}", source.display())))?;
        let in_place = source.canonicalize().ok() == self.layout.workspaces.canonicalize().ok();
        let total = entries.len() as u64;
        for (index, entry) in entries.iter().enumerate() {
            progress(index as u64, total);
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().is_ok_and(|file_type| file_type.is_dir());
            let Ok(session_id) = SessionId::parse(&name) else {
                report
                    .skipped
                    .push((name, "not a UUID-named directory".to_owned()));
                continue;
            };
            if !is_dir {
                report.skipped.push((name, "not a directory".to_owned()));
                continue;
            }
            if self.store.stream_version(session_id.stream())?.is_some() {
                report
                    .skipped
                    .push((name, "already known to this root".to_owned()));
                continue;
            }
            match self.adopt_one(session_id, &entry.path(), in_place) {
                Ok(MetadataStatus::Ok) => report.adopted.push(session_id),
                Ok(MetadataStatus::Missing) => report.legacy.push(session_id),
                Ok(MetadataStatus::Corrupted) => report.corrupted.push(session_id),
                Err(error) => report.skipped.push((name, error.to_string())),
            }
        }
        progress(total, total);
        Ok(report)
    }

    fn adopt_one(
        &self,
        session_id: SessionId,
        source: &Path,
        in_place: bool,
    ) -> Result<MetadataStatus> {
        let target = self.layout.workspace(session_id);
        let metadata_path = source.join(SEED_METADATA_FILE);
        let (status, timestamps) = match read_seed_metadata(
            &metadata_path,
            session_id,
            self.options.clock.now(),
        ) {
            Ok(Some(timestamps)) => (MetadataStatus::Ok, Some(timestamps)),
            Ok(None) => (MetadataStatus::Missing, None),
            Err(reason) => {
                tracing::warn!(target: "sandlog::lifecycle", %session_id, reason, "adopted metadata is corrupted; the session is legacy");
                (MetadataStatus::Corrupted, None)
            }
        };
        if !in_place {
            if target.exists() {
                return Err(RuntimeError::Io {
                    context: format!("adopting {}", source.display()),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!("{} already exists", target.display()),
                    ),
                });
            }
            move_dir(source, &target).map_err(RuntimeError::io(format!(
                "moving {} to {}",
                source.display(),
                target.display()
            )))?;
            fsync_dir(&self.layout.workspaces).map_err(RuntimeError::io("syncing workspaces"))?;
        }
        // Take the metadata out of the workspace: into evidence/ when it
        // was corrupted, deleted when valid (its contents are now the
        // event).
        let moved_metadata = target.join(SEED_METADATA_FILE);
        let mut evidence = None;
        match status {
            MetadataStatus::Corrupted => {
                std::fs::create_dir_all(&self.layout.evidence)
                    .map_err(RuntimeError::io("creating evidence/"))?;
                let kept: PathBuf = self
                    .layout
                    .evidence
                    .join(format!("{session_id}.metadata.json"));
                std::fs::rename(&moved_metadata, &kept).map_err(RuntimeError::io(format!(
                    "keeping {} as evidence",
                    moved_metadata.display()
                )))?;
                evidence = Some(format!(
                    "{}/{session_id}.metadata.json",
                    crate::engine::EVIDENCE_DIR
                ));
            }
            MetadataStatus::Ok => {
                std::fs::remove_file(&moved_metadata).map_err(RuntimeError::io(format!(
                    "removing {}",
                    moved_metadata.display()
                )))?;
            }
            MetadataStatus::Missing => {}
        }
        let workspace = Workspace::open(&target)?;
        let mut events: Vec<NewEvent> = vec![self.event(&Event::SessionAdopted(SessionAdopted {
            session_id,
            created_at: timestamps.map(|(created, _)| created),
            updated_at: timestamps.map(|(_, updated)| updated),
            metadata: status,
            source: source.display().to_string(),
            evidence,
        }))];
        for (path, scanned) in workspace.scan()? {
            let blake3 = workspace.hash(&path)?;
            let file = FileWritten {
                path: WorkspacePath::clone(&path),
                size: scanned.size,
                blake3,
                by: WrittenBy::Adoption,
            };
            events.push(self.event(&Event::FileWritten(file)));
        }
        self.store
            .append(session_id.stream(), ExpectedVersion::NoStream, &events)?;
        tracing::info!(target: "sandlog::lifecycle", event = "session.adopted", %session_id, metadata = ?status, files = events.len() - 1, "adopted");
        Ok(status)
    }
}
