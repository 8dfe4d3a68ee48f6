//! `session create|list|show|timeline|delete`.

use sandlog_runtime::core::human::format_size;
use sandlog_runtime::history::ExecutionRecord;
use sandlog_runtime::projections::SessionStatus;
use sandlog_runtime::sandbox::ReadonlyMount;
use sandlog_runtime::{ContextFile, Engine, NewSession};
use serde_json::json;
use std::collections::BTreeMap;

use crate::args::{SessionCommand, StatusArg};
use crate::exit::CliError;
use crate::output::Output;
use crate::render;

fn status(arg: StatusArg) -> SessionStatus {
    match arg {
        StatusArg::Active => SessionStatus::Active,
        StatusArg::Pruning => SessionStatus::Pruning,
        StatusArg::Pruned => SessionStatus::Pruned,
        StatusArg::Deleting => SessionStatus::Deleting,
        StatusArg::Deleted => SessionStatus::Deleted,
    }
}

pub use sandlog_runtime::documents::session_document;

pub fn run(engine: &Engine, command: SessionCommand, output: &Output) -> Result<u8, CliError> {
    match command {
        SessionCommand::Create {
            labels,
            group,
            context,
            readonly,
            max_size,
        } => {
            let new = NewSession {
                labels: labels.into_iter().collect(),
                group,
                max_size: max_size
                    .as_deref()
                    .map(sandlog_runtime::sessions::parse_max_size)
                    .transpose()?,
                readonly: readonly
                    .iter()
                    .map(|text| readonly_mount(text))
                    .collect::<Result<_, _>>()?,
                context: context
                    .iter()
                    .map(|text| context_file(text))
                    .collect::<Result<_, _>>()?,
            };
            let session = engine.create_session_with(new)?;
            if output.json {
                output.json(&json!({"session_id": session.session_id}))?;
            } else {
                output.line(&session.session_id.to_string())?;
            }
        }
        SessionCommand::Sync { id } => return super::native::sync(engine, &id, output),
        SessionCommand::Path { id } => {
            let path = engine.session_path(super::session_id(engine, &id)?)?;
            if output.json {
                output.json(&json!({"path": path}))?;
            } else {
                // Exact, not escaped: the line is for `cd "$(...)"`.
                output.line(&path.display().to_string())?;
            }
        }
        SessionCommand::List {
            status: wanted,
            group,
            all,
        } => {
            let mut sessions = engine.sessions_in(wanted.map(status), group.as_deref())?;
            if !all && wanted.is_none() {
                sessions.retain(|session| {
                    !matches!(
                        session.status,
                        SessionStatus::Deleted | SessionStatus::Pruned
                    )
                });
            }
            if output.json {
                let documents: Vec<_> = sessions.iter().map(session_document).collect();
                output.json(&documents)?;
            } else {
                output.line(&render::sessions_table(output, &sessions).to_string())?;
            }
        }
        SessionCommand::Show { id } => {
            let session = engine.session(super::session_id(engine, &id)?)?;
            if output.json {
                output.json(&session_document(&session))?;
            } else {
                let mut table = render::table(output, &["", ""]);
                table.add_row(vec!["session".to_owned(), session.session_id.to_string()]);
                table.add_row(vec![
                    "status".to_owned(),
                    session.status.as_str().to_owned(),
                ]);
                table.add_row(vec![
                    "created_at".to_owned(),
                    render::time(session.created_at),
                ]);
                table.add_row(vec![
                    "updated_at".to_owned(),
                    render::time(session.updated_at),
                ]);
                table.add_row(vec![
                    "executions".to_owned(),
                    session.exec_count.to_string(),
                ]);
                table.add_row(vec![
                    "last outcome".to_owned(),
                    session
                        .last_outcome
                        .map_or("—".to_owned(), |o| o.as_str().to_owned()),
                ]);
                table.add_row(vec![
                    "files".to_owned(),
                    format!("{} ({})", session.file_count, format_size(session.bytes)),
                ]);
                table.add_row(vec![
                    "legacy".to_owned(),
                    if session.legacy {
                        "yes (never pruned)"
                    } else {
                        "no"
                    }
                    .to_owned(),
                ]);
                table.add_row(vec![
                    "held".to_owned(),
                    match &session.held {
                        Some(reason) => format!(
                            "yes: {} (never pruned, deleted or erased until `sandlog session release`)",
                            render::escaped(reason)
                        ),
                        None => "no".to_owned(),
                    },
                ]);
                if let Some(group) = &session.group {
                    table.add_row(vec!["group".to_owned(), render::escaped(group)]);
                }
                if let Some(max_size) = session.max_size {
                    table.add_row(vec!["size limit".to_owned(), format_size(max_size)]);
                }
                for dir in &session.readonly {
                    table.add_row(vec![
                        format!("read-only {}", render::escaped(&dir.guest_path)),
                        render::escaped(&dir.host_path),
                    ]);
                }
                for (key, value) in &session.labels {
                    table.add_row(vec![
                        format!("label {}", render::escape_for_terminal(key)),
                        render::escaped(value),
                    ]);
                }
                output.line(&table.to_string())?;
            }
        }
        SessionCommand::Timeline { id } => {
            let session_id = super::session_id(engine, &id)?;
            let events = engine.session_events(session_id)?;
            // Each execution's code and output, a short excerpt each, by
            // the position of its `session.executed` event.
            let executions: BTreeMap<u64, ExecutionRecord> = engine
                .execution_records(session_id, TIMELINE_EXCERPT_BYTES)?
                .into_iter()
                .map(|record| (record.position, record))
                .collect();
            if output.json {
                let documents: Vec<_> = events
                    .iter()
                    .map(|envelope| {
                        let mut document = json!({
                            "position": envelope.position,
                            "version": envelope.version,
                            "recorded_at": envelope.recorded_at,
                            "kind": envelope.kind,
                            "actor": envelope.actor,
                            "description": render::describe_exact(envelope),
                            "payload": serde_json::from_slice::<serde_json::Value>(&envelope.payload).unwrap_or(serde_json::Value::Null),
                            "hash": envelope.hash,
                        });
                        if let (Some(record), Some(object)) = (
                            executions.get(&envelope.position.0),
                            document.as_object_mut(),
                        ) {
                            object.insert(
                                "execution".into(),
                                json!({
                                    "number": record.number,
                                    "code": record.code,
                                    "stdout": record.stdout,
                                    "stderr": record.stderr,
                                }),
                            );
                        }
                        document
                    })
                    .collect();
                output.json(&documents)?;
            } else {
                for envelope in &events {
                    output.line(&format!(
                        "{}  #{:<6} {:<24} {}  [{}]",
                        envelope.recorded_at,
                        envelope.position.0,
                        output.bold(&envelope.kind),
                        render::describe(envelope),
                        render::escape_for_terminal(&envelope.actor)
                    ))?;
                    if let Some(record) = executions.get(&envelope.position.0) {
                        for line in execution_excerpt(record) {
                            output.line(&line)?;
                        }
                    }
                }
            }
        }
        SessionCommand::Delete {
            id: None,
            group: Some(group),
            reason,
            wait,
        } => {
            let wait =
                sandlog_runtime::core::human::parse_duration(&wait).map_err(crate::exit::usage)?;
            return delete_group(engine, &group, &reason, wait, output);
        }
        SessionCommand::Delete {
            id, reason, wait, ..
        } => {
            let wait =
                sandlog_runtime::core::human::parse_duration(&wait).map_err(crate::exit::usage)?;
            let id = id.ok_or_else(|| CliError::Usage {
                kind: "usage",
                message: "say which session: an ID, or --group G for a whole group".into(),
            })?;
            let report =
                engine.delete_session_waiting(super::session_id(engine, &id)?, &reason, wait)?;
            if output.json {
                output.json(&json!({"session_id": report.session_id, "reclaimed_bytes": report.reclaimed_bytes}))?;
            } else {
                output.line(&format!(
                    "deleted {}, {} reclaimed",
                    report.session_id,
                    format_size(report.reclaimed_bytes)
                ))?;
            }
        }
        SessionCommand::Fork { id, at, labels } => {
            let origin = super::session_id(engine, &id)?;
            let cut = super::parse_cut(engine, &at)?;
            let report = engine.fork(origin, cut, labels.into_iter().collect())?;
            if output.json {
                output.json(&report)?;
            } else {
                output.line(&report.session_id.to_string())?;
                output.line(&format!(
                    "forked from {} as of position {}: {} files{}",
                    report.forked_from,
                    report.at,
                    report.files,
                    if report.missing.is_empty() {
                        String::new()
                    } else {
                        format!(", {} missing:", report.missing.len())
                    }
                ))?;
                for missing in &report.missing {
                    output.line(&format!(
                        "  {}: {}",
                        render::escaped(&missing.path),
                        render::missing_reason(&missing.reason)
                    ))?;
                }
            }
        }
        SessionCommand::Hold { id, reason } => {
            let session_id = super::session_id(engine, &id)?;
            engine.hold(session_id, &reason)?;
            if output.json {
                output.json(&json!({"session_id": session_id, "held": true}))?;
            } else {
                output.line(&format!(
                    "held {session_id}: never pruned, deleted or erased until `sandlog session release {session_id}`"
                ))?;
            }
        }
        SessionCommand::Release { id, reason } => {
            let session_id = super::session_id(engine, &id)?;
            engine.release(session_id, reason.as_deref())?;
            if output.json {
                output.json(&json!({"session_id": session_id, "held": false}))?;
            } else {
                output.line(&format!("released {session_id}: no longer held"))?;
            }
        }
    }
    Ok(0)
}

/// `--readonly [GUEST=]DIR`: a text starting with `/` and holding `=` names
/// the guest path first.
fn readonly_mount(text: &str) -> Result<ReadonlyMount, CliError> {
    let (guest_path, host_path) = match text.split_once('=') {
        Some((guest, host)) if guest.starts_with('/') => (Some(guest.to_owned()), host),
        _ => (None, text),
    };
    let host_path = std::path::PathBuf::from(host_path);
    let guest_path = match guest_path {
        Some(guest) => guest,
        None => sandlog_runtime::sessions::default_guest_path(&host_path)?,
    };
    Ok(ReadonlyMount {
        host_path,
        guest_path,
    })
}

/// `--context [DEST=]FILE`: the file's bytes (a regular file, read within
/// the context limit) and where they go.
fn context_file(text: &str) -> Result<ContextFile, CliError> {
    let (dest, file) = match text.split_once('=') {
        Some((dest, file)) => (Some(dest), std::path::Path::new(file)),
        None => (None, std::path::Path::new(text)),
    };
    let io = |source| CliError::Io {
        context: format!("--context {}", file.display()),
        source,
    };
    let metadata = std::fs::metadata(file).map_err(io)?;
    if !metadata.is_file() {
        return Err(CliError::Usage {
            kind: "invalid_input",
            message: format!(
                "--context {}: not a regular file; give a file (copy a directory in with `files put` or `sandlog run`)",
                file.display()
            ),
        });
    }
    let dest = match dest {
        Some(dest) => dest.to_owned(),
        None => file
            .file_name()
            .and_then(|name| name.to_str())
            .ok_or_else(|| CliError::Usage {
                kind: "invalid_input",
                message: format!(
                    "--context {}: the file's name is not UTF-8; give DEST=FILE",
                    file.display()
                ),
            })?
            .to_owned(),
    };
    let path = sandlog_runtime::core::WorkspacePath::parse(&dest).map_err(crate::exit::usage)?;
    let max = sandlog_runtime::sessions::CONTEXT_BYTES_MAX;
    // A FIFO or a device is refused unread; past the limit the engine
    // refuses it by size, naming the limit.
    let (opened, _) = sandlog_runtime::input::open_regular(file, "context file")?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(opened, max + 1), &mut bytes)
        .map_err(io)?;
    Ok(ContextFile { path, bytes })
}

/// `session delete --group`: each active session of the group, in turn;
/// one that fails is reported and the rest are still deleted.
fn delete_group(
    engine: &Engine,
    group: &str,
    reason: &str,
    wait: std::time::Duration,
    output: &Output,
) -> Result<u8, CliError> {
    let sessions = engine.sessions_in(None, Some(group))?;
    if sessions.is_empty() {
        return Err(CliError::NotFound {
            kind: "not_found",
            message: format!(
                "no session in group {group:?}; `sandlog session list` shows the sessions and their groups"
            ),
        });
    }
    let mut deleted = Vec::new();
    let mut failed = Vec::new();
    for session in sessions
        .iter()
        .filter(|session| session.status == SessionStatus::Active)
    {
        match engine.delete_session_waiting(session.session_id, reason, wait) {
            Ok(report) => deleted.push(report),
            Err(error) => failed.push((session.session_id, error)),
        }
    }
    if output.json {
        output.json(&json!({
            "group": group,
            "deleted": deleted.iter().map(|report| json!({
                "session_id": report.session_id,
                "reclaimed_bytes": report.reclaimed_bytes,
            })).collect::<Vec<_>>(),
            "failed": failed.iter().map(|(session_id, error)| json!({
                "session_id": session_id,
                "kind": error.kind(),
                "message": error.to_string(),
            })).collect::<Vec<_>>(),
        }))?;
    } else {
        for report in &deleted {
            output.line(&format!(
                "deleted {}, {} reclaimed",
                report.session_id,
                format_size(report.reclaimed_bytes)
            ))?;
        }
        for (session_id, error) in &failed {
            output.line(&format!("not deleted {session_id}: {error}"))?;
        }
        output.line(&format!(
            "group {}: {} deleted, {} failed",
            render::escaped(group),
            deleted.len(),
            failed.len()
        ))?;
    }
    Ok(if failed.is_empty() {
        crate::exit::EXIT_OK
    } else {
        crate::exit::EXIT_FAILURE
    })
}

/// Bytes of code and of each output read per execution for a timeline:
/// enough for the two lines shown.
const TIMELINE_EXCERPT_BYTES: usize = 256;

/// Lines shown per stream in a timeline.
const TIMELINE_EXCERPT_LINES: usize = 2;

/// Characters shown per line in a timeline.
const TIMELINE_EXCERPT_WIDTH: usize = 100;

/// The indented excerpt lines under an execution in a timeline: its code,
/// stdout and (when not empty) stderr, or why they are not there.
fn execution_excerpt(record: &ExecutionRecord) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, content) in [
        ("code", &record.code),
        ("stdout", &record.stdout),
        ("stderr", &record.stderr),
    ] {
        let label = format!("{:>35}{name:<7}", "");
        match content.state {
            "kept" => {
                let text = content.text.as_deref().unwrap_or_default();
                if text.is_empty() {
                    if name != "stderr" {
                        lines.push(format!("{label}(empty)"));
                    }
                    continue;
                }
                let shown = render::excerpt_lines(
                    text,
                    content.excerpt,
                    TIMELINE_EXCERPT_LINES,
                    TIMELINE_EXCERPT_WIDTH,
                );
                for (index, line) in shown.iter().enumerate() {
                    if index == 0 {
                        lines.push(format!("{label}{line}"));
                    } else {
                        lines.push(format!("{:>42}{line}", ""));
                    }
                }
            }
            "erased" => lines.push(format!("{label}(erased)")),
            _ if content.bytes == 0 && name == "stderr" => {}
            _ => lines.push(format!("{label}(not kept)")),
        }
    }
    lines
}
