//! Prune, delete, reconcile and adopt on real directories (S6, M4, P1–P7,
//! C1–C3). The seed documents' scenarios, each citing its requirement.

#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandlog_core::{PrunePolicy, SessionId, StreamId, WorkspacePath};
use sandlog_projections::SessionStatus;
use sandlog_runtime::{ExecRequest, FaultInjector, ReconcileOptions, RuntimeError};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const HOUR: Duration = Duration::from_secs(3600);
const NO_PROGRESS: &(dyn Fn(u64, u64) + Sync) = &|_, _| {};

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap()
}

fn session_with_file(root: &TestRoot, bytes: usize) -> Result<SessionId, RuntimeError> {
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    root.engine
        .write_file(id, &path("data.bin"), &vec![7u8; bytes], false)?;
    Ok(id)
}

fn reconcile_now() -> ReconcileOptions {
    ReconcileOptions {
        orphan_grace: Duration::ZERO,
        ..ReconcileOptions::default()
    }
}

/// P1, P3: at a 24 h threshold, old sessions are deleted (directory gone,
/// `session.pruned` recorded) and recent ones kept; reclaimed bytes equal
/// the deleted workspaces' sizes; the summary reads as the seeds print it.
#[test]
fn prune_deletes_old_sessions_and_keeps_recent_ones() -> TestResult {
    let root = TestRoot::new()?;
    let old_a = session_with_file(&root, 1000)?;
    let old_b = session_with_file(&root, 500)?;
    root.clock.advance(48 * HOUR);
    let recent = session_with_file(&root, 10)?;
    root.clock.advance(HOUR);
    let report = root
        .engine
        .prune(&PrunePolicy::older_than(24 * HOUR), false, NO_PROGRESS)?;
    let mut deleted = report.deleted_sessions.clone();
    deleted.sort();
    let mut expected = vec![old_a, old_b];
    expected.sort();
    assert_eq!(deleted, expected);
    assert_eq!(report.reclaimed_bytes, 1500);
    assert!(report.errors.is_empty());
    assert_eq!(
        report.summary(),
        "2 sessions deleted, 0 skipped, 1.5 KiB reclaimed"
    );
    for id in [old_a, old_b] {
        assert!(!root.engine.layout().workspace(id).exists());
        assert_eq!(root.engine.session(id)?.status, SessionStatus::Pruned);
        let kinds = root.stream_kinds(id)?;
        assert_eq!(
            &kinds[kinds.len() - 2..],
            ["session.prune.requested", "session.pruned"]
        );
    }
    assert!(root.engine.layout().workspace(recent).exists());
    assert_eq!(root.engine.session(recent)?.status, SessionStatus::Active);
    Ok(())
}

/// P2: a dry run lists exactly the sessions a real run then deletes, with
/// the same bytes, and changes nothing on disk or in the log.
#[test]
fn dry_run_lists_what_a_real_run_deletes_and_changes_nothing() -> TestResult {
    let root = TestRoot::new()?;
    let old = session_with_file(&root, 300)?;
    root.clock.advance(30 * HOUR);
    let _recent = session_with_file(&root, 300)?;
    let head_before = root.engine.head()?;
    let dry = root
        .engine
        .prune(&PrunePolicy::older_than(24 * HOUR), true, NO_PROGRESS)?;
    assert!(dry.dry_run);
    assert_eq!(dry.deleted_sessions, vec![old]);
    assert_eq!(root.engine.head()?, head_before);
    assert!(root.engine.layout().workspace(old).exists());
    assert_eq!(
        dry.summary(),
        "1 session would be deleted, 0 skipped, 300 B would be reclaimed (dry run)"
    );
    let real = root
        .engine
        .prune(&PrunePolicy::older_than(24 * HOUR), false, NO_PROGRESS)?;
    assert_eq!(real.deleted_sessions, dry.deleted_sessions);
    assert_eq!(real.reclaimed_bytes, dry.reclaimed_bytes);
    Ok(())
}

fn write_seed(dir: &Path, id: SessionId, metadata: Option<&str>) -> std::io::Result<()> {
    let workspace = dir.join(id.to_string());
    std::fs::create_dir_all(workspace.join("sub"))?;
    std::fs::write(workspace.join("sub/file.txt"), b"seed data")?;
    if let Some(metadata) = metadata {
        std::fs::write(workspace.join(".metadata.json"), metadata)?;
    }
    Ok(())
}

/// M4, P1: adopting seed workspaces keeps valid timestamps, records the
/// rest as legacy, keeps corrupted metadata as evidence outside the
/// workspace, and takes `.metadata.json` out of every workspace; with
/// `older_than = 0` the legacy sessions are skipped (listed, not deleted)
/// while the valid one is pruned. Metadata that parses but cannot be true
/// is corrupted too: `updated_at` before `created_at`, or later than the
/// engine's clock by more than `ADOPTED_CLOCK_SKEW_MAX` (one minute ahead
/// is taken as clock skew).
#[test]
fn adopted_legacy_sessions_are_skipped_even_at_zero_threshold() -> TestResult {
    let root = TestRoot::new()?; // clock: 2025-11-22T10:00:00Z
    let seeds = tempfile::tempdir()?;
    let valid = SessionId::new_v4();
    let skewed = SessionId::new_v4();
    let missing = SessionId::new_v4();
    let corrupted = SessionId::new_v4();
    let future = SessionId::new_v4();
    let reversed = SessionId::new_v4();
    let seed_metadata = |id: SessionId, created_at: &str, updated_at: &str| {
        format!(
            r#"{{"session_id":"{id}","created_at":"{created_at}","updated_at":"{updated_at}","version":1}}"#
        )
    };
    for (id, created_at, updated_at) in [
        (
            valid,
            "2025-11-01T10:00:00.000000Z",
            "2025-11-02T10:00:00.123456+00:00",
        ),
        (skewed, "2025-11-01T10:00:00Z", "2025-11-22T10:01:00Z"),
        (future, "2025-11-01T10:00:00Z", "2030-01-01T00:00:00Z"),
        (reversed, "2025-11-02T10:00:00Z", "2025-11-01T10:00:00Z"),
    ] {
        write_seed(
            seeds.path(),
            id,
            Some(&seed_metadata(id, created_at, updated_at)),
        )?;
    }
    write_seed(seeds.path(), missing, None)?;
    write_seed(seeds.path(), corrupted, Some("{ not json"))?;
    std::fs::create_dir(seeds.path().join("not-a-session"))?;
    let report = root.engine.adopt(seeds.path(), NO_PROGRESS)?;
    let sorted = |mut ids: Vec<SessionId>| {
        ids.sort();
        ids
    };
    assert_eq!(sorted(report.adopted.clone()), sorted(vec![valid, skewed]));
    assert_eq!(report.legacy, vec![missing]);
    assert_eq!(
        sorted(report.corrupted.clone()),
        sorted(vec![corrupted, future, reversed])
    );
    assert_eq!(report.skipped.len(), 1);
    assert!(seeds.path().join("not-a-session").exists());

    let adopted = root.engine.session(valid)?;
    assert_eq!(
        adopted.created_at.unwrap().to_string(),
        "2025-11-01T10:00:00.000000Z"
    );
    assert_eq!(
        adopted.updated_at.unwrap().to_string(),
        "2025-11-02T10:00:00.123456Z"
    );
    assert_eq!(adopted.file_count, 1);
    for id in [valid, skewed, missing, corrupted, future, reversed] {
        let workspace = root.engine.layout().workspace(id);
        assert!(workspace.join("sub/file.txt").exists());
        assert!(
            !workspace.join(".metadata.json").exists(),
            "metadata must leave the workspace (M3)"
        );
    }
    for id in [corrupted, future, reversed] {
        assert!(
            root.engine
                .layout()
                .evidence
                .join(format!("{id}.metadata.json"))
                .exists()
        );
    }
    for id in [missing, corrupted, future, reversed] {
        let session = root.engine.session(id)?;
        assert!(session.legacy);
        assert_eq!(session.created_at, None);
        assert_eq!(session.updated_at, None);
    }
    // Legacy sessions keep working.
    let run = root.engine.execute(
        missing,
        &ExecRequest::python("print(open('sub/file.txt').read())"),
    )?;
    assert_eq!(run.stdout, b"seed data\n");
    assert_eq!(root.engine.session(missing)?.updated_at, None);

    let report = root
        .engine
        .prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    // The skewed session's age counts as zero (its `updated_at` is still a
    // minute ahead): a zero threshold takes it.
    assert_eq!(
        sorted(report.deleted_sessions.clone()),
        sorted(vec![valid, skewed])
    );
    assert_eq!(
        sorted(report.skipped_sessions.clone()),
        sorted(vec![missing, corrupted, future, reversed])
    );
    for id in [missing, corrupted, future, reversed] {
        assert!(root.engine.layout().workspace(id).exists());
    }
    Ok(())
}

#[derive(Debug)]
struct FailRemovalOf(SessionId);

impl FaultInjector for FailRemovalOf {
    fn before_remove(&self, session_id: SessionId, _path: &Path) -> std::io::Result<()> {
        if session_id == self.0 {
            return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        }
        Ok(())
    }
}

/// P4: a permission-denied removal (injected: the suite runs as root,
/// where chmod cannot deny) is reported for that session in `errors`, the
/// session returns to active, and the others are pruned.
#[test]
fn permission_denied_on_one_session_does_not_stop_the_run() -> TestResult {
    let mut root = TestRoot::new()?;
    let blocked = session_with_file(&root, 10)?;
    let others = [session_with_file(&root, 10)?, session_with_file(&root, 10)?];
    root.clock.advance(48 * HOUR);
    let mut options = sandlog_tests::engine::options(&root.clock);
    options.fault = Some(Arc::new(FailRemovalOf(blocked)));
    root.engine = sandlog_runtime::Engine::open(root.path(), options)?;
    let report = root
        .engine
        .prune(&PrunePolicy::older_than(24 * HOUR), false, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions.len(), 2);
    for id in others {
        assert!(report.deleted_sessions.contains(&id));
    }
    assert!(
        report.errors.get(&blocked).is_some_and(
            |error| error.contains("permission denied") || error.contains("Permission denied")
        ),
        "{:?}",
        report.errors
    );
    assert_eq!(root.engine.session(blocked)?.status, SessionStatus::Active);
    assert!(root.engine.layout().workspace(blocked).exists());
    let kinds = root.stream_kinds(blocked)?;
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("session.prune.failed")
    );
    root.reopen()?;
    Ok(())
}

/// P7: a write that lands between candidate selection and the intent
/// keeps the session. The race is staged with the engine's own API: the
/// candidates are read, then the session is used, then the run proceeds.
#[test]
fn prune_skips_session_used_during_run() -> TestResult {
    let root = TestRoot::new()?;
    let id = session_with_file(&root, 10)?;
    root.clock.advance(48 * HOUR);
    // Pick candidates as the run will, then use the session in between by
    // going through a second engine on the same root (another process).
    let policy = PrunePolicy::older_than(24 * HOUR);
    let plan = sandlog_sqlite::query::prune_candidates(
        &root.engine.raw_log()?,
        &policy,
        sandlog_core::Clock::now(&root.clock),
    )?;
    assert_eq!(plan.candidates.len(), 1);
    let other =
        sandlog_runtime::Engine::open(root.path(), sandlog_tests::engine::options(&root.clock))?;
    other.write_file(id, &path("late.txt"), b"used just now", false)?;
    // The intent expects the version the candidate was read at: it fails.
    let stale = plan.candidates[0].version;
    let intent = sandlog_core::NewEvent::from_event(
        &sandlog_core::Event::SessionPruneRequested(sandlog_core::event::SessionPruneRequested {
            run_id: uuid::Uuid::new_v4(),
            age_us: 0,
            threshold_us: 0,
            size_bytes: 0,
        }),
        "api:test",
    );
    let error = root
        .engine
        .raw_log()?
        .append(
            StreamId::Session(id),
            sandlog_eventstore::ExpectedVersion::Exact(stale),
            &[intent],
        )
        .unwrap_err();
    assert!(matches!(
        error,
        sandlog_eventstore::EventStoreError::VersionConflict { .. }
    ));
    // And a whole prune run now keeps it: it is no longer old.
    let report = root.engine.prune(&policy, false, NO_PROGRESS)?;
    assert!(report.deleted_sessions.is_empty());
    assert!(root.engine.layout().workspace(id).join("late.txt").exists());
    Ok(())
}

/// The prune batch of the tests of batching: small, so that several
/// batches take few sessions.
const TEST_PRUNE_BATCH: usize = 32;

/// An engine on `root` whose prune runs in batches of `batch` sessions.
fn batched_engine(root: &TestRoot, batch: usize) -> Result<sandlog_runtime::Engine, RuntimeError> {
    let mut options = sandlog_tests::engine::options(&root.clock);
    options.prune_batch_sessions = Some(batch);
    sandlog_runtime::Engine::open(root.path(), options)
}

/// Goal: a prune's batch is sized by the process's descriptor limit, so
/// the lease files of the batches a run holds at once (one open file per
/// session) take at most half of it, and the batch stays within its
/// bounds whatever the limit. Method: the size for the usual soft limit
/// (1,024: 128 sessions, four batches holding 512 descriptors), for a
/// small and a tiny limit, a large one and none.
#[test]
fn a_prune_batch_is_sized_by_the_descriptor_limit() {
    use sandlog_runtime::lifecycle::{
        PRUNE_BATCH_SESSIONS_MAX, PRUNE_BATCH_SESSIONS_MIN, PRUNE_BATCHES_HELD,
        prune_batch_sessions_for,
    };
    assert_eq!(prune_batch_sessions_for(Some(1024)), 128);
    assert_eq!(
        PRUNE_BATCHES_HELD * prune_batch_sessions_for(Some(1024)),
        512
    );
    assert_eq!(prune_batch_sessions_for(Some(256)), 32);
    assert_eq!(prune_batch_sessions_for(Some(20)), PRUNE_BATCH_SESSIONS_MIN);
    assert_eq!(prune_batch_sessions_for(Some(0)), PRUNE_BATCH_SESSIONS_MIN);
    assert_eq!(
        prune_batch_sessions_for(Some(1 << 20)),
        PRUNE_BATCH_SESSIONS_MAX
    );
    assert_eq!(prune_batch_sessions_for(None), PRUNE_BATCH_SESSIONS_MAX);
}

/// An engine on `root` that commits with `Durability::Normal`: setting up
/// hundreds of sessions then takes no fsync each (the tests never cut the
/// power).
fn quick_engine(root: &TestRoot) -> Result<sandlog_runtime::Engine, RuntimeError> {
    let mut options = sandlog_tests::engine::options(&root.clock);
    options.durability = sandlog_runtime::sqlite::Durability::Normal;
    sandlog_runtime::Engine::open(root.path(), options)
}

/// Positions of the events of `kind`, in log order.
fn positions_of(root: &TestRoot, kind: &str) -> Result<Vec<u64>, RuntimeError> {
    let filter = sandlog_runtime::eventstore::LogFilter {
        kinds: vec![kind.to_owned()],
        ..Default::default()
    };
    root.engine
        .raw_log()?
        .query(filter)
        .map(|envelope| envelope.map(|envelope| envelope.position.0))
        .collect::<Result<_, _>>()
        .map_err(RuntimeError::from)
}

/// Runs of consecutive numbers, by length.
fn run_lengths(positions: &[u64]) -> Vec<usize> {
    let mut runs: Vec<usize> = Vec::new();
    for (index, position) in positions.iter().enumerate() {
        match index.checked_sub(1).and_then(|i| positions.get(i)) {
            Some(previous) if previous + 1 == *position => {
                if let Some(last) = runs.last_mut() {
                    *last += 1;
                }
            }
            _ => runs.push(1),
        }
    }
    runs
}

/// Goal: a prune of more sessions than one batch records intents and
/// completions batch-wise (never one session's pair at a time), each
/// batch's completions in one transaction with the intents of the batch
/// two after it, deletes every directory (removed on several threads while
/// those are appended), removes the lease files, and leaves a log and
/// read models that verify. Method: two batches and 20 more sessions, old;
/// prune; the log holds the first two batches' intents, then the first
/// batch's completions directly followed by the third batch's intents,
/// then the other completions, each run at consecutive positions and the
/// completions in the intents' session order; every session is `pruned`
/// without a directory or lease file; the reclaimed bytes are the files
/// written; `verify` is clean and a reopen finds nothing pending.
#[test]
fn a_prune_of_several_batches_records_intents_and_completions_batch_wise() -> TestResult {
    let mut root = TestRoot::new()?;
    let batch = TEST_PRUNE_BATCH;
    let count = 2 * batch + 20;
    let engine = quick_engine(&root)?;
    let mut ids = Vec::new();
    for index in 0..count {
        let id = engine.create_session(BTreeMap::new())?.session_id;
        engine.write_file(id, &path("data.bin"), &vec![1u8; index % 7 + 1], false)?;
        ids.push(id);
    }
    drop(engine);
    root.clock.advance(48 * HOUR);
    root.engine = batched_engine(&root, batch)?;
    let report = root
        .engine
        .prune(&PrunePolicy::older_than(24 * HOUR), false, NO_PROGRESS)?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.skipped_sessions.is_empty());
    assert_eq!(report.deleted_sessions.len(), count);
    let written: u64 = (0..count).map(|index| (index % 7 + 1) as u64).sum();
    assert_eq!(report.reclaimed_bytes, written);
    let requested = positions_of(&root, "session.prune.requested")?;
    let pruned = positions_of(&root, "session.pruned")?;
    assert_eq!(run_lengths(&requested), vec![2 * batch, 20]);
    assert_eq!(run_lengths(&pruned), vec![batch, batch + 20]);
    assert_eq!(requested[2 * batch - 1] + 1, pruned[0]);
    assert_eq!(pruned[batch - 1] + 1, requested[2 * batch]);
    assert_eq!(requested[count - 1] + 1, pruned[batch]);
    let log = root.engine.raw_log()?;
    let stream_at = |position: u64| -> Result<_, RuntimeError> {
        Ok(log
            .get(sandlog_core::Position(position))?
            .map(|envelope| envelope.stream))
    };
    for (intent, completion) in requested.iter().zip(&pruned) {
        assert_eq!(stream_at(*intent)?, stream_at(*completion)?);
    }
    for id in &ids {
        assert_eq!(root.engine.session(*id)?.status, SessionStatus::Pruned);
        assert!(!root.engine.layout().workspace(*id).exists());
        assert!(!sandlog_runtime::lease::lease_path(root.path(), *id).exists());
    }
    let outcome = root.engine.verify(None, &|_| {})?;
    assert!(outcome.ok, "{outcome:?}");
    root.reopen()?;
    assert!(root.engine.failed_intents()?.is_empty());
    assert!(
        root.engine
            .sessions(Some(SessionStatus::Pruning))?
            .is_empty()
    );
    Ok(())
}

/// Prunes by `policy` while another process uses `used`: the run's first
/// progress call with at least `done` sessions done writes a file to it
/// through a second engine on the same root.
fn prune_using(
    root: &TestRoot,
    policy: &PrunePolicy,
    used: SessionId,
    done: u64,
) -> Result<sandlog_runtime::lifecycle::PruneReport, Box<dyn std::error::Error + Send + Sync>> {
    let other =
        sandlog_runtime::Engine::open(root.path(), sandlog_tests::engine::options(&root.clock))?;
    let wrote = std::sync::Mutex::new(None);
    let progress = |now: u64, _: u64| {
        let mut wrote = wrote.lock().unwrap();
        if now >= done && wrote.is_none() {
            *wrote = Some(
                other
                    .write_file(used, &path("late.txt"), b"used just now", false)
                    .map(|_| ()),
            );
        }
    };
    let report = root.engine.prune(policy, false, &progress)?;
    wrote
        .into_inner()
        .unwrap()
        .ok_or(format!("progress never reached {done} sessions done"))??;
    Ok(report)
}

/// Goal (P7): a session written after the candidates were read is kept
/// with the reason given today, and the rest of its batch is still pruned
/// (the batch's append fails on the stale session and is made again
/// without it). Method: twenty old sessions; the run's first progress call
/// (made before any session is taken) writes to one of them through a
/// second engine, as another process would. That session is skipped with
/// the "used during the prune run" reason, is active with its new file and
/// no intent; the nineteen others are pruned; `verify` is clean.
#[test]
fn a_session_used_after_selection_is_kept_and_its_batch_pruned() -> TestResult {
    let root = TestRoot::new()?;
    let ids: Vec<SessionId> = (0..20)
        .map(|_| session_with_file(&root, 10))
        .collect::<Result<_, _>>()?;
    let used = ids[7];
    root.clock.advance(48 * HOUR);
    let report = prune_using(&root, &PrunePolicy::older_than(24 * HOUR), used, 0)?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.skipped_sessions, vec![used]);
    assert_eq!(
        report.skipped_reasons.get(&used).map(String::as_str),
        Some("used during the prune run (its log moved past the candidate's version): kept")
    );
    assert_eq!(report.deleted_sessions.len(), 19);
    assert!(!report.deleted_sessions.contains(&used));
    assert_eq!(root.engine.session(used)?.status, SessionStatus::Active);
    assert!(
        root.engine
            .layout()
            .workspace(used)
            .join("late.txt")
            .exists()
    );
    assert!(
        !root
            .stream_kinds(used)?
            .iter()
            .any(|kind| kind == "session.prune.requested")
    );
    for id in ids.iter().filter(|id| **id != used) {
        assert_eq!(root.engine.session(*id)?.status, SessionStatus::Pruned);
        assert!(!root.engine.layout().workspace(*id).exists());
    }
    let outcome = root.engine.verify(None, &|_| {})?;
    assert!(outcome.ok, "{outcome:?}");
    Ok(())
}

/// Goal (P7): when a session of a later batch is used during the run, the
/// transaction that records an earlier batch's completions together with
/// that batch's intents fails on the stale intent alone: it is made again
/// without it, so the completions are recorded and the used session is
/// kept. Method: two batches and 20 more old sessions; the run's first
/// progress call made after a removal (batch 1's directories are being
/// removed, batch 3 not yet taken) writes to a session of batch 3 through a
/// second engine. That session is kept with the "used during the prune
/// run" reason and no intent; every other session is pruned; batch 1's
/// completions are directly followed by batch 3's 19 intents; `verify` is
/// clean and nothing is pending.
#[test]
fn a_session_used_in_a_later_batch_is_kept_and_earlier_completions_recorded() -> TestResult {
    let mut root = TestRoot::new()?;
    let batch = TEST_PRUNE_BATCH;
    let count = 2 * batch + 20;
    let engine = quick_engine(&root)?;
    for _ in 0..count {
        engine.create_session(BTreeMap::new())?;
    }
    drop(engine);
    root.clock.advance(48 * HOUR);
    root.engine = batched_engine(&root, batch)?;
    let policy = PrunePolicy::older_than(24 * HOUR);
    let plan = sandlog_sqlite::query::prune_candidates(
        &root.engine.raw_log()?,
        &policy,
        sandlog_core::Clock::now(&root.clock),
    )?;
    assert_eq!(plan.candidates.len(), count);
    let used = plan.candidates[2 * batch + 10].session_id;
    let report = prune_using(&root, &policy, used, 1)?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.skipped_sessions, vec![used]);
    assert_eq!(
        report.skipped_reasons.get(&used).map(String::as_str),
        Some("used during the prune run (its log moved past the candidate's version): kept")
    );
    assert_eq!(report.deleted_sessions.len(), count - 1);
    assert_eq!(root.engine.session(used)?.status, SessionStatus::Active);
    assert!(
        !root
            .stream_kinds(used)?
            .iter()
            .any(|kind| kind == "session.prune.requested")
    );
    let requested = positions_of(&root, "session.prune.requested")?;
    let pruned = positions_of(&root, "session.pruned")?;
    // The second engine's write may land between two batches' intents.
    assert_eq!(requested.len(), 2 * batch + 19);
    assert_eq!(run_lengths(&requested[2 * batch..]), vec![19]);
    assert_eq!(run_lengths(&pruned), vec![batch, batch + 19]);
    assert_eq!(pruned[batch - 1] + 1, requested[2 * batch]);
    for candidate in plan.candidates.iter().filter(|c| c.session_id != used) {
        let id = candidate.session_id;
        assert_eq!(root.engine.session(id)?.status, SessionStatus::Pruned);
        assert!(!root.engine.layout().workspace(id).exists());
    }
    let outcome = root.engine.verify(None, &|_| {})?;
    assert!(outcome.ok, "{outcome:?}");
    assert!(
        root.engine
            .sessions(Some(SessionStatus::Pruning))?
            .is_empty()
    );
    Ok(())
}

/// Goal (P4): in a batch removed on several threads, a removal that fails
/// returns only its own session to active (`session.prune.failed` in the
/// same completion append as the others' `session.pruned`). Method: forty
/// old sessions, the removal of one denied by the fault injector; prune.
#[test]
fn a_failed_removal_in_a_parallel_batch_keeps_only_that_session() -> TestResult {
    let mut root = TestRoot::new()?;
    let engine = quick_engine(&root)?;
    let ids: Vec<SessionId> = (0..40)
        .map(|_| engine.create_session(BTreeMap::new()).map(|s| s.session_id))
        .collect::<Result<_, _>>()?;
    drop(engine);
    let blocked = ids[23];
    root.clock.advance(48 * HOUR);
    let mut options = sandlog_tests::engine::options(&root.clock);
    options.fault = Some(Arc::new(FailRemovalOf(blocked)));
    root.engine = sandlog_runtime::Engine::open(root.path(), options)?;
    let report = root
        .engine
        .prune(&PrunePolicy::older_than(24 * HOUR), false, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions.len(), 39);
    assert_eq!(report.errors.keys().collect::<Vec<_>>(), vec![&blocked]);
    assert_eq!(root.engine.session(blocked)?.status, SessionStatus::Active);
    assert!(root.engine.layout().workspace(blocked).exists());
    assert_eq!(
        root.stream_kinds(blocked)?.last().map(String::as_str),
        Some("session.prune.failed")
    );
    let completions = positions_of(&root, "session.pruned")?;
    let failed = positions_of(&root, "session.prune.failed")?;
    let mut all = [completions, failed].concat();
    all.sort_unstable();
    assert_eq!(run_lengths(&all), vec![40]);
    root.reopen()?;
    assert!(root.engine.layout().workspace(blocked).exists());
    Ok(())
}

/// P6: `max_deletions` stops at the N oldest; retention by count keeps the
/// newest N.
#[test]
fn max_deletions_and_max_sessions_take_the_oldest_first() -> TestResult {
    let root = TestRoot::new()?;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(session_with_file(&root, 10)?);
        root.clock.advance(HOUR);
    }
    root.clock.advance(100 * HOUR);
    let policy = PrunePolicy {
        max_deletions: Some(2),
        ..PrunePolicy::older_than(24 * HOUR)
    };
    let report = root.engine.prune(&policy, true, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions, ids[..2].to_vec());
    let policy = PrunePolicy {
        max_sessions: Some(3),
        ..PrunePolicy::older_than(1000 * HOUR)
    };
    let report = root.engine.prune(&policy, false, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions, ids[..2].to_vec());
    Ok(())
}

/// S6: deleting a session records intent and completion and removes the
/// directory completely; the session can no longer be used.
#[test]
fn delete_session_is_two_phase_and_complete() -> TestResult {
    let root = TestRoot::new()?;
    let id = session_with_file(&root, 2048)?;
    let report = root.engine.delete_session(id, "user asked")?;
    assert_eq!(report.reclaimed_bytes, 2048);
    assert!(!root.engine.layout().workspace(id).exists());
    let kinds = root.stream_kinds(id)?;
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["session.delete.requested", "session.deleted"]
    );
    assert!(matches!(
        root.engine.execute(id, &ExecRequest::python("pass")),
        Err(RuntimeError::SessionNotActive { .. })
    ));
    Ok(())
}

/// C1, C2: a crash between intent and completion is finished on the next
/// open; orphan UUID directories are quarantined (and recorded), non-UUID
/// entries left alone, a live session's missing directory recorded as
/// drift, and a second reconcile plans nothing.
#[test]
fn reconcile_finishes_intents_quarantines_orphans_and_is_idempotent() -> TestResult {
    let mut root = TestRoot::new()?;
    let pending = session_with_file(&root, 10)?;
    let vanished = session_with_file(&root, 10)?;
    // A crashed prune: the intent without the completion.
    let intent = sandlog_core::NewEvent::from_event(
        &sandlog_core::Event::SessionPruneRequested(sandlog_core::event::SessionPruneRequested {
            run_id: uuid::Uuid::new_v4(),
            age_us: 1,
            threshold_us: 1,
            size_bytes: 10,
        }),
        "api:test",
    );
    let version = root.engine.session(pending)?.version;
    root.engine.raw_log()?.append(
        StreamId::Session(pending),
        sandlog_eventstore::ExpectedVersion::Exact(version),
        &[intent],
    )?;
    std::fs::remove_dir_all(root.engine.layout().workspace(vanished))?;
    let orphan = SessionId::new_v4();
    std::fs::create_dir_all(root.engine.layout().workspace(orphan).join("x"))?;
    std::fs::write(
        root.engine
            .layout()
            .workspace(orphan)
            .join("x/evidence.txt"),
        b"unknown data",
    )?;
    std::fs::create_dir(root.engine.layout().workspaces.join("README-not-a-session"))?;

    root.reopen()?; // Engine::open finishes the pending intent.
    assert_eq!(root.engine.session(pending)?.status, SessionStatus::Pruned);
    assert!(!root.engine.layout().workspace(pending).exists());

    let report = root.engine.reconcile(&reconcile_now(), NO_PROGRESS)?;
    assert_eq!(report.orphans, vec![orphan.to_string()]);
    assert_eq!(report.drift.len(), 1);
    assert!(report.errors.is_empty());
    assert!(!root.engine.layout().workspace(orphan).exists());
    let quarantined: Vec<_> =
        std::fs::read_dir(&root.engine.layout().quarantine)?.collect::<Result<_, _>>()?;
    assert_eq!(quarantined.len(), 1);
    assert!(quarantined[0].path().join("x/evidence.txt").exists());
    assert!(
        root.engine
            .layout()
            .workspaces
            .join("README-not-a-session")
            .exists()
    );

    let again = root.engine.reconcile(&reconcile_now(), NO_PROGRESS)?;
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    let stats = sandlog_sqlite::query::stats(&root.engine.raw_log()?)?;
    assert_eq!(stats.cleanup.orphans_quarantined, 1);
    assert_eq!(stats.cleanup.reconcile_runs, 1);
    assert_eq!(
        stats.cleanup.intents_finished, 0,
        "the intent was finished on open, not by the run"
    );
    Ok(())
}

/// C1: `--deep` finds files changed behind sandlog's back and reports the
/// drift once.
#[test]
fn deep_reconcile_reports_changed_files_once() -> TestResult {
    let root = TestRoot::new()?;
    let id = session_with_file(&root, 10)?;
    std::fs::write(
        root.engine.layout().workspace(id).join("data.bin"),
        b"tampered",
    )?;
    let options = ReconcileOptions {
        deep: true,
        ..reconcile_now()
    };
    let report = root.engine.reconcile(&options, NO_PROGRESS)?;
    assert_eq!(report.drift.len(), 1);
    assert!(
        root.engine
            .reconcile(&options, NO_PROGRESS)?
            .actions
            .is_empty()
    );
    Ok(())
}

/// P5: a missing root is a clear error.
#[test]
fn missing_root_is_a_clear_error() {
    let error = sandlog_runtime::Engine::open(
        Path::new("/nonexistent/sandlog-root"),
        sandlog_runtime::EngineOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(error, RuntimeError::RootMissing(_)));
    assert!(error.to_string().contains("/nonexistent/sandlog-root"));
}
