//! The event store next to raw rusqlite doing the same work, printed as one
//! table (issue 2's benchmark).
//!
//! Run: `cargo bench -p sandlog-tests --bench eventstore`
//!
//! # What is compared
//!
//! "raw" is rusqlite on a table created by the store's own migration (same
//! columns, indexes, unique constraints), with the same pragmas (WAL, the
//! same `synchronous`, the same page cache), prepared statements, and one
//! `BEGIN IMMEDIATE` transaction per batch. It inserts the very rows the
//! store would write, with hashes computed before the clock starts: raw is
//! the cost of storing the rows and nothing else. The store additionally
//! checks idempotency and the stream version, reads the head, hashes each
//! event and returns owned envelopes.
//!
//! * Batched append (batches of 1, 100, 1000) runs with
//!   `synchronous=NORMAL` on both sides (`Durability::Normal`): with FULL
//!   every commit waits for an fsync and batch-of-1 throughput would only
//!   measure the disk.
//! * Single durable append is `Durability::Full` against a raw one-row
//!   commit with `synchronous=FULL`, in back-to-back pairs (who goes first
//!   alternates). fsync latency on a shared disk swings by 10x within
//!   seconds, so the ratio is the median of the per-pair ratios, not the
//!   ratio of the medians; p10/p50/p90 of each side go to stderr.
//! * Throughput is per second of the benchmark thread's on-CPU time
//!   (`/proc/thread-self/schedstat`) where available, so builds running
//!   beside the benchmark do not count; wall-clock figures are printed
//!   next to it.
//! * Appends alternate between the two sides in slices of the workload, and
//!   reads take the best of three alternating runs, so that other load on
//!   the machine hits both sides alike.
//! * Read-all and verify run over the batch-of-1000 files (the OS page cache
//!   is warm: this measures the store, not the disk). Raw read-all selects
//!   the same columns in position order and touches every value without
//!   copying it; raw verify is that select plus the same blake3 chain hash
//!   per row. Our verify reads on one thread and hashes on another, so its
//!   rate is wall-clock time (raw's stays on-CPU time of its one thread).
//!
//! # Sizes (environment variables, defaults are the issue's sizes)
//!
//! * `SANDLOG_BENCH_EVENTS`: events of the batch-1000 run, read and
//!   verified afterwards (1,000,000).
//! * `SANDLOG_BENCH_BATCH100_EVENTS` (200,000), `SANDLOG_BENCH_BATCH1_EVENTS`
//!   (20,000).
//! * `SANDLOG_BENCH_DURABLE_SAMPLES`: single durable appends per side (300);
//!   the group-commit figure makes twice as many from one thread, and a
//!   quarter as many from each of 8 threads.
//! * `SANDLOG_BENCH_DIR`: where the files go (a temporary directory).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, TransactionBehavior, params};
use sandlog_core::envelope::EnvelopeFields;
use sandlog_core::{
    EventId, Hash, ManualClock, NewEvent, Position, SessionId, StreamId, StreamVersion, Timestamp,
    chain_hash,
};
use sandlog_eventstore::ExpectedVersion;
use sandlog_sqlite::store::MIGRATIONS;
use sandlog_sqlite::{Durability, EventStore, OpenOptions};

type BenchResult<T = ()> = Result<T, Box<dyn Error>>;

/// Sessions the appends are spread over (one stream per batch, round robin).
const SESSIONS: usize = 64;

/// The targets of issue 2.
const BATCH_RATIO_MIN: f64 = 0.60;
const READ_EVENTS_PER_SECOND_MIN: f64 = 1_000_000.0;
const DURABLE_LATENCY_RATIO_MAX: f64 = 1.3;

/// The same page cache the store configures (KiB), for a fair raw side.
const RAW_CACHE_SIZE_KIB: i64 = 32 * 1024;

const RAW_INSERT: &str = "INSERT INTO events (position, stream, version, event_id, kind, schema, \
     recorded_at, actor, correlation_id, causation_id, payload, prev_hash, hash, stream_key) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// The raw side names each stream once, as the store does.
const RAW_INSERT_STREAM: &str = "INSERT OR IGNORE INTO streams (key, stream) VALUES (?1, ?2)";

const RAW_SELECT: &str = "SELECT position, stream, version, event_id, kind, schema, recorded_at, \
     actor, correlation_id, causation_id, payload, prev_hash, hash FROM events ORDER BY position";

const KINDS: [&str; 4] = [
    "file.written",
    "session.executed",
    "file.deleted",
    "session.created",
];

fn env_count(name: &str, default: usize) -> BenchResult<usize> {
    match std::env::var(name) {
        Ok(text) => Ok(text.replace('_', "").parse()?),
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(error) => Err(error.into()),
    }
}

/// Realistic events: a `file.written`-like payload of about 140 bytes.
fn make_events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| {
            let content_hash = Hash::of(&i.to_le_bytes());
            NewEvent {
                event_id: EventId::now(),
                kind: KINDS
                    .get(i % KINDS.len())
                    .copied()
                    .unwrap_or("file.written")
                    .to_owned(),
                schema: 1,
                actor: "api:bench".to_owned(),
                correlation_id: None,
                causation_id: None,
                payload: format!(
                    r#"{{"path":"src/module_{i:07}.py","size":{},"blake3":"{content_hash}","by":"host"}}"#,
                    i % 65_536
                )
                .into_bytes(),
            }
        })
        .collect()
}

/// One row exactly as the store would write it.
struct RawRow {
    position: i64,
    stream: String,
    stream_key: i64,
    version: i64,
    event_id: [u8; 16],
    kind: String,
    schema: u32,
    recorded_at: i64,
    actor: String,
    payload: Vec<u8>,
    prev_hash: Hash,
    hash: Hash,
}

/// The rows the store writes for `events` appended in batches of
/// `batch_size` to streams round robin, all stamped `recorded_at`.
fn raw_rows(
    events: &[NewEvent],
    batch_size: usize,
    streams: &[StreamId],
    recorded_at: Timestamp,
) -> Vec<RawRow> {
    let mut versions = vec![0u64; streams.len()];
    let mut rows = Vec::with_capacity(events.len());
    let mut prev_hash = Hash::GENESIS;
    let mut position = 0u64;
    for (batch_index, batch) in events.chunks(batch_size.max(1)).enumerate() {
        let stream_index = batch_index % streams.len().max(1);
        let stream = streams
            .get(stream_index)
            .copied()
            .unwrap_or(StreamId::System)
            .to_string();
        for event in batch {
            position += 1;
            let version = match versions.get_mut(stream_index) {
                Some(version) => {
                    *version += 1;
                    *version
                }
                None => 1,
            };
            let fields = EnvelopeFields {
                position,
                stream: &stream,
                version,
                event_id: event.event_id.0.as_bytes(),
                kind: &event.kind,
                schema: event.schema,
                recorded_at_micros: recorded_at.unix_micros(),
                actor: &event.actor,
                correlation_id: &[],
                causation_id: &[],
                payload: &event.payload,
            };
            let hash = chain_hash(&prev_hash, &fields);
            rows.push(RawRow {
                position: position as i64,
                stream: stream.clone(),
                stream_key: stream_index as i64 + 1,
                version: version as i64,
                event_id: *event.event_id.0.as_bytes(),
                kind: event.kind.clone(),
                schema: event.schema,
                recorded_at: recorded_at.unix_micros(),
                actor: event.actor.clone(),
                payload: event.payload.clone(),
                prev_hash,
                hash,
            });
            prev_hash = hash;
        }
    }
    rows
}

fn synchronous_pragma(durability: Durability) -> &'static str {
    match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

/// A raw database with the store's schema and pragmas.
fn open_raw(path: &Path, durability: Durability) -> BenchResult<Connection> {
    let connection = Connection::open(path)?;
    let journal_mode: String =
        connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !journal_mode.eq_ignore_ascii_case("wal") {
        return Err(format!("raw side refused WAL: {journal_mode}").into());
    }
    connection.execute_batch(&format!(
        "PRAGMA synchronous = {}; PRAGMA cache_size = -{RAW_CACHE_SIZE_KIB}; PRAGMA temp_store = MEMORY;",
        synchronous_pragma(durability)
    ))?;
    let transaction = connection.unchecked_transaction()?;
    for script in MIGRATIONS {
        transaction.execute_batch(script)?;
    }
    transaction.commit()?;
    Ok(connection)
}

fn open_store(path: &Path, durability: Durability, clock: &ManualClock) -> BenchResult<EventStore> {
    Ok(EventStore::open(
        path,
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .durability(durability),
    )?)
}

fn raw_insert_batch(connection: &mut Connection, rows: &[RawRow]) -> BenchResult {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut insert = transaction.prepare_cached(RAW_INSERT)?;
        let mut insert_stream = transaction.prepare_cached(RAW_INSERT_STREAM)?;
        for row in rows {
            insert_stream.execute(params![row.stream_key, row.stream])?;
            insert.execute(params![
                row.position,
                row.stream,
                row.version,
                row.event_id.as_slice(),
                row.kind,
                row.schema,
                row.recorded_at,
                row.actor,
                Option::<&[u8]>::None,
                Option::<&[u8]>::None,
                row.payload,
                row.prev_hash.0.as_slice(),
                row.hash.0.as_slice(),
                row.stream_key,
            ])?;
        }
    }
    transaction.commit()?;
    Ok(())
}

/// Appends batches round robin over `streams`, each with `Exact(known
/// version)` (what a command handler does), tracking versions across calls.
struct StoreAppender<'a> {
    store: &'a EventStore,
    streams: &'a [StreamId],
    versions: Vec<Option<StreamVersion>>,
    next_batch: usize,
}

impl<'a> StoreAppender<'a> {
    fn new(store: &'a EventStore, streams: &'a [StreamId]) -> Self {
        StoreAppender {
            store,
            streams,
            versions: vec![None; streams.len()],
            next_batch: 0,
        }
    }

    fn append(&mut self, batch: &[NewEvent]) -> BenchResult {
        let stream_index = self.next_batch % self.streams.len().max(1);
        self.next_batch += 1;
        let stream = self
            .streams
            .get(stream_index)
            .copied()
            .ok_or("no stream for the batch")?;
        let version = self
            .versions
            .get_mut(stream_index)
            .ok_or("no version for the batch")?;
        let expected = version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
        let stored = self.store.append(stream, expected, batch)?;
        *version = stored.last().map(|envelope| envelope.version);
        Ok(())
    }
}

/// Slices of the workload timed alternately (ours, then raw, then ours…):
/// the machine's load changes over a run, and alternating in small slices
/// makes both sides see the same load.
const INTERLEAVED_SLICES: usize = 50;

/// Of several timed runs of a read, the fastest is the one least disturbed
/// by other work on the machine.
const READ_ROUNDS: usize = 3;

/// This thread's time on a CPU and its time runnable but waiting for one,
/// from `/proc/thread-self/schedstat` (Linux, nanoseconds); `None`
/// elsewhere.
fn thread_schedstat() -> Option<(Duration, Duration)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut fields = text.split_whitespace();
    let on_cpu = fields.next()?.parse().ok()?;
    let waiting = fields.next()?.parse().ok()?;
    Some((Duration::from_nanos(on_cpu), Duration::from_nanos(waiting)))
}

/// Wall-clock and on-CPU time of one measured stretch of this thread.
///
/// On a machine shared with other work (builds, other benchmarks), wall
/// time includes waiting for a CPU, which has nothing to do with either
/// side; on-CPU time does not. Throughput is therefore judged on on-CPU
/// time where the kernel reports it, and the wall-clock figures are printed
/// beside it.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    wall: Duration,
    cpu: Option<Duration>,
    waiting: Option<Duration>,
}

impl Span {
    /// The figure throughput is judged on: on-CPU time if known.
    fn primary(&self) -> Duration {
        self.cpu.unwrap_or(self.wall)
    }

    /// This span judged on wall-clock time: for work spread over several
    /// threads, where one thread's CPU time would flatter it.
    fn wall_only(self) -> Span {
        Span {
            cpu: None,
            waiting: None,
            ..self
        }
    }
}

impl std::ops::AddAssign for Span {
    fn add_assign(&mut self, other: Span) {
        self.wall += other.wall;
        self.cpu = self.cpu.zip(other.cpu).map(|(a, b)| a + b);
        self.waiting = self.waiting.zip(other.waiting).map(|(a, b)| a + b);
    }
}

struct Stopwatch {
    wall: Instant,
    schedstat: Option<(Duration, Duration)>,
}

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch {
            schedstat: thread_schedstat(),
            wall: Instant::now(),
        }
    }

    fn stop(&self) -> Span {
        let wall = self.wall.elapsed();
        let now = thread_schedstat();
        let (cpu, waiting) = match (self.schedstat, now) {
            (Some((cpu_0, wait_0)), Some((cpu_1, wait_1))) => (
                Some(cpu_1.saturating_sub(cpu_0)),
                Some(wait_1.saturating_sub(wait_0)),
            ),
            _ => (None, None),
        };
        Span { wall, cpu, waiting }
    }
}

fn per_second(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// One side's figure of a line: judged on `primary`, with the wall-clock
/// figure shown beside it.
#[derive(Debug, Clone, Copy)]
struct Figure {
    primary: f64,
    wall: f64,
}

impl Figure {
    /// Events per second over `span` (on-CPU time if known).
    fn rate(count: usize, span: Span) -> Figure {
        Figure {
            primary: per_second(count, span.primary()),
            wall: per_second(count, span.wall),
        }
    }

    /// A wall-clock latency in microseconds.
    fn latency(duration: Duration) -> Figure {
        let micros = duration.as_secs_f64() * 1e6;
        Figure {
            primary: micros,
            wall: micros,
        }
    }
}

/// A measured pair: ours and raw's figure of one quantity.
struct Line {
    name: String,
    unit: &'static str,
    ours: Figure,
    raw: Figure,
    /// For paired samples: the median of the per-pair ratios, which drift
    /// in the disk's latency cannot skew the way it skews a ratio of two
    /// medians.
    paired_ratio: Option<f64>,
    target: Target,
}

enum Target {
    /// ours/raw throughput ratio at least this.
    RatioAtLeast(f64),
    /// ours/raw latency ratio at most this.
    LatencyRatioAtMost(f64),
    /// ours at least this many per second.
    RateAtLeast(f64),
}

impl Line {
    fn ratio(&self) -> f64 {
        self.paired_ratio
            .unwrap_or(self.ours.primary / self.raw.primary)
    }

    fn wall_ratio(&self) -> f64 {
        self.ours.wall / self.raw.wall
    }

    fn target_text(&self) -> String {
        match self.target {
            Target::RatioAtLeast(min) => format!(">= {:.2} (raw)", min),
            Target::LatencyRatioAtMost(max) => format!("<= {max:.2} (raw)"),
            Target::RateAtLeast(min) => format!(">= {}/s", group(min)),
        }
    }

    fn met(&self) -> bool {
        match self.target {
            Target::RatioAtLeast(min) => self.ratio() >= min,
            Target::LatencyRatioAtMost(max) => self.ratio() <= max,
            Target::RateAtLeast(min) => self.ours.primary >= min,
        }
    }
}

/// `1234567.8` as `1 234 568`.
fn group(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(' ');
        }
        grouped.push(digit);
    }
    grouped
}

fn print_table(lines: &[Line]) {
    let header = [
        "measurement",
        "unit",
        "sandlog",
        "raw",
        "sandlog/raw",
        "target",
        "met",
        "wall: sandlog",
        "wall: raw",
        "wall: ratio",
    ];
    let rows: Vec<[String; 10]> = lines
        .iter()
        .map(|line| {
            [
                line.name.clone(),
                line.unit.to_owned(),
                group(line.ours.primary),
                group(line.raw.primary),
                format!("{:.2}", line.ratio()),
                line.target_text(),
                if line.met() { "yes" } else { "NO" }.to_owned(),
                group(line.ours.wall),
                group(line.raw.wall),
                format!("{:.2}", line.wall_ratio()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let print_row = |cells: &[String]| {
        let mut text = String::from("|");
        for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
            // Words read left to right; numbers line up on the right.
            if matches!(index, 0 | 1 | 5 | 6) {
                text.push_str(&format!(" {cell:<width$} |"));
            } else {
                text.push_str(&format!(" {cell:>width$} |"));
            }
        }
        println!("{text}");
    };
    print_row(&header.map(str::to_owned));
    println!(
        "|{}|",
        widths
            .iter()
            .map(|width| "-".repeat(width + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in &rows {
        print_row(row);
    }
}

/// Batched append of `n` events in batches of `batch_size`, ours and raw
/// alternating in slices, each into a fresh file under `dir`. Returns the
/// line and the two files.
fn bench_batched_append(
    dir: &Path,
    n: usize,
    batch_size: usize,
    streams: &[StreamId],
    clock: &ManualClock,
) -> BenchResult<(Line, PathBuf, PathBuf)> {
    let events = make_events(n);
    let rows = raw_rows(
        &events,
        batch_size,
        streams,
        sandlog_core::Clock::now(clock),
    );
    let ours_path = dir.join(format!("sandlog-batch{batch_size}.db"));
    let raw_path = dir.join(format!("raw-batch{batch_size}.db"));
    let store = open_store(&ours_path, Durability::Normal, clock)?;
    let mut raw = open_raw(&raw_path, Durability::Normal)?;
    let mut appender = StoreAppender::new(&store, streams);

    let batches_per_slice = n
        .div_ceil(batch_size.max(1))
        .div_ceil(INTERLEAVED_SLICES)
        .max(1);
    let slice_events = batches_per_slice * batch_size.max(1);
    let mut ours_span = Span::default();
    let mut raw_span = Span::default();
    let (mut first_ours, mut first_raw) = (true, true);
    for (event_slice, row_slice) in events.chunks(slice_events).zip(rows.chunks(slice_events)) {
        let stopwatch = Stopwatch::start();
        for batch in event_slice.chunks(batch_size.max(1)) {
            appender.append(batch)?;
        }
        accumulate(&mut ours_span, &mut first_ours, stopwatch.stop());
        let stopwatch = Stopwatch::start();
        for batch in row_slice.chunks(batch_size.max(1)) {
            raw_insert_batch(&mut raw, batch)?;
        }
        accumulate(&mut raw_span, &mut first_raw, stopwatch.stop());
    }
    drop(store);
    drop(raw);

    let line = Line {
        name: format!(
            "append, batches of {batch_size}, {} events (synchronous=NORMAL)",
            group(n as f64)
        ),
        unit: "events/s",
        ours: Figure::rate(n, ours_span),
        raw: Figure::rate(n, raw_span),
        paired_ratio: None,
        target: Target::RatioAtLeast(BATCH_RATIO_MIN),
    };
    Ok((line, ours_path, raw_path))
}

/// Adds `span` to `total`. The first span replaces the default instead:
/// the default has no CPU figure, and adding to "unknown" stays unknown.
fn accumulate(total: &mut Span, first: &mut bool, span: Span) {
    if std::mem::take(first) {
        *total = span;
    } else {
        *total += span;
    }
}

/// Median of `samples` (sorted in place).
fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples
        .get(samples.len() / 2)
        .copied()
        .unwrap_or(Duration::ZERO)
}

fn bench_durable_append(dir: &Path, samples: usize, clock: &ManualClock) -> BenchResult<Line> {
    let events = make_events(samples);
    let stream = StreamId::Session(SessionId::new_v4());
    let rows = raw_rows(&events, 1, &[stream], sandlog_core::Clock::now(clock));
    let store = open_store(&dir.join("sandlog-durable.db"), Durability::Full, clock)?;
    let mut raw = open_raw(&dir.join("raw-durable.db"), Durability::Full)?;
    let mut ours = Vec::with_capacity(samples);
    let mut theirs = Vec::with_capacity(samples);
    let mut version = None;
    for (index, (event, row)) in events.iter().zip(rows.chunks(1)).enumerate() {
        // Who goes first alternates: an fsync right after another one can
        // be slower or faster, and that must not favour a side.
        for side in [index % 2, (index + 1) % 2] {
            if side == 0 {
                let expected = version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
                let started = Instant::now();
                let stored = store.append(stream, expected, std::slice::from_ref(event))?;
                ours.push(started.elapsed());
                version = stored.last().map(|envelope| envelope.version);
            } else {
                let started = Instant::now();
                raw_insert_batch(&mut raw, row)?;
                theirs.push(started.elapsed());
            }
        }
    }
    let mut pair_ratios: Vec<f64> = ours
        .iter()
        .zip(&theirs)
        .map(|(ours, raw)| ours.as_secs_f64() / raw.as_secs_f64().max(f64::MIN_POSITIVE))
        .collect();
    pair_ratios.sort_unstable_by(f64::total_cmp);
    let paired_ratio = pair_ratios.get(pair_ratios.len() / 2).copied();
    for (side, samples) in [("sandlog", &mut ours), ("raw", &mut theirs)] {
        samples.sort_unstable();
        let at = |fraction: f64| {
            let index = ((samples.len() as f64 - 1.0) * fraction).round() as usize;
            samples.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e6)
        };
        eprintln!(
            "durable append, {side}: p10 {:.0} µs, p50 {:.0} µs, p90 {:.0} µs",
            at(0.1),
            at(0.5),
            at(0.9)
        );
    }
    // A latency line: the figures are microseconds and the ratio is ours
    // over raw, so smaller is better.
    Ok(Line {
        name: format!("single durable append, median of {samples} (synchronous=FULL)"),
        unit: "µs",
        ours: Figure::latency(median(&mut ours)),
        raw: Figure::latency(median(&mut theirs)),
        paired_ratio,
        target: Target::LatencyRatioAtMost(DURABLE_LATENCY_RATIO_MAX),
    })
}

/// Touches a value the way a consumer would, without copying it.
fn value_size(value: ValueRef<'_>) -> usize {
    match value {
        ValueRef::Null => 0,
        ValueRef::Integer(_) | ValueRef::Real(_) => 8,
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes.len(),
    }
}

fn raw_read_all(path: &Path) -> BenchResult<(usize, usize)> {
    let connection = Connection::open(path)?;
    connection.execute_batch(&format!("PRAGMA cache_size = -{RAW_CACHE_SIZE_KIB};"))?;
    let mut statement = connection.prepare(RAW_SELECT)?;
    let mut rows = statement.query([])?;
    let mut count = 0;
    let mut bytes = 0;
    while let Some(row) = rows.next()? {
        for index in 0..13 {
            bytes += value_size(row.get_ref(index)?);
        }
        count += 1;
    }
    Ok((count, bytes))
}

fn blob_of(value: ValueRef<'_>) -> &[u8] {
    match value {
        ValueRef::Blob(bytes) | ValueRef::Text(bytes) => bytes,
        _ => &[],
    }
}

fn text_of(value: ValueRef<'_>) -> BenchResult<&str> {
    Ok(std::str::from_utf8(blob_of(value))?)
}

fn integer_of(value: ValueRef<'_>) -> i64 {
    match value {
        ValueRef::Integer(number) => number,
        _ => 0,
    }
}

/// The raw floor of verify: the same select plus the same chain hash per
/// row, with none of the store's checks or error reporting.
fn raw_verify(path: &Path) -> BenchResult<usize> {
    let connection = Connection::open(path)?;
    connection.execute_batch(&format!("PRAGMA cache_size = -{RAW_CACHE_SIZE_KIB};"))?;
    let mut statement = connection.prepare(RAW_SELECT)?;
    let mut rows = statement.query([])?;
    let mut prev_hash = Hash::GENESIS;
    let mut count = 0;
    while let Some(row) = rows.next()? {
        let fields = EnvelopeFields {
            position: integer_of(row.get_ref(0)?) as u64,
            stream: text_of(row.get_ref(1)?)?,
            version: integer_of(row.get_ref(2)?) as u64,
            event_id: blob_of(row.get_ref(3)?),
            kind: text_of(row.get_ref(4)?)?,
            schema: integer_of(row.get_ref(5)?) as u32,
            recorded_at_micros: integer_of(row.get_ref(6)?),
            actor: text_of(row.get_ref(7)?)?,
            correlation_id: blob_of(row.get_ref(8)?),
            causation_id: blob_of(row.get_ref(9)?),
            payload: blob_of(row.get_ref(10)?),
        };
        let hash = chain_hash(&prev_hash, &fields);
        if Hash::from_slice(blob_of(row.get_ref(12)?)) != Some(hash) {
            return Err(format!("raw verify: bad hash at row {count}").into());
        }
        prev_hash = hash;
        count += 1;
    }
    Ok(count)
}

fn store_read_all(store: &EventStore) -> BenchResult<(usize, usize)> {
    let mut count = 0usize;
    let mut bytes = 0usize;
    for envelope in store.read_all_after(Position::ZERO) {
        let envelope = envelope?;
        bytes += envelope.payload.len() + envelope.kind.len() + envelope.actor.len();
        count += 1;
    }
    Ok((count, bytes))
}

/// Times `ours` and `raw` alternately [`READ_ROUNDS`] times and keeps each
/// side's fastest run; both must report `n` events. `ours_threaded`: ours
/// runs on more than the calling thread, so it is judged on wall-clock
/// time (raw, single-threaded, keeps its on-CPU figure: the comparison can
/// only get harder).
fn best_of(
    n: usize,
    ours_threaded: bool,
    mut ours: impl FnMut() -> BenchResult<usize>,
    mut raw: impl FnMut() -> BenchResult<usize>,
) -> BenchResult<(Span, Span)> {
    let mut ours_best: Option<Span> = None;
    let mut raw_best: Option<Span> = None;
    let faster = |best: Option<Span>, span: Span| match best {
        Some(best) if best.primary() <= span.primary() => Some(best),
        _ => Some(span),
    };
    for _ in 0..READ_ROUNDS {
        let stopwatch = Stopwatch::start();
        let ours_count = ours()?;
        let span = stopwatch.stop();
        ours_best = faster(
            ours_best,
            if ours_threaded {
                span.wall_only()
            } else {
                span
            },
        );
        let stopwatch = Stopwatch::start();
        let raw_count = raw()?;
        raw_best = faster(raw_best, stopwatch.stop());
        if ours_count != n || raw_count != n {
            return Err(format!("expected {n} events, read {ours_count} and {raw_count}").into());
        }
    }
    Ok((ours_best.unwrap_or_default(), raw_best.unwrap_or_default()))
}

fn bench_read_and_verify(
    ours_path: &Path,
    raw_path: &Path,
    n: usize,
    clock: &ManualClock,
) -> BenchResult<Vec<Line>> {
    let store = open_store(ours_path, Durability::Normal, clock)?;
    // An untimed pass each so both start from a warm page cache.
    store_read_all(&store)?;
    raw_read_all(raw_path)?;
    let (ours_read, raw_read) = best_of(
        n,
        false,
        || Ok(store_read_all(&store)?.0),
        || Ok(raw_read_all(raw_path)?.0),
    )?;
    // verify reads on one thread and hashes on another.
    let (ours_verify, raw_verify_elapsed) = best_of(
        n,
        true,
        || Ok(usize::try_from(store.verify()?.events)?),
        || raw_verify(raw_path),
    )?;
    Ok(vec![
        Line {
            name: format!(
                "read-all of {} events (read_all_after vs raw select), best of {READ_ROUNDS}",
                group(n as f64)
            ),
            unit: "events/s",
            ours: Figure::rate(n, ours_read),
            raw: Figure::rate(n, raw_read),
            paired_ratio: None,
            target: Target::RateAtLeast(READ_EVENTS_PER_SECOND_MIN),
        },
        Line {
            name: format!(
                "verify of {} events (vs raw select + blake3), best of {READ_ROUNDS}; ours: 2 threads, wall-clock",
                group(n as f64)
            ),
            unit: "events/s",
            ours: Figure::rate(n, ours_verify),
            raw: Figure::rate(n, raw_verify_elapsed),
            paired_ratio: None,
            target: Target::RateAtLeast(READ_EVENTS_PER_SECOND_MIN),
        },
    ])
}

/// Durable appends from `threads` threads of one process at once, each
/// to its own stream, `per_thread` each: appends per second of wall-clock
/// time, and how many commits each fsync of the WAL made durable (group
/// commit). With one thread every commit has its own fsync.
fn bench_concurrent_durable(
    dir: &Path,
    threads: usize,
    per_thread: usize,
    clock: &ManualClock,
) -> BenchResult<(f64, f64)> {
    let path = dir.join(format!("sandlog-concurrent-{threads}.db"));
    let store = open_store(&path, Durability::Full, clock)?;
    let started = Instant::now();
    std::thread::scope(|scope| -> BenchResult {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<(), String> {
                    let stream = StreamId::Session(SessionId::new_v4());
                    let mut version = None;
                    for event in make_events(per_thread) {
                        let expected =
                            version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
                        let stored = store
                            .append(stream, expected, std::slice::from_ref(&event))
                            .map_err(|error| error.to_string())?;
                        version = stored.last().map(|envelope| envelope.version);
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker
                .join()
                .map_err(|_| "an appending thread panicked")??;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();
    let (syncs, commits) = store.group_commit_counts();
    drop(store);
    remove_database(&path)?;
    Ok((
        (threads * per_thread) as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
        commits as f64 / (syncs.max(1)) as f64,
    ))
}

fn main() -> BenchResult {
    let events = env_count("SANDLOG_BENCH_EVENTS", 1_000_000)?;
    let batch100_events = env_count("SANDLOG_BENCH_BATCH100_EVENTS", 200_000)?;
    let batch1_events = env_count("SANDLOG_BENCH_BATCH1_EVENTS", 20_000)?;
    let durable_samples = env_count("SANDLOG_BENCH_DURABLE_SAMPLES", 300)?;
    let temporary = match std::env::var_os("SANDLOG_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    };
    let dir = temporary.path();
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let streams: Vec<StreamId> = (0..SESSIONS)
        .map(|_| StreamId::Session(SessionId::new_v4()))
        .collect();
    let run = Stopwatch::start();
    eprintln!("files in {}", dir.display());

    let mut lines = Vec::new();
    for (batch_size, n) in [(1, batch1_events), (100, batch100_events)] {
        eprintln!("append, batches of {batch_size}…");
        let (line, ours, raw) = bench_batched_append(dir, n, batch_size, &streams, &clock)?;
        lines.push(line);
        for path in [ours, raw] {
            remove_database(&path)?;
        }
    }
    eprintln!("append, batches of 1000…");
    let (line, ours_path, raw_path) = bench_batched_append(dir, events, 1000, &streams, &clock)?;
    lines.push(line);
    eprintln!("single durable append…");
    lines.push(bench_durable_append(dir, durable_samples, &clock)?);
    eprintln!("durable appends from 1 and 8 threads…");
    let (alone, _) = bench_concurrent_durable(dir, 1, durable_samples * 2, &clock)?;
    let (together, per_sync) = bench_concurrent_durable(dir, 8, durable_samples / 4, &clock)?;
    eprintln!("read-all and verify…");
    lines.extend(bench_read_and_verify(
        &ours_path, &raw_path, events, &clock,
    )?);

    let run = run.stop();
    println!();
    println!(
        "sandlog-eventstore vs raw rusqlite: same schema, WAL, same synchronous, ~140-byte JSON payloads, {SESSIONS} streams; {:.0} s in all.",
        run.wall.as_secs_f64()
    );
    match (run.cpu, run.waiting) {
        (Some(_), Some(waiting)) => println!(
            "Rates are per second of on-CPU time of the benchmark thread; wall-clock figures on the right. \
             The thread waited for a CPU {:.0}% of the run (other load on the machine).",
            100.0 * waiting.as_secs_f64() / run.wall.as_secs_f64().max(f64::MIN_POSITIVE)
        ),
        _ => {
            println!("Rates are per second of wall-clock time (no per-thread CPU accounting here).")
        }
    }
    println!(
        "Latencies are wall-clock medians; their ratio is the median of the ratios of {durable_samples} back-to-back pairs. \
         Batched appends: synchronous=NORMAL on both sides."
    );
    print_table(&lines);
    println!();
    println!(
        "Group commit, durable appends (Durability::Full), one stream per thread: 1 thread {alone:.0}/s; \
         8 threads {together:.0}/s ({:.1}×), {per_sync:.1} commits per fsync of the WAL.",
        together / alone.max(f64::MIN_POSITIVE)
    );
    Ok(())
}

/// Deletes a database file and its WAL and shared-memory files.
fn remove_database(path: &Path) -> BenchResult {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
