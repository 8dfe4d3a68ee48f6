//! `sandlog._sandlog`: the native half of the `sandlog` Python package.
//!
//! A thin layer over [`sandlog_runtime::Engine`]. Every method takes plain
//! values (the pure-Python `sandlog` package checks types and turns results
//! into dataclasses), runs the engine with the GIL released, and maps every
//! [`RuntimeError`] to one of the `sandlog` exception classes. Nothing here
//! may unwind into the interpreter: each call runs under `catch_unwind` and a
//! panic becomes a `sandlog.Error`.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use sandlog_runtime::applier::ReconcileOptions;
use sandlog_runtime::core::policy::{PrunePolicy, PruneRequest};
use sandlog_runtime::core::{
    CoreError, ErrorClass, Position, SessionId, StreamId, Timestamp, WorkspacePath,
};
use sandlog_runtime::eventstore::LogFilter;
use sandlog_runtime::native::NativeOptions;
use sandlog_runtime::projections::Cut;
use sandlog_runtime::projections::query::{FileView, SessionSummary};
use sandlog_runtime::proofs::{
    generate_key_file, read_signer_key, read_verifier_key, verify_bundle,
};
use sandlog_runtime::sandbox::{CancelFlag, OutputSink, OutputStream, RunSignals};
use sandlog_runtime::sqlite::{UpgradeEvent, UpgradeObserver};
use sandlog_runtime::{
    Engine, EngineOptions, ExecRequest, Execution, KernelLimits, KernelPool, LimitOverrides,
    Runtime, RuntimeError,
};

/// Most events one `log_page` call returns; the Python iterator asks page by
/// page, so memory stays bounded however long the log is.
const LOG_PAGE_EVENTS_MAX: usize = 2048;

/// Why a call failed, before it is turned into a Python exception (which
/// needs the GIL, not held while the engine runs).
enum Failure {
    /// The engine's error.
    Runtime(RuntimeError),
    /// A bad argument found here.
    Invalid(String),
    /// The engine was closed.
    Closed,
    /// A panic caught at the boundary.
    Panic(String),
}

impl From<RuntimeError> for Failure {
    fn from(error: RuntimeError) -> Self {
        Failure::Runtime(error)
    }
}

impl From<CoreError> for Failure {
    fn from(error: CoreError) -> Self {
        Failure::Runtime(RuntimeError::Invalid(error))
    }
}

/// The `sandlog` exception class of an engine error, by its class.
fn class_of(error: &RuntimeError) -> &'static str {
    match error.class() {
        ErrorClass::Integrity => "IntegrityError",
        ErrorClass::NotFound => "NotFound",
        ErrorClass::Conflict => "Conflict",
        ErrorClass::Limit => "LimitExceeded",
        ErrorClass::BadInput => "InvalidInput",
        ErrorClass::Refused | ErrorClass::Io => "Error",
    }
}

/// Builds the Python exception: `sandlog.<class>(message)` with `kind` set.
fn exception(py: Python<'_>, class: &str, kind: &str, message: String) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let module = py.import("sandlog._errors")?;
        let value = module.getattr(class)?.call1((message.clone(),))?;
        value.setattr("kind", kind)?;
        Ok(PyErr::from_value(value))
    };
    // The errors module ships with the package; if it cannot be imported
    // the import error itself is the most useful thing to raise.
    build().unwrap_or_else(|error| error)
}

fn to_pyerr(py: Python<'_>, failure: Failure) -> PyErr {
    match failure {
        Failure::Runtime(error) => exception(py, class_of(&error), error.kind(), error.to_string()),
        Failure::Invalid(message) => exception(py, "InvalidInput", "invalid_argument", message),
        Failure::Closed => exception(
            py,
            "Error",
            "closed",
            "the engine is closed; open it again with sandlog.Engine.open(root)".to_owned(),
        ),
        Failure::Panic(message) => exception(
            py,
            "Error",
            "internal",
            format!("internal error in sandlog (please report it): {message}"),
        ),
    }
}

/// Runs `work` with the GIL released; a panic is caught and reported as a
/// `sandlog.Error` instead of unwinding into the interpreter.
fn run<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> Result<T, Failure> + Send,
{
    let outcome = py.detach(move || std::panic::catch_unwind(AssertUnwindSafe(work)));
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failure)) => Err(to_pyerr(py, failure)),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(to_pyerr(py, Failure::Panic(message)))
        }
    }
}

/// A timeout given in seconds, refused unless it is a non-negative number.
fn seconds(py: Python<'_>, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|value| {
            Duration::try_from_secs_f64(value).map_err(|_| {
                to_pyerr(
                    py,
                    Failure::Invalid(format!(
                        "timeout {value}: must be a positive number of seconds"
                    )),
                )
            })
        })
        .transpose()
}

/// Workspace paths as text.
fn paths(paths: &[WorkspacePath]) -> Vec<String> {
    paths.iter().map(ToString::to_string).collect()
}

fn session_id(text: &str) -> Result<SessionId, Failure> {
    Ok(SessionId::parse(text)?)
}

fn workspace_path(text: &str) -> Result<WorkspacePath, Failure> {
    Ok(WorkspacePath::parse(text)?)
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value)
        .map_err(|error| Failure::Panic(format!("serialising a result: {error}")))
}

fn session_dict<'py>(py: Python<'py>, summary: &SessionSummary) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("session_id", summary.session_id.to_string())?;
    dict.set_item("status", summary.status.as_str())?;
    dict.set_item(
        "created_at_us",
        summary.created_at.map(Timestamp::unix_micros),
    )?;
    dict.set_item(
        "updated_at_us",
        summary.updated_at.map(Timestamp::unix_micros),
    )?;
    dict.set_item("exec_count", summary.exec_count)?;
    dict.set_item("bytes", summary.bytes)?;
    dict.set_item("file_count", summary.file_count)?;
    dict.set_item("legacy", summary.legacy)?;
    dict.set_item("labels", summary.labels.clone())?;
    dict.set_item("held", summary.held.clone())?;
    dict.set_item("group", summary.group.clone())?;
    dict.set_item("max_size", summary.max_size)?;
    dict.set_item("node", summary.node.clone())?;
    dict.set_item(
        "last_outcome",
        summary.last_outcome.map(|outcome| outcome.as_str()),
    )?;
    Ok(dict)
}

/// A point in a session's history: a log position or an instant (the
/// wrapper passes at most one); neither is now.
fn cut(engine: &Engine, position: Option<u64>, at_us: Option<i64>) -> Cut {
    match (position, at_us) {
        (Some(position), _) => Cut::Position(Position(position)),
        (None, Some(micros)) => Cut::Time(Timestamp::from_unix_micros(micros)),
        (None, None) => Cut::Time(engine.clock().now()),
    }
}

fn file_tuple(file: &FileView) -> (String, u64, String, i64) {
    (
        file.path.to_string(),
        file.size,
        file.blake3.to_hex(),
        file.updated_at.unix_micros(),
    )
}

/// Reports the long, one-off upgrade of a root an older sandlog made (its
/// schema, or a rebuild of its read models) to Python's `logging`, logger
/// `sandlog`: a warning when it starts, since opening then holds every
/// other process using the root back for as long as it takes, and an info
/// record when it is committed. A platform's logging shows why an open
/// took long; the package prints nothing itself.
fn upgrade_observer() -> UpgradeObserver {
    UpgradeObserver::new(|event| {
        let (level, message) = match event {
            UpgradeEvent::Started {
                path,
                upgrade,
                events,
            } => (
                "warning",
                format!(
                    "{} ({events} events), once; other processes using this root wait for it",
                    upgrade.starting(&path.display().to_string())
                ),
            ),
            UpgradeEvent::Finished {
                upgrade, elapsed, ..
            } => (
                "info",
                format!("{} in {:.1} s", upgrade.done(), elapsed.as_secs_f64()),
            ),
        };
        Python::attach(|py| {
            let logged = py
                .import("logging")
                .and_then(|logging| logging.call_method1("getLogger", ("sandlog",)))
                .and_then(|logger| logger.call_method1(level, (message,)));
            // A logging setup that raises must not fail the open: Python
            // reports it as it reports any error it cannot raise.
            if let Err(error) = logged {
                error.write_unraisable(py, None);
            }
        });
    })
}

/// A flag that stops an execution when set (`cancel()`); the execution is
/// recorded with outcome `cancelled`. Clones share nothing: pass the same
/// object to the execution and to whoever cancels.
#[pyclass(frozen, module = "sandlog._sandlog", name = "CancelToken")]
struct PyCancelToken {
    flag: CancelFlag,
}

#[pymethods]
impl PyCancelToken {
    #[new]
    fn new() -> PyCancelToken {
        PyCancelToken {
            flag: CancelFlag::new(),
        }
    }

    /// Asks the execution to stop; safe from any thread, idempotent.
    fn cancel(&self) {
        self.flag.cancel();
    }

    /// Whether `cancel()` was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.flag.is_cancelled()
    }
}

/// A live-output sink calling `callback(stream, chunk)` with the GIL held,
/// on the thread running the guest. An exception it raises is reported
/// through `sys.unraisablehook` and does not stop the guest.
fn python_sink(callback: Py<PyAny>) -> OutputSink {
    Arc::new(move |stream: OutputStream, bytes: &[u8]| {
        Python::attach(|py| {
            let chunk = PyBytes::new(py, bytes);
            if let Err(error) = callback.call1(py, (stream.as_str(), chunk)) {
                error.write_unraisable(py, None);
            }
        });
    })
}

fn execution_dict<'py>(
    py: Python<'py>,
    execution: &Execution,
    warm: bool,
    state_lost: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("outcome", execution.outcome.as_str())?;
    dict.set_item("exit_code", execution.exit_code)?;
    dict.set_item("stdout", PyBytes::new(py, &execution.stdout))?;
    dict.set_item("stderr", PyBytes::new(py, &execution.stderr))?;
    dict.set_item("stdout_truncated", execution.stdout_truncated)?;
    dict.set_item("stderr_truncated", execution.stderr_truncated)?;
    dict.set_item("files_written", paths(&execution.files_written))?;
    dict.set_item("files_deleted", paths(&execution.files_deleted))?;
    dict.set_item("duration_ms", execution.duration_ms)?;
    dict.set_item("fuel_consumed", execution.fuel_consumed)?;
    dict.set_item("message", execution.message.clone())?;
    dict.set_item("position", execution.position)?;
    dict.set_item("warm", warm)?;
    dict.set_item("state_lost", state_lost)?;
    Ok(dict)
}

/// The engine, shared between threads; `close` drops this handle's
/// reference (calls already running keep theirs until they return).
/// Warm kernels live in this handle's pool, as in `sandlog serve`'s: the
/// same bounds (`KERNELS_MAX`, `KERNEL_MEMORY_TOTAL_MAX`,
/// `KERNEL_IDLE_TIMEOUT`) and the same `kernel.*` events.
#[pyclass(frozen, module = "sandlog._sandlog", name = "Engine")]
struct PyEngine {
    inner: RwLock<Option<Arc<Engine>>>,
    kernels: Arc<KernelPool>,
}

impl PyEngine {
    fn engine(&self) -> Result<Arc<Engine>, Failure> {
        let guard = self
            .inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.clone().ok_or(Failure::Closed)
    }

    fn with<T, F>(&self, py: Python<'_>, work: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Engine) -> Result<T, Failure> + Send,
    {
        let engine = self.engine().map_err(|failure| to_pyerr(py, failure))?;
        run(py, move || work(&engine))
    }
}

#[pymethods]
impl PyEngine {
    /// Creates a root if needed; returns its canonical path.
    #[staticmethod]
    fn init(py: Python<'_>, root: PathBuf) -> PyResult<String> {
        run(py, move || {
            Ok(Engine::init(&root)?.to_string_lossy().into_owned())
        })
    }

    /// Opens an existing root; `correlation_id` (a task id or a UUID) is
    /// recorded on every event this engine appends. With `store` (a
    /// PostgreSQL URL), the root is a node of that shared log; `create`
    /// makes the node's root if it is missing. `node` names the host the
    /// engine acts for (default: the root's `node` file, else the host
    /// name). `prune_batch_sessions` sets the sessions per prune batch
    /// (default: sized by the process's descriptor limit, which this
    /// package never changes).
    #[staticmethod]
    #[pyo3(signature = (root, correlation_id=None, store=None, create=false, node=None, prune_batch_sessions=None))]
    fn open(
        py: Python<'_>,
        root: PathBuf,
        correlation_id: Option<String>,
        store: Option<String>,
        create: bool,
        node: Option<String>,
        prune_batch_sessions: Option<usize>,
    ) -> PyResult<PyEngine> {
        let engine = run(py, move || {
            if prune_batch_sessions == Some(0) {
                return Err(Failure::Invalid(
                    "prune_batch_sessions 0: a prune batch holds at least one session; \
                     leave it None to size batches by the descriptor limit"
                        .to_owned(),
                ));
            }
            let options = EngineOptions {
                actor: "api:python".to_owned(),
                correlation_id: correlation_id
                    .as_deref()
                    .map(sandlog_runtime::core::correlation_id)
                    .transpose()?,
                store,
                create,
                node,
                prune_batch_sessions,
                on_upgrade: Some(upgrade_observer()),
                ..EngineOptions::default()
            };
            Ok(Engine::open(&root, options)?)
        })?;
        Ok(PyEngine {
            inner: RwLock::new(Some(Arc::new(engine))),
            kernels: Arc::new(KernelPool::new(KernelLimits::default())),
        })
    }

    /// Drops this handle's engine, after its warm kernels (each recorded
    /// with `kernel.evicted`).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let engine = {
            let mut guard = self
                .inner
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            guard.take()
        };
        let Some(engine) = engine else {
            return Ok(());
        };
        let kernels = Arc::clone(&self.kernels);
        run(py, move || {
            kernels.shutdown(&engine);
            Ok(())
        })
    }

    /// Drops the session's warm kernel if it has an idle one (its state
    /// is gone; the next warm execution starts afresh), recording
    /// `kernel.evicted` with `reason`. Returns whether there was one.
    fn drop_kernel(&self, py: Python<'_>, session_id: &str, reason: &str) -> PyResult<bool> {
        let kernels = Arc::clone(&self.kernels);
        self.with(py, move |engine| {
            Ok(kernels.drop_session(engine, self::session_id(session_id)?, reason))
        })
    }

    /// Drops kernels idle past `KERNEL_IDLE_TIMEOUT` and those of sessions
    /// no longer active; returns how many.
    fn reap_kernels(&self, py: Python<'_>) -> PyResult<usize> {
        let kernels = Arc::clone(&self.kernels);
        self.with(py, move |engine| Ok(kernels.reap_idle(engine)))
    }

    /// Whether the session has a warm kernel now.
    fn has_kernel(&self, py: Python<'_>, session_id: &str) -> PyResult<bool> {
        let kernels = Arc::clone(&self.kernels);
        self.with(py, move |_| {
            Ok(kernels.has_kernel(self::session_id(session_id)?))
        })
    }

    /// The kernel pool's figures and bounds, as JSON.
    fn kernel_stats(&self, py: Python<'_>) -> PyResult<String> {
        let kernels = Arc::clone(&self.kernels);
        self.with(py, move |_| {
            let limits = kernels.limits();
            json(&serde_json::json!({
                "stats": kernels.stats(),
                "kernels_max": limits.kernels_max,
                "memory_total_max": limits.memory_total_max,
                "idle_timeout_s": limits.idle_timeout.as_secs(),
            }))
        })
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_none()
    }

    /// The root directory.
    fn root(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |engine| {
            Ok(engine.layout().root.to_string_lossy().into_owned())
        })
    }

    /// The node this engine acts for.
    fn node(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |engine| Ok(engine.node().to_owned()))
    }

    /// Whether the root is a node of a shared log.
    fn is_shared(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |engine| Ok(engine.is_shared()))
    }

    /// Copies the shared log's new events into this node's replica;
    /// returns how many (0 without a shared log).
    fn sync(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |engine| Ok(engine.sync()?))
    }

    #[pyo3(signature = (labels, group=None, max_size=None, context=Vec::new(), readonly=Vec::new()))]
    fn create_session(
        &self,
        py: Python<'_>,
        labels: BTreeMap<String, String>,
        group: Option<String>,
        max_size: Option<u64>,
        context: Vec<(String, Vec<u8>)>,
        readonly: Vec<(String, String)>,
    ) -> PyResult<String> {
        self.with(py, move |engine| {
            let context = context
                .into_iter()
                .map(|(path, bytes)| {
                    Ok(sandlog_runtime::ContextFile {
                        path: workspace_path(&path)?,
                        bytes,
                    })
                })
                .collect::<Result<Vec<_>, Failure>>()?;
            let readonly = readonly
                .into_iter()
                .map(
                    |(guest_path, host_path)| sandlog_runtime::sandbox::ReadonlyMount {
                        host_path: std::path::PathBuf::from(host_path),
                        guest_path,
                    },
                )
                .collect();
            let new = sandlog_runtime::NewSession {
                labels,
                group,
                max_size,
                readonly,
                context,
            };
            Ok(engine.create_session_with(new)?.session_id.to_string())
        })
    }

    fn session<'py>(&self, py: Python<'py>, session_id: &str) -> PyResult<Bound<'py, PyDict>> {
        let summary = self.with(py, |engine| {
            Ok(engine.session(self::session_id(session_id)?)?)
        })?;
        session_dict(py, &summary)
    }

    #[pyo3(signature = (group=None))]
    fn sessions<'py>(
        &self,
        py: Python<'py>,
        group: Option<String>,
    ) -> PyResult<Bound<'py, PyList>> {
        let sessions = self.with(py, |engine| Ok(engine.sessions_in(None, group.as_deref())?))?;
        let list = PyList::empty(py);
        for summary in &sessions {
            list.append(session_dict(py, summary)?)?;
        }
        Ok(list)
    }

    /// Runs a trusted native command (not sandboxed) in the session's
    /// workspace and records it: `native.started`, the files it changed,
    /// `native.completed` with its exit. Its output is kept, not shown.
    fn run_native<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        argv: Vec<std::ffi::OsString>,
        timeout: Option<f64>,
        evidence_bytes: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let timeout = seconds(py, timeout)?;
        let run = self.with(py, move |engine| {
            let options = NativeOptions {
                timeout,
                evidence_bytes,
                ..NativeOptions::default()
            };
            Ok(engine.run_native(self::session_id(session_id)?, &argv, &options)?)
        })?;
        let dict = PyDict::new(py);
        dict.set_item("exit_code", run.exit_code)?;
        dict.set_item("signal", run.signal)?;
        dict.set_item("timed_out", run.timed_out)?;
        dict.set_item("stdout", PyBytes::new(py, &run.stdout))?;
        dict.set_item("stderr", PyBytes::new(py, &run.stderr))?;
        dict.set_item("stdout_truncated", run.stdout_truncated)?;
        dict.set_item("stderr_truncated", run.stderr_truncated)?;
        dict.set_item("files_written", paths(&run.files_written))?;
        dict.set_item("files_deleted", paths(&run.files_deleted))?;
        dict.set_item("duration_ms", run.duration_ms)?;
        dict.set_item("started_position", run.started_position)?;
        dict.set_item("position", run.position)?;
        Ok(dict)
    }

    /// Runs code; `warm` in the session's kernel. `cancel` (a
    /// `CancelToken`) stops it when set; `on_output(stream, chunk)` gets
    /// the output as the guest writes it.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (session_id, code, runtime, timeout, fuel, memory, warm=false, cancel=None, on_output=None))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        code: &[u8],
        runtime: &str,
        timeout: Option<f64>,
        fuel: Option<u64>,
        memory: Option<u64>,
        warm: bool,
        cancel: Option<Py<PyCancelToken>>,
        on_output: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let timeout = seconds(py, timeout)?;
        let signals = (cancel.is_some() || on_output.is_some()).then(|| RunSignals {
            cancel: cancel
                .as_ref()
                .map(|token| token.get().flag.clone())
                .unwrap_or_default(),
            on_output: on_output.map(python_sink),
        });
        let kernels = Arc::clone(&self.kernels);
        let (execution, warm, state_lost) = self.with(py, move |engine| {
            let request = ExecRequest {
                runtime: Runtime::parse(runtime),
                code: code.to_vec(),
                limits: LimitOverrides {
                    fuel,
                    timeout,
                    memory_bytes: memory,
                    ..LimitOverrides::default()
                },
            };
            let session_id = self::session_id(session_id)?;
            if warm {
                let run =
                    kernels.execute_signalled(engine, session_id, &request, signals.as_ref())?;
                return Ok((run.execution, run.warm, run.state_lost));
            }
            let execution = match &signals {
                Some(signals) => engine.execute_signalled(session_id, &request, signals)?,
                None => engine.execute(session_id, &request)?,
            };
            Ok((execution, false, None))
        })?;
        execution_dict(py, &execution, warm, state_lost)
    }

    fn list_files(
        &self,
        py: Python<'_>,
        session_id: &str,
        pattern: Option<&str>,
    ) -> PyResult<Vec<(String, u64, String, i64)>> {
        self.with(py, |engine| {
            let files = engine.list_files(self::session_id(session_id)?, pattern)?;
            Ok(files.iter().map(file_tuple).collect())
        })
    }

    fn read_file<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        path: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with(py, |engine| {
            Ok(engine.read_file(self::session_id(session_id)?, &workspace_path(path)?)?)
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn write_file(
        &self,
        py: Python<'_>,
        session_id: &str,
        path: &str,
        data: &[u8],
        overwrite: bool,
    ) -> PyResult<(String, u64, String, i64)> {
        self.with(py, |engine| {
            let file = engine.write_file(
                self::session_id(session_id)?,
                &workspace_path(path)?,
                data,
                overwrite,
            )?;
            Ok(file_tuple(&file))
        })
    }

    fn delete_path(
        &self,
        py: Python<'_>,
        session_id: &str,
        path: &str,
        recursive: bool,
    ) -> PyResult<Vec<String>> {
        self.with(py, |engine| {
            let removed = engine.delete_file(
                self::session_id(session_id)?,
                &workspace_path(path)?,
                recursive,
            )?;
            Ok(removed.iter().map(ToString::to_string).collect())
        })
    }

    fn delete_session(&self, py: Python<'_>, session_id: &str) -> PyResult<u64> {
        self.with(py, |engine| {
            let report = engine.delete_session(self::session_id(session_id)?, "python api")?;
            Ok(report.reclaimed_bytes)
        })
    }

    /// `older_than_us` of `None` selects by the `max_*` bounds only.
    #[allow(clippy::too_many_arguments)]
    fn prune(
        &self,
        py: Python<'_>,
        older_than_us: Option<u64>,
        dry_run: bool,
        max_sessions: Option<u64>,
        max_bytes: Option<u64>,
        max_deletions: Option<u64>,
        group: Option<String>,
    ) -> PyResult<String> {
        let policy = PrunePolicy::new(PruneRequest {
            older_than: older_than_us.map(Duration::from_micros),
            max_deletions,
            max_sessions,
            max_total_bytes: max_bytes,
            group,
        })
        .map_err(|error| to_pyerr(py, Failure::Invalid(error.to_string())))?;
        self.with(py, move |engine| {
            json(&engine.prune(&policy, dry_run, &|_, _| {})?)
        })
    }

    /// One page of the log as JSON texts, and the position to ask from next
    /// (`None` at the end).
    fn log_page(
        &self,
        py: Python<'_>,
        session_id: Option<&str>,
        since_us: Option<i64>,
        from_position: u64,
        limit: usize,
    ) -> PyResult<(Vec<String>, Option<u64>)> {
        self.with(py, move |engine| {
            let limit = limit.clamp(1, LOG_PAGE_EVENTS_MAX);
            let filter = LogFilter {
                stream: session_id
                    .map(self::session_id)
                    .transpose()?
                    .map(StreamId::Session),
                since: since_us.map(Timestamp::from_unix_micros),
                from: Some(Position(from_position.max(1))),
                limit: Some(limit as u64),
                ..LogFilter::default()
            };
            let mut page = Vec::new();
            let mut last = None;
            for envelope in engine.log(filter) {
                let envelope = envelope?;
                last = Some(envelope.position.0);
                page.push(json(&envelope)?);
            }
            let next = if page.len() < limit {
                None
            } else {
                last.map(|position| position.saturating_add(1))
            };
            Ok((page, next))
        })
    }

    fn verify(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |engine| json(&engine.verify(None, &|_| {})?))
    }

    fn metrics_text(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |engine| Ok(engine.metrics_text()))
    }

    fn reconcile(&self, py: Python<'_>, dry_run: bool) -> PyResult<String> {
        self.with(py, move |engine| {
            let options = ReconcileOptions {
                dry_run,
                ..ReconcileOptions::default()
            };
            json(&engine.reconcile(&options, &|_, _| {})?)
        })
    }

    fn hold(&self, py: Python<'_>, session_id: &str, reason: &str) -> PyResult<()> {
        self.with(py, |engine| {
            Ok(engine.hold(self::session_id(session_id)?, reason)?)
        })
    }

    fn release(&self, py: Python<'_>, session_id: &str, reason: Option<&str>) -> PyResult<()> {
        self.with(py, |engine| {
            Ok(engine.release(self::session_id(session_id)?, reason)?)
        })
    }

    fn fork(
        &self,
        py: Python<'_>,
        session_id: &str,
        position: Option<u64>,
        at_us: Option<i64>,
        labels: BTreeMap<String, String>,
    ) -> PyResult<String> {
        self.with(py, move |engine| {
            let cut = cut(engine, position, at_us);
            json(&engine.fork(self::session_id(session_id)?, cut, labels)?)
        })
    }

    fn read_file_at<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        path: &str,
        position: Option<u64>,
        at_us: Option<i64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with(py, |engine| {
            let mut out = Vec::new();
            let cut = cut(engine, position, at_us);
            engine.read_file_at(
                self::session_id(session_id)?,
                &workspace_path(path)?,
                cut,
                &mut out,
            )?;
            Ok(out)
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn execution_records(
        &self,
        py: Python<'_>,
        session_id: &str,
        excerpt: usize,
    ) -> PyResult<String> {
        self.with(py, |engine| {
            json(&engine.execution_records(self::session_id(session_id)?, excerpt)?)
        })
    }

    /// Records changes made in the session's workspace outside sandlog
    /// (`sandlog session sync`); the report as JSON.
    fn sync_session(&self, py: Python<'_>, session_id: &str) -> PyResult<String> {
        self.with(py, |engine| {
            json(&engine.sync_session(self::session_id(session_id)?)?)
        })
    }

    fn adopt(&self, py: Python<'_>, source: PathBuf) -> PyResult<String> {
        self.with(py, move |engine| json(&engine.adopt(&source, &|_, _| {})?))
    }

    /// Signs a checkpoint of the log now with the key file at `key`;
    /// returns the signed note.
    fn sign_checkpoint(&self, py: Python<'_>, key: PathBuf) -> PyResult<String> {
        self.with(py, move |engine| {
            let key = read_signer_key(&key)?;
            Ok(engine.sign_checkpoint(&key)?.note)
        })
    }

    /// Checks that the log extends a signed checkpoint `note` (verifier
    /// key text or file `vkey`); JSON of what was compared.
    fn verify_checkpoint(&self, py: Python<'_>, note: &str, vkey: &str) -> PyResult<String> {
        self.with(py, |engine| {
            let key = read_verifier_key(vkey)?;
            json(&engine.verify_checkpoint(note, &key)?)
        })
    }

    /// One session's offline evidence bundle, as JSON bytes: signed now
    /// with the key file at `key`, else against the newest stored
    /// checkpoint.
    fn export_evidence<'py>(
        &self,
        py: Python<'py>,
        session_id: &str,
        key: Option<PathBuf>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.with(py, move |engine| {
            let key = key.as_deref().map(read_signer_key).transpose()?;
            let bundle = engine.export_bundle(self::session_id(session_id)?, key.as_ref())?;
            json(&bundle)
        })?;
        Ok(PyBytes::new(py, bytes.as_bytes()))
    }
}

/// Writes a new signing key for checkpoints named `name` to `path` (mode
/// 0600, never over an existing file); returns its verifier key, the text
/// to give to auditors.
#[pyfunction]
fn generate_key(py: Python<'_>, name: &str, path: PathBuf) -> PyResult<String> {
    run(py, move || {
        Ok(generate_key_file(name, &path)?.verifier().to_string())
    })
}

/// Verifies an evidence bundle with no database and no engine: the
/// checkpoint's signature by `vkey` (verifier key text or file), every
/// event's hash and inclusion proof, the stream's completeness, every
/// blob's hash. JSON of the report.
#[pyfunction]
fn verify_evidence(py: Python<'_>, bundle: &[u8], vkey: &str) -> PyResult<String> {
    run(py, move || {
        let key = read_verifier_key(vkey)?;
        json(&verify_bundle(bundle, &key)?)
    })
}

/// The native module.
#[pymodule]
fn _sandlog(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyEngine>()?;
    module.add_class::<PyCancelToken>()?;
    module.add_function(wrap_pyfunction!(generate_key, module)?)?;
    module.add_function(wrap_pyfunction!(verify_evidence, module)?)?;
    module.add("LOG_PAGE_EVENTS_MAX", LOG_PAGE_EVENTS_MAX)?;
    // The package's version is the workspace's, as `sandlog --version`.
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
