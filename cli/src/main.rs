//! The `sandlog` binary: parse → run → exit code. Nothing else lives here.

mod actor;
mod args;
mod commands;
mod exit;
#[cfg(feature = "otel")]
mod otel;
mod output;
mod reference;
mod render;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return exit::usage_error(error),
    };
    let output = output::Output::new(&cli);
    // Held to the end: dropping it sends the last traces.
    let _traces = output::init_tracing(&cli);
    // A prune holds one open lease file per session of the batches in
    // flight; the usual soft limit of 1,024 would make them small.
    sandlog_runtime::lifecycle::raise_descriptor_limit();
    let database = cli.root.join(sandlog_runtime::layout::DATABASE_FILE);
    match commands::dispatch::run(cli, &output) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let error = error.for_people().naming_database(&database);
            output.error(&error);
            ExitCode::from(error.exit_code())
        }
    }
}
