//! The [`Engine`]: opens a root, and turns commands into side effects and
//! the events that record them. This module holds opening and what every
//! command shares (the root's layout is in [`sandlog_host::layout`]); the commands live beside it
//! (`exec`, `files`, `sessions`, `lifecycle`, ...), each an `impl Engine`.
//!
//! Every command handler follows one shape: check the rules against the
//! projections, perform the side effect, append the events (the read models
//! update in the same transaction). Handlers for one session serialise on
//! that session's lock; different sessions run in parallel.

pub mod documents;
pub mod exec;
pub mod files;
pub mod forensics;
pub mod health;
pub mod metrics;
pub mod resolve;
pub(crate) mod scan;
pub mod sessions;
pub mod shared;
mod telemetry;

pub use resolve::{SESSION_ID_CHARS, SESSION_PREFIX_SHOWN_MAX, SessionMatch};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sandlog_core::event::{Event, FileDeleted, FileWritten};
use sandlog_core::limits::{LABEL_BYTES_MAX, LABELS_MAX};
use sandlog_core::{Clock, NewEvent, SessionId, StreamId, SystemClock};
use sandlog_eventstore::{EventStoreError, ExpectedVersion};
use sandlog_projections::{SessionState, SessionStatus};
use sandlog_sqlite::query::{self, SessionSummary};
use sandlog_sqlite::{Durability, EventStore, OpenOptions, UpgradeObserver};

use sandlog_host::anchor;
use sandlog_host::error::{Result, RuntimeError};
use sandlog_sandbox::{CompileObserver, ExecLimits, ReadonlyMount, Sandbox, SandboxError};

use sandlog_host::layout::{CACHE_DIR_ENV, Layout, NODE_FILE, default_cache_dir};

/// Longest code accepted for one execution, bytes. Code travels in the
/// guest's argv and is stored as a blob; 1 MiB is far beyond any snippet.
pub const CODE_BYTES_MAX: usize = 1024 * 1024;

/// Free space below which a root is not ready, by default: appends,
/// blobs and workspaces need room, and SQLite fails a commit on a full
/// disk.
pub const DISK_FREE_MIN_DEFAULT: u64 = 256 * 1024 * 1024;

/// What the checks are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthOptions {
    /// Free bytes the root's filesystem must have.
    pub disk_free_min: u64,
}

impl Default for HealthOptions {
    fn default() -> Self {
        HealthOptions {
            disk_free_min: DISK_FREE_MIN_DEFAULT,
        }
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
    /// Where `python.wasm` and `quickjs.wasm` are (then the only place
    /// looked in); default: `$SANDLOG_RUNTIMES_DIR`, else `<root>/runtimes`,
    /// else the per-user data directory (see [`sandlog_host::runtimes`]).
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
    /// Told before and after opening upgrades the log (its schema, or a
    /// rebuild of its read models) of a root an older sandlog made, so a
    /// front end can say why this open takes long and holds other
    /// processes back.
    pub on_upgrade: Option<UpgradeObserver>,
    /// Finish pending prune/delete intents on open (the applier's first
    /// step). On by default.
    pub finish_intents_on_open: bool,
    /// Sessions per prune batch; default (`None`): sized by the process's
    /// descriptor limit ([`crate::lifecycle::prune_batch_sessions`]). Each
    /// held session is an open lease file, and a run holds
    /// [`crate::lifecycle::PRUNE_BATCHES_HELD`] batches at once.
    pub prune_batch_sessions: Option<usize>,
    /// How long a writer of a session (an execution, a native run, a
    /// sync, a host write) waits for another writer of the same session,
    /// in this or any process, before failing with `busy`
    /// ([`sandlog_host::lease::WRITER_WAIT_DEFAULT`] by default).
    pub session_wait: Duration,
    /// Failure injection for destructive steps (tests, chaos drills).
    pub fault: Option<sandlog_host::fault::SharedFaultInjector>,
    /// The node (host) this engine acts for, recorded on the sessions it
    /// creates (see [`sandlog_core::node`]); default: the root's `node`
    /// file, else the host name (then written to that file).
    pub node: Option<String>,
    /// Where the log lives: `None` for the root's own SQLite file (the
    /// default); a PostgreSQL URL or `key=value` connection string for a
    /// log shared by several nodes, each with its own root (workspaces,
    /// and a replica of the log with the read models; see
    /// [`crate::engine::shared`]).
    pub store: Option<String>,
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
            on_upgrade: None,
            finish_intents_on_open: true,
            prune_batch_sessions: None,
            session_wait: sandlog_host::lease::WRITER_WAIT_DEFAULT,
            fault: None,
            store: None,
            node: None,
            create: false,
        }
    }
}

/// How many times a session's record is attempted when its stream keeps
/// moving under it (see [`Engine::write_session`]). Each retry follows an
/// append by someone else, so a bound this size is never reached by
/// honest traffic; it only stops a livelock.
pub const SESSION_APPEND_ATTEMPTS: u32 = 16;

/// The engine over one root. `Send + Sync`.
pub struct Engine {
    pub(crate) layout: Layout,
    /// The root's SQLite file: the log itself, or with [`Engine::shared`]
    /// this node's replica of it. The read models live here either way.
    pub(crate) store: EventStore,
    /// The log shared with other nodes, when [`EngineOptions::store`]
    /// names one.
    pub(crate) shared: Option<Box<dyn sandlog_eventstore::Backend>>,
    pub(crate) options: EngineOptions,
    /// The node this engine acts for.
    node: String,
    sandbox: OnceLock<Sandbox>,
    session_locks: Mutex<HashMap<SessionId, Arc<Mutex<()>>>>,
    /// The root settings as of a version of the system stream.
    pub(crate) settings_cache: Mutex<Option<SettingsAsOf>>,
    /// What this engine counted (see [`crate::engine::metrics`]).
    pub(crate) metrics: crate::engine::metrics::Metrics,
    /// What [`Engine::health`] holds the root to.
    pub(crate) health_options: Mutex<HealthOptions>,
    /// The background pass freeing pruned workspaces (see [`crate::trash`]).
    pub(crate) reclaimer: crate::trash::Reclaimer,
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

/// The node name for a root: `given` (checked), else the root's
/// [`NODE_FILE`], else the host name made a valid name. The file is
/// written when missing, so the name stays with the root.
fn resolve_node(root: &Path, given: Option<&str>, read_only: bool) -> Result<String> {
    let file = root.join(NODE_FILE);
    let stored = match std::fs::read_to_string(&file) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => {
            return Err(RuntimeError::Io {
                context: format!("reading {}", file.display()),
                source: error,
            });
        }
    };
    let name = match (given, &stored) {
        (Some(given), _) => sandlog_core::node::check_node_name(given)?.to_owned(),
        (None, Some(text)) => {
            let name = text.strip_suffix('\n').unwrap_or(text);
            sandlog_core::node::check_node_name(name).map_err(|error| {
                RuntimeError::BadLocation {
                    location: file.display().to_string(),
                    reason: format!("{error}; write this node's name in it, or give --node"),
                }
            })?;
            name.to_owned()
        }
        (None, None) => {
            let host = rustix::system::uname();
            sandlog_core::node::node_name_from(&host.nodename().to_string_lossy())
        }
    };
    if stored.is_none() && !read_only {
        // Written aside and renamed: a reader sees no file or a whole one.
        let aside = root.join(format!(".{NODE_FILE}.{}", uuid::Uuid::new_v4()));
        std::fs::write(&aside, format!("{name}\n"))
            .and_then(|()| std::fs::rename(&aside, &file))
            .map_err(RuntimeError::io(format!("writing {}", file.display())))?;
    }
    Ok(name)
}

/// Whether this process may create files in `root` and write its
/// database (`access(2)`: `EROFS` on read-only media, `EACCES` for another
/// user's root).
fn writable(root: &Path) -> bool {
    use rustix::fs::{Access, access};
    let database = root.join(crate::layout::DATABASE_FILE);
    access(root, Access::WRITE_OK).is_ok() && access(&database, Access::WRITE_OK).is_ok()
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
        if let Some(url) = options.store.clone() {
            return Engine::open_shared(root, &url, options);
        }
        let layout = Layout::new(root);
        if !root.is_dir() {
            if !options.create {
                return Err(RuntimeError::RootMissing(root.to_owned()));
            }
            Engine::init(root)?;
        }
        let mut found = anchor::read(root)?;
        if let Some(shared_log) = found.as_ref().and_then(|anchor| anchor.shared_log.clone()) {
            // Its database is a replica: written alone, it would fork.
            return Err(RuntimeError::BadLocation {
                location: root.display().to_string(),
                reason: format!(
                    "this root is a node of the shared log {shared_log}; its sandlog.db is a \
                     replica, opened only with that log: pass --store URL (or set $SANDLOG_STORE)"
                ),
            });
        }
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
        // A root this process cannot write (read-only media, another
        // user's root) is opened for inspection only.
        let read_only = !writable(root);
        if read_only {
            tracing::info!(root = %root.display(), "the root cannot be written; opened read-only");
        } else {
            create_dir(&layout.workspaces)?;
        }
        let mut open_options = OpenOptions::default()
            .clock(options.clock.clone())
            .durability(options.durability)
            .on_upgrade(options.on_upgrade.clone());
        open_options.create = false;
        open_options.read_only = read_only;
        let mut store = EventStore::open(&layout.database, open_options)?;
        anchor::check(root, &store, found, options.clock.now(), &options.actor)?;
        let report = sandlog_sqlite::install_observed(&mut store, options.on_upgrade.as_ref())?;
        if report.events > 0 {
            tracing::info!(
                events = report.events,
                rebuilt = report.rebuilt,
                "read models caught up with the log"
            );
        }
        Engine::assemble(layout, store, None, options)
    }

    /// [`Engine::open`] for a root whose log is shared (see
    /// [`crate::engine::shared`]): the anchor pins the shared log's genesis event,
    /// and the root's SQLite file, made if missing, is this node's replica
    /// of it, brought up to date before the engine is returned.
    fn open_shared(root: &Path, url: &str, options: EngineOptions) -> Result<Engine> {
        let layout = Layout::new(root);
        if !root.is_dir() && !options.create {
            return Err(RuntimeError::RootMissing(root.to_owned()));
        }
        let found = anchor::read(root)?;
        if found.is_none() && !options.create {
            return Err(RuntimeError::NotARoot {
                path: root.to_owned(),
            });
        }
        if found
            .as_ref()
            .is_some_and(|anchor| anchor.shared_log.is_none() && anchor.genesis_hash.is_some())
        {
            return Err(RuntimeError::BadLocation {
                location: root.display().to_string(),
                reason: "this root keeps its own log in sandlog.db, not in a shared one: open it \
                         without --store, or copy its log with `sandlog migrate --to URL` and \
                         make new roots for the nodes of that log"
                    .into(),
            });
        }
        // Connected first: a shared log that cannot be reached leaves no
        // half-made root behind.
        let shared = Engine::connect_shared(url, options.clock.clone())?;
        create_dir(root)?;
        create_dir(&layout.workspaces)?;
        anchor::check(
            root,
            shared.as_ref(),
            found,
            options.clock.now(),
            &options.actor,
        )?;
        // The anchor names the shared log from the first open on, so the
        // replica is never opened as a log of its own.
        if let Some(anchor) = anchor::read(root)?
            && anchor.shared_log.is_none()
        {
            anchor::write(
                root,
                &anchor::Anchor {
                    shared_log: Some(shared.name()),
                    ..anchor
                },
            )?;
        }
        let open_options = OpenOptions::default()
            .clock(options.clock.clone())
            .durability(options.durability)
            .on_upgrade(options.on_upgrade.clone());
        let mut store = EventStore::open(&layout.database, open_options)?;
        sandlog_sqlite::install_observed(&mut store, options.on_upgrade.as_ref())?;
        let copied = store.replicate_from(shared.as_ref())?;
        if copied > 0 {
            tracing::info!(copied, "this node's replica copied the shared log");
        }
        Engine::assemble(layout, store, Some(shared), options)
    }

    /// The engine over an opened log; finishes pending intents unless
    /// told not to.
    fn assemble(
        layout: Layout,
        store: EventStore,
        shared: Option<Box<dyn sandlog_eventstore::Backend>>,
        options: EngineOptions,
    ) -> Result<Engine> {
        let node = resolve_node(&layout.root, options.node.as_deref(), store.is_read_only())?;
        let engine = Engine {
            layout,
            store,
            shared,
            options,
            node,
            sandbox: OnceLock::new(),
            session_locks: Mutex::new(HashMap::new()),
            settings_cache: Mutex::new(None),
            metrics: crate::engine::metrics::Metrics::new(),
            health_options: Mutex::new(HealthOptions::default()),
            reclaimer: crate::trash::Reclaimer::default(),
        };
        if engine.options.finish_intents_on_open && !engine.store.is_read_only() {
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
            engine.reclaim_leftovers();
        }
        Ok(engine)
    }

    /// The node this engine acts for (see [`EngineOptions::node`]).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Refuses to touch the workspace of another node's session: with a
    /// shared log, each node's sessions live on its own disk. A session
    /// that records no node is every node's; a root that keeps its own log
    /// has one disk, so none of its sessions is foreign.
    pub(crate) fn check_own(&self, session_id: SessionId, node: Option<&str>) -> Result<()> {
        match node {
            Some(node) if self.is_shared() && node != self.node => {
                Err(RuntimeError::ForeignSession {
                    session_id,
                    node: node.to_owned(),
                    this_node: self.node.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether a session of `node` is this node's (see [`Engine::check_own`]).
    pub(crate) fn is_own(&self, node: Option<&str>) -> bool {
        !self.is_shared() || node.is_none_or(|node| node == self.node)
    }

    /// The root's paths.
    pub fn layout(&self) -> &Layout {
        &self.layout
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

    /// `header` followed by the file events (an execution's, a native
    /// run's, a sync's), each caused by it.
    pub(crate) fn caused_by(
        &self,
        header: NewEvent,
        written: &[FileWritten],
        deleted: &[FileDeleted],
    ) -> Vec<NewEvent> {
        let cause = Some(header.event_id.0);
        let mut events = Vec::with_capacity(1 + written.len() + deleted.len());
        events.push(header);
        events.extend(written.iter().map(|file| {
            let mut event = self.event(&Event::FileWritten(file.clone()));
            event.causation_id = cause;
            event
        }));
        events.extend(deleted.iter().map(|file| {
            let mut event = self.event(&Event::FileDeleted(file.clone()));
            event.causation_id = cause;
            event
        }));
        events
    }

    /// The correlation id for events of a run with its own id (a prune or
    /// reconcile run): the caller's, else the run's.
    pub(crate) fn run_correlation(&self, run_id: uuid::Uuid) -> Option<uuid::Uuid> {
        Some(self.options.correlation_id.unwrap_or(run_id))
    }

    /// A catch-up subscription to the events matching `filter`: every
    /// event after a position or a named consumer's checkpoint, at least
    /// once and in position order, then what any process appends (see
    /// [`sandlog_sqlite::store::subscribe`]).
    ///
    /// # Errors
    ///
    /// A bad consumer name or a damaged checkpoint; the store's errors.
    pub fn subscribe(
        &self,
        from: sandlog_sqlite::SubscribeFrom,
        filter: sandlog_eventstore::LogFilter,
    ) -> Result<sandlog_sqlite::Subscription<'_>> {
        Ok(self.store.subscribe(from, filter)?)
    }

    /// A session (or [`RuntimeError::UnknownSession`]).
    pub fn session(&self, session_id: SessionId) -> Result<SessionSummary> {
        if let Some(session) = query::session(&self.store, session_id)? {
            return Ok(session);
        }
        // Another node may have created it since this replica last copied.
        if self.refresh()? == 0 {
            return Err(RuntimeError::UnknownSession(session_id));
        }
        query::session(&self.store, session_id)?.ok_or(RuntimeError::UnknownSession(session_id))
    }

    /// Sessions, optionally of one status.
    pub fn sessions(&self, status: Option<SessionStatus>) -> Result<Vec<SessionSummary>> {
        self.refresh()?;
        Ok(query::sessions(&self.store, status)?)
    }

    /// Takes the session's shared lease (waiting up to
    /// [`sandlog_host::lease::USE_WAIT_MAX`] for a prune or delete holding it),
    /// then its writer lock (waiting up to `wait` for another writer), and
    /// returns the session as it is *after* both are held: a prune or
    /// delete that finished meanwhile wins, and the version and files are
    /// those the previous writer left.
    pub(crate) fn hold_for_writing(
        &self,
        session_id: SessionId,
        wait: Duration,
    ) -> Result<(sandlog_host::lease::WriterHold, SessionState)> {
        self.hold_with(session_id, wait, |engine| engine.active_session(session_id))
    }

    /// [`Engine::hold_for_writing`] for callers that need the session's
    /// row but not its files (reading every file's row costs as much as
    /// the session has files).
    pub(crate) fn hold_for_writing_summary(
        &self,
        session_id: SessionId,
        wait: Duration,
    ) -> Result<(sandlog_host::lease::WriterHold, SessionSummary)> {
        self.hold_with(session_id, wait, |engine| {
            let summary = engine.session(session_id)?;
            match summary.status {
                SessionStatus::Active => Ok(summary),
                status => Err(RuntimeError::SessionNotActive { session_id, status }),
            }
        })
    }

    /// How long this engine's writers wait for another writer of the same
    /// session: [`EngineOptions::session_wait`].
    pub(crate) fn session_wait(&self) -> Duration {
        self.options.session_wait
    }

    /// Takes the session's shared lease and writer lock, then reads the
    /// session with `load`, which fails with `SessionNotActive` unless it
    /// is active.
    /// Refuses, before anything is done, a call that must write on a root
    /// opened read-only.
    pub(crate) fn require_writable(&self) -> Result<()> {
        if self.store.is_read_only() {
            return Err(RuntimeError::Store(
                sandlog_eventstore::EventStoreError::ReadOnly {
                    path: self.layout.database.clone(),
                },
            ));
        }
        Ok(())
    }

    fn hold_with<T>(
        &self,
        session_id: SessionId,
        wait: Duration,
        load: impl FnOnce(&Engine) -> Result<T>,
    ) -> Result<(sandlog_host::lease::WriterHold, T)> {
        // A read-only root can record nothing: refused before a guest or
        // a command runs, so nothing runs unrecorded.
        self.require_writable()?;
        // Checked before the lease so that an unknown or finished session
        // never gets a lease file.
        let summary = self.session(session_id)?;
        self.check_own(session_id, summary.node.as_deref())?;
        if summary.status != SessionStatus::Active {
            return Err(RuntimeError::SessionNotActive {
                session_id,
                status: summary.status,
            });
        }
        let lease = sandlog_host::lease::Lease::acquire_or_busy(
            &self.layout.root,
            session_id,
            sandlog_host::lease::LeaseMode::Shared,
            sandlog_host::lease::USE_WAIT_MAX,
        )?;
        let not_active = |lease: sandlog_host::lease::Lease, status: SessionStatus| {
            // Finished while this waited; its lease file may have been
            // removed and just recreated by this open. Any holder
            // re-reads a terminal status, so removing it is safe.
            if !status.has_workspace() {
                let _ = lease.remove();
            }
            RuntimeError::SessionNotActive { session_id, status }
        };
        // The session may have finished while this waited for the lease:
        // its workspace is then gone, which is not a reason to fail with
        // an I/O error.
        let summary = self.session(session_id)?;
        if summary.status != SessionStatus::Active {
            return Err(not_active(lease, summary.status));
        }
        let writer = sandlog_host::lease::WriterLock::acquire(
            &self.layout.workspace(session_id),
            session_id,
            wait,
        )?;
        match load(self) {
            Ok(session) => Ok((sandlog_host::lease::WriterHold::new(lease, writer), session)),
            Err(RuntimeError::SessionNotActive { status, .. }) => {
                drop(writer);
                Err(not_active(lease, status))
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
        self.write_session(session_id, version, |write, version| {
            Ok(write.append(session_id.stream(), ExpectedVersion::Exact(version), events)?)
        })
    }

    /// Runs `build` in one write transaction to append to a session's
    /// stream at `version`. Writers of a session take turns (the writer
    /// lock), but events that change no file (a hold, an erasure, a
    /// kernel's restart) are appended without it, so the version may have
    /// moved: then `build` runs again at the new version, up to
    /// [`SESSION_APPEND_ATTEMPTS`] times in all, so what a guest did is
    /// recorded rather than dropped. Only a session that stopped being
    /// active (a prune or delete intent won) fails, with
    /// [`RuntimeError::SessionNotActive`].
    pub(crate) fn write_session<T>(
        &self,
        session_id: SessionId,
        version: sandlog_core::StreamVersion,
        mut build: impl FnMut(
            &mut dyn sandlog_eventstore::UnitOfWork,
            sandlog_core::StreamVersion,
        ) -> Result<T>,
    ) -> Result<T> {
        let mut version = version;
        let mut attempt = 1;
        loop {
            match self.write_log(|write| build(write, version)) {
                Err(RuntimeError::Store(EventStoreError::VersionConflict {
                    actual: Some(actual),
                    ..
                })) if attempt < SESSION_APPEND_ATTEMPTS => {
                    let session = self.session(session_id)?;
                    if session.status != SessionStatus::Active {
                        tracing::warn!(%session_id, status = session.status.as_str(), "session stopped being active during the operation; its events are not recorded");
                        return Err(RuntimeError::SessionNotActive {
                            session_id,
                            status: session.status,
                        });
                    }
                    tracing::debug!(%session_id, attempt, "the session's stream moved; appending again at its new version");
                    version = actual;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The stream of a session, for callers that want raw envelopes.
    pub fn session_events(&self, session_id: SessionId) -> Result<Vec<sandlog_core::Envelope>> {
        self.session(session_id)?;
        Ok(self.store.read_stream(StreamId::Session(session_id))?)
    }
}
