//! A root that is missing, foreign, or lost its log: `Engine::open` creates
//! nothing and names what is wrong; the anchor ties a root to its log.

use std::path::Path;

use sandlog_core::{Position, StreamId};
use sandlog_runtime::anchor::{self, ANCHOR_FILE, ROOT_INITIALIZED_KIND};
use sandlog_runtime::{Engine, ExecRequest, RuntimeError};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::{TestRoot, options};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn remove_database(root: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(root.join(format!("sandlog.db{suffix}")));
    }
}

/// Copies the database with its WAL files (a live database's recent
/// commits are in the WAL).
fn copy_database(from: &Path, to: &Path) -> std::io::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let name = format!("sandlog.db{suffix}");
        if from.join(&name).exists() {
            std::fs::copy(from.join(&name), to.join(&name))?;
        }
    }
    Ok(())
}

/// The root works: a new session runs `print(1)` and verify is ok.
fn assert_usable(root: &TestRoot) -> TestResult {
    let session = root.engine.create_session(Default::default())?;
    let run = root
        .engine
        .execute(session.session_id, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.stdout, b"1\n");
    assert!(root.engine.verify(None, &|_| {})?.ok);
    Ok(())
}

/// Opening a missing directory or a directory without a root fails with
/// the not-found variants and creates nothing in or at the path.
#[test]
fn open_on_a_missing_or_foreign_directory_creates_nothing() -> TestResult {
    let root = TestRoot::new()?;
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("missing");
    let error = Engine::open(&missing, options(&root.clock)).unwrap_err();
    assert!(matches!(error, RuntimeError::RootMissing(ref path) if *path == missing));
    assert!(error.is_not_found());
    assert!(!missing.exists());

    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign)?;
    let error = Engine::open(&foreign, options(&root.clock)).unwrap_err();
    assert!(matches!(error, RuntimeError::NotARoot { ref path } if *path == foreign));
    assert!(error.is_not_found());
    assert_eq!(std::fs::read_dir(&foreign)?.count(), 0);
    assert_usable(&root)
}

/// The first open appends `root.initialized` at position 1 on the
/// opener's clock and records its hash in the anchor.
#[test]
fn first_open_appends_the_genesis_event_and_completes_the_anchor() -> TestResult {
    let root = TestRoot::new()?;
    let first = root.engine.raw_log()?.get(Position(1))?.expect("genesis");
    assert_eq!(first.kind, ROOT_INITIALIZED_KIND);
    assert_eq!(first.stream, StreamId::System);
    assert_eq!(first.recorded_at, sandlog_core::Clock::now(&root.clock));
    let anchor = anchor::read(root.path())?.expect("anchor");
    assert_eq!(anchor.genesis_hash, Some(first.hash.to_hex()));
    assert_usable(&root)
}

/// A deleted, emptied or replaced database is an integrity error naming
/// the anchor, and the open does not create a database; restoring the
/// backup or `reset_log` brings the root back.
#[test]
fn a_lost_database_fails_open_until_restored_or_reset() -> TestResult {
    let mut root = TestRoot::new()?;
    root.engine.create_session(Default::default())?;
    let database = root.path().join("sandlog.db");
    let backup = tempfile::tempdir()?;
    copy_database(root.path(), backup.path())?;

    remove_database(root.path());
    let error = Engine::open(root.path(), options(&root.clock)).unwrap_err();
    assert!(
        matches!(error, RuntimeError::LogMissing { ref reason, .. } if reason.contains("missing")),
        "{error}"
    );
    assert!(error.is_integrity());
    assert!(!database.exists());
    // init does not paper over it either.
    Engine::init(root.path())?;
    assert!(!database.exists());

    std::fs::write(&database, b"")?;
    let error = Engine::open(root.path(), options(&root.clock)).unwrap_err();
    assert!(
        matches!(error, RuntimeError::LogMissing { ref reason, .. } if reason.contains("empty"))
    );

    let other = TestRoot::new()?;
    remove_database(root.path());
    copy_database(other.path(), root.path())?;
    let error = Engine::open(root.path(), options(&root.clock)).unwrap_err();
    assert!(
        matches!(error, RuntimeError::AnchorMismatch { .. }),
        "{error}"
    );

    remove_database(root.path());
    copy_database(backup.path(), root.path())?;
    root.reopen()?;
    assert_eq!(root.engine.sessions(None)?.len(), 1);

    remove_database(root.path());
    let aside = Engine::reset_log(root.path())?.expect("an anchor was set aside");
    assert!(aside.is_file());
    root.reopen()?;
    assert!(root.engine.sessions(None)?.is_empty());
    assert_usable(&root)
}

/// A root made before anchors (a database, no anchor) gets its anchor
/// written from the database on open.
#[test]
fn a_root_without_an_anchor_is_upgraded_from_its_database() -> TestResult {
    let mut root = TestRoot::new()?;
    let genesis = root
        .engine
        .raw_log()?
        .get(Position(1))?
        .expect("genesis")
        .hash;
    std::fs::remove_file(root.path().join(ANCHOR_FILE))?;
    root.reopen()?;
    let anchor = anchor::read(root.path())?.expect("anchor rewritten");
    assert_eq!(anchor.genesis_hash, Some(genesis.to_hex()));
    assert_usable(&root)
}

/// An anchor that is not an anchor (garbage, a directory) is an
/// integrity error, not a reason to start over.
#[test]
fn an_unreadable_anchor_is_an_integrity_error() -> TestResult {
    let mut root = TestRoot::new()?;
    let path = root.path().join(ANCHOR_FILE);
    let saved = std::fs::read(&path)?;
    std::fs::write(&path, "{\"format\": 1, \"root_id\": 12}")?;
    let error = Engine::open(root.path(), options(&root.clock)).unwrap_err();
    assert!(
        matches!(error, RuntimeError::AnchorUnreadable { .. }),
        "{error}"
    );
    assert!(error.is_integrity());
    std::fs::write(&path, saved)?;
    root.reopen()?;
    assert_usable(&root)
}
