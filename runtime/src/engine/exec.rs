//! Executions: which guest runs (a [`Runtime`]), the request and its
//! limits, and [`Engine::execute`], which runs the guest in a session's
//! workspace and records what it did (`session.executed` and the file
//! changes found after the run, in one append).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandlog_core::event::{Event, ExecutionLimit, ExecutionScan, RecordedLimits, SessionExecuted};
use sandlog_core::{Hash, Outcome, SessionId, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use serde::Serialize;

use crate::engine::{CODE_BYTES_MAX, Engine};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::runtimes::{self, RuntimesSource};
use sandlog_host::workspace::{ScanLimits, Workspace};
use sandlog_sandbox::limits::SCAN_TIME_MIN;
use sandlog_sandbox::{
    self as sandbox, ExecLimits, LoadedModule, ModuleOrigin, RunReport, RunRequest, RunSignals,
    Sandbox, SandboxError,
};

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

/// The guest modules an operator offers to clients by name (`serve
/// --module NAME=PATH.wasm`), beside the built-in `python` and
/// `javascript`. Clients of a server choose among these names only.
pub type RegisteredModules = std::collections::BTreeMap<String, PathBuf>;

/// How much of an unknown runtime name an error repeats.
const RUNTIME_NAME_SHOWN_MAX: usize = 64;

impl Runtime {
    /// The runtime a remote client named: `python` (or `py`),
    /// `javascript` (or `js`), or a module the operator registered. Never
    /// a path: anything else is [`RuntimeError::UnknownRuntime`].
    pub fn named(name: &str, modules: &RegisteredModules) -> Result<Runtime> {
        match name {
            "python" | "py" => Ok(Runtime::Python),
            "javascript" | "js" => Ok(Runtime::JavaScript),
            other => match modules.get(other) {
                Some(path) => Ok(Runtime::Module(path.clone())),
                None => {
                    let mut known = vec!["python".to_owned(), "javascript".to_owned()];
                    known.extend(modules.keys().cloned());
                    Err(RuntimeError::UnknownRuntime {
                        name: other.chars().take(RUNTIME_NAME_SHOWN_MAX).collect(),
                        known: known.join(", "),
                    })
                }
            },
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

/// Per-call limit overrides: what a front end translates its request
/// into (the CLI's `--timeout 2s`, HTTP's and MCP's `timeout_ms`, Python's
/// seconds). [`LimitOverrides::apply`] is the one place they are merged
/// with the engine's limits and checked, before any work starts.
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
    /// How long to wait for another writer of the session to finish
    /// before failing with `busy`; else the engine's `session_wait`.
    pub wait: Option<Duration>,
}

impl LimitOverrides {
    /// The engine's `base` limits with these overrides applied, checked
    /// against the sandbox's bounds ([`ExecLimits::validate`]): a value out
    /// of range is refused here, naming the limit and its range, whatever
    /// front end the request came through.
    pub fn apply(&self, base: &ExecLimits) -> std::result::Result<ExecLimits, SandboxError> {
        let mut limits = base.clone();
        if let Some(fuel) = self.fuel {
            limits.fuel = Some(fuel);
        }
        if let Some(timeout) = self.timeout {
            limits.timeout = timeout;
        }
        if let Some(memory) = self.memory_bytes {
            limits.memory_bytes = memory;
        }
        if let Some(output) = self.output_bytes {
            limits.stdout_bytes_max = output;
            limits.stderr_bytes_max = output;
        }
        if let Some(workspace) = self.workspace_bytes {
            limits.workspace_bytes_max = workspace;
        }
        limits.validate()?;
        Ok(limits)
    }
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

impl Engine {
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
        let (_, path) = self.find_runtime(runtime)?;
        let started = Instant::now();
        let module = self.sandbox()?.load(&path)?;
        Ok(PreparedRuntime {
            path,
            origin: module.origin(),
            elapsed: started.elapsed(),
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

    /// [`Engine::execute`] with `signals`: the caller may cancel the run
    /// (it is recorded with outcome `cancelled`) and sees its output as
    /// the guest writes it (exactly the bytes recorded).
    ///
    /// # Errors
    ///
    /// As [`Engine::execute`].
    pub fn execute_signalled(
        &self,
        session_id: SessionId,
        request: &ExecRequest,
        signals: &RunSignals,
    ) -> Result<Execution> {
        self.execute_with(session_id, request, |mut run| {
            run.request.signals = Some(signals.clone());
            Ok((run.sandbox.run(run.module, run.request)?, None))
        })
    }

    /// [`Engine::execute`] with the run itself left to `run`: the checks,
    /// the session lock, the lease, the scans, the recording and the
    /// evidence are the same for every way of running the guest (one-shot
    /// here, a warm kernel in [`crate::kernel`]). `run` gets the one-shot
    /// request and returns the report, and whether the guest ran in a warm
    /// kernel (`None`: one-shot), which `session.executed` records.
    ///
    /// Runs in a span of its own under the `sandlog::otel` target (the
    /// session, the correlation id, the outcome and the positions of the
    /// events appended), which a front end may export as a trace.
    pub(crate) fn execute_with(
        &self,
        session_id: SessionId,
        request: &ExecRequest,
        run: impl FnOnce(RunContext<'_>) -> Result<(RunReport, Option<bool>)>,
    ) -> Result<Execution> {
        let span = tracing::info_span!(
            target: "sandlog::otel",
            "execute",
            sandlog.session_id = %session_id,
            sandlog.correlation_id = tracing::field::Empty,
            sandlog.runtime = %request.runtime.name(),
            sandlog.outcome = tracing::field::Empty,
            sandlog.position.first = tracing::field::Empty,
            sandlog.position.last = tracing::field::Empty,
            sandlog.error = tracing::field::Empty,
        );
        if span.is_disabled() {
            return self.execute_recorded(session_id, request, run);
        }
        if let Some(correlation) = self.options.correlation_id {
            span.record(
                "sandlog.correlation_id",
                tracing::field::display(correlation),
            );
        }
        let _entered = span.enter();
        let result = self.execute_recorded(session_id, request, run);
        match &result {
            Ok(execution) => {
                span.record("sandlog.outcome", execution.outcome.as_str());
            }
            Err(error) => {
                span.record("sandlog.error", error.kind());
            }
        }
        result
    }

    fn execute_recorded(
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
        // Held from before the guest starts until its record commits: the
        // workspace is never removed under the guest, and the session's
        // other writers (in any process) wait their turn, so the scan
        // after the run sees only what this guest did.
        // The request's limits are checked before anything waits or runs.
        let mut limits = request.limits.apply(&self.options.limits)?;
        let queued = Instant::now();
        let (_hold, session) = self.hold_for_writing(
            session_id,
            request.limits.wait.unwrap_or_else(|| self.session_wait()),
        )?;
        self.metrics.queue_wait(queued.elapsed());
        let (module, args, stdin) = self.prepare(request)?;
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
        // (see `crate::engine::scan`), and an execution is recorded whatever the
        // guest left behind.
        let scan_started = Instant::now();
        let deadline = scan_started + limits.timeout.max(SCAN_TIME_MIN);
        let after = workspace.scan_bounded(&ScanLimits {
            deadline: Some(deadline),
            ..scan_limits
        })?;
        let changes = crate::engine::scan::changes(
            &workspace,
            &session.files,
            &before,
            &after,
            &crate::engine::scan::Bounds {
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
            let events = self.caused_by(
                self.event(&Event::SessionExecuted(executed)),
                &kept,
                &deleted,
            );
            Ok(write.append(
                session_id.stream(),
                ExpectedVersion::Exact(version),
                &events,
            )?)
        })?;
        let position = envelopes.first().map_or(0, |envelope| envelope.position.0);
        // As signed integers: OpenTelemetry's integer attributes are i64.
        let signed = |position: u64| i64::try_from(position).unwrap_or(i64::MAX);
        let span = tracing::Span::current();
        span.record("sandlog.position.first", signed(position));
        span.record(
            "sandlog.position.last",
            signed(envelopes.last().map_or(0, |envelope| envelope.position.0)),
        );
        self.metrics
            .execution(&request.runtime, outcome, report.duration);
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

    /// The directories a runtime is looked up in: only
    /// [`EngineOptions::runtimes_dir`](crate::EngineOptions::runtimes_dir)
    /// when given, else [`runtimes::runtimes_dirs`] of this root.
    pub fn runtimes_dirs(&self) -> Vec<(RuntimesSource, PathBuf)> {
        match &self.options.runtimes_dir {
            Some(dir) => vec![(RuntimesSource::Option, dir.clone())],
            None => runtimes::runtimes_dirs(&self.layout.root),
        }
    }

    /// Where a runtime's module is, and where that place came from
    /// ([`RuntimesSource::Option`] for a module given by path).
    ///
    /// # Errors
    ///
    /// [`RuntimeError::RuntimeMissing`], naming every place looked in.
    pub fn find_runtime(&self, runtime: &Runtime) -> Result<(RuntimesSource, PathBuf)> {
        let file = match runtime {
            Runtime::Python => "python.wasm",
            Runtime::JavaScript => "quickjs.wasm",
            Runtime::Module(path) => {
                if path.is_file() {
                    return Ok((RuntimesSource::Option, path.clone()));
                }
                return Err(RuntimeError::RuntimeMissing {
                    name: runtime.name(),
                    searched: path.display().to_string(),
                });
            }
        };
        let dirs = self.runtimes_dirs();
        runtimes::find_in(&dirs, file).ok_or_else(|| RuntimeError::RuntimeMissing {
            name: runtime.name(),
            searched: dirs
                .iter()
                .map(|(_, dir)| dir.join(file).display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
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
        let (_, path) = self.find_runtime(&request.runtime)?;
        let module = self.sandbox()?.load(&path)?;
        Ok((module, args, stdin))
    }
}
