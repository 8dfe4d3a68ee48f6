//! Fuzzing of the servers' outside input: HTTP requests through the whole
//! router `sandlog serve` runs (guard, token check, body limit, every
//! route) over a real engine on a real root, and MCP lines through the
//! stdio guard that sits before the protocol library.
//!
//! The properties: no request is answered with a server error (5xx) or
//! kills the server, and every refusal is a JSON error naming what was
//! wrong; every MCP line is either passed on as a JSON-RPC 2.0 message,
//! answered with exactly one JSON-RPC error (keeping a usable `id`), or is
//! a blank line or a broken notification, which have nobody to answer.
//!
//! Cases per harness: `PROPTEST_CASES` (128 by default, the bounded run
//! `make test` does); `make fuzz` runs many more.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sandlog_server::api::{AppState, router, routes};
use sandlog_server::guard::RequestPolicy;
use sandlog_server::{ColdExecutor, Engine};
use serde_json::Value;
use tower::ServiceExt;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(128)
}

fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

/// A request for one of the server's routes (or none), with hostile
/// parts.
#[derive(Debug, Clone)]
struct Fuzzed {
    route: usize,
    method: Option<Method>,
    id: String,
    rest: String,
    query: Vec<(String, String)>,
    content_type: Option<String>,
    body: Vec<u8>,
}

fn text_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._~-]{0,16}",
        "(%[0-9A-F]{2}|%|\\.\\.|/|[a-z]){0,12}",
        Just(String::new()),
        Just("..%2F..%2Fetc%2Fpasswd".to_owned()),
        Just("%00".to_owned()),
        Just("a%FFb".to_owned()),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        // JSON objects with the fields the routes read, and wrong types.
        proptest::collection::btree_map(
            prop_oneof![
                Just("path"),
                Just("content"),
                Just("content_base64"),
                Just("labels"),
                Just("older_than"),
                Just("dry_run"),
                Just("max_deletions"),
                Just("max_sessions"),
                Just("max_bytes"),
                Just("group"),
                Just("fuel"),
                Just("timeout"),
                Just("memory"),
                Just("runtime"),
                Just("recursive"),
                Just("max_size"),
                Just("readonly"),
                Just("x"),
            ],
            prop_oneof![
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                any::<bool>().prop_map(Value::from),
                "\\PC{0,24}".prop_map(Value::from),
                Just(Value::Null),
                Just(serde_json::json!([1, "a", null])),
                Just(serde_json::json!({"a": {"b": []}})),
            ],
            0..6,
        )
        .prop_map(|fields| serde_json::to_vec(&fields).unwrap_or_default()),
    ]
}

fn fuzzed() -> impl Strategy<Value = Fuzzed> {
    (
        any::<usize>(),
        prop_oneof![
            4 => Just(None),
            1 => prop_oneof![
                Just(Method::GET), Just(Method::POST), Just(Method::PUT),
                Just(Method::DELETE), Just(Method::PATCH), Just(Method::OPTIONS),
            ].prop_map(Some),
        ],
        text_piece(),
        text_piece(),
        proptest::collection::vec(
            (
                prop_oneof![
                    Just("session".to_owned()),
                    Just("kind".to_owned()),
                    Just("since".to_owned()),
                    Just("until".to_owned()),
                    Just("from".to_owned()),
                    Just("limit".to_owned()),
                    Just("correlation".to_owned()),
                    Just("recursive".to_owned()),
                    Just("at".to_owned()),
                    "[a-z]{1,8}",
                ],
                text_piece(),
            ),
            0..4,
        ),
        prop_oneof![
            Just(None),
            Just(Some("application/json".to_owned())),
            Just(Some("text/plain".to_owned())),
            Just(Some("application/octet-stream".to_owned())),
            "[ -~]{0,40}".prop_map(Some),
        ],
        body(),
    )
        .prop_map(
            |(route, method, id, rest, query, content_type, body)| Fuzzed {
                route,
                method,
                id,
                rest,
                query,
                content_type,
                body,
            },
        )
}

/// The path of route `template` with its parameters filled: `{id}` with
/// a real session's id, a prefix of it, or hostile text; `{*path}` with
/// hostile text.
fn fill(template: &str, session: &str, fuzzed: &Fuzzed) -> String {
    let id = match fuzzed.id.len() % 3 {
        0 => session.to_owned(),
        1 => session.get(..8).unwrap_or(session).to_owned(),
        _ => fuzzed.id.clone(),
    };
    let mut path = template.replace("{id}", &id);
    if let Some(start) = path.find("{*") {
        path.replace_range(start.., &fuzzed.rest);
    }
    let query: Vec<String> = fuzzed
        .query
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query.join("&"));
    }
    path
}

/// Goal: no request, however malformed, gets a 5xx or panics the server,
/// and every 4xx carries a JSON error. Method: the real router over a
/// real engine on a temporary root with one session holding a file; each
/// case picks a route (or a random method on it) and fills it with
/// hostile ids, paths, queries, content types and bodies. Execution
/// bodies that happen to be valid run real python.wasm.
#[test]
fn http_requests_never_get_a_server_error() {
    let dir = tempfile::tempdir().unwrap();
    let options = sandlog_runtime::EngineOptions {
        create: true,
        ..Default::default()
    };
    let engine = Arc::new(Engine::open(dir.path(), options).unwrap());
    let session = engine.create_session(BTreeMap::new()).unwrap().session_id;
    engine
        .write_file(
            session,
            &sandlog_runtime::core::WorkspacePath::parse("data/a.txt").unwrap(),
            b"hello",
            false,
        )
        .unwrap();
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let app = router(AppState::new(
        engine,
        Arc::new(ColdExecutor),
        None,
        stopping,
        RequestPolicy::default(),
        Default::default(),
    ));
    let routes: Vec<(Method, &'static str)> = routes()
        .into_iter()
        // A followed log streams until shutdown by design.
        .filter(|route| route.path != "/v1/log" || route.method != Method::GET)
        .map(|route| (route.method, route.path))
        .chain([(Method::GET, "/v1/log"), (Method::GET, "/nowhere/{id}")])
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let session = session.to_string();
    let mut runner = TestRunner::new(config());
    runner
        .run(&fuzzed(), |fuzzed| {
            let (method, template) = &routes[fuzzed.route % routes.len()];
            let method = fuzzed.method.clone().unwrap_or_else(|| method.clone());
            let uri = fill(template, &session, &fuzzed);
            let mut request = Request::builder()
                .method(method.clone())
                .uri(&uri)
                .header("host", "127.0.0.1:8080");
            if let Some(content_type) = &fuzzed.content_type {
                request = request.header("content-type", content_type.as_str());
            }
            // A URI the HTTP layer itself cannot carry never reaches us.
            let Ok(request) = request.body(Body::from(fuzzed.body.clone())) else {
                return Ok(());
            };
            let (status, body) = runtime.block_on(async {
                let response = app.clone().oneshot(request).await.unwrap();
                let status = response.status();
                let body = axum::body::to_bytes(response.into_body(), 64 << 20)
                    .await
                    .unwrap_or_default();
                (status, body)
            });
            prop_assert!(
                !status.is_server_error(),
                "{method} {uri} -> {status}: {}",
                String::from_utf8_lossy(&body)
            );
            if status.is_client_error() && method != Method::HEAD {
                let error: Value = serde_json::from_slice(&body).map_err(|error| {
                    TestCaseError::fail(format!(
                        "{method} {uri} -> {status}, not JSON ({error}): {}",
                        String::from_utf8_lossy(&body)
                    ))
                })?;
                prop_assert!(
                    error.get("error").is_some(),
                    "{method} {uri} -> {status}: {error}"
                );
            }
            Ok(())
        })
        .unwrap();
}

/// One MCP input line (no newline inside).
fn mcp_line() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        any::<i64>().prop_map(Value::from),
        "[a-z0-9]{0,8}".prop_map(Value::from),
        Just(Value::Null),
        Just(serde_json::json!([1])),
    ];
    let message = (
        prop_oneof![Just("2.0"), Just("1.0"), Just("")],
        prop::option::of(id),
        prop::option::of(prop_oneof![
            Just(Value::from("tools/list")),
            Just(Value::from("tools/call")),
            Just(Value::from(7)),
        ]),
        prop::option::of(Just(serde_json::json!({"ok": true}))),
    )
        .prop_map(|(version, id, method, result)| {
            let mut message = serde_json::Map::new();
            message.insert("jsonrpc".into(), Value::from(version));
            if let Some(id) = id {
                message.insert("id".into(), id);
            }
            if let Some(method) = method {
                message.insert("method".into(), method);
            }
            if let Some(result) = result {
                message.insert("result".into(), result);
            }
            serde_json::to_vec(&Value::Object(message)).unwrap_or_default()
        });
    prop_oneof![
        message,
        proptest::collection::vec(any::<u8>(), 0..64),
        "[ \\t]{0,4}".prop_map(String::into_bytes),
        Just(b"[]".to_vec()),
        Just(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"".to_vec()),
    ]
    .prop_map(|mut line| {
        line.retain(|byte| *byte != b'\n');
        line
    })
}

/// What the guard is expected to do with one line.
fn expected(line: &[u8]) -> Expect {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Expect::Nothing;
    }
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(line) else {
        return Expect::Error(Value::Null);
    };
    let id = match message.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    let version_ok = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let is_request = message.get("method").is_some_and(Value::is_string);
    let is_response = !id.is_null() && message.contains_key("result");
    if version_ok && (is_request || is_response) {
        Expect::Passed
    } else if !message.contains_key("id") && is_request {
        Expect::Nothing
    } else {
        Expect::Error(id)
    }
}

#[derive(Debug, PartialEq)]
enum Expect {
    Passed,
    Error(Value),
    Nothing,
}

/// Goal: every MCP line gets what the protocol says: a JSON-RPC 2.0
/// message goes to the library unchanged, anything else is answered with
/// one error (with the line's `id` when usable) or, blank or a broken
/// notification, left unanswered; the guard never stops reading. Method:
/// the guard over in-memory pipes; a batch of fuzzed lines, then what
/// the library side received and what was answered, in order.
#[test]
fn mcp_lines_are_passed_on_or_answered() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(config());
    runner
        .run(&proptest::collection::vec(mcp_line(), 1..12), |lines| {
            let expectations: Vec<Expect> = lines.iter().map(|line| expected(line)).collect();
            let errors = expectations
                .iter()
                .filter(|expect| matches!(expect, Expect::Error(_)))
                .count();
            let (passed, answered) = runtime.block_on(async {
                use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
                let (mut client, server_in) = tokio::io::duplex(1 << 16);
                let (server_out, answers) = tokio::io::duplex(1 << 16);
                let (library_in, library_out) =
                    sandlog_server::mcp_lines::guard(server_in, server_out);
                drop(library_out);
                for line in &lines {
                    client.write_all(line).await.unwrap();
                    client.write_all(b"\n").await.unwrap();
                }
                client.shutdown().await.unwrap();
                drop(client);
                let mut passed = Vec::new();
                let mut reader = BufReader::new(library_in);
                loop {
                    let mut line = Vec::new();
                    if reader.read_until(b'\n', &mut line).await.unwrap_or(0) == 0 {
                        break;
                    }
                    passed.push(line);
                }
                let mut answered = Vec::new();
                let mut reader = BufReader::new(answers);
                // The answer stream stays open (the guard keeps its writer
                // for the library): read the answers expected, then look
                // briefly for one too many.
                while answered.len() <= errors {
                    let wait = if answered.len() < errors { 10_000 } else { 50 };
                    let mut line = Vec::new();
                    let read = tokio::time::timeout(
                        std::time::Duration::from_millis(wait),
                        reader.read_until(b'\n', &mut line),
                    )
                    .await;
                    match read {
                        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                        Ok(Ok(_)) => answered.push(line),
                    }
                }
                (passed, answered)
            });
            let want_passed: Vec<Vec<u8>> = lines
                .iter()
                .zip(&expectations)
                .filter(|(_, expect)| **expect == Expect::Passed)
                .map(|(line, _)| [line.as_slice(), b"\n"].concat())
                .collect();
            prop_assert_eq!(passed, want_passed);
            let want_ids: Vec<Value> = expectations
                .into_iter()
                .filter_map(|expect| match expect {
                    Expect::Error(id) => Some(id),
                    _ => None,
                })
                .collect();
            let got_ids: Vec<Value> = answered
                .iter()
                .map(|line| {
                    let answer: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
                    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
                    assert!(answer["error"]["code"].is_i64(), "{answer}");
                    answer["id"].clone()
                })
                .collect();
            prop_assert_eq!(got_ids, want_ids);
            Ok(())
        })
        .unwrap();
}
