//! Session leases against real processes: prune and delete beside an
//! execution running in another process (or engine), a SIGKILLed holder,
//! and a pending intent that keeps failing.

#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlog_core::{PrunePolicy, SessionId, SystemClock};
use sandlog_projections::SessionStatus;
use sandlog_runtime::lease::lease_path;
use sandlog_runtime::lifecycle::BUSY_SKIP_REASON;
use sandlog_runtime::{
    Engine, EngineOptions, ExecRequest, FaultInjector, ReconcileOptions, RuntimeError,
};
use sandlog_tests::engine::{TestRoot, cache_dir, options, runtimes_dir};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const NO_PROGRESS: &(dyn Fn(u64, u64) + Sync) = &|_, _| {};

/// How long a test waits for a child's guest to start (the first run may
/// compile python.wasm into the shared cache).
const START_WAIT: Duration = Duration::from_secs(120);

/// A root whose engine uses the system clock, as the child's does (the
/// child and the test append to one log).
fn system_root() -> Result<(tempfile::TempDir, Engine), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let root = Engine::init(dir.path())?;
    let engine = Engine::open(&root, system_options())?;
    Ok((dir, engine))
}

fn system_options() -> EngineOptions {
    EngineOptions {
        clock: Arc::new(SystemClock),
        actor: "api:test".to_owned(),
        runtimes_dir: Some(runtimes_dir()),
        cache_dir: Some(cache_dir()),
        ..EngineOptions::default()
    }
}

/// Starts `lease-child` running a guest that sleeps `seconds` in `session`.
fn spawn_child(root: &Path, session: SessionId, seconds: u64) -> std::io::Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_lease-child"))
        .arg(root)
        .arg(session.to_string())
        .arg(seconds.to_string())
        .env("SANDLOG_RUNTIMES_DIR", runtimes_dir())
        .env("SANDLOG_TEST_CACHE_DIR", cache_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits until the guest wrote `marker` (so the lease is held), failing if
/// the child exits first or it takes longer than [`START_WAIT`].
fn wait_started(child: &mut Child, marker: &Path) -> TestResult {
    let started = Instant::now();
    while !marker.exists() {
        if let Some(status) = child.try_wait()? {
            return Err(format!("the child exited ({status}) before its guest started").into());
        }
        if started.elapsed() > START_WAIT {
            return Err(format!("{} did not appear", marker.display()).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The root stays usable: a new session runs `print(1)` and `verify` is ok.
fn assert_root_usable(engine: &Engine) -> TestResult {
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let execution = engine.execute(id, &ExecRequest::python("print(1)"))?;
    assert_eq!(execution.outcome, sandlog_core::Outcome::Ok);
    assert_eq!(execution.stdout, b"1\n");
    let verified = engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{verified:?}");
    Ok(())
}

fn intent_failures(engine: &Engine, session: SessionId) -> Result<usize, RuntimeError> {
    Ok(engine
        .session_events(session)?
        .iter()
        .filter(|envelope| envelope.kind == "session.intent.failed")
        .count())
}

/// Goal: a workspace is never removed under a guest running in another
/// process. Method: a child process runs a 4 s Python execution in one
/// session; while it runs, this process prunes everything (the session is
/// kept with reason `busy`, an idle one is pruned) and deletes it with a
/// 300 ms wait (fails `Busy` after waiting, nothing changed). The child's
/// execution is then recorded with both files, and the delete succeeds
/// and removes the lease file.
#[test]
fn prune_and_delete_leave_a_running_execution_in_another_process_alone() -> TestResult {
    let (dir, engine) = system_root()?;
    let busy = engine.create_session(BTreeMap::new())?.session_id;
    let idle = engine.create_session(BTreeMap::new())?.session_id;
    let workspace = engine.layout().workspace(busy);
    let mut child = spawn_child(dir.path(), busy, 4)?;
    wait_started(&mut child, &workspace.join("started.txt"))?;

    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    assert_eq!(
        report.skipped_reasons.get(&busy).map(String::as_str),
        Some(BUSY_SKIP_REASON)
    );
    assert_eq!(report.deleted_sessions, vec![idle]);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(workspace.join("started.txt").is_file());
    assert_eq!(engine.session(busy)?.status, SessionStatus::Active);
    assert!(!lease_path(dir.path(), idle).exists());

    let asked = Instant::now();
    let wait = Duration::from_millis(300);
    let error = engine
        .delete_session_waiting(busy, "test", wait)
        .unwrap_err();
    assert!(
        matches!(error, RuntimeError::Busy { session_id, wait: waited } if session_id == busy && waited == wait),
        "{error:?}"
    );
    assert_eq!(error.kind(), "busy");
    assert!(asked.elapsed() >= wait);
    assert_eq!(engine.session(busy)?.status, SessionStatus::Active);

    let output = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("executed ok "), "{stdout}");
    let session = engine.session(busy)?;
    assert_eq!(session.exec_count, 1);
    let files: Vec<String> = engine
        .list_files(busy, None)?
        .into_iter()
        .map(|file| file.path.to_string())
        .collect();
    assert_eq!(files, vec!["done.txt", "started.txt"]);

    assert!(lease_path(dir.path(), busy).exists());
    engine.delete_session_waiting(busy, "test", Duration::ZERO)?;
    assert!(!workspace.exists());
    assert!(!lease_path(dir.path(), busy).exists());
    assert_eq!(engine.session(busy)?.status, SessionStatus::Deleted);
    assert_root_usable(&engine)
}

/// Goal: a holder that dies never leaves its session busy. Method: a child
/// runs a 60 s execution and is SIGKILLed while its guest sleeps; a delete
/// then gets the lease at once (well inside its 5 s wait) and succeeds; the
/// killed run was never recorded.
#[test]
fn a_killed_execution_releases_its_lease() -> TestResult {
    let (dir, engine) = system_root()?;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let mut child = spawn_child(dir.path(), id, 60)?;
    wait_started(
        &mut child,
        &engine.layout().workspace(id).join("started.txt"),
    )?;
    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    assert_eq!(
        report.skipped_reasons.get(&id).map(String::as_str),
        Some(BUSY_SKIP_REASON)
    );
    child.kill()?;
    child.wait()?;
    let asked = Instant::now();
    engine.delete_session_waiting(id, "holder died", Duration::from_secs(5))?;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(engine.session(id)?.status, SessionStatus::Deleted);
    assert_eq!(engine.session(id)?.exec_count, 0);
    assert!(!engine.layout().workspace(id).exists());
    assert_root_usable(&engine)
}

/// Goal: two engines in one process exclude each other too (the lock
/// belongs to each engine's own open file). Method: engine A runs a 2 s
/// execution on a thread; engine B prunes (kept, `busy`) and deletes with
/// no wait (`Busy`); once A's run is recorded, B's prune removes it.
#[test]
fn two_engines_in_one_process_exclude_each_other() -> TestResult {
    let (dir, first) = system_root()?;
    let second = Engine::open(dir.path(), system_options())?;
    let id = first.create_session(BTreeMap::new())?.session_id;
    let marker = first.layout().workspace(id).join("started.txt");
    let runner = std::thread::spawn(move || {
        let mut request =
            ExecRequest::python("import time\nopen('started.txt', 'w').write('x')\ntime.sleep(2)");
        request.limits.timeout = Some(Duration::from_secs(60));
        first.execute(id, &request)
    });
    let started = Instant::now();
    while !marker.exists() {
        assert!(started.elapsed() < START_WAIT, "the guest never started");
        assert!(!runner.is_finished(), "the execution ended before starting");
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = second.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    assert_eq!(
        report.skipped_reasons.get(&id).map(String::as_str),
        Some(BUSY_SKIP_REASON)
    );
    let error = second
        .delete_session_waiting(id, "test", Duration::ZERO)
        .unwrap_err();
    assert!(matches!(error, RuntimeError::Busy { session_id, .. } if session_id == id));
    let execution = runner.join().map_err(|_| "the runner panicked")??;
    assert_eq!(execution.outcome, sandlog_core::Outcome::Ok);
    let report = second.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions, vec![id]);
    assert_root_usable(&second)
}

/// Goal: an execution running in the same engine keeps its session out of
/// a prune as `busy` (the run holds the session's lock and lease; prune
/// never waits behind it), and the execution is then recorded. Method: a
/// 2 s execution on a scoped thread; once the guest has started, prune
/// everything with an idle session beside it: the running one is skipped
/// as `busy`, the idle one pruned; the execution finishes `ok` and is
/// counted; a second prune removes the session.
#[test]
fn an_execution_in_the_same_engine_is_busy_for_prune() -> TestResult {
    let (_dir, engine) = system_root()?;
    let running = engine.create_session(BTreeMap::new())?.session_id;
    let idle = engine.create_session(BTreeMap::new())?.session_id;
    let marker = engine.layout().workspace(running).join("started.txt");
    std::thread::scope(|scope| -> TestResult {
        let runner = scope.spawn(|| {
            let mut request = ExecRequest::python(
                "import time\nopen('started.txt', 'w').write('x')\ntime.sleep(2)",
            );
            request.limits.timeout = Some(Duration::from_secs(60));
            engine.execute(running, &request)
        });
        let started = Instant::now();
        while !marker.exists() {
            assert!(started.elapsed() < START_WAIT, "the guest never started");
            assert!(!runner.is_finished(), "the execution ended before starting");
            std::thread::sleep(Duration::from_millis(20));
        }
        let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
        assert_eq!(report.deleted_sessions, vec![idle]);
        assert_eq!(report.skipped_sessions, vec![running]);
        assert_eq!(
            report.skipped_reasons.get(&running).map(String::as_str),
            Some(BUSY_SKIP_REASON)
        );
        let execution = runner.join().map_err(|_| "the runner panicked")??;
        assert_eq!(execution.outcome, sandlog_core::Outcome::Ok);
        Ok(())
    })?;
    assert_eq!(engine.session(running)?.status, SessionStatus::Active);
    assert_eq!(engine.session(running)?.exec_count, 1);
    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions, vec![running]);
    assert_root_usable(&engine)
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

/// Goal: a delete intent whose removal keeps failing never bricks the root.
/// Method: a fault injector denies removing one session's workspace; the
/// delete fails with the I/O error and leaves the intent pending. Opening
/// the root three more times succeeds and records the failure exactly
/// once; commands on the session say it is `deleting`; another session
/// works; `reconcile` (error for that session, still one event) and the
/// failed-intents list `stats` shows report it. Without the fault, the
/// next open finishes the intent and removes the lease file.
#[test]
fn a_failing_delete_intent_is_recorded_once_and_does_not_brick_the_root() -> TestResult {
    let mut root = TestRoot::new()?;
    let stuck = root.engine.create_session(BTreeMap::new())?.session_id;
    let mut faulty = options(&root.clock);
    faulty.fault = Some(Arc::new(FailRemovalOf(stuck)));
    root.engine = Engine::open(root.path(), faulty.clone())?;

    let error = root.engine.delete_session(stuck, "test").unwrap_err();
    assert!(
        matches!(&error, RuntimeError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied),
        "{error:?}"
    );
    assert_eq!(root.engine.session(stuck)?.status, SessionStatus::Deleting);
    assert_eq!(intent_failures(&root.engine, stuck)?, 1);

    for _ in 0..3 {
        root.engine = Engine::open(root.path(), faulty.clone())?;
    }
    assert_eq!(intent_failures(&root.engine, stuck)?, 1);
    let error = root
        .engine
        .execute(stuck, &ExecRequest::python("print(1)"))
        .unwrap_err();
    assert!(
        matches!(error, RuntimeError::SessionNotActive { session_id, status: SessionStatus::Deleting } if session_id == stuck),
        "{error:?}"
    );
    assert_root_usable(&root.engine)?;

    let report = root
        .engine
        .reconcile(&ReconcileOptions::default(), NO_PROGRESS)?;
    assert!(
        report.errors.contains_key(&stuck.to_string()),
        "{:?}",
        report.errors
    );
    assert_eq!(report.failed_intents.len(), 1);
    let failed = &report.failed_intents[0];
    assert_eq!(failed.session_id, stuck);
    assert_eq!(failed.intent, "delete");
    assert!(
        failed.error.to_lowercase().contains("permission denied"),
        "{}",
        failed.error
    );
    assert_eq!(root.engine.failed_intents()?, report.failed_intents);
    assert_eq!(intent_failures(&root.engine, stuck)?, 1);

    root.engine = Engine::open(root.path(), options(&root.clock))?;
    assert_eq!(root.engine.session(stuck)?.status, SessionStatus::Deleted);
    assert!(!root.engine.layout().workspace(stuck).exists());
    assert!(!lease_path(root.path(), stuck).exists());
    assert!(root.engine.failed_intents()?.is_empty());
    assert_root_usable(&root.engine)
}
