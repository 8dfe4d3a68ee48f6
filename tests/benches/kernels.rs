//! Warm session kernels (issue 17): `print(1)` in a warm kernel (p50, p99;
//! target p50 ≤ 5 ms) against a cold `Engine::execute`, the state-carrying
//! pair `x = 1` then `print(x)`, the time to start a kernel, and the
//! linear and resident memory of an idle kernel. Every figure includes the
//! recording (events appended, workspace scanned), as a server's `exec`
//! would.
//!
//! Run: `make bench` or `cargo bench -p sandlog-tests --bench kernels`.
//! `SANDLOG_BENCH_KERNEL_RUNS` sets the samples per latency (default 200).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::{ManualClock, Timestamp};
use sandlog_runtime::{Engine, EngineOptions, ExecRequest, KernelLimits, KernelPool};
use sandlog_sqlite::Durability;

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Kernels started for the start-time and memory figures.
const STARTS: usize = 8;

/// Cold executions for comparison (each ~tens of ms).
const COLD_RUNS: usize = 30;

fn percentile(samples: &mut [Duration], fraction: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * fraction).round() as usize;
    samples.get(index).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> BenchResult<()> {
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    if !runtimes.join("python.wasm").is_file() {
        return Err(format!(
            "{} has no python.wasm: run `make runtimes`",
            runtimes.display()
        )
        .into());
    }
    let runs: usize = std::env::var("SANDLOG_BENCH_KERNEL_RUNS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(200);
    let cache = repo().join("target/sandlog-bench-cache");
    let root_dir = tempfile::tempdir()?;
    Engine::init(root_dir.path())?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let engine = Engine::open(
        root_dir.path(),
        EngineOptions {
            clock: Arc::new(clock),
            runtimes_dir: Some(runtimes),
            cache_dir: Some(cache),
            // As a server would run: commits survive a process crash.
            durability: Durability::Normal,
            ..EngineOptions::default()
        },
    )?;
    let pool = KernelPool::new(KernelLimits {
        kernels_max: STARTS + 1,
        ..KernelLimits::default()
    });
    let print = ExecRequest::python("print(1)");

    // Cold, for comparison (the first loads python.wasm from the cache).
    let cold_session = engine.create_session(BTreeMap::new())?.session_id;
    engine.execute(cold_session, &print)?;
    let mut cold = Vec::new();
    for _ in 0..COLD_RUNS {
        let started = Instant::now();
        let run = engine.execute(cold_session, &print)?;
        cold.push(started.elapsed());
        assert_eq!(run.stdout, b"1\n");
    }

    // Kernel start: the first execution of a new session, less a warm
    // execution's time, is the start; also the memory each idle kernel
    // adds.
    let rss_before = rss_kib();
    let mut starts = Vec::new();
    let mut first_execs = Vec::new();
    for _ in 0..STARTS {
        let id = engine.create_session(BTreeMap::new())?.session_id;
        let stats_before = pool.stats();
        let started = Instant::now();
        let run = pool.execute(&engine, id, &print)?;
        first_execs.push(started.elapsed());
        assert!(!run.warm);
        let stats = pool.stats();
        starts.push(Duration::from_micros(
            stats.kernel_start_us - stats_before.kernel_start_us,
        ));
    }
    let rss_after = rss_kib();
    let stats = pool.stats();
    let linear_per_kernel = stats.memory_bytes / stats.kernels.max(1) as u64;
    let rss_per_kernel = rss_after.saturating_sub(rss_before) / STARTS as u64;

    // Warm print(1).
    let id = engine.create_session(BTreeMap::new())?.session_id;
    pool.execute(&engine, id, &print)?;
    let mut warm = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let run = pool.execute(&engine, id, &print)?;
        warm.push(started.elapsed());
        assert!(run.warm);
        assert_eq!(run.execution.stdout, b"1\n");
    }

    // State-carrying pair.
    let set = ExecRequest::python("x = 1");
    let get = ExecRequest::python("print(x)");
    let mut pairs = Vec::new();
    for _ in 0..runs / 2 {
        let started = Instant::now();
        pool.execute(&engine, id, &set)?;
        let run = pool.execute(&engine, id, &get)?;
        pairs.push(started.elapsed());
        assert_eq!(run.execution.stdout, b"1\n");
    }
    let verified = engine.verify(None, &|_| {})?;
    assert!(verified.ok);

    let cold_p50 = percentile(&mut cold, 0.5);
    let warm_p50 = percentile(&mut warm, 0.5);
    println!("warm session kernels ({runs} warm samples, {COLD_RUNS} cold, {STARTS} starts)");
    println!("  figure                                 p50        p99");
    println!(
        "  print(1) warm, through the engine  {:>8.2} ms {:>8.2} ms   target p50 <= 5 ms: {}",
        ms(warm_p50),
        ms(percentile(&mut warm, 0.99)),
        if ms(warm_p50) <= 5.0 { "met" } else { "MISSED" }
    );
    println!(
        "  print(1) cold Engine::execute      {:>8.2} ms {:>8.2} ms   warm is {:.1}x faster",
        ms(cold_p50),
        ms(percentile(&mut cold, 0.99)),
        cold_p50.as_secs_f64() / warm_p50.as_secs_f64().max(1e-9)
    );
    println!(
        "  x = 1, then print(x) (warm pair)   {:>8.2} ms {:>8.2} ms",
        ms(percentile(&mut pairs, 0.5)),
        ms(percentile(&mut pairs, 0.99))
    );
    println!(
        "  kernel start                       {:>8.2} ms {:>8.2} ms",
        ms(percentile(&mut starts, 0.5)),
        ms(percentile(&mut starts, 0.99))
    );
    println!(
        "  first exec of a session (start+run){:>8.2} ms {:>8.2} ms",
        ms(percentile(&mut first_execs, 0.5)),
        ms(percentile(&mut first_execs, 0.99))
    );
    println!(
        "  idle kernel memory: {:.1} MiB linear, {:.1} MiB resident (RSS growth / kernel)",
        linear_per_kernel as f64 / (1024.0 * 1024.0),
        rss_per_kernel as f64 / 1024.0
    );
    println!(
        "  vs the seed system's 4.5 s print(1): {:.0}x",
        4.5 / warm_p50.as_secs_f64().max(1e-9)
    );
    pool.shutdown(&engine);
    Ok(())
}
