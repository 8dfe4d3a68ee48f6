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

use std::time::Instant;

use wasmtime::{Store, Trap};
use wasmtime_wasi::I32Exit;

use super::clock::GuestMonotonicClock;
use super::ending::Ending;
use super::error::{boxed, engine_error};
use super::output::CappedOutput;
use super::poll::{INNER_MODULE, POLL_ONEOFF};
use super::quota::{self, Usage};
pub use super::request::Outcome;
use super::request::{RunReport, RunRequest};
use super::signals::{CancelFlag, OutputStream, RunSignals};
use super::store::{Host, Interrupt, install_limits};
use super::wasi::{self, GuestStdio};
use super::{LoadedModule, SandboxError, SandboxInner};

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
    // Until the store is dropped the guest may be waiting in a host call
    // that no epoch check reaches; past the deadline, that wait is ended.
    let watch = sandbox.overdue.watch(host.deadline, request.open_dirs());
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
    drop(watch);

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
