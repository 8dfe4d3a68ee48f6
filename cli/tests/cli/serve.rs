//! `sandlog serve`: the real binary serving a real root on a free loopback
//! port, spoken to over real TCP with a small HTTP/1.1 client (no mocks):
//! sessions, exec of real python.wasm, files, log, verify, report, prune,
//! the OpenAPI document against the routes, the token beyond loopback,
//! body limits, SIGKILL mid-execution and SIGTERM with an execution
//! running.

#![cfg(test)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The binary with a root, the runtimes and the shared module cache.
fn sandlog(root: &Path) -> Command {
    crate::common::sandlog_std(root)
}

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let status = sandlog(&root).args(["--json", "init"]).output().unwrap();
    assert!(status.status.success(), "{status:?}");
    (dir, root)
}

/// A running `sandlog serve`; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    token: Option<String>,
}

impl Server {
    fn start(root: &Path, listen: &str, token: Option<&str>) -> Server {
        Server::start_with(root, listen, token, &[])
    }

    fn start_with(root: &Path, listen: &str, token: Option<&str>, extra: &[&str]) -> Server {
        let mut command = sandlog(root);
        command
            .args(["serve", "--listen", listen])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(token) = token {
            command.env("SANDLOG_TOKEN", token);
        }
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("first line {line:?}"))
            .parse::<SocketAddr>()
            .unwrap();
        // A server on 0.0.0.0 is reached on loopback.
        let addr = SocketAddr::from(([127, 0, 0, 1], addr.port()));
        Server {
            child,
            addr,
            token: token.map(str::to_owned),
        }
    }

    fn request(&self, method: &str, path: &str, body: &[u8]) -> Reply {
        let auth = self.token.as_deref().map(|token| format!("Bearer {token}"));
        request(self.addr, method, path, auth.as_deref(), body)
    }

    fn json(&self, method: &str, path: &str, body: &Value) -> Reply {
        self.request(method, path, body.to_string().as_bytes())
    }

    fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).unwrap();
        #[allow(unsafe_code)]
        // SAFETY: kill(2) on our own child's pid.
        let result = unsafe { libc::kill(pid, signal) };
        assert_eq!(result, 0);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "status {}: not JSON ({error}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request on its own connection; the body is written by a
/// second thread, so a server that answers before reading it all (413) is
/// heard.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Reply {
    let host = addr.to_string();
    let mut headers = vec![("Host", host.as_str())];
    if !body.is_empty() {
        headers.push(("Content-Type", "application/json"));
    }
    if let Some(authorization) = authorization {
        headers.push(("Authorization", authorization));
    }
    request_with(addr, method, path, &headers, body)
}

/// One HTTP/1.1 request with exactly the headers given (plus
/// `Connection` and `Content-Length`).
fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let body = body.to_vec();
    let sender = std::thread::spawn(move || {
        // A refused body may be cut off by the server: not an error here.
        let _ = writer.write_all(&body);
    });
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let _ = sender.join();
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(key, value)| {
        key.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = data.windows(2).position(|window| window == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 || data.len() < end + 2 + size {
            return out;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[(end + 4 + size).min(data.len())..];
    }
}

fn create(server: &Server) -> String {
    let reply = server.request("POST", "/v1/sessions", b"");
    assert_eq!(reply.status, 201, "{}", reply.text());
    reply.json()["session_id"].as_str().unwrap().to_owned()
}

fn log_lines(reply: &Reply) -> Vec<Value> {
    reply
        .text()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The executed events of a root, read by the CLI after the server is gone.
fn executed_positions(root: &Path) -> Vec<u64> {
    let output = sandlog(root)
        .args(["--json", "log", "--kind", "session.executed"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["position"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

fn verify_ok(root: &Path) {
    let output = sandlog(root).args(["--json", "verify"]).output().unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        output.status.success() && report["ok"] == true,
        "{output:?}"
    );
}

#[test]
fn serve_round_trip() {
    let (_dir, root) = init();
    let server = Server::start(&root, "127.0.0.1:0", None);
    let id = create(&server);

    let exec = server.json(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &json!({"code": "print(1)\nopen('made.txt', 'w').write('by guest')"}),
    );
    assert_eq!(exec.status, 200, "{}", exec.text());
    let exec = exec.json();
    assert_eq!(exec["outcome"], "ok");
    assert_eq!(exec["stdout"], "1\n");
    assert_eq!(exec["warm"], false);
    assert_eq!(exec["state_lost"], false);
    assert_eq!(exec["files_written"], json!(["made.txt"]));
    let position = exec["position"].as_u64().unwrap();

    // The session's kernel stays alive: state carries over, and the
    // second execution says it ran warm.
    let first = server.json(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &json!({"code": "x = 41"}),
    );
    assert_eq!(first.status, 200, "{}", first.text());
    let second = server.json(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &json!({"code": "print(x + 1)"}),
    );
    assert_eq!(second.status, 200, "{}", second.text());
    let second = second.json();
    assert_eq!(second["stdout"], "42\n");
    assert_eq!(second["warm"], true);
    assert_eq!(second["state_lost"], false);

    let put = server.request(
        "PUT",
        &format!("/v1/sessions/{id}/files/dir/a.txt"),
        b"hello",
    );
    assert_eq!(put.status, 200, "{}", put.text());
    assert_eq!(put.json()["size"], 5);
    let again = server.request("PUT", &format!("/v1/sessions/{id}/files/dir/a.txt"), b"x");
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.json()["error"], "file_exists");
    let replaced = server.request(
        "PUT",
        &format!("/v1/sessions/{id}/files/dir/a.txt?overwrite=true"),
        b"hello again",
    );
    assert_eq!(replaced.status, 200, "{}", replaced.text());
    let read = server.request("GET", &format!("/v1/sessions/{id}/files/dir/a.txt"), b"");
    assert_eq!(
        (read.status, read.body.as_slice()),
        (200, &b"hello again"[..])
    );
    let made = server.request("GET", &format!("/v1/sessions/{id}/files/made.txt"), b"");
    assert_eq!(made.body, b"by guest");
    let listed = server.request("GET", &format!("/v1/sessions/{id}/files"), b"");
    let paths: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paths, ["dir/a.txt", "made.txt"]);

    let show = server
        .request("GET", &format!("/v1/sessions/{id}"), b"")
        .json();
    assert_eq!(
        (show["exec_count"].as_u64(), show["files"].as_u64()),
        (Some(3), Some(2))
    );
    let sessions = server
        .request("GET", "/v1/sessions?status=active", b"")
        .json();
    assert_eq!(sessions.as_array().unwrap().len(), 1);

    let log = server.request(
        "GET",
        &format!("/v1/log?session={id}&kind=session.executed"),
        b"",
    );
    assert_eq!(log.header("content-type"), Some("application/x-ndjson"));
    let events = log_lines(&log);
    assert_eq!(events.len(), 3, "the first execution and the warm pair");
    assert_eq!(events[0]["position"].as_u64(), Some(position));
    // By correlation id: a task's session made and deleted by another
    // process (deleted, so the counts below stay the server's).
    let task = |arguments: &[&str]| {
        let output = sandlog(&root)
            .args(["--json", "--correlation-id", "http-task"])
            .args(arguments)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let made = task(&["session", "create"]);
    task(&["session", "delete", made["session_id"].as_str().unwrap()]);
    let correlated = log_lines(&server.request("GET", "/v1/log?correlation=http-task", b""));
    let kinds: Vec<&str> = correlated
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session.created",
            "session.delete.requested",
            "session.deleted"
        ]
    );
    let refused = server.request("GET", "/v1/log?correlation=a%0Ab", b"");
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert_eq!(refused.json()["error"], "invalid_correlation_id");
    let paged = server.request("GET", "/v1/log?limit=2", b"");
    assert_eq!(log_lines(&paged).len(), 2);
    assert_eq!(paged.header("x-sandlog-next-from"), Some("3"));
    let followed = server.request(
        "GET",
        &format!("/v1/log?follow=true&session={id}&limit=3"),
        b"",
    );
    assert_eq!(log_lines(&followed).len(), 3);

    let timeline = server
        .request("GET", &format!("/v1/sessions/{id}/timeline"), b"")
        .json();
    assert_eq!(timeline[0]["kind"], "session.created");

    let verify = server.request("POST", "/v1/verify", b"").json();
    assert_eq!(verify["ok"], true, "{verify}");

    let report = server.request("GET", &format!("/v1/sessions/{id}/report"), b"");
    assert_eq!(report.status, 200);
    assert_eq!(report.header("x-sandlog-verify-ok"), Some("true"));
    assert!(report.text().contains("<html"), "not a report");

    let evidence = server.request("GET", &format!("/v1/sessions/{id}/evidence"), b"");
    assert_eq!(
        evidence.status,
        404,
        "no checkpoint yet: {}",
        evidence.text()
    );
    assert!(
        evidence.json()["message"]
            .as_str()
            .unwrap()
            .contains("checkpoint")
    );

    let dry = server.json(
        "POST",
        "/v1/prune",
        &json!({"older_than": "0s", "dry_run": true}),
    );
    assert_eq!(dry.status, 200, "{}", dry.text());
    assert_eq!(dry.json()["dry_run"], true);
    assert_eq!(dry.json()["deleted_sessions"].as_array().unwrap().len(), 1);
    // The CLI's rule: a cap selects without an age; `max_deletions` alone
    // selects nothing and is refused, naming what would select.
    let by_cap = server.json(
        "POST",
        "/v1/prune",
        &json!({"max_sessions": 0, "dry_run": true}),
    );
    assert_eq!(by_cap.status, 200, "{}", by_cap.text());
    assert_eq!(
        by_cap.json()["deleted_sessions"].as_array().unwrap().len(),
        1
    );
    let nothing = server.json("POST", "/v1/prune", &json!({"max_deletions": 5}));
    assert_eq!(nothing.status, 422, "{}", nothing.text());
    assert_eq!(nothing.json()["error"], "nothing_to_prune");
    assert!(
        nothing.json()["message"]
            .as_str()
            .is_some_and(|message| message.contains("max_sessions")),
        "{}",
        nothing.text()
    );

    // Errors: class → status, with kind, message and hint.
    let unknown = server.request(
        "GET",
        "/v1/sessions/00000000-0000-4000-8000-000000000000",
        b"",
    );
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"], "not_found");
    assert!(unknown.json()["hint"].is_string());
    let malformed = server.request("GET", "/v1/sessions/not-a-uuid", b"");
    assert_eq!(malformed.status, 422, "{}", malformed.text());
    let climbing = server.request("GET", &format!("/v1/sessions/{id}/files/..%2Fx"), b"");
    assert_eq!(climbing.status, 422, "{}", climbing.text());
    let bad_json = server.request("POST", &format!("/v1/sessions/{id}/exec"), b"{\"code\": 1}");
    assert!(matches!(bad_json.status, 400 | 422), "{}", bad_json.text());
    assert!(bad_json.json()["error"].is_string());
    let no_route = server.request("GET", "/v2/nothing", b"");
    assert_eq!(
        (no_route.status, no_route.json()["error"].as_str()),
        (404, Some("no_route"))
    );

    // Oversized bodies: 413 before the engine sees them.
    let big = vec![b'x'; 17 * 1024 * 1024];
    let too_big = server.request("PUT", &format!("/v1/sessions/{id}/files/big.bin"), &big);
    assert_eq!(too_big.status, 413, "{}", too_big.text());
    assert_eq!(too_big.json()["error"], "too_large");
    let code = json!({"code": "x".repeat(17 * 1024 * 1024)}).to_string();
    let too_big = server.request("POST", &format!("/v1/sessions/{id}/exec"), code.as_bytes());
    assert_eq!(too_big.status, 413, "{}", too_big.text());

    // Deleting a file and the session.
    let deleted = server.request(
        "DELETE",
        &format!("/v1/sessions/{id}/files/dir?recursive=true"),
        b"",
    );
    assert_eq!(deleted.json()["deleted"], json!(["dir/a.txt"]));
    let gone = server.request("DELETE", &format!("/v1/sessions/{id}?reason=test"), b"");
    assert_eq!(gone.status, 200, "{}", gone.text());
    let after = server.json(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &json!({"code": "1"}),
    );
    assert_eq!(after.status, 409, "{}", after.text());
    drop(server);
    verify_ok(&root);
}

/// Every operation of the OpenAPI document is routed (none falls through
/// to `no_route` or 405), and the document names the exec route.
#[test]
fn openapi_lists_every_route() {
    let (_dir, root) = init();
    let server = Server::start(&root, "127.0.0.1:0", None);
    let document = server.request("GET", "/openapi.json", b"").json();
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.contains_key("/v1/sessions/{id}/exec"));
    assert!(paths.len() >= 10, "{paths:?}");
    let id = "00000000-0000-4000-8000-000000000000";
    for (path, operations) in paths {
        for method in operations.as_object().unwrap().keys() {
            let concrete = path.replace("{id}", id).replace("{path}", "a.txt");
            let reply = server.request(&method.to_uppercase(), &concrete, b"");
            assert_ne!(reply.status, 405, "{method} {path}");
            if reply.status == 404 {
                assert_ne!(reply.json()["error"], "no_route", "{method} {path}");
            }
        }
    }
}

#[test]
fn token_required_beyond_loopback() {
    let (_dir, root) = init();
    let refused = sandlog(&root)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("token"));
    let short = sandlog(&root)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env("SANDLOG_TOKEN", "short")
        .output()
        .unwrap();
    assert_eq!(short.status.code(), Some(2), "{short:?}");

    let token = "t0ken-for-the-serve-test-0123456789";
    let server = Server::start(&root, "0.0.0.0:0", Some(token));
    let none = request(server.addr, "GET", "/v1/sessions", None, b"");
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["error"], "unauthorized");
    let wrong = request(
        server.addr,
        "GET",
        "/v1/sessions",
        Some("Bearer t0ken-for-the-serve-test-0123456780"),
        b"",
    );
    assert_eq!(wrong.status, 401);
    let right = server.request("GET", "/v1/sessions", b"");
    assert_eq!(right.status, 200, "{}", right.text());

    // A token file works the same.
    let file = root.parent().unwrap().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let mut command = sandlog(&root);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&file)
        .stdout(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line
        .trim()
        .trim_start_matches("listening on http://")
        .parse()
        .unwrap();
    assert_eq!(request(addr, "GET", "/v1/health", None, b"").status, 401);
    let bearer = format!("Bearer {token}");
    assert_eq!(
        request(addr, "GET", "/v1/health", Some(&bearer), b"").status,
        200
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Clients execute in a loop; the server is SIGKILLed while executions
/// run. Every execution a client got a 200 for has its `session.executed`
/// event at the position it was told, and the log verifies.
#[test]
fn sigkill_mid_exec_loses_nothing_acknowledged() {
    let (_dir, root) = init();
    let server = Server::start(&root, "127.0.0.1:0", None);
    let sessions: Vec<String> = (0..3).map(|_| create(&server)).collect();
    let addr = server.addr;
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let clients: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(index, id)| {
            let id = id.clone();
            let acknowledged = acknowledged.clone();
            std::thread::spawn(move || {
                for round in 0..1000 {
                    let code = format!("open('f{index}_{round}.txt', 'w').write('x' * {round})");
                    let body = json!({"code": code}).to_string();
                    let stream = std::panic::catch_unwind(|| {
                        request(
                            addr,
                            "POST",
                            &format!("/v1/sessions/{id}/exec"),
                            None,
                            body.as_bytes(),
                        )
                    });
                    match stream {
                        Ok(reply) if reply.status == 200 => {
                            let position = reply.json()["position"].as_u64().unwrap();
                            acknowledged.lock().unwrap().push(position);
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    while acknowledged.lock().unwrap().len() < 6 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no executions acknowledged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.signal(libc::SIGKILL);
    for client in clients {
        let _ = client.join();
    }
    drop(server);
    let acknowledged = acknowledged.lock().unwrap().clone();
    let recorded = executed_positions(&root);
    for position in &acknowledged {
        assert!(
            recorded.contains(position),
            "acknowledged execution at {position} is not in the log"
        );
    }
    verify_ok(&root);
}

/// SIGTERM while an execution runs: it finishes, its client gets the
/// result, it is recorded, and the server exits 0.
#[test]
fn sigterm_finishes_a_running_execution() {
    let (_dir, root) = init();
    let mut server = Server::start(&root, "127.0.0.1:0", None);
    let id = create(&server);
    let addr = server.addr;
    let code = "import time\nstart = time.time()\nwhile time.time() - start < 2:\n    pass\nprint('finished')";
    let body = json!({"code": code}).to_string();
    let path = format!("/v1/sessions/{id}/exec");
    let client = std::thread::spawn(move || request(addr, "POST", &path, None, body.as_bytes()));
    std::thread::sleep(Duration::from_millis(700));
    server.signal(libc::SIGTERM);
    let reply = client.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["stdout"], "finished\n");
    let position = reply.json()["position"].as_u64().unwrap();
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(executed_positions(&root).contains(&position));
    verify_ok(&root);
}

/// The session ids the server's root holds, read by the CLI.
fn session_ids(root: &Path) -> Vec<String> {
    let output = sandlog(root)
        .args(["--json", "session", "list", "--wide"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["session_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Goal: a web page cannot drive the loopback server, by DNS rebinding
/// (its own name in `Host`), by a cross-site request (a foreign
/// `Origin`, or `Sec-Fetch-Site: cross-site`), or by a form-encodable
/// content type; a client cannot make the server run a path as a
/// runtime; every error is the JSON body docs/api.md promises. Method:
/// the real server on loopback without a token; each hostile request is
/// refused with its status and kind, and afterwards the log holds only
/// what the allowed requests did.
#[test]
fn web_pages_cannot_drive_the_loopback_server() {
    let (_dir, root) = init();
    let server = Server::start(&root, "127.0.0.1:0", None);
    let own = server.addr.to_string();
    let own_origin = format!("http://{own}");
    let json_type = ("Content-Type", "application/json");

    // DNS rebinding: the page's own name in Host.
    let port = server.addr.port();
    let rebound_host = format!("attacker.example:{port}");
    for (method, path) in [("GET", "/v1/sessions"), ("POST", "/v1/sessions")] {
        let reply = request_with(server.addr, method, path, &[("Host", &rebound_host)], b"");
        assert_eq!(reply.status, 403, "{method} {path}: {}", reply.text());
        assert_eq!(reply.json()["error"], "forbidden_host");
        assert!(
            reply.json()["message"]
                .as_str()
                .unwrap()
                .contains("attacker.example")
        );
    }
    let no_host = request_with(server.addr, "GET", "/v1/sessions", &[], b"");
    assert_eq!(no_host.status, 403, "{}", no_host.text());

    // A cross-site page: a foreign Origin, with and without a JSON type.
    for origin in ["http://attacker.example", "null", "http://localhost:3000"] {
        let reply = request_with(
            server.addr,
            "POST",
            "/v1/sessions",
            &[("Host", &own), ("Origin", origin)],
            b"",
        );
        assert_eq!(reply.status, 403, "{origin}: {}", reply.text());
        assert_eq!(reply.json()["error"], "foreign_origin");
        assert_eq!(reply.header("access-control-allow-origin"), None);
    }
    let fetch_metadata = request_with(
        server.addr,
        "POST",
        "/v1/sessions",
        &[("Host", &own), ("Sec-Fetch-Site", "cross-site")],
        b"",
    );
    assert_eq!(fetch_metadata.status, 403, "{}", fetch_metadata.text());
    assert!(
        session_ids(&root).is_empty(),
        "a refused request created a session"
    );

    // The server's own origin (a page it served, a same-origin tool) works.
    let created = request_with(
        server.addr,
        "POST",
        "/v1/sessions",
        &[("Host", &own), ("Origin", &own_origin)],
        b"",
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["session_id"].as_str().unwrap().to_owned();

    // A form-encodable type is refused before the handler, whatever the body.
    let exec_path = format!("/v1/sessions/{id}/exec");
    let body = json!({"code": "open('pwned.txt', 'w').write('x')"}).to_string();
    for media in [
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let reply = request_with(
            server.addr,
            "POST",
            &exec_path,
            &[("Host", &own), ("Content-Type", media)],
            body.as_bytes(),
        );
        assert_eq!(reply.status, 415, "{media}: {}", reply.text());
        assert_eq!(reply.json()["error"], "unsupported_media_type");
    }

    // A runtime is a name from the known set, never a server path.
    for runtime in ["/etc/passwd", "../../.runtimes/python.wasm", "python.wasm"] {
        let reply = request_with(
            server.addr,
            "POST",
            &exec_path,
            &[("Host", &own), json_type],
            json!({"code": "print(1)", "runtime": runtime})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(reply.status, 422, "{runtime}: {}", reply.text());
        assert_eq!(reply.json()["error"], "unknown_runtime");
        assert!(
            reply.json()["message"]
                .as_str()
                .unwrap()
                .contains("python, javascript")
        );
    }
    assert!(
        executed_positions(&root).is_empty(),
        "a refused request ran code"
    );

    // Every error has the JSON body: 404, 405, 413, 415 (wrong JSON type).
    let missing = request_with(server.addr, "GET", "/nowhere", &[("Host", &own)], b"");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"], "no_route");
    let wrong_method = request_with(
        server.addr,
        "DELETE",
        "/openapi.json",
        &[("Host", &own)],
        b"",
    );
    assert_eq!(wrong_method.status, 405, "{}", wrong_method.text());
    assert_eq!(wrong_method.json()["error"], "method_not_allowed");
    assert!(wrong_method.header("allow").is_some());
    let xml = request_with(
        server.addr,
        "POST",
        &exec_path,
        &[("Host", &own), ("Content-Type", "application/xml")],
        b"<code/>",
    );
    assert!(xml.status == 415 || xml.status == 400, "{}", xml.text());
    assert!(xml.json()["error"].is_string(), "{}", xml.text());
    let huge = vec![b'x'; 17 * 1024 * 1024];
    let too_large = request_with(
        server.addr,
        "PUT",
        &format!("/v1/sessions/{id}/files/big.bin"),
        &[("Host", &own), ("Content-Type", "application/octet-stream")],
        &huge,
    );
    assert_eq!(too_large.status, 413, "{}", too_large.text());
    assert!(too_large.json()["error"].is_string());

    // The allowed request still runs.
    let ran = request_with(
        server.addr,
        "POST",
        &exec_path,
        &[("Host", &own), json_type],
        json!({"code": "print(6 * 7)"}).to_string().as_bytes(),
    );
    assert_eq!(ran.status, 200, "{}", ran.text());
    assert_eq!(ran.json()["stdout"], "42\n");
    assert_eq!(executed_positions(&root).len(), 1);
    drop(server);
    verify_ok(&root);
}

/// Goal: an operator can name the hosts and origins a server answers
/// beyond loopback, and register modules clients run by name. Method: a
/// server with `--public-host`, `--allow-origin` and `--module`; the
/// named host and origin pass (with CORS headers and an approved
/// preflight), others stay refused, and the module runs by its name.
#[test]
fn public_hosts_allowed_origins_and_named_modules() {
    let (dir, root) = init();
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    let module = format!("pyguest={}", runtimes.join("python.wasm").display());
    let server = Server::start_with(
        &root,
        "127.0.0.1:0",
        None,
        &[
            "--public-host",
            "sandlog.internal",
            "--allow-origin",
            "https://app.example.com",
            "--module",
            &module,
        ],
    );
    let named = request_with(
        server.addr,
        "GET",
        "/v1/sessions",
        &[("Host", "sandlog.internal:8787")],
        b"",
    );
    assert_eq!(named.status, 200, "{}", named.text());
    let other = request_with(
        server.addr,
        "GET",
        "/v1/sessions",
        &[("Host", "sandlog.internal.attacker.example")],
        b"",
    );
    assert_eq!(other.status, 403);

    let own = server.addr.to_string();
    let preflight = request_with(
        server.addr,
        "OPTIONS",
        "/v1/sessions",
        &[
            ("Host", &own),
            ("Origin", "https://app.example.com"),
            ("Access-Control-Request-Method", "POST"),
        ],
        b"",
    );
    assert_eq!(preflight.status, 204, "{}", preflight.text());
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    let created = request_with(
        server.addr,
        "POST",
        "/v1/sessions",
        &[("Host", &own), ("Origin", "https://app.example.com")],
        b"",
    );
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(
        created.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    let id = created.json()["session_id"].as_str().unwrap().to_owned();
    let foreign = request_with(
        server.addr,
        "POST",
        "/v1/sessions",
        &[
            ("Host", &own),
            ("Origin", "https://app.example.com.attacker.example"),
        ],
        b"",
    );
    assert_eq!(foreign.status, 403);

    // The registered module runs by its name (python.wasm reads the code
    // from stdin when run as a plain module, so this is `print` via -c
    // only for the built-in runtime: here the module gets no arguments
    // and reads its program from stdin).
    let ran = server.json(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &json!({"code": "print(7 * 6)", "runtime": "pyguest"}),
    );
    assert_eq!(ran.status, 200, "{}", ran.text());
    assert_eq!(ran.json()["stdout"], "42\n", "{}", ran.text());
    let unknown = server.json(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &json!({"code": "print(1)", "runtime": runtimes.join("python.wasm").display().to_string()}),
    );
    assert_eq!(unknown.status, 422, "{}", unknown.text());
    drop(server);
    drop(dir);
}

/// Goal: no line a client sends leaves it waiting for ever, and none
/// stops the MCP server: an over-long line gets an error naming
/// `MCP_LINE_BYTES_MAX`, a line that is not JSON `-32700`, JSON that is
/// not a JSON-RPC request `-32600` with its `id`; the server then still
/// answers a real `initialize`. Method: the real `sandlog mcp` on pipes,
/// answers read with a deadline.
#[test]
fn mcp_answers_every_bad_line_and_keeps_serving() {
    let (_dir, root) = init();
    let mut child = sandlog(&root)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, answers) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(value) = serde_json::from_str(&line)
                && lines.send(value).is_err()
            {
                break;
            }
        }
    });
    let next = || {
        answers
            .recv_timeout(Duration::from_secs(60))
            .expect("the MCP server answered")
    };

    stdin.write_all(b"{not json\n").unwrap();
    let parse = next();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null);

    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"params\":{}}\n")
        .unwrap();
    let invalid = next();
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    assert_eq!(invalid["id"], 5);

    let mut long = vec![b'x'; 17 * 1024 * 1024];
    long.push(b'\n');
    stdin.write_all(&long).unwrap();
    let too_long = next();
    assert!(
        too_long["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP_LINE_BYTES_MAX"),
        "{too_long}"
    );

    let initialize = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "1"}
        }
    });
    stdin
        .write_all(format!("{initialize}\n").as_bytes())
        .unwrap();
    let initialized = next();
    assert_eq!(initialized["id"], 1, "{initialized}");
    assert!(
        initialized["result"]["serverInfo"].is_object(),
        "{initialized}"
    );
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// Goal: a page in a real browser, from another origin, can neither make
/// the loopback server act nor read from it. Method: a page served from
/// `http://localhost:PAGE` (a second local server) is opened in headless
/// Chromium; its script posts to create a session, posts code to run as
/// `text/plain` (a request a browser sends without asking), and reads the
/// session list. Afterwards the root holds only the session the test
/// made, nothing ran, and the server's own metrics show it answered the
/// page's requests with 403 (so they did arrive).
#[test]
fn a_page_in_a_real_browser_cannot_drive_the_server() {
    let chromium = PathBuf::from("/usr/bin/chromium");
    assert!(
        chromium.is_file(),
        "/usr/bin/chromium is missing: this test needs Debian's `chromium` package \
         (`apt-get install -y --no-install-recommends chromium`; `make test` installs it)"
    );
    let (_dir, root) = init();
    let server = Server::start(&root, "127.0.0.1:0", None);
    let id = create(&server);
    let port = server.addr.port();
    let page = format!(
        r#"<!doctype html><html><head><title>start</title></head><body><script>
const target = "http://127.0.0.1:{port}";
const code = JSON.stringify({{code: "open('pwned.txt', 'w').write('x')"}});
Promise.allSettled([
  fetch(target + "/v1/sessions", {{method: "POST", mode: "no-cors"}}),
  fetch(target + "/v1/sessions/{id}/exec", {{method: "POST", mode: "no-cors",
    headers: {{"Content-Type": "text/plain"}}, body: code}}),
  fetch(target + "/v1/sessions").then(r => r.text()).then(t => {{ document.body.dataset.read = t; }}),
]).then(() => {{ document.body.dataset.done = "yes"; }});
</script></body></html>"#
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let page_port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // Answers every connection with the page (the browser may also
        // ask for a favicon); ends with the test process.
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                )
                .as_bytes(),
            );
        }
    });
    let profile = tempfile::tempdir().unwrap();
    let mut browser = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://localhost:{page_port}/"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut dom = String::new();
    let mut stdout = browser.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut dom);
        dom
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    while browser.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "chromium ran for more than 90 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dom = reader.join().unwrap();
    assert!(
        dom.contains("data-done=\"yes\""),
        "the page's script did not finish: {dom}"
    );
    // The page's own source names the session; what it read would be in
    // `data-read`.
    assert!(
        !dom.contains("data-read="),
        "the page read the session list: {dom}"
    );

    let sessions = session_ids(&root);
    assert_eq!(
        sessions,
        std::slice::from_ref(&id),
        "the page created a session"
    );
    assert!(executed_positions(&root).is_empty(), "the page ran code");
    assert!(!root.join("workspaces").join(&id).join("pwned.txt").exists());
    let metrics = server.request("GET", "/metrics", b"").text();
    let refused: u64 = metrics
        .lines()
        .filter(|line| {
            line.starts_with("sandlog_http_requests_total") && line.contains("status=\"403\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum();
    assert!(
        refused >= 2,
        "the page's requests were not refused by the server:\n{metrics}"
    );
}
