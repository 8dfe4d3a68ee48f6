//! Host file operations on a session's workspace: listing, reading,
//! writing (streamed, staged, recorded with its bytes) and deleting. Each
//! holds the session's lock and shared lease, and records its change as
//! `file.written` or `file.deleted` by the host.

use sandlog_core::event::{Event, FileDeleted, FileWritten, WrittenBy};
use sandlog_core::human::format_size;
use sandlog_core::limits::BLOB_BYTES_MAX;
use sandlog_core::{NewEvent, SessionId, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use sandlog_sqlite::query::{self, FileView};

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::Workspace;

impl Engine {
    /// A session's files (from the projection), optionally matching a glob.
    pub fn list_files(
        &self,
        session_id: SessionId,
        pattern: Option<&str>,
    ) -> Result<Vec<FileView>> {
        self.session(session_id)?;
        Ok(query::files(&self.store, session_id, pattern)?)
    }

    /// Reads a file from a session's workspace (S4, S5).
    pub fn read_file(&self, session_id: SessionId, path: &WorkspacePath) -> Result<Vec<u8>> {
        let session = self.session(session_id)?;
        if !session.status.has_workspace() {
            return Err(RuntimeError::SessionNotActive {
                session_id,
                status: session.status,
            });
        }
        let workspace = Workspace::open(&self.layout.workspace(session_id))?;
        match workspace.is_dir(path)? {
            None => Err(RuntimeError::FileNotFound {
                session_id,
                path: path.to_string(),
            }),
            Some(true) => Err(RuntimeError::IsDirectory {
                path: path.to_string(),
            }),
            Some(false) => workspace.read(path),
        }
    }

    /// Writes a file into a session's workspace (S4, S5): refused if it
    /// exists and `overwrite` is false, or if the workspace would go over
    /// its quota. The contents are stored as a blob and `file.written`
    /// (by host) is appended; `updated_at` moves (M2). The bytes go through
    /// [`Engine::write_file_from`]; knowing their length, this refuses a
    /// write past the quota up front with [`RuntimeError::QuotaExceeded`].
    pub fn write_file(
        &self,
        session_id: SessionId,
        path: &WorkspacePath,
        bytes: &[u8],
        overwrite: bool,
    ) -> Result<FileView> {
        let mut reader = bytes;
        self.write_file_leased(
            session_id,
            path,
            &mut reader,
            overwrite,
            Some(bytes.len() as u64),
        )
    }

    /// Writes a file into a session's workspace from a stream (S4, S5):
    /// refused if it exists and `overwrite` is false. The input is copied
    /// in bounded chunks into a temporary file and may not exceed what the
    /// workspace quota leaves (counting the file it replaces) nor
    /// [`BLOB_BYTES_MAX`]: past that the copy stops at once and fails with
    /// [`RuntimeError::InputTooLarge`], leaving no file, no temporary file
    /// and no event. On success the contents are stored as a blob (the
    /// blob store takes them in memory: at most that limit), the temporary
    /// file is renamed over the target and `file.written` (by host) is
    /// appended. Reading `reader` may block (a FIFO with no writer): the
    /// caller chose it.
    pub fn write_file_from(
        &self,
        session_id: SessionId,
        path: &WorkspacePath,
        reader: &mut dyn std::io::Read,
        overwrite: bool,
    ) -> Result<FileView> {
        self.write_file_leased(session_id, path, reader, overwrite, None)
    }

    /// [`Engine::write_file_from`]; with the input's `size` known up front,
    /// a write the quota cannot take fails before anything is read with
    /// [`RuntimeError::QuotaExceeded`].
    fn write_file_leased(
        &self,
        session_id: SessionId,
        path: &WorkspacePath,
        reader: &mut dyn std::io::Read,
        overwrite: bool,
        size: Option<u64>,
    ) -> Result<FileView> {
        // Held through the write and its record: never credited to a
        // guest running meanwhile, which holds the same lock.
        let (_hold, session) = self.hold_for_writing_summary(session_id, self.session_wait())?;
        let previous =
            query::session_file(&self.store, session_id, path)?.map_or(0, |file| file.size);
        let quota = self.session_quota(session.max_size, None)?;
        if let Some(size) = size {
            let would_be = session.bytes.saturating_sub(previous).saturating_add(size);
            if would_be > quota {
                return Err(RuntimeError::QuotaExceeded {
                    session_id,
                    path: path.to_string(),
                    would_be,
                    quota,
                });
            }
        }
        let workspace = Workspace::open(&self.layout.workspace(session_id))?;
        match workspace.is_dir(path)? {
            Some(true) => {
                return Err(RuntimeError::IsDirectory {
                    path: path.to_string(),
                });
            }
            Some(false) if !overwrite => {
                return Err(RuntimeError::FileExists {
                    session_id,
                    path: path.to_string(),
                });
            }
            _ => {}
        }
        let left = quota.saturating_sub(session.bytes.saturating_sub(previous));
        let blob_max = BLOB_BYTES_MAX as u64;
        let bytes_max = left.min(blob_max);
        let staged = match workspace.stage_from(path, reader, bytes_max) {
            Err(RuntimeError::InputTooLarge {
                path,
                bytes_max,
                read,
                ..
            }) => {
                let (limit, remedy) = if left <= blob_max {
                    (
                        format!(
                            "the {left} bytes ({}) left under session {session_id}'s workspace quota of {quota} bytes ({})",
                            format_size(left),
                            format_size(quota)
                        ),
                        "Raise the quota, free space in the workspace, or write a smaller file.",
                    )
                } else {
                    (
                        format!(
                            "the largest file a host write takes, BLOB_BYTES_MAX = {blob_max} bytes ({})",
                            format_size(blob_max)
                        ),
                        "Write a smaller file.",
                    )
                };
                return Err(RuntimeError::InputTooLarge {
                    path,
                    limit,
                    bytes_max,
                    read,
                    remedy,
                });
            }
            staged => staged?,
        };
        let size = staged.size();
        let blake3 = staged.blake3();
        // The bytes are stored with the event, and the file is renamed into
        // place inside that transaction, just before it commits: the side
        // effect precedes its event, and a crash leaves either no new file
        // and no event, or the new file without its event (drift that
        // `reconcile` reports), never an event whose bytes are not stored.
        // The staged file is fsynced on another thread while the blob and
        // the event are written, and joined before the rename: the two
        // waits overlap instead of adding up.
        let syncer = staged.syncer()?;
        let mut staged = Some(staged);
        std::thread::scope(|scope| -> Result<()> {
            let mut sync = Some(scope.spawn(move || syncer.sync_all()));
            self.write_session(session_id, session.version, |write, version| {
                // Only a version conflict runs this again, and it is found
                // before the rename below.
                let Some(file) = staged.as_mut() else {
                    return Err(RuntimeError::Conflict(session_id));
                };
                write.put_blob_from(file.reader()?, Some(blake3), size)?;
                let written = FileWritten::kept(path.clone(), size, blake3, WrittenBy::Host);
                let envelopes = write.append(
                    session_id.stream(),
                    ExpectedVersion::Exact(version),
                    &[self.event(&Event::FileWritten(written))],
                )?;
                if let Some(sync) = sync.take() {
                    sync.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                        .map_err(RuntimeError::io(format!(
                            "syncing the staged write of {path}"
                        )))?;
                }
                if let Some(file) = staged.take() {
                    file.commit()?;
                }
                Ok(envelopes)
            })?;
            Ok(())
        })?;
        tracing::info!(target: "sandlog::lifecycle", event = "file.written", %session_id, %path, size, "file written");
        self.maybe_checkpoint(false);
        Ok(FileView {
            path: path.clone(),
            size,
            blake3,
            updated_at: self.options.clock.now(),
        })
    }

    /// Deletes a file, or a directory with `recursive` (S4). Appends one
    /// `file.deleted` (by host) per file the projection knew under `path`.
    pub fn delete_file(
        &self,
        session_id: SessionId,
        path: &WorkspacePath,
        recursive: bool,
    ) -> Result<Vec<WorkspacePath>> {
        let (_hold, session) = self.hold_for_writing(session_id, self.session_wait())?;
        let workspace = Workspace::open(&self.layout.workspace(session_id))?;
        if workspace.is_dir(path)?.is_none() && !session.files.contains_key(path) {
            return Err(RuntimeError::FileNotFound {
                session_id,
                path: path.to_string(),
            });
        }
        workspace.remove(path, recursive)?;
        let removed: Vec<WorkspacePath> = session
            .files
            .keys()
            .filter(|known| known.starts_with(path))
            .cloned()
            .collect();
        let events: Vec<NewEvent> = if removed.is_empty() {
            vec![self.event(&Event::FileDeleted(FileDeleted {
                path: path.clone(),
                by: WrittenBy::Host,
            }))]
        } else {
            removed
                .iter()
                .map(|file| {
                    self.event(&Event::FileDeleted(FileDeleted {
                        path: file.clone(),
                        by: WrittenBy::Host,
                    }))
                })
                .collect()
        };
        self.append_to_session(session_id, session.version, &events)?;
        tracing::info!(target: "sandlog::lifecycle", event = "file.deleted", %session_id, %path, files = removed.len(), "deleted");
        Ok(if removed.is_empty() {
            vec![path.clone()]
        } else {
            removed
        })
    }
}
