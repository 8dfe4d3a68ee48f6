//! The CLI reference in Markdown, generated from the clap definitions
//! (`sandlog help-markdown`, checked into docs/cli-reference.md and compared
//! by a test, so the page cannot drift from the binary).

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::args::Cli;

/// The whole reference: the global options, then every command and
/// subcommand in definition order, each with its usage, description and
/// arguments.
pub fn markdown() -> String {
    let mut command = Cli::command();
    command.build();
    let mut text = String::new();
    text.push_str(
        "# `sandlog` command reference\n\n\
         Generated from the command-line definitions by `sandlog help-markdown`; \
         do not edit by hand (`cargo test -p sandlog-cli --test docs` fails when \
         this page and the binary disagree, and prints how to regenerate it). \
         The conventions (exit codes, `--json`, durations, sizes, times, ids) \
         are in [cli.md](cli.md); the JSON each command prints is in \
         [json.md](json.md).\n\n",
    );
    write_command(&mut text, &command, &[], 1);
    text
}

fn write_command(text: &mut String, command: &Command, parents: &[&str], depth: usize) {
    let mut path: Vec<&str> = parents.to_vec();
    path.push(command.get_name());
    let heading = "#".repeat((depth + 1).min(4));
    if depth > 1 {
        let _ = writeln!(text, "{heading} `{}`\n", path.join(" "));
    } else {
        let _ = writeln!(text, "{heading} Global options\n");
    }
    let about = command
        .get_long_about()
        .or_else(|| command.get_about())
        .map(ToString::to_string);
    if let Some(about) = about {
        let _ = writeln!(text, "{}\n", about.trim());
    }
    if depth > 1 {
        let usage = command.clone().render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ").trim();
        let _ = writeln!(text, "```\n{}\n```\n", usage);
    }
    let arguments: Vec<&Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter(|arg| arg.get_id() != "help" && arg.get_id() != "version")
        .filter(|arg| depth == 1 || !arg.is_global_set())
        .collect();
    if !arguments.is_empty() {
        for arg in arguments {
            let _ = writeln!(text, "* {}", describe_arg(arg));
        }
        text.push('\n');
    }
    for sub in command.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        write_command(text, sub, &path, depth + 1);
    }
}

/// One argument: its spelling, value, default and help, on one bullet.
fn describe_arg(arg: &Arg) -> String {
    let value_name = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map_or_else(
            || arg.get_id().to_string().to_uppercase(),
            ToString::to_string,
        );
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    let mut spelling = match (arg.get_short(), arg.get_long()) {
        (Some(short), Some(long)) => format!("`-{short}`, `--{long}"),
        (None, Some(long)) => format!("`--{long}"),
        (Some(short), None) => format!("`-{short}"),
        (None, None) => format!("`{value_name}`"),
    };
    if arg.get_long().is_some() || arg.get_short().is_some() {
        if takes_value {
            let _ = write!(spelling, " {value_name}`");
        } else {
            spelling.push('`');
        }
    }
    if matches!(arg.get_action(), ArgAction::Append) {
        spelling.push_str(" (repeatable)");
    }
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|help| {
            help.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let mut line = format!("{spelling}: {help}");
    if !line.ends_with('.') {
        line.push('.');
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| format!("`{}`", value.get_name()))
        .collect();
    if !possible.is_empty() && takes_value {
        let _ = write!(line, " One of {}.", possible.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && takes_value {
        let _ = write!(line, " Default: `{}`.", defaults.join(","));
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(line, " Environment: `${}`.", env.to_string_lossy());
    }
    if arg.is_required_set() && arg.get_long().is_none() {
        line.push_str(" Required.");
    }
    line
}
