//! Engine fixtures: a temporary root with a manual clock, the real guest
//! runtimes and the shared precompiled-module cache.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandlog_core::{ManualClock, SessionId, StreamId, Timestamp};
use sandlog_projections::ProjectionError;
use sandlog_runtime::{Engine, EngineOptions};
use sandlog_sqlite::{EventStore, OpenOptions};

/// The log of an engine's root opened beside the engine, as another
/// process would open it: a second connection to the same file, on the
/// engine's clock, with the read models kept in step. Tests read the raw log
/// and inject events through it; the engine keeps its own store to itself.
/// (Appends through it are safe beside the engine's: positions and the
/// Merkle tree are taken from the file in each transaction.)
pub trait RawLog {
    /// Opens the root's log.
    fn raw_log(&self) -> Result<EventStore, ProjectionError>;
}

impl RawLog for Engine {
    fn raw_log(&self) -> Result<EventStore, ProjectionError> {
        let mut options = OpenOptions::default().clock(self.clock().clone());
        options.create = false;
        let mut store = EventStore::open(&self.layout().database, options)?;
        sandlog_sqlite::install(&mut store)?;
        Ok(store)
    }
}

/// Where `python.wasm` and `quickjs.wasm` are: `$SANDLOG_RUNTIMES_DIR`, else
/// `<repo>/.runtimes`. Panics (failing the test, never skipping it) with the
/// command that installs them.
pub fn runtimes_dir() -> PathBuf {
    let dir = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.runtimes"));
    assert!(
        dir.join("python.wasm").is_file(),
        "{} has no python.wasm: run `make runtimes` (scripts/fetch-runtimes.sh)",
        dir.display()
    );
    dir
}

/// The precompiled-module cache shared by every test (python.wasm is
/// compiled once per machine, not once per test).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("SANDLOG_TEST_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sandlog-test-cache")
        })
}

/// 2025-11-22T10:00:00Z, the tests' "now".
pub const TEST_EPOCH_MICROS: i64 = 1_763_805_600_000_000;

/// Options for a test engine on `clock`.
pub fn options(clock: &ManualClock) -> EngineOptions {
    EngineOptions {
        clock: Arc::new(clock.clone()),
        actor: "api:test".to_owned(),
        runtimes_dir: Some(runtimes_dir()),
        cache_dir: Some(cache_dir()),
        ..EngineOptions::default()
    }
}

/// Errors of fixtures.
pub type FixtureError = Box<dyn std::error::Error + Send + Sync>;

/// A temporary root with an engine on a manual clock.
pub struct TestRoot {
    /// The directory (removed on drop).
    pub dir: tempfile::TempDir,
    /// The clock every event is stamped with.
    pub clock: ManualClock,
    /// The engine.
    pub engine: Engine,
}

impl TestRoot {
    /// A fresh root.
    pub fn new() -> Result<TestRoot, FixtureError> {
        let dir = tempfile::tempdir()?;
        let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
        let root = Engine::init(dir.path())?;
        let engine = Engine::open(&root, options(&clock))?;
        Ok(TestRoot { dir, clock, engine })
    }

    /// The root path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Closes and reopens the engine (as a restart would).
    pub fn reopen(&mut self) -> Result<(), FixtureError> {
        self.engine = Engine::open(self.dir.path(), options(&self.clock))?;
        Ok(())
    }

    /// The kinds of `session_id`'s events, in stream order.
    pub fn stream_kinds(&self, session_id: SessionId) -> Result<Vec<String>, FixtureError> {
        Ok(self
            .engine
            .raw_log()?
            .read_stream(StreamId::Session(session_id))?
            .into_iter()
            .map(|envelope| envelope.kind)
            .collect())
    }
}
