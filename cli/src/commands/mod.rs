//! One module per command: parse the arguments' values, make one engine
//! call, render the result.

mod adopt;
mod demo;
mod exec;
mod files;
mod forensics;
mod misc;
mod proofs;
mod prune;
mod report;
mod retention;
pub mod serve;
mod session;

use std::path::Path;

use sandlog_runtime::core::{SessionId, WorkspacePath};
use sandlog_runtime::{Engine, EngineOptions};

use crate::args::{Cli, Command, EvidenceCommand};
use crate::exit::{CliError, usage};
use crate::output::Output;

/// Runs the command; returns the exit code for success paths (0, or 5 for
/// a guest failure).
pub fn run(cli: Cli, output: &Output) -> Result<u8, CliError> {
    let root = cli.root.clone();
    match cli.command {
        Command::Init(args) => misc::init(&root, args.reset_log, output),
        Command::Completions(args) => misc::completions(args.shell),
        Command::Man => misc::man(),
        Command::Adopt(args) => adopt::adopt(&root, &args.dir, output),
        Command::Demo => demo::demo(&root, output),
        Command::Keygen(args) => proofs::keygen(args, output),
        Command::Evidence(command @ EvidenceCommand::Verify { .. }) => {
            proofs::evidence(None, command, output)
        }
        command => {
            let engine = open(&root, output)?;
            match command {
                Command::Session(command) => session::run(&engine, command, output),
                Command::Exec(command) => exec::run(&engine, command, output),
                Command::Blob(command) => retention::blob(&engine, command),
                Command::Erase(args) => retention::erase(&engine, args, output),
                Command::Gc(args) => retention::gc(&engine, args, output),
                Command::Config(command) => retention::config(&engine, command, output),
                Command::Files(command) => files::run(&engine, command, output),
                Command::Prune(args) => prune::prune(&engine, args, output),
                Command::Reconcile(args) => prune::reconcile(&engine, args, output),
                Command::Log(args) => forensics::log(&engine, args, output),
                Command::Replay(args) => forensics::replay(&engine, args, output),
                Command::Verify(args) => forensics::verify(&engine, args, output),
                Command::Digest => forensics::digest(&engine, output),
                Command::ExportMetadata(args) => {
                    misc::export_metadata(&engine, &args.dir, args.force, output)
                }
                Command::Stats => misc::stats(&engine, output),
                Command::Checkpoint(args) => proofs::checkpoint(&engine, args, output),
                Command::Prove(command) => proofs::prove(&engine, command, output),
                Command::Evidence(command) => proofs::evidence(Some(&engine), command, output),
                Command::Tree(command) => proofs::tree(&engine, command, output),
                Command::Report(args) => report::report(&engine, args, output),
                Command::Serve(args) => serve::serve(engine, args),
                Command::Mcp => serve::mcp(engine),
                Command::Init(_)
                | Command::Completions(_)
                | Command::Man
                | Command::Adopt(_)
                | Command::Keygen(_)
                | Command::Demo => Ok(0),
            }
        }
    }
}

/// The actor recorded for CLI commands: `cli:<user>`.
pub fn actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}

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
            actor: actor(),
            create,
            on_compile: output.compile_observer(),
            ..EngineOptions::default()
        },
    )?)
}

/// Parses a session id (malformed: usage error, exit 2).
pub fn session_id(text: &str) -> Result<SessionId, CliError> {
    SessionId::parse(text).map_err(usage)
}

/// Parses a workspace path (refused: usage error, exit 2, naming the
/// reason).
pub fn workspace_path(text: &str) -> Result<WorkspacePath, CliError> {
    Ok(WorkspacePath::parse(text).map_err(sandlog_runtime::RuntimeError::from)?)
}
