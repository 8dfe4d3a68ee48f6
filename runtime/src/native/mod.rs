//! Native work, recorded: a trusted command run in a session's workspace
//! (`sandlog run`), and changes made there by anything else recorded
//! afterwards (`sandlog session sync`).
//!
//! **Not a sandbox.** A native command runs as the calling user with the
//! workspace as its working directory; nothing keeps it inside the
//! workspace, out of the session's read-only directories (named to it in
//! `SANDLOG_READONLY`, not enforced) or under the session's size limit.
//! What sandlog gives is the record: `native.started` (the command line,
//! appended before the command starts, so a recorder killed mid-run still
//! leaves the start in the log), then `native.completed` (exit code or
//! signal, duration, output kept within the evidence budget, the host's
//! scan, a size-limit breach) and the files it changed as `file.written` /
//! `file.deleted` events (`by: native`) caused by it, all in one append.
//!
//! The session's shared lease is held from before the start until the
//! completion is recorded: prune skips the session and delete waits.
//!
//! A sync compares the workspace with the files projection: every file on
//! disk whose bytes differ from the projection's (or that it lacks) is
//! written, every projected file missing from disk is deleted, exactly
//! what `reconcile --deep` would call drift, so after a sync within the
//! bounds it finds none. Hashing every file of a large workspace on every
//! sync would be slow, so a per-session *stat cache* (like git's index)
//! remembers, for each file, its size, modification and change times and
//! inode with the blake3 it had; a file whose stamp is unchanged and whose
//! cached hash is the projection's is not read. The cache lives under the
//! root (`scans/<session>.bin`), never in the workspace, is written after
//! each sync and is never trusted as truth: a missing, unreadable or
//! corrupt cache (its own blake3 is checked) means every file is hashed.
//! A file changed within [`STAT_CACHE_RACY_WINDOW`] of the scan that
//! stamped it may change again without a visible stamp change (the
//! "racy git" problem), so such entries are never cached.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use sandlog_core::event::{
    Event, ExecutionLimit, ExecutionScan, NativeCompleted, NativeStarted, SessionSynced,
    SizeExceeded, WrittenBy,
};
use sandlog_core::path::os_text_form;
use sandlog_core::{Hash, SessionId, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use sandlog_projections::state::FileEntry;

use crate::engine::Engine;
use crate::engine::scan::{Bounds, Changes};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::{Scan, ScanLimits, Scanned, Workspace};
use sandlog_sandbox::limits::SCAN_TIME_MIN;

pub use sandlog_host::statcache::{SCANS_DIR, STAT_CACHE_BYTES_MAX, stat_cache_path};
use sandlog_host::statcache::{read_stat_cache, write_stat_cache};

/// Bytes of a native command's escaped command line: it is recorded in
/// `native.started`, which must stay far below the payload limit.
pub const NATIVE_ARGV_BYTES_MAX: usize = 256 * 1024;

/// How long, after a native command exited, its output is still read: a
/// process it left running in the background may hold the pipes open for
/// ever, and the record must not wait for it. Output written later is not
/// kept.
pub const NATIVE_OUTPUT_DRAIN_MAX: Duration = Duration::from_secs(2);

/// A file whose modification or change time is this close to (or after)
/// the start of the scan that saw it is not cached: a write in the same
/// timestamp tick as the scan could leave its stamp unchanged. Far above
/// the kernel's coarse clock tick (at most 10 ms); timestamps set by
/// another machine's clock (a network file system) are not covered.
pub const STAT_CACHE_RACY_WINDOW: Duration = Duration::from_millis(100);

/// Buffer of the threads copying a native command's output.
const PIPE_BUFFER_BYTES: usize = 64 * 1024;

/// Where a native command's output goes while it runs (it is kept up to
/// the output cap either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Passthrough {
    /// Nowhere: only kept.
    #[default]
    None,
    /// Its stdout to ours, its stderr to ours.
    Inherit,
    /// Both to our stderr (our stdout is for a JSON document).
    Stderr,
}

/// How to run a native command.
#[derive(Debug, Clone, Default)]
pub struct NativeOptions {
    /// Kill its process group (SIGKILL) after this long; none waits for
    /// ever.
    pub timeout: Option<Duration>,
    /// File bytes kept as evidence (0: none, and no output either); else
    /// the root's `evidence.budget`.
    pub evidence_bytes: Option<u64>,
    /// Where its output goes while it runs.
    pub passthrough: Passthrough,
    /// Give it this process's stdin (else it reads from `/dev/null`: a
    /// server's stdin, such as an MCP stream, is not the command's).
    pub inherit_stdin: bool,
    /// While it runs, forward SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    /// this process to the command's process group (which a terminal's
    /// Ctrl-C no longer reaches), so the command ends and its end is
    /// still recorded. For a process that runs one native command and
    /// then exits (the CLI): the handlers cannot be taken back, so
    /// afterwards this process ignores those signals.
    pub forward_signals: bool,
    /// How long to wait for another writer of the session (an execution,
    /// a write, another run) to finish; else the engine's
    /// `session_wait`.
    pub wait: Option<Duration>,
}

/// What a native command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NativeRun {
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// Its stdout, up to the output cap.
    #[serde(skip)]
    pub stdout: Vec<u8>,
    /// Its stderr, up to the output cap.
    #[serde(skip)]
    pub stderr: Vec<u8>,
    /// Whether stdout passed the cap.
    pub stdout_truncated: bool,
    /// Whether stderr passed the cap.
    pub stderr_truncated: bool,
    /// Files it wrote (recorded).
    pub files_written: Vec<WorkspacePath>,
    /// Files it deleted (recorded).
    pub files_deleted: Vec<WorkspacePath>,
    /// Changes found, recorded or not.
    pub files_changed_total: u64,
    /// Files and directories this process may not read, in path order:
    /// each such file is among `files_written`, recorded without its hash
    /// or bytes (`content_kept: false`, reason `unreadable`).
    pub unreadable: Vec<WorkspacePath>,
    /// The bound of the host's scan that kept changes from being
    /// recorded, if any.
    pub limit: Option<ExecutionLimit>,
    /// Wall time of the scan after the run, milliseconds.
    pub scan_ms: u64,
    /// Set when the workspace is past the session's size limit.
    pub size_exceeded: Option<SizeExceeded>,
    /// Position of `native.started`.
    pub started_position: u64,
    /// Position of `native.completed`.
    pub position: u64,
}

impl NativeRun {
    /// Whether it failed: a non-zero exit, a signal, or the timeout.
    pub fn failed(&self) -> bool {
        self.exit_code != Some(0)
    }
}

/// What a sync found and recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// Whether anything was appended (nothing is when nothing changed).
    pub recorded: bool,
    /// Position of `session.synced`, when recorded.
    pub position: Option<u64>,
    /// Files recorded as written.
    pub files_written: Vec<WorkspacePath>,
    /// Files recorded as deleted.
    pub files_deleted: Vec<WorkspacePath>,
    /// Changes found, recorded or not.
    pub files_changed_total: u64,
    /// Files and directories this process may not read, in path order:
    /// each such file is among `files_written`, recorded without its hash
    /// or bytes (`content_kept: false`, reason `unreadable`).
    pub unreadable: Vec<WorkspacePath>,
    /// The bound that kept changes from being recorded, if any.
    pub limit: Option<ExecutionLimit>,
    /// Files on disk.
    pub files_seen: u64,
    /// Files read to hash them (the rest the stat cache vouched for).
    pub files_hashed: u64,
    /// Wall time of the scan and hashing, milliseconds.
    pub scan_ms: u64,
    /// Set when the workspace is past the session's size limit (reported
    /// whether or not anything changed).
    pub size_exceeded: Option<SizeExceeded>,
}

fn invalid(what: &str, reason: String) -> RuntimeError {
    RuntimeError::Invalid(sandlog_core::CoreError::InvalidPayload {
        kind: what.to_owned(),
        schema: 0,
        reason,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Output read from one pipe, up to a cap.
#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

fn lock(captured: &Mutex<Captured>) -> MutexGuard<'_, Captured> {
    captured
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Which of our streams a pipe is copied to.
#[derive(Debug, Clone, Copy)]
enum Sink {
    None,
    Stdout,
    Stderr,
}

/// Copies `from` to `sink` as it comes and keeps up to `cap` bytes; tells
/// `done` at end of stream. A sink that fails (a closed pipe) is dropped,
/// the output still kept.
fn pump(
    mut from: impl Read,
    sink: Sink,
    cap: usize,
    captured: Arc<Mutex<Captured>>,
    done: mpsc::Sender<()>,
) {
    let mut buffer = vec![0u8; PIPE_BUFFER_BYTES];
    let mut sink = sink;
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let Some(chunk) = buffer.get(..read) else {
            break;
        };
        let written = match sink {
            Sink::None => Ok(()),
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(chunk).and_then(|()| out.flush())
            }
            Sink::Stderr => std::io::stderr().lock().write_all(chunk),
        };
        if written.is_err() {
            sink = Sink::None;
        }
        let mut kept = lock(&captured);
        let room = cap.saturating_sub(kept.bytes.len());
        if chunk.len() > room {
            kept.truncated = true;
        }
        if let Some(part) = chunk.get(..chunk.len().min(room)) {
            kept.bytes.extend_from_slice(part);
        }
    }
    let _ = done.send(());
}

/// The host paths of `mounts`, joined by `:` (for `SANDLOG_READONLY`).
fn readonly_list(mounts: &[sandlog_sandbox::ReadonlyMount]) -> OsString {
    let mut list = OsString::new();
    for (index, mount) in mounts.iter().enumerate() {
        if index > 0 {
            list.push(":");
        }
        list.push(mount.host_path.as_os_str());
    }
    list
}

/// The workspace's size as the scan saw it, against the session's limit.
fn size_check(scan: &Scan, max_size: u64) -> Option<SizeExceeded> {
    let bytes = scan
        .files
        .values()
        .fold(0u64, |total, file| total.saturating_add(file.size));
    (bytes > max_size).then_some(SizeExceeded { bytes, max_size })
}

fn nanos_since_epoch(time: SystemTime) -> i128 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |duration| duration.as_nanos() as i128)
}

/// Whether a file's stamp is older than `scan_started` by more than
/// [`STAT_CACHE_RACY_WINDOW`], so a later write must change it.
fn settled(scanned: &Scanned, scan_started_ns: i128) -> bool {
    let window = STAT_CACHE_RACY_WINDOW.as_nanos() as i128;
    scanned.mtime_ns.max(scanned.ctime_ns) < scan_started_ns - window
}

/// Files `before` whose stamps may not show a write that follows in the
/// same timestamp tick are left out, so they are hashed afterwards.
fn settled_only(
    before: BTreeMap<WorkspacePath, Scanned>,
    scan_started: SystemTime,
) -> BTreeMap<WorkspacePath, Scanned> {
    let started_ns = nanos_since_epoch(scan_started);
    before
        .into_iter()
        .filter(|(_, scanned)| settled(scanned, started_ns))
        .collect()
}

fn with_by(changes: &mut Changes) {
    for file in &mut changes.written {
        file.by = WrittenBy::Native;
    }
    for file in &mut changes.deleted {
        file.by = WrittenBy::Native;
    }
}

impl Engine {
    /// Runs a trusted native command in a session's workspace and records
    /// it (see the module documentation: this is **not** sandboxed).
    ///
    /// The command gets the workspace as its working directory, its own
    /// process group, our stdin if `options.inherit_stdin`, and the
    /// environment plus
    /// `SANDLOG_SESSION_ID`, `SANDLOG_WORKSPACE` and `SANDLOG_READONLY`
    /// (the session's read-only host directories joined by `:`; not
    /// enforced). Its stdout and stderr are kept up to the engine's output
    /// caps and copied as `options.passthrough` says.
    ///
    /// # Errors
    ///
    /// A command that cannot be started is recorded (`native.completed`
    /// without an exit code, with the reason) and is
    /// [`RuntimeError::NativeNotStarted`]. An empty or overlong command
    /// line is refused before anything is recorded.
    pub fn run_native(
        &self,
        session_id: SessionId,
        argv: &[OsString],
        options: &NativeOptions,
    ) -> Result<NativeRun> {
        let Some(program) = argv.first() else {
            return Err(invalid(
                "command",
                "no command given; put it after `--`".into(),
            ));
        };
        // No command line can carry a NUL byte: refused here, before
        // anything is recorded, not by the spawn after `native.started`.
        if let Some(index) = argv.iter().position(|arg| arg.as_bytes().contains(&0)) {
            return Err(invalid(
                "command",
                format!("argument {index} contains a NUL byte, which no command line can carry"),
            ));
        }
        let argv_text: Vec<String> = argv.iter().map(|arg| os_text_form(arg)).collect();
        let argv_bytes: usize = argv_text.iter().map(|arg| arg.len() + 1).sum();
        if argv_bytes > NATIVE_ARGV_BYTES_MAX {
            return Err(invalid(
                "command",
                format!(
                    "the command line is {argv_bytes} bytes; at most NATIVE_ARGV_BYTES_MAX = {NATIVE_ARGV_BYTES_MAX} (pass long input in a file)"
                ),
            ));
        }
        // Held from before the start until the completion is recorded:
        // prune skips the session, delete waits, other writers take turns.
        let (_hold, session) = self.hold_for_writing(
            session_id,
            options.wait.unwrap_or_else(|| self.session_wait()),
        )?;
        let limits = &self.options.limits;
        let quota = self.session_quota(session.max_size, None)?;
        let budget = self.evidence_budget(options.evidence_bytes)?;
        let workspace_path = self.layout.workspace(session_id);
        let workspace = Workspace::open(&workspace_path)?;
        let scan_limits = ScanLimits {
            entries_max: limits.scan_entries_max,
            ..ScanLimits::default()
        };
        let scan_started = SystemTime::now();
        let before = settled_only(workspace.scan_bounded(&scan_limits)?.files, scan_started);

        let started = self.event(&Event::NativeStarted(NativeStarted { argv: argv_text }));
        let started_id = started.event_id.0;
        let started_envelopes = self.append_to_session(session_id, session.version, &[started])?;
        let (started_position, version) = started_envelopes
            .first()
            .map(|envelope| (envelope.position.0, envelope.version))
            .ok_or_else(|| invalid("native.started", "the append returned no event".into()))?;
        tracing::info!(target: "sandlog::lifecycle", event = "native.started", %session_id, program = %program.to_string_lossy(), "native command starting");

        let mut command = Command::new(program);
        command
            .args(argv.iter().skip(1))
            .current_dir(&workspace_path)
            .env("SANDLOG_SESSION_ID", session_id.to_string())
            .env("SANDLOG_WORKSPACE", &workspace_path)
            .env(
                "SANDLOG_READONLY",
                readonly_list(&self.readonly_mounts(&session.readonly)),
            )
            .stdin(if options.inherit_stdin {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // Installed before the spawn: a signal that arrives before the
        // command's group exists is held and passed on once it does.
        let forwarding = if options.forward_signals {
            forward_signals()
        } else {
            Forwarding::default()
        };
        let spawned_at = Instant::now();
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(source) => {
                forwarding.stop();
                let message = format!("could not start {}: {source}", program.to_string_lossy());
                let completed = NativeCompleted {
                    exit_code: None,
                    signal: None,
                    duration_us: 0,
                    stdout_bytes: 0,
                    stdout_blake3: Hash::of(b""),
                    stdout_truncated: false,
                    stderr_bytes: 0,
                    stderr_blake3: Hash::of(b""),
                    stderr_truncated: false,
                    scan: None,
                    evidence: None,
                    size_exceeded: None,
                    timed_out: false,
                    message: Some(message),
                };
                let mut event = self.event(&Event::NativeCompleted(completed));
                event.causation_id = Some(started_id);
                let envelopes = self.append_to_session(session_id, version, &[event])?;
                let position = envelopes.first().map_or(0, |envelope| envelope.position.0);
                tracing::info!(target: "sandlog::lifecycle", event = "native.completed", %session_id, %source, "native command could not start");
                return Err(RuntimeError::NativeNotStarted {
                    program: program.to_string_lossy().into_owned(),
                    position,
                    source,
                });
            }
        };

        let (done_sender, done) = mpsc::channel();
        let (stdout_sink, stderr_sink) = match options.passthrough {
            Passthrough::None => (Sink::None, Sink::None),
            Passthrough::Inherit => (Sink::Stdout, Sink::Stderr),
            Passthrough::Stderr => (Sink::Stderr, Sink::Stderr),
        };
        let stdout = Arc::new(Mutex::new(Captured::default()));
        let stderr = Arc::new(Mutex::new(Captured::default()));
        let mut pumps = 0;
        if let Some(pipe) = child.stdout.take() {
            let (captured, sender, cap) =
                (stdout.clone(), done_sender.clone(), limits.stdout_bytes_max);
            std::thread::spawn(move || pump(pipe, stdout_sink, cap, captured, sender));
            pumps += 1;
        }
        if let Some(pipe) = child.stderr.take() {
            let (captured, sender, cap) =
                (stderr.clone(), done_sender.clone(), limits.stderr_bytes_max);
            std::thread::spawn(move || pump(pipe, stderr_sink, cap, captured, sender));
            pumps += 1;
        }
        drop(done_sender);

        // The child is waited for on its own thread, so the timeout is a
        // channel wait rather than polling.
        let pid = child.id();
        forwarding.started(pid);
        let (status_sender, status) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = status_sender.send(child.wait());
        });
        let mut timed_out = false;
        let waited = match options.timeout {
            None => status.recv().ok(),
            Some(timeout) => match status.recv_timeout(timeout) {
                Ok(waited) => Some(waited),
                Err(mpsc::RecvTimeoutError::Timeout) => match status.try_recv() {
                    // It ended just as the timeout passed: not killed.
                    Ok(waited) => Some(waited),
                    Err(_) => {
                        timed_out = true;
                        kill_group(pid);
                        status.recv().ok()
                    }
                },
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            },
        };
        let duration = spawned_at.elapsed();
        forwarding.stop();
        let exit = match waited {
            Some(Ok(exit)) => Some(exit),
            Some(Err(error)) => {
                tracing::error!(%session_id, %error, "waiting for the native command failed");
                None
            }
            None => None,
        };
        // Output still arriving from a process left in the background is
        // not waited for past the drain bound.
        let drain_until = Instant::now() + NATIVE_OUTPUT_DRAIN_MAX;
        for _ in 0..pumps {
            let left = drain_until.saturating_duration_since(Instant::now());
            if done.recv_timeout(left).is_err() {
                tracing::warn!(%session_id, "the native command's output is still open (a background process?); output from now on is not kept");
                break;
            }
        }
        let (stdout, stdout_truncated) = {
            let kept = lock(&stdout);
            (kept.bytes.clone(), kept.truncated)
        };
        let (stderr, stderr_truncated) = {
            let kept = lock(&stderr);
            (kept.bytes.clone(), kept.truncated)
        };
        let exit_code = exit.and_then(|exit| exit.code());
        let signal = exit.and_then(|exit| exit.signal());
        let message = if timed_out {
            Some(format!(
                "killed (SIGKILL to its process group) after the timeout of {}",
                sandlog_core::human::format_duration(options.timeout.unwrap_or_default())
            ))
        } else if exit.is_none() {
            Some("its exit status could not be read".to_owned())
        } else {
            None
        };

        let completed_with =
            |scan: Option<ExecutionScan>,
             evidence: Option<sandlog_core::event::ExecEvidence>,
             size_exceeded: Option<SizeExceeded>,
             message: Option<String>| NativeCompleted {
                exit_code,
                signal,
                duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
                stdout_bytes: stdout.len() as u64,
                stdout_blake3: Hash::of(&stdout),
                stdout_truncated,
                stderr_bytes: stderr.len() as u64,
                stderr_blake3: Hash::of(&stderr),
                stderr_truncated,
                scan: scan.map(Box::new),
                evidence,
                size_exceeded,
                timed_out,
                message,
            };
        // What the command changed, recorded with its end in one append.
        let record = || -> Result<_> {
            let scan_started_at = Instant::now();
            let deadline = scan_started_at + limits.timeout.max(SCAN_TIME_MIN);
            let after = workspace.scan_bounded(&ScanLimits {
                deadline: Some(deadline),
                ..scan_limits
            })?;
            let mut changes = crate::engine::scan::changes(
                &workspace,
                &session.files,
                &before,
                &after,
                &Bounds {
                    changed_files_max: limits.changed_files_max,
                    hash_bytes_max: self.native_hash_budget(quota),
                    deadline,
                },
            )?;
            with_by(&mut changes);
            let scan_ms = millis(scan_started_at.elapsed());
            let size_exceeded = size_check(&after, quota);
            let scan = scan_record(&changes, scan_ms);
            let envelopes = self.write_session(session_id, version, |write, version| {
                if budget > 0 {
                    write.put_blob(&stdout)?;
                    write.put_blob(&stderr)?;
                }
                let (kept, evidence) =
                    crate::evidence::keep_files(write, &workspace, &changes.written, budget)?;
                let completed = completed_with(
                    Some(scan.clone()),
                    Some(evidence),
                    size_exceeded,
                    message.clone(),
                );
                let mut completed = self.event(&Event::NativeCompleted(completed));
                completed.causation_id = Some(started_id);
                let events = self.caused_by(completed, &kept, &changes.deleted);
                Ok(write.append(
                    session_id.stream(),
                    ExpectedVersion::Exact(version),
                    &events,
                )?)
            })?;
            Ok((changes, scan_ms, size_exceeded, envelopes))
        };
        let (changes, scan_ms, size_exceeded, envelopes) = match record() {
            Ok(recorded) => recorded,
            Err(error) => {
                // The command ran: its end is recorded even when what it
                // changed could not be (`reconcile` will show the drift).
                let completed = completed_with(
                    None,
                    None,
                    None,
                    Some(format!(
                        "the command ended, but recording what it changed failed: {error}"
                    )),
                );
                let mut event = self.event(&Event::NativeCompleted(completed));
                event.causation_id = Some(started_id);
                if let Err(also) = self.append_to_session(session_id, version, &[event]) {
                    tracing::error!(%session_id, %also, "recording the native command's end failed too");
                }
                return Err(error);
            }
        };
        let position = envelopes.first().map_or(0, |envelope| envelope.position.0);
        tracing::info!(target: "sandlog::lifecycle", event = "native.completed", %session_id, exit_code, signal, timed_out, files_written = changes.written.len(), files_deleted = changes.deleted.len(), "native command recorded");
        self.maybe_checkpoint(false);
        Ok(NativeRun {
            exit_code,
            signal,
            timed_out,
            duration_ms: millis(duration),
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            files_written: changes.written.into_iter().map(|file| file.path).collect(),
            files_deleted: changes.deleted.into_iter().map(|file| file.path).collect(),
            files_changed_total: changes.total,
            unreadable: changes.unreadable,
            limit: changes.limit,
            scan_ms,
            size_exceeded,
            started_position,
            position,
        })
    }

    /// Bytes read to hash what native work left: the larger of the
    /// session's size limit and the engine's workspace quota. Native work
    /// can pass the size limit, and what passed it must still be recorded;
    /// the engine's quota is what it is willing to hash for anyone.
    fn native_hash_budget(&self, quota: u64) -> u64 {
        quota.max(self.options.limits.workspace_bytes_max)
    }

    /// Records changes made in a session's workspace outside sandlog since
    /// the last record (see the module documentation), attributed to the
    /// engine's actor: `session.synced` and the file events (`by: native`)
    /// caused by it, in one append. Nothing is appended when nothing
    /// changed. Bounded like an execution's scan (entries, depth, changed
    /// files, hash bytes as for a native run, the engine's timeout as the
    /// deadline).
    pub fn sync_session(&self, session_id: SessionId) -> Result<SyncReport> {
        let (_hold, session) = self.hold_for_writing(session_id, self.session_wait())?;
        let limits = &self.options.limits;
        let quota = self.session_quota(session.max_size, None)?;
        let workspace = Workspace::open(&self.layout.workspace(session_id))?;
        let cache_path = stat_cache_path(&self.layout.root, session_id);

        let scan_started_at = Instant::now();
        let scan_started = SystemTime::now();
        let deadline = scan_started_at + limits.timeout.max(SCAN_TIME_MIN);
        let after = workspace.scan_bounded(&ScanLimits {
            entries_max: limits.scan_entries_max,
            deadline: Some(deadline),
            ..ScanLimits::default()
        })?;
        let cache = read_stat_cache(&cache_path);
        // A file the cache vouches for is one whose stamp is the one it
        // was hashed with and whose hash is the projection's.
        let vouched: BTreeMap<WorkspacePath, Scanned> = after
            .files
            .iter()
            .filter(|(path, scanned)| {
                cache.get(*path).is_some_and(|(stamp, hash)| {
                    stamp == *scanned
                        && session
                            .files
                            .get(*path)
                            .is_some_and(|file: &FileEntry| file.blake3 == *hash)
                })
            })
            .map(|(path, scanned)| (path.clone(), *scanned))
            .collect();
        let mut changes = crate::engine::scan::changes(
            &workspace,
            &session.files,
            &vouched,
            &after,
            &Bounds {
                changed_files_max: limits.changed_files_max,
                hash_bytes_max: self.native_hash_budget(quota),
                deadline,
            },
        )?;
        with_by(&mut changes);
        let scan_ms = millis(scan_started_at.elapsed());
        let size_exceeded = size_check(&after, quota);
        let files_seen = after.files.len() as u64;
        let files_hashed = files_seen - vouched.len() as u64;

        // A scan that stopped early (entries, time) says so in the log even
        // when it found nothing; a depth stop sees every nameable file.
        let incomplete = matches!(
            changes.limit,
            Some(ExecutionLimit::ScanEntries | ExecutionLimit::ScanTime)
        );
        let mut position = None;
        if changes.total > 0 || incomplete {
            let budget = self.evidence_budget(None)?;
            let scan = scan_record(&changes, scan_ms);
            let envelopes = self.write_session(session_id, session.version, |write, version| {
                let (kept, mut evidence) =
                    crate::evidence::keep_files(write, &workspace, &changes.written, budget)?;
                evidence.output_kept = false;
                let synced = SessionSynced {
                    scan: Some(Box::new(scan.clone())),
                    evidence: Some(evidence),
                    size_exceeded,
                };
                let header = self.event(&Event::SessionSynced(synced));
                let events = self.caused_by(header, &kept, &changes.deleted);
                Ok(write.append(
                    session_id.stream(),
                    ExpectedVersion::Exact(version),
                    &events,
                )?)
            })?;
            position = envelopes.first().map(|envelope| envelope.position.0);
            tracing::info!(target: "sandlog::lifecycle", event = "session.synced", %session_id, files_written = changes.written.len(), files_deleted = changes.deleted.len(), "workspace synced");
            self.maybe_checkpoint(false);
        }

        // What is now known to be on disk, each file with the hash the
        // projection has for it after this record.
        if files_hashed > 0 || changes.total > 0 || cache.len() != vouched.len() {
            let started_ns = nanos_since_epoch(scan_started);
            let mut known: BTreeMap<&WorkspacePath, Hash> = BTreeMap::new();
            for path in vouched.keys().chain(&changes.verified) {
                if let Some(file) = session.files.get(path) {
                    known.insert(path, file.blake3);
                }
            }
            for file in &changes.written {
                known.insert(&file.path, file.blake3);
            }
            let entries: Vec<(&WorkspacePath, Scanned, Hash)> = known
                .into_iter()
                .filter_map(|(path, hash)| {
                    let scanned = after.files.get(path)?;
                    settled(scanned, started_ns).then_some((path, *scanned, hash))
                })
                .collect();
            if let Err(error) = write_stat_cache(&cache_path, &entries) {
                // A cache, never truth: the next sync hashes more.
                tracing::warn!(%session_id, %error, "writing the stat cache failed");
            }
        }
        Ok(SyncReport {
            recorded: position.is_some(),
            position,
            files_written: changes.written.into_iter().map(|file| file.path).collect(),
            files_deleted: changes.deleted.into_iter().map(|file| file.path).collect(),
            files_changed_total: changes.total,
            unreadable: changes.unreadable,
            limit: changes.limit,
            files_seen,
            files_hashed,
            scan_ms,
            size_exceeded,
        })
    }
}

fn scan_record(changes: &Changes, scan_ms: u64) -> ExecutionScan {
    ExecutionScan {
        scan_ms,
        limit: changes.limit,
        files_changed_total: changes.total,
        files_recorded: (changes.written.len() + changes.deleted.len()) as u64,
        changes_digest: changes.limit.map(|_| changes.digest),
    }
}

/// SIGKILL to the process group `pid` leads (the command was made its
/// leader), so what it started goes too, unless it left the group.
fn kill_group(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // kill(2) with a negative pid signals that process group; it touches
    // no memory of ours.
    #[expect(unsafe_code, reason = "kill has no memory preconditions")]
    let result = unsafe { libc::kill(-pid, libc::SIGKILL) };
    let error = std::io::Error::last_os_error();
    // ESRCH: every process of the group has ended already.
    if result != 0 && error.raw_os_error() != Some(libc::ESRCH) {
        tracing::warn!(pid, %error, "killing the native command's process group failed");
    }
}

/// Signals a terminal or a supervisor sends to stop a process.
const FORWARDED_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Signal handlers forwarding to one process group, once `group` is set
/// (not 0); `pending` holds a signal that came before.
#[derive(Default)]
struct Forwarding {
    group: Arc<AtomicI32>,
    pending: Arc<AtomicI32>,
    handlers: Vec<signal_hook_registry::SigId>,
}

impl Forwarding {
    /// The command's group exists: forwards from now on, and passes on a
    /// signal that came before. A handler stores `pending` before it
    /// reads `group`, and this sets `group` before it takes `pending`, so
    /// no signal falls between them (one may be passed on twice).
    fn started(&self, pid: u32) {
        if self.handlers.is_empty() {
            return;
        }
        let Ok(group) = libc::pid_t::try_from(pid) else {
            return;
        };
        self.group.store(group, Ordering::SeqCst);
        let pending = self.pending.swap(0, Ordering::SeqCst);
        if pending != 0 {
            signal_group(group, pending);
        }
    }

    /// Stops forwarding (the group has ended: its id may be reused).
    fn stop(self) {
        self.group.store(0, Ordering::SeqCst);
        for handler in self.handlers {
            signal_hook_registry::unregister(handler);
        }
    }
}

/// kill(2) to the process group `group`; async-signal-safe.
fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // kill(2) touches no memory of ours.
    #[expect(unsafe_code, reason = "kill has no memory preconditions")]
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Installs handlers that forward [`FORWARDED_SIGNALS`] to the command's
/// process group once [`Forwarding::started`] names it. A handler that
/// cannot be installed is logged; the run goes on.
fn forward_signals() -> Forwarding {
    let mut forwarding = Forwarding::default();
    for signal in FORWARDED_SIGNALS {
        let (group, pending) = (forwarding.group.clone(), forwarding.pending.clone());
        let action = move || {
            pending.store(signal, Ordering::SeqCst);
            let group = group.load(Ordering::SeqCst);
            if group > 0 {
                signal_group(group, signal);
            }
        };
        // The action only uses atomics and kill(2), all async-signal-safe,
        // as a signal handler must be.
        #[expect(unsafe_code, reason = "the handler is async-signal-safe")]
        let registered = unsafe { signal_hook_registry::register(signal, action) };
        match registered {
            Ok(handler) => forwarding.handlers.push(handler),
            Err(error) => {
                tracing::warn!(signal, %error, "could not forward a signal to the native command");
            }
        }
    }
    forwarding
}
