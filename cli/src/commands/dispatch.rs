//! `run`: hands the parsed command line to the command's function.

use crate::args::{Cli, Command, EvidenceCommand, TableFormat};
use crate::exit::CliError;
use crate::output::Output;

use super::{
    adopt, demo, exec, files, forensics, misc, native, open, proofs, prune, report, retention,
    runtimes, serve, session, witness,
};

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
