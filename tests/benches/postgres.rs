//! The PostgreSQL backend next to raw `INSERT`s of the same rows through
//! the same client, and the two append locks side by side, printed as one
//! table (issue 15's benchmark).
//!
//! Run: `cargo bench -p sandlog-tests --bench postgres`
//!
//! The server is found as the tests find it (`support::pg`):
//! `$SANDLOG_TEST_PG_URL`, else a throwaway cluster under `target/` (with
//! the server's default, durable settings: `fsync` and
//! `synchronous_commit` on). No server fails the bench, saying why.
//!
//! # What is compared
//!
//! "raw" is the same `postgres::Client` inserting the very rows the store
//! wrote (hashes and all, computed before the clock starts) into a table
//! created `LIKE events INCLUDING ALL` (same columns, indexes and unique
//! constraints), one transaction per batch, with the same multi-row
//! `INSERT … SELECT FROM unnest(…)` the store uses. Raw is the cost of
//! storing the rows and nothing else; the store also takes the append lock,
//! checks idempotency and the stream version, reads the head, hashes each
//! event, stores the Merkle nodes and returns owned envelopes.
//!
//! * Batched: batches of 100 events, every commit durable.
//! * Single: one event per commit, durable (dominated by the commit's WAL
//!   flush on both sides).
//! * Read-all: `query_page` over the whole log; verify: the chain walk.
//! * Locks: single appends with `pg_advisory_xact_lock` against a row
//!   `FOR UPDATE`, one writer, then four writers with a connection each
//!   (as four processes would), each on its own stream.
//!
//! Sides alternate in slices of the workload so that other load on the
//! machine hits both alike. Sizes: `SANDLOG_BENCH_PG_EVENTS` (events of
//! the batched run, 50,000) and `SANDLOG_BENCH_PG_SINGLE` (single appends
//! per side, 500).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::{Envelope, EventId, ManualClock, NewEvent, SessionId, StreamId};
use sandlog_eventstore::{ExpectedVersion, LogFilter};
use sandlog_postgres::{AppendLock, PgEventStore, PgOptions};
use sandlog_tests::TEST_EPOCH;
use sandlog_tests::pg::{self, PgDatabase};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// Events per batch of the batched run.
const BATCH: usize = 100;
/// Slices the alternating runs are cut into.
const SLICES: usize = 10;

fn env_count(name: &str, default: usize) -> BenchResult<usize> {
    match std::env::var(name) {
        Ok(value) => Ok(value.parse()?),
        Err(_) => Ok(default),
    }
}

fn make_events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            event_id: EventId::now(),
            kind: "execution.finished".to_owned(),
            schema: 1,
            actor: "api:bench".to_owned(),
            correlation_id: Some(uuid::Uuid::new_v4()),
            causation_id: None,
            payload: format!(
                r#"{{"execution":"{}","exit_code":0,"duration_ms":{},"stdout_bytes":{},"stderr_bytes":0,"files_changed":[]}}"#,
                uuid::Uuid::new_v4(),
                i % 997,
                i % 4096
            )
            .into_bytes(),
        })
        .collect()
}

fn store(database: &PgDatabase, lock: AppendLock) -> BenchResult<PgEventStore> {
    Ok(PgEventStore::connect_with(
        &database.url,
        PgOptions::default()
            .clock(Arc::new(ManualClock::new(TEST_EPOCH)))
            .lock(lock),
    )?)
}

const RAW_INSERT: &str = "INSERT INTO raw_events (position, stream, version, event_id, kind, schema, \
     recorded_at, actor, correlation_id, causation_id, payload, prev_hash, hash) \
     SELECT * FROM unnest($1::int8[], $2::text[], $3::int8[], $4::bytea[], $5::text[], \
     $6::int8[], $7::int8[], $8::text[], $9::bytea[], $10::bytea[], $11::bytea[], $12::bytea[], \
     $13::bytea[])";

/// Inserts `rows` in one transaction through `client`, as the store does.
fn raw_insert(
    client: &mut postgres::Client,
    statement: &postgres::Statement,
    rows: &[Envelope],
) -> BenchResult<()> {
    let positions: Vec<i64> = rows.iter().map(|e| e.position.0 as i64).collect();
    let streams: Vec<String> = rows.iter().map(|e| e.stream.to_string()).collect();
    let versions: Vec<i64> = rows.iter().map(|e| e.version.0 as i64).collect();
    let ids: Vec<&[u8]> = rows
        .iter()
        .map(|e| e.event_id.0.as_bytes().as_slice())
        .collect();
    let kinds: Vec<&str> = rows.iter().map(|e| e.kind.as_str()).collect();
    let schemas: Vec<i64> = rows.iter().map(|e| i64::from(e.schema)).collect();
    let recorded: Vec<i64> = rows.iter().map(|e| e.recorded_at.unix_micros()).collect();
    let actors: Vec<&str> = rows.iter().map(|e| e.actor.as_str()).collect();
    let correlations: Vec<Option<&[u8]>> = rows
        .iter()
        .map(|e| e.correlation_id.as_ref().map(|id| id.as_bytes().as_slice()))
        .collect();
    let causations: Vec<Option<&[u8]>> = rows
        .iter()
        .map(|e| e.causation_id.as_ref().map(|id| id.as_bytes().as_slice()))
        .collect();
    let payloads: Vec<&[u8]> = rows.iter().map(|e| e.payload.as_slice()).collect();
    let prevs: Vec<&[u8]> = rows.iter().map(|e| e.prev_hash.0.as_slice()).collect();
    let hashes: Vec<&[u8]> = rows.iter().map(|e| e.hash.0.as_slice()).collect();
    let mut transaction = client.transaction()?;
    transaction.execute(
        statement,
        &[
            &positions,
            &streams,
            &versions,
            &ids,
            &kinds,
            &schemas,
            &recorded,
            &actors,
            &correlations,
            &causations,
            &payloads,
            &prevs,
            &hashes,
        ],
    )?;
    transaction.commit()?;
    Ok(())
}

/// The rows `events` become when appended to a fresh log: computed on a
/// scratch database, so the raw side inserts exactly what the store wrote.
fn rows_of(events: &[NewEvent], per_append: usize) -> BenchResult<Vec<Envelope>> {
    let scratch = pg::database()?;
    let store = store(&scratch, AppendLock::Advisory)?;
    let stream = StreamId::Session(SessionId::new_v4());
    let mut rows = Vec::with_capacity(events.len());
    for chunk in events.chunks(per_append) {
        rows.extend(store.append(stream, ExpectedVersion::Any, chunk)?);
    }
    Ok(rows)
}

struct Line {
    what: String,
    ours: f64,
    raw: Option<f64>,
    unit: &'static str,
}

/// Store and raw appends of `events` in appends of `per_append`,
/// alternating in slices; returns (store, raw) events per second.
fn appends_vs_raw(events: &[NewEvent], per_append: usize) -> BenchResult<(f64, f64)> {
    let rows = rows_of(events, per_append)?;
    let database = pg::database()?;
    let ours = store(&database, AppendLock::Advisory)?;
    let mut client = database.client()?;
    client.batch_execute("CREATE TABLE raw_events (LIKE events INCLUDING ALL)")?;
    let statement = client.prepare(RAW_INSERT)?;
    let stream = StreamId::Session(SessionId::new_v4());
    let (mut ours_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    let slice = events.len().div_ceil(SLICES);
    for (events, rows) in events.chunks(slice).zip(rows.chunks(slice)) {
        let started = Instant::now();
        for chunk in events.chunks(per_append) {
            ours.append(stream, ExpectedVersion::Any, chunk)?;
        }
        ours_time += started.elapsed();
        let started = Instant::now();
        for chunk in rows.chunks(per_append) {
            raw_insert(&mut client, &statement, chunk)?;
        }
        raw_time += started.elapsed();
    }
    let n = events.len() as f64;
    Ok((n / ours_time.as_secs_f64(), n / raw_time.as_secs_f64()))
}

/// Single appends per second with each lock, alternating in slices, from
/// `writers` threads, each with a store (a connection) of its own, as
/// separate processes would be, appending `per_writer` to its own stream.
fn locks(writers: usize, per_writer: usize) -> BenchResult<(f64, f64)> {
    let advisory_db = pg::database()?;
    let head_row_db = pg::database()?;
    let mut sides = Vec::new();
    for (database, lock) in [
        (&advisory_db, AppendLock::Advisory),
        (&head_row_db, AppendLock::HeadRow),
    ] {
        let stores = (0..writers)
            .map(|_| store(database, lock).map(Arc::new))
            .collect::<BenchResult<Vec<_>>>()?;
        sides.push((lock, stores, Duration::ZERO));
    }
    let per_slice = per_writer.div_ceil(SLICES);
    for slice in 0..SLICES {
        // Who goes first alternates, so a disk that is slower at one
        // moment hits both sides alike.
        if slice % 2 == 1 {
            sides.reverse();
        }
        for (_, stores, time) in &mut sides {
            let started = Instant::now();
            let handles: Vec<_> = stores
                .iter()
                .map(|store| {
                    let store = Arc::clone(store);
                    let events = make_events(per_slice);
                    std::thread::spawn(move || -> Result<(), String> {
                        let stream = StreamId::Session(SessionId::new_v4());
                        for event in events {
                            store
                                .append(stream, ExpectedVersion::Any, &[event])
                                .map_err(|error| error.to_string())?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for handle in handles {
                handle.join().map_err(|_| "append thread panicked")??;
            }
            *time += started.elapsed();
        }
    }
    let n = (writers * per_slice * SLICES) as f64;
    let rate = |time: Duration| n / time.as_secs_f64();
    let time_of = |wanted: AppendLock| {
        sides
            .iter()
            .find(|(lock, _, _)| *lock == wanted)
            .map(|(_, _, time)| rate(*time))
            .ok_or("a side is missing")
    };
    Ok((
        time_of(AppendLock::Advisory)?,
        time_of(AppendLock::HeadRow)?,
    ))
}

fn main() -> BenchResult<()> {
    if std::env::args().any(|argument| argument == "--list") {
        return Ok(());
    }
    let n_batched = env_count("SANDLOG_BENCH_PG_EVENTS", 50_000)?;
    let n_single = env_count("SANDLOG_BENCH_PG_SINGLE", 500)?;
    pg::server()?;
    let mut lines = Vec::new();

    let (ours, raw) = appends_vs_raw(&make_events(n_batched), BATCH)?;
    lines.push(Line {
        what: format!("append, batches of {BATCH}, durable"),
        ours,
        raw: Some(raw),
        unit: "events/s",
    });
    let (ours, raw) = appends_vs_raw(&make_events(n_single), 1)?;
    lines.push(Line {
        what: "append, single, durable".into(),
        ours,
        raw: Some(raw),
        unit: "events/s",
    });

    // Read-all and verify over the batched run's size.
    let database = pg::database()?;
    let reads = store(&database, AppendLock::Advisory)?;
    let stream = StreamId::Session(SessionId::new_v4());
    for chunk in make_events(n_batched).chunks(1000) {
        reads.append(stream, ExpectedVersion::Any, chunk)?;
    }
    let started = Instant::now();
    let all = reads.query_page(&LogFilter::default())?;
    let read_rate = all.len() as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let report = reads.verify(None)?;
    let verify_rate = report.events as f64 / started.elapsed().as_secs_f64();
    lines.push(Line {
        what: format!("read all ({} events)", all.len()),
        ours: read_rate,
        raw: None,
        unit: "events/s",
    });
    lines.push(Line {
        what: format!("verify ({} events)", report.events),
        ours: verify_rate,
        raw: None,
        unit: "events/s",
    });

    let (advisory, head_row) = locks(1, n_single)?;
    let (advisory4, head_row4) = locks(4, n_single / 4)?;

    println!("PostgreSQL backend (issue 15), server: {:?}", pg::server()?);
    println!(
        "{:<40} {:>14} {:>14} {:>8}",
        "operation", "store", "raw", "store/raw"
    );
    for line in &lines {
        match line.raw {
            Some(raw) => println!(
                "{:<40} {:>14.0} {:>14.0} {:>7.0}%   {}",
                line.what,
                line.ours,
                raw,
                100.0 * line.ours / raw,
                line.unit
            ),
            None => println!(
                "{:<40} {:>14.0} {:>14} {:>8}   {}",
                line.what, line.ours, "", "", line.unit
            ),
        }
    }
    println!();
    println!(
        "{:<40} {:>14} {:>14} {:>8}",
        "append lock (single durable appends)", "advisory", "row FOR UPDATE", "adv/row"
    );
    for (what, advisory, head_row) in [
        ("1 writer", advisory, head_row),
        ("4 writers (a connection each)", advisory4, head_row4),
    ] {
        println!(
            "{:<40} {:>14.0} {:>14.0} {:>7.0}%   events/s",
            what,
            advisory,
            head_row,
            100.0 * advisory / head_row
        );
    }
    Ok(())
}
