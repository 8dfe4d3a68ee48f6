//! The [`Engine`]: opens a root, and turns commands into side effects and
//! the events that record them.
//!
//! Every command handler follows one shape: check the rules against the
//! projections, perform the side effect, append the events (the read models
//! update in the same transaction). Handlers for one session serialise on
//! that session's lock; different sessions run in parallel.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use sandlog_core::event::{
    Event, ExecutionLimit, ExecutionScan, FileDeleted, FileWritten, RecordedLimits,
    SessionExecuted, WrittenBy,
};
use sandlog_core::human::format_size;
use sandlog_core::limits::{BLOB_BYTES_MAX, LABEL_BYTES_MAX, LABELS_MAX};
use sandlog_core::{
    Clock, Hash, NewEvent, Outcome, SessionId, StreamId, SystemClock, WorkspacePath,
};
use sandlog_eventstore::{Durability, EventStore, EventStoreError, ExpectedVersion, OpenOptions};
use sandlog_projections::query::{self, FileView, SessionSummary};
use sandlog_projections::{SessionState, SessionStatus};
use serde::Serialize;

use crate::anchor;
use crate::error::{Result, RuntimeError};
use crate::sandbox::limits::SCAN_TIME_MIN;
use crate::sandbox::{
    self, CompileObserver, ExecLimits, LoadedModule, ModuleOrigin, ReadonlyMount, RunReport,
    RunRequest, Sandbox, SandboxError,
};
use crate::workspace::{ScanLimits, Workspace};

/// The database file under the root.
pub const DATABASE_FILE: &str = "sandlog.db";
/// Session workspaces under the root.
pub const WORKSPACES_DIR: &str = "workspaces";
/// Precompiled modules under the root, used only when the per-user cache
/// ([`default_cache_dir`]) is unknown or unusable.
pub const CACHE_DIR: &str = "cache";
/// Orphan directories moved out of `workspaces/`.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Evidence kept from adoption (corrupted metadata files).
pub const EVIDENCE_DIR: &str = "evidence";
/// Guest runtimes, when not given elsewhere.
pub const RUNTIMES_DIR: &str = "runtimes";

/// Longest code accepted for one execution, bytes. Code travels in the
/// guest's argv and is stored as a blob; 1 MiB is far beyond any snippet.
pub const CODE_BYTES_MAX: usize = 1024 * 1024;

/// The environment variable naming the directory with `python.wasm` and
/// `quickjs.wasm`.
pub const RUNTIMES_DIR_ENV: &str = "SANDLOG_RUNTIMES_DIR";

/// The environment variable naming the precompiled-module cache, instead
/// of the per-user default (see [`default_cache_dir`]).
pub const CACHE_DIR_ENV: &str = "SANDLOG_CACHE_DIR";

/// The precompiled-module cache every root of this user shares unless told
/// otherwise: `$XDG_CACHE_HOME/sandlog`, else `$HOME/.cache/sandlog` (as
/// the XDG base directory specification says, a relative or empty value is
/// ignored). `None` if neither variable gives an absolute path.
///
/// One cache per user, not per root: a module is compiled once per
/// machine, wasmtime version and CPU, and a new root's first execution
/// loads it in milliseconds. [`CACHE_DIR_ENV`] and
/// [`EngineOptions::cache_dir`] override it.
pub fn default_cache_dir() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .map(|cache| cache.join("sandlog"))
        .or_else(|| absolute("HOME").map(|home| home.join(".cache").join("sandlog")))
}

/// The paths of a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The root.
    pub root: PathBuf,
    /// `sandlog.db`.
    pub database: PathBuf,
    /// `workspaces/`.
    pub workspaces: PathBuf,
    /// `cache/`: precompiled modules, only when the per-user cache is
    /// unknown or unusable.
    pub cache: PathBuf,
    /// `quarantine/`.
    pub quarantine: PathBuf,
    /// `evidence/`.
    pub evidence: PathBuf,
}

impl Layout {
    /// The layout under `root`.
    pub fn new(root: &Path) -> Layout {
        Layout {
            root: root.to_owned(),
            database: root.join(DATABASE_FILE),
            workspaces: root.join(WORKSPACES_DIR),
            cache: root.join(CACHE_DIR),
            quarantine: root.join(QUARANTINE_DIR),
            evidence: root.join(EVIDENCE_DIR),
        }
    }

    /// A session's workspace directory.
    pub fn workspace(&self, session_id: SessionId) -> PathBuf {
        self.workspaces.join(session_id.to_string())
    }
}

/// How to open an engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The clock (events' `recorded_at`, prune ages).
    pub clock: Arc<dyn Clock>,
    /// Who is acting: `cli:<user>`, `api:<name>`.
    pub actor: String,
    /// Recorded as the `correlation_id` of every event this engine
    /// appends, tying them to the caller's task (see
    /// [`sandlog_core::correlation_id`] to make one from a task's name).
    /// Without it, a prune or reconcile run's events carry the run's id.
    pub correlation_id: Option<uuid::Uuid>,
    /// Commit durability.
    pub durability: Durability,
    /// Where `python.wasm` and `quickjs.wasm` are; default:
    /// `$SANDLOG_RUNTIMES_DIR`, else `<root>/runtimes`.
    pub runtimes_dir: Option<PathBuf>,
    /// Read-only directories every guest sees (vendored packages, say).
    pub readonly_mounts: Vec<ReadonlyMount>,
    /// Default limits of executions.
    pub limits: ExecLimits,
    /// The guest environment (whitelisted by the embedder; empty default).
    pub guest_env: Vec<(String, String)>,
    /// Precompiled-module cache; default `$SANDLOG_CACHE_DIR`, else the
    /// per-user [`default_cache_dir`] (else, or if that cannot be used,
    /// `<root>/cache`). A cache given here or by `$SANDLOG_CACHE_DIR` that
    /// cannot be used is an error, not a fallback.
    pub cache_dir: Option<PathBuf>,
    /// Told before and after a guest runtime is compiled (no usable
    /// precompiled artifact), so a front end can say why this execution
    /// takes seconds.
    pub on_compile: Option<CompileObserver>,
    /// Finish pending prune/delete intents on open (the applier's first
    /// step). On by default.
    pub finish_intents_on_open: bool,
    /// Failure injection for destructive steps (tests, chaos drills).
    pub fault: Option<crate::lifecycle::SharedFaultInjector>,
    /// Create the root (as [`Engine::init`]) if the directory is missing or
    /// holds no root. Off by default: opening never creates a root, so a
    /// mistyped `--root` fails instead of growing an empty log.
    pub create: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            clock: Arc::new(SystemClock),
            actor: "api:sandlog".to_owned(),
            correlation_id: None,
            durability: Durability::Full,
            runtimes_dir: None,
            readonly_mounts: Vec::new(),
            limits: ExecLimits::default(),
            guest_env: Vec::new(),
            cache_dir: None,
            on_compile: None,
            finish_intents_on_open: true,
            fault: None,
            create: false,
        }
    }
}

/// A guest runtime made ready by [`Engine::prepare_runtime`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRuntime {
    /// Its module file.
    pub path: PathBuf,
    /// Compiled now, or loaded from the precompiled cache (the first time
    /// this engine loaded it).
    pub origin: ModuleOrigin,
    /// How long making it ready took.
    pub elapsed: Duration,
}

/// Which guest to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// CPython 3.12 for WASI; the code is Python source.
    Python,
    /// QuickJS; the code is JavaScript source.
    JavaScript,
    /// Any WASI preview 1 command module; the code is its stdin.
    Module(PathBuf),
}

impl Runtime {
    /// Parses `python`, `javascript` (or `js`), or a path to a `.wasm` file.
    pub fn parse(text: &str) -> Runtime {
        match text {
            "python" | "py" => Runtime::Python,
            "javascript" | "js" => Runtime::JavaScript,
            path => Runtime::Module(PathBuf::from(path)),
        }
    }

    /// The name recorded in events.
    pub fn name(&self) -> String {
        match self {
            Runtime::Python => "python".to_owned(),
            Runtime::JavaScript => "javascript".to_owned(),
            Runtime::Module(path) => path.file_name().map_or_else(
                || path.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            ),
        }
    }
}

/// One execution request.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Which guest.
    pub runtime: Runtime,
    /// The code (or, for a module, its stdin).
    pub code: Vec<u8>,
    /// Limits; `None` fields of [`LimitOverrides`] take the engine's.
    pub limits: LimitOverrides,
}

impl ExecRequest {
    /// Python code under the default limits.
    pub fn python(code: impl Into<String>) -> ExecRequest {
        ExecRequest {
            runtime: Runtime::Python,
            code: code.into().into_bytes(),
            limits: LimitOverrides::default(),
        }
    }
}

/// Per-call limit overrides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    /// Fuel.
    pub fuel: Option<u64>,
    /// Wall clock.
    pub timeout: Option<Duration>,
    /// Linear memory, bytes.
    pub memory_bytes: Option<u64>,
    /// stdout and stderr caps, bytes.
    pub output_bytes: Option<usize>,
    /// Workspace quota, bytes.
    pub workspace_bytes: Option<u64>,
    /// File bytes kept as evidence (0: evidence off).
    pub evidence_bytes: Option<u64>,
}

/// What an execution did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Execution {
    /// How it ended.
    pub outcome: Outcome,
    /// The guest's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Captured stdout (lossy UTF-8 in JSON).
    #[serde(serialize_with = "lossy")]
    pub stdout: Vec<u8>,
    /// Captured stderr.
    #[serde(serialize_with = "lossy")]
    pub stderr: Vec<u8>,
    /// Whether stdout hit its cap.
    pub stdout_truncated: bool,
    /// Whether stderr hit its cap.
    pub stderr_truncated: bool,
    /// Fuel consumed.
    pub fuel_consumed: u64,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// Files the guest wrote.
    pub files_written: Vec<WorkspacePath>,
    /// Files the guest deleted.
    pub files_deleted: Vec<WorkspacePath>,
    /// A trap or limit message.
    pub message: Option<String>,
    /// Position of the `session.executed` event.
    pub position: u64,
    /// Wall time of the host's scan and hashing after the run,
    /// milliseconds (part of the execution's cost not in `duration_ms`).
    pub scan_ms: u64,
    /// The bound of the host's work after the run that kept some changes
    /// from being recorded, if any.
    pub limit: Option<ExecutionLimit>,
    /// Changes found after the run, recorded or not (`files_written` and
    /// `files_deleted` list the recorded ones).
    pub files_changed_total: u64,
}

fn lossy<S: serde::Serializer>(
    bytes: &[u8],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&String::from_utf8_lossy(bytes))
}

/// What [`Engine::execute_with`] hands the code that runs the guest.
pub(crate) struct RunContext<'a> {
    /// The engine's sandbox.
    pub(crate) sandbox: &'a Sandbox,
    /// The guest's module.
    pub(crate) module: &'a LoadedModule,
    /// The one-shot run of the request: workspace, args, env, mounts and
    /// the execution's limits.
    pub(crate) request: RunRequest<'a>,
}

/// The engine over one root. `Send + Sync`.
pub struct Engine {
    pub(crate) layout: Layout,
    pub(crate) store: EventStore,
    pub(crate) options: EngineOptions,
    sandbox: OnceLock<Sandbox>,
    session_locks: Mutex<HashMap<SessionId, Arc<Mutex<()>>>>,
    /// The root settings as of a version of the system stream.
    pub(crate) settings_cache: Mutex<Option<SettingsAsOf>>,
}

/// Root settings folded from the log, and the system stream's version they
/// were folded at.
pub(crate) type SettingsAsOf = (
    Option<sandlog_core::StreamVersion>,
    BTreeMap<String, String>,
);

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("root", &self.layout.root)
            .finish_non_exhaustive()
    }
}

fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(RuntimeError::io(format!("creating {}", path.display())))
}

/// Refuses labels past [`LABELS_MAX`] or [`LABEL_BYTES_MAX`].
pub(crate) fn check_labels(labels: &BTreeMap<String, String>) -> Result<()> {
    if labels.len() > LABELS_MAX {
        return Err(RuntimeError::Invalid(
            sandlog_core::CoreError::InvalidPayload {
                kind: "session.created".into(),
                schema: 1,
                reason: format!("{} labels; the limit is {LABELS_MAX}", labels.len()),
            },
        ));
    }
    if let Some((key, _)) = labels
        .iter()
        .find(|(k, v)| k.is_empty() || k.len() > LABEL_BYTES_MAX || v.len() > LABEL_BYTES_MAX)
    {
        return Err(RuntimeError::Invalid(
            sandlog_core::CoreError::InvalidPayload {
                kind: "session.created".into(),
                schema: 1,
                reason: format!(
                    "label {key:?}: keys must be 1 to {LABEL_BYTES_MAX} bytes, values at most {LABEL_BYTES_MAX}"
                ),
            },
        ));
    }
    Ok(())
}

impl Engine {
    /// Creates a root (its subdirectories, the database and the anchor) if
    /// needed; returns its canonical path. The genesis event is appended by
    /// the first [`Engine::open`], on the opener's clock. A root whose
    /// anchor is there is left alone: `init` never recreates a log that
    /// went missing (see [`Engine::reset_log`]).
    pub fn init(root: &Path) -> Result<PathBuf> {
        create_dir(root)?;
        let layout = Layout::new(root);
        create_dir(&layout.workspaces)?;
        if !anchor::exists(root) {
            let store = EventStore::open(&layout.database, OpenOptions::default())?;
            let now = SystemClock.now();
            match store.get(sandlog_core::Position(1))? {
                None => anchor::write(root, &anchor::new_anchor(now))?,
                // A root made before anchors: open writes its anchor.
                Some(_) => anchor::check(root, &store, None, now, "init")?,
            }
        }
        root.canonicalize()
            .map_err(RuntimeError::io(format!("resolving {}", root.display())))
    }

    /// The operator's explicit answer to a root whose log is gone
    /// ([`RuntimeError::LogMissing`], [`RuntimeError::AnchorMismatch`]):
    /// sets the anchor aside as `sandlog.anchor.replaced-<time>` and makes
    /// the current database (a new one if it is missing or empty) this
    /// root's log. Returns where the old anchor went.
    pub fn reset_log(root: &Path) -> Result<Option<PathBuf>> {
        if !root.is_dir() {
            return Err(RuntimeError::RootMissing(root.to_owned()));
        }
        let aside = anchor::set_aside(root, SystemClock.now())?;
        let database = Layout::new(root).database;
        if std::fs::metadata(&database).is_ok_and(|metadata| metadata.len() == 0) {
            // SQLite makes a zero-byte file a new database; removing it
            // first states that intent instead of relying on it.
            std::fs::remove_file(&database)
                .map_err(RuntimeError::io(format!("removing {}", database.display())))?;
        }
        Engine::init(root)?;
        Ok(aside)
    }

    /// Opens the engine on an existing root: checks the anchor, opens the
    /// log and read models (which catch up if behind), and — unless
    /// disabled — finishes pending prune/delete intents left by a crash.
    ///
    /// Creates nothing unless [`EngineOptions::create`]: a missing
    /// directory is [`RuntimeError::RootMissing`], a directory without a
    /// root [`RuntimeError::NotARoot`], and a root whose anchor says it had
    /// a log that is now missing, empty or replaced an integrity error.
    pub fn open(root: &Path, options: EngineOptions) -> Result<Engine> {
        let layout = Layout::new(root);
        if !root.is_dir() {
            if !options.create {
                return Err(RuntimeError::RootMissing(root.to_owned()));
            }
            Engine::init(root)?;
        }
        let mut found = anchor::read(root)?;
        let database = anchor::database_present(&layout.database);
        match (&found, database) {
            (None, false) if options.create => {
                Engine::init(root)?;
                found = anchor::read(root)?;
            }
            (None, false) => {
                return Err(RuntimeError::NotARoot {
                    path: root.to_owned(),
                });
            }
            (Some(anchor), false) => {
                let reason = if layout.database.exists() {
                    "sandlog.db is empty (0 bytes)"
                } else {
                    "sandlog.db is missing"
                };
                return Err(anchor::log_missing(root, anchor, reason));
            }
            (_, true) => {}
        }
        create_dir(&layout.workspaces)?;
        let mut open_options = OpenOptions::default()
            .clock(options.clock.clone())
            .durability(options.durability);
        open_options.create = false;
        let mut store = EventStore::open(&layout.database, open_options)?;
        anchor::check(root, &store, found, options.clock.now(), &options.actor)?;
        let report = sandlog_projections::install(&mut store)?;
        if report.events > 0 {
            tracing::info!(
                events = report.events,
                rebuilt = report.rebuilt,
                "read models caught up with the log"
            );
        }
        let engine = Engine {
            layout,
            store,
            options,
            sandbox: OnceLock::new(),
            session_locks: Mutex::new(HashMap::new()),
            settings_cache: Mutex::new(None),
        };
        if engine.options.finish_intents_on_open {
            // An intent that cannot be finished is recorded and left
            // pending; it must not keep the whole root from opening.
            match engine.finish_pending_intents() {
                Ok(0) => {}
                Ok(finished) => {
                    tracing::info!(finished, "finished pending intents left by an earlier run");
                }
                Err(error) => {
                    tracing::error!(%error, "finishing pending intents failed; `reconcile` retries them");
                }
            }
        }
        Ok(engine)
    }

    /// The root's paths.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The SQLite store itself, for tests and tools that inspect it. Front
    /// ends (the CLI, the server, the Python package) read the log through
    /// the forensic methods of [`crate::forensics`] instead, so they do not
    /// depend on which store is behind the engine.
    pub fn store(&self) -> &EventStore {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.options.clock
    }

    /// The actor recorded on events.
    pub fn actor(&self) -> &str {
        &self.options.actor
    }

    /// The sandbox, created on first use (commands that run no guest never
    /// pay for a wasmtime engine).
    pub fn sandbox(&self) -> Result<&Sandbox> {
        if let Some(sandbox) = self.sandbox.get() {
            return Ok(sandbox);
        }
        let (cache, explicit) = self.configured_cache_dir();
        let observer = self.options.on_compile.clone();
        let sandbox = match Sandbox::with_observer(&cache, observer.clone()) {
            Err(SandboxError::CacheDir { path, source }) if !explicit => {
                tracing::warn!(
                    cache = %path.display(),
                    error = %source,
                    fallback = %self.layout.cache.display(),
                    "the per-user module cache is unusable; using the root's own (set {CACHE_DIR_ENV} to choose another)"
                );
                Sandbox::with_observer(&self.layout.cache, observer)?
            }
            other => other?,
        };
        Ok(self.sandbox.get_or_init(|| sandbox))
    }

    /// The precompiled-module cache this engine uses (or will, once it runs
    /// a guest): [`EngineOptions::cache_dir`], else `$SANDLOG_CACHE_DIR`,
    /// else [`default_cache_dir`], else `<root>/cache`; the root's also when
    /// the per-user default turned out unusable.
    pub fn cache_dir(&self) -> PathBuf {
        match self.sandbox.get() {
            Some(sandbox) => sandbox.cache_dir().to_path_buf(),
            None => self.configured_cache_dir().0,
        }
    }

    /// The configured cache directory, and whether it was asked for
    /// explicitly (option or environment) rather than defaulted.
    fn configured_cache_dir(&self) -> (PathBuf, bool) {
        if let Some(dir) = &self.options.cache_dir {
            return (dir.clone(), true);
        }
        if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|dir| !dir.is_empty()) {
            return (PathBuf::from(dir), true);
        }
        match default_cache_dir() {
            Some(dir) => (dir, false),
            None => (self.layout.cache.clone(), false),
        }
    }

    /// Makes a guest runtime ready to run: loads it from the precompiled
    /// cache, or compiles it into the cache (telling
    /// [`EngineOptions::on_compile`]). `init` calls it so that the first
    /// execution does not pay for the compile.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::RuntimeMissing`] if the runtime's file is not there;
    /// the sandbox's error if it cannot be loaded.
    pub fn prepare_runtime(&self, runtime: &Runtime) -> Result<PreparedRuntime> {
        let path = self.runtime_path(runtime);
        if !path.is_file() {
            return Err(RuntimeError::RuntimeMissing {
                name: runtime.name(),
                path,
            });
        }
        let started = Instant::now();
        let module = self.sandbox()?.load(&path)?;
        Ok(PreparedRuntime {
            path,
            origin: module.origin(),
            elapsed: started.elapsed(),
        })
    }

    pub(crate) fn lock_session(&self, session_id: SessionId) -> Arc<Mutex<()>> {
        let mut locks = self
            .session_locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        locks.entry(session_id).or_default().clone()
    }

    /// A new event by this engine's actor, with its correlation id.
    pub(crate) fn event(&self, event: &Event) -> NewEvent {
        NewEvent::from_event(event, &self.options.actor).correlated(self.options.correlation_id)
    }

    /// The correlation id for events of a run with its own id (a prune or
    /// reconcile run): the caller's, else the run's.
    pub(crate) fn run_correlation(&self, run_id: uuid::Uuid) -> Option<uuid::Uuid> {
        Some(self.options.correlation_id.unwrap_or(run_id))
    }

    /// A catch-up subscription to the events matching `filter`: every
    /// event after a position or a named consumer's checkpoint, at least
    /// once and in position order, then what any process appends (see
    /// [`sandlog_eventstore::subscribe`]).
    ///
    /// # Errors
    ///
    /// A bad consumer name or a damaged checkpoint; the store's errors.
    pub fn subscribe(
        &self,
        from: sandlog_eventstore::SubscribeFrom,
        filter: sandlog_eventstore::LogFilter,
    ) -> Result<sandlog_eventstore::Subscription<'_>> {
        Ok(self.store.subscribe(from, filter)?)
    }

    /// A session (or [`RuntimeError::UnknownSession`]).
    pub fn session(&self, session_id: SessionId) -> Result<SessionSummary> {
        query::session(&self.store, session_id)?.ok_or(RuntimeError::UnknownSession(session_id))
    }

    /// Sessions, optionally of one status.
    pub fn sessions(&self, status: Option<SessionStatus>) -> Result<Vec<SessionSummary>> {
        Ok(query::sessions(&self.store, status)?)
    }

    /// Takes the session's shared lease (waiting up to
    /// [`crate::lease::USE_WAIT_MAX`] for a prune or delete holding it) and
    /// returns the session, which must be active *after* the lease is held:
    /// a prune or delete that finished meanwhile wins.
    pub(crate) fn lease_active(
        &self,
        session_id: SessionId,
    ) -> Result<(crate::lease::Lease, SessionState)> {
        self.lease_active_with(session_id, |engine| engine.active_session(session_id))
    }

    /// [`Engine::lease_active`] for callers that need the session's row
    /// but not its files (reading every file's row costs as much as the
    /// session has files).
    fn lease_active_summary(
        &self,
        session_id: SessionId,
    ) -> Result<(crate::lease::Lease, SessionSummary)> {
        self.lease_active_with(session_id, |engine| {
            let summary = engine.session(session_id)?;
            match summary.status {
                SessionStatus::Active => Ok(summary),
                status => Err(RuntimeError::SessionNotActive { session_id, status }),
            }
        })
    }

    /// Takes the session's shared lease, then reads the session with
    /// `load`, which fails with `SessionNotActive` unless it is active.
    fn lease_active_with<T>(
        &self,
        session_id: SessionId,
        load: impl FnOnce(&Engine) -> Result<T>,
    ) -> Result<(crate::lease::Lease, T)> {
        // Checked before the lease so that an unknown or finished session
        // never gets a lease file.
        let summary = self.session(session_id)?;
        if summary.status != SessionStatus::Active {
            return Err(RuntimeError::SessionNotActive {
                session_id,
                status: summary.status,
            });
        }
        let lease = crate::lease::Lease::acquire_or_busy(
            &self.layout.root,
            session_id,
            crate::lease::LeaseMode::Shared,
            crate::lease::USE_WAIT_MAX,
        )?;
        match load(self) {
            Ok(session) => Ok((lease, session)),
            Err(RuntimeError::SessionNotActive { session_id, status }) => {
                // Finished while this waited; its lease file may have been
                // removed and just recreated by this open. Any holder
                // re-reads a terminal status, so removing it is safe.
                if !status.has_workspace() {
                    let _ = lease.remove();
                }
                Err(RuntimeError::SessionNotActive { session_id, status })
            }
            Err(error) => Err(error),
        }
    }

    fn active_session(&self, session_id: SessionId) -> Result<SessionState> {
        let session = query::session_with_files(&self.store, session_id)?
            .ok_or(RuntimeError::UnknownSession(session_id))?;
        if session.status != SessionStatus::Active {
            return Err(RuntimeError::SessionNotActive {
                session_id,
                status: session.status,
            });
        }
        Ok(session)
    }

    /// Creates a session (S1): a fresh UUIDv4, its workspace directory, and
    /// `session.created`. The directory is made (and fsynced) first: a crash
    /// before the event leaves an empty orphan directory that `reconcile`
    /// quarantines, never an event without a directory.
    pub fn create_session(&self, labels: BTreeMap<String, String>) -> Result<SessionSummary> {
        self.create_session_with(crate::sessions::NewSession {
            labels,
            ..Default::default()
        })
    }

    /// Runs code in a session (X1, X2): the guest sees only the workspace
    /// as `/app`; afterwards the workspace is compared with the files
    /// projection and `session.executed` plus the guest's file changes are
    /// appended in one batch, expecting the version read before the run (a
    /// prune intent that landed meanwhile wins; see P7).
    pub fn execute(&self, session_id: SessionId, request: &ExecRequest) -> Result<Execution> {
        self.execute_with(session_id, request, |run| {
            Ok((run.sandbox.run(run.module, run.request)?, None))
        })
    }

    /// [`Engine::execute`] with the run itself left to `run`: the checks,
    /// the session lock, the lease, the scans, the recording and the
    /// evidence are the same for every way of running the guest (one-shot
    /// here, a warm kernel in [`crate::kernel`]). `run` gets the one-shot
    /// request and returns the report, and whether the guest ran in a warm
    /// kernel (`None`: one-shot), which `session.executed` records.
    pub(crate) fn execute_with(
        &self,
        session_id: SessionId,
        request: &ExecRequest,
        run: impl FnOnce(RunContext<'_>) -> Result<(RunReport, Option<bool>)>,
    ) -> Result<Execution> {
        if request.code.len() > CODE_BYTES_MAX {
            return Err(RuntimeError::CodeTooLarge {
                size: request.code.len(),
                max: CODE_BYTES_MAX,
            });
        }
        let lock = self.lock_session(session_id);
        let _guard: MutexGuard<'_, ()> =
            lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Held through the run and the append: the workspace is never
        // removed under the guest.
        let (_lease, session) = self.lease_active(session_id)?;
        let (module, args, stdin) = self.prepare(request)?;
        let mut limits = self.limits(&request.limits);
        // The session's size limit caps what the guest may leave.
        limits.workspace_bytes_max =
            self.session_quota(session.max_size, request.limits.workspace_bytes)?;
        let workspace_path = self.layout.workspace(session_id);
        let workspace = Workspace::open(&workspace_path)?;
        // Bounded like the scan after the run; a workspace past the bounds
        // before the run only costs the run some hashing afterwards.
        let scan_limits = ScanLimits {
            entries_max: limits.scan_entries_max,
            ..ScanLimits::default()
        };
        let before = workspace.scan_bounded(&scan_limits)?.files;
        let budget = self.evidence_budget(request.limits.evidence_bytes)?;

        let mut one_shot = RunRequest::new(&workspace_path);
        one_shot.args = args;
        one_shot.stdin = stdin;
        one_shot.env = self.options.guest_env.clone();
        one_shot.readonly_mounts = self.readonly_mounts(&session.readonly);
        one_shot.limits = limits.clone();
        let (report, warm) = run(RunContext {
            sandbox: self.sandbox()?,
            module: &module,
            request: one_shot,
        })?;

        // The host's work after the run is bounded by the run's own limits
        // (see `crate::scan`), and an execution is recorded whatever the
        // guest left behind.
        let scan_started = Instant::now();
        let deadline = scan_started + limits.timeout.max(SCAN_TIME_MIN);
        let after = workspace.scan_bounded(&ScanLimits {
            deadline: Some(deadline),
            ..scan_limits
        })?;
        let changes = crate::scan::changes(
            &workspace,
            &session.files,
            &before,
            &after,
            &crate::scan::Bounds {
                changed_files_max: limits.changed_files_max,
                hash_bytes_max: limits.workspace_bytes_max,
                deadline,
            },
        )?;
        let scan_ms = u64::try_from(scan_started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let written = changes.written;
        let deleted = changes.deleted;
        let files_recorded = (written.len() + deleted.len()) as u64;

        // A bound of the host's work turns a run that ended on its own (ok
        // or error) into `limit_exceeded`; a run that ended on a limit of
        // its own keeps that outcome, and the scan names the bound either
        // way.
        let (outcome, message) = match changes.limit {
            Some(limit) if matches!(report.outcome, Outcome::Ok | Outcome::Error) => (
                Outcome::LimitExceeded,
                Some(format!(
                    "the workspace after the run is past the {} bound; {files_recorded} of {} changes recorded",
                    limit.as_str(),
                    changes.total
                )),
            ),
            _ => (report.outcome, report.trap_message),
        };
        let scan = ExecutionScan {
            scan_ms,
            limit: changes.limit,
            files_changed_total: changes.total,
            files_recorded,
            changes_digest: changes.limit.map(|_| changes.digest),
        };
        // The code, the output and the files' bytes are stored in the
        // transaction of the events that name them: one commit, and no
        // event naming a blob that is not there.
        let envelopes = self.write_session(session_id, session.version, |write, version| {
            let code = write.put_blob(&request.code)?;
            if budget > 0 {
                write.put_blob(&report.stdout)?;
                write.put_blob(&report.stderr)?;
            }
            let (kept, evidence) =
                crate::evidence::keep_files(write, &workspace, &written, budget)?;
            let executed = SessionExecuted {
                runtime: request.runtime.name(),
                runtime_blake3: Hash(*module.blake3().as_bytes()),
                code_blake3: code.hash,
                code_bytes: request.code.len() as u64,
                outcome,
                exit_code: report.exit_code,
                fuel_consumed: Some(report.fuel_consumed),
                duration_us: u64::try_from(report.duration.as_micros()).unwrap_or(u64::MAX),
                stdout_bytes: report.stdout.len() as u64,
                stdout_blake3: Hash::of(&report.stdout),
                stdout_truncated: report.stdout_truncated,
                stderr_bytes: report.stderr.len() as u64,
                stderr_blake3: Hash::of(&report.stderr),
                stderr_truncated: report.stderr_truncated,
                limits: RecordedLimits {
                    fuel: limits.fuel,
                    timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
                    memory_bytes: limits.memory_bytes,
                    workspace_bytes: limits.workspace_bytes_max,
                },
                scan: Some(Box::new(scan.clone())),
                evidence: Some(evidence),
                warm,
            };
            let executed_event = self.event(&Event::SessionExecuted(executed));
            let cause = Some(executed_event.event_id.0);
            let mut events = vec![executed_event];
            events.extend(kept.iter().map(|file| {
                let mut event = self.event(&Event::FileWritten(file.clone()));
                event.causation_id = cause;
                event
            }));
            events.extend(deleted.iter().map(|file| {
                let mut event = self.event(&Event::FileDeleted(file.clone()));
                event.causation_id = cause;
                event
            }));
            Ok(write.append(
                session_id.stream(),
                ExpectedVersion::Exact(version),
                &events,
            )?)
        })?;
        let position = envelopes.first().map_or(0, |envelope| envelope.position.0);
        tracing::info!(target: "sandlog::lifecycle", event = "session.executed", %session_id, outcome = outcome.as_str(), files_written = written.len(), files_deleted = deleted.len(), "executed");
        self.maybe_checkpoint(false);
        Ok(Execution {
            outcome,
            exit_code: report.exit_code,
            stdout: report.stdout,
            stderr: report.stderr,
            stdout_truncated: report.stdout_truncated,
            stderr_truncated: report.stderr_truncated,
            fuel_consumed: report.fuel_consumed,
            duration_ms: u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
            files_written: written.into_iter().map(|file| file.path).collect(),
            files_deleted: deleted.into_iter().map(|file| file.path).collect(),
            message,
            position,
            scan_ms,
            limit: changes.limit,
            files_changed_total: changes.total,
        })
    }

    /// Appends to a session's stream expecting `version`. If another
    /// process appended meanwhile but the session is still active, the
    /// events still describe what happened and are appended at the new
    /// version; if the session is no longer active (a prune or delete intent
    /// won the race), fails with [`RuntimeError::SessionNotActive`].
    pub(crate) fn append_to_session(
        &self,
        session_id: SessionId,
        version: sandlog_core::StreamVersion,
        events: &[NewEvent],
    ) -> Result<Vec<sandlog_core::Envelope>> {
        match self
            .store
            .append(session_id.stream(), ExpectedVersion::Exact(version), events)
        {
            Ok(envelopes) => Ok(envelopes),
            Err(EventStoreError::VersionConflict {
                actual: Some(actual),
                ..
            }) => {
                let session = self.session(session_id)?;
                if session.status != SessionStatus::Active {
                    tracing::warn!(%session_id, status = session.status.as_str(), "session stopped being active during the operation; its events are not recorded");
                    return Err(RuntimeError::SessionNotActive {
                        session_id,
                        status: session.status,
                    });
                }
                Ok(self.store.append(
                    session_id.stream(),
                    ExpectedVersion::Exact(actual),
                    events,
                )?)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Runs `build` in one write transaction to append to a session's
    /// stream at `version` (see [`Engine::append_to_session`] for what
    /// happens when another process appended meanwhile: `build` runs again
    /// at the new version).
    pub(crate) fn write_session<T>(
        &self,
        session_id: SessionId,
        version: sandlog_core::StreamVersion,
        mut build: impl FnMut(
            &mut sandlog_eventstore::Write<'_, '_>,
            sandlog_core::StreamVersion,
        ) -> Result<T>,
    ) -> Result<T> {
        match self.store.write(|write| build(write, version)) {
            Err(RuntimeError::Store(EventStoreError::VersionConflict {
                actual: Some(actual),
                ..
            })) => {
                let session = self.session(session_id)?;
                if session.status != SessionStatus::Active {
                    tracing::warn!(%session_id, status = session.status.as_str(), "session stopped being active during the operation; its events are not recorded");
                    return Err(RuntimeError::SessionNotActive {
                        session_id,
                        status: session.status,
                    });
                }
                self.store.write(|write| build(write, actual))
            }
            other => other,
        }
    }

    fn runtimes_dir(&self) -> PathBuf {
        self.options
            .runtimes_dir
            .clone()
            .or_else(|| std::env::var_os(RUNTIMES_DIR_ENV).map(PathBuf::from))
            .unwrap_or_else(|| self.layout.root.join(RUNTIMES_DIR))
    }

    /// Where a runtime's module is.
    fn runtime_path(&self, runtime: &Runtime) -> PathBuf {
        match runtime {
            Runtime::Python => self.runtimes_dir().join("python.wasm"),
            Runtime::JavaScript => self.runtimes_dir().join("quickjs.wasm"),
            Runtime::Module(path) => path.clone(),
        }
    }

    fn prepare(&self, request: &ExecRequest) -> Result<(LoadedModule, Vec<String>, Vec<u8>)> {
        let code_text = || {
            String::from_utf8(request.code.clone()).map_err(|_| {
                RuntimeError::Invalid(sandlog_core::CoreError::InvalidPayload {
                    kind: "code".into(),
                    schema: 0,
                    reason: "code is not valid UTF-8".into(),
                })
            })
        };
        let (args, stdin) = match &request.runtime {
            Runtime::Python => (sandbox::python_args(&code_text()?), Vec::new()),
            Runtime::JavaScript => (sandbox::javascript_args(&code_text()?), Vec::new()),
            Runtime::Module(_) => (Vec::new(), request.code.clone()),
        };
        let path = self.runtime_path(&request.runtime);
        if !path.is_file() {
            return Err(RuntimeError::RuntimeMissing {
                name: request.runtime.name(),
                path,
            });
        }
        let module = self.sandbox()?.load(&path)?;
        Ok((module, args, stdin))
    }

    fn limits(&self, overrides: &LimitOverrides) -> ExecLimits {
        let mut limits = self.options.limits.clone();
        if let Some(fuel) = overrides.fuel {
            limits.fuel = Some(fuel);
        }
        if let Some(timeout) = overrides.timeout {
            limits.timeout = timeout;
        }
        if let Some(memory) = overrides.memory_bytes {
            limits.memory_bytes = memory;
        }
        if let Some(output) = overrides.output_bytes {
            limits.stdout_bytes_max = output;
            limits.stderr_bytes_max = output;
        }
        if let Some(workspace) = overrides.workspace_bytes {
            limits.workspace_bytes_max = workspace;
        }
        limits
    }

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
        let lock = self.lock_session(session_id);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (_lease, session) = self.lease_active_summary(session_id)?;
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
        let lock = self.lock_session(session_id);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (_lease, session) = self.lease_active(session_id)?;
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

    /// The stream of a session, for callers that want raw envelopes.
    pub fn session_events(&self, session_id: SessionId) -> Result<Vec<sandlog_core::Envelope>> {
        self.session(session_id)?;
        Ok(self.store.read_stream(StreamId::Session(session_id))?)
    }
}
