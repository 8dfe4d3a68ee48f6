//! The per-run host state inside a wasmtime `Store` ([`Host`]), why the
//! sandbox stops a guest ([`Interrupt`]), and [`install_limits`], which
//! makes a store enforce them. Below `run.rs`, `kernel.rs` and the sleep
//! guard, which all hold a `Store<Host>`.

use std::path::Path;
use std::time::Instant;

use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::p1::WasiP1Ctx;

use super::SandboxError;
use super::clock::{GuestMonotonicClock, PollOneoff};
use super::error::engine_error;
use super::kernel_io::KernelIo;
use super::limits::{ExecLimits, GuestLimiter};
use super::quota::QuotaWatch;
use super::signals::CancelFlag;

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
    /// The caller cancelled the run (its `RunSignals` cancel flag).
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
    pub(crate) kernel: Option<Box<KernelIo>>,
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
