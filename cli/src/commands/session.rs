//! `session create|list|show|timeline|delete`.

use sandlog_runtime::Engine;
use sandlog_runtime::core::human::format_size;
use sandlog_runtime::projections::SessionStatus;
use serde_json::json;

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
            let session = engine.session(super::session_id(&id)?)?;
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
            let events = engine.session_events(super::session_id(&id)?)?;
            if output.json {
                let documents: Vec<_> = events
                    .iter()
                    .map(|envelope| {
                        json!({
                            "position": envelope.position,
                            "version": envelope.version,
                            "recorded_at": envelope.recorded_at,
                            "kind": envelope.kind,
                            "actor": envelope.actor,
                            "description": render::describe_exact(envelope),
                            "payload": serde_json::from_slice::<serde_json::Value>(&envelope.payload).unwrap_or(serde_json::Value::Null),
                            "hash": envelope.hash,
                        })
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
                }
            }
        }
        SessionCommand::Delete { id, reason, wait } => {
            let wait =
                sandlog_runtime::core::human::parse_duration(&wait).map_err(crate::exit::usage)?;
            let report = engine.delete_session_waiting(super::session_id(&id)?, &reason, wait)?;
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
    }
    Ok(0)
}
