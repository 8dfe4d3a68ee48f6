//! Projections benchmark (issue 3): rebuild throughput, prune-candidate
//! query and session lookup latency, and the rebuild's peak memory at two
//! log lengths, printed as one table.
//!
//! Run: `cargo bench -p sandlog-tests --bench projections`.
//!
//! Sizes come from the environment, with the sizes as defaults:
//! `SANDLOG_BENCH_EVENTS` (1,000,000: the big log),
//! `SANDLOG_BENCH_SMALL_EVENTS` (250,000), `SANDLOG_BENCH_HUGE_EVENTS`
//! (2,000,000: the log the big one's rebuild memory is compared with; 0
//! skips it), `SANDLOG_BENCH_EVENTS_PER_SESSION` (10, so 100,000 sessions in the
//! big log), `SANDLOG_BENCH_RUNS` (9: runs per latency median) and
//! `SANDLOG_BENCH_LOOKUPS` (10,000 session lookups). `SANDLOG_BENCH_DIR`
//! keeps the log there instead of in a temporary directory; with
//! `SANDLOG_BENCH_REUSE=1` a log already there is measured as it is (no
//! generation, one rebuild), to compare builds on the same log. A rebuild
//! alone can be profiled with `SANDLOG_BENCH_REBUILD_CHILD=<dir>/log.db
//! perf record <bench binary>`.
//!
//! Rates and latencies are wall-clock, as the issue asks. On a shared
//! machine the wall clock includes waiting for other processes, so the
//! rebuild also shows its time on a CPU and waiting for one
//! (`/proc/thread-self/schedstat`, tick-grained, fine over seconds), the
//! lookups their mean CPU time over all lookups, and the prune queries
//! their fastest run.
//!
//! The log is generated without the read-model hook (the fold is what is
//! timed, as a rebuild), with `Durability::Normal`: waves of
//! [`WAVE_SESSIONS`] sessions spread over 100 days of a manual clock, each
//! session's life in one append. It is rebuilt at the small size and
//! again, extended, at the big one, each time in a fresh child process so
//! the peak RSS is the rebuild's own, and each time after an untimed
//! rebuild, so every measured rebuild replaces read models of its own log.
//! After the queries (on the big log), the log is extended to the huge
//! size and rebuilt once more, for the memory alone.

use std::time::{Duration, Instant};

use sandlog_core::event::{Event, MetadataStatus, Outcome, WrittenBy};
use sandlog_core::{ManualClock, PrunePolicy, SessionId, StreamId, Timestamp, WorkspacePath};
use sandlog_eventstore::ExpectedVersion;
use sandlog_sqlite::query;
use sandlog_sqlite::rebuild;
use sandlog_sqlite::{Durability, EventStore, OpenOptions};
use sandlog_tests::events::{
    DAY, T0, TestResult, adopted, created_with_labels, delete_requested, executed, file_deleted,
    new_events, prune_requested, prune_run_completed, pruned, reconcile_run_completed,
    session_deleted, written,
};

/// Sessions active at once: each wave's sessions interleave their events.
const WAVE_SESSIONS: usize = 1000;

/// The days the generated log spans (the clock moves evenly across waves).
const LOG_SPAN_DAYS: u32 = 100;

/// Targets from issue 3.
const REBUILD_EVENTS_PER_SECOND_MIN: f64 = 500_000.0;
const PRUNE_QUERY_MS_MAX: f64 = 20.0;
const LOOKUP_US_MAX: f64 = 50.0;

/// Peak-memory growth allowed when the log doubles: "does not grow with
/// the log's length", with room for the noise of one heap high-water mark.
const MEMORY_GROWTH_MAX: f64 = 1.10;

fn env_usize(name: &str, default: usize) -> TestResult<usize> {
    match std::env::var(name) {
        Ok(text) => Ok(text.replace('_', "").parse()?),
        Err(_) => Ok(default),
    }
}

/// The paths the generated sessions use.
struct Paths {
    main: WorkspacePath,
    input: WorkspacePath,
    result: WorkspacePath,
    log: WorkspacePath,
}

impl Paths {
    fn new() -> TestResult<Paths> {
        Ok(Paths {
            main: WorkspacePath::parse("main.py")?,
            input: WorkspacePath::parse("data/input.csv")?,
            result: WorkspacePath::parse("out/result.json")?,
            log: WorkspacePath::parse("out/logs/run.log")?,
        })
    }
}

/// The events of session number `index`: a realistic life of ten events
/// (create or adopt, writes by host and guest, executions with mixed
/// outcomes, a delete), ending for some in a prune or a delete.
fn session_life(index: usize, session_id: SessionId, paths: &Paths) -> Vec<Event> {
    let start = match index % 50 {
        7 => adopted(session_id, MetadataStatus::Missing, None, None),
        8 => {
            let old = T0.saturating_sub(DAY * 400);
            adopted(session_id, MetadataStatus::Ok, Some(old), Some(old))
        }
        _ => created_with_labels(session_id, &[("team", "bench")]),
    };
    let second_outcome = if index.is_multiple_of(7) {
        Outcome::Error
    } else {
        Outcome::Ok
    };
    let size = |salt: usize| u64::try_from((index * 31 + salt * 977) % 50_000).unwrap_or(0);
    let mut life = vec![
        start,
        written(&paths.main, size(1), WrittenBy::Host),
        executed(Outcome::Ok),
        written(&paths.result, size(2), WrittenBy::Guest),
        written(&paths.log, size(3), WrittenBy::Guest),
        executed(second_outcome),
        written(&paths.input, size(4), WrittenBy::Host),
        executed(Outcome::Ok),
    ];
    if index % 10 == 3 {
        life.extend([prune_requested(1_000, size(5)), pruned(size(5))]);
    } else if index % 25 == 4 {
        life.extend([delete_requested(), session_deleted(size(6))]);
    } else {
        life.extend([
            file_deleted(&paths.log, WrittenBy::Guest),
            written(&paths.result, size(7), WrittenBy::Guest),
        ]);
    }
    life
}

/// Appends generated sessions to a log, without the hook, continuing
/// where the last call stopped (same clock, next session number).
struct Generator {
    store: EventStore,
    clock: ManualClock,
    paths: Paths,
    sessions: Vec<SessionId>,
    events: usize,
    /// How far the clock moves per wave of [`WAVE_SESSIONS`] sessions.
    wave_step: Duration,
}

impl Generator {
    /// A generator for a log of at most `sessions_max` sessions at `path`;
    /// the clock spans [`LOG_SPAN_DAYS`] over that many.
    fn new(path: &std::path::Path, sessions_max: usize) -> TestResult<Generator> {
        let clock = ManualClock::new(T0);
        let store = EventStore::open(
            path,
            OpenOptions::default()
                .clock(std::sync::Arc::new(clock.clone()))
                .durability(Durability::Normal),
        )?;
        let n_waves = sessions_max.div_ceil(WAVE_SESSIONS).max(1);
        Ok(Generator {
            store,
            clock,
            paths: Paths::new()?,
            sessions: Vec::new(),
            events: 0,
            wave_step: DAY * LOG_SPAN_DAYS / u32::try_from(n_waves).unwrap_or(u32::MAX),
        })
    }

    /// Appends waves of sessions until the log holds `sessions_target`
    /// sessions: each session's life in one append, one `system` event
    /// closing each wave, then the clock moves one wave step. (One append
    /// per session rather than per event or half-life: an append costs
    /// about a millisecond on a VM disk, and the log must be built fast.)
    fn extend_to(&mut self, sessions_target: usize) -> TestResult {
        let started = Instant::now();
        while self.sessions.len() < sessions_target {
            let first_index = self.sessions.len();
            let wave_len = WAVE_SESSIONS.min(sessions_target - first_index);
            let wave: Vec<SessionId> = (0..wave_len).map(|_| SessionId::new_v4()).collect();
            for (offset, session_id) in wave.iter().enumerate() {
                let life = session_life(first_index + offset, *session_id, &self.paths);
                self.store.append(
                    session_id.stream(),
                    ExpectedVersion::Any,
                    &new_events(&life),
                )?;
                self.events += life.len();
            }
            let system = if (first_index / WAVE_SESSIONS).is_multiple_of(2) {
                prune_run_completed(100, 40_000)
            } else {
                reconcile_run_completed(3, 0, 25_000)
            };
            self.store.append(
                StreamId::System,
                ExpectedVersion::Any,
                &new_events(&[system]),
            )?;
            self.events += 1;
            self.sessions.extend(wave);
            self.clock.advance(self.wave_step);
        }
        eprintln!(
            "log extended to {} events in {:.1?}",
            self.events,
            started.elapsed()
        );
        Ok(())
    }
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `VmHWM`).
fn proc_status_kib(field: &str) -> TestResult<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with(field))
        .ok_or_else(|| format!("no {field} in /proc/self/status"))?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| format!("malformed {line:?}"))?;
    Ok(kib.parse()?)
}

/// What one rebuild, run in a fresh child process, measured.
struct RebuildFigures {
    events: u64,
    seconds: f64,
    /// Resident memory after opening the store, before the rebuild.
    rss_before_kib: u64,
    /// The process's peak resident memory, after the rebuild.
    peak_kib: u64,
    /// Time the rebuilding thread spent on a CPU.
    cpu_seconds: f64,
    /// Time it spent runnable but waiting for a CPU (other processes'
    /// load on a shared machine).
    runqueue_seconds: f64,
    db_bytes: u64,
}

impl RebuildFigures {
    fn peak_delta_kib(&self) -> u64 {
        self.peak_kib.saturating_sub(self.rss_before_kib)
    }
}

/// The environment variable that turns this binary into the rebuild child:
/// it names the log to rebuild.
const CHILD_ENV: &str = "SANDLOG_BENCH_REBUILD_CHILD";

/// This thread's time on a CPU and waiting for one, in nanoseconds
/// (`/proc/thread-self/schedstat`).
fn schedstat_ns() -> TestResult<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    let mut fields = text.split_whitespace();
    let mut next = || -> TestResult<u64> {
        Ok(fields
            .next()
            .ok_or("short /proc/thread-self/schedstat")?
            .parse()?)
    };
    Ok((next()?, next()?))
}

/// The child: opens the log cold, rebuilds it, prints
/// `events seconds rss_before_kib peak_kib cpu_ns runqueue_ns` on one
/// line. A fresh process per rebuild makes its peak RSS its own: no heap
/// left over from generating the log, no earlier rebuild's high-water
/// mark.
fn rebuild_child(path: &std::path::Path) -> TestResult {
    let store = EventStore::open(path, OpenOptions::default().durability(Durability::Normal))?;
    let rss_before_kib = proc_status_kib("VmRSS:")?;
    let (cpu_before, runqueue_before) = schedstat_ns()?;
    let started = Instant::now();
    let events = rebuild(&store)?;
    let seconds = started.elapsed().as_secs_f64();
    let (cpu_after, runqueue_after) = schedstat_ns()?;
    let peak_kib = proc_status_kib("VmHWM:")?;
    println!(
        "{events} {seconds} {rss_before_kib} {peak_kib} {} {}",
        cpu_after.saturating_sub(cpu_before),
        runqueue_after.saturating_sub(runqueue_before)
    );
    Ok(())
}

/// Runs [`rebuild_child`] on `path` and reads its figures.
fn timed_rebuild(path: &std::path::Path) -> TestResult<RebuildFigures> {
    let output = std::process::Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, path)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "rebuild child failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let text = String::from_utf8(output.stdout)?;
    let mut fields = text.split_whitespace();
    let mut next = || {
        fields
            .next()
            .ok_or_else(|| format!("short output from the rebuild child: {text:?}"))
    };
    Ok(RebuildFigures {
        events: next()?.parse()?,
        seconds: next()?.parse()?,
        rss_before_kib: next()?.parse()?,
        peak_kib: next()?.parse()?,
        cpu_seconds: next()?.parse::<f64>()? / 1e9,
        runqueue_seconds: next()?.parse::<f64>()? / 1e9,
        db_bytes: std::fs::metadata(path)?.len(),
    })
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples
        .get(samples.len() / 2)
        .copied()
        .unwrap_or(Duration::ZERO)
}

/// Median and fastest wall time of `runs` prune-candidate queries, and the
/// candidate count. (The fastest run shows the query without other
/// processes' load; per-query CPU time is not shown because
/// `/proc/thread-self/schedstat` only moves at scheduler ticks.)
fn time_prune(
    store: &EventStore,
    policy: &PrunePolicy,
    now: Timestamp,
    runs: usize,
) -> TestResult<(Duration, Duration, usize)> {
    let mut wall = Vec::with_capacity(runs);
    let mut candidates = 0;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        let plan = query::prune_candidates(store, policy, now)?;
        wall.push(started.elapsed());
        candidates = plan.candidates.len();
    }
    let fastest = wall.iter().min().copied().unwrap_or(Duration::ZERO);
    Ok((median(wall), fastest, candidates))
}

struct Row {
    measure: String,
    size: String,
    value: String,
    target: String,
    verdict: &'static str,
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISSED" }
}

fn print_table(rows: &[Row]) {
    let headers = ["measure", "size", "value", "target", ""];
    let cells: Vec<[&str; 5]> = rows
        .iter()
        .map(|row| {
            [
                row.measure.as_str(),
                row.size.as_str(),
                row.value.as_str(),
                row.target.as_str(),
                row.verdict,
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: &[&str; 5]| {
        let padded: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(&headers);
    let rule: Vec<String> = widths.iter().map(|width| "-".repeat(*width)).collect();
    println!("|-{}-|", rule.join("-|-"));
    for row in &cells {
        line(row);
    }
}

fn main() -> TestResult {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        return rebuild_child(std::path::Path::new(&path));
    }
    let events_big = env_usize("SANDLOG_BENCH_EVENTS", 1_000_000)?;
    let events_small = env_usize("SANDLOG_BENCH_SMALL_EVENTS", 250_000)?;
    let events_huge = env_usize("SANDLOG_BENCH_HUGE_EVENTS", 2_000_000)?;
    let events_per_session = env_usize("SANDLOG_BENCH_EVENTS_PER_SESSION", 10)?.max(1);
    let runs = env_usize("SANDLOG_BENCH_RUNS", 9)?.max(1);
    let lookups = env_usize("SANDLOG_BENCH_LOOKUPS", 10_000)?.max(1);
    let temporary = tempfile::Builder::new()
        .prefix("sandlog-bench-projections-")
        .tempdir()?;
    let directory = std::env::var_os("SANDLOG_BENCH_DIR")
        .map_or_else(|| temporary.path().to_owned(), std::path::PathBuf::from);
    let log_path = directory.join("log.db");
    let reuse = std::env::var_os("SANDLOG_BENCH_REUSE").is_some();
    if log_path.exists() && !reuse {
        return Err(format!(
            "{} exists; remove it, or set SANDLOG_BENCH_REUSE=1 to measure it as it is",
            log_path.display()
        )
        .into());
    }
    let mut rows = Vec::new();

    let mut rebuilds = Vec::new();
    let mut generator = None;
    if reuse && log_path.exists() {
        // A log from an earlier run: rebuild and query it as it is.
        rebuilds.push(timed_rebuild(&log_path)?);
    } else {
        // One log, rebuilt when it holds the small number of events and
        // again when it holds the big one, each time by a fresh process.
        let sessions_big = (events_big / events_per_session).max(1);
        let sessions_small = (events_small / events_per_session).clamp(1, sessions_big);
        let mut generator_for_huge = Generator::new(&log_path, sessions_big)?;
        for sessions_target in [sessions_small, sessions_big] {
            generator_for_huge.extend_to(sessions_target)?;
            rebuilds.push(measured_rebuild(&log_path)?);
        }
        generator = Some(generator_for_huge);
    }

    for figures in &rebuilds {
        let rate = figures.events as f64 / figures.seconds.max(f64::EPSILON);
        rows.push(Row {
            measure: "rebuild".into(),
            size: format!(
                "{} events, {} MiB file",
                figures.events,
                figures.db_bytes >> 20
            ),
            value: format!(
                "{rate:.0} events/s ({:.2} s; on CPU {:.2} s = {:.0} events/CPU-s, waiting for a CPU {:.2} s)",
                figures.seconds,
                figures.cpu_seconds,
                figures.events as f64 / figures.cpu_seconds.max(f64::EPSILON),
                figures.runqueue_seconds
            ),
            target: format!(">= {REBUILD_EVENTS_PER_SECOND_MIN:.0} events/s"),
            verdict: verdict(rate >= REBUILD_EVENTS_PER_SECOND_MIN),
        });
    }
    let store = EventStore::open(&log_path, OpenOptions::default())?;
    // The sessions and the generator's clock, recomputed from the read
    // model: waves of WAVE_SESSIONS, one wave step apart, the clock one step
    // past the last wave.
    let sessions: Vec<SessionId> = query::sessions(&store, None)?
        .into_iter()
        .map(|summary| summary.session_id)
        .collect();
    let n_sessions = sessions.len();
    let n_waves = u32::try_from(n_sessions.div_ceil(WAVE_SESSIONS).max(1)).unwrap_or(u32::MAX);
    let wave_step = DAY * LOG_SPAN_DAYS / n_waves;
    let now = T0.saturating_add(wave_step * n_waves);
    let active = query::stats(&store)?
        .sessions
        .get("active")
        .copied()
        .unwrap_or(0);
    // Old enough for the sessions of the first two waves only: wave k is
    // last touched k wave steps after the start.
    let few_older_than = wave_step * n_waves.saturating_sub(1);
    let policies = [
        (
            "age: ~all candidates",
            PrunePolicy::older_than(Duration::ZERO),
        ),
        (
            "age: few candidates",
            PrunePolicy::older_than(few_older_than),
        ),
        (
            "retention: max_sessions 90% of active",
            PrunePolicy {
                older_than: DAY * 10_000,
                max_sessions: Some(active * 9 / 10),
                ..PrunePolicy::default()
            },
        ),
        (
            "retention: max_total_bytes 1 GB",
            PrunePolicy {
                older_than: DAY * 10_000,
                max_total_bytes: Some(1_000_000_000),
                ..PrunePolicy::default()
            },
        ),
        (
            "age, max_deletions 100",
            PrunePolicy {
                older_than: Duration::ZERO,
                max_deletions: Some(100),
                ..PrunePolicy::default()
            },
        ),
    ];
    for (name, policy) in &policies {
        let (latency, fastest, candidates) = time_prune(&store, policy, now, runs)?;
        let ms = latency.as_secs_f64() * 1e3;
        rows.push(Row {
            measure: format!("prune candidates, {name}"),
            size: format!("{n_sessions} sessions, {candidates} candidates"),
            value: format!(
                "{ms:.2} ms (median of {runs}; fastest {:.2} ms)",
                fastest.as_secs_f64() * 1e3
            ),
            target: format!("<= {PRUNE_QUERY_MS_MAX} ms"),
            verdict: verdict(ms <= PRUNE_QUERY_MS_MAX),
        });
    }

    let mut samples = Vec::with_capacity(lookups);
    let stride = (n_sessions / lookups).max(1);
    let mut found = 0usize;
    let (cpu_before, _) = schedstat_ns()?;
    for session_id in sessions.iter().step_by(stride).take(lookups) {
        let started = Instant::now();
        let summary = query::session(&store, *session_id)?;
        samples.push(started.elapsed());
        found += usize::from(summary.is_some());
    }
    let (cpu_after, _) = schedstat_ns()?;
    let looked_up = samples.len();
    let cpu_mean_us = cpu_after.saturating_sub(cpu_before) as f64 / 1e3 / looked_up.max(1) as f64;
    let us = median(samples).as_secs_f64() * 1e6;
    rows.push(Row {
        measure: "session lookup".into(),
        size: format!("{n_sessions} sessions, {looked_up} lookups, {found} found"),
        value: format!("{us:.1} us (median; on CPU {cpu_mean_us:.1} us mean)"),
        target: format!("<= {LOOKUP_US_MAX} us"),
        verdict: verdict(us <= LOOKUP_US_MAX),
    });

    drop(store);

    // The memory of a rebuild rises while SQLite's page caches and the
    // reader's batches in flight fill to their caps (about the first
    // 250,000 events), then stays flat: so it is judged on the big log
    // against one twice as long, made by extending it.
    if let Some(mut generator) = generator.filter(|_| events_huge > events_big) {
        generator.extend_to((events_huge / events_per_session).max(1))?;
        rebuilds.push(measured_rebuild(&log_path)?);
    }
    for figures in &rebuilds {
        rows.push(Row {
            measure: "rebuild peak RSS (over RSS after open)".into(),
            size: format!("{} events", figures.events),
            value: format!(
                "{:.1} MiB (peak {:.1} MiB)",
                figures.peak_delta_kib() as f64 / 1024.0,
                figures.peak_kib as f64 / 1024.0
            ),
            target: "flat in log length".into(),
            verdict: "",
        });
    }
    let judged = rebuilds.len().saturating_sub(2);
    for (index, pair) in rebuilds.windows(2).enumerate() {
        let [small, big] = pair else { continue };
        let log_growth = big.events as f64 / small.events.max(1) as f64;
        let memory_growth = big.peak_delta_kib() as f64 / small.peak_delta_kib().max(1) as f64;
        let (target, verdict) = match index == judged {
            true => (
                format!("x <= {MEMORY_GROWTH_MAX}"),
                verdict(memory_growth <= MEMORY_GROWTH_MAX),
            ),
            false => ("(caches filling)".to_owned(), ""),
        };
        rows.push(Row {
            measure: "rebuild peak RSS growth".into(),
            size: format!(
                "{} -> {} events (log x{log_growth:.1})",
                small.events, big.events
            ),
            value: format!("memory x{memory_growth:.2}"),
            target,
            verdict,
        });
    }

    print_table(&rows);
    Ok(())
}

/// A rebuild of the log at `path` as a user's starts: from read models of
/// this very log, which it drops. (Measured straight after generation, a
/// log had no read model, or a shorter log's, to drop: the peak memory
/// then compared different amounts of dropping.) So an untimed rebuild
/// first, then the measured one.
fn measured_rebuild(path: &std::path::Path) -> TestResult<RebuildFigures> {
    timed_rebuild(path)?;
    timed_rebuild(path)
}
