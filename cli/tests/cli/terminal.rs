//! What a person sees on a real terminal, driven by tmux
//! (scripts/terminal-check.sh): the first-run compile note, the progress
//! bar and the note that an old root's log is being upgraded show on a
//! terminal, and none of them shows when piped. Needs `tmux`; without it
//! the test fails saying so (it never skips).

#![cfg(test)]

use std::path::{Path, PathBuf};

/// A root with a few sessions whose log is turned back into schema 4 and
/// whose read models into the version before this build's, as an older
/// sandlog left it.
fn old_root(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use sandlog_runtime::{Engine, EngineOptions};
    Engine::init(path)?;
    let engine = Engine::open(path, EngineOptions::default())?;
    for _ in 0..3 {
        engine.create_session(Default::default())?;
    }
    drop(engine);
    let tamperer = sandlog_tests::open_tamperer(&path.join("sandlog.db"))?;
    tamperer.execute_batch(sandlog_tests::AS_SCHEMA_4)?;
    tamperer.execute(
        "UPDATE rm_checkpoint SET model_version = model_version - 1",
        [],
    )?;
    Ok(())
}

#[test]
fn compile_note_and_progress_bar_only_on_a_terminal() -> Result<(), Box<dyn std::error::Error>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join(".runtimes"));
    let quickjs = runtimes.join("quickjs.wasm");
    assert!(
        quickjs.is_file(),
        "{} is missing: run `make runtimes`",
        quickjs.display()
    );
    let old = tempfile::tempdir()?;
    let (old_terminal, old_piped) = (old.path().join("terminal"), old.path().join("piped"));
    old_root(&old_terminal)?;
    old_root(&old_piped)?;
    let output = std::process::Command::new(repo.join("scripts/terminal-check.sh"))
        .arg(env!("CARGO_BIN_EXE_sandlog"))
        .arg(&quickjs)
        .arg(&old_terminal)
        .arg(&old_piped)
        .output()
        .map_err(|error| format!("running scripts/terminal-check.sh: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "terminal check failed (is tmux installed?):\n{stderr}\n{stdout}"
    );
    Ok(())
}
