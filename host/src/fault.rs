//! The fault-injection hook of destructive steps, set through
//! `sandlog_runtime::EngineOptions::fault`: for tests and chaos drills only.
//! Below the engine and the lifecycle code that calls it, so neither
//! depends on the other for it.

use std::path::Path;
use std::sync::Arc;

use sandlog_core::SessionId;

/// Injects failures into destructive steps: for tests and chaos drills
/// (the seed scenario "permission denied on one session" cannot be staged
/// with `chmod` when the tests run as root).
pub trait FaultInjector: Send + Sync + std::fmt::Debug {
    /// Called just before a workspace directory is removed; an error is
    /// treated as the removal's own error.
    fn before_remove(&self, session_id: SessionId, path: &Path) -> std::io::Result<()>;

    /// Called just before a directory in `trash/` (a pruned workspace) is
    /// removed; an error leaves it there, as a failed removal does.
    fn before_reclaim(&self, _path: &Path) -> std::io::Result<()> {
        Ok(())
    }
}

/// Shares a fault injector.
pub type SharedFaultInjector = Arc<dyn FaultInjector>;
