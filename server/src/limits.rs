//! Every bound the servers put on a request or a response. Past each, the
//! request is refused with a JSON error naming the limit (never truncated
//! silently). The table in ARCHITECTURE.md lists them.

use std::time::Duration;

/// Largest request body (a file written with `PUT`, the JSON of an exec).
/// Larger files go through `sandlog files put`, which streams.
pub const REQUEST_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Largest file `GET /v1/sessions/{id}/files/{path}` returns in one
/// response; larger ones are refused with 413 before being read.
pub const RESPONSE_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Largest HTML report or evidence bundle returned in one response.
pub const RESPONSE_DOCUMENT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Engine calls running at once (each on a blocking thread). Requests past
/// it wait for a slot; the engine serialises work per session anyway.
pub const BLOCKING_CALLS_MAX: usize = 16;

/// Events one `GET /v1/log` returns (also the default `limit`).
pub const LOG_EVENTS_MAX: u64 = 10_000;

/// How long one `GET /v1/log?follow=true` stream stays open; the client
/// reconnects with `from` set past the last position it saw.
pub const LOG_FOLLOW_DURATION_MAX: Duration = Duration::from_secs(3600);

/// How often a following log stream looks for new events.
pub const LOG_FOLLOW_POLL: Duration = Duration::from_millis(200);

/// After SIGTERM or SIGINT: how long running requests (executions) get to
/// finish and be recorded before the process exits.
pub const SHUTDOWN_WAIT_MAX: Duration = Duration::from_secs(60);

/// Shortest token accepted: a guessable token guards nothing.
pub const TOKEN_BYTES_MIN: usize = 16;

/// Longest token accepted (and the largest token file read).
pub const TOKEN_BYTES_MAX: usize = 4096;

/// Largest MCP tool argument text (code, file contents).
pub const MCP_TEXT_BYTES_MAX: usize = REQUEST_BODY_BYTES_MAX;

/// Events one MCP `timeline` call returns (the newest are kept).
pub const MCP_TIMELINE_EVENTS_MAX: usize = 1_000;

/// How often a server drops warm kernels idle past their timeout
/// (`KERNEL_IDLE_TIMEOUT`): a kernel lives at most this much longer.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(30);

/// How much of a rejected header value, or of a plain-text rejection
/// turned into a JSON error, an error repeats.
pub const ERROR_TEXT_BYTES_MAX: usize = 1024;

/// Longest line (one JSON-RPC message) the MCP server reads; a longer one
/// is answered with an error naming this limit and skipped without being
/// held. The protocol library's own line bound, so every line it gets fits.
pub const MCP_LINE_BYTES_MAX: usize = 16 * 1024 * 1024;
