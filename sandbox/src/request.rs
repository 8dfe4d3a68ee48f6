//! What a run is asked to do ([`RunRequest`], [`ReadonlyMount`]) and what
//! it reports ([`RunReport`], [`Outcome`]): plain data, below every file
//! that runs a guest.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::limits::ExecLimits;
use super::signals::RunSignals;

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

    /// Every host directory the guest can open files under.
    pub(crate) fn open_dirs(&self) -> std::sync::Arc<[std::path::PathBuf]> {
        std::iter::once(self.workspace.to_path_buf())
            .chain(
                self.readonly_mounts
                    .iter()
                    .map(|mount| mount.host_path.clone()),
            )
            .collect()
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
