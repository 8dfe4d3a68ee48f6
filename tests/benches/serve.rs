//! Load test of `sandlog serve` (issue 17): the release binary serving a
//! fresh root on a loopback port, driven from this process by 8 concurrent
//! clients (one session each, plain HTTP/1.1 over TCP) for a fixed number
//! of `print(1)` executions. Prints p50/p99 latency and throughput, then
//! stops the server with SIGTERM and checks the log: `verify` ok and exactly
//! one `session.executed` event per acknowledged request, at the position
//! its response named.
//!
//! The same load runs twice: without traces, and with OpenTelemetry traces
//! sent to a receiver on loopback (`OTEL_EXPORTER_OTLP_ENDPOINT`; the
//! metrics are always on), and the p50 difference is printed (the goal:
//! within 3 %; docs/operations.md).
//!
//! Run: `make bench` or `cargo build --release -p sandlog-cli && cargo
//! bench -p sandlog-tests --bench serve`. `SANDLOG_BENCH_SERVE_EXECS` sets
//! the request count (default 400); `SANDLOG_BENCH_BIN` another binary.

// Indexing a `serde_json::Value` by key yields `Null` when absent; it
// never panics.
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Concurrent clients, each with its own session.
const CLIENTS: usize = 8;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One request on its own connection; returns status and body.
fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> BenchResult<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or("no header end")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status")?;
    Ok((status, body.to_owned()))
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn main() -> BenchResult<()> {
    let execs: usize = std::env::var("SANDLOG_BENCH_SERVE_EXECS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(400);
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    let cache = repo().join("target/sandlog-bench-cache");
    // `SANDLOG_BENCH_BIN` names another build of the binary (a dev build,
    // for a quick run); by default the release build beside this bench.
    let binary = std::env::var_os("SANDLOG_BENCH_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::current_exe()
                .ok()?
                .parent()
                .and_then(Path::parent)
                .map(|dir| dir.join("sandlog"))
        })
        .filter(|path| path.is_file())
        .ok_or(
            "the sandlog binary is not built: run `cargo build --release -p sandlog-cli` first",
        )?;
    let off = load(&binary, &runtimes, &cache, execs, None)?;
    let (receiver, received) = otlp_sink()?;
    let on = load(&binary, &runtimes, &cache, execs, Some(receiver))?;
    let received = received.load(Ordering::Relaxed);
    println!(
        "traces on vs off: p50 {:+.1} % ({on:.1?} vs {off:.1?}; the goal is within 3 %), {received} OTLP requests received",
        (on.as_secs_f64() / off.as_secs_f64() - 1.0) * 100.0
    );
    if received == 0 {
        return Err("traces were on, but no OTLP request reached the receiver".into());
    }
    Ok(())
}

/// One load test; traces go to `otlp` when given. Returns the p50 latency.
fn load(
    binary: &Path,
    runtimes: &Path,
    cache: &Path,
    execs: usize,
    otlp: Option<SocketAddr>,
) -> BenchResult<Duration> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let sandlog = |args: &[&str]| {
        let mut command = Command::new(binary);
        command
            .arg("--root")
            .arg(&root)
            .args(args)
            .env("SANDLOG_RUNTIMES_DIR", runtimes)
            .env("SANDLOG_CACHE_DIR", cache)
            .env_remove("SANDLOG_TOKEN")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        command
    };
    let init = sandlog(&["--json", "init"]).output()?;
    if !init.status.success() {
        return Err(format!("init: {}", String::from_utf8_lossy(&init.stderr)).into());
    }
    let mut serve = sandlog(&["serve", "--listen", "127.0.0.1:0"]);
    if let Some(receiver) = otlp {
        serve.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{receiver}"));
    }
    let mut server = serve.stdout(Stdio::piped()).spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on http://")
        .ok_or_else(|| format!("first line {line:?}"))?
        .parse()?;

    let mut sessions = Vec::new();
    for _ in 0..CLIENTS {
        let (status, body) = request(addr, "POST", "/v1/sessions", "")?;
        let created: serde_json::Value = serde_json::from_str(&body)?;
        let id = created["session_id"].as_str().ok_or("no session_id")?;
        if status != 201 {
            return Err(format!("create: {status} {body}").into());
        }
        sessions.push(id.to_owned());
    }
    // One warm-up execution (the server loads python.wasm once).
    request(
        addr,
        "POST",
        &format!(
            "/v1/sessions/{}/exec",
            sessions.first().ok_or("no session")?
        ),
        r#"{"code": "print(1)"}"#,
    )?;

    let next = Arc::new(Mutex::new(0usize));
    let results = Arc::new(Mutex::new(Vec::<(Duration, u64)>::new()));
    let started = Instant::now();
    let clients: Vec<_> = sessions
        .iter()
        .map(|id| {
            let (next, results, path) = (
                next.clone(),
                results.clone(),
                format!("/v1/sessions/{id}/exec"),
            );
            std::thread::spawn(move || -> BenchResult<()> {
                loop {
                    {
                        let mut taken = next.lock().map_err(|_| "poisoned")?;
                        if *taken >= execs {
                            return Ok(());
                        }
                        *taken += 1;
                    }
                    let sent = Instant::now();
                    let (status, body) = request(addr, "POST", &path, r#"{"code": "print(1)"}"#)?;
                    let latency = sent.elapsed();
                    let reply: serde_json::Value = serde_json::from_str(&body)?;
                    if status != 200 || reply["stdout"] != "1\n" {
                        return Err(format!("exec: {status} {body}").into());
                    }
                    let position = reply["position"].as_u64().ok_or("no position")?;
                    results
                        .lock()
                        .map_err(|_| "poisoned")?
                        .push((latency, position));
                }
            })
        })
        .collect();
    for client in clients {
        client.join().map_err(|_| "a client panicked")??;
    }
    let elapsed = started.elapsed();
    let results = results.lock().map_err(|_| "poisoned")?.clone();

    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()?;
    let status = server.wait()?;

    let mut latencies: Vec<Duration> = results.iter().map(|(latency, _)| *latency).collect();
    latencies.sort();
    let acknowledged: BTreeSet<u64> = results.iter().map(|(_, position)| *position).collect();
    let log = sandlog(&["--json", "log", "--kind", "session.executed"]).output()?;
    let recorded: Vec<u64> = String::from_utf8(log.stdout)?
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|event| event["position"].as_u64())
                .unwrap_or(0)
        })
        .collect();
    let recorded_set: BTreeSet<u64> = recorded.iter().copied().collect();
    let lost = acknowledged.difference(&recorded_set).count();
    let verify = sandlog(&["--json", "verify"]).output()?;
    let verify_ok = verify.status.success()
        && serde_json::from_slice::<serde_json::Value>(&verify.stdout)?["ok"] == true;

    println!(
        "serve load test, traces {}: {execs} × print(1), {CLIENTS} concurrent clients on loopback, one session each",
        if otlp.is_some() { "on" } else { "off" }
    );
    println!(
        "  p50 latency        {:>10.1?}",
        percentile(&latencies, 0.50)
    );
    println!(
        "  p99 latency        {:>10.1?}",
        percentile(&latencies, 0.99)
    );
    println!(
        "  max latency        {:>10.1?}",
        latencies.last().copied().unwrap_or_default()
    );
    println!(
        "  throughput         {:>10.1} exec/s ({} in {:.2?})",
        results.len() as f64 / elapsed.as_secs_f64(),
        results.len(),
        elapsed
    );
    println!(
        "  acknowledged       {:>10} (distinct positions {})",
        results.len(),
        acknowledged.len()
    );
    println!(
        "  executed events    {:>10} (1 warm-up + acknowledged expected)",
        recorded.len()
    );
    println!("  lost               {lost:>10}");
    println!(
        "  verify             {:>10}",
        if verify_ok { "ok" } else { "FAILED" }
    );
    println!("  server exit        {status}");
    if lost > 0
        || !verify_ok
        || acknowledged.len() != results.len()
        || recorded.len() != results.len() + 1
        || results.len() != execs
    {
        return Err("the load test lost or duplicated executions".into());
    }
    Ok(percentile(&latencies, 0.50))
}

/// An OTLP/HTTP receiver on loopback that answers every request with an
/// empty success and counts them: what a collector costs the server, not
/// what it does.
fn otlp_sink() -> BenchResult<(SocketAddr, Arc<AtomicUsize>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let _ = answer(stream, &counter);
            });
        }
    });
    Ok((addr, received))
}

/// Reads requests on one connection (headers, then `Content-Length`
/// bytes of body) and answers each with 200.
fn answer(stream: TcpStream, counter: &AtomicUsize) -> BenchResult<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse()?;
            }
        }
        std::io::copy(&mut (&mut reader).take(length as u64), &mut std::io::sink())?;
        counter.fetch_add(1, Ordering::Relaxed);
        writer.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        )?;
    }
}
