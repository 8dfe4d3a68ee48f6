//! `session sync` on a large workspace (issue 16's acceptance: 10,000
//! unchanged files in at most 200 ms). Figures: `Engine::sync_session` on
//! 10,000 unchanged small files with the stat cache, the same with the
//! cache removed before each run (every file hashed), with one file
//! changed among them (recorded, then the cache refreshed), and a whole
//! `sandlog session sync` process (opening the root included) when the
//! binary beside this bench exists (`make bench` builds the release one).
//!
//! Run: `cargo bench -p sandlog-tests --bench sync`. Sizes:
//! `SANDLOG_BENCH_SYNC_FILES` (default 10000), `SANDLOG_BENCH_SYNC_FILE_BYTES`
//! (each file's size, default 10: what hashing costs grows with it, what
//! the stat cache costs does not).

use std::error::Error;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sandlog_runtime::native::{STAT_CACHE_RACY_WINDOW, stat_cache_path};
use sandlog_runtime::{Engine, EngineOptions, NewSession};
use sandlog_sqlite::Durability;

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Samples per figure.
const RUNS: usize = 15;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn main() -> BenchResult<()> {
    let files: usize = std::env::var("SANDLOG_BENCH_SYNC_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let file_bytes: usize = std::env::var("SANDLOG_BENCH_SYNC_FILE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let root = tempfile::tempdir()?;
    Engine::init(root.path())?;
    let engine = Engine::open(
        root.path(),
        EngineOptions {
            durability: Durability::Normal,
            ..EngineOptions::default()
        },
    )?;
    let session = engine.create_session_with(NewSession {
        max_size: Some(1 << 30),
        ..NewSession::default()
    })?;
    let id = session.session_id;
    let workspace = engine.session_path(id)?;

    // 10,000 small files in 100 directories, made by "an agent" outside
    // sandlog, then recorded by a first sync.
    let made = Instant::now();
    for index in 0..files {
        let dir = workspace.join(format!("d{:03}", index % 100));
        if index < 100 {
            std::fs::create_dir(&dir)?;
        }
        let mut content = format!("file {index}\n").into_bytes();
        content.resize(file_bytes.max(content.len()), b'.');
        std::fs::write(dir.join(format!("f{index:05}.txt")), content)?;
    }
    let first_started = Instant::now();
    let first = engine.sync_session(id)?;
    let first_sync = first_started.elapsed();
    assert_eq!(first.files_written.len(), files);
    println!(
        "{files} files of {file_bytes} bytes made in {:.0} ms; first sync (records them all) {:.0} ms",
        ms(made.elapsed() - first_sync),
        ms(first_sync)
    );
    // Files changed just before a sync are not cached (the racy window);
    // wait it out, then one sync fills the cache.
    std::thread::sleep(STAT_CACHE_RACY_WINDOW * 3);
    let filling = engine.sync_session(id)?;
    assert!(!filling.recorded);

    let mut cached = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let report = engine.sync_session(id)?;
        cached.push(started.elapsed());
        assert!(!report.recorded, "nothing changed");
        assert_eq!(report.files_hashed, 0, "the cache vouches for every file");
    }

    let cache = stat_cache_path(root.path(), id);
    let mut uncached = Vec::new();
    for _ in 0..RUNS {
        std::fs::remove_file(&cache)?;
        let started = Instant::now();
        let report = engine.sync_session(id)?;
        uncached.push(started.elapsed());
        assert!(!report.recorded);
        assert_eq!(report.files_hashed as usize, files);
    }

    let mut one_changed = Vec::new();
    for run in 0..RUNS {
        std::thread::sleep(STAT_CACHE_RACY_WINDOW * 2);
        std::fs::write(
            workspace.join("d007/f00007.txt"),
            format!("changed {run}\n"),
        )?;
        std::thread::sleep(STAT_CACHE_RACY_WINDOW * 2);
        let started = Instant::now();
        let report = engine.sync_session(id)?;
        one_changed.push(started.elapsed());
        assert_eq!(report.files_written.len(), 1);
        assert!(report.files_hashed <= 1, "{} hashed", report.files_hashed);
    }

    // A whole `sandlog session sync` process, the cache warm.
    let binary = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("sandlog"))
        .filter(|path| path.is_file());
    let process = match &binary {
        Some(binary) => {
            engine.sync_session(id)?;
            let mut samples = Vec::new();
            for _ in 0..RUNS {
                let started = Instant::now();
                let output = Command::new(binary)
                    .arg("--root")
                    .arg(root.path())
                    .args(["--json", "session", "sync", &id.to_string()])
                    .output()?;
                samples.push(started.elapsed());
                if !output.status.success() {
                    return Err(String::from_utf8_lossy(&output.stderr).into_owned().into());
                }
            }
            Some(median(samples))
        }
        None => None,
    };

    println!();
    println!("| measurement (median of {RUNS}) | result | target |");
    println!("|---|---|---|");
    println!(
        "| `Engine::sync_session`, {files} unchanged files of {file_bytes} bytes, stat cache warm | {:.1} ms | ≤ 200 ms |",
        ms(median(cached))
    );
    println!(
        "| `Engine::sync_session`, {files} unchanged files of {file_bytes} bytes, no cache (every file hashed) | {:.1} ms | — |",
        ms(median(uncached))
    );
    println!(
        "| `Engine::sync_session`, one of {files} files changed (recorded) | {:.1} ms | — |",
        ms(median(one_changed))
    );
    match process {
        Some(process) => println!(
            "| whole `sandlog session sync` process ({}), {files} unchanged files | {:.1} ms | ≤ 200 ms |",
            binary
                .as_deref()
                .map_or(String::new(), |path| path.display().to_string()),
            ms(process)
        ),
        None => println!(
            "| whole `sandlog session sync` process | not measured: build target/<profile>/sandlog first (`make bench` does) | ≤ 200 ms |"
        ),
    }
    Ok(())
}
