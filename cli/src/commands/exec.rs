//! `exec`: run code; the guest's stdout/stderr pass through.

use std::io::{Read, Write};

use sandlog_runtime::core::Outcome;
use sandlog_runtime::core::human::{parse_duration, parse_size};
use sandlog_runtime::{Engine, ExecRequest, LimitOverrides, Runtime};
use serde_json::json;

use crate::args::ExecArgs;
use crate::exit::{CliError, EXIT_GUEST_FAILURE, usage};
use crate::output::Output;

pub fn exec(engine: &Engine, args: ExecArgs, output: &Output) -> Result<u8, CliError> {
    let session_id = super::session_id(&args.id)?;
    let code = match (&args.code, &args.file, args.stdin.as_deref()) {
        (Some(code), _, _) => code.clone().into_bytes(),
        (None, Some(path), _) => std::fs::read(path).map_err(|source| CliError::Io {
            context: format!("reading {}", crate::render::host_path(path)),
            source,
        })?,
        (None, None, Some("-")) => {
            let mut code = Vec::new();
            std::io::stdin()
                .read_to_end(&mut code)
                .map_err(|source| CliError::Io {
                    context: "reading code from stdin".into(),
                    source,
                })?;
            code
        }
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
        output.json(&json!({
            "outcome": execution.outcome,
            "exit_code": execution.exit_code,
            "stdout": String::from_utf8_lossy(&execution.stdout),
            "stderr": String::from_utf8_lossy(&execution.stderr),
            "stdout_truncated": execution.stdout_truncated,
            "stderr_truncated": execution.stderr_truncated,
            "fuel_consumed": execution.fuel_consumed,
            "duration_ms": execution.duration_ms,
            "files_written": execution.files_written,
            "files_deleted": execution.files_deleted,
            "message": execution.message,
            "position": execution.position,
            "scan_ms": execution.scan_ms,
            "limit": execution.limit,
            "files_changed_total": execution.files_changed_total,
        }))?;
    } else {
        let _ = std::io::stdout().lock().write_all(&execution.stdout);
        let _ = std::io::stdout().flush();
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(&execution.stderr);
        if execution.stdout_truncated || execution.stderr_truncated {
            let _ = writeln!(stderr, "sandlog: output truncated at the cap");
        }
        if execution.outcome != Outcome::Ok {
            let _ = writeln!(
                stderr,
                "sandlog: outcome {}{}",
                execution.outcome.as_str(),
                execution
                    .message
                    .as_deref()
                    .map_or(String::new(), |message| format!(
                        ": {}",
                        crate::render::escape_for_terminal(message)
                    ))
            );
        }
    }
    Ok(if failed { EXIT_GUEST_FAILURE } else { 0 })
}
