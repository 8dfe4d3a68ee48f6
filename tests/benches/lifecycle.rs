//! Lifecycle benchmark: prune-candidate selection plus a dry run over many
//! sessions, a real prune of many small sessions (half of them old), an
//! adoption of seed-layout workspaces, reconcile with nothing to do, and —
//! for comparison, in the same run — the seed systems' way: a directory
//! scan reading `.metadata.json` in every workspace, and a seed-style
//! prune of the same sessions (read each `.metadata.json`, compare
//! `updated_at`, measure and remove the directory, one after another),
//! written in Rust, and the seed system's own `prune_sessions` in Python
//! when `SANDLOG_SEED_PYTHON` names an interpreter that has it.
//!
//! A real prune moves each workspace into `trash/` by one rename and
//! returns; its background pass frees the bytes after. The table prints
//! both: the prune's time (what the caller waits for, and what the ratios
//! compare) and how much longer the reclaim ran.
//!
//! Every timed prune starts after `sync(2)`: the sessions a real prune
//! removes have been idle for days, so their files have blocks on disk,
//! and freeing those blocks is most of what removing a small session costs
//! the kernel (ext4 frees no blocks for a file still in the page cache
//! under delayed allocation). Without it, whichever side was laid out last
//! deletes files that never reached the disk. The file system's own cost
//! is printed too: removing flushed sessions' file and directory one after
//! another, the floor of any prune that removes them in turn. Most of it
//! can be waiting on the device (with `discard`, freeing a block discards
//! it synchronously), which removals in parallel overlap. So is the floor
//! of the real prune itself: its removals alone, on as many threads, with
//! no log written.
//!
//! Which file system the prunes run on decides most of their cost, so the
//! bench prints it (type, mount options, and for ext4 whether it has a
//! journal: without one, ext4 discards freed blocks in the freeing thread;
//! with one, at the journal's commit). Every directory it times is made
//! under `$TMPDIR`, so `TMPDIR=/mnt/other cargo bench ...` measures another
//! file system; `scripts/prune-on-journalled-ext4.sh` does that on a
//! loop-mounted journalled ext4 (needs root).
//!
//! Run: `cargo bench -p sandlog-tests --bench lifecycle`. Sizes:
//! `SANDLOG_BENCH_SESSIONS` (default 100000), `SANDLOG_BENCH_PRUNE`
//! (sizes of the real prunes, comma-separated, default `2000,10000`; half
//! are old enough to prune), `SANDLOG_BENCH_ADOPT`
//! (default 2000), `SANDLOG_BENCH_RECONCILE` (default 10000).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::event::{Event, FileWritten, SessionCreated, WrittenBy};
use sandlog_core::{Hash, ManualClock, NewEvent, PrunePolicy, SessionId, Timestamp, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use sandlog_runtime::lifecycle::REMOVE_THREADS_MAX;
use sandlog_runtime::workspace::remove_dir_tree;
use sandlog_runtime::{Engine, EngineOptions, ReconcileOptions};
use sandlog_sqlite::Durability;

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

/// Flushes every file system, so the next timed removal frees blocks that
/// are on disk (see the module documentation).
fn settle_disk() -> BenchResult<()> {
    let status = std::process::Command::new("sync").status()?;
    if !status.success() {
        return Err(format!("sync failed: {status}").into());
    }
    Ok(())
}

/// Bytes this process has passed to write(2) and friends so far (`wchar`
/// in `/proc/self/io`): the prune's log writes, WAL frames and checkpoints
/// included, counted the same on every run.
fn written_bytes() -> BenchResult<u64> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .ok_or("no wchar in /proc/self/io")?
        .trim()
        .parse()
        .map_err(Into::into)
}

/// The file system's floor: lays out `count` sessions (a directory
/// holding one 100-byte file), flushes them, and removes them one after
/// another. Returns the time per session.
fn removal_floor(count: usize) -> BenchResult<Duration> {
    let dir = tempfile::tempdir()?;
    for index in 0..count {
        let session = dir.path().join(index.to_string());
        std::fs::create_dir(&session)?;
        std::fs::write(session.join("data.txt"), [b'x'; 100])?;
    }
    settle_disk()?;
    let started = Instant::now();
    for index in 0..count {
        let session = dir.path().join(index.to_string());
        std::fs::remove_file(session.join("data.txt"))?;
        std::fs::remove_dir(&session)?;
    }
    Ok(started.elapsed() / u32::try_from(count.max(1))?)
}

/// The same removals as a real prune without the log: lays out `count`
/// sessions as `populate` does (a directory holding one 100-byte file, and
/// a lease file), flushes them, and removes them with the prune's own
/// removal on `threads` threads, with one fsync of each parent at the end.
/// Returns the time it took. What a prune costs above it is the log.
fn parallel_removal_floor(count: usize, threads: usize) -> BenchResult<Duration> {
    let dir = tempfile::tempdir()?;
    let (workspaces, leases) = (dir.path().join("workspaces"), dir.path().join("leases"));
    std::fs::create_dir(&workspaces)?;
    std::fs::create_dir(&leases)?;
    for index in 0..count {
        let session = workspaces.join(index.to_string());
        std::fs::create_dir(&session)?;
        std::fs::write(session.join("data.txt"), [b'x'; 100])?;
        std::fs::write(leases.join(index.to_string()), b"")?;
    }
    settle_disk()?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| -> BenchResult<()> {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| -> std::io::Result<()> {
                    loop {
                        let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if index >= count {
                            return Ok(());
                        }
                        // The prune's own removal: by descriptor, the
                        // directory freed after its parent's lock is let go.
                        remove_dir_tree(&workspaces.join(index.to_string()))?;
                        std::fs::remove_file(leases.join(index.to_string()))?;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a removal thread panicked")??;
        }
        Ok(())
    })?;
    std::fs::File::open(&workspaces)?.sync_all()?;
    std::fs::File::open(&leases)?.sync_all()?;
    Ok(started.elapsed())
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
    // One store for every append, its read models kept as the engine's are,
    // without an fsync per session.
    let mut log_options =
        sandlog_sqlite::store::OpenOptions::default().clock(Arc::new(clock.clone()));
    log_options.create = false;
    log_options.durability = Durability::Normal;
    let mut log = sandlog_sqlite::EventStore::open(&engine.layout().database, log_options)?;
    sandlog_sqlite::install(&mut log)?;
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
            // What creating the session and writing its file leave on disk:
            // the workspace with the file, and the session's lease file.
            let dir = engine.layout().workspace(session_id);
            std::fs::create_dir(&dir)?;
            std::fs::write(dir.join("data.txt"), &content)?;
            let lease = sandlog_runtime::lease::lease_path(&engine.layout().root, session_id);
            if let Some(leases) = lease.parent() {
                std::fs::create_dir_all(leases)?;
            }
            std::fs::write(lease, b"")?;
        }
        let events = [
            NewEvent::from_event(
                &Event::SessionCreated(SessionCreated::new(session_id, BTreeMap::new())),
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
        log.append(session_id.stream(), ExpectedVersion::NoStream, &events)?;
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

/// A seed-layout workspace: `.metadata.json` and the given files.
fn write_seed_workspace(
    dir: &Path,
    id: SessionId,
    created: Timestamp,
    updated: Timestamp,
    files: &[(&str, &[u8])],
) -> BenchResult<()> {
    let workspace = dir.join(id.to_string());
    std::fs::create_dir(&workspace)?;
    std::fs::write(
        workspace.join(".metadata.json"),
        format!(
            r#"{{"session_id":"{id}","created_at":"{created}","updated_at":"{updated}","version":1}}"#
        ),
    )?;
    for (name, contents) in files {
        std::fs::write(workspace.join(name), contents)?;
    }
    Ok(())
}

/// Runs the seed system's own `prune_sessions` over `dir` in `python` (an
/// interpreter with the `llm-wasm-sandbox` package), timing the call alone.
/// Returns how many sessions it deleted and how long the call took.
fn seed_system_prune(
    python: &Path,
    dir: &Path,
    older_than: Duration,
) -> BenchResult<(usize, Duration)> {
    const SCRIPT: &str = "import sys, time\n\
from pathlib import Path\n\
from sandbox.sessions import prune_sessions\n\
started = time.perf_counter()\n\
result = prune_sessions(older_than_hours=float(sys.argv[2]), workspace_root=Path(sys.argv[1]))\n\
elapsed = time.perf_counter() - started\n\
assert not result.errors, result.errors\n\
print(len(result.deleted_sessions), elapsed)\n";
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(dir)
        .arg((older_than.as_secs_f64() / 3600.0).to_string())
        .output()
        .map_err(|error| format!("starting {}: {error}", python.display()))?;
    if !output.status.success() {
        return Err(format!(
            "the seed system's prune failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let stdout = String::from_utf8(output.stdout)?;
    let mut fields = stdout.split_whitespace();
    let deleted: usize = fields.next().ok_or("no count printed")?.parse()?;
    let seconds: f64 = fields.next().ok_or("no time printed")?.parse()?;
    Ok((deleted, Duration::from_secs_f64(seconds)))
}

/// Size of the regular files under `dir` (what the seed logs per deletion).
fn tree_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            bytes += tree_bytes(&entry.path())?;
        } else if file_type.is_file() {
            bytes += entry.metadata()?.len();
        }
    }
    Ok(bytes)
}

/// The seed systems' prune, in Rust: for each session directory read
/// `.metadata.json`, compare `updated_at` with the threshold, and measure
/// and remove (`shutil.rmtree`) the old ones, one after another. Returns
/// how many it removed.
fn seed_prune(dir: &Path, threshold: Timestamp) -> BenchResult<usize> {
    let mut removed = 0;
    let mut reclaimed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
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
            reclaimed += tree_bytes(&entry.path())?;
            std::fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    assert!(reclaimed > 0);
    Ok(removed)
}

/// The mount that holds `dir`, as `/proc/self/mountinfo` describes it:
/// type, mount point, source and options; for ext4, whether it has a
/// journal (a `/proc/fs/jbd2/<device>-*` entry). `None` off Linux, or
/// if the table cannot be read or names no mount holding `dir`.
fn file_system_of(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent major:minor root mount-point options [optional…]
    // - type source super-options. The longest mount point that is a
    // prefix of `dir` holds it (escapes such as `\040` are left as is:
    // a mount point with a space only fails to match).
    let (mount_point, options, kind, source, super_options) = table
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let mut before = before.split(' ');
            let mount_point = before.nth(4)?;
            let options = before.next()?;
            let mut after = after.split(' ');
            let (kind, source, super_options) = (after.next()?, after.next()?, after.next()?);
            dir.starts_with(mount_point).then_some((
                mount_point,
                options,
                kind,
                source,
                super_options,
            ))
        })
        .max_by_key(|(mount_point, ..)| mount_point.len())?;
    let journal = if kind == "ext4" {
        // No `/proc/fs/jbd2` at all: no journal is running anywhere.
        let prefix = format!("{}-", Path::new(source).file_name()?.to_string_lossy());
        let journalled = std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|mut entries| {
            entries.any(|entry| {
                entry.is_ok_and(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
            })
        });
        if journalled {
            ", journal"
        } else {
            ", no journal"
        }
    } else {
        ""
    };
    Some(format!(
        "{kind} at {mount_point} ({source}{journal}), {options}; {super_options}"
    ))
}

/// Real prunes timed, each on its own sessions; the median is reported.
const REAL_PRUNE_RUNS: usize = 3;

/// One timed real prune.
struct RealPrune {
    elapsed: Duration,
    /// From the prune's return until its background reclaim had freed
    /// every moved workspace.
    reclaim: Duration,
    /// Bytes the disk was written meanwhile.
    written: u64,
    pruned: usize,
    /// Every session laid out, and when it was last updated.
    sessions_updated: Vec<(SessionId, Timestamp)>,
    /// The clock the sessions were laid out by, as the prune saw it.
    clock: ManualClock,
}

/// Lays out `prune_sessions` small sessions, half of them old enough, and
/// times a real prune of them at the default durability.
fn real_prune(prune_sessions: usize) -> BenchResult<RealPrune> {
    let dir = tempfile::tempdir()?;
    let start = Timestamp::from_unix_micros(1_700_000_000_000_000);
    let clock = ManualClock::new(start);
    let engine = populate(dir.path(), &clock, prune_sessions, true)?;
    let sessions_updated: Vec<(SessionId, Timestamp)> = engine
        .sessions(None)?
        .into_iter()
        .map(|session| (session.session_id, session.updated_at.unwrap_or(start)))
        .collect();
    drop(engine);
    let engine = Engine::open(
        dir.path(),
        EngineOptions {
            clock: Arc::new(clock.clone()),
            ..EngineOptions::default()
        },
    )?;
    // `populate` ends at day 61 and spreads `updated_at` over days 0–60:
    // older than 31 days and a second is exactly the first half.
    let prune_policy = PrunePolicy::older_than(31 * DAY + Duration::from_secs(1));
    settle_disk()?;
    let written = written_bytes()?;
    let started = Instant::now();
    let report = engine.prune(&prune_policy, false, NO_PROGRESS)?;
    let elapsed = started.elapsed();
    let written = written_bytes()?.saturating_sub(written);
    let pruned = report.deleted_sessions.len();
    assert_eq!(pruned, prune_sessions / 2, "{:?}", report.errors);
    // The moved workspaces' bytes are freed by the engine's background
    // pass, which dropping the engine waits for and records.
    drop(engine);
    let reclaim = started.elapsed().saturating_sub(elapsed);
    let trash = dir.path().join(sandlog_runtime::layout::TRASH_DIR);
    if std::fs::read_dir(&trash).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(format!("{} is not empty after the reclaim", trash.display()).into());
    }
    Ok(RealPrune {
        elapsed,
        reclaim,
        written,
        pruned,
        sessions_updated,
        clock,
    })
}

/// A real prune of `prune_sessions` small sessions (half of them old
/// enough) at the default durability, `REAL_PRUNE_RUNS` times on freshly
/// laid out sessions; then the seed-style prune and the seed system's own
/// (with `seed_python`) of the same sessions. Returns the table's rows and
/// how many sessions the real prune deleted.
fn prune_comparison(
    prune_sessions: usize,
    seed_python: Option<&Path>,
) -> BenchResult<(Vec<String>, usize)> {
    // A real prune of `prune_sessions` small sessions, half of them old
    // enough, at the default durability; then the seed-style prune of the
    // same sessions laid out as the seeds keep them. The real prune runs
    // `REAL_PRUNE_RUNS` times, each on freshly laid out sessions, because a
    // single run varies with whatever else the machine is doing.
    let mut real_prunes = Vec::with_capacity(REAL_PRUNE_RUNS);
    for _ in 0..REAL_PRUNE_RUNS {
        real_prunes.push(real_prune(prune_sessions)?);
    }
    real_prunes.sort_by_key(|run| run.elapsed);
    let (fastest, slowest) = match (real_prunes.first(), real_prunes.last()) {
        (Some(fastest), Some(slowest)) => (fastest.elapsed, slowest.elapsed),
        _ => return Err("no real prune ran".into()),
    };
    let RealPrune {
        elapsed: prune_elapsed,
        reclaim,
        written: prune_written,
        pruned,
        sessions_updated,
        clock,
    } = real_prunes.swap_remove(REAL_PRUNE_RUNS / 2);

    let seed_prune_dir = tempfile::tempdir()?;
    for (id, at) in &sessions_updated {
        write_seed_workspace(
            seed_prune_dir.path(),
            *id,
            *at,
            *at,
            &[("data.txt", &[b'x'; 100])],
        )?;
    }
    let seed_threshold =
        sandlog_core::Clock::now(&clock).saturating_sub(31 * DAY + Duration::from_secs(1));
    settle_disk()?;
    let started = Instant::now();
    let seed_pruned = seed_prune(seed_prune_dir.path(), seed_threshold)?;
    let seed_prune_elapsed = started.elapsed();
    assert_eq!(seed_pruned, pruned);

    // The seed system itself on the same sessions: its `prune_sessions`,
    // timed inside its interpreter. Its cutoff is the wall clock's, so
    // the sessions are laid out at the same ages from now.
    let seed_system = match seed_python {
        None => None,
        Some(python) => {
            let seed_system_dir = tempfile::tempdir()?;
            let bench_now = sandlog_core::Clock::now(&clock);
            let now = sandlog_core::Clock::now(&sandlog_core::SystemClock);
            for (id, at) in &sessions_updated {
                let age = Duration::from_micros(
                    u64::try_from(bench_now.unix_micros() - at.unix_micros()).unwrap_or(0),
                );
                let at = now.saturating_sub(age);
                write_seed_workspace(
                    seed_system_dir.path(),
                    *id,
                    at,
                    at,
                    &[("data.txt", &[b'x'; 100])],
                )?;
            }
            settle_disk()?;
            let (deleted, elapsed) = seed_system_prune(
                python,
                seed_system_dir.path(),
                31 * DAY + Duration::from_secs(1),
            )?;
            // Wall-clock time passes between laying out and pruning: a
            // session at the boundary may fall on the other side.
            assert!(deleted.abs_diff(pruned) <= 1, "{deleted} against {pruned}");
            Some((deleted, elapsed))
        }
    };

    let rate = |count: usize, elapsed: Duration| count as f64 / elapsed.as_secs_f64().max(1e-9);
    let mut rows = Vec::new();
    rows.push(format!(
        "| real prune, {prune_sessions} small sessions, {pruned} deleted (default durability), median of {REAL_PRUNE_RUNS} (fastest–slowest) | {:.0} ms, {:.0} sessions/s ({:.0}–{:.0} ms) | ≥ 5000 sessions/s |",
        prune_elapsed.as_secs_f64() * 1e3,
        rate(pruned, prune_elapsed),
        fastest.as_secs_f64() * 1e3,
        slowest.as_secs_f64() * 1e3,
    ));
    rows.push(format!(
        "| its background reclaim: every moved workspace freed, after the prune returned | {:.0} ms more | — |",
        reclaim.as_secs_f64() * 1e3
    ));
    rows.push(format!(
        "| bytes the median real prune wrote (log, WAL, checkpoints) | {:.1} MiB, {:.1} KiB per deleted session | — |",
        prune_written as f64 / (1024.0 * 1024.0),
        prune_written as f64 / 1024.0 / pruned.max(1) as f64
    ));
    rows.push(format!(
        "| seed-style prune of the same sessions (read .metadata.json, compare, measure, remove_dir_all) | {:.0} ms, {:.0} sessions/s | — |",
        seed_prune_elapsed.as_secs_f64() * 1e3,
        rate(seed_pruned, seed_prune_elapsed)
    ));
    rows.push(format!(
        "| ratio sandlog real prune / seed-style prune (sessions/s) | {:.1}× | ≥ 3× |",
        rate(pruned, prune_elapsed) / rate(seed_pruned, seed_prune_elapsed).max(1e-9)
    ));
    match seed_system {
        Some((deleted, elapsed)) => {
            rows.push(format!(
                "| the seed system's own `prune_sessions` (Python) on the same sessions | {:.0} ms, {:.0} sessions/s | — |",
                elapsed.as_secs_f64() * 1e3,
                rate(deleted, elapsed)
            ));
            rows.push(format!(
                "| ratio sandlog real prune / the seed system's prune (sessions/s) | {:.1}× | ≥ 3× |",
                rate(pruned, prune_elapsed) / rate(deleted, elapsed).max(1e-9)
            ));
        }
        None => rows.push(
            "| the seed system's own `prune_sessions` | not run: set SANDLOG_SEED_PYTHON to a Python with llm-wasm-sandbox (`make bench` does) | — |"
                .to_owned(),
        ),
    }
    Ok((rows, pruned))
}

fn main() -> BenchResult<()> {
    let sessions = env_size("SANDLOG_BENCH_SESSIONS", 100_000);
    let prune_sizes: Vec<usize> = match std::env::var("SANDLOG_BENCH_PRUNE") {
        Ok(sizes) => sizes
            .split(',')
            .map(|size| size.trim().parse())
            .collect::<Result<_, _>>()
            .map_err(|error| {
                format!("SANDLOG_BENCH_PRUNE={sizes}: {error} (sizes, comma-separated)")
            })?,
        Err(_) => vec![2_000, 10_000],
    };
    let adopt_sessions = env_size("SANDLOG_BENCH_ADOPT", 2_000);
    let reconcile_sessions = env_size("SANDLOG_BENCH_RECONCILE", 10_000);
    // Checked before the minutes of setup, not after.
    let seed_python = std::env::var_os("SANDLOG_SEED_PYTHON").map(PathBuf::from);
    if let Some(python) = &seed_python
        && !python.is_file()
    {
        return Err(format!(
            "SANDLOG_SEED_PYTHON={}: no such file (seen from {}, where cargo runs benches); \
             give the interpreter's absolute path",
            python.display(),
            std::env::current_dir()?.display()
        )
        .into());
    }
    println!(
        "lifecycle benchmark: {sessions} sessions for selection, {prune_sizes:?} for real prunes, {adopt_sessions} adopted, {reconcile_sessions} reconciled"
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

    // 2. Real prunes at each size, beside the seed-style and the seed
    // system's prunes of the same sessions.
    let mut prune_rows = Vec::new();
    let mut pruned = 0;
    for &size in &prune_sizes {
        let (rows, deleted) = prune_comparison(size, seed_python.as_deref())?;
        prune_rows.extend(rows);
        pruned = pruned.max(deleted);
    }

    // 3. Adopting `adopt_sessions` seed-layout workspaces (metadata, a
    // script, a data file) into a new root at the default durability.
    let seeds = tempfile::tempdir()?;
    let adopt_root = tempfile::tempdir()?;
    let adopt_start = Timestamp::from_unix_micros(1_700_000_000_000_000);
    for index in 0..adopt_sessions {
        let at = adopt_start.saturating_add(Duration::from_secs(index as u64));
        write_seed_workspace(
            seeds.path(),
            SessionId::new_v4(),
            at,
            at,
            &[
                ("user_code.py", b"print(open('data.txt').read())\n"),
                ("data.txt", &[b'y'; 200]),
            ],
        )?;
    }
    Engine::init(adopt_root.path())?;
    let engine = Engine::open(adopt_root.path(), EngineOptions::default())?;
    let started = Instant::now();
    let report = engine.adopt(seeds.path(), NO_PROGRESS)?;
    let adopt_elapsed = started.elapsed();
    assert_eq!(report.adopted.len(), adopt_sessions, "{:?}", report.skipped);
    drop(engine);

    // 4. Reconcile over `reconcile_sessions` live sessions, nothing to do.
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

    let floor = removal_floor(2_000)?;
    let parallel_floor = parallel_removal_floor(pruned, REMOVE_THREADS_MAX)?;

    let file_system = file_system_of(&std::env::temp_dir())
        .unwrap_or_else(|| "unknown (not found in /proc/self/mountinfo)".to_owned());

    println!();
    println!("| measurement | result | target |");
    println!("|---|---|---|");
    println!("| file system of the timed prunes ($TMPDIR) | {file_system} | — |");
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
    let rate = |count: usize, elapsed: Duration| count as f64 / elapsed.as_secs_f64().max(1e-9);
    println!(
        "| floor: remove flushed sessions (a 100-byte file and its directory) one after another | {:.0} µs per session, {:.0} sessions/s | — |",
        floor.as_secs_f64() * 1e6,
        1.0 / floor.as_secs_f64().max(1e-9)
    );
    println!(
        "| floor: the real prune's removals alone ({pruned} sessions, {REMOVE_THREADS_MAX} threads, no log) | {:.0} ms, {:.0} sessions/s | — |",
        parallel_floor.as_secs_f64() * 1e3,
        rate(pruned, parallel_floor)
    );
    for row in &prune_rows {
        println!("{row}");
    }
    println!(
        "| adopt {adopt_sessions} seed-layout sessions (2 files each, default durability) | {:.0} ms, {:.0} sessions/s | ≤ 300 ms for 2000 |",
        adopt_elapsed.as_secs_f64() * 1e3,
        rate(adopt_sessions, adopt_elapsed)
    );
    println!(
        "| reconcile, {reconcile_sessions} sessions, nothing to do, median of 5 | {:.1} ms | ≤ 1000 ms |",
        reconcile.as_secs_f64() * 1e3
    );
    Ok(())
}
