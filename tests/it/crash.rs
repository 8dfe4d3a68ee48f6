//! Crash tests with real processes (C2, S6, P-intents): a child runs
//! random engine operations (create, write, delete, prune, reconcile,
//! execute) on a root and is SIGKILLed at a random moment, over and over.
//! After each kill the root is reopened (which finishes pending intents)
//! and checked: the chain verifies, every event the child acknowledged is
//! present with the hash it reported, and after reconcile no directory
//! exists for a pruned or deleted session and none is missing for a live
//! one, with no quarantine needed for any session the log knows.
//!
//! The base seed is printed; rerun one with `SANDLOG_CRASH_SEED=<seed>`.
//! `SANDLOG_CRASH_KILLS` sets the number of kills (default 200).

#![cfg(test)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandlog_core::{Hash, Position};
use sandlog_projections::SessionStatus;
use sandlog_runtime::{Engine, ReconcileOptions};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const KILLS_DEFAULT: u64 = 200;
/// Longest a child runs before it is killed. Long enough for several
/// operations (a fresh process opens the engine in milliseconds).
const LIFETIME_MAX_MS: u64 = 120;

/// C2: SIGKILL at random points loses nothing acknowledged, corrupts
/// nothing, and leaves nothing the applier cannot finish.
#[test]
fn sigkill_at_random_points_loses_nothing_acknowledged() -> TestResult {
    let base_seed: u64 = match std::env::var("SANDLOG_CRASH_SEED") {
        Ok(seed) => seed.parse()?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    let kills: u64 = std::env::var("SANDLOG_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(KILLS_DEFAULT);
    println!(
        "crash test: base seed {base_seed} (SANDLOG_CRASH_SEED={base_seed} replays it), {kills} kills"
    );
    // Make sure the module cache is warm before timing kills (the first
    // compile of python.wasm would otherwise eat every child's lifetime).
    sandlog_tests::engine::runtimes_dir();
    let warm = sandlog_tests::engine::TestRoot::new()?;
    let id = warm.engine.create_session(Default::default())?.session_id;
    warm.engine
        .execute(id, &sandlog_runtime::ExecRequest::python("pass"))?;

    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let mut acknowledged: Vec<(u64, String)> = Vec::new();
    let mut killed_with_work = 0u64;
    for round in 0..kills {
        let seed = base_seed.wrapping_add(round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash-child"))
            .arg(&root)
            .arg(seed.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        std::thread::sleep(Duration::from_millis(5 + seed % LIFETIME_MAX_MS));
        child.kill()?;
        child.wait()?;
        let mut stdout = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut stdout)?;
        }
        let acks: Vec<(u64, String)> = stdout
            .lines()
            .filter_map(|line| {
                let mut parts = line.strip_prefix("ack ")?.split(' ');
                Some((parts.next()?.parse().ok()?, parts.next()?.to_owned()))
            })
            .collect();
        if !acks.is_empty() {
            killed_with_work += 1;
        }
        acknowledged.extend(acks);
        if !root.join("sandlog.db").exists() {
            continue;
        }
        check_root(&root, &acknowledged, seed)?;
    }
    println!(
        "crash test: {kills} kills, {killed_with_work} after acknowledged work, {} acknowledgements checked",
        acknowledged.len()
    );
    assert!(
        killed_with_work > kills / 8,
        "too few children got work done before the kill ({killed_with_work}/{kills})"
    );
    Ok(())
}

fn check_root(root: &std::path::Path, acknowledged: &[(u64, String)], seed: u64) -> TestResult {
    let options = sandlog_runtime::EngineOptions {
        runtimes_dir: Some(sandlog_tests::engine::runtimes_dir()),
        cache_dir: Some(sandlog_tests::engine::cache_dir()),
        ..sandlog_runtime::EngineOptions::default()
    };
    // As the child does on start: a kill during `init` leaves no root yet
    // (open never creates one), and `init` finishes making it; on a made
    // root it changes nothing.
    Engine::init(root).map_err(|error| format!("seed {seed}: init failed: {error}"))?;
    let engine = Engine::open(root, options)
        .map_err(|error| format!("seed {seed}: reopen failed: {error}"))?;
    let report = engine
        .store()
        .verify()
        .map_err(|error| format!("seed {seed}: verify failed: {error}"))?;
    for (position, hash) in acknowledged {
        if *position == 0 {
            // An operation that appended nothing (a reconcile with nothing
            // to do on an empty root) acknowledges the empty head.
            assert_eq!(
                Hash::from_hex(hash)?,
                Hash::GENESIS,
                "seed {seed}: position 0 has a hash"
            );
            continue;
        }
        let envelope = engine.store().get(Position(*position))?.ok_or_else(|| {
            format!(
                "seed {seed}: acknowledged position {position} is missing (head {})",
                report.head
            )
        })?;
        assert_eq!(
            envelope.hash,
            Hash::from_hex(hash)?,
            "seed {seed}: position {position} changed"
        );
    }
    let reconcile = engine.reconcile(
        &ReconcileOptions {
            orphan_grace: Duration::ZERO,
            ..ReconcileOptions::default()
        },
        &|_, _| {},
    )?;
    assert!(
        reconcile.errors.is_empty(),
        "seed {seed}: {:?}",
        reconcile.errors
    );
    for orphan in &reconcile.orphans {
        let id = sandlog_core::SessionId::parse(orphan)?;
        let known = engine.store().stream_version(id.stream())?;
        assert!(
            known.is_none(),
            "seed {seed}: quarantine was needed for {orphan}, which the log knows"
        );
    }
    for session in engine.sessions(None)? {
        let exists = engine.layout().workspace(session.session_id).exists();
        match session.status {
            SessionStatus::Active => assert!(
                exists,
                "seed {seed}: live session {} has no directory",
                session.session_id
            ),
            SessionStatus::Pruned | SessionStatus::Deleted => {
                assert!(
                    !exists,
                    "seed {seed}: {} session {} still has a directory",
                    session.status.as_str(),
                    session.session_id
                )
            }
            status => panic!(
                "seed {seed}: session {} left {} after reopen",
                session.session_id,
                status.as_str()
            ),
        }
    }
    Ok(())
}
