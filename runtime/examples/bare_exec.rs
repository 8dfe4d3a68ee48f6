//! Measures the sandbox's bare costs with the real `python.wasm`: compile
//! time, cached load time, `print(1)` latency over 30 runs (wall time, and
//! the calling thread's CPU time, which a busy machine disturbs less), and
//! the peak resident memory of a process that does one run.
//!
//! Run: `scripts/fetch-runtimes.sh && cargo run -p sandlog-runtime --example bare_exec`
//! (`--release` for release numbers; dependencies are optimised either way).
//! Options: `--skip-compile` reuses the cache in `target/sandlog-bench-cache`
//! instead of timing a cold compile. `SANDLOG_RUNTIMES_DIR` overrides where
//! `python.wasm` is found.
//!
//! Internally, `--one-run CACHE_DIR` makes the process load from the cache,
//! run `print(1)` once and print its peak RSS; the main process spawns
//! itself that way so the figure is not inflated by compilation.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sandlog_runtime::sandbox::{
    ExecLimits, Outcome, RunRequest, Sandbox, SandboxError, python_args,
};

/// Runs per latency measurement: enough for a stable median on a noisy
/// machine, few enough to finish in a couple of seconds.
const RUNS: usize = 30;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, cache_dir] = args.as_slice()
        && flag == "--one-run"
    {
        return one_run(Path::new(cache_dir));
    }
    let skip_compile = args.iter().any(|arg| arg == "--skip-compile");

    let repo_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python_path = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir.join(".runtimes"))
        .join("python.wasm");
    if !python_path.is_file() {
        return Err(format!(
            "{} is missing: run scripts/fetch-runtimes.sh",
            python_path.display()
        )
        .into());
    }
    let cache_dir = repo_dir.join("target").join("sandlog-bench-cache");

    if !skip_compile {
        if cache_dir.exists() {
            std::fs::remove_dir_all(&cache_dir)?;
        }
        let sandbox = Sandbox::new(&cache_dir)?;
        let started = Instant::now();
        let module = sandbox.load(&python_path)?;
        println!(
            "compile python.wasm ({:?}, artifact written): {:>10.1} ms",
            module.origin(),
            millis(started.elapsed())
        );
    }

    let sandbox = Sandbox::new(&cache_dir)?;
    let started = Instant::now();
    let python = sandbox.load(&python_path)?;
    println!(
        "first load in a new Sandbox ({:?}):      {:>10.2} ms",
        python.origin(),
        millis(started.elapsed())
    );
    let started = Instant::now();
    sandbox.load(&python_path)?;
    println!(
        "second load (in memory):                   {:>10.3} ms",
        millis(started.elapsed())
    );

    let workspace = std::env::temp_dir().join(format!("sandlog-bare-exec-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;
    for (label, args) in [
        (
            "print(1), python_args (cwd /app, -S)",
            python_args("print(1)"),
        ),
        (
            "print(1), -c only (cwd /, site)",
            vec!["-c".to_owned(), "print(1)".to_owned()],
        ),
        (
            "print(1), -I -S -c (cwd /)",
            vec![
                "-I".to_owned(),
                "-S".to_owned(),
                "-c".to_owned(),
                "print(1)".to_owned(),
            ],
        ),
    ] {
        let mut durations = Vec::with_capacity(RUNS);
        let mut cpu_durations = Vec::with_capacity(RUNS);
        let mut fuel = 0;
        for _ in 0..RUNS {
            let mut request = RunRequest::new(&workspace);
            request.args = args.clone();
            let cpu_started = thread_cpu_time()?;
            let started = Instant::now();
            let report = sandbox.run(&python, request)?;
            durations.push(started.elapsed());
            cpu_durations.push(thread_cpu_time()?.saturating_sub(cpu_started));
            if report.outcome != Outcome::Ok || report.stdout != b"1\n" {
                return Err(format!("unexpected run: {report:?}").into());
            }
            fuel = report.fuel_consumed;
        }
        durations.sort();
        cpu_durations.sort();
        println!(
            "{label:<38} wall median {:>6.2} ms (min {:>6.2}, p90 {:>6.2})  cpu median {:>6.2} ms  fuel {fuel}",
            millis(percentile(&durations, 50)),
            millis(percentile(&durations, 0)),
            millis(percentile(&durations, 90)),
            millis(percentile(&cpu_durations, 50)),
        );
    }
    std::fs::remove_dir_all(&workspace)?;

    let output = Command::new(std::env::current_exe()?)
        .arg("--one-run")
        .arg(&cache_dir)
        .env(
            "SANDLOG_RUNTIMES_DIR",
            python_path.parent().unwrap_or(Path::new(".")),
        )
        .output()?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    if !output.status.success() {
        return Err(format!(
            "one-run child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}

/// In a fresh process: load python.wasm from the cache, run `print(1)` once,
/// report resident memory before and the peak after.
fn one_run(cache_dir: &Path) -> Result<(), Error> {
    let python_path = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .ok_or("SANDLOG_RUNTIMES_DIR not set")?
        .join("python.wasm");
    let sandbox = Sandbox::new(cache_dir)?;
    let python = sandbox.load(&python_path)?;
    let rss_loaded = proc_status_kib("VmRSS")?;
    let workspace = tempdir()?;
    let mut request = RunRequest::new(&workspace);
    request.args = python_args("print(1)");
    request.limits = ExecLimits::default();
    let report = sandbox
        .run(&python, request)
        .map_err(|error: SandboxError| error.to_string())?;
    std::fs::remove_dir_all(&workspace)?;
    if report.outcome != Outcome::Ok {
        return Err(format!("unexpected run: {report:?}").into());
    }
    println!(
        "one-run process: RSS after load {:.1} MiB, peak RSS {:.1} MiB, guest memory peak {:.1} MiB",
        f64::from(u32::try_from(rss_loaded).unwrap_or(u32::MAX)) / 1024.0,
        f64::from(u32::try_from(proc_status_kib("VmHWM")?).unwrap_or(u32::MAX)) / 1024.0,
        report.memory_bytes_peak as f64 / (1024.0 * 1024.0),
    );
    Ok(())
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (ns
/// precision, Linux only). Runs execute on the calling thread, so this is
/// the run's CPU cost, undisturbed by other processes competing for cores.
fn thread_cpu_time() -> Result<Duration, Error> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    let nanos: u64 = schedstat
        .split_whitespace()
        .next()
        .ok_or("empty schedstat")?
        .parse()?;
    Ok(Duration::from_nanos(nanos))
}

fn tempdir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sandlog-one-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A `kB` field of `/proc/self/status` (Linux only).
fn proc_status_kib(field: &str) -> Result<u64, Error> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with(field))
        .ok_or_else(|| format!("{field} not in /proc/self/status"))?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| format!("malformed {field} line"))?;
    Ok(kib.parse()?)
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let index = (sorted.len().saturating_sub(1) * percent) / 100;
    sorted.get(index).copied().unwrap_or_default()
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
