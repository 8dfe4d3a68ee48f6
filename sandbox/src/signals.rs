//! What a caller may do to a run while it is going: cancel it, and see its
//! output as the guest writes it.
//!
//! A [`RunSignals`] rides along a [`RunRequest`](super::RunRequest) (or a
//! warm kernel's frame). The epoch callback and the sleep guard check its
//! cancel flag as they check the deadline, so a cancelled guest stops
//! within one [`EPOCH_TICK`](super::limits::EPOCH_TICK) of running code
//! (a guest asleep stops when its sleep ends) and the run ends as
//! `cancelled`. Its output sink receives exactly the bytes the capture
//! keeps, in the order the guest wrote them, so what was streamed is what
//! the record holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Which of the guest's output streams a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// fd 1.
    Stdout,
    /// fd 2.
    Stderr,
}

impl OutputStream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Receives output chunks on the thread running the guest, while it runs;
/// it must not block for long (the guest waits for it).
pub type OutputSink = Arc<dyn Fn(OutputStream, &[u8]) + Send + Sync>;

/// A flag that stops a run when set. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// A flag not set.
    pub fn new() -> CancelFlag {
        CancelFlag::default()
    }

    /// Asks the run to stop. Idempotent.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the run was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A run's cancel flag and output sink.
#[derive(Clone, Default)]
pub struct RunSignals {
    /// Set to stop the run; it ends as `cancelled`.
    pub cancel: CancelFlag,
    /// Gets each chunk of kept output as the guest writes it.
    pub on_output: Option<OutputSink>,
}

impl std::fmt::Debug for RunSignals {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunSignals")
            .field("cancel", &self.cancel)
            .field("on_output", &self.on_output.is_some())
            .finish()
    }
}

impl RunSignals {
    /// Signals with `cancel` and no sink.
    pub fn with_cancel(cancel: CancelFlag) -> RunSignals {
        RunSignals {
            cancel,
            on_output: None,
        }
    }
}
