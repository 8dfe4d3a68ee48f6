//! `sandlog mcp`: a Model Context Protocol server on stdio (the official
//! Rust SDK, `rmcp`), so an LLM client can use sandlog as its sandbox with
//! the audit trail included. Tools: `create_session`, `execute` (also
//! offered as `execute_code`), `list_files`, `read_file`, `write_file`,
//! `timeline`. An engine error is a tool error (`isError: true`) whose text
//! is the engine's message; malformed arguments and unknown tools are
//! protocol errors.
//!
//! Stdout carries only the protocol: the engine's tracing goes to stderr.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use sandlog_runtime::core::{SessionId, WorkspacePath};
use sandlog_runtime::sandbox::{CancelFlag, OutputStream, RunSignals};
use sandlog_runtime::{Engine, RegisteredModules, RuntimeError};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::ServeError;
use crate::executor::Executor;
use crate::handlers::{ExecBody, exec_document, timeline_document};
use crate::limits::{
    BLOCKING_CALLS_MAX, MCP_TEXT_BYTES_MAX, MCP_TIMELINE_EVENTS_MAX, RESPONSE_FILE_BYTES_MAX,
    SHUTDOWN_WAIT_MAX,
};

/// The MCP server over one engine.
#[derive(Clone)]
pub struct SandlogMcp {
    engine: Arc<Engine>,
    executor: Arc<dyn Executor>,
    slots: Arc<Semaphore>,
    modules: Arc<RegisteredModules>,
}

/// Serves MCP on stdin/stdout until the client closes stdin; calls still
/// running then get [`SHUTDOWN_WAIT_MAX`] to finish and be recorded.
/// Clients may name the built-in runtimes and `modules` only.
pub fn run(
    engine: Arc<Engine>,
    executor: Arc<dyn Executor>,
    modules: RegisteredModules,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sandlog-mcp")
        .build()
        .map_err(ServeError::io("starting the MCP server's runtime"))?;
    let server = SandlogMcp::new(engine.clone(), executor.clone()).with_modules(modules);
    let (engine_for_upkeep, executor_for_upkeep) = (engine.clone(), executor.clone());
    let result = runtime.block_on(async move {
        crate::executor::spawn_upkeep(engine_for_upkeep, executor_for_upkeep);
        let service = server
            .serve(crate::mcp_lines::guard(
                tokio::io::stdin(),
                tokio::io::stdout(),
            ))
            .await
            .map_err(|error| ServeError::Mcp(error.to_string()))?;
        service
            .waiting()
            .await
            .map_err(|error| ServeError::Mcp(error.to_string()))?;
        Ok(())
    });
    runtime.shutdown_timeout(SHUTDOWN_WAIT_MAX);
    executor.shutdown(&engine);
    result
}

impl SandlogMcp {
    /// The server over `engine`, running executions with `executor`.
    pub fn new(engine: Arc<Engine>, executor: Arc<dyn Executor>) -> SandlogMcp {
        SandlogMcp {
            engine,
            executor,
            slots: Arc::new(Semaphore::new(BLOCKING_CALLS_MAX)),
            modules: Arc::new(RegisteredModules::new()),
        }
    }

    /// The same server, offering `modules` as runtimes beside the
    /// built-in ones.
    pub fn with_modules(mut self, modules: RegisteredModules) -> SandlogMcp {
        self.modules = Arc::new(modules);
        self
    }

    async fn blocking<F>(&self, work: F) -> Result<Value, ToolError>
    where
        F: FnOnce(&Engine, &dyn Executor) -> Result<Value, ToolError> + Send + 'static,
    {
        let permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ToolError::Tool("the server is shutting down".into()))?;
        let engine = self.engine.clone();
        let executor = self.executor.clone();
        // The engine's spans (an execution's) belong to the tool call's.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _entered = span.enter();
            work(&engine, executor.as_ref())
        })
        .await
        .map_err(|error| ToolError::Tool(format!("the engine call failed: {error}")))?
    }

    /// An execution with live output as `notifications/progress` (when the
    /// client gave a progress token) and the request's cancellation wired
    /// to the guest's cancel flag. Every notification is sent before the
    /// result: the forwarder is awaited.
    async fn execute_live(
        &self,
        session_id: SessionId,
        request: sandlog_runtime::ExecRequest,
        live: Live,
    ) -> Result<Value, ToolError> {
        let cancel = CancelFlag::new();
        let (sender, mut receiver) =
            tokio::sync::mpsc::unbounded_channel::<(OutputStream, Vec<u8>)>();
        let forwarder = live.progress.map(|(token, peer)| {
            tokio::spawn(async move {
                let mut count = 0_u32;
                while let Some((stream, chunk)) = receiver.recv().await {
                    count = count.saturating_add(1);
                    let message = crate::handlers::output_fields(stream, &chunk).to_string();
                    let param = ProgressNotificationParam::new(token.clone(), f64::from(count))
                        .with_message(message);
                    // A client gone: the run goes on and is recorded.
                    if peer.notify_progress(param).await.is_err() {
                        break;
                    }
                }
            })
        });
        let signals = RunSignals {
            cancel: cancel.clone(),
            on_output: forwarder.is_some().then(|| {
                let sender = sender.clone();
                let sink: sandlog_runtime::sandbox::OutputSink =
                    Arc::new(move |stream: OutputStream, chunk: &[u8]| {
                        let _ = sender.send((stream, chunk.to_vec()));
                    });
                sink
            }),
        };
        drop(sender);
        let watcher = tokio::spawn({
            let cancel = cancel.clone();
            let requested = live.cancelled;
            async move {
                requested.await;
                cancel.cancel();
            }
        });
        let result = self
            .blocking(move |engine, executor| {
                let outcome = executor.execute_signalled(engine, session_id, &request, &signals)?;
                Ok(exec_document(&outcome))
            })
            .await;
        watcher.abort();
        if let Some(forwarder) = forwarder {
            let _ = forwarder.await;
        }
        result
    }

    async fn call(&self, name: &str, arguments: Value, live: Live) -> Result<Value, ToolError> {
        match name {
            "create_session" => {
                let args: CreateArgs = parse(arguments)?;
                self.blocking(move |engine, _| {
                    let session = engine.create_session(args.labels)?;
                    Ok(json!({"session_id": session.session_id}))
                })
                .await
            }
            "execute" | "execute_code" => {
                let args: ExecuteArgs = parse(arguments)?;
                let session_id = session_id(&args.session_id)?;
                text_bound("code", &args.code)?;
                let request = ExecBody {
                    code: args.code,
                    runtime: args.runtime,
                    timeout_ms: args.timeout_ms,
                    fuel: None,
                    memory_bytes: None,
                }
                .request(&self.modules)?;
                self.execute_live(session_id, request, live).await
            }
            "list_files" => {
                let args: ListArgs = parse(arguments)?;
                let session_id = session_id(&args.session_id)?;
                self.blocking(move |engine, _| {
                    let files = engine.list_files(session_id, args.pattern.as_deref())?;
                    Ok(Value::Array(
                        files
                            .iter()
                            .map(|file| json!({"path": file.path, "size": file.size, "blake3": file.blake3}))
                            .collect(),
                    ))
                })
                .await
            }
            "read_file" => {
                let args: ReadArgs = parse(arguments)?;
                let session_id = session_id(&args.session_id)?;
                let path = workspace_path(&args.path)?;
                self.blocking(move |engine, _| {
                    let bytes = engine.read_file(session_id, &path)?;
                    if bytes.len() as u64 > RESPONSE_FILE_BYTES_MAX {
                        return Err(ToolError::Tool(format!(
                            "{path} is {} bytes; a tool result carries at most {RESPONSE_FILE_BYTES_MAX} (RESPONSE_FILE_BYTES_MAX)",
                            bytes.len()
                        )));
                    }
                    Ok(match String::from_utf8(bytes) {
                        Ok(text) => json!({"path": path, "encoding": "utf-8", "content": text}),
                        Err(error) => json!({
                            "path": path,
                            "encoding": "base64",
                            "content": base64::engine::general_purpose::STANDARD.encode(error.as_bytes()),
                        }),
                    })
                })
                .await
            }
            "write_file" => {
                let args: WriteArgs = parse(arguments)?;
                let session_id = session_id(&args.session_id)?;
                let path = workspace_path(&args.path)?;
                text_bound("content", &args.content)?;
                let bytes = match args.encoding.as_deref() {
                    None | Some("utf-8") => args.content.into_bytes(),
                    Some("base64") => base64::engine::general_purpose::STANDARD
                        .decode(args.content.as_bytes())
                        .map_err(|error| {
                            ToolError::Protocol(format!("content is not valid base64: {error}"))
                        })?,
                    Some(other) => {
                        return Err(ToolError::Protocol(format!(
                            "encoding {other:?}: expected \"utf-8\" or \"base64\""
                        )));
                    }
                };
                let overwrite = args.overwrite;
                self.blocking(move |engine, _| {
                    let file = engine.write_file(session_id, &path, &bytes, overwrite)?;
                    Ok(json!({"path": file.path, "size": file.size, "blake3": file.blake3}))
                })
                .await
            }
            "timeline" => {
                let args: SessionArgs = parse(arguments)?;
                let session_id = session_id(&args.session_id)?;
                self.blocking(move |engine, _| {
                    let events = engine.session_events(session_id)?;
                    let skip = events.len().saturating_sub(MCP_TIMELINE_EVENTS_MAX);
                    let shown = events.get(skip..).unwrap_or_default();
                    Ok(json!({
                        "events": timeline_document(shown),
                        "omitted_before": skip,
                    }))
                })
                .await
            }
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }
}

/// What a tool call brings besides its arguments: where to send progress
/// (the client's token and the peer), and the request's cancellation.
struct Live {
    progress: Option<(ProgressToken, Peer<RoleServer>)>,
    /// Resolves when the client cancels the request.
    cancelled: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

/// Why a call failed: a tool error is reported to the model as the tool's
/// result; a protocol error (bad arguments, unknown tool) as a JSON-RPC
/// error.
#[derive(Debug)]
enum ToolError {
    Tool(String),
    Protocol(String),
    UnknownTool(String),
}

impl From<RuntimeError> for ToolError {
    fn from(error: RuntimeError) -> ToolError {
        ToolError::Tool(format!("{} ({})", error, error.kind()))
    }
}

fn parse<T: for<'de> Deserialize<'de>>(arguments: Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments)
        .map_err(|error| ToolError::Protocol(format!("arguments: {error}")))
}

fn session_id(text: &str) -> Result<SessionId, ToolError> {
    SessionId::parse(text).map_err(|error| ToolError::from(RuntimeError::Invalid(error)))
}

fn workspace_path(text: &str) -> Result<WorkspacePath, ToolError> {
    WorkspacePath::parse(text).map_err(|error| ToolError::from(RuntimeError::Invalid(error)))
}

fn text_bound(name: &str, text: &str) -> Result<(), ToolError> {
    if text.len() > MCP_TEXT_BYTES_MAX {
        return Err(ToolError::Tool(format!(
            "{name} is {} bytes; a tool call takes at most {MCP_TEXT_BYTES_MAX} (MCP_TEXT_BYTES_MAX)",
            text.len()
        )));
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecuteArgs {
    session_id: String,
    code: String,
    runtime: Option<String>,
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    session_id: String,
    pattern: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    session_id: String,
    path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    session_id: String,
    path: String,
    content: String,
    encoding: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionArgs {
    session_id: String,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The tools, with their input schemas.
pub fn tools() -> Vec<Tool> {
    let session =
        json!({"type": "string", "description": "the session id (UUID) from create_session"});
    let execute_schema = schema(json!({
        "type": "object",
        "properties": {
            "session_id": session,
            "code": {"type": "string", "description": "Python source to run; the workspace is the current directory /app"},
            "runtime": {"type": "string", "description": "python (default) or javascript"},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "wall-clock limit"}
        },
        "required": ["session_id", "code"],
        "additionalProperties": false
    }));
    let execute_description = "Run code in a session's sandbox (WASI, only /app visible). Returns outcome, exit_code, stdout, stderr, files_written, files_deleted, warm; the run is recorded in the session's audit log.";
    vec![
        Tool::new(
            "create_session",
            "Create a sandbox session with an empty workspace; returns {session_id}.",
            schema(json!({
                "type": "object",
                "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}},
                "additionalProperties": false
            })),
        ),
        Tool::new("execute", execute_description, execute_schema.clone()),
        Tool::new(
            "execute_code",
            "The same as execute (an alias).",
            execute_schema,
        ),
        Tool::new(
            "list_files",
            "List a session's files: path, size, blake3.",
            schema(json!({
                "type": "object",
                "properties": {"session_id": session, "pattern": {"type": "string", "description": "a glob, e.g. **/*.csv"}},
                "required": ["session_id"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "read_file",
            "Read a file from a session's workspace: UTF-8 text, or base64 when it is not.",
            schema(json!({
                "type": "object",
                "properties": {"session_id": session, "path": {"type": "string", "description": "relative to /app"}},
                "required": ["session_id", "path"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "write_file",
            "Write a file into a session's workspace (recorded in the audit log).",
            schema(json!({
                "type": "object",
                "properties": {
                    "session_id": session,
                    "path": {"type": "string", "description": "relative to /app"},
                    "content": {"type": "string"},
                    "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
                    "overwrite": {"type": "boolean"}
                },
                "required": ["session_id", "path", "content"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "timeline",
            "A session's audit trail: every event in order (creation, executions with outcomes, file changes).",
            schema(json!({
                "type": "object",
                "properties": {"session_id": session},
                "required": ["session_id"],
                "additionalProperties": false
            })),
        ),
    ]
}

impl ServerHandler for SandlogMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandlog", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "sandlog: sandboxed code execution with an audit log. create_session, then execute code and read or write files in it; timeline shows what happened.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let live = Live {
            progress: context
                .meta
                .get_progress_token()
                .map(|token| (token, context.peer.clone())),
            cancelled: Box::pin(context.ct.clone().cancelled_owned()),
        };
        // One span a tool call (the engine's own spans, an execution's
        // among them, nest under it), with the tool and its result.
        let tool = if tools().iter().any(|tool| tool.name == request.name) {
            request.name.to_string()
        } else {
            "unknown".to_owned()
        };
        let span = tracing::info_span!(
            target: "sandlog::otel",
            "mcp.tool",
            otel.name = %format_args!("tools/call {tool}"),
            mcp.tool = tool.as_str(),
            mcp.result = tracing::field::Empty,
        );
        let answer = tracing::Instrument::instrument(
            self.call(&request.name, arguments, live),
            span.clone(),
        )
        .await;
        let result = match &answer {
            Ok(_) => "ok",
            Err(ToolError::Tool(_)) => "tool_error",
            Err(_) => "protocol_error",
        };
        span.record("mcp.result", result);
        match answer {
            Ok(value) => {
                Ok(CallToolResult::success(vec![ContentBlock::text(value.to_string())]).into())
            }
            Err(ToolError::Tool(message)) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into())
            }
            Err(ToolError::Protocol(message)) => Err(ErrorData::invalid_params(message, None)),
            Err(ToolError::UnknownTool(name)) => Err(ErrorData::invalid_params(
                format!("no tool {name:?}; tools/list names them"),
                None,
            )),
        }
    }
}
