//! Hostile workspaces and the host's work after a run: trees deeper than
//! PATH_MAX, more entries or changes than the bounds, a 1 TiB sparse file,
//! symlink loops, longest names, and a drift too big for one event. Each
//! execution is recorded, each workspace deletable, and the root stays
//! usable.

#![cfg(test)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sandlog_core::event::{Event, ExecutionLimit, ExecutionScan};
use sandlog_core::{ManualClock, Outcome, SessionId, StreamId, Timestamp, WorkspacePath};
use sandlog_runtime::sandbox::ExecLimits;
use sandlog_runtime::workspace::Workspace;
use sandlog_runtime::{Engine, ExecRequest, ReconcileOptions};
use sandlog_tests::engine::{TEST_EPOCH_MICROS, TestRoot, options};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A root whose engine runs executions under `limits`.
fn root_with(limits: ExecLimits) -> Result<TestRoot, Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let root = Engine::init(dir.path())?;
    let engine = Engine::open(
        &root,
        sandlog_runtime::EngineOptions {
            limits,
            ..options(&clock)
        },
    )?;
    Ok(TestRoot { dir, clock, engine })
}

/// The scan summary of the last `session.executed` of a session.
fn last_scan(root: &TestRoot, session_id: SessionId) -> Result<ExecutionScan, String> {
    let events = root
        .engine
        .stream_events(StreamId::Session(session_id))
        .map_err(|error| error.to_string())?;
    events
        .iter()
        .rev()
        .find_map(|envelope| match envelope.event() {
            Ok(Some(Event::SessionExecuted(executed))) => executed.scan.map(|scan| *scan),
            _ => None,
        })
        .ok_or_else(|| "no session.executed with a scan summary".to_owned())
}

/// The root stays usable: a new session runs `print(1)`, and the log
/// verifies.
fn assert_root_usable(root: &TestRoot) -> TestResult {
    let session = root.engine.create_session(BTreeMap::new())?;
    let run = root
        .engine
        .execute(session.session_id, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(run.stdout, b"1\n");
    let verified = root.engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{verified:?}");
    Ok(())
}

/// Deletes a session and checks its directory is gone.
fn assert_deletable(root: &TestRoot, session_id: SessionId) -> TestResult {
    root.engine.delete_session(session_id, "test")?;
    assert!(!root.engine.layout().workspace(session_id).exists());
    Ok(())
}

/// Goal: a guest that nests directories deeper than PATH_MAX (3000 levels,
/// 6000 bytes of path, by renaming one 1000-deep chain into the leaf of
/// another) has its execution recorded as `limit_exceeded` (`scan_depth`)
/// with the files a workspace path can name, and the session can be
/// deleted. Method: real python.wasm builds the tree; the engine's result,
/// the stream, the deletion and the directory are checked.
#[test]
fn tree_deeper_than_path_max_is_recorded_and_deletable() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let code = r#"
import os
def chain(name, n):
    p = name
    os.mkdir(p)
    for _ in range(n - 1):
        p = p + '/' + name
        os.mkdir(p)
    return p
a = chain('d', 1000)
with open(a + '/leaf.txt', 'w') as f:
    f.write('x')
b = chain('e', 1000)
os.rename('e', a + '/e')
chain('g', 1000)
os.rename('g', a + '/' + b + '/g')
print('built')
"#;
    let run = root.engine.execute(id, &ExecRequest::python(code))?;
    assert_eq!(
        run.stdout,
        b"built\n",
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(run.outcome, Outcome::LimitExceeded);
    assert_eq!(run.limit, Some(ExecutionLimit::ScanDepth));
    let leaf = WorkspacePath::parse(&format!("{}leaf.txt", "d/".repeat(1000)))?;
    assert_eq!(run.files_written, vec![leaf.clone()]);
    let scan = last_scan(&root, id)?;
    assert_eq!(scan.limit, Some(ExecutionLimit::ScanDepth));
    assert_eq!(scan.files_recorded, 1);
    assert!(scan.changes_digest.is_some());
    assert_eq!(root.engine.list_files(id, None)?.len(), 1);
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}

/// Goal: a workspace with more entries than the scan visits is recorded as
/// `limit_exceeded` (`scan_entries`), with no deletion inferred from the
/// part not scanned. Method: scan limit 300; the host writes a file, the
/// guest creates 1000 more.
#[test]
fn entries_past_the_scan_limit_are_recorded_as_limit_exceeded() -> TestResult {
    let root = root_with(ExecLimits {
        scan_entries_max: 300,
        ..ExecLimits::default()
    })?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let kept = WorkspacePath::parse("zzz/kept.txt")?;
    root.engine.write_file(id, &kept, b"kept", false)?;
    let run = root.engine.execute(
        id,
        &ExecRequest::python("for i in range(1000):\n    open(f'f{i:04}', 'w').close()"),
    )?;
    assert_eq!(run.outcome, Outcome::LimitExceeded);
    assert_eq!(run.limit, Some(ExecutionLimit::ScanEntries));
    assert!(run.files_deleted.is_empty(), "{:?}", run.files_deleted);
    assert!(!run.files_written.is_empty() && run.files_written.len() <= 300);
    let kinds = root.stream_kinds(id)?;
    assert!(kinds.contains(&"session.executed".to_owned()));
    assert!(!kinds.contains(&"file.deleted".to_owned()));
    assert!(
        root.engine
            .list_files(id, None)?
            .iter()
            .any(|file| file.path == kept)
    );
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}

/// Goal: more changed files than one execution records: the first ones in
/// path order are recorded, the outcome says `limit_exceeded`
/// (`changed_files`), and the event carries the total and a digest.
/// Method: limit 100, the guest writes 250 files.
#[test]
fn changes_past_the_per_execution_maximum_are_counted_and_digested() -> TestResult {
    let root = root_with(ExecLimits {
        changed_files_max: 100,
        ..ExecLimits::default()
    })?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let run = root.engine.execute(
        id,
        &ExecRequest::python("for i in range(250):\n    open(f'f{i:04}', 'w').write(str(i))"),
    )?;
    assert_eq!(run.outcome, Outcome::LimitExceeded);
    assert_eq!(run.limit, Some(ExecutionLimit::ChangedFiles));
    assert_eq!(run.files_changed_total, 250);
    let expected: Vec<WorkspacePath> = (0..100)
        .map(|i| WorkspacePath::parse(&format!("f{i:04}")))
        .collect::<Result<_, _>>()?;
    assert_eq!(run.files_written, expected);
    let scan = last_scan(&root, id)?;
    assert_eq!(scan.files_changed_total, 250);
    assert_eq!(scan.files_recorded, 100);
    assert!(scan.changes_digest.is_some());
    assert_eq!(root.engine.list_files(id, None)?.len(), 100);
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}

/// Goal: a 1 TiB sparse file is over the quota by its apparent size, ends
/// the run as `quota` quickly, and is never read for hashing. Method: the
/// guest seeks to 2^40 and writes one byte; the whole execution must take
/// seconds, not the hours hashing 1 TiB would.
#[test]
fn sparse_terabyte_file_is_over_quota_without_being_read() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let started = Instant::now();
    let run = root.engine.execute(
        id,
        &ExecRequest::python(
            "f = open('sparse', 'wb')\nf.seek(2**40)\nf.write(b'x')\nf.close()\nopen('small', 'w').write('s')",
        ),
    )?;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(run.outcome, Outcome::Quota);
    assert_eq!(run.limit, Some(ExecutionLimit::HashBytes));
    assert!(
        !run.files_written
            .iter()
            .any(|path| path.as_str() == "sparse")
    );
    let scan = last_scan(&root, id)?;
    assert_eq!(scan.limit, Some(ExecutionLimit::HashBytes));
    assert!(scan.scan_ms < 10_000, "{}", scan.scan_ms);
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}

/// Goal: a file that grows between the scan and the hash is hashed as
/// read, and its recorded size is the size the hash covers (never the
/// stale size of the scan); past the budget it is not hashed. Method: the
/// workspace API scans, the file is appended to, then hashed.
#[test]
fn file_growing_after_the_scan_is_hashed_as_read() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let directory = root.engine.layout().workspace(id);
    std::fs::write(directory.join("grow"), b"abc")?;
    let workspace = Workspace::open(&directory)?;
    let path = WorkspacePath::parse("grow")?;
    assert_eq!(workspace.scan()?.get(&path).map(|s| s.size), Some(3));
    std::fs::write(directory.join("grow"), b"abcdef")?;
    let (hash, size) = workspace
        .hash_bounded(&path, 1024)?
        .ok_or("within the budget")?;
    assert_eq!(size, 6);
    assert_eq!(hash, sandlog_core::Hash::of(b"abcdef"));
    assert_eq!(workspace.hash_bounded(&path, 5)?, None);
    std::fs::remove_file(directory.join("grow"))?;
    assert_root_usable(&root)
}

/// Goal: symlink loops (a link to itself, links to `.` and `..`) are
/// scanned without being followed or hanging, and deleted. Method: the
/// guest makes them; the execution must end `ok` and be recorded.
#[test]
fn symlink_loops_are_scanned_without_hanging() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let started = Instant::now();
    let run = root.engine.execute(
        id,
        &ExecRequest::python(
            "import os\nos.symlink('a', 'a')\nos.mkdir('x')\nos.symlink('..', 'x/up')\nos.symlink('.', 'self')\nopen('x/f', 'w').write('f')",
        ),
    )?;
    assert_eq!(
        run.outcome,
        Outcome::Ok,
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(run.files_written, vec![WorkspacePath::parse("x/f")?]);
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}

/// Goal: a 255-byte name (the longest a component may be) in a file and a
/// directory is recorded and deletable. Method: the guest creates both.
#[test]
fn longest_names_are_recorded_and_deletable() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let name = "n".repeat(255);
    let run = root.engine.execute(
        id,
        &ExecRequest::python(
            "import os\nn = 'n' * 255\nos.mkdir(n)\nopen(n + '/' + n, 'w').write('x')\nopen(n[:-1] + 'm', 'w').write('y')",
        ),
    )?;
    assert_eq!(
        run.outcome,
        Outcome::Ok,
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let nested = WorkspacePath::parse(&format!("{name}/{name}"))?;
    assert!(
        run.files_written.contains(&nested),
        "{:?}",
        run.files_written
    );
    assert_eq!(run.files_written.len(), 2);
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}

/// Goal: `reconcile --deep` on a workspace with 20,000 files changed behind
/// sandlog's back succeeds, records the drift split over several events
/// of one batch, and a second run records nothing new. Method: files are
/// written straight into the directory, then reconcile runs twice.
#[test]
fn deep_reconcile_splits_a_large_drift_over_several_events() -> TestResult {
    const FILES: usize = 20_000;
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let directory = root.engine.layout().workspace(id);
    for i in 0..FILES {
        std::fs::write(directory.join(format!("u{i:05}")), i.to_string())?;
    }
    let options = ReconcileOptions {
        deep: true,
        ..ReconcileOptions::default()
    };
    let report = root.engine.reconcile(&options, &|_, _| {})?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let drift_events: Vec<_> = root
        .engine
        .stream_events(StreamId::Session(id))?
        .into_iter()
        .filter_map(|envelope| match envelope.event() {
            Ok(Some(Event::WorkspaceDriftDetected(detected))) => Some(detected),
            _ => None,
        })
        .collect();
    assert!(drift_events.len() >= 2, "{}", drift_events.len());
    let items: usize = drift_events.iter().map(|event| event.drift.len()).sum();
    assert_eq!(items, FILES);
    for (index, event) in drift_events.iter().enumerate() {
        let split = event.split.as_ref().ok_or("every part carries its split")?;
        assert_eq!(split.part as usize, index);
        assert_eq!(split.parts as usize, drift_events.len());
        assert_eq!(split.items_total, FILES as u64);
    }
    let again = root.engine.reconcile(&options, &|_, _| {})?;
    assert!(again.drift.is_empty(), "{:?}", again.drift.len());
    assert_deletable(&root, id)?;
    assert_root_usable(&root)
}
