//! The engine's side of reclaiming `trash/` (see [`crate::trash`]): the
//! background pass, waiting for it, and recording each pass as
//! `workspace.reclaimed`.

use std::sync::Arc;
use std::thread::JoinHandle;

use sandlog_core::StreamId;
use sandlog_core::event::{Event, WorkspaceReclaimed};
use sandlog_eventstore::ExpectedVersion;

use crate::engine::Engine;
use crate::error::Result;
use crate::trash::{Reclaimed, has_trash, lock, reclaim_pass};

impl Engine {
    /// Frees the bytes of pruned workspaces waiting in `trash/`, now: the
    /// background pass is waited for, then one more pass runs here. Each
    /// pass that removed or failed to remove something is recorded as
    /// `workspace.reclaimed`. Returns what both freed.
    pub fn reclaim_trash(&self) -> Result<Reclaimed> {
        self.require_writable()?;
        let mut total = self.settle_reclaim(true);
        let pass = reclaim_pass(&self.layout, self.options.fault.as_ref())?;
        self.record_reclaimed(pass);
        total.add(pass);
        Ok(total)
    }

    /// Starts the background pass over `trash/`, or, if it runs, makes it
    /// pass once more (it may have listed `trash/` before the last moves).
    pub(crate) fn reclaim_in_background(&self) {
        let mut thread = lock(&self.reclaimer.thread);
        {
            let mut flags = lock(&self.reclaimer.flags);
            if flags.running {
                flags.again = true;
                return;
            }
            flags.running = true;
        }
        if let Some(finished) = thread.take() {
            self.record_joined(finished);
        }
        let layout = self.layout.clone();
        let fault = self.options.fault.clone();
        let flags = Arc::clone(&self.reclaimer.flags);
        let spawned = std::thread::Builder::new()
            .name("sandlog-reclaim".to_owned())
            .spawn(move || {
                let mut total = Reclaimed::default();
                loop {
                    match reclaim_pass(&layout, fault.as_ref()) {
                        Ok(pass) => total.add(pass),
                        Err(error) => {
                            tracing::warn!(target: "sandlog::trash", %error, "reclaiming trash failed; `reconcile` retries");
                        }
                    }
                    let mut flags = lock(&flags);
                    if flags.again {
                        flags.again = false;
                    } else {
                        flags.running = false;
                        return total;
                    }
                }
            });
        match spawned {
            Ok(handle) => *thread = Some(handle),
            Err(error) => {
                lock(&self.reclaimer.flags).running = false;
                tracing::warn!(target: "sandlog::trash", %error, "starting the reclaim thread failed; the trash waits for `reconcile`");
            }
        }
    }

    /// Records what the background pass freed once it has ended (`wait`:
    /// waiting for it); returns that.
    pub(crate) fn settle_reclaim(&self, wait: bool) -> Reclaimed {
        let mut thread = lock(&self.reclaimer.thread);
        let finished = thread.as_ref().is_some_and(JoinHandle::is_finished);
        if !(wait || finished) {
            return Reclaimed::default();
        }
        match thread.take() {
            Some(handle) => self.record_joined(handle),
            None => Reclaimed::default(),
        }
    }

    /// Starts a background pass if `trash/` holds something (on open: what
    /// a crash or an earlier process left).
    pub(crate) fn reclaim_leftovers(&self) {
        if has_trash(&self.layout) {
            self.reclaim_in_background();
        }
    }

    fn record_joined(&self, handle: JoinHandle<Reclaimed>) -> Reclaimed {
        match handle.join() {
            Ok(reclaimed) => {
                self.record_reclaimed(reclaimed);
                reclaimed
            }
            Err(_) => {
                tracing::error!(target: "sandlog::trash", "the reclaim thread panicked; `reconcile` finishes the trash");
                Reclaimed::default()
            }
        }
    }

    /// Appends `workspace.reclaimed` unless the pass did nothing. A
    /// failure to record is logged: the bytes are freed either way.
    fn record_reclaimed(&self, reclaimed: Reclaimed) {
        if reclaimed.is_empty() {
            return;
        }
        tracing::info!(target: "sandlog::trash", event = "workspace.reclaimed", workspaces = reclaimed.workspaces, bytes = reclaimed.bytes, failed = reclaimed.failed, "reclaimed pruned workspaces");
        let mut event = self.event(&Event::WorkspaceReclaimed(WorkspaceReclaimed {
            workspaces: reclaimed.workspaces,
            bytes: reclaimed.bytes,
            failed: reclaimed.failed,
        }));
        event.actor = "applier".to_owned();
        if let Err(error) = self.append_log(StreamId::System, ExpectedVersion::Any, &[event]) {
            tracing::error!(target: "sandlog::trash", %error, "recording a reclaim failed");
        }
    }
}

impl Drop for Engine {
    /// Waits for the background reclaim and records it: a process that
    /// ends normally leaves no trash behind it.
    fn drop(&mut self) {
        self.settle_reclaim(true);
    }
}
