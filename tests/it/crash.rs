//! Crash tests with real processes (C2, S6, P-intents): a child runs
//! random engine operations (create, write, delete, prune, reconcile,
//! execute) on a root and is SIGKILLed at a random moment, over and over.
//! After each kill the root is reopened (which finishes pending intents)
//! and checked: the chain verifies, every event the child acknowledged is
//! present with the hash it reported, and after reconcile no directory
//! exists for a pruned or deleted session and none is missing for a live
//! one, with no quarantine needed for any session the log knows.
//!
//! A second test kills a prune of several batches at moments spread over
//! its run, and checks every session is kept or finished.
//!
//! The base seed is printed; rerun one with `SANDLOG_CRASH_SEED=<seed>`.
//! `SANDLOG_CRASH_KILLS` sets the number of kills (default 200),
//! `SANDLOG_CRASH_PRUNE_KILLS` those of the batched prune (default 12).

#![cfg(test)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandlog_core::{Hash, Position};
use sandlog_projections::SessionStatus;
use sandlog_runtime::{Engine, ReconcileOptions};
use sandlog_tests::engine::RawLog;

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

/// Kills of the batched-prune crash test, by default.
const PRUNE_KILLS_DEFAULT: u64 = 12;

/// Sessions per batch of the killed prune: small, so that three batches
/// take few sessions.
const CRASH_PRUNE_BATCH: usize = 64;

/// Goal: a SIGKILL anywhere in a prune of several batches (taking leases,
/// the intents' append, the parallel removals, the completions' append)
/// leaves every session either kept (active, its directory whole) or
/// finished by the next open (pruned, no directory), and nothing pending.
/// Method: a root of two batches and fifty sessions; a child prunes them
/// all. A first, uncut run times the prune; then each round rebuilds the
/// root, kills the child at a seeded moment within that time, counts the
/// sessions left `pruning` (opening without finishing intents), then
/// reopens and checks the root as the random crash test does, and that
/// every session is accounted for. At least one round must have cut a
/// batch between its intents and its completions.
#[test]
fn sigkill_during_a_batched_prune_leaves_each_session_kept_or_finished() -> TestResult {
    let base_seed: u64 = match std::env::var("SANDLOG_CRASH_SEED") {
        Ok(seed) => seed.parse()?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    let kills: u64 = std::env::var("SANDLOG_CRASH_PRUNE_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(PRUNE_KILLS_DEFAULT);
    println!(
        "batched prune crash test: base seed {base_seed} (SANDLOG_CRASH_SEED={base_seed} replays it), {kills} kills"
    );
    let sessions = 2 * CRASH_PRUNE_BATCH + 50;
    let mut prune_time = None;
    let mut cut_mid_batch = 0u64;
    for round in 0..=kills {
        let seed = base_seed.wrapping_add(round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        Engine::init(&root)?;
        let setup = Engine::open(
            &root,
            sandlog_runtime::EngineOptions {
                durability: sandlog_sqlite::Durability::Normal,
                ..sandlog_runtime::EngineOptions::default()
            },
        )?;
        for index in 0..sessions {
            let id = setup.create_session(Default::default())?.session_id;
            if index % 5 == 0 {
                setup.write_file(
                    id,
                    &sandlog_core::WorkspacePath::parse("data.txt")?,
                    b"contents",
                    false,
                )?;
            }
        }
        drop(setup);
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash-child"))
            .arg(&root)
            .arg(seed.to_string())
            .arg("prune")
            .arg(CRASH_PRUNE_BATCH.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line)?;
        assert_eq!(
            line.trim(),
            "pruning",
            "seed {seed}: the child did not start"
        );
        let started = std::time::Instant::now();
        match prune_time {
            None => {
                // The calibration round runs to the end.
                line.clear();
                std::io::BufRead::read_line(&mut stdout, &mut line)?;
                assert_eq!(line.trim(), format!("pruned {sessions}"), "seed {seed}");
                prune_time = Some(started.elapsed());
                child.wait()?;
            }
            Some(time) => {
                let micros = u64::try_from(time.as_micros()).unwrap_or(u64::MAX).max(1);
                std::thread::sleep(Duration::from_micros(seed % micros));
                child.kill()?;
                child.wait()?;
            }
        }
        let options = sandlog_runtime::EngineOptions {
            finish_intents_on_open: false,
            ..sandlog_runtime::EngineOptions::default()
        };
        let pending = Engine::open(&root, options)?
            .sessions(Some(SessionStatus::Pruning))?
            .len();
        if pending > 0 {
            cut_mid_batch += 1;
        }
        check_root(&root, &[], seed)?;
        let engine = Engine::open(&root, sandlog_runtime::EngineOptions::default())?;
        let all = engine.sessions(None)?;
        assert_eq!(all.len(), sessions, "seed {seed}");
        let pruned = all
            .iter()
            .filter(|session| session.status == SessionStatus::Pruned)
            .count();
        println!("round {round}: seed {seed}, {pending} left pending, {pruned} pruned");
    }
    println!(
        "batched prune crash test: prune of {sessions} took {prune_time:?} uncut; {cut_mid_batch} of {kills} kills cut a batch"
    );
    assert!(
        kills == 0 || cut_mid_batch > 0,
        "no kill landed between a batch's intents and its completions"
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
    let log = engine.raw_log()?;
    let report = log
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
        let envelope = log.get(Position(*position))?.ok_or_else(|| {
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
        let known = log.stream_version(id.stream())?;
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
