//! The HTTP API's handlers, one per route of `api::routes`: each checks
//! its input, makes its engine calls through [`blocking`], and answers
//! JSON (`docs/api.md`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sandlog_runtime::core::{
    Position, PrunePolicy, PruneRequest, SessionId, StreamId, Timestamp, WorkspacePath,
};
use sandlog_runtime::eventstore::LogFilter;
use sandlog_runtime::projections::SessionStatus;
use sandlog_runtime::sandbox::{CancelFlag, OutputStream, RunSignals};
use sandlog_runtime::{
    Engine, ExecRequest, LimitOverrides, RegisteredModules, Runtime, RuntimeError,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::executor::ExecOutcome;
use crate::limits::{
    LOG_EVENTS_MAX, LOG_FOLLOW_DURATION_MAX, LOG_FOLLOW_POLL, REQUEST_BODY_BYTES_MAX,
    RESPONSE_DOCUMENT_BYTES_MAX, RESPONSE_FILE_BYTES_MAX,
};
use sandlog_runtime::documents::{execution_document, session_document};

use crate::route::{JSON, NDJSON};
use crate::state::{AppState, blocking};

fn session_id(text: &str) -> Result<SessionId, ApiError> {
    SessionId::parse(text).map_err(|error| ApiError::from(RuntimeError::Invalid(error)))
}

fn workspace_path(text: &str) -> Result<WorkspacePath, ApiError> {
    WorkspacePath::parse(text).map_err(|error| ApiError::from(RuntimeError::Invalid(error)))
}

fn json_body<T>(body: Result<axum::Json<T>, JsonRejection>) -> Result<T, ApiError> {
    match body {
        Ok(axum::Json(value)) => Ok(value),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            Err(ApiError::too_large(format!(
                "the request body is larger than REQUEST_BODY_BYTES_MAX = {REQUEST_BODY_BYTES_MAX} bytes"
            )))
        }
        Err(rejection) => Err(ApiError {
            status: rejection.status(),
            class: ApiError::class_of_status(rejection.status()),
            kind: "bad_request".to_owned(),
            message: rejection.body_text(),
            hint: "send a JSON body as /openapi.json describes",
        }),
    }
}

fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(value)| value)
        .map_err(|rejection| ApiError::bad_request("bad_query", rejection.body_text()))
}

fn ok_json(value: &impl serde::Serialize) -> Result<Response, ApiError> {
    Ok(axum::Json(value).into_response())
}

/// The `exec --json` document plus `warm` and `state_lost`.
pub fn exec_document(outcome: &ExecOutcome) -> Value {
    let mut document = execution_document(&outcome.execution);
    if let Value::Object(fields) = &mut document {
        fields.insert("warm".into(), json!(outcome.warm));
        fields.insert("state_lost".into(), json!(outcome.state_lost));
        fields.insert("state_lost_reason".into(), json!(outcome.state_lost_reason));
    }
    document
}

/// A session's events for people and agents: payloads decoded.
pub fn timeline_document(events: &[sandlog_runtime::core::Envelope]) -> Vec<Value> {
    events
        .iter()
        .map(|envelope| {
            json!({
                "position": envelope.position,
                "version": envelope.version,
                "recorded_at": envelope.recorded_at,
                "kind": envelope.kind,
                "actor": envelope.actor,
                "payload": serde_json::from_slice::<Value>(&envelope.payload).unwrap_or(Value::Null),
                "hash": envelope.hash,
            })
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    group: Option<String>,
    max_size: Option<String>,
}

pub(crate) async fn create_session(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    // An empty body is a session without labels.
    let body: CreateBody = if body.is_empty() {
        CreateBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|error| ApiError::bad_request("bad_request", format!("body: {error}")))?
    };
    let max_size = body
        .max_size
        .as_deref()
        .map(sandlog_runtime::sessions::parse_max_size)
        .transpose()?;
    let session = blocking(&state, move |engine| {
        Ok(engine.create_session_with(sandlog_runtime::NewSession {
            labels: body.labels,
            group: body.group,
            max_size,
            ..Default::default()
        })?)
    })
    .await?;
    let mut response = axum::Json(json!({"session_id": session.session_id})).into_response();
    *response.status_mut() = StatusCode::CREATED;
    Ok(response)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    status: Option<String>,
    group: Option<String>,
}

pub(crate) async fn list_sessions(
    State(state): State<AppState>,
    params: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let params = query(params)?;
    let status = match params.status.as_deref() {
        None => None,
        Some("active") => Some(SessionStatus::Active),
        Some("pruning") => Some(SessionStatus::Pruning),
        Some("pruned") => Some(SessionStatus::Pruned),
        Some("deleting") => Some(SessionStatus::Deleting),
        Some("deleted") => Some(SessionStatus::Deleted),
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_query",
                format!("status {other:?}: expected active, pruning, pruned, deleting or deleted"),
            ));
        }
    };
    let group = params.group;
    let sessions = blocking(&state, move |engine| {
        Ok(engine.sessions_in(status, group.as_deref())?)
    })
    .await?;
    let documents: Vec<Value> = sessions.iter().map(session_document).collect();
    ok_json(&documents)
}

pub(crate) async fn show_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let session = blocking(&state, move |engine| Ok(engine.session(session_id)?)).await?;
    ok_json(&session_document(&session))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteQuery {
    reason: Option<String>,
}

pub(crate) async fn delete_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
    params: Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let reason = query(params)?
        .reason
        .unwrap_or_else(|| "deleted through the API".to_owned());
    let executor = state.executor.clone();
    let report = blocking(&state, move |engine| {
        executor.session_ending(engine, session_id);
        Ok(engine.delete_session(session_id, &reason)?)
    })
    .await?;
    ok_json(&json!({"session_id": report.session_id, "reclaimed_bytes": report.reclaimed_bytes}))
}

pub(crate) async fn timeline(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let events = blocking(&state, move |engine| Ok(engine.session_events(session_id)?)).await?;
    ok_json(&timeline_document(&events))
}

/// The body of `POST /v1/sessions/{id}/exec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// The code.
    pub code: String,
    /// `python` (default), `javascript`, or the name of a module the
    /// operator registered; never a path.
    pub runtime: Option<String>,
    /// Wall-clock limit, milliseconds.
    pub timeout_ms: Option<u64>,
    /// Fuel limit.
    pub fuel: Option<u64>,
    /// Linear memory limit, bytes.
    pub memory_bytes: Option<u64>,
}

impl ExecBody {
    /// The engine's request; the runtime must be one of `modules` or a
    /// built-in one.
    pub fn request(self, modules: &RegisteredModules) -> Result<ExecRequest, RuntimeError> {
        Ok(ExecRequest {
            runtime: Runtime::named(self.runtime.as_deref().unwrap_or("python"), modules)?,
            code: self.code.into_bytes(),
            limits: LimitOverrides {
                fuel: self.fuel,
                timeout: self.timeout_ms.map(Duration::from_millis),
                memory_bytes: self.memory_bytes,
                ..LimitOverrides::default()
            },
        })
    }
}

pub(crate) async fn exec(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<axum::Json<ExecBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let request = json_body(body)?.request(&state.modules)?;
    if let Some(format) = StreamFormat::accepted(&headers) {
        return exec_streamed(state, session_id, request, format).await;
    }
    let executor = state.executor.clone();
    let outcome = blocking(&state, move |engine| {
        Ok(executor.execute(engine, session_id, &request)?)
    })
    .await?;
    ok_json(&exec_document(&outcome))
}

/// How a streamed execution's frames are written: asked for with
/// `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamFormat {
    /// `text/event-stream`: `event: <type>` and one `data:` line a frame.
    EventStream,
    /// `application/x-ndjson` (or `application/jsonl`): a JSON object a
    /// line, its type in `"type"`.
    JsonLines,
}

impl StreamFormat {
    /// The streamed format `Accept` asks for, if any (the first listed).
    fn accepted(headers: &HeaderMap) -> Option<StreamFormat> {
        let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
        accept.split(',').find_map(|part| {
            let media = part.split(';').next().unwrap_or_default().trim();
            match media.to_ascii_lowercase().as_str() {
                "text/event-stream" => Some(StreamFormat::EventStream),
                "application/x-ndjson" | "application/jsonl" | "application/json-lines" => {
                    Some(StreamFormat::JsonLines)
                }
                _ => None,
            }
        })
    }

    fn content_type(self) -> &'static str {
        match self {
            StreamFormat::EventStream => "text/event-stream",
            StreamFormat::JsonLines => NDJSON,
        }
    }

    /// One frame: `value` (an object) with `"type": kind`. serde_json
    /// writes no raw newline, so a frame is one `data:` line.
    fn frame(self, kind: &str, mut value: Value) -> String {
        if let Value::Object(fields) = &mut value {
            fields.insert("type".to_owned(), Value::from(kind));
        }
        match self {
            StreamFormat::EventStream => format!("event: {kind}\ndata: {value}\n\n"),
            StreamFormat::JsonLines => format!("{value}\n"),
        }
    }
}

/// A live-output chunk as a frame's fields: its text in `data`, or, when
/// the chunk is not valid UTF-8 by itself (a character split between two
/// writes), its bytes in `data_base64`.
pub(crate) fn output_fields(stream: OutputStream, chunk: &[u8]) -> Value {
    match std::str::from_utf8(chunk) {
        Ok(text) => json!({"stream": stream.as_str(), "data": text}),
        Err(_) => json!({
            "stream": stream.as_str(),
            "data_base64": base64::engine::general_purpose::STANDARD.encode(chunk),
        }),
    }
}

/// `POST /v1/sessions/{id}/exec` streamed: `output` frames while the guest
/// runs (exactly the recorded output, in order), then one `result` frame
/// (the usual document) or one `error` frame. A session that does not
/// exist is refused before the stream starts, with its status. The channel
/// is unbounded, but what goes into it is bounded by the execution's
/// output caps. A client that goes away does not stop the run: it is
/// recorded as any other.
async fn exec_streamed(
    state: AppState,
    session_id: SessionId,
    request: ExecRequest,
    format: StreamFormat,
) -> Result<Response, ApiError> {
    blocking(&state, move |engine| Ok(engine.session(session_id)?)).await?;
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<String>();
    let output = sender.clone();
    let signals = RunSignals {
        cancel: CancelFlag::new(),
        on_output: Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            // A client gone: the run goes on and is recorded.
            let _ = output.send(format.frame("output", output_fields(stream, chunk)));
        })),
    };
    let executor = state.executor.clone();
    let run_state = state.clone();
    tokio::spawn(async move {
        let result = blocking(&run_state, move |engine| {
            Ok(executor.execute_signalled(engine, session_id, &request, &signals)?)
        })
        .await;
        let last = match result {
            Ok(outcome) => format.frame("result", exec_document(&outcome)),
            Err(error) => format.frame("error", error.body()),
        };
        let _ = sender.send(last);
    });
    let stream = futures_util::stream::poll_fn(move |context| {
        receiver
            .poll_recv(context)
            .map(|frame| frame.map(Ok::<_, std::io::Error>))
    });
    Ok((
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from_stream(stream),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilesQuery {
    pattern: Option<String>,
}

pub(crate) async fn list_files(
    State(state): State<AppState>,
    Path(id): Path<String>,
    params: Result<Query<FilesQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let pattern = query(params)?.pattern;
    let files = blocking(&state, move |engine| {
        Ok(engine.list_files(session_id, pattern.as_deref())?)
    })
    .await?;
    let documents: Vec<Value> = files
        .iter()
        .map(|file| json!({"path": file.path, "size": file.size, "blake3": file.blake3, "updated_at": file.updated_at}))
        .collect();
    ok_json(&documents)
}

pub(crate) async fn read_file(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let path = workspace_path(&path)?;
    let bytes = blocking(&state, move |engine| {
        // A first look at the size, so a huge file is refused unread; the
        // read itself goes through the engine's workspace handle.
        let on_disk = engine
            .layout()
            .workspace(session_id)
            .join(path.as_std_path());
        if let Ok(metadata) = std::fs::symlink_metadata(&on_disk)
            && metadata.is_file()
            && metadata.len() > RESPONSE_FILE_BYTES_MAX
        {
            return Err(file_too_large(&path, metadata.len()));
        }
        let bytes = engine.read_file(session_id, &path)?;
        if bytes.len() as u64 > RESPONSE_FILE_BYTES_MAX {
            return Err(file_too_large(&path, bytes.len() as u64));
        }
        Ok(bytes)
    })
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Bytes::from(bytes),
    )
        .into_response())
}

fn file_too_large(path: &WorkspacePath, size: u64) -> ApiError {
    ApiError::too_large(format!(
        "{path} is {size} bytes; one response carries at most RESPONSE_FILE_BYTES_MAX = {RESPONSE_FILE_BYTES_MAX} bytes (read it with `sandlog files cat`)"
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteQuery {
    #[serde(default)]
    overwrite: bool,
}

pub(crate) async fn write_file(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
    params: Result<Query<WriteQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let path = workspace_path(&path)?;
    let overwrite = query(params)?.overwrite;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(format!(
                "the request body is larger than REQUEST_BODY_BYTES_MAX = {REQUEST_BODY_BYTES_MAX} bytes; write larger files with `sandlog files put`, which streams"
            ))
        } else {
            ApiError::bad_request("bad_request", rejection.body_text())
        }
    })?;
    let file = blocking(&state, move |engine| {
        Ok(engine.write_file(session_id, &path, &body, overwrite)?)
    })
    .await?;
    ok_json(&json!({"path": file.path, "size": file.size, "blake3": file.blake3}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteFileQuery {
    #[serde(default)]
    recursive: bool,
}

pub(crate) async fn delete_file(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
    params: Result<Query<DeleteFileQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let path = workspace_path(&path)?;
    let recursive = query(params)?.recursive;
    let deleted = blocking(&state, move |engine| {
        Ok(engine.delete_file(session_id, &path, recursive)?)
    })
    .await?;
    ok_json(&json!({"deleted": deleted}))
}

pub(crate) async fn report(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let (html, verify_ok) = blocking(&state, move |engine| {
        let mut html = Vec::new();
        let summary = engine.write_report(session_id, &mut html)?;
        if html.len() > RESPONSE_DOCUMENT_BYTES_MAX {
            return Err(ApiError::too_large(format!(
                "the report is {} bytes; one response carries at most RESPONSE_DOCUMENT_BYTES_MAX = {RESPONSE_DOCUMENT_BYTES_MAX} (write it with `sandlog report`)",
                html.len()
            )));
        }
        Ok((html, summary.verify_ok))
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::HeaderName::from_static("x-sandlog-verify-ok"),
                if verify_ok { "true" } else { "false" },
            ),
        ],
        Bytes::from(html),
    )
        .into_response())
}

pub(crate) async fn evidence(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session_id = session_id(&id)?;
    let bytes = blocking(&state, move |engine| {
        let bundle = engine.export_bundle(session_id, None)?;
        let bytes = serde_json::to_vec(&bundle)
            .map_err(|error| ApiError::internal(format!("encoding the bundle: {error}")))?;
        if bytes.len() > RESPONSE_DOCUMENT_BYTES_MAX {
            return Err(ApiError::too_large(format!(
                "the bundle is {} bytes; one response carries at most RESPONSE_DOCUMENT_BYTES_MAX = {RESPONSE_DOCUMENT_BYTES_MAX} (write it with `sandlog evidence export`)",
                bytes.len()
            )));
        }
        Ok(bytes)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, JSON)], Bytes::from(bytes)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    session: Option<String>,
    kind: Option<String>,
    since: Option<String>,
    until: Option<String>,
    from: Option<u64>,
    limit: Option<u64>,
    correlation: Option<String>,
    #[serde(default)]
    follow: bool,
}

/// Events per page a following stream reads.
const LOG_FOLLOW_PAGE: u64 = 1_000;

pub(crate) async fn log(
    State(state): State<AppState>,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let params = query(params)?;
    let time = |text: Option<&str>| {
        text.map(Timestamp::parse)
            .transpose()
            .map_err(|error| ApiError::from(RuntimeError::Invalid(error)))
    };
    let filter = LogFilter {
        stream: params
            .session
            .as_deref()
            .map(session_id)
            .transpose()?
            .map(StreamId::Session),
        kinds: params.kind.into_iter().collect(),
        since: time(params.since.as_deref())?,
        until: time(params.until.as_deref())?,
        from: params.from.map(Position),
        to: None,
        limit: None,
        correlation: params
            .correlation
            .as_deref()
            .map(sandlog_runtime::core::correlation_id)
            .transpose()
            .map_err(|error| ApiError::from(RuntimeError::Invalid(error)))?,
    };
    if params.follow {
        return Ok(follow(state, filter, params.limit));
    }
    let limit = params.limit.unwrap_or(LOG_EVENTS_MAX);
    if limit > LOG_EVENTS_MAX {
        return Err(ApiError::bad_request(
            "bad_query",
            format!(
                "limit {limit}: one response carries at most LOG_EVENTS_MAX = {LOG_EVENTS_MAX} events; page with from"
            ),
        ));
    }
    let (body, next) = blocking(&state, move |engine| {
        let (lines, last) = page(
            engine,
            LogFilter {
                limit: Some(limit),
                ..filter
            },
        )?;
        let full = lines.len() as u64 == limit;
        Ok((lines.concat(), last.filter(|_| full).map(|last| last + 1)))
    })
    .await?;
    let mut response = ([(header::CONTENT_TYPE, NDJSON)], body).into_response();
    if let Some(next) = next {
        // The page was full: more may follow from here.
        if let Ok(value) = HeaderValue::from_str(&next.to_string()) {
            response.headers_mut().insert(
                header::HeaderName::from_static("x-sandlog-next-from"),
                value,
            );
        }
    }
    Ok(response)
}

/// One page of the log as JSON Lines (each ending in a newline), and the
/// last position in it.
fn page(engine: &Engine, filter: LogFilter) -> Result<(Vec<String>, Option<u64>), ApiError> {
    let mut lines = Vec::new();
    let mut last = None;
    for envelope in engine.log(filter) {
        let envelope = envelope?;
        last = Some(envelope.position.0);
        let mut line = serde_json::to_string(&envelope)
            .map_err(|error| ApiError::internal(format!("encoding an event: {error}")))?;
        line.push('\n');
        lines.push(line);
    }
    Ok((lines, last))
}

/// Where a following log stream is.
struct Follow {
    state: AppState,
    filter: LogFilter,
    buffered: VecDeque<String>,
    remaining: u64,
    deadline: Instant,
}

/// A streamed response: the events matching `filter`, then new ones as
/// they are appended, until `limit` events, [`LOG_FOLLOW_DURATION_MAX`], or
/// shutdown.
fn follow(state: AppState, filter: LogFilter, limit: Option<u64>) -> Response {
    let start = Follow {
        state,
        filter,
        buffered: VecDeque::new(),
        remaining: limit.unwrap_or(u64::MAX),
        deadline: Instant::now() + LOG_FOLLOW_DURATION_MAX,
    };
    let stream = futures_util::stream::unfold(start, |mut follow| async move {
        loop {
            if follow.remaining == 0 {
                return None;
            }
            if let Some(line) = follow.buffered.pop_front() {
                follow.remaining -= 1;
                return Some((Ok::<_, std::io::Error>(line), follow));
            }
            if Instant::now() >= follow.deadline || *follow.state.stopping.borrow() {
                return None;
            }
            let filter = LogFilter {
                limit: Some(LOG_FOLLOW_PAGE.min(follow.remaining)),
                ..follow.filter.clone()
            };
            match blocking(&follow.state, move |engine| page(engine, filter)).await {
                Ok((lines, Some(last))) => {
                    follow.filter.from = Some(Position(last + 1));
                    follow.buffered.extend(lines);
                }
                Ok((_, None)) => {
                    let mut stopping = follow.state.stopping.clone();
                    tokio::select! {
                        () = tokio::time::sleep(LOG_FOLLOW_POLL) => {}
                        _ = stopping.changed() => {}
                    }
                }
                Err(error) => {
                    // The stream's status is already sent: the error is the
                    // last line, as a JSON object with an "error" field.
                    follow.remaining = 1;
                    follow.buffered.push_back(format!("{}\n", error.body()));
                }
            }
        }
    });
    ([(header::CONTENT_TYPE, NDJSON)], Body::from_stream(stream)).into_response()
}

pub(crate) async fn verify(State(state): State<AppState>) -> Result<Response, ApiError> {
    let result = blocking(&state, move |engine| Ok(engine.verify(None, &|_| {}))).await?;
    match result {
        Ok(outcome) => ok_json(&outcome),
        Err(error) if error.is_integrity() => {
            let mut response = axum::Json(json!({
                "ok": false,
                "error": error.kind(),
                "message": error.to_string(),
            }))
            .into_response();
            *response.status_mut() = StatusCode::OK;
            Ok(response)
        }
        Err(error) => Err(error.into()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PruneBody {
    older_than: Option<String>,
    #[serde(default)]
    dry_run: bool,
    max_deletions: Option<u64>,
    max_sessions: Option<u64>,
    max_bytes: Option<String>,
    group: Option<String>,
}

pub(crate) async fn prune(
    State(state): State<AppState>,
    body: Result<axum::Json<PruneBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    use sandlog_runtime::core::human::{parse_duration, parse_size};
    let body = json_body(body)?;
    let invalid = |error| ApiError::from(RuntimeError::Invalid(error));
    let policy = PrunePolicy::new(PruneRequest {
        older_than: body
            .older_than
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(invalid)?,
        max_deletions: body.max_deletions,
        max_sessions: body.max_sessions,
        max_total_bytes: body
            .max_bytes
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(invalid)?,
        group: body.group.clone(),
    })
    .map_err(invalid)?;
    let dry_run = body.dry_run;
    let report = blocking(&state, move |engine| {
        Ok(engine.prune(&policy, dry_run, &|_, _| {})?)
    })
    .await?;
    ok_json(&report)
}
