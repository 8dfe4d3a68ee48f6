//! The verifiable log and the bounded post-run scan, printed as one table:
//! append throughput with the Merkle tree (batches of 1,000 and single
//! durable appends), and the tree's overhead: the time those same appends
//! spent growing the tree (`EventStore::merkle_time`, measured inside the
//! append) against the time of the appends without it; tree rebuild rate, inclusion and
//! consistency proof latency at the log's size, evidence bundle export and
//! verification for a 1,000-event session; and the post-run scan's cost
//! (`scan_ms`) for executions that change 10, 1,000 and 10,000 files.
//!
//! Run: `make bench` or `cargo bench -p sandlog-tests --bench verifiable`.
//! Knobs: `SANDLOG_BENCH_TREE_EVENTS` (log size, default 1,000,000),
//! `SANDLOG_BENCH_DIR` (where the store is written; default a temporary
//! directory).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::note::SignerKey;
use sandlog_core::{ManualClock, NewEvent, Position, StreamId, Timestamp};
use sandlog_eventstore::ExpectedVersion;
use sandlog_runtime::proofs::verify_bundle;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest};
use sandlog_sqlite::{Durability, EventStore, OpenOptions};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

fn main() -> BenchResult<()> {
    let events: u64 = std::env::var("SANDLOG_BENCH_TREE_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let temp = tempfile::tempdir()?;
    let dir = std::env::var_os("SANDLOG_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().to_owned());
    let path = dir.join(format!("verifiable-{}.db", std::process::id()));
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_700_000_000_000_000));
    let options = || {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .durability(Durability::Normal)
    };
    let store = EventStore::open(&path, options())?;

    // Batched appends with the tree, 1,000 per transaction.
    let started = Instant::now();
    let mut appended = 0u64;
    while appended < events {
        let batch: Vec<NewEvent> = (appended..(appended + 1000).min(events))
            .map(event)
            .collect();
        store.append(StreamId::System, ExpectedVersion::Any, &batch)?;
        appended += batch.len() as u64;
    }
    let batched = started.elapsed();
    let batched_tree = store.merkle_time();
    drop(store);

    // Single durable appends with the tree.
    let durable = EventStore::open(
        &dir.join(format!("durable-{}.db", std::process::id())),
        OpenOptions::default().clock(Arc::new(clock.clone())),
    )?;
    let mut singles = Vec::new();
    for i in 0..300 {
        let started = Instant::now();
        durable.append(StreamId::System, ExpectedVersion::Any, &[event(i)])?;
        singles.push(started.elapsed());
    }
    let singles_total: Duration = singles.iter().sum();
    let single_tree = durable.merkle_time();
    let single = median(singles);

    let store = EventStore::open(&path, options())?;
    let rebuild_started = Instant::now();
    let rebuilt = store.rebuild_merkle()?;
    let rebuild = rebuild_started.elapsed();
    assert_eq!(rebuilt, events);

    // Proofs at the full size, for positions spread over the log.
    let mut inclusion = Vec::new();
    for k in 0..200u64 {
        let position = Position(1 + (k * 7919 * 131) % events);
        let started = Instant::now();
        let proof = store.inclusion_proof(position, events)?;
        inclusion.push(started.elapsed());
        assert!(!proof.is_empty());
    }
    let mut consistency = Vec::new();
    for k in 1..=100u64 {
        let old = (k * 9973) % events + 1;
        let started = Instant::now();
        store.consistency_proof(old, events)?;
        consistency.push(started.elapsed());
    }
    let verify_started = Instant::now();
    let report = store.verify_merkle()?;
    let verify = verify_started.elapsed();
    assert_eq!(report.size, events);
    drop(store);
    let _ = std::fs::remove_file(&path);

    // A 1,000-event session: export and verify its bundle.
    let root = tempfile::tempdir()?;
    Engine::init(root.path())?;
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    let engine = Engine::open(
        root.path(),
        EngineOptions {
            clock: Arc::new(clock.clone()),
            runtimes_dir: Some(runtimes),
            cache_dir: Some(repo().join("target/sandlog-bench-cache")),
            durability: Durability::Normal,
            ..EngineOptions::default()
        },
    )?;
    let session = engine.create_session(BTreeMap::new())?.session_id;
    for i in 0..999u32 {
        let path = sandlog_core::WorkspacePath::parse(&format!("f{}", i % 50))?;
        engine.write_file(session, &path, format!("content {i}").as_bytes(), true)?;
    }
    let key = SignerKey::from_seed("sandlog.bench/log", [1; 32])?;
    let export_started = Instant::now();
    let bundle = engine.export_bundle(session, Some(&key))?;
    let bytes = serde_json::to_vec(&bundle)?;
    let export = export_started.elapsed();
    let verify_bundle_started = Instant::now();
    let bundle_report = verify_bundle(&bytes, &key.verifier())?;
    let bundle_verify = verify_bundle_started.elapsed();
    assert_eq!(bundle_report.events, 1000);

    // The post-run scan's cost for executions changing N files.
    let mut scans = Vec::new();
    for files in [10u32, 1_000, 10_000] {
        let session = engine.create_session(BTreeMap::new())?.session_id;
        let run = engine.execute(
            session,
            &ExecRequest::python(format!(
                "for i in range({files}):\n    open(f'/app/f{{i}}.txt','w').write('x' * 100)"
            )),
        )?;
        assert_eq!(run.files_written.len() as u32, files);
        scans.push((files, run.scan_ms, run.duration_ms));
    }

    println!();
    println!("verifiable log ({events} events)       | result");
    println!("--------------------------------------|------------------------------");
    println!(
        "append with tree, batches of 1,000    | {:>10.0} events/s",
        events as f64 / batched.as_secs_f64()
    );
    println!(
        "single durable append with tree      | {:>10.0} µs median",
        single.as_secs_f64() * 1e6
    );
    // What the appends would have cost without the tree: the same
    // appends, less the time spent growing it.
    let overhead = |total: Duration, tree: Duration| {
        let without = total.saturating_sub(tree).as_secs_f64();
        if without > 0.0 {
            100.0 * tree.as_secs_f64() / without
        } else {
            f64::NAN
        }
    };
    println!(
        "tree overhead, batches of 1,000       | {:>10.1} % (target <= 10 %)",
        overhead(batched, batched_tree)
    );
    println!(
        "tree overhead, single durable appends | {:>10.1} % (target <= 10 %)",
        overhead(singles_total, single_tree)
    );
    println!(
        "tree rebuild                          | {:>10.0} events/s (target >= 500,000)",
        events as f64 / rebuild.as_secs_f64()
    );
    println!(
        "inclusion proof at {events}          | {:>10.3} ms median (target <= 1 ms)",
        ms(median(inclusion))
    );
    println!(
        "consistency proof to {events}        | {:>10.3} ms median",
        ms(median(consistency))
    );
    println!(
        "verify_merkle (every node)            | {:>10.0} events/s",
        events as f64 / verify.as_secs_f64()
    );
    println!(
        "bundle of 1,000 events: export        | {:>10.1} ms ({} KiB)",
        ms(export),
        bytes.len() / 1024
    );
    println!(
        "bundle of 1,000 events: verify        | {:>10.1} ms",
        ms(bundle_verify)
    );
    for (files, scan_ms, duration_ms) in scans {
        println!(
            "post-run scan, {files:>6} files changed  | {scan_ms:>10} ms (guest ran {duration_ms} ms)"
        );
    }
    Ok(())
}
