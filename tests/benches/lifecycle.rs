//! Lifecycle benchmark (issue 5): prune-candidate selection plus a dry run
//! over many sessions, a real prune of many small sessions, reconcile with
//! nothing to do, and — for comparison, in the same run — the seed
//! systems' way: a directory scan reading `.metadata.json` in every
//! workspace.
//!
//! Run: `cargo bench -p sandlog-tests --bench lifecycle`. Sizes:
//! `SANDLOG_BENCH_SESSIONS` (default 100000), `SANDLOG_BENCH_PRUNE`
//! (default 10000), `SANDLOG_BENCH_RECONCILE` (default 10000).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::event::{Event, FileWritten, SessionCreated, WrittenBy};
use sandlog_core::{Hash, ManualClock, NewEvent, PrunePolicy, SessionId, Timestamp, WorkspacePath};
use sandlog_eventstore::{Durability, ExpectedVersion};
use sandlog_runtime::{Engine, EngineOptions, ReconcileOptions};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

const NO_PROGRESS: &(dyn Fn(u64, u64) + Sync) = &|_, _| {};
const DAY: Duration = Duration::from_secs(24 * 3600);

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

/// A root with `sessions` sessions (each one 100-byte file, on disk when
/// `with_dirs`), their `updated_at` spread over 60 days, appended directly
/// through the engine's store (fast setup with Durability::Normal).
fn populate(
    root: &Path,
    clock: &ManualClock,
    sessions: usize,
    with_dirs: bool,
) -> BenchResult<Engine> {
    Engine::init(root)?;
    let options = EngineOptions {
        clock: Arc::new(clock.clone()),
        durability: Durability::Normal,
        ..EngineOptions::default()
    };
    let engine = Engine::open(root, options)?;
    let start = sandlog_core::Clock::now(clock);
    let content = vec![b'x'; 100];
    let hash = Hash::of(&content);
    let path = WorkspacePath::parse("data.txt")?;
    for index in 0..sessions {
        clock.set(start.saturating_add(Duration::from_secs(
            (index as u64 * 60 * 24 * 3600) / sessions.max(1) as u64,
        )));
        let session_id = SessionId::new_v4();
        if with_dirs {
            let dir = engine.layout().workspace(session_id);
            std::fs::create_dir(&dir)?;
            std::fs::write(dir.join("data.txt"), &content)?;
        }
        let events = [
            NewEvent::from_event(
                &Event::SessionCreated(SessionCreated {
                    session_id,
                    labels: BTreeMap::new(),
                }),
                "bench",
            ),
            NewEvent::from_event(
                &Event::FileWritten(FileWritten {
                    content_kept: None,
                    not_kept: None,
                    path: path.clone(),
                    size: 100,
                    blake3: hash,
                    by: WrittenBy::Host,
                }),
                "bench",
            ),
        ];
        engine
            .store()
            .append(session_id.stream(), ExpectedVersion::NoStream, &events)?;
    }
    clock.set(start.saturating_add(61 * DAY));
    Ok(engine)
}

fn seed_scan(dir: &Path, threshold: Timestamp) -> BenchResult<usize> {
    let mut old = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if SessionId::parse(name).is_err() {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path().join(".metadata.json")) else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_slice(&bytes)?;
        let updated = value
            .get("updated_at")
            .and_then(|v| v.as_str())
            .map(Timestamp::parse)
            .transpose()?;
        if updated.is_some_and(|t| t <= threshold) {
            old += 1;
        }
    }
    Ok(old)
}

fn main() -> BenchResult<()> {
    let sessions = env_size("SANDLOG_BENCH_SESSIONS", 100_000);
    let prune_sessions = env_size("SANDLOG_BENCH_PRUNE", 10_000);
    let reconcile_sessions = env_size("SANDLOG_BENCH_RECONCILE", 10_000);
    println!(
        "lifecycle benchmark: {sessions} sessions for selection, {prune_sessions} pruned, {reconcile_sessions} reconciled"
    );

    // 1. Selection + dry run over `sessions`, against the seed scan.
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let setup = Instant::now();
    let engine = populate(dir.path(), &clock, sessions, false)?;
    println!("  setup: {sessions} sessions in {:.1?}", setup.elapsed());
    let policy = PrunePolicy::older_than(30 * DAY);
    let mut samples = Vec::new();
    let mut candidates = 0;
    for _ in 0..7 {
        let started = Instant::now();
        let report = engine.prune(&policy, true, NO_PROGRESS)?;
        samples.push(started.elapsed());
        candidates = report.deleted_sessions.len();
    }
    let dry_run = median(samples);

    let seed_dir = tempfile::tempdir()?;
    for index in 0..sessions {
        let id = SessionId::new_v4();
        let workspace = seed_dir.path().join(id.to_string());
        std::fs::create_dir(&workspace)?;
        let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + index as i64 * 1_000_000);
        std::fs::write(
            workspace.join(".metadata.json"),
            format!(
                r#"{{"session_id":"{id}","created_at":"{at}","updated_at":"{at}","version":1}}"#
            ),
        )?;
    }
    let threshold =
        Timestamp::from_unix_micros(1_700_000_000_000_000 + (sessions as i64 / 2) * 1_000_000);
    let mut samples = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        seed_scan(seed_dir.path(), threshold)?;
        samples.push(started.elapsed());
    }
    let scan = median(samples);
    drop(engine);

    // 2. A real prune of `prune_sessions` small sessions.
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let engine = populate(dir.path(), &clock, prune_sessions, true)?;
    let started = Instant::now();
    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    let prune_elapsed = started.elapsed();
    assert_eq!(report.deleted_sessions.len(), prune_sessions);
    drop(engine);

    // 3. Reconcile over `reconcile_sessions` live sessions, nothing to do.
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let engine = populate(dir.path(), &clock, reconcile_sessions, true)?;
    let mut samples = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let report = engine.reconcile(&ReconcileOptions::default(), NO_PROGRESS)?;
        samples.push(started.elapsed());
        assert!(report.actions.is_empty());
    }
    let reconcile = median(samples);

    println!();
    println!("| measurement | result | target |");
    println!("|---|---|---|");
    println!(
        "| prune selection + dry run, {sessions} sessions ({candidates} candidates), median of 7 | {:.1} ms | ≤ 100 ms |",
        dry_run.as_secs_f64() * 1e3
    );
    println!(
        "| seed-style scan of {sessions} dirs reading .metadata.json, median of 3 | {:.1} ms | — |",
        scan.as_secs_f64() * 1e3
    );
    println!(
        "| ratio seed scan / sandlog dry run | {:.1}× | — |",
        scan.as_secs_f64() / dry_run.as_secs_f64().max(1e-9)
    );
    println!(
        "| real prune of {prune_sessions} small sessions (Durability::Normal) | {:.2} s, {:.0} sessions/s | — |",
        prune_elapsed.as_secs_f64(),
        prune_sessions as f64 / prune_elapsed.as_secs_f64().max(1e-9)
    );
    println!(
        "| reconcile, {reconcile_sessions} sessions, nothing to do, median of 5 | {:.1} ms | ≤ 1000 ms |",
        reconcile.as_secs_f64() * 1e3
    );
    Ok(())
}
