//! Reading evidence back: a session's workspace as it was at any point
//! (one file, or the whole tree restored into a new directory), one
//! execution with its code and output, and a fork of a session as of a
//! point.
//!
//! Everything here folds the session's own stream up to the cut (never the
//! read models, which hold only the present) and streams blob bytes a chunk
//! at a time.

use std::collections::BTreeMap;
use std::path::Path;

use sandlog_core::event::{
    EvidenceErased, ExecEvidence, ExecutionScan, FileWritten, NotKept, RecordedLimits,
    SessionCreated, SessionForked,
};
use sandlog_core::{
    Envelope, Event, Hash, Position, SessionId, StreamId, Timestamp, WorkspacePath,
};
use sandlog_eventstore::{BlobState, ExpectedVersion, LogFilter};
use sandlog_projections::{Cut, SessionState, State, apply};
use serde::Serialize;

use crate::engine::{Engine, check_labels};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::{Workspace, fsync_dir};

/// Bytes of code or output an [`ExecutionRecord`] holds per stream when
/// read for a listing (a timeline, a report): enough for a person to see
/// what ran, bounded whatever the output limit was.
pub const EXCERPT_BYTES_DEFAULT: usize = 4 * 1024;

/// Most bytes of code or output read whole for one execution: the largest
/// output limit an execution can have.
pub const CONTENT_BYTES_MAX: usize = sandlog_sandbox::limits::OUTPUT_BYTES_MAX;

/// A session as it was at a point.
#[derive(Debug, Clone)]
pub struct PastSession {
    /// The fold of its events up to the cut.
    pub state: SessionState,
    /// The last position included.
    pub position: Position,
    /// Each file's `file.written` event (what says whether its bytes were
    /// kept).
    pub writes: BTreeMap<WorkspacePath, FileWritten>,
}

/// What `files restore` wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// Files written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files of the workspace at that point whose bytes are not available,
    /// each with the reason.
    pub missing: Vec<MissingFile>,
    /// The position restored.
    pub position: u64,
}

/// A file a restore or fork could not write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingFile {
    /// Its path.
    pub path: WorkspacePath,
    /// Why: `budget`, `too_large`, `off`, `changed`, `unreadable`,
    /// `adopted`, `erased`, `not_stored`.
    pub reason: String,
}

/// What `session fork` made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForkReport {
    /// The new session.
    pub session_id: SessionId,
    /// The origin.
    pub forked_from: SessionId,
    /// The origin's position taken.
    pub at: u64,
    /// Files copied.
    pub files: u64,
    /// Files the origin had then whose bytes are not available.
    pub missing: Vec<MissingFile>,
}

/// Code or output of an execution, as far as it was kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Content {
    /// Its length when produced, bytes.
    pub bytes: u64,
    /// Its blake3.
    pub blake3: Hash,
    /// `kept`, `not_kept` (evidence off, or from before output was kept)
    /// or `erased`.
    pub state: &'static str,
    /// The bytes read (at most the excerpt asked for), as lossy UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether `text` stops short of the whole content.
    pub excerpt: bool,
    /// The raw bytes read.
    #[serde(skip)]
    pub raw: Vec<u8>,
}

/// One execution, as the log and the evidence say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutionRecord {
    /// The session.
    pub session_id: SessionId,
    /// Its number in the session, from 1.
    pub number: u64,
    /// The `session.executed` event.
    pub position: u64,
    /// When it was recorded.
    pub recorded_at: Timestamp,
    /// Who ran it.
    pub actor: String,
    /// The runtime.
    pub runtime: String,
    /// How it ended.
    pub outcome: &'static str,
    /// The guest's exit code.
    pub exit_code: Option<i32>,
    /// Fuel consumed.
    pub fuel_consumed: Option<u64>,
    /// Wall time, microseconds.
    pub duration_us: u64,
    /// The limits it ran under.
    pub limits: RecordedLimits,
    /// The host's scan after the run.
    pub scan: Option<ExecutionScan>,
    /// What was kept as evidence.
    pub evidence: Option<ExecEvidence>,
    /// The code.
    pub code: Content,
    /// What it printed.
    pub stdout: Content,
    /// Whether stdout hit its cap.
    pub stdout_truncated: bool,
    /// What it printed on stderr.
    pub stderr: Content,
    /// Whether stderr hit its cap.
    pub stderr_truncated: bool,
    /// Files it wrote, with whether their bytes were kept.
    pub files_written: Vec<FileWritten>,
    /// Files it deleted.
    pub files_deleted: Vec<WorkspacePath>,
}

/// Which execution of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecSelector {
    /// The N-th execution, from 1.
    Number(u64),
    /// The execution recorded at this position.
    Position(u64),
}

impl ExecSelector {
    /// `N` (an execution number) or `@POS` (an event position).
    pub fn parse(text: &str) -> Result<ExecSelector> {
        let invalid = || {
            RuntimeError::Invalid(sandlog_core::CoreError::InvalidPayload {
                kind: "execution".into(),
                schema: 0,
                reason: format!(
                    "{text:?} is not an execution: give its number in the session (1, 2, ...) or @POSITION"
                ),
            })
        };
        match text.strip_prefix('@') {
            Some(position) => position
                .parse()
                .map(ExecSelector::Position)
                .map_err(|_| invalid()),
            None => match text.parse() {
                Ok(0) | Err(_) => Err(invalid()),
                Ok(number) => Ok(ExecSelector::Number(number)),
            },
        }
    }
}

/// Keeps the first `cap` bytes written and counts the rest.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.cap.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(buf.get(..room.min(buf.len())).unwrap_or_default());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn not_in_history(session_id: SessionId, what: String) -> RuntimeError {
    RuntimeError::NotInHistory { session_id, what }
}

impl Engine {
    /// The last position of a cut, never past the log's head: a position
    /// not yet written names the present, and is reported (and recorded by
    /// a fork) as the head, so it cannot later claim events appended after.
    pub fn cut_position(&self, cut: Cut) -> Result<Position> {
        let head = self.store.head()?.position;
        Ok(cut.position(&self.store)?.min(head))
    }

    /// A session as it was at `cut`, folded from its own stream.
    pub fn session_as_of(&self, session_id: SessionId, cut: Cut) -> Result<PastSession> {
        self.session(session_id)?;
        let to = self.cut_position(cut)?;
        let mut state = State::default();
        let mut writes: BTreeMap<WorkspacePath, FileWritten> = BTreeMap::new();
        let filter = LogFilter {
            stream: Some(StreamId::Session(session_id)),
            to: Some(to),
            ..LogFilter::default()
        };
        for envelope in self.store.query(filter) {
            let envelope = envelope?;
            match envelope.event() {
                Ok(Some(Event::FileWritten(written))) => {
                    writes.insert(written.path.clone(), written);
                }
                Ok(Some(Event::FileDeleted(deleted))) => {
                    writes.retain(|path, _| !path.starts_with(&deleted.path));
                }
                Ok(Some(Event::SessionPruned(_) | Event::SessionDeleted(_))) => writes.clear(),
                _ => {}
            }
            apply(&mut state, &envelope);
        }
        let state = state.sessions.remove(&session_id).ok_or_else(|| {
            not_in_history(
                session_id,
                format!("did not exist yet at position {to}; its first event is later"),
            )
        })?;
        Ok(PastSession {
            state,
            position: to,
            writes,
        })
    }

    /// Why a file's bytes were never stored, by its event alone.
    fn not_kept(&self, written: &FileWritten) -> Option<(String, RuntimeError)> {
        let what = format!("{} (written with hash {})", written.path, written.blake3);
        if !written.content_stored() {
            let reason = written.not_kept.unwrap_or(NotKept::Off);
            let text = match written.content_kept {
                None => "written by the guest before sandlog kept evidence".to_owned(),
                Some(_) => reason.describe().to_owned(),
            };
            return Some((
                reason.as_str().to_owned(),
                RuntimeError::ContentNotKept {
                    what,
                    reason: text,
                    hash: written.blake3.to_string(),
                },
            ));
        }
        None
    }

    /// Why a blob cannot be read, or `None` when it can.
    fn blob_unavailable(
        &self,
        hash: &Hash,
        what: String,
    ) -> Result<Option<(String, RuntimeError)>> {
        Ok(match self.backend().blob_state(hash)? {
            BlobState::Kept { .. } => None,
            BlobState::Erased { erased_at, .. } => Some((
                "erased".to_owned(),
                RuntimeError::ContentErased {
                    what,
                    erased_at: erased_at.to_string(),
                    reason: self.erasure_reason(hash)?,
                    hash: hash.to_string(),
                },
            )),
            BlobState::Missing => Some((
                "not_stored".to_owned(),
                RuntimeError::ContentNotKept {
                    what,
                    reason: "no bytes are stored under its hash".to_owned(),
                    hash: hash.to_string(),
                },
            )),
        })
    }

    /// The reason of the last `evidence.erased` event naming `hash`.
    fn erasure_reason(&self, hash: &Hash) -> Result<String> {
        let filter = LogFilter {
            kinds: vec!["evidence.erased".to_owned()],
            ..LogFilter::default()
        };
        let mut reason = "no evidence.erased event names it".to_owned();
        for envelope in self.store.query(filter) {
            let envelope = envelope?;
            if let Ok(Some(Event::EvidenceErased(EvidenceErased {
                reason: why, blobs, ..
            }))) = envelope.event()
                && blobs.contains(hash)
            {
                reason = format!(
                    "by {} at position {}: {why}",
                    envelope.actor, envelope.position
                );
            }
        }
        Ok(reason)
    }

    /// Writes a stored blob to `out` (`blob cat`); returns its length.
    pub fn cat_blob(&self, hash: &Hash, out: &mut dyn std::io::Write) -> Result<u64> {
        if self.backend().blob_state(hash)? == BlobState::Missing {
            return Err(RuntimeError::BlobNotFound(hash.to_string()));
        }
        self.copy_blob(hash, out, &|| format!("blob {hash}"))
    }

    /// Streams a blob to `out`: one read that checks the state and copies;
    /// the reason it cannot (erased meanwhile, say) only when it fails.
    fn copy_blob(
        &self,
        hash: &Hash,
        out: &mut dyn std::io::Write,
        what: &dyn Fn() -> String,
    ) -> Result<u64> {
        match self.backend().read_blob(hash, out)? {
            BlobState::Kept { size, .. } => Ok(size),
            _ => match self.blob_unavailable(hash, what())? {
                Some((_, error)) => Err(error),
                // Stored again between the two reads: read it again.
                None => self.copy_blob(hash, out, what),
            },
        }
    }

    /// Writes a file as it was at `cut` to `out` (`files cat --at`);
    /// returns its length.
    pub fn read_file_at(
        &self,
        session_id: SessionId,
        path: &WorkspacePath,
        cut: Cut,
        out: &mut dyn std::io::Write,
    ) -> Result<u64> {
        let past = self.session_as_of(session_id, cut)?;
        let Some(written) = past.writes.get(path) else {
            return Err(RuntimeError::FileNotFound {
                session_id,
                path: format!("{path} (at position {})", past.position),
            });
        };
        if let Some((_, error)) = self.not_kept(written) {
            return Err(error);
        }
        self.copy_blob(&written.blake3, out, &|| {
            format!("{} (written with hash {})", written.path, written.blake3)
        })
    }

    /// Writes the whole workspace as it was at `cut` into `to`, which must
    /// not exist or be empty (`files restore`). Files whose bytes are not
    /// available are listed, not fatal.
    pub fn restore(&self, session_id: SessionId, cut: Cut, to: &Path) -> Result<RestoreReport> {
        let past = self.session_as_of(session_id, cut)?;
        prepare_empty_dir(to)?;
        let target = Workspace::open(to)?;
        let mut report = RestoreReport {
            files: 0,
            bytes: 0,
            missing: Vec::new(),
            position: past.position.0,
        };
        for (path, written) in &past.writes {
            match self.copy_file(&target, path, written, false)? {
                Ok(size) => {
                    report.files += 1;
                    report.bytes += size;
                }
                Err(missing) => report.missing.push(missing),
            }
        }
        Ok(report)
    }

    /// One execution of a session, its code and output read up to
    /// `excerpt` bytes each (`None`: whole, up to [`CONTENT_BYTES_MAX`]).
    pub fn execution_record(
        &self,
        session_id: SessionId,
        selector: ExecSelector,
        excerpt: Option<usize>,
    ) -> Result<ExecutionRecord> {
        let records =
            self.execution_records_where(session_id, excerpt, |number, position| match selector {
                ExecSelector::Number(wanted) => number == wanted,
                ExecSelector::Position(wanted) => position == wanted,
            })?;
        if let Some(record) = records.into_iter().next() {
            return Ok(record);
        }
        // A bare number past the count may be a position.
        if let ExecSelector::Number(number) = selector {
            let records = self
                .execution_records_where(session_id, excerpt, |_, position| position == number)?;
            if let Some(record) = records.into_iter().next() {
                return Ok(record);
            }
        }
        let count = self.session(session_id)?.exec_count;
        Err(not_in_history(
            session_id,
            match selector {
                ExecSelector::Number(number) => format!(
                    "has no execution {number} (it has {count}; numbers start at 1, or give @POSITION)"
                ),
                ExecSelector::Position(position) => {
                    format!("has no execution at position {position} (it has {count})")
                }
            },
        ))
    }

    /// Every execution of a session, in order, with excerpts of at most
    /// `excerpt` bytes of code and output.
    pub fn execution_records(
        &self,
        session_id: SessionId,
        excerpt: usize,
    ) -> Result<Vec<ExecutionRecord>> {
        self.execution_records_where(session_id, Some(excerpt), |_, _| true)
    }

    fn execution_records_where(
        &self,
        session_id: SessionId,
        excerpt: Option<usize>,
        wanted: impl Fn(u64, u64) -> bool,
    ) -> Result<Vec<ExecutionRecord>> {
        self.session(session_id)?;
        let mut records: Vec<ExecutionRecord> = Vec::new();
        let mut causes: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
        let mut number = 0u64;
        let filter = LogFilter {
            stream: Some(StreamId::Session(session_id)),
            ..LogFilter::default()
        };
        for envelope in self.store.query(filter) {
            let envelope = envelope?;
            match envelope.event() {
                Ok(Some(Event::SessionExecuted(executed))) => {
                    number += 1;
                    if !wanted(number, envelope.position.0) {
                        continue;
                    }
                    causes.insert(envelope.event_id.0, records.len());
                    records.push(self.record(session_id, number, &envelope, executed, excerpt)?);
                }
                Ok(Some(Event::FileWritten(written))) => {
                    if let Some(record) =
                        cause_of(&envelope, &causes).and_then(|index| records.get_mut(index))
                    {
                        record.files_written.push(written);
                    }
                }
                Ok(Some(Event::FileDeleted(deleted))) => {
                    if let Some(record) =
                        cause_of(&envelope, &causes).and_then(|index| records.get_mut(index))
                    {
                        record.files_deleted.push(deleted.path);
                    }
                }
                _ => {}
            }
        }
        Ok(records)
    }

    fn record(
        &self,
        session_id: SessionId,
        number: u64,
        envelope: &Envelope,
        executed: sandlog_core::event::SessionExecuted,
        excerpt: Option<usize>,
    ) -> Result<ExecutionRecord> {
        let output_kept = executed
            .evidence
            .is_some_and(|evidence| evidence.output_kept);
        let code = self.content(&executed.code_blake3, executed.code_bytes, true, excerpt)?;
        let stdout = self.content(
            &executed.stdout_blake3,
            executed.stdout_bytes,
            output_kept,
            excerpt,
        )?;
        let stderr = self.content(
            &executed.stderr_blake3,
            executed.stderr_bytes,
            output_kept,
            excerpt,
        )?;
        Ok(ExecutionRecord {
            session_id,
            number,
            position: envelope.position.0,
            recorded_at: envelope.recorded_at,
            actor: envelope.actor.clone(),
            runtime: executed.runtime,
            outcome: executed.outcome.as_str(),
            exit_code: executed.exit_code,
            fuel_consumed: executed.fuel_consumed,
            duration_us: executed.duration_us,
            limits: executed.limits,
            scan: executed.scan.map(|scan| *scan),
            evidence: executed.evidence,
            code,
            stdout,
            stdout_truncated: executed.stdout_truncated,
            stderr,
            stderr_truncated: executed.stderr_truncated,
            files_written: Vec::new(),
            files_deleted: Vec::new(),
        })
    }

    fn content(
        &self,
        hash: &Hash,
        bytes: u64,
        stored: bool,
        excerpt: Option<usize>,
    ) -> Result<Content> {
        let mut content = Content {
            bytes,
            blake3: *hash,
            state: "not_kept",
            text: None,
            excerpt: false,
            raw: Vec::new(),
        };
        if !stored {
            return Ok(content);
        }
        let cap = excerpt.unwrap_or(CONTENT_BYTES_MAX).min(CONTENT_BYTES_MAX);
        let mut capped = Capped {
            bytes: Vec::new(),
            cap,
        };
        match self.backend().read_blob(hash, &mut capped)? {
            BlobState::Kept { size, .. } => {
                content.state = "kept";
                content.excerpt = size > capped.bytes.len() as u64;
                content.text = Some(String::from_utf8_lossy(&capped.bytes).into_owned());
                content.raw = capped.bytes;
            }
            BlobState::Erased { .. } => content.state = "erased",
            BlobState::Missing => {}
        }
        Ok(content)
    }

    /// Writes one file of a past workspace into `target` from its blob
    /// (synced with `sync`: a fork's files must be durable before the
    /// events that record them); the file as missing (and nothing left written) when its
    /// bytes are not available.
    fn copy_file(
        &self,
        target: &Workspace,
        path: &WorkspacePath,
        written: &FileWritten,
        sync: bool,
    ) -> Result<std::result::Result<u64, MissingFile>> {
        let missing = |reason: &str| MissingFile {
            path: path.clone(),
            reason: reason.to_owned(),
        };
        if let Some((reason, _)) = self.not_kept(written) {
            return Ok(Err(missing(&reason)));
        }
        let mut file = target.create_new(path)?;
        let state = self.backend().read_blob(&written.blake3, &mut file)?;
        let BlobState::Kept { size, .. } = state else {
            drop(file);
            target.remove(path, false)?;
            return Ok(Err(missing(match state {
                BlobState::Erased { .. } => "erased",
                _ => "not_stored",
            })));
        };
        if sync {
            file.sync_all().map_err(RuntimeError::io(format!(
                "writing {path} under {}",
                target.path().display()
            )))?;
        }
        Ok(Ok(size))
    }

    /// Makes a new session whose workspace is `origin`'s as it was at
    /// `cut` (`session fork`): `session.created`, `session.forked` naming
    /// the origin and position, and a `file.written` per file copied, in
    /// one transaction after the files are in place.
    pub fn fork(
        &self,
        origin: SessionId,
        cut: Cut,
        labels: BTreeMap<String, String>,
    ) -> Result<ForkReport> {
        check_labels(&labels)?;
        let past = self.session_as_of(origin, cut)?;
        let session_id = SessionId::new_v4();
        let directory = self.layout.workspace(session_id);
        std::fs::create_dir(&directory).map_err(RuntimeError::io(format!(
            "creating {}",
            directory.display()
        )))?;
        sandlog_host::lease::prepare(&self.layout.root, session_id);
        let made = self.fill_fork(&past, &directory);
        let (copied, missing) = match made {
            Ok(made) => made,
            Err(error) => {
                let _ = sandlog_host::workspace::remove_dir_tree(&directory);
                let _ = std::fs::remove_file(sandlog_host::lease::lease_path(
                    &self.layout.root,
                    session_id,
                ));
                return Err(error);
            }
        };
        fsync_dir(&self.layout.workspaces).map_err(RuntimeError::io(format!(
            "syncing {}",
            self.layout.workspaces.display()
        )))?;
        let workspace = Workspace::open(&directory)?;
        let forked = SessionForked {
            from: origin,
            at: past.position.0,
            files: copied.len() as u64,
            missing: missing.iter().map(|file| file.path.clone()).collect(),
        };
        let appended = self.write_log(|write| -> Result<()> {
            // A fork stays in its origin's task group, under the same size
            // limit and with the same read-only directories. The fork names
            // the session's creation as its cause, and each copied file the
            // fork.
            let created = self.event(&Event::SessionCreated(SessionCreated {
                session_id,
                labels: labels.clone(),
                group: past.state.group.clone(),
                max_size: past.state.max_size,
                readonly: past.state.readonly.clone(),
                node: Some(self.node().to_owned()),
            }));
            let mut fork = self.event(&Event::SessionForked(forked.clone()));
            fork.causation_id = Some(created.event_id.0);
            let cause = Some(fork.event_id.0);
            let mut events = vec![created, fork];
            for file in &copied {
                // Already stored (the copy came from it); the check costs
                // no read unless it was erased meanwhile, and then the
                // copy's bytes are stored again.
                let mut reader = workspace.open_read(&file.path)?;
                write.put_blob_from(&mut reader, Some(file.blake3), file.size)?;
                let mut copied = self.event(&Event::FileWritten(file.clone()));
                copied.causation_id = cause;
                events.push(copied);
            }
            write.append(session_id.stream(), ExpectedVersion::NoStream, &events)?;
            Ok(())
        });
        if let Err(error) = appended {
            let _ = sandlog_host::workspace::remove_dir_tree(&directory);
            return Err(error);
        }
        tracing::info!(target: "sandlog::lifecycle", event = "session.forked", %session_id, from = %origin, at = past.position.0, "session forked");
        Ok(ForkReport {
            session_id,
            forked_from: origin,
            at: past.position.0,
            files: copied.len() as u64,
            missing,
        })
    }

    /// Copies a past session's available files into `directory`.
    fn fill_fork(
        &self,
        past: &PastSession,
        directory: &Path,
    ) -> Result<(Vec<FileWritten>, Vec<MissingFile>)> {
        let workspace = Workspace::open(directory)?;
        let mut copied = Vec::new();
        let mut missing = Vec::new();
        for (path, written) in &past.writes {
            let size = match self.copy_file(&workspace, path, written, true)? {
                Ok(size) => size,
                Err(file) => {
                    missing.push(file);
                    continue;
                }
            };
            copied.push(FileWritten::kept(
                path.clone(),
                size,
                written.blake3,
                sandlog_core::WrittenBy::Host,
            ));
        }
        Ok((copied, missing))
    }
}

fn cause_of(envelope: &Envelope, causes: &BTreeMap<uuid::Uuid, usize>) -> Option<usize> {
    envelope
        .causation_id
        .and_then(|cause| causes.get(&cause).copied())
}

/// Creates `path` if missing; refuses one that holds anything (or is not a
/// directory).
fn prepare_empty_dir(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(path)
            .map_err(RuntimeError::io(format!("creating {}", path.display()))),
        Err(error) => Err(RuntimeError::io(format!("inspecting {}", path.display()))(
            error,
        )),
        Ok(metadata) if !metadata.is_dir() => Err(RuntimeError::NotEmpty {
            path: path.to_owned(),
        }),
        Ok(_) => {
            let mut entries = std::fs::read_dir(path)
                .map_err(RuntimeError::io(format!("listing {}", path.display())))?;
            if entries.next().is_some() {
                return Err(RuntimeError::NotEmpty {
                    path: path.to_owned(),
                });
            }
            Ok(())
        }
    }
}
