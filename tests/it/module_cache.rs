//! The precompiled-module cache that every root of a user shares: a module
//! compiled for one root is loaded, not compiled, by the next; a damaged
//! entry is noticed and recompiled. Real roots, real wasmtime, the real
//! runtimes, each test on a cache directory of its own (never the user's).

#![cfg(test)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandlog_core::{ManualClock, Outcome, Timestamp};
use sandlog_runtime::sandbox::{CacheStats, ModuleOrigin};
use sandlog_runtime::{Engine, EngineOptions, ExecRequest, Runtime};
use sandlog_tests::engine::{TEST_EPOCH_MICROS, options, runtimes_dir};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A fresh root at `dir` whose engine uses the cache at `cache`.
fn open_root(dir: &Path, cache: &Path) -> Result<Engine, Box<dyn std::error::Error + Send + Sync>> {
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let root = Engine::init(dir)?;
    Ok(Engine::open(
        &root,
        EngineOptions {
            cache_dir: Some(cache.to_path_buf()),
            ..options(&clock)
        },
    )?)
}

/// Goal: the first execution in a second root on the same machine does not
/// compile python.wasm again (the cost a new root paid before the cache
/// was shared). Method: two real roots on one empty cache directory; the
/// first prepares python (compiling it), the second runs `print(1)`; the
/// second's sandbox counts no compile and one load from the cache.
#[test]
fn a_second_root_loads_python_compiled_for_the_first() -> TestResult {
    let cache = tempfile::tempdir()?;
    let first_dir = tempfile::tempdir()?;
    let second_dir = tempfile::tempdir()?;

    let first = open_root(first_dir.path(), cache.path())?;
    let prepared = first.prepare_runtime(&Runtime::Python)?;
    assert_eq!(prepared.origin, ModuleOrigin::Compiled);
    assert_eq!(
        first.sandbox()?.cache_stats(),
        CacheStats {
            compiled: 1,
            loaded: 0
        }
    );
    assert_eq!(first.cache_dir(), cache.path());
    drop(first);

    let second = open_root(second_dir.path(), cache.path())?;
    let session = second.create_session(BTreeMap::new())?;
    let run = second.execute(session.session_id, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(run.stdout, b"1\n");
    assert_eq!(
        second.sandbox()?.cache_stats(),
        CacheStats {
            compiled: 0,
            loaded: 1
        }
    );
    // Nothing of the cache went into either root.
    for root in [first_dir.path(), second_dir.path()] {
        assert!(!root.join("cache").exists(), "{}", root.display());
    }
    Ok(())
}

/// Goal: a damaged cache entry is detected and the module recompiled,
/// never run. Method: compile quickjs.wasm into an empty cache through one
/// root, overwrite the middle of its artifact in place (same length, as
/// bit rot or a stray write would), then run JavaScript in another root:
/// it compiles once more, and a third root loads the rewritten entry.
#[test]
fn a_damaged_entry_is_recompiled_not_run() -> TestResult {
    let cache = tempfile::tempdir()?;
    let roots = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let first = open_root(roots[0].path(), cache.path())?;
    assert_eq!(
        first.prepare_runtime(&Runtime::JavaScript)?.origin,
        ModuleOrigin::Compiled
    );
    let artifact = artifact_path(first.sandbox()?.artifact_dir(), "quickjs.wasm")?;
    drop(first);

    let mut bytes = std::fs::read(&artifact)?;
    let middle = bytes.len() / 2;
    for byte in bytes.iter_mut().skip(middle).take(64) {
        *byte ^= 0xff;
    }
    std::fs::write(&artifact, &bytes)?;

    let javascript = |engine: &Engine| -> TestResult {
        let session = engine.create_session(BTreeMap::new())?;
        let request = ExecRequest {
            runtime: Runtime::JavaScript,
            code: b"console.log(6 * 7)".to_vec(),
            limits: Default::default(),
        };
        let run = engine.execute(session.session_id, &request)?;
        assert_eq!(run.outcome, Outcome::Ok);
        assert_eq!(run.stdout, b"42\n");
        Ok(())
    };
    let second = open_root(roots[1].path(), cache.path())?;
    javascript(&second)?;
    assert_eq!(
        second.sandbox()?.cache_stats(),
        CacheStats {
            compiled: 1,
            loaded: 0
        }
    );
    assert_ne!(std::fs::read(&artifact)?, bytes, "entry not rewritten");

    let third = open_root(roots[2].path(), cache.path())?;
    javascript(&third)?;
    assert_eq!(
        third.sandbox()?.cache_stats(),
        CacheStats {
            compiled: 0,
            loaded: 1
        }
    );
    Ok(())
}

/// The artifact of the runtime `file_name` in an engine's artifact
/// directory (named after the module's blake3).
fn artifact_path(
    artifact_dir: &Path,
    file_name: &str,
) -> Result<PathBuf, Box<dyn std::error::Error + Send + Sync>> {
    let wasm = std::fs::read(runtimes_dir().join(file_name))?;
    let path = artifact_dir.join(format!("{}.cwasm", blake3::hash(&wasm).to_hex()));
    assert!(path.is_file(), "{} missing", path.display());
    Ok(path)
}
