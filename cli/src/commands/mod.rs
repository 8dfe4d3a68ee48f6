//! One module per command: parse the arguments' values, make one engine
//! call, render the result.

mod adopt;
mod demo;
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

use sandlog_runtime::core::{SessionId, WorkspacePath};
use sandlog_runtime::{Engine, EngineOptions, SessionMatch};

use crate::args::{Cli, Command, EvidenceCommand, TableFormat};
use crate::exit::CliError;
use crate::output::Output;

/// Runs the command; returns the exit code for success paths (0, or 5 for
/// a guest failure).
pub fn run(cli: Cli, output: &Output) -> Result<u8, CliError> {
    let root = cli.root.clone();
    if cli.format == TableFormat::Ocsf && !matches!(cli.command, Command::Log(_)) {
        return Err(CliError::Usage {
            kind: "bad_format",
            message: "--format ocsf is for `sandlog log` only (events as OCSF records); \
                      use --format table or tsv here"
                .into(),
        });
    }
    match cli.command {
        Command::Init(args) => misc::init(&root, args.reset_log, output),
        Command::Completions(args) => misc::completions(args.shell),
        Command::Man => misc::man(),
        Command::HelpMarkdown => {
            output.line(crate::reference::markdown().trim_end())?;
            Ok(0)
        }
        Command::Adopt(args) => adopt::adopt(&root, &args.dir, output),
        Command::Doctor(args) => misc::doctor(&root, &args, output),
        Command::Demo => demo::demo(&root, output),
        Command::Runtimes(command) => runtimes::run(&root, command, output),
        Command::Keygen(args) => proofs::keygen(args, output),
        Command::Witness(command) => witness::run(command),
        Command::Evidence(command @ EvidenceCommand::Verify { .. }) => {
            proofs::evidence(None, command, output)
        }
        Command::Migrate(args) if args.from.is_some() => forensics::migrate(None, args, output),
        command => {
            let engine = open(&root, output)?;
            match command {
                Command::Session(command) => session::run(&engine, command, output),
                Command::Exec(command) => exec::run(&engine, command, output),
                Command::Run(args) => native::run(&engine, args, output),
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
                Command::Migrate(args) => forensics::migrate(Some(&engine), args, output),
                Command::ExportMetadata(args) => {
                    misc::export_metadata(&engine, &args.dir, args.force, output)
                }
                Command::Stats => misc::stats(&engine, output),
                Command::Checkpoint(args) => proofs::checkpoint(&engine, args, output),
                Command::Prove(command) => proofs::prove(&engine, command, output),
                Command::Audit(args) => proofs::audit(&engine, args, output),
                Command::Evidence(command) => proofs::evidence(Some(&engine), command, output),
                Command::Tree(command) => proofs::tree(&engine, command, output),
                Command::Report(args) => report::report(&engine, args, output),
                Command::Serve(args) => serve::serve(engine, args),
                Command::Mcp(args) => serve::mcp(engine, args),
                Command::Init(_)
                | Command::Completions(_)
                | Command::Man
                | Command::HelpMarkdown
                | Command::Adopt(_)
                | Command::Doctor(_)
                | Command::Keygen(_)
                | Command::Runtimes(_)
                | Command::Witness(_)
                | Command::Demo => Ok(0),
            }
        }
    }
}

/// Who acts, recorded on every event a command appends: `--actor`, else
/// `$SANDLOG_ACTOR`, else the OS user name (`$USER`, else `$LOGNAME`, else
/// the name the password database gives the uid), else `uid:<n>` for a
/// uid without a name. Never "unknown": an event must say who did it.
pub fn actor(flag: Option<&str>) -> String {
    let named = |value: Option<String>| value.filter(|name| !name.trim().is_empty());
    named(flag.map(str::to_owned))
        .or_else(|| named(std::env::var("SANDLOG_ACTOR").ok()))
        .or_else(|| named(std::env::var("USER").ok()))
        .or_else(|| named(std::env::var("LOGNAME").ok()))
        .unwrap_or_else(os_user_name)
}

/// The password database's name for this process's uid, else `uid:<n>`.
fn os_user_name() -> String {
    #[expect(unsafe_code, reason = "getuid has no preconditions")]
    let uid = unsafe { libc::getuid() };
    let mut entry = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buffer = vec![0 as libc::c_char; PASSWD_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // getpwuid_r writes the entry into `entry` and its strings into
    // `buffer`, both ours and alive for the call; `found` is null unless
    // an entry was written.
    #[expect(unsafe_code, reason = "getpwuid_r fills buffers we own")]
    let status = unsafe {
        libc::getpwuid_r(
            uid,
            entry.as_mut_ptr(),
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status == 0 && !found.is_null() {
        // `found` points at `entry`, whose `pw_name` points into `buffer`
        // as a NUL-terminated string.
        #[expect(unsafe_code, reason = "pw_name is a C string in our buffer")]
        let name = unsafe { std::ffi::CStr::from_ptr((*found).pw_name) };
        let name = name.to_string_lossy();
        if !name.is_empty() {
            return name.into_owned();
        }
    }
    format!("uid:{uid}")
}

/// Bytes for the strings of one password entry (name, home, shell, …).
const PASSWD_BUFFER_BYTES: usize = 4096;

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
