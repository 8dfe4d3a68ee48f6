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
//!
//! A seed workspace was written by guests, so its entries are hostile: each
//! is inspected (without opening it) before the directory moves. Regular
//! files, directories and symlinks whose target stays inside are taken;
//! files with other hard links are replaced by private copies (a write
//! through the workspace must never reach a file elsewhere); FIFOs,
//! sockets, device nodes and escaping symlinks are refused, moved to
//! `<root>/quarantine/` (deleted when they cannot be moved), and recorded
//! with the reason in `session.adopted`. A workspace past
//! [`ADOPT_ENTRIES_MAX`] or [`ADOPT_DEPTH_MAX`] is not adopted at all: it
//! stays where it is and the report says why.

mod inspect;
mod seed;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt};
use sandlog_core::event::{
    Event, FileWritten, MetadataStatus, RefusedEntry, SessionAdopted, WrittenBy,
};
use sandlog_core::limits::{BATCH_EVENTS_MAX, PAYLOAD_BYTES_MAX};
use sandlog_core::{NewEvent, SessionId};
use sandlog_eventstore::{EventStoreError, ExpectedVersion};
use serde::Serialize;

use crate::engine::Engine;
use crate::lifecycle::{FS_THREADS_MAX, Progress, in_parallel_threads};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::{SCAN_ENTRIES_MAX, fsync_dir};

use self::inspect::*;
pub use self::seed::ADOPTED_CLOCK_SKEW_MAX;
use self::seed::*;

/// The seed systems' metadata file name.
pub const SEED_METADATA_FILE: &str = ".metadata.json";

/// Largest metadata file read, bytes; anything bigger is corrupted.
const SEED_METADATA_BYTES_MAX: u64 = 64 * 1024;

/// Most entries (files, directories, anything) one workspace may hold to be
/// adopted. Every file becomes one event of the single atomic append that
/// records the adoption, so a workspace with more could never be recorded;
/// it is also within what a workspace scan visits. Past it the workspace is
/// not adopted and stays where it was.
pub const ADOPT_ENTRIES_MAX: usize = BATCH_EVENTS_MAX - 1;
const _: () = assert!(ADOPT_ENTRIES_MAX <= SCAN_ENTRIES_MAX);

/// Deepest directory nesting in a workspace to be adopted. Real workspaces
/// are far shallower; the bound keeps the walk's work list and every
/// relative path short (well within `PATH_MAX`). Past it the workspace is
/// not adopted and stays where it was.
pub const ADOPT_DEPTH_MAX: usize = 256;

/// Most bytes of refused and copied entries listed in one
/// `session.adopted` (their JSON). Half the payload limit leaves room for
/// the rest of the event; entries past it are still neutralised and are
/// counted in `unrecorded` (and logged) instead of listed.
pub const ADOPT_RECORD_BYTES_MAX: usize = PAYLOAD_BYTES_MAX / 2;

/// Most sessions one append records during adoption. Their moves share
/// one fsync of `workspaces/` and their events one transaction, instead of
/// one of each per session; the bound keeps what a crash can leave
/// half-done (moved, not yet recorded: orphans that `reconcile`
/// quarantines) and what is held in memory small.
pub const ADOPT_BATCH_SESSIONS: usize = 256;

/// Most payload bytes of the events one adoption append holds. A single
/// workspace needing more (many files) is appended alone; it is bounded by
/// [`ADOPT_ENTRIES_MAX`] and [`ADOPT_RECORD_BYTES_MAX`].
pub const ADOPT_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Most events (as inspected: one per entry, and one per workspace) of
/// the workspaces being prepared or waiting to be recorded at once, besides
/// the batch being filled. Workspaces are prepared on several threads;
/// this keeps what they hold in memory to about one more append's worth,
/// however large the workspaces. A single workspace needing more waits
/// until nothing else is in flight.
pub const ADOPT_IN_FLIGHT_EVENTS_MAX: usize = BATCH_EVENTS_MAX;

/// Units of [`ADOPT_IN_FLIGHT_EVENTS_MAX`] handed out to workers.
struct Budget {
    used: Mutex<usize>,
    freed: Condvar,
}

impl Budget {
    /// Waits until `units` fit (or nothing else is held), then takes them.
    fn acquire(&self, units: usize) {
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while *used > 0 && used.saturating_add(units) > ADOPT_IN_FLIGHT_EVENTS_MAX {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        *used = used.saturating_add(units);
    }

    fn release(&self, units: usize) {
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *used = used.saturating_sub(units);
        self.freed.notify_all();
    }
}

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
    /// past a limit, failed).
    pub skipped: Vec<(String, String)>,
    /// Adopted sessions in which entries were refused or hard-linked files
    /// copied, as recorded in their `session.adopted`.
    pub neutralised: Vec<Neutralised>,
}

/// What adoption refused or copied in one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Neutralised {
    /// The session.
    pub session_id: SessionId,
    /// Entries not taken, with the reason and where they went.
    pub refused: Vec<RefusedEntry>,
    /// Files that had other hard links, now private copies.
    pub copied_links: Vec<String>,
    /// Refused or copied entries past [`ADOPT_RECORD_BYTES_MAX`], not listed.
    pub unrecorded: u64,
}

impl Neutralised {
    fn is_empty(&self) -> bool {
        self.refused.is_empty() && self.copied_links.is_empty() && self.unrecorded == 0
    }
}

/// A workspace moved into the root and ready to be recorded.
struct Prepared {
    index: usize,
    /// Units of the in-flight budget it holds until it joins a batch.
    units: usize,
    session_id: SessionId,
    name: String,
    status: MetadataStatus,
    neutralised: Neutralised,
    events: Vec<NewEvent>,
}

impl Prepared {
    fn payload_bytes(&self) -> usize {
        self.events.iter().map(|event| event.payload.len()).sum()
    }
}

/// What became of one entry of the adopted directory.
enum Settled {
    Adopted {
        session_id: SessionId,
        status: MetadataStatus,
        neutralised: Neutralised,
    },
    Skipped {
        name: String,
        reason: String,
    },
}

/// One entry after the per-entry work: ready to record, or skipped.
enum Looked {
    Ready(Prepared),
    Skipped(usize, String, String),
}

/// Workspaces prepared but not yet recorded: one append for all of them.
#[derive(Default)]
struct AdoptBatch {
    prepared: Vec<Prepared>,
    events: usize,
    bytes: usize,
}

impl AdoptBatch {
    /// Whether `next` must go into a batch of its own: this one would pass
    /// a bound with it. A batch always takes one workspace.
    fn is_full_for(&self, next: &Prepared) -> bool {
        !self.prepared.is_empty()
            && (self.prepared.len() >= ADOPT_BATCH_SESSIONS
                || self.events + next.events.len() > BATCH_EVENTS_MAX
                || self.bytes + next.payload_bytes() > ADOPT_BATCH_BYTES_MAX)
    }

    fn push(&mut self, prepared: Prepared) {
        self.events += prepared.events.len();
        self.bytes += prepared.payload_bytes();
        self.prepared.push(prepared);
    }
}

/// The report, from every entry's fate in the order of the entries.
fn report_of(mut settled: Vec<(usize, Settled)>) -> AdoptReport {
    settled.sort_by_key(|(index, _)| *index);
    let mut report = AdoptReport::default();
    for (_, fate) in settled {
        match fate {
            Settled::Adopted {
                session_id,
                status,
                neutralised,
            } => {
                match status {
                    MetadataStatus::Ok => report.adopted.push(session_id),
                    MetadataStatus::Missing => report.legacy.push(session_id),
                    MetadataStatus::Corrupted => report.corrupted.push(session_id),
                }
                if !neutralised.is_empty() {
                    report.neutralised.push(neutralised);
                }
            }
            Settled::Skipped { name, reason } => report.skipped.push((name, reason)),
        }
    }
    report
}

impl Engine {
    /// Adopts every UUID-named directory in `source` (M4).
    ///
    /// Each workspace is checked, inspected, moved, neutralised and read
    /// on its own, on up to [`FS_THREADS_MAX`] threads; this thread records
    /// them in batches of up to [`ADOPT_BATCH_SESSIONS`]: one fsync of
    /// `workspaces/`, then one append of every `session.adopted` and
    /// `file.written` of the batch, each session's stream expected not to
    /// exist yet. Workspaces being prepared or waiting hold at most
    /// [`ADOPT_IN_FLIGHT_EVENTS_MAX`] events besides the batch, so memory
    /// stays bounded however many and however large the workspaces are.
    /// The report lists entries in the order they were read.
    pub fn adopt(&self, source: &Path, progress: Progress<'_>) -> Result<AdoptReport> {
        let entries: Vec<_> = std::fs::read_dir(source)
            .map_err(RuntimeError::io(format!("reading {}", source.display())))?
            .collect::<std::io::Result<_>>()
            .map_err(RuntimeError::io(format!("reading {}", source.display())))?;
        let in_place = source.canonicalize().ok() == self.layout.workspaces.canonicalize().ok();
        let total = entries.len() as u64;
        progress(0, total);
        let mut settled: Vec<(usize, Settled)> = Vec::with_capacity(entries.len());
        let mut batch = AdoptBatch::default();
        let mut done = 0u64;
        let budget = Budget {
            used: Mutex::new(0),
            freed: Condvar::new(),
        };
        let mut take = |looked: Looked, settled: &mut Vec<(usize, Settled)>| {
            match looked {
                Looked::Skipped(index, name, reason) => {
                    settled.push((index, Settled::Skipped { name, reason }));
                }
                Looked::Ready(prepared) => {
                    if batch.is_full_for(&prepared) {
                        self.record_adopted(std::mem::take(&mut batch), in_place, settled);
                    }
                    // From here the batch's own bounds hold it.
                    budget.release(prepared.units);
                    batch.push(prepared);
                }
            }
            done += 1;
            progress(done, total);
        };
        let threads = in_parallel_threads(entries.len(), FS_THREADS_MAX);
        let next = AtomicUsize::new(0);
        let budget = &budget;
        // Workers never block on sending (the channel is unbounded; the
        // budget bounds what it holds), so this thread always drains it
        // and releases what workers wait for.
        let work = |sender: std::sync::mpsc::Sender<Looked>| {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(entry) = entries.get(index) else {
                    break;
                };
                if sender
                    .send(self.look_at(index, entry, in_place, budget))
                    .is_err()
                {
                    break;
                }
            }
        };
        let work = &work;
        std::thread::scope(|scope| {
            let (sender, receiver) = std::sync::mpsc::channel::<Looked>();
            if threads > 1 {
                for _ in 0..threads {
                    let sender = sender.clone();
                    if let Err(error) = std::thread::Builder::new()
                        .name("sandlog-adopt".to_owned())
                        .spawn_scoped(scope, move || work(sender))
                    {
                        tracing::warn!(%error, "starting a worker thread failed");
                        break;
                    }
                }
            }
            drop(sender);
            for looked in receiver {
                take(looked, &mut settled);
            }
            // Entries no worker took (one entry's worth of work, or no
            // thread could be started) are done here.
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(entry) = entries.get(index) else {
                    break;
                };
                take(self.look_at(index, entry, in_place, budget), &mut settled);
            }
        });
        self.record_adopted(batch, in_place, &mut settled);
        progress(total, total);
        Ok(report_of(settled))
    }

    /// The per-entry work of an adoption: whether the entry is a session
    /// directory this root does not know, its inspection, and its
    /// preparation (see [`Engine::prepare_adoption`]), for which it takes
    /// units of `budget` (released when the workspace joins a batch, or
    /// here when preparing fails).
    fn look_at(
        &self,
        index: usize,
        entry: &std::fs::DirEntry,
        in_place: bool,
        budget: &Budget,
    ) -> Looked {
        let name = entry.file_name().to_string_lossy().into_owned();
        let skip = |name: String, reason: String| Looked::Skipped(index, name, reason);
        let is_dir = entry.file_type().is_ok_and(|file_type| file_type.is_dir());
        let Ok(session_id) = SessionId::parse(&name) else {
            return skip(name, "not a UUID-named directory".to_owned());
        };
        if !is_dir {
            return skip(name, "not a directory".to_owned());
        }
        match self.store.stream_version(session_id.stream()) {
            Ok(None) => {}
            Ok(Some(_)) => return skip(name, "already known to this root".to_owned()),
            Err(error) => {
                return skip(
                    name,
                    format!(
                        "checking the log for it failed: {}",
                        RuntimeError::from(error)
                    ),
                );
            }
        }
        let inspection = match inspect(&entry.path()) {
            Ok(inspection) => inspection,
            Err(reason) => {
                tracing::warn!(target: "sandlog::lifecycle", %session_id, reason, "workspace not adopted");
                return skip(name, reason);
            }
        };
        let units = inspection.entries.saturating_add(1);
        budget.acquire(units);
        match self.prepare_adoption(session_id, &entry.path(), in_place, &inspection) {
            Ok((status, neutralised, events)) => Looked::Ready(Prepared {
                index,
                units,
                session_id,
                name,
                status,
                neutralised,
                events,
            }),
            Err(error) => {
                budget.release(units);
                skip(name, error.to_string())
            }
        }
    }

    /// Records a batch of prepared workspaces in one append, after one
    /// fsync of `workspaces/` makes their moves durable. A session whose
    /// stream appeared meanwhile (another process adopted it) is left out
    /// and the rest appended again; any other failure skips the whole
    /// batch, its directories staying in `workspaces/` unrecorded (as
    /// orphans for `reconcile`), as one unrecorded workspace did before.
    fn record_adopted(
        &self,
        batch: AdoptBatch,
        in_place: bool,
        settled: &mut Vec<(usize, Settled)>,
    ) {
        let mut prepared = batch.prepared;
        if prepared.is_empty() {
            return;
        }
        let skip_all = |prepared: Vec<Prepared>,
                        settled: &mut Vec<(usize, Settled)>,
                        reason: String| {
            for item in prepared {
                tracing::warn!(target: "sandlog::lifecycle", session_id = %item.session_id, %reason, "workspace not adopted");
                settled.push((
                    item.index,
                    Settled::Skipped {
                        name: item.name,
                        reason: reason.clone(),
                    },
                ));
            }
        };
        if !in_place && let Err(error) = fsync_dir(&self.layout.workspaces) {
            let error = RuntimeError::io("syncing workspaces")(error);
            skip_all(prepared, settled, error.to_string());
            return;
        }
        let mut parts: Vec<_> = prepared
            .iter_mut()
            .map(|item| {
                (
                    item.session_id.stream(),
                    ExpectedVersion::NoStream,
                    std::mem::take(&mut item.events),
                )
            })
            .collect();
        loop {
            match self.append_log_batch(&parts) {
                Ok(_) => break,
                Err(EventStoreError::VersionConflict { stream, .. }) => {
                    let Some(index) = parts.iter().position(|(other, _, _)| *other == stream)
                    else {
                        skip_all(
                            prepared,
                            settled,
                            format!("recording the adoption failed: conflict on {stream}"),
                        );
                        return;
                    };
                    parts.remove(index);
                    let item = prepared.remove(index);
                    settled.push((
                        item.index,
                        Settled::Skipped {
                            name: item.name,
                            reason: "already known to this root".to_owned(),
                        },
                    ));
                    if parts.is_empty() {
                        return;
                    }
                }
                Err(error) => {
                    skip_all(prepared, settled, RuntimeError::from(error).to_string());
                    return;
                }
            }
        }
        for (item, (_, _, events)) in prepared.into_iter().zip(parts) {
            let session_id = item.session_id;
            tracing::info!(target: "sandlog::lifecycle", event = "session.adopted", %session_id, metadata = ?item.status, files = events.len().saturating_sub(1), refused = item.neutralised.refused.len(), copied_links = item.neutralised.copied_links.len(), "adopted");
            settled.push((
                item.index,
                Settled::Adopted {
                    session_id,
                    status: item.status,
                    neutralised: item.neutralised,
                },
            ));
        }
    }

    /// Refuses and copies what inspection found, in the workspace now at
    /// `target`: each entry is looked at again (without following it)
    /// before it is touched. Refused entries move to
    /// `quarantine/adopted-<id>.<stamp>/` (deleted when they cannot be
    /// moved); entries inspection saw but the copy across filesystems did
    /// not bring are recorded without a place.
    fn neutralise(
        &self,
        session_id: SessionId,
        target: &Path,
        findings: &[Finding],
    ) -> Result<Neutralised> {
        let mut neutralised = Neutralised {
            session_id,
            refused: Vec::new(),
            copied_links: Vec::new(),
            unrecorded: 0,
        };
        if findings.is_empty() {
            return Ok(neutralised);
        }
        let dir = Dir::open_ambient_dir(target, ambient_authority())
            .map_err(RuntimeError::io(format!("opening {}", target.display())))?;
        let quarantine_name = format!(
            "adopted-{session_id}.{}",
            self.options.clock.now().unix_micros()
        );
        let quarantine = self.layout.quarantine.join(&quarantine_name);
        let mut recorded_bytes = 0usize;
        let mut record = |bytes: usize| {
            recorded_bytes = recorded_bytes.saturating_add(bytes);
            recorded_bytes <= ADOPT_RECORD_BYTES_MAX
        };
        for finding in findings {
            match finding {
                Finding::Refuse { path, kind, reason } => {
                    let text = path.to_string_lossy().into_owned();
                    let moved_to = match dir.symlink_metadata(path) {
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                        Err(error) => {
                            return Err(RuntimeError::io(format!("inspecting {text}"))(error));
                        }
                        Ok(metadata) if metadata.is_dir() => {
                            return Err(RuntimeError::io(format!("refusing {text}"))(
                                std::io::Error::other("it became a directory during adoption"),
                            ));
                        }
                        Ok(_) => self.quarantine_entry(&dir, path, &quarantine)?.then(|| {
                            format!(
                                "{}/{quarantine_name}/{text}",
                                sandlog_host::layout::QUARANTINE_DIR
                            )
                        }),
                    };
                    tracing::warn!(target: "sandlog::lifecycle", %session_id, path = %text, kind, reason, moved_to = moved_to.as_deref().unwrap_or("deleted"), "adoption refused an entry");
                    let entry = RefusedEntry {
                        path: text,
                        kind: (*kind).to_owned(),
                        reason: (*reason).to_owned(),
                        moved_to,
                    };
                    if record(serde_json::to_vec(&entry).map_or(usize::MAX, |json| json.len())) {
                        neutralised.refused.push(entry);
                    } else {
                        neutralised.unrecorded += 1;
                    }
                }
                Finding::Copy { path } => {
                    let text = path.to_string_lossy().into_owned();
                    match dir.symlink_metadata(path) {
                        Ok(metadata) if metadata.is_file() && metadata.nlink() > 1 => {
                            private_copy(&dir, path)
                                .map_err(RuntimeError::io(format!("copying {text}")))?;
                        }
                        // Copied across filesystems already, or removed.
                        Ok(_) => {}
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                        Err(error) => {
                            return Err(RuntimeError::io(format!("inspecting {text}"))(error));
                        }
                    }
                    tracing::info!(target: "sandlog::lifecycle", %session_id, path = %text, "adoption copied a file that had other hard links");
                    if record(serde_json::to_vec(&text).map_or(usize::MAX, |json| json.len())) {
                        neutralised.copied_links.push(text);
                    } else {
                        neutralised.unrecorded += 1;
                    }
                }
            }
        }
        Ok(neutralised)
    }

    /// Moves a refused entry into `quarantine` at the same relative path;
    /// deletes it when it cannot be moved there. Returns whether it moved.
    fn quarantine_entry(&self, dir: &Dir, path: &Path, quarantine: &Path) -> Result<bool> {
        let moved = (|| -> std::io::Result<()> {
            let parent = match path.parent() {
                Some(parent) => quarantine.join(parent),
                None => quarantine.to_owned(),
            };
            std::fs::create_dir_all(&parent)?;
            let to = Dir::open_ambient_dir(quarantine, ambient_authority())?;
            dir.rename(path, &to, path)
        })();
        match moved {
            Ok(()) => Ok(true),
            Err(error) => {
                tracing::warn!(target: "sandlog::lifecycle", path = %path.display(), %error, "cannot quarantine a refused entry; deleting it");
                dir.remove_file(path)
                    .map_err(RuntimeError::io(format!("removing {}", path.display())))?;
                Ok(false)
            }
        }
    }

    /// Moves one workspace into the root, neutralises what inspection
    /// found, takes its metadata out and builds the events that record it
    /// (appended by [`Engine::record_adopted`]). `workspaces/` is not
    /// synced here: the batch syncs it once before its append.
    fn prepare_adoption(
        &self,
        session_id: SessionId,
        source: &Path,
        in_place: bool,
        inspection: &Inspection,
    ) -> Result<(MetadataStatus, Neutralised, Vec<NewEvent>)> {
        let findings = &inspection.findings;
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
        }
        let neutralised = match self.neutralise(session_id, &target, findings) {
            Ok(neutralised) => neutralised,
            Err(error) => {
                // Not recorded: give the directory back rather than leave an
                // orphan in workspaces/.
                if !in_place && std::fs::rename(&target, source).is_ok() {
                    let _ = fsync_dir(&self.layout.workspaces);
                }
                return Err(error);
            }
        };
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
                    sandlog_host::layout::EVIDENCE_DIR
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
        // The files inspection listed (refused entries were never regular
        // files; copied ones keep their path), each hashed as read now.
        let dir = Dir::open_ambient_dir(&target, ambient_authority())
            .map_err(RuntimeError::io(format!("opening {}", target.display())))?;
        let mut buffer = vec![0u8; HASH_CHUNK_BYTES];
        let mut files = std::collections::BTreeMap::new();
        for path in &inspection.files {
            let Some(named) = workspace_path(path) else {
                tracing::warn!(target: "sandlog::lifecycle", %session_id, path = %path.display(), "skipping a file sandlog cannot name");
                continue;
            };
            let hashed = hash_file(&dir, path, &mut buffer).map_err(RuntimeError::io(format!(
                "hashing {} in {}",
                path.display(),
                target.display()
            )))?;
            if let Some(hashed) = hashed {
                files.insert(named, hashed);
            }
        }
        let mut events: Vec<NewEvent> = Vec::with_capacity(files.len() + 1);
        let adopted = self.event(&Event::SessionAdopted(SessionAdopted {
            session_id,
            created_at: timestamps.map(|(created, _)| created),
            updated_at: timestamps.map(|(_, updated)| updated),
            metadata: status,
            source: source.display().to_string(),
            evidence,
            refused: neutralised.refused.clone(),
            copied_links: neutralised.copied_links.clone(),
            unrecorded: neutralised.unrecorded,
        }));
        // Each adopted file names the adoption as its cause.
        let cause = Some(adopted.event_id.0);
        events.push(adopted);
        for (path, (blake3, size)) in files {
            let file = FileWritten {
                content_kept: None,
                not_kept: None,
                path,
                size,
                blake3,
                by: WrittenBy::Adoption,
            };
            let mut written = self.event(&Event::FileWritten(file));
            written.causation_id = cause;
            events.push(written);
        }
        Ok((status, neutralised, events))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::symlink_escape;

    /// Goal: the lexical symlink rule keeps targets that stay inside and
    /// refuses absolute ones, ones climbing above the workspace, and `..`
    /// after a name. Method: links at several depths against targets.
    #[test]
    fn symlink_targets_are_judged_lexically_from_the_link() {
        let escapes = |link: &str, target: &str| symlink_escape(Path::new(link), Path::new(target));
        assert_eq!(escapes("a", "b/c"), None);
        assert_eq!(escapes("a", "./b"), None);
        assert_eq!(escapes("sub/a", "../b"), None);
        assert_eq!(escapes("x/y/a", "../../b/c"), None);
        assert_eq!(
            escapes("a", "/etc/passwd"),
            Some("its target is absolute: it points outside the workspace")
        );
        assert_eq!(
            escapes("a", "../b"),
            Some("its target climbs out of the workspace with `..`")
        );
        assert_eq!(
            escapes("sub/a", "../../b"),
            Some("its target climbs out of the workspace with `..`")
        );
        assert_eq!(
            escapes("a", "b/../c"),
            Some(
                "its target has `..` after a name: through another symlink it could climb out of the workspace"
            )
        );
    }
}
