//! `run` (a trusted native command, recorded) and `session sync` (changes
//! made outside sandlog, recorded).

use std::io::Write;

use sandlog_runtime::core::event::SizeExceeded;
use sandlog_runtime::core::human::{format_duration, format_size, parse_duration, parse_size};
use sandlog_runtime::{Engine, NativeOptions, Passthrough};
use serde_json::json;

use crate::args::RunArgs;
use crate::exit::{CliError, EXIT_GUEST_FAILURE, usage};
use crate::output::Output;
use crate::render;

fn size_warning(exceeded: Option<SizeExceeded>) {
    if let Some(exceeded) = exceeded {
        let _ = writeln!(
            std::io::stderr().lock(),
            "sandlog: warning: the workspace holds {}, past the session's size limit of {} (recorded)",
            format_size(exceeded.bytes),
            format_size(exceeded.max_size)
        );
    }
}

/// Names what the scan could not read (at most a few paths, then a count).
fn unreadable_warning(unreadable: &[sandlog_runtime::core::WorkspacePath]) {
    const NAMED: usize = 5;
    if unreadable.is_empty() {
        return;
    }
    let mut names: Vec<String> = unreadable
        .iter()
        .take(NAMED)
        .map(|path| render::escape_for_terminal(path.as_str()).into_owned())
        .collect();
    if unreadable.len() > NAMED {
        names.push(format!("and {} more", unreadable.len() - NAMED));
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "sandlog: warning: {} path(s) could not be read and are recorded without their contents (content_kept false, reason unreadable): {}; make them readable to this user and run `sandlog session sync`",
        unreadable.len(),
        names.join(", ")
    );
}

pub fn run(engine: &Engine, args: RunArgs, output: &Output) -> Result<u8, CliError> {
    let session_id = super::session_id(engine, &args.id)?;
    let options = NativeOptions {
        timeout: args
            .timeout
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(usage)?,
        evidence_bytes: args
            .evidence
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(usage)?,
        // With --json our stdout holds only the JSON document.
        passthrough: if output.json {
            Passthrough::Stderr
        } else {
            Passthrough::Inherit
        },
        // Ctrl-C (or a supervisor's SIGTERM) stops the command, whose end
        // is then recorded; this process exits right after.
        forward_signals: true,
        inherit_stdin: true,
        wait: args
            .wait
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(usage)?,
    };
    let run = engine.run_native(session_id, &args.command, &options)?;
    if output.json {
        output.json(&json!({
            "exit_code": run.exit_code,
            "signal": run.signal,
            "timed_out": run.timed_out,
            "duration_ms": run.duration_ms,
            "files_written": run.files_written,
            "files_deleted": run.files_deleted,
            "files_changed_total": run.files_changed_total,
            "unreadable": run.unreadable,
            "limit": run.limit,
            "scan_ms": run.scan_ms,
            "stdout_truncated": run.stdout_truncated,
            "stderr_truncated": run.stderr_truncated,
            "size_exceeded": run.size_exceeded,
            "started_position": run.started_position,
            "position": run.position,
        }))?;
    } else {
        let mut stderr = std::io::stderr().lock();
        if run.stdout_truncated || run.stderr_truncated {
            let _ = writeln!(
                stderr,
                "sandlog: output kept only up to the cap (it all passed through)"
            );
        }
        if let Some(limit) = run.limit {
            let _ = writeln!(
                stderr,
                "sandlog: the scan after the run passed the {} bound; {} of {} changes recorded",
                limit.as_str(),
                run.files_written.len() + run.files_deleted.len(),
                run.files_changed_total
            );
        }
        if run.timed_out {
            let _ = writeln!(
                stderr,
                "sandlog: killed after {} (--timeout)",
                format_duration(options.timeout.unwrap_or_default())
            );
        } else if let Some(signal) = run.signal {
            let _ = writeln!(stderr, "sandlog: the command was killed by signal {signal}");
        } else if let Some(code) = run.exit_code.filter(|code| *code != 0) {
            let _ = writeln!(stderr, "sandlog: the command exited with {code}");
        }
    }
    size_warning(run.size_exceeded);
    unreadable_warning(&run.unreadable);
    Ok(if run.failed() { EXIT_GUEST_FAILURE } else { 0 })
}

pub fn sync(engine: &Engine, id: &str, output: &Output) -> Result<u8, CliError> {
    let session_id = super::session_id(engine, id)?;
    let report = engine.sync_session(session_id)?;
    if output.json {
        output.json(&json!({
            "recorded": report.recorded,
            "position": report.position,
            "files_written": report.files_written,
            "files_deleted": report.files_deleted,
            "files_changed_total": report.files_changed_total,
            "unreadable": report.unreadable,
            "limit": report.limit,
            "files_seen": report.files_seen,
            "files_hashed": report.files_hashed,
            "scan_ms": report.scan_ms,
            "size_exceeded": report.size_exceeded,
        }))?;
    } else if !report.recorded {
        output.line(&format!(
            "nothing changed ({} files checked, nothing recorded)",
            report.files_seen
        ))?;
    } else {
        for path in &report.files_written {
            output.line(&format!(
                "written  {}",
                render::escape_for_terminal(path.as_str())
            ))?;
        }
        for path in &report.files_deleted {
            output.line(&format!(
                "deleted  {}",
                render::escape_for_terminal(path.as_str())
            ))?;
        }
        let mut summary = format!(
            "recorded {} written, {} deleted",
            report.files_written.len(),
            report.files_deleted.len()
        );
        if let Some(limit) = report.limit {
            summary.push_str(&format!(
                "; the scan passed the {} bound ({} changes found)",
                limit.as_str(),
                report.files_changed_total
            ));
        }
        output.line(&summary)?;
    }
    size_warning(report.size_exceeded);
    unreadable_warning(&report.unreadable);
    Ok(0)
}
