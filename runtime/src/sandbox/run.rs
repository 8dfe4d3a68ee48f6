//! One run: build the guest's world, instantiate, call `_start` under every
//! limit, and classify how it ended into an [`Outcome`].
//!
//! Limit enforcement, in one place:
//! * fuel: `Store::set_fuel`; exhaustion traps with `Trap::OutOfFuel`;
//! * wall clock: the epoch callback (every [`EPOCH_TICK`]) and the sleep
//!   guard trap with [`Interrupt::Timeout`] once the deadline passes;
//! * memory: [`GuestLimiter`] refuses growth past the cap and records it;
//! * output: [`CappedOutput`] keeps the first N bytes of each stream;
//! * workspace: the epoch callback walks it every so often and traps with
//!   [`Interrupt::Quota`]; a final walk after the run is authoritative.
//!
//! [`EPOCH_TICK`]: super::limits::EPOCH_TICK

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

use super::error::boxed;
use super::limits::{ExecLimits, GuestLimiter};
use super::output::CappedOutput;
use super::poll::{GuestMonotonicClock, INNER_MODULE, POLL_ONEOFF, PollOneoff};
use super::quota::{self, QuotaWatch, Usage};
use super::signals::{CancelFlag, OutputStream, RunSignals};
use super::wasi::{self, GuestStdio};
use super::{LoadedModule, SandboxError, SandboxInner};

/// A host directory the guest may read (never write) at `guest_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadonlyMount {
    /// The directory on the host.
    pub host_path: PathBuf,
    /// Where the guest sees it: absolute, normalised, not `/` and not
    /// overlapping `/app` or another mount (for example `/data`).
    pub guest_path: String,
}

/// What to run and under which limits. The module comes separately (see
/// [`Sandbox::run`](super::Sandbox::run)).
#[derive(Debug, Clone)]
pub struct RunRequest<'a> {
    /// Host directory the guest sees as `/app`, read-write. Must exist.
    pub workspace: &'a Path,
    /// The guest's arguments after `argv[0]` (which is the module's file
    /// name).
    pub args: Vec<String>,
    /// The guest's whole stdin.
    pub stdin: Vec<u8>,
    /// The guest's whole environment. The caller whitelists it; the host's
    /// environment is never inherited.
    pub env: Vec<(String, String)>,
    /// Extra host directories the guest may read.
    pub readonly_mounts: Vec<ReadonlyMount>,
    /// The limits of this run.
    pub limits: ExecLimits,
    /// A cancel flag and a live-output sink (`None`: neither).
    pub signals: Option<RunSignals>,
}

impl<'a> RunRequest<'a> {
    /// A request to run in `workspace` with no args, stdin, env or mounts,
    /// under the default limits.
    pub fn new(workspace: &'a Path) -> Self {
        RunRequest {
            workspace,
            args: Vec::new(),
            stdin: Vec::new(),
            env: Vec::new(),
            readonly_mounts: Vec::new(),
            limits: ExecLimits::default(),
            signals: None,
        }
    }
}

/// How a run ended: the log's own [`Outcome`](sandlog_core::Outcome), so
/// the sandbox and the `session.executed` event cannot disagree.
///
/// When several apply, the first in this order wins: `quota` (it outlasts
/// the run: the workspace is over its quota now), `timeout`, `out_of_fuel`,
/// `memory`, `trap`, `error`, `ok`. Output truncation is not an outcome but
/// the report's `stdout_truncated` / `stderr_truncated` flags, so a
/// successful run that printed too much is still `ok`.
pub use sandlog_core::Outcome;

/// Everything known about a finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// How the run ended.
    pub outcome: Outcome,
    /// The guest's exit code, if it exited (0 when `_start` returned);
    /// `None` if it was stopped or trapped.
    pub exit_code: Option<i32>,
    /// Captured stdout, at most `stdout_bytes_max` bytes.
    pub stdout: Vec<u8>,
    /// Captured stderr, at most `stderr_bytes_max` bytes.
    pub stderr: Vec<u8>,
    /// True if stdout had more bytes than the cap (they were dropped).
    pub stdout_truncated: bool,
    /// True if stderr had more bytes than the cap (they were dropped).
    pub stderr_truncated: bool,
    /// Fuel burnt; always metered, whether or not fuel was limited. Exact
    /// when the guest ended by itself or ran out of fuel. For `timeout` and
    /// `quota` it can be low: the epoch check that stops the guest does not
    /// flush wasmtime's fuel counter, which compiled code keeps in a local
    /// between calls, so a tight loop's fuel since its last call is lost.
    pub fuel_consumed: u64,
    /// The largest linear memory the guest was granted.
    pub memory_bytes_peak: u64,
    /// Wall time from the start of the run to the end of the guest.
    pub duration: Duration,
    /// For `trap`, `timeout`, `quota`, `out_of_fuel` and `memory` without an
    /// exit: wasmtime's description of what stopped the guest.
    pub trap_message: Option<String>,
}

/// Why the sandbox itself stopped a guest mid-run (returned as a wasmtime
/// error from the epoch callback or the sleep guard, and recognised again
/// when the call fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Interrupt {
    /// The wall-clock deadline passed.
    #[error("wall-clock timeout: the run exceeded its time limit")]
    Timeout,
    /// The workspace went over its quota.
    #[error("workspace quota exceeded")]
    Quota,
    /// A warm kernel's host side went away while the guest waited for its
    /// next frame: the kernel is being dropped.
    #[error("the kernel was closed by the host")]
    KernelClosed,
    /// The caller cancelled the run (its [`RunSignals`] cancel flag).
    #[error("cancelled by the caller")]
    Cancelled,
}

/// The per-run host state inside the `Store`.
pub(crate) struct Host {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limiter: GuestLimiter,
    /// When the run must end.
    pub(crate) deadline: Instant,
    /// The guest's monotonic clock (for the sleep guard).
    pub(crate) guest_clock: GuestMonotonicClock,
    /// wasmtime-wasi's `poll_oneoff`, which the sleep guard delegates to.
    pub(crate) inner_poll_oneoff: Option<PollOneoff>,
    quota: QuotaWatch,
    /// A warm kernel's side of stdin (`None` for a one-shot run).
    pub(crate) kernel: Option<Box<super::kernel::KernelIo>>,
    /// The caller's cancel flag for the run (a kernel's: the current
    /// frame's), checked with the deadline.
    pub(crate) cancel: Option<CancelFlag>,
}

impl Host {
    /// The host state of a run (or a kernel) started at `started` under
    /// `limits` in `workspace`.
    pub(crate) fn new(
        wasi: WasiP1Ctx,
        limits: &ExecLimits,
        workspace: &Path,
        started: Instant,
        guest_clock: GuestMonotonicClock,
    ) -> Host {
        Host {
            wasi,
            limiter: GuestLimiter::new(limits.memory_bytes),
            deadline: started + limits.timeout,
            guest_clock,
            inner_poll_oneoff: None,
            quota: QuotaWatch::new(
                workspace.to_path_buf(),
                limits.workspace_bytes_max,
                limits.workspace_entries_max,
                started,
            ),
            kernel: None,
            cancel: None,
        }
    }

    /// Whether the caller cancelled the run.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelFlag::is_cancelled)
    }
}

/// Makes `store` enforce its host's limits: the memory limiter, `fuel`,
/// and the deadline and quota checks at every epoch tick.
pub(crate) fn install_limits(store: &mut Store<Host>, fuel: u64) -> Result<(), SandboxError> {
    store.limiter(|host| &mut host.limiter);
    store.set_fuel(fuel).map_err(engine_error)?;
    // Check the deadline (and maybe the quota) at every tick.
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut context| {
        let host = context.data_mut();
        let now = Instant::now();
        if now >= host.deadline {
            return Err(Interrupt::Timeout.into());
        }
        if host.cancelled() {
            return Err(Interrupt::Cancelled.into());
        }
        if host.quota.check_if_due(now) {
            return Err(Interrupt::Quota.into());
        }
        Ok(UpdateDeadline::Continue(1))
    });
    Ok(())
}

/// Runs `module` per `request`. See [`Sandbox::run`](super::Sandbox::run).
pub(crate) fn run(
    sandbox: &SandboxInner,
    module: &LoadedModule,
    mut request: RunRequest<'_>,
) -> Result<RunReport, SandboxError> {
    request.limits.validate()?;
    wasi::validate_request(&request)?;
    if !wasmtime::Engine::same(&sandbox.engine, module.instance_pre().module().engine()) {
        return Err(SandboxError::ForeignModule);
    }
    let limits = request.limits.clone();
    let started = Instant::now();

    let stdout = CappedOutput::new(limits.stdout_bytes_max);
    let stderr = CappedOutput::new(limits.stderr_bytes_max);
    let guest_clock = GuestMonotonicClock::new(started);
    let stdio = GuestStdio {
        stdout: stdout.clone(),
        stderr: stderr.clone(),
        clock: guest_clock,
    };
    let wasi = wasi::build_context(module.argv0(), &mut request, stdio)?;
    let cancel = attach_signals(request.signals.as_ref(), &stdout, &stderr);

    let mut host = Host::new(wasi, &limits, request.workspace, started, guest_clock);
    host.cancel = cancel;
    let mut store = Store::new(&sandbox.engine, host);
    let fuel_initial = limits.fuel.unwrap_or(u64::MAX);
    install_limits(&mut store, fuel_initial)?;
    let call_result = match module.instance_pre().instantiate(&mut store) {
        Ok(instance) => {
            link_sleep_guard(sandbox, &mut store, &instance)?;
            instance
                .get_typed_func::<(), ()>(&mut store, "_start")
                .map_err(|_| SandboxError::NotACommand {
                    path: module.path().to_path_buf(),
                })?
                .call(&mut store, ())
        }
        // The module's initial memory is over the limit: a limit hit.
        Err(_) if store.data().limiter.memory_refused() => Err(wasmtime::format_err!(
            "initial linear memory exceeds the memory limit"
        )),
        Err(error) => {
            return Err(SandboxError::Instantiate {
                source: boxed(error),
            });
        }
    };
    let duration = started.elapsed();
    let fuel_consumed = fuel_initial.saturating_sub(store.get_fuel().unwrap_or(0));
    let memory_refused = store.data().limiter.memory_refused();
    let memory_bytes_peak = store.data().limiter.memory_bytes_peak();
    // Release the instance (its pooling slot) and the guest's open files
    // before measuring the workspace.
    drop(store);

    let ending = classify(call_result, memory_refused);
    let ending = match quota::measure(
        request.workspace,
        limits.workspace_bytes_max,
        limits.workspace_entries_max,
    ) {
        Ok(Usage::Exceeded) if ending.outcome != Outcome::Quota => Ending {
            outcome: Outcome::Quota,
            trap_message: Some(Interrupt::Quota.to_string()),
            ..ending
        },
        Ok(_) => ending,
        Err(source) => {
            return Err(SandboxError::Measure {
                path: request.workspace.to_path_buf(),
                source,
            });
        }
    };

    tracing::debug!(
        module = %module.path().display(),
        workspace = %request.workspace.display(),
        outcome = ending.outcome.as_str(),
        exit_code = ?ending.exit_code,
        fuel_consumed,
        duration_ms = duration.as_millis(),
        "sandbox run finished"
    );
    let (stdout, stdout_truncated) = stdout.take();
    let (stderr, stderr_truncated) = stderr.take();
    Ok(RunReport {
        outcome: ending.outcome,
        exit_code: ending.exit_code,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        fuel_consumed,
        memory_bytes_peak,
        duration,
        trap_message: ending.trap_message,
    })
}

/// Points the captures at the signals' sink (or at none) and returns the
/// cancel flag for the host.
pub(crate) fn attach_signals(
    signals: Option<&RunSignals>,
    stdout: &CappedOutput,
    stderr: &CappedOutput,
) -> Option<CancelFlag> {
    let sink = signals.and_then(|signals| signals.on_output.clone());
    stdout.set_sink(sink.clone().map(|sink| (OutputStream::Stdout, sink)));
    stderr.set_sink(sink.map(|sink| (OutputStream::Stderr, sink)));
    signals.map(|signals| signals.cancel.clone())
}

/// Instantiates the sleep guard's trampoline over the guest's memory and
/// hands the guard its way to wasmtime-wasi's `poll_oneoff` (see
/// `poll.rs`). A guest without a `memory` export gets no trampoline; it
/// cannot make WASI calls that touch memory anyway.
fn link_sleep_guard(
    sandbox: &SandboxInner,
    store: &mut Store<Host>,
    instance: &wasmtime::Instance,
) -> Result<(), SandboxError> {
    let Some(memory) = instance.get_memory(&mut *store, "memory") else {
        return Ok(());
    };
    let inner = sandbox
        .linker
        .get(&mut *store, INNER_MODULE, POLL_ONEOFF)
        .map_err(engine_error)?;
    let trampoline =
        wasmtime::Instance::new(&mut *store, &sandbox.trampoline, &[memory.into(), inner])
            .map_err(|error| SandboxError::Instantiate {
                source: boxed(error),
            })?;
    let forward = trampoline
        .get_typed_func(&mut *store, POLL_ONEOFF)
        .map_err(engine_error)?;
    store.data_mut().inner_poll_oneoff = Some(forward);
    Ok(())
}

pub(crate) fn engine_error(error: wasmtime::Error) -> SandboxError {
    SandboxError::Engine {
        source: boxed(error),
    }
}

/// The outcome-related part of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    pub(crate) outcome: Outcome,
    pub(crate) exit_code: Option<i32>,
    pub(crate) trap_message: Option<String>,
}

/// Maps how `_start` returned (and whether memory growth was refused) to an
/// outcome. Pure, so every branch is unit-tested.
pub(crate) fn classify(call_result: wasmtime::Result<()>, memory_refused: bool) -> Ending {
    let error = match call_result {
        Ok(()) => {
            return Ending {
                outcome: Outcome::Ok,
                exit_code: Some(0),
                trap_message: None,
            };
        }
        Err(error) => error,
    };
    if let Some(I32Exit(code)) = error.downcast_ref::<I32Exit>() {
        let outcome = match (*code, memory_refused) {
            (0, _) => Outcome::Ok,
            (_, true) => Outcome::Memory,
            (_, false) => Outcome::Error,
        };
        return Ending {
            outcome,
            exit_code: Some(*code),
            trap_message: None,
        };
    }
    let outcome = if let Some(interrupt) = error.downcast_ref::<Interrupt>() {
        match interrupt {
            Interrupt::Timeout => Outcome::Timeout,
            Interrupt::Quota => Outcome::Quota,
            Interrupt::KernelClosed => Outcome::Trap,
            Interrupt::Cancelled => Outcome::Cancelled,
        }
    } else {
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => Outcome::OutOfFuel,
            // Not produced while the epoch callback is installed, but it is
            // what an epoch interruption means.
            Some(Trap::Interrupt) => Outcome::Timeout,
            _ if memory_refused => Outcome::Memory,
            // Any other trap, and host errors raised inside a WASI call.
            _ => Outcome::Trap,
        }
    };
    Ending {
        outcome,
        exit_code: None,
        trap_message: Some(format!("{error:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: each way `_start` can end maps to the documented outcome.
    /// Method: feed `classify` synthetic results.
    #[test]
    fn classify_maps_every_ending() {
        let ok = classify(Ok(()), false);
        assert_eq!((ok.outcome, ok.exit_code), (Outcome::Ok, Some(0)));

        let exit0 = classify(Err(I32Exit(0).into()), true);
        assert_eq!((exit0.outcome, exit0.exit_code), (Outcome::Ok, Some(0)));

        let exit3 = classify(Err(I32Exit(3).into()), false);
        assert_eq!((exit3.outcome, exit3.exit_code), (Outcome::Error, Some(3)));

        let memory = classify(Err(I32Exit(1).into()), true);
        assert_eq!(
            (memory.outcome, memory.exit_code),
            (Outcome::Memory, Some(1))
        );

        assert_eq!(
            classify(Err(Trap::OutOfFuel.into()), false).outcome,
            Outcome::OutOfFuel
        );
        assert_eq!(
            classify(Err(Trap::UnreachableCodeReached.into()), false).outcome,
            Outcome::Trap
        );
        assert_eq!(
            classify(Err(Trap::UnreachableCodeReached.into()), true).outcome,
            Outcome::Memory
        );
        assert_eq!(
            classify(Err(Interrupt::Timeout.into()), false).outcome,
            Outcome::Timeout
        );
        assert_eq!(
            classify(Err(Interrupt::Quota.into()), true).outcome,
            Outcome::Quota
        );
        assert_eq!(
            classify(Err(Interrupt::Cancelled.into()), false).outcome,
            Outcome::Cancelled
        );
    }

    /// Goal: outcomes serialise to the names the event log uses.
    /// Method: serialise each with serde_json and compare with `as_str`.
    #[test]
    fn outcome_names_are_snake_case() {
        for outcome in [
            Outcome::Ok,
            Outcome::Error,
            Outcome::OutOfFuel,
            Outcome::Timeout,
            Outcome::Memory,
            Outcome::Quota,
            Outcome::Trap,
            Outcome::Cancelled,
        ] {
            assert_eq!(
                serde_json::to_string(&outcome).unwrap(),
                format!("\"{}\"", outcome.as_str())
            );
        }
    }
}
