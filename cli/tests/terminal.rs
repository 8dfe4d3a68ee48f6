//! What a person sees on a real terminal, driven by tmux
//! (scripts/terminal-check.sh): the first-run compile note and the
//! progress bar show on a terminal, and neither shows when piped. Needs
//! `tmux`; without it the test fails saying so (it never skips).

#![cfg(test)]

use std::path::{Path, PathBuf};

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
    let output = std::process::Command::new(repo.join("scripts/terminal-check.sh"))
        .arg(env!("CARGO_BIN_EXE_sandlog"))
        .arg(&quickjs)
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
