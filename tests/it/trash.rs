//! Prune at the speed of a rename: workspaces moved into `trash/`, their
//! bytes freed by a background pass recorded as `workspace.reclaimed`, and
//! real processes SIGKILLed at each step (mid-moves, before any reclaim,
//! mid-reclaim), after which reopening and `reconcile` leave no trash, no
//! pending intent and a log that verifies.

#![cfg(test)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandlog_core::event::Event;
use sandlog_core::{PrunePolicy, SessionId, StreamId, WorkspacePath};
use sandlog_eventstore::LogFilter;
use sandlog_projections::SessionStatus;
use sandlog_runtime::trash::Reclaimed;
use sandlog_runtime::{Engine, EngineOptions, ReconcileOptions};
use sandlog_tests::engine::RawLog;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Sessions each test prunes, and the batch size of the child's prune
/// (so a run has several batches).
const SESSIONS: usize = 40;
const BATCH: usize = 8;
/// Bytes of the one file each session holds.
const FILE_BYTES: usize = 1000;

/// Makes a root with [`SESSIONS`] sessions of one file each.
fn root_with_sessions(
    root: &Path,
) -> Result<Vec<SessionId>, Box<dyn std::error::Error + Send + Sync>> {
    Engine::init(root)?;
    let engine = Engine::open(root, EngineOptions::default())?;
    let mut ids = Vec::new();
    for _ in 0..SESSIONS {
        let id = engine.create_session(Default::default())?.session_id;
        engine.write_file(
            id,
            &WorkspacePath::parse("data.bin")?,
            &[7u8; FILE_BYTES],
            false,
        )?;
        ids.push(id);
    }
    Ok(ids)
}

/// The `workspace.reclaimed` events of the log, in order.
fn reclaims(engine: &Engine) -> Result<Vec<Reclaimed>, Box<dyn std::error::Error + Send + Sync>> {
    let filter = LogFilter {
        stream: Some(StreamId::System),
        kinds: vec!["workspace.reclaimed".to_owned()],
        ..LogFilter::default()
    };
    let mut found = Vec::new();
    for envelope in engine.log(filter) {
        if let Some(Event::WorkspaceReclaimed(event)) = envelope?.event()? {
            found.push(Reclaimed {
                workspaces: event.workspaces,
                bytes: event.bytes,
                failed: event.failed,
            });
        }
    }
    Ok(found)
}

/// Names in a directory (none if it is missing).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// After recovery: every session pruned (its workspace gone) or, if the
/// kill came before its intent, active (its workspace where it was); no
/// trash left; the log verifies. Returns how many were pruned.
fn check_finished(
    root: &Path,
    ids: &[SessionId],
) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    let engine = Engine::open(root, EngineOptions::default())?;
    let report = engine.reconcile(&ReconcileOptions::default(), &|_, _| {})?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
    assert!(report.drift.is_empty(), "{:?}", report.drift);
    assert_eq!(entries(&root.join("trash")), Vec::<String>::new());
    let left: Vec<String> = entries(&root.join("workspaces"));
    let mut pruned = 0;
    for id in ids {
        let status = engine.session(*id)?.status;
        let present = left.contains(&id.to_string());
        match status {
            SessionStatus::Pruned => {
                assert!(!present, "{id} pruned but still in workspaces/");
                pruned += 1;
            }
            SessionStatus::Active => assert!(present, "{id} active without its workspace"),
            other => panic!("{id} left {other:?}"),
        }
    }
    engine.raw_log()?.verify()?;
    Ok(pruned)
}

/// Runs the child until its `crash-point`, then SIGKILLs it.
fn kill_at(root: &Path, step: &str, at: usize) -> TestResult {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trash-child"))
        .arg(root)
        .arg(step)
        .arg(at.to_string())
        .arg(BATCH.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            let status = child.wait()?;
            return Err(format!("the child ended ({status}) before its crash point").into());
        }
        if line.trim() == "crash-point" {
            break;
        }
    }
    child.kill()?;
    child.wait()?;
    Ok(())
}

/// A prune returns with its workspaces moved to `trash/`, `reclaimed_bytes`
/// the planned bytes; the background pass frees them and is recorded once
/// the engine is dropped, with the bytes measured.
#[test]
fn prune_moves_to_trash_and_reclaims_in_the_background() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let ids = root_with_sessions(&root)?;
    let engine = Engine::open(&root, EngineOptions::default())?;
    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, &|_, _| {})?;
    assert_eq!(
        report.deleted_sessions.len(),
        SESSIONS,
        "{:?}",
        report.errors
    );
    assert_eq!(report.reclaimed_bytes, (SESSIONS * FILE_BYTES) as u64);
    let left = entries(&root.join("workspaces"));
    for id in &ids {
        assert!(!left.contains(&id.to_string()), "{id} still in workspaces/");
    }
    drop(engine);
    assert_eq!(entries(&root.join("trash")), Vec::<String>::new());
    let engine = Engine::open(&root, EngineOptions::default())?;
    let recorded = reclaims(&engine)?;
    let total: u64 = recorded.iter().map(|pass| pass.workspaces).sum();
    let bytes: u64 = recorded.iter().map(|pass| pass.bytes).sum();
    assert_eq!(total, SESSIONS as u64, "{recorded:?}");
    assert_eq!(bytes, (SESSIONS * FILE_BYTES) as u64, "{recorded:?}");
    assert!(recorded.iter().all(|pass| pass.failed == 0), "{recorded:?}");
    engine.raw_log()?.verify()?;
    Ok(())
}

/// `reclaim_trash` frees what is in `trash/` now, and only directories
/// named by session ids.
#[test]
fn reclaim_leaves_foreign_names_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    Engine::init(&root)?;
    let engine = Engine::open(&root, EngineOptions::default())?;
    let trash = root.join("trash");
    std::fs::create_dir_all(trash.join(SessionId::new_v4().to_string()).join("deep"))?;
    std::fs::write(
        trash
            .join(SessionId::new_v4().to_string())
            .with_extension(""),
        b"x",
    )?;
    std::fs::create_dir(trash.join("not-a-session"))?;
    let reclaimed = engine.reclaim_trash()?;
    assert_eq!(reclaimed.workspaces, 2, "{reclaimed:?}");
    assert_eq!(reclaimed.bytes, 1, "{reclaimed:?}");
    assert_eq!(entries(&trash), vec!["not-a-session".to_owned()]);
    assert_eq!(reclaims(&engine)?, vec![reclaimed]);
    // Nothing left to do: nothing recorded.
    assert_eq!(engine.reclaim_trash()?, Reclaimed::default());
    assert_eq!(reclaims(&engine)?.len(), 1);
    Ok(())
}

/// SIGKILL between moves, at several points of a prune of several batches
/// (first move, inside the second batch, the last move): reopening and
/// `reconcile` finish every intent and free the trash.
#[test]
fn sigkill_among_the_moves_leaves_what_reconcile_finishes() -> TestResult {
    for at in [1, BATCH + 3, SESSIONS] {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        let ids = root_with_sessions(&root)?;
        kill_at(&root, "rename", at)?;
        let options = EngineOptions {
            finish_intents_on_open: false,
            ..EngineOptions::default()
        };
        let engine = Engine::open(&root, options)?;
        let pending = engine.sessions(Some(SessionStatus::Pruning))?.len();
        assert!(pending > 0, "killed at move {at}: no intent left pending");
        drop(engine);
        if at > 1 {
            assert!(
                !entries(&root.join("trash")).is_empty(),
                "killed at move {at}: nothing in trash/"
            );
        }
        let pruned = check_finished(&root, &ids)?;
        assert!(
            pruned >= at.min(SESSIONS - 1),
            "killed at move {at}: {pruned} pruned"
        );
        let engine = Engine::open(&root, EngineOptions::default())?;
        let recorded = reclaims(&engine)?;
        if at > 1 {
            assert!(
                !recorded.is_empty(),
                "killed at move {at}: no reclaim recorded"
            );
        }
        println!("killed at move {at}: {pending} pending, {pruned} pruned, reclaims {recorded:?}");
    }
    Ok(())
}

/// SIGKILL after the prune recorded everything, before the first reclaim
/// and in the middle of the reclaim pass: the sessions are pruned, the
/// rest of the trash is freed by the next process and recorded.
#[test]
fn sigkill_during_the_reclaim_leaves_trash_that_reconcile_frees() -> TestResult {
    for at in [1, SESSIONS / 2] {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        let ids = root_with_sessions(&root)?;
        kill_at(&root, "reclaim", at)?;
        let left = entries(&root.join("trash")).len();
        assert_eq!(left, SESSIONS - (at - 1), "killed at reclaim {at}");
        let options = EngineOptions {
            finish_intents_on_open: false,
            ..EngineOptions::default()
        };
        let engine = Engine::open(&root, options)?;
        assert_eq!(engine.sessions(Some(SessionStatus::Pruning))?.len(), 0);
        assert_eq!(
            engine.sessions(Some(SessionStatus::Pruned))?.len(),
            SESSIONS,
            "killed at reclaim {at}"
        );
        // The cut pass recorded nothing.
        assert_eq!(reclaims(&engine)?, Vec::new());
        drop(engine);
        assert_eq!(check_finished(&root, &ids)?, SESSIONS);
        let engine = Engine::open(&root, EngineOptions::default())?;
        let recorded = reclaims(&engine)?;
        let total: u64 = recorded.iter().map(|pass| pass.workspaces).sum();
        assert_eq!(total, left as u64, "{recorded:?}");
        let bytes: u64 = recorded.iter().map(|pass| pass.bytes).sum();
        assert_eq!(bytes, (left * FILE_BYTES) as u64, "{recorded:?}");
    }
    Ok(())
}
