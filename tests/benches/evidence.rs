//! Evidence benchmark (issue 12), printed as one table: `print(1)` and a
//! script writing 100 files of 10 KB through `Engine::execute` with
//! evidence on (the default budget) and off (budget 0), interleaved so
//! drift of a shared machine hits both alike; storage per execution
//! (growth of the database's files, and blobs as stored against their raw
//! length); the deduplication ratio when the same 100 files are written
//! 100 times; and the rate of `restore`.
//!
//! Run: `make bench` or `cargo bench -p sandlog-tests --bench evidence`.
//! `SANDLOG_BENCH_EVIDENCE_RUNS` sets the samples per latency figure
//! (default 30), `SANDLOG_BENCH_EVIDENCE_REPEATS` the number of times the
//! same files are written (default 100).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::event::Event;
use sandlog_core::{ManualClock, SessionId, Timestamp, WorkspacePath};
use sandlog_projections::Cut;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest, LimitOverrides};
use sandlog_tests::engine::RawLog;

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Executions writing 100 files sampled per setting (each writes 1 MB).
const WRITE_RUNS: usize = 10;

/// Restores timed per figure.
const RESTORE_RUNS: usize = 7;

/// Files and size of the large-file restore figure.
const LARGE_FILES: usize = 16;
const LARGE_FILE_BYTES: usize = 4 * 1024 * 1024;

fn env_size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn with_budget(code: &str, budget: Option<u64>) -> ExecRequest {
    ExecRequest {
        limits: LimitOverrides {
            evidence_bytes: budget,
            ..LimitOverrides::default()
        },
        ..ExecRequest::python(code)
    }
}

/// Bytes of the database and its WAL, after a checkpoint folds the WAL in
/// (so the figure is what the file holds, not what is waiting).
fn database_bytes(engine: &Engine) -> BenchResult<u64> {
    engine.raw_log()?.checkpoint_wal()?;
    let database = &engine.layout().database;
    let mut wal = database.clone().into_os_string();
    wal.push("-wal");
    let wal_bytes = std::fs::metadata(PathBuf::from(wal)).map_or(0, |m| m.len());
    Ok(std::fs::metadata(database)?.len() + wal_bytes)
}

/// Raw bytes of the blobs `sessions`' events name as stored (code,
/// output when kept, files when kept), counted once per event.
fn raw_bytes_named(engine: &Engine, sessions: &[SessionId]) -> BenchResult<u64> {
    let mut raw = 0u64;
    for session in sessions {
        for envelope in engine.session_events(*session)? {
            match envelope.event()? {
                Some(Event::SessionExecuted(executed)) => {
                    raw += executed.code_bytes;
                    if executed.evidence.is_some_and(|e| e.output_kept) {
                        raw += executed.stdout_bytes + executed.stderr_bytes;
                    }
                }
                Some(Event::FileWritten(written)) if written.content_stored() => {
                    raw += written.size;
                }
                _ => {}
            }
        }
    }
    Ok(raw)
}

/// Storage added by a phase: database growth, and blobs' stored and raw
/// bytes added.
struct Growth {
    database: u64,
    stored: u64,
    raw: u64,
}

struct Mark {
    database: u64,
    stored: u64,
    raw: u64,
}

fn mark(engine: &Engine) -> BenchResult<Mark> {
    let totals = engine.blob_totals()?;
    Ok(Mark {
        database: database_bytes(engine)?,
        stored: totals.stored_bytes,
        raw: totals.kept_bytes,
    })
}

fn growth(engine: &Engine, since: &Mark) -> BenchResult<Growth> {
    let now = mark(engine)?;
    Ok(Growth {
        database: now.database.saturating_sub(since.database),
        stored: now.stored.saturating_sub(since.stored),
        raw: now.raw.saturating_sub(since.raw),
    })
}

/// Restores `session` as it is now into fresh directories; the median
/// time and the files and bytes of one restore.
fn time_restore(engine: &Engine, session: SessionId) -> BenchResult<(Duration, u64, u64)> {
    let head = engine.head()?.position;
    let scratch = tempfile::tempdir()?;
    let mut samples = Vec::new();
    let (mut files, mut bytes) = (0, 0);
    for run in 0..RESTORE_RUNS {
        let target = scratch.path().join(run.to_string());
        let started = Instant::now();
        let report = engine.restore(session, Cut::Position(head), &target)?;
        samples.push(started.elapsed());
        if !report.missing.is_empty() {
            return Err(format!("restore left files missing: {:?}", report.missing).into());
        }
        (files, bytes) = (report.files, report.bytes);
        std::fs::remove_dir_all(&target)?;
    }
    Ok((median(samples), files, bytes))
}

/// 100 files of 10 KB, new random bytes on every call.
const WRITE_100: &str =
    "import os\nfor i in range(100):\n    open(f'f{i}.bin', 'wb').write(os.urandom(10240))\n";

/// The same 100 files of 10 KB on every call (bytes fixed per file).
const SAME_100: &str = "import random\nfor i in range(100):\n    open(f'f{i}.bin', 'wb').write(random.Random(i).randbytes(10240))\n";

fn main() -> BenchResult<()> {
    let runs = env_size("SANDLOG_BENCH_EVIDENCE_RUNS", 30);
    let repeats = env_size("SANDLOG_BENCH_EVIDENCE_REPEATS", 100);
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
    let cache = repo().join("target/sandlog-bench-cache");
    let root = tempfile::tempdir()?;
    Engine::init(root.path())?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let engine = Engine::open(
        root.path(),
        EngineOptions {
            clock: Arc::new(clock),
            runtimes_dir: Some(runtimes),
            cache_dir: Some(cache),
            ..EngineOptions::default()
        },
    )?;
    let on = engine.create_session(BTreeMap::new())?.session_id;
    let off = engine.create_session(BTreeMap::new())?.session_id;
    // Warm: the module cache, the first execution of each session.
    let warm_started = Instant::now();
    engine.execute(on, &with_budget("print(1)", None))?;
    engine.execute(off, &with_budget("print(1)", Some(0)))?;
    println!("warm after {:.1?}", warm_started.elapsed());

    // print(1), evidence on and off, interleaved.
    let before_print = mark(&engine)?;
    let mut print_on = Vec::new();
    let mut print_off = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let run = engine.execute(on, &with_budget("print(1)", None))?;
        print_on.push(started.elapsed());
        assert_eq!(run.stdout, b"1\n");
        let started = Instant::now();
        let run = engine.execute(off, &with_budget("print(1)", Some(0)))?;
        print_off.push(started.elapsed());
        assert_eq!(run.stdout, b"1\n");
    }
    // Both sessions grew: the per-execution figure is over both.
    let print_growth = growth(&engine, &before_print)?;
    let (print_on, print_off) = (median(print_on), median(print_off));

    // print(1) with evidence on only, for its own storage figure.
    let before_print_on = mark(&engine)?;
    for _ in 0..runs {
        engine.execute(on, &with_budget("print(1)", None))?;
    }
    let print_on_growth = growth(&engine, &before_print_on)?;

    // 100 files of 10 KB (new random bytes each run), on and off.
    let writer_on = engine.create_session(BTreeMap::new())?.session_id;
    let writer_off = engine.create_session(BTreeMap::new())?.session_id;
    engine.execute(writer_on, &with_budget(WRITE_100, None))?;
    engine.execute(writer_off, &with_budget(WRITE_100, Some(0)))?;
    let mut write_on = Vec::new();
    let mut write_off = Vec::new();
    let mut on_growth = Growth {
        database: 0,
        stored: 0,
        raw: 0,
    };
    let mut off_database = 0u64;
    for _ in 0..WRITE_RUNS {
        let before = mark(&engine)?;
        let started = Instant::now();
        let run = engine.execute(writer_on, &with_budget(WRITE_100, None))?;
        write_on.push(started.elapsed());
        assert_eq!(run.files_written.len(), 100);
        let grown = growth(&engine, &before)?;
        on_growth.database += grown.database;
        on_growth.stored += grown.stored;
        on_growth.raw += grown.raw;
        let before = mark(&engine)?;
        let started = Instant::now();
        let run = engine.execute(writer_off, &with_budget(WRITE_100, Some(0)))?;
        write_off.push(started.elapsed());
        assert_eq!(run.files_written.len(), 100);
        off_database += growth(&engine, &before)?.database;
    }
    let (write_on, write_off) = (median(write_on), median(write_off));

    // The same 100 files written `repeats` times, each time in a fresh
    // session (so every run records 100 new writes of the same bytes).
    let before_same = mark(&engine)?;
    let mut same_sessions = Vec::new();
    let same_started = Instant::now();
    for _ in 0..repeats {
        let session = engine.create_session(BTreeMap::new())?.session_id;
        let run = engine.execute(session, &with_budget(SAME_100, None))?;
        assert_eq!(
            run.files_written.len(),
            100,
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        same_sessions.push(session);
    }
    let same_elapsed = same_started.elapsed();
    let same_growth = growth(&engine, &before_same)?;
    let same_raw_named = raw_bytes_named(&engine, &same_sessions)?;

    // Restore: the 100-file session, and 16 files of 4 MiB written by the
    // host (random bytes: stored raw, the worst case for reading).
    let (small_restore, small_files, small_bytes) = time_restore(&engine, writer_on)?;
    let large = engine.create_session(BTreeMap::new())?.session_id;
    let mut noise = vec![0u8; LARGE_FILE_BYTES];
    for index in 0..LARGE_FILES {
        let mut xof = blake3::Hasher::new()
            .update(&index.to_le_bytes())
            .finalize_xof();
        xof.fill(&mut noise);
        engine.write_file(
            large,
            &WorkspacePath::parse(&format!("large/{index}.bin"))?,
            &noise,
            false,
        )?;
    }
    let (large_restore, large_files, large_bytes) = time_restore(&engine, large)?;

    let overhead = |with: Duration, without: Duration| {
        (with.as_secs_f64() / without.as_secs_f64().max(1e-9) - 1.0) * 100.0
    };
    let rate = |files: u64, bytes: u64, took: Duration| {
        let seconds = took.as_secs_f64().max(1e-9);
        (files as f64 / seconds, mib(bytes as f64) / seconds)
    };
    let (small_fps, small_mbps) = rate(small_files, small_bytes, small_restore);
    let (large_fps, large_mbps) = rate(large_files, large_bytes, large_restore);
    let write_runs = WRITE_RUNS as f64;

    println!();
    println!("| measurement | result | target |");
    println!("|---|---|---|");
    println!(
        "| `print(1)`, evidence on (default budget), median of {runs} | {:.1} ms | — |",
        ms(print_on)
    );
    println!(
        "| `print(1)`, evidence off (budget 0), median of {runs} | {:.1} ms | — |",
        ms(print_off)
    );
    println!(
        "| `print(1)` overhead of evidence | {:+.1} % | ≤ 10 % |",
        overhead(print_on, print_off)
    );
    println!(
        "| 100 files of 10 KB (random bytes), evidence on, median of {WRITE_RUNS} | {:.1} ms | — |",
        ms(write_on)
    );
    println!(
        "| 100 files of 10 KB (random bytes), evidence off, median of {WRITE_RUNS} | {:.1} ms | — |",
        ms(write_off)
    );
    println!(
        "| 100 files of 10 KB overhead of evidence | {:+.1} % | — |",
        overhead(write_on, write_off)
    );
    println!(
        "| storage per `print(1)` (on and off interleaved): database growth | {:.0} B | — |",
        print_growth.database as f64 / (2 * runs) as f64
    );
    println!(
        "| storage per `print(1)`, evidence on: database growth; blobs added, stored / raw (code and output are the same every run, so deduplicated) | {:.0} B; {:.0} B / {:.0} B | — |",
        print_on_growth.database as f64 / runs as f64,
        print_on_growth.stored as f64 / runs as f64,
        print_on_growth.raw as f64 / runs as f64
    );
    println!(
        "| storage per 100-file execution, evidence on: database growth; blobs stored / raw | {:.1} KiB; {:.1} KiB / {:.1} KiB | — |",
        on_growth.database as f64 / write_runs / 1024.0,
        on_growth.stored as f64 / write_runs / 1024.0,
        on_growth.raw as f64 / write_runs / 1024.0
    );
    println!(
        "| storage per 100-file execution, evidence off: database growth | {:.1} KiB | — |",
        off_database as f64 / write_runs / 1024.0
    );
    println!(
        "| same 100 files of 10 KB written {repeats} times ({:.1} s): raw bytes named by events / blob bytes stored | {:.1} MiB / {:.2} MiB = {:.1}× | — |",
        same_elapsed.as_secs_f64(),
        mib(same_raw_named as f64),
        mib(same_growth.stored as f64),
        same_raw_named as f64 / (same_growth.stored as f64).max(1.0)
    );
    println!(
        "| same 100 files written {repeats} times: database growth per execution | {:.1} KiB (blobs added: {:.2} MiB raw) | — |",
        same_growth.database as f64 / repeats as f64 / 1024.0,
        mib(same_growth.raw as f64)
    );
    println!(
        "| `restore`, {small_files} files of 10 KB, median of {RESTORE_RUNS} | {:.1} ms: {:.0} files/s, {:.1} MiB/s | — |",
        ms(small_restore),
        small_fps,
        small_mbps
    );
    println!(
        "| `restore`, {large_files} files of 4 MiB (incompressible), median of {RESTORE_RUNS} | {:.1} ms: {:.0} files/s, {:.1} MiB/s | — |",
        ms(large_restore),
        large_fps,
        large_mbps
    );
    Ok(())
}
