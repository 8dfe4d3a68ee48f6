//! One module per command: parse the arguments' values, make one engine
//! call, render the result.

mod adopt;
mod demo;
pub mod dispatch;
mod exec;
mod files;
mod forensics;
mod misc;
mod native;
mod proofs;
mod prune;
mod report;
mod retention;
mod runtimes;
pub mod serve;
mod session;
pub mod witness;

use std::path::Path;

use sandlog_runtime::core::{Position, SessionId, Timestamp, WorkspacePath};
use sandlog_runtime::projections::replay::Cut;
use sandlog_runtime::{Engine, EngineOptions, SessionMatch};

use crate::exit::CliError;
use crate::output::Output;

/// Opens the engine on an existing root (never creates one: a missing
/// directory or one without a root is "not found", exit 3).
pub fn open(root: &Path, output: &Output) -> Result<Engine, CliError> {
    open_with(root, false, output)
}

/// Opens the engine; with `create`, makes the root first if needed (only
/// `init` and `adopt` do). A runtime compile is announced on a terminal.
pub fn open_with(root: &Path, create: bool, output: &Output) -> Result<Engine, CliError> {
    Ok(Engine::open(
        root,
        EngineOptions {
            actor: output.actor.clone(),
            correlation_id: output.correlation_id,
            store: output.store.clone(),
            node: output.node.clone(),
            create,
            on_compile: output.compile_observer(),
            on_upgrade: output.upgrade_observer(),
            ..EngineOptions::default()
        },
    )?)
}

/// Resolves a session id: the full UUID, or any unique prefix of one
/// (as `git` takes commit ids). A prefix that matches no session is "not
/// found" (exit 3); one that matches several is a usage error (exit 2)
/// listing them; text that cannot begin a UUID is a usage error.
pub fn session_id(engine: &Engine, text: &str) -> Result<SessionId, CliError> {
    match engine.resolve_session(text)? {
        SessionMatch::One(session_id) => Ok(session_id),
        SessionMatch::NotAPrefix => Err(CliError::Usage {
            kind: "invalid_session_id",
            message: format!(
                "invalid session id {text:?}: give a session's UUID or a unique prefix of it \
                 (hex digits, such as 84233c86); `sandlog session list` shows them"
            ),
        }),
        SessionMatch::None => Err(CliError::NotFound {
            kind: "not_found",
            message: format!(
                "no session id starts with {text:?} (`sandlog session list` shows the sessions)"
            ),
        }),
        SessionMatch::Several { count, first } => {
            let shown: Vec<String> = first.iter().map(ToString::to_string).collect();
            let more = count.saturating_sub(first.len() as u64);
            Err(CliError::Usage {
                kind: "ambiguous_id",
                message: format!(
                    "{text:?} is the start of {count} session ids: {}{}; give more of the id",
                    shown.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ),
            })
        }
    }
}

/// Parses a workspace path (refused: usage error, exit 2, naming the
/// reason).
pub fn workspace_path(text: &str) -> Result<WorkspacePath, CliError> {
    Ok(WorkspacePath::parse(text).map_err(sandlog_runtime::RuntimeError::from)?)
}

/// Parses `--at POS|TIME`: an integer is a position; otherwise an RFC 3339
/// time, or a duration meaning that long ago (`2h`, by the engine's clock).
pub fn parse_cut(engine: &Engine, text: &str) -> Result<Cut, CliError> {
    if let Ok(position) = text.parse::<u64>() {
        return Ok(Cut::Position(Position(position)));
    }
    if let Ok(time) = Timestamp::parse(text) {
        return Ok(Cut::Time(time));
    }
    if let Ok(ago) = sandlog_runtime::core::human::parse_duration(text) {
        return Ok(Cut::Time(engine.clock().now().saturating_sub(ago)));
    }
    Err(CliError::Usage {
        kind: "invalid_cut",
        message: format!(
            "--at {text:?}: expected a position (integer), an RFC 3339 time, or a duration meaning that long ago (`2h`)"
        ),
    })
}
