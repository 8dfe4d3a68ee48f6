//! Execution benchmark (issue 4): `print(1)` through `Engine::execute`
//! (events appended, workspace compared) against the bare minimum measured
//! by the same binary (a cached python.wasm instantiated and run with the
//! sandbox alone); the first execution after `Engine::open` on a warm
//! cache; a whole `sandlog exec` process; 20 sequential executions that
//! each write a file; resident memory per execution in flight and across
//! many sequential executions; a user's first `sandlog exec` in a new root,
//! with the shared module cache warm and cold; the release binary's size.
//!
//! Run: `make bench` or `cargo build --release -p sandlog-cli && cargo
//! bench -p sandlog-tests --bench exec`. `SANDLOG_BENCH_EXEC_LEAK_RUNS`
//! sets the leak-check length (default 1000).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::{ManualClock, Timestamp};
use sandlog_runtime::sandbox::{RunRequest, Sandbox, python_args};
use sandlog_runtime::{Engine, EngineOptions, ExecRequest};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Samples per latency figure.
const RUNS: usize = 30;

/// Acquire-and-release cycles of the writer lock measured.
const LOCK_CYCLES: usize = 1000;

/// Fresh engines opened for the first-execution figure (each opens the
/// store, builds a sandbox and loads python.wasm from the disk cache).
const FIRST_RUN_SAMPLES: usize = 7;

/// New roots for the first `sandlog exec` with a warm cache (each one
/// process, loading python.wasm compiled for another root).
const NEW_ROOT_SAMPLES: usize = 7;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (Linux: `echo 5 > clear_refs`).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> BenchResult<()> {
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    let python = runtimes.join("python.wasm");
    if !python.is_file() {
        return Err(format!("{} missing: run `make runtimes`", python.display()).into());
    }
    let cache = repo().join("target/sandlog-bench-cache");
    let leak_runs: usize = std::env::var("SANDLOG_BENCH_EXEC_LEAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);

    // Warm the cache (compiles python.wasm once if needed).
    let warm_started = Instant::now();
    Sandbox::new(&cache)?.load(&python)?;
    println!("cache warm after {:.1?}", warm_started.elapsed());

    // Bare minimum: the sandbox alone, module loaded, print(1).
    let sandbox = Sandbox::new(&cache)?;
    let module = sandbox.load(&python)?;
    let workspace = tempfile::tempdir()?;
    let mut bare = Vec::new();
    for _ in 0..RUNS {
        let mut request = RunRequest::new(workspace.path());
        request.args = python_args("print(1)");
        let started = Instant::now();
        let report = sandbox.run(&module, request)?;
        bare.push(started.elapsed());
        assert_eq!(report.stdout, b"1\n");
    }
    let bare = median(bare);
    drop(sandbox);

    // Through the engine.
    let root_dir = tempfile::tempdir()?;
    Engine::init(root_dir.path())?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let options = || EngineOptions {
        clock: Arc::new(clock.clone()),
        runtimes_dir: Some(runtimes.clone()),
        cache_dir: Some(cache.clone()),
        ..EngineOptions::default()
    };
    let engine = Engine::open(root_dir.path(), options())?;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let first_started = Instant::now();
    engine.execute(id, &ExecRequest::python("print(1)"))?;
    let first = first_started.elapsed();
    let mut through = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let run = engine.execute(id, &ExecRequest::python("print(1)"))?;
        through.push(started.elapsed());
        assert_eq!(run.stdout, b"1\n");
    }
    let through = median(through);

    // What the cross-process writer lock adds to each execution: one
    // acquire and release of the exclusive lock on the workspace directory
    // (the session's shared lease, taken first, predates it).
    let workspace = engine.layout().workspace(id);
    let mut cycles = Vec::with_capacity(LOCK_CYCLES);
    for _ in 0..LOCK_CYCLES {
        let started = Instant::now();
        let writer =
            sandlog_runtime::lease::WriterLock::acquire(&workspace, id, Duration::from_secs(1))?;
        drop(writer);
        cycles.push(started.elapsed());
    }
    let lock = median(cycles);

    // The same on a node of a shared PostgreSQL log (the throwaway server
    // of the tests, or $SANDLOG_TEST_PG_URL): the unit of work commits
    // there, then the node's replica copies it.
    let database = sandlog_tests::pg::database()?;
    let node_dir = tempfile::tempdir()?;
    let node = Engine::open(
        node_dir.path(),
        EngineOptions {
            store: Some(database.url.clone()),
            create: true,
            ..options()
        },
    )?;
    let on_node = node.create_session(BTreeMap::new())?.session_id;
    node.execute(on_node, &ExecRequest::python("print(1)"))?;
    let mut shared = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let run = node.execute(on_node, &ExecRequest::python("print(1)"))?;
        shared.push(started.elapsed());
        assert_eq!(run.stdout, b"1\n");
    }
    let shared = median(shared);
    drop(node);

    // 20 sequential executions, each writing a file.
    let writer = engine.create_session(BTreeMap::new())?.session_id;
    let mut writes = Vec::new();
    let all_started = Instant::now();
    for index in 0..20 {
        let started = Instant::now();
        let run = engine.execute(
            writer,
            &ExecRequest::python(format!("open('f{index}.txt','w').write('x' * {index})")),
        )?;
        writes.push(started.elapsed());
        assert_eq!(run.files_written.len(), 1);
    }
    let writes_total = all_started.elapsed();
    let writes_median = median(writes);

    // Memory: idle baseline, one run in flight, four in flight.
    let idle_kib = status_kib("VmRSS:");
    reset_peak();
    engine.execute(id, &ExecRequest::python("print(1)"))?;
    let one_peak_kib = status_kib("VmHWM:");
    let sessions: Vec<_> = (0..4)
        .map(|_| engine.create_session(BTreeMap::new()).map(|s| s.session_id))
        .collect::<Result<_, _>>()?;
    reset_peak();
    std::thread::scope(|scope| {
        for session in &sessions {
            let engine = &engine;
            scope.spawn(move || {
                engine.execute(
                    *session,
                    &ExecRequest::python("x = 'y' * 1000000; print(len(x))"),
                )
            });
        }
    });
    let four_peak_kib = status_kib("VmHWM:");

    // No growth across many sequential executions.
    for _ in 0..100 {
        engine.execute(id, &ExecRequest::python("print(1)"))?;
    }
    let after_100_kib = status_kib("VmRSS:");
    for _ in 100..leak_runs {
        engine.execute(id, &ExecRequest::python("print(1)"))?;
    }
    let after_all_kib = status_kib("VmRSS:");
    drop(engine);

    // First execution after Engine::open on a warm cache, each time in a
    // fresh engine; the median of a few, as one sample swung by a third.
    let mut firsts = Vec::new();
    for _ in 0..FIRST_RUN_SAMPLES {
        let engine = Engine::open(root_dir.path(), options())?;
        let started = Instant::now();
        engine.execute(id, &ExecRequest::python("print(1)"))?;
        firsts.push(started.elapsed());
    }
    let first_after_open = median(firsts);

    // A whole `sandlog exec` process.
    let binary = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("sandlog"))
        .filter(|path| path.is_file());
    let process = match &binary {
        Some(binary) => {
            let mut samples = Vec::new();
            for _ in 0..RUNS {
                let started = Instant::now();
                let output = Command::new(binary)
                    .args(["--root"])
                    .arg(root_dir.path())
                    .args(["exec", &id.to_string(), "--code", "print(1)"])
                    .env("SANDLOG_RUNTIMES_DIR", &runtimes)
                    .env("SANDLOG_CACHE_DIR", &cache)
                    .output()?;
                samples.push(started.elapsed());
                assert_eq!(
                    output.stdout,
                    b"1\n",
                    "{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            Some(median(samples))
        }
        None => None,
    };

    // A user's first `sandlog exec` in a new root: the root and a session
    // are made through the library (no sandbox), then one process runs
    // `print(1)`. Warm: the cache already holds python.wasm, compiled for
    // other roots. Cold: an empty cache, so the process compiles it (one
    // sample: it costs seconds).
    let new_root = match &binary {
        Some(binary) => {
            let first_exec = |cache: &Path| -> BenchResult<Duration> {
                let dir = tempfile::tempdir()?;
                let root = Engine::init(dir.path())?;
                let engine = Engine::open(&root, options())?;
                let id = engine.create_session(BTreeMap::new())?.session_id;
                drop(engine);
                let started = Instant::now();
                let output = Command::new(binary)
                    .arg("--root")
                    .arg(&root)
                    .args(["exec", &id.to_string(), "--code", "print(1)"])
                    .env("SANDLOG_RUNTIMES_DIR", &runtimes)
                    .env("SANDLOG_CACHE_DIR", cache)
                    .output()?;
                let elapsed = started.elapsed();
                if output.stdout != b"1\n" {
                    return Err(String::from_utf8_lossy(&output.stderr).into_owned().into());
                }
                Ok(elapsed)
            };
            let warm = (0..NEW_ROOT_SAMPLES)
                .map(|_| first_exec(&cache))
                .collect::<BenchResult<Vec<_>>>()?;
            let cold_cache = tempfile::tempdir()?;
            let cold = first_exec(cold_cache.path())?;
            let size = std::fs::metadata(binary)?.len();
            Some((median(warm), cold, size))
        }
        None => None,
    };

    println!();
    println!("| measurement | result | target |");
    println!("|---|---|---|");
    println!(
        "| bare minimum: cached python.wasm, sandbox only, `print(1)` (median of {RUNS}) | {:.1} ms | — |",
        ms(bare)
    );
    println!(
        "| `Engine::execute` `print(1)` (events + workspace compare, median of {RUNS}) | {:.1} ms | ≤ 1.25× bare |",
        ms(through)
    );
    println!(
        "| ratio engine / bare | {:.2}× | ≤ 1.25× |",
        through.as_secs_f64() / bare.as_secs_f64().max(1e-9)
    );
    println!(
        "| writer lock per execution (acquire + release, median of {LOCK_CYCLES}) | {:.1} µs = {:.2} % of `Engine::execute` | ≤ 5 % |",
        lock.as_secs_f64() * 1e6,
        100.0 * lock.as_secs_f64() / through.as_secs_f64().max(1e-9)
    );
    println!(
        "| `Engine::execute` `print(1)` on a shared PostgreSQL log (median of {RUNS}) | {:.1} ms ({:.2}× SQLite) | — |",
        ms(shared),
        shared.as_secs_f64() / through.as_secs_f64().max(1e-9)
    );
    println!(
        "| first execution after the engine's first open (module from disk cache) | {:.1} ms | — |",
        ms(first)
    );
    println!(
        "| first execution after `Engine::open`, warm cache (median of {FIRST_RUN_SAMPLES} fresh engines) | {:.1} ms ({:.2}× a later one) | ≤ 2× |",
        ms(first_after_open),
        first_after_open.as_secs_f64() / through.as_secs_f64().max(1e-9)
    );
    match process {
        Some(process) => println!(
            "| whole `sandlog exec` process (median of {RUNS}) | {:.1} ms | ≤ 150 ms |",
            ms(process)
        ),
        None => println!(
            "| whole `sandlog exec` process | not measured: build target/<profile>/sandlog first (`make bench` does) | ≤ 150 ms |"
        ),
    }
    match new_root {
        Some((warm, cold, size)) => {
            println!(
                "| first `sandlog exec` in a new root, warm module cache (median of {NEW_ROOT_SAMPLES} roots) | {:.1} ms | ≤ 300 ms |",
                ms(warm)
            );
            println!(
                "| first `sandlog exec` in a new root, cold module cache (compiles python.wasm) | {:.1} s | — |",
                cold.as_secs_f64()
            );
            println!(
                "| `sandlog` binary size ({}) | {:.1} MB | ≤ 40 MB |",
                binary
                    .as_deref()
                    .map_or_else(String::new, |path| path.display().to_string()),
                size as f64 / 1e6
            );
        }
        None => println!(
            "| first `sandlog exec` in a new root; binary size | not measured: build target/<profile>/sandlog first (`make bench` does) | ≤ 300 ms; ≤ 40 MB |"
        ),
    }
    println!(
        "| 20 sequential executions writing a file each | {:.0} ms total, {:.1} ms median | — |",
        ms(writes_total),
        ms(writes_median)
    );
    println!(
        "| resident memory, engine idle | {:.1} MiB | — |",
        idle_kib as f64 / 1024.0
    );
    println!(
        "| peak added by one execution in flight | {:.1} MiB | ≤ 40 MiB |",
        one_peak_kib.saturating_sub(idle_kib) as f64 / 1024.0
    );
    println!(
        "| peak added per execution, 4 in flight | {:.1} MiB | ≤ 40 MiB |",
        four_peak_kib.saturating_sub(idle_kib) as f64 / 4.0 / 1024.0
    );
    println!(
        "| RSS after 100 sequential executions → after {leak_runs} | {:.1} → {:.1} MiB | no growth |",
        after_100_kib as f64 / 1024.0,
        after_all_kib as f64 / 1024.0
    );
    Ok(())
}
