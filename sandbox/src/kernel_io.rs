//! The guest-facing side of a warm kernel's fd 0 ([`KernelIo`], inside
//! its `Host`) and what travels between the kernel's thread and its owner
//! ([`Frame`] in, [`Report`] out). Below `kernel.rs` and the run's host
//! state, which both hold it.

use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Instant;

use wasmtime::TypedFunc;

use super::SandboxError;
use super::ending::Ending;
use super::signals::CancelFlag;

pub(crate) type WasiIoFunc = TypedFunc<(i32, i32, i32, i32), i32>;

/// A frame handed to the guest, with the limits of its execution.
pub(crate) struct Frame {
    pub(crate) input: Vec<u8>,
    pub(crate) fuel: u64,
    pub(crate) deadline: Instant,
    pub(crate) memory_bytes: u64,
    pub(crate) cancel: Option<CancelFlag>,
}

/// What the guest told the host when it next asked for a frame.
#[derive(Debug)]
pub(crate) struct Idle {
    pub(crate) fuel_left: u64,
    pub(crate) status: Option<Vec<u8>>,
    pub(crate) memory_refused: bool,
    pub(crate) memory_bytes: u64,
}

/// What the kernel thread reports.
pub(crate) enum Report {
    /// The guest waits for its next frame.
    Idle(Idle),
    /// `_start` returned, one way or another: the kernel is gone.
    Ended {
        ending: Ending,
        fuel_left: u64,
        memory_bytes: u64,
    },
    /// The kernel could not be set up.
    Failed(SandboxError),
}

/// The guest-facing side of a kernel's fd 0, inside its `Host`.
pub(crate) struct KernelIo {
    pub(crate) frames: Receiver<Frame>,
    pub(crate) reports: SyncSender<Report>,
    pub(crate) pending: Vec<u8>,
    pub(crate) offset: usize,
    pub(crate) status: Option<Vec<u8>>,
    /// Set when the guest wrote a status longer than allowed.
    pub(crate) status_overlong: bool,
    pub(crate) inner_fd_read: Option<WasiIoFunc>,
    pub(crate) inner_fd_write: Option<WasiIoFunc>,
}
