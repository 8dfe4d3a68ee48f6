//! Events as OCSF records (the Open Cybersecurity Schema Framework, version
//! [`OCSF_VERSION`]), for SIEMs: `sandlog log --format ocsf`.
//!
//! | sandlog event | OCSF class (`class_uid`) | activity |
//! |---|---|---|
//! | `session.executed` | Process Activity (1007) | Launch |
//! | `native.started` / `native.completed` | Process Activity (1007) | Launch / Terminate |
//! | `kernel.restarted` / `kernel.evicted` | Process Activity (1007) | Terminate |
//! | `file.written` / `file.deleted` | File System Activity (1001) | Update / Delete |
//! | `session.created` / `.adopted` / `.forked` | Entity Management (3004) | Create |
//! | `session.held` / `.released` | Entity Management (3004) | Update |
//! | `session.pruned` / `.deleted` | Entity Management (3004) | Delete |
//! | anything else (intents, prune runs, settings, ...) | Base Event (0) | Other |
//!
//! Entity Management records declare the Host profile
//! (`metadata.profiles`), whose `actor` and `device` they carry.
//! Every record carries the event's position as `metadata.sequence`, its
//! id as `metadata.uid`, its correlation id as `metadata.correlation_uid`,
//! and under `unmapped.sandlog` the position, the chain hash, the previous
//! hash, the stream and the payload as recorded: a SIEM record can be
//! proven against the log (`sandlog prove`) by its position and hash.
//! A file's blake3 is a fingerprint with `algorithm_id` 99 (Other,
//! `algorithm: "BLAKE3"`), which OCSF has no id for.

use sandlog_core::{Envelope, StreamId};
use serde_json::{Map, Value, json};

/// The OCSF schema version the records follow.
pub const OCSF_VERSION: &str = "1.1.0";

const PROCESS_ACTIVITY: (u64, &str) = (1007, "Process Activity");
const FILE_ACTIVITY: (u64, &str) = (1001, "File System Activity");
const ENTITY_MANAGEMENT: (u64, &str) = (3004, "Entity Management");
const BASE_EVENT: (u64, &str) = (0, "Base Event");

/// One event as an OCSF record. `node` names the host (the engine's node)
/// as the record's device.
pub fn record(envelope: &Envelope, node: &str) -> Value {
    let payload: Value = serde_json::from_slice(&envelope.payload).unwrap_or(Value::Null);
    let field = |name: &str| payload.get(name).cloned().unwrap_or(Value::Null);
    let session = match &envelope.stream {
        StreamId::Session(session_id) => Some(session_id.to_string()),
        _ => None,
    };
    let text = |value: Value| value.as_str().map(str::to_owned);
    let mut fields = Map::new();
    let (class, activity_id, activity_name) = match envelope.kind.as_str() {
        "session.executed" => {
            let outcome = text(field("outcome")).unwrap_or_default();
            fields.insert(
                "process".into(),
                json!({
                    "uid": envelope.event_id.to_string(),
                    "name": field("runtime"),
                }),
            );
            insert_some(&mut fields, "exit_code", field("exit_code"));
            insert_some(
                &mut fields,
                "duration",
                micros_to_millis(&field("duration_us")),
            );
            status(&mut fields, outcome == "ok", &outcome);
            (PROCESS_ACTIVITY, 1, "Launch")
        }
        "native.started" => {
            let argv: Vec<String> = field("argv")
                .as_array()
                .map(|args| args.iter().filter_map(|arg| text(arg.clone())).collect())
                .unwrap_or_default();
            let mut process = json!({
                "uid": envelope.event_id.to_string(),
                "cmd_line": argv.join(" "),
            });
            if let Some(name) = argv.first() {
                set(&mut process, "name", json!(name));
            }
            fields.insert("process".into(), process);
            (PROCESS_ACTIVITY, 1, "Launch")
        }
        "native.completed" => {
            // The process is the one `native.started` launched: the
            // completion's cause.
            let launched = envelope
                .causation_id
                .map_or_else(|| envelope.event_id.to_string(), |cause| cause.to_string());
            fields.insert("process".into(), json!({ "uid": launched }));
            let exit_code = field("exit_code");
            insert_some(&mut fields, "exit_code", exit_code.clone());
            insert_some(
                &mut fields,
                "duration",
                micros_to_millis(&field("duration_us")),
            );
            let ok = exit_code.as_i64() == Some(0);
            let detail = match (exit_code.as_i64(), field("signal").as_i64()) {
                (Some(code), _) => format!("exited {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "ended".to_owned(),
            };
            status(&mut fields, ok, &detail);
            (PROCESS_ACTIVITY, 2, "Terminate")
        }
        "kernel.restarted" | "kernel.evicted" => {
            fields.insert(
                "process".into(),
                json!({ "uid": envelope.event_id.to_string(), "name": "python kernel" }),
            );
            if let Some(reason) = text(field("reason")) {
                fields.insert("status_detail".into(), json!(reason));
            }
            (PROCESS_ACTIVITY, 2, "Terminate")
        }
        "file.written" | "file.deleted" => {
            let path = text(field("path")).unwrap_or_default();
            let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
            let mut file =
                json!({ "name": name, "path": path, "type_id": 1, "type": "Regular File" });
            let activity = if envelope.kind == "file.written" {
                set(&mut file, "size", field("size"));
                if let Some(hash) = text(field("blake3")) {
                    set(
                        &mut file,
                        "hashes",
                        json!([{ "algorithm_id": 99, "algorithm": "BLAKE3", "value": hash }]),
                    );
                }
                (FILE_ACTIVITY, 3, "Update")
            } else {
                (FILE_ACTIVITY, 4, "Delete")
            };
            fields.insert("file".into(), file);
            activity
        }
        kind @ ("session.created" | "session.adopted" | "session.forked" | "session.held"
        | "session.released" | "session.pruned" | "session.deleted") => {
            let mut entity = json!({ "type": "sandlog session" });
            if let Some(session) = &session {
                set(&mut entity, "uid", json!(session));
            }
            if kind == "session.created" {
                let mut data = Map::new();
                for name in ["labels", "group", "max_size", "node"] {
                    if let Some(value) = payload.get(name).filter(|value| !value.is_null()) {
                        data.insert(name.into(), value.clone());
                    }
                }
                set(&mut entity, "data", Value::Object(data));
            }
            fields.insert("entity".into(), entity);
            match kind {
                "session.held" | "session.released" => (ENTITY_MANAGEMENT, 3, "Update"),
                "session.pruned" | "session.deleted" => (ENTITY_MANAGEMENT, 4, "Delete"),
                _ => (ENTITY_MANAGEMENT, 1, "Create"),
            }
        }
        _ => (BASE_EVENT, 99, "Other"),
    };
    let (class_uid, class_name) = class;
    if class_uid != BASE_EVENT.0 {
        let mut actor = json!({ "user": { "name": envelope.actor } });
        if let Some(session) = &session {
            set(&mut actor, "session", json!({ "uid": session }));
        }
        fields.insert("actor".into(), actor);
        fields.insert(
            "device".into(),
            json!({ "type_id": 0, "type": "Unknown", "hostname": node }),
        );
    }
    let category = match class_uid / 1000 {
        1 => (1, "System Activity"),
        3 => (3, "Identity & Access Management"),
        _ => (0, "Uncategorized"),
    };
    let activity_name = if class_uid == BASE_EVENT.0 {
        envelope.kind.clone()
    } else {
        activity_name.to_owned()
    };
    let time = envelope.recorded_at.unix_micros().div_euclid(1000);
    let mut metadata = json!({
        "version": OCSF_VERSION,
        "product": {
            "name": "sandlog",
            "vendor_name": "sandlog",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "uid": envelope.event_id.to_string(),
        "sequence": envelope.position.0,
        "log_name": envelope.stream.to_string(),
        "event_code": envelope.kind,
        "logged_time": time,
    });
    if let Some(correlation) = envelope.correlation_id {
        set(
            &mut metadata,
            "correlation_uid",
            json!(correlation.to_string()),
        );
    }
    if class_uid == ENTITY_MANAGEMENT.0 {
        // Outside the System Activity classes, `actor` and `device` are
        // the Host profile's.
        set(&mut metadata, "profiles", json!(["host"]));
    }
    fields.insert("metadata".into(), metadata);
    fields.insert("time".into(), json!(time));
    fields.insert("class_uid".into(), json!(class_uid));
    fields.insert("class_name".into(), json!(class_name));
    fields.insert("category_uid".into(), json!(category.0));
    fields.insert("category_name".into(), json!(category.1));
    fields.insert("activity_id".into(), json!(activity_id));
    fields.insert("activity_name".into(), json!(activity_name));
    fields.insert("type_uid".into(), json!(class_uid * 100 + activity_id));
    fields.insert(
        "type_name".into(),
        json!(format!("{class_name}: {activity_name}")),
    );
    fields.insert("severity_id".into(), json!(1));
    fields.insert("severity".into(), json!("Informational"));
    fields.insert(
        "unmapped".into(),
        json!({
            "sandlog": {
                "position": envelope.position.0,
                "hash": envelope.hash.to_hex(),
                "prev_hash": envelope.prev_hash.to_hex(),
                "stream": envelope.stream.to_string(),
                "version": envelope.version.0,
                "kind": envelope.kind,
                "schema": envelope.schema,
                "event_id": envelope.event_id.to_string(),
                "causation_id": envelope.causation_id.map(|cause| cause.to_string()),
                "actor": envelope.actor,
                "payload": payload,
            }
        }),
    );
    Value::Object(fields)
}

/// Sets `status_id` (1 Success, 2 Failure), `status` and `status_detail`.
fn status(fields: &mut Map<String, Value>, ok: bool, detail: &str) {
    let (id, name) = if ok { (1, "Success") } else { (2, "Failure") };
    fields.insert("status_id".into(), json!(id));
    fields.insert("status".into(), json!(name));
    if !detail.is_empty() {
        fields.insert("status_detail".into(), json!(detail));
    }
}

/// Sets a field of a JSON object (`value` is always one here).
fn set(value: &mut Value, name: &str, field: Value) {
    if let Value::Object(fields) = value {
        fields.insert(name.into(), field);
    }
}

fn insert_some(fields: &mut Map<String, Value>, name: &str, value: Value) {
    if !value.is_null() {
        fields.insert(name.into(), value);
    }
}

fn micros_to_millis(value: &Value) -> Value {
    value
        .as_u64()
        .map_or(Value::Null, |micros| json!(micros / 1000))
}
