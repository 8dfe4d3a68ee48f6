//! `report ID -o FILE.html`: one session's forensic report.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use serde_json::json;

use crate::args::ReportArgs;
use crate::exit::CliError;
use crate::output::Output;
use sandlog_runtime::Engine;

/// Writes the report beside FILE, then renames it into place, so FILE is
/// never a half-written report.
pub fn report(engine: &Engine, args: ReportArgs, output: &Output) -> Result<u8, CliError> {
    let session_id = super::session_id(engine, &args.id)?;
    let path = args.output.as_path();
    let io = |what: &str| {
        let context = format!("{what} {}", path.display());
        move |source| CliError::Io { context, source }
    };
    if !args.force && std::fs::symlink_metadata(path).is_ok() {
        return Err(CliError::Io {
            context: format!(
                "writing {} (it exists; choose another name or pass --force to replace it)",
                path.display()
            ),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".sandlog-report-")
        .suffix(".tmp")
        .tempfile_in(directory)
        .map_err(io("creating a temporary file beside"))?;
    let summary = {
        let mut writer = std::io::BufWriter::new(file.as_file_mut());
        let summary = engine.write_report(session_id, &mut writer)?;
        writer.flush().map_err(io("writing"))?;
        summary
    };
    // A report is for reading: not the temporary file's private mode.
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .and_then(|()| file.as_file().sync_all())
        .map_err(io("syncing"))?;
    if args.force {
        file.persist(path)
            .map_err(|error| io("renaming the report to")(error.error))?;
    } else {
        file.persist_noclobber(path)
            .map_err(|error| io("renaming the report to (it must not exist)")(error.error))?;
    }
    if output.json {
        output.json(&json!({
            "path": path,
            "session_id": summary.session_id,
            "position": summary.position,
            "events": summary.events,
            "events_shown": summary.events_shown,
            "executions": summary.executions,
            "file_changes": summary.file_changes,
            "content_bytes": summary.content_bytes,
            "cut": summary.cut,
            "verify_ok": summary.verify_ok,
            "bytes": summary.html_bytes,
        }))?;
    } else {
        output.line(&format!(
            "wrote {}: session {}, {} events ({} executions, {} file changes){}; log verification {}",
            path.display(),
            summary.session_id,
            summary.events_shown,
            summary.executions,
            summary.file_changes,
            if summary.cut {
                ", some content cut by the report's bounds"
            } else {
                ""
            },
            if summary.verify_ok {
                output.good("ok")
            } else {
                output.bad("FAILED")
            }
        ))?;
    }
    if !summary.verify_ok {
        return Err(CliError::Integrity(format!(
            "the log failed verification (the report {} says how); run `sandlog verify`",
            path.display()
        )));
    }
    Ok(0)
}
