//! The epoch ticker: one background thread per `Sandbox` that advances the
//! engine's epoch every [`EPOCH_TICK`], which is what lets a running guest
//! notice its wall-clock deadline.
//!
//! One thread for all runs, rather than a timer per run: epoch checks are
//! compiled into the guest's code and only compare a counter, so a single
//! shared counter serves every concurrent run. The thread stops when the
//! `EpochTicker` is dropped (with its `Sandbox`).

use std::io;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};

use wasmtime::Engine;

use super::limits::EPOCH_TICK;

/// Owns the ticker thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct EpochTicker {
    /// Dropping the sender wakes the thread at once (its `recv_timeout`
    /// sees a disconnect), so shutdown never waits a full tick.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Starts ticking `engine`'s epoch.
    ///
    /// # Errors
    ///
    /// The OS error if the thread cannot be spawned.
    pub(crate) fn start(engine: Engine) -> io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("sandlog-epoch-ticker".to_owned())
            .spawn(move || {
                // A message or a disconnect (the `EpochTicker` was dropped)
                // both end the loop; only a timeout means "tick".
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EPOCH_TICK) {
                    engine.increment_epoch();
                }
            })?;
        Ok(EpochTicker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The thread cannot panic (it only increments a counter), and a
            // failed join on drop has nobody to report to.
            let _ = thread.join();
        }
    }
}
