//! The JSON documents that describe a session and an execution, one shape
//! for every front end: the CLI's `--json`, the HTTP API, the MCP tools.
//! Their fields are listed in `docs/json.md` (generated, checked by a
//! test).

use serde_json::{Value, json};

use sandlog_projections::query::SessionSummary;

/// The `session show --json` document (the seed metadata shape plus the
/// projection's fields), served by the CLI and the HTTP API alike.
pub fn session_document(session: &SessionSummary) -> Value {
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
        "group": session.group,
        "max_size": session.max_size,
        "readonly": session.readonly,
        "node": session.node,
    })
}

/// The `exec --json` document, served by the CLI and (with the warm
/// kernel's fields) the HTTP API.
pub fn execution_document(execution: &crate::Execution) -> Value {
    json!({
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
    })
}
