//! How the servers run an execution. The HTTP API and the MCP server call
//! an [`Executor`]; [`ColdExecutor`] runs each in a fresh instance through
//! `Engine::execute`; [`WarmExecutor`] keeps a CPython kernel alive per
//! session ([`KernelPool`]), so variables and imports persist.

use sandlog_runtime::core::SessionId;

use crate::limits::UPKEEP_INTERVAL;
use sandlog_runtime::sandbox::RunSignals;
use sandlog_runtime::{Engine, ExecRequest, Execution, KernelLimits, KernelPool, RuntimeError};

/// One execution's result as the servers report it.
#[derive(Debug)]
pub struct ExecOutcome {
    /// The recorded execution.
    pub execution: Execution,
    /// Whether it ran in an interpreter kept alive from an earlier
    /// execution of the session.
    pub warm: bool,
    /// Whether the session's interpreter state (variables, imports) from
    /// earlier executions was lost before this one.
    pub state_lost: bool,
    /// Why it was lost (a limit, a trap, an eviction), when it was.
    pub state_lost_reason: Option<String>,
}

/// Runs code in a session and records it. Called on a blocking thread.
pub trait Executor: Send + Sync {
    /// Runs `request` in `session_id`; the execution is recorded (its
    /// `session.executed` event appended) before this returns `Ok`.
    fn execute(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
    ) -> Result<ExecOutcome, RuntimeError>;

    /// [`Executor::execute`] with a cancel flag and a live-output sink
    /// (streamed responses, MCP progress notifications).
    fn execute_signalled(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
        signals: &RunSignals,
    ) -> Result<ExecOutcome, RuntimeError>;

    /// The session is about to be deleted: whatever the executor keeps for
    /// it goes first.
    fn session_ending(&self, _engine: &Engine, _session_id: SessionId) {}

    /// Periodic upkeep (idle kernels reaped); returns what it dropped.
    fn maintain(&self, _engine: &Engine) -> usize {
        0
    }

    /// The server is stopping: everything kept is dropped, and recorded.
    fn shutdown(&self, _engine: &Engine) {}

    /// The warm kernels' figures, for `/metrics` (`None`: no kernels).
    fn kernel_stats(&self) -> Option<sandlog_runtime::KernelStats> {
        None
    }
}

/// Every execution in a fresh interpreter: `warm` is always false, and
/// nothing carries over, so no state is ever "lost".
#[derive(Debug, Default, Clone, Copy)]
pub struct ColdExecutor;

impl Executor for ColdExecutor {
    fn execute(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
    ) -> Result<ExecOutcome, RuntimeError> {
        Ok(ExecOutcome {
            execution: engine.execute(session_id, request)?,
            warm: false,
            state_lost: false,
            state_lost_reason: None,
        })
    }

    fn execute_signalled(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
        signals: &RunSignals,
    ) -> Result<ExecOutcome, RuntimeError> {
        Ok(ExecOutcome {
            execution: engine.execute_signalled(session_id, request, signals)?,
            warm: false,
            state_lost: false,
            state_lost_reason: None,
        })
    }
}

/// Python executions in a warm kernel per session, within the pool's
/// bounds (count, total memory, idle timeout); other runtimes one-shot.
#[derive(Debug)]
pub struct WarmExecutor {
    pool: KernelPool,
}

impl WarmExecutor {
    /// A pool with `limits`.
    pub fn new(limits: KernelLimits) -> WarmExecutor {
        WarmExecutor {
            pool: KernelPool::new(limits),
        }
    }

    /// The pool.
    pub fn pool(&self) -> &KernelPool {
        &self.pool
    }
}

impl Executor for WarmExecutor {
    fn execute(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
    ) -> Result<ExecOutcome, RuntimeError> {
        let run = self.pool.execute(engine, session_id, request)?;
        Ok(ExecOutcome {
            execution: run.execution,
            warm: run.warm,
            state_lost: run.state_lost.is_some(),
            state_lost_reason: run.state_lost,
        })
    }

    fn execute_signalled(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
        signals: &RunSignals,
    ) -> Result<ExecOutcome, RuntimeError> {
        let run = self
            .pool
            .execute_signalled(engine, session_id, request, Some(signals))?;
        Ok(ExecOutcome {
            execution: run.execution,
            warm: run.warm,
            state_lost: run.state_lost.is_some(),
            state_lost_reason: run.state_lost,
        })
    }

    fn session_ending(&self, engine: &Engine, session_id: SessionId) {
        self.pool
            .drop_session(engine, session_id, "the session is being deleted");
    }

    fn maintain(&self, engine: &Engine) -> usize {
        self.pool.reap_idle(engine)
    }

    fn shutdown(&self, engine: &Engine) {
        self.pool.shutdown(engine);
    }

    fn kernel_stats(&self) -> Option<sandlog_runtime::KernelStats> {
        Some(self.pool.stats())
    }
}

/// Runs [`Executor::maintain`] every [`UPKEEP_INTERVAL`] on a blocking
/// thread, for as long as the current tokio runtime lives.
pub(crate) fn spawn_upkeep(engine: std::sync::Arc<Engine>, executor: std::sync::Arc<dyn Executor>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let engine = engine.clone();
            let executor = executor.clone();
            let _ = tokio::task::spawn_blocking(move || executor.maintain(&engine)).await;
        }
    });
}
