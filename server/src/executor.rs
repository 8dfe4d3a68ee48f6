//! How the servers run an execution. The HTTP API and the MCP server call
//! an [`Executor`]; [`ColdExecutor`] runs each in a fresh instance through
//! `Engine::execute`. A warm-kernel executor plugs in here without either
//! server changing.

use sandlog_runtime::core::SessionId;
use sandlog_runtime::{Engine, ExecRequest, Execution, RuntimeError};

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
        })
    }
}
