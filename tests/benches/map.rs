//! The map of stream heads, printed as one table: what it adds to appends
//! (batched over many sessions, and single durable appends on a log of
//! 100,000 sessions), measured inside the append (`EventStore::map_time`)
//! against the same appends without it; the size and latency of a
//! session's map proof (present and absent) at the log's size; and the
//! full audit's rate (chain, tree and map recomputed from every event).
//!
//! Run: `make bench` or `cargo bench -p sandlog-tests --bench map`.
//! Knobs: `SANDLOG_BENCH_MAP_EVENTS` (log size, default 1,000,000),
//! `SANDLOG_BENCH_MAP_SESSIONS` (sessions, default 100,000),
//! `SANDLOG_BENCH_DIR` (where the store is written; default a temporary
//! directory).

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::note::{Checkpoint, SignerKey};
use sandlog_core::{ManualClock, NewEvent, SessionId, StreamId, Timestamp};
use sandlog_eventstore::ExpectedVersion;
use sandlog_sqlite::{Durability, EventStore, OpenOptions};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn event(i: u64) -> NewEvent {
    NewEvent {
        event_id: sandlog_core::EventId::now(),
        kind: "bench.event".into(),
        schema: 1,
        actor: "api:bench".into(),
        correlation_id: None,
        causation_id: None,
        payload: format!(
            r#"{{"i":{i},"note":"a payload of a typical size for a lifecycle event"}}"#
        )
        .into_bytes(),
    }
}

/// Percent the map adds to appends that took `total`, `map` of it in the
/// map's update.
fn overhead(total: Duration, map: Duration) -> f64 {
    let without = total.saturating_sub(map).as_secs_f64();
    if without > 0.0 {
        100.0 * map.as_secs_f64() / without
    } else {
        f64::NAN
    }
}

fn main() -> BenchResult<()> {
    let events = knob("SANDLOG_BENCH_MAP_EVENTS", 1_000_000);
    let sessions = knob("SANDLOG_BENCH_MAP_SESSIONS", 100_000).max(1);
    let temp = tempfile::tempdir()?;
    let dir = std::env::var_os("SANDLOG_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().to_owned());
    let path = dir.join(format!("map-{}.db", std::process::id()));
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let ids: Vec<SessionId> = (0..sessions).map(|_| SessionId::new_v4()).collect();
    let stream = |i: u64| {
        ids.get((i % sessions) as usize)
            .copied()
            .map_or(StreamId::System, StreamId::Session)
    };

    // Batched appends: 1,000 events per commit, 10 to each of 100
    // sessions, walking through every session.
    let store = EventStore::open(
        &path,
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .durability(Durability::Normal),
    )?;
    let started = Instant::now();
    let mut appended = 0u64;
    let mut commit = 0u64;
    while appended < events {
        let batch: Vec<(StreamId, ExpectedVersion, Vec<NewEvent>)> = (0..100u64)
            .map(|k| {
                let events = (0..10).map(|j| event(appended + k * 10 + j)).collect();
                (stream(commit * 100 + k), ExpectedVersion::Any, events)
            })
            .collect();
        appended += store.append_batch(&batch)?.len() as u64;
        commit += 1;
    }
    let batched = started.elapsed();
    let batched_map = store.map_time();
    drop(store);

    // Single durable appends to sessions spread over the whole map.
    let durable = EventStore::open(&path, OpenOptions::default().clock(Arc::new(clock.clone())))?;
    let mut singles = Vec::new();
    for i in 0..300u64 {
        let started = Instant::now();
        durable.append(stream(i * 7919), ExpectedVersion::Any, &[event(i)])?;
        singles.push(started.elapsed());
    }
    let singles_total: Duration = singles.iter().sum();
    let single_map = durable.map_time();
    let single = median(singles);

    // Proofs at the head, of present sessions and absent ones.
    let (size, root, map_root) = durable.checkpoint_head()?;
    let mut present = Vec::new();
    let mut present_hashes = 0usize;
    for k in 0..200u64 {
        let text = stream(k * 104_729).to_string();
        let started = Instant::now();
        let proof = durable.stream_head_proof(&text, size)?;
        present.push(started.elapsed());
        assert!(proof.head.is_some());
        present_hashes += proof.proof.siblings.len();
    }
    let mut absent = Vec::new();
    let mut absent_hashes = 0usize;
    for _ in 0..200 {
        let text = StreamId::Session(SessionId::new_v4()).to_string();
        let started = Instant::now();
        let proof = durable.stream_head_proof(&text, size)?;
        absent.push(started.elapsed());
        assert!(proof.head.is_none());
        absent_hashes += proof.proof.siblings.len();
    }

    // The full audit against one checkpoint at the head.
    let key = SignerKey::from_seed("sandlog.bench/log", [2; 32])?;
    let note = Checkpoint {
        origin: key.name().to_owned(),
        size,
        root,
        extensions: vec![sandlog_core::map::checkpoint_line(&map_root)],
    }
    .sign(&key)?;
    let audit_started = Instant::now();
    let report =
        sandlog_runtime::audit::audit_store(&durable, Some(&note), &key.verifier(), &|_, _| {})?;
    let audit = audit_started.elapsed();
    assert_eq!(report.events, size);
    drop(durable);
    let _ = std::fs::remove_file(&path);

    println!();
    println!("map of stream heads ({events} events, {sessions} sessions) | result");
    println!("----------------------------------------------------|------------------------------");
    println!(
        "append, batches of 1,000 over 100 sessions          | {:>10.0} events/s",
        events as f64 / batched.as_secs_f64()
    );
    println!(
        "map overhead, batches of 1,000                      | {:>10.1} % (target <= 10 %)",
        overhead(batched, batched_map)
    );
    println!(
        "single durable append                               | {:>10.0} µs median",
        single.as_secs_f64() * 1e6
    );
    println!(
        "map overhead, single durable appends                | {:>10.1} % (target <= 10 %)",
        overhead(singles_total, single_map)
    );
    println!(
        "session proof, present                              | {:>10.3} ms median, {:.1} hashes (target <= 1 ms)",
        median(present).as_secs_f64() * 1e3,
        present_hashes as f64 / 200.0
    );
    println!(
        "session proof, absent                               | {:>10.3} ms median, {:.1} hashes",
        median(absent).as_secs_f64() * 1e3,
        absent_hashes as f64 / 200.0
    );
    println!(
        "audit (chain, tree and map from every event)        | {:>10.0} events/s ({} map roots checked)",
        size as f64 / audit.as_secs_f64(),
        report.map_roots
    );
    Ok(())
}
