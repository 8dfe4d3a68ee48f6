//! `exec`: run code; the guest's stdout/stderr pass through.

use std::io::Write;

use sandlog_runtime::core::Outcome;
use sandlog_runtime::core::event::FileWritten;
use sandlog_runtime::core::human::{format_duration, format_size, parse_duration, parse_size};
use sandlog_runtime::engine::CODE_BYTES_MAX;
use sandlog_runtime::eventstore::BlobState;
use sandlog_runtime::history::{Content, ExecSelector, ExecutionRecord};
use sandlog_runtime::{Engine, ExecRequest, LimitOverrides, Runtime};

use crate::args::{ExecArgs, ExecCommand, ExecSubcommand};
use crate::exit::{CliError, EXIT_GUEST_FAILURE, usage};
use crate::output::Output;
use crate::render;

pub fn run(engine: &Engine, command: ExecCommand, output: &Output) -> Result<u8, CliError> {
    match command.show {
        Some(ExecSubcommand::Show { id, execution }) => show(engine, &id, &execution, output),
        None => exec(engine, command.run, output),
    }
}

fn exec(engine: &Engine, args: ExecArgs, output: &Output) -> Result<u8, CliError> {
    let Some(id) = args.id.as_deref() else {
        return Err(CliError::Usage {
            kind: "usage",
            message: "give the session id: `sandlog exec ID --code CODE`".into(),
        });
    };
    let session_id = super::session_id(engine, id)?;
    let code = match (&args.code, &args.file, args.stdin.as_deref()) {
        (Some(code), _, _) => code.clone().into_bytes(),
        // A FIFO or a device is refused unread; any input stops one byte
        // past the largest code an execution takes.
        (None, Some(path), _) => sandlog_runtime::input::read_file_bounded(
            path,
            "code file",
            CODE_BYTES_MAX as u64,
            "CODE_BYTES_MAX",
        )?,
        (None, None, Some("-")) => sandlog_runtime::input::read_stream_bounded(
            std::io::stdin().lock(),
            "code on stdin",
            CODE_BYTES_MAX as u64,
            "CODE_BYTES_MAX",
        )?,
        (None, None, Some(other)) => {
            return Err(CliError::Usage {
                kind: "usage",
                message: format!("unexpected argument {other:?}; use `-` to read code from stdin"),
            });
        }
        (None, None, None) => {
            return Err(CliError::Usage {
                kind: "usage",
                message: "give the code with --code, --file, or `-` (stdin)".into(),
            });
        }
    };
    let limits = LimitOverrides {
        fuel: args.fuel,
        timeout: args
            .timeout
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(usage)?,
        memory_bytes: args
            .memory
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(usage)?,
        evidence_bytes: args
            .evidence
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(usage)?,
        wait: args
            .wait
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(usage)?,
        ..LimitOverrides::default()
    };
    let request = ExecRequest {
        runtime: Runtime::parse(&args.runtime),
        code,
        limits,
    };
    let execution = engine.execute(session_id, &request)?;
    let failed =
        execution.outcome != Outcome::Ok || execution.exit_code.is_some_and(|code| code != 0);
    if output.json {
        output.json(&sandlog_runtime::documents::execution_document(&execution))?;
    } else {
        let _ = std::io::stdout().lock().write_all(&execution.stdout);
        let _ = std::io::stdout().flush();
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(&execution.stderr);
        if execution.stdout_truncated || execution.stderr_truncated {
            let _ = writeln!(stderr, "sandlog: output truncated at the cap");
        }
        if failed {
            // Last line: the outcome and the guest's exit code, after the
            // guest's own stderr (a Python traceback, say).
            let _ = writeln!(
                stderr,
                "{}",
                outcome_line(
                    execution.outcome,
                    execution.exit_code,
                    execution.message.as_deref()
                )
            );
        }
    }
    Ok(if failed { EXIT_GUEST_FAILURE } else { 0 })
}

/// `exec show ID N`: one execution as recorded, its code and output whole
/// (up to the largest output limit).
fn show(engine: &Engine, id: &str, execution: &str, output: &Output) -> Result<u8, CliError> {
    let session_id = super::session_id(engine, id)?;
    let selector = ExecSelector::parse(execution)?;
    let record = engine.execution_record(session_id, selector, None)?;
    if output.json {
        output.json(&record)?;
        return Ok(0);
    }
    for line in header(&record) {
        output.line(&line)?;
    }
    section(output, "code", &record.code, false)?;
    section(output, "stdout", &record.stdout, record.stdout_truncated)?;
    section(output, "stderr", &record.stderr, record.stderr_truncated)?;
    let changed = record.files_written.len() + record.files_deleted.len();
    output.line(&output.bold(&format!("files changed ({changed})")))?;
    for file in &record.files_written {
        output.line(&format!(
            "  wrote   {} ({}, blake3 {}): {}",
            render::escaped(&file.path),
            format_size(file.size),
            render::short_hash(&file.blake3.to_hex()),
            kept(engine, file)?
        ))?;
    }
    for path in &record.files_deleted {
        output.line(&format!("  deleted {}", render::escaped(path)))?;
    }
    Ok(0)
}

/// The header lines of `exec show`: what ran, how it ended, under which
/// limits, and what was kept.
fn header(record: &ExecutionRecord) -> Vec<String> {
    let limits = &record.limits;
    let mut lines = vec![
        format!(
            "execution {} of session {} (position {})",
            record.number, record.session_id, record.position
        ),
        format!("time      {}", record.recorded_at),
        format!("actor     {}", render::escaped(&record.actor)),
        format!("runtime   {}", render::escaped(&record.runtime)),
        format!(
            "outcome   {}{}",
            record.outcome,
            record
                .exit_code
                .map_or(String::new(), |code| format!(", exit code {code}"))
        ),
        format!(
            "duration  {}",
            format_duration(std::time::Duration::from_micros(record.duration_us))
        ),
        format!(
            "fuel      {}",
            record
                .fuel_consumed
                .map_or("not metered".to_owned(), |fuel| fuel.to_string())
        ),
        format!(
            "limits    fuel {}, timeout {}, memory {}, workspace {}",
            limits
                .fuel
                .map_or("unmetered".to_owned(), |fuel| fuel.to_string()),
            format_duration(std::time::Duration::from_millis(limits.timeout_ms)),
            format_size(limits.memory_bytes),
            format_size(limits.workspace_bytes)
        ),
    ];
    lines.push(match &record.evidence {
        Some(evidence) if evidence.budget_bytes == 0 => {
            "evidence  off (budget 0): no output or file bytes kept".to_owned()
        }
        Some(evidence) => format!(
            "evidence  budget {}: {} files kept ({}), {} not kept",
            format_size(evidence.budget_bytes),
            evidence.kept_files,
            format_size(evidence.kept_bytes),
            evidence.not_kept_files
        ),
        None => "evidence  recorded before evidence was kept: only the code".to_owned(),
    });
    if let Some(scan) = &record.scan
        && let Some(limit) = scan.limit
    {
        lines.push(format!(
            "scan      stopped at the {} limit: {} of {} changes recorded",
            limit.as_str(),
            scan.files_recorded,
            scan.files_changed_total
        ));
    }
    lines
}

/// One of code, stdout, stderr: a title saying its size and state, then
/// its lines escaped for the terminal.
fn section(
    output: &Output,
    name: &str,
    content: &Content,
    truncated: bool,
) -> Result<(), CliError> {
    let state = match content.state {
        "kept" if content.excerpt => format!(
            "kept, first {} shown",
            format_size(content.raw.len() as u64)
        ),
        "kept" => "kept".to_owned(),
        "erased" => "erased: the bytes were removed; the hash remains".to_owned(),
        _ => "not kept: only its hash is recorded".to_owned(),
    };
    output.line(&output.bold(&format!(
        "{name} ({}{}, blake3 {}; {state})",
        format_size(content.bytes),
        if truncated {
            ", truncated at the output limit"
        } else {
            ""
        },
        render::short_hash(&content.blake3.to_hex())
    )))?;
    if let Some(text) = &content.text
        && !text.is_empty()
    {
        for line in text.trim_end_matches('\n').split('\n') {
            output.line(&format!("  {}", render::escape_for_terminal(line)))?;
        }
    }
    Ok(())
}

/// Whether a written file's bytes are readable now: `kept`, `erased`, or
/// `not kept: reason`.
fn kept(engine: &Engine, file: &FileWritten) -> Result<String, CliError> {
    if !file.content_stored() {
        return Ok(match file.not_kept {
            Some(reason) => format!("not kept: {}", reason.describe()),
            None => "not kept: written before sandlog kept evidence".to_owned(),
        });
    }
    let state = engine.blob_state(&file.blake3)?;
    Ok(match state {
        BlobState::Kept { .. } => "kept".to_owned(),
        BlobState::Erased { erased_at, .. } => format!("erased at {erased_at}"),
        BlobState::Missing => "not kept: no bytes are stored under its hash".to_owned(),
    })
}

/// The last line of a failed `exec`: outcome, exit code, and for a trap or
/// a limit its reason without the engine's backtrace.
fn outcome_line(outcome: Outcome, exit_code: Option<i32>, message: Option<&str>) -> String {
    let code = match exit_code {
        Some(code) => format!("exit code {code}"),
        None => "no exit code".to_owned(),
    };
    let reason = message
        .map(trap_reason)
        .filter(|reason| !reason.is_empty())
        .map_or(String::new(), |reason| {
            format!(": {}", crate::render::escape_for_terminal(&reason))
        });
    let hint = match outcome {
        Outcome::OutOfFuel => " (the deterministic CPU limit; raise it with --fuel N)",
        Outcome::Timeout => " (the wall-clock limit; raise it with --timeout DUR)",
        Outcome::Memory => " (the memory limit; raise it with --memory SIZE)",
        Outcome::Quota => " (the workspace is full; delete files with `sandlog files rm`)",
        _ => "",
    };
    format!(
        "sandlog: exec failed: outcome {}, {code}{reason}{hint}",
        outcome.as_str()
    )
}

/// A trap message without wasmtime's backtrace: the lines that say what
/// happened (`wasm trap: all fuel consumed`), not where in python.wasm.
fn trap_reason(message: &str) -> String {
    let mut reasons: Vec<&str> = Vec::new();
    for line in message.lines() {
        let line = line.trim();
        let is_frame = line.split_once(':').is_some_and(|(index, _)| {
            !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
        });
        let is_noise = line.is_empty()
            || is_frame
            || line.contains("wasm backtrace")
            || line.starts_with("note:")
            || line.starts_with("Caused by")
            || line.starts_with("at ")
            || line.starts_with("0x");
        if !is_noise && !reasons.contains(&line) {
            reasons.push(line);
        }
    }
    reasons.join("; ")
}

#[cfg(test)]
mod tests {
    /// A trap message keeps its reason and loses the backtrace frames.
    #[test]
    fn trap_reason_drops_the_backtrace() {
        let message = "error while executing at wasm backtrace:\n    0: 0x1a2b - python.wasm!_PyEval_EvalFrameDefault\n    1: 0x3c4d - python.wasm!main\nnote: using the `WASMTIME_BACKTRACE_DETAILS=1` environment variable may show more debugging information\n\nCaused by:\n    wasm trap: all fuel consumed by WebAssembly";
        assert_eq!(
            super::trap_reason(message),
            "wasm trap: all fuel consumed by WebAssembly"
        );
        assert_eq!(super::trap_reason("quota exceeded"), "quota exceeded");
    }
}
