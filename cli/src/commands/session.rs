//! `session create|list|show|timeline|delete`.

use sandlog_runtime::Engine;
use sandlog_runtime::core::human::format_size;
use sandlog_runtime::history::ExecutionRecord;
use sandlog_runtime::projections::SessionStatus;
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

/// The `session show --json` document: the seed metadata shape plus the
/// projection's fields.
pub fn session_document(
    session: &sandlog_runtime::projections::SessionSummary,
) -> serde_json::Value {
    json!({
        "session_id": session.session_id,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "version": 1,
        "status": session.status,
        "exec_count": session.exec_count,
        "last_outcome": session.last_outcome,
        "bytes": session.bytes,
        "files": session.file_count,
        "legacy": session.legacy,
        "labels": session.labels,
        "held": session.held.is_some(),
        "hold_reason": session.held,
    })
}

pub fn run(engine: &Engine, command: SessionCommand, output: &Output) -> Result<u8, CliError> {
    match command {
        SessionCommand::Create { labels } => {
            let session = engine.create_session(labels.into_iter().collect())?;
            if output.json {
                output.json(&json!({"session_id": session.session_id}))?;
            } else {
                output.line(&session.session_id.to_string())?;
            }
        }
        SessionCommand::Sync { id } => return super::native::sync(engine, &id, output),
        SessionCommand::List { status: wanted } => {
            let sessions = engine.sessions(wanted.map(status))?;
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
        SessionCommand::Delete { id, reason, wait } => {
            let wait =
                sandlog_runtime::core::human::parse_duration(&wait).map_err(crate::exit::usage)?;
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
            let cut = super::forensics::parse_cut(engine, &at)?;
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
