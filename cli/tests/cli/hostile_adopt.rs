//! `adopt --json` on a hostile seed workspace reports what it refused and
//! copied.

#![cfg(test)]

use std::os::unix::fs::MetadataExt;

use assert_cmd::Command;
use serde_json::{Value, json};

use crate::common::sandlog;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json_stdout(command: &mut Command) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(&command.assert().success().get_output().stdout)
}

/// Goal: `adopt --json` lists, per session, the refused entries with kind,
/// reason and quarantine place, and the files copied to break hard links;
/// the human form says the same. Method: a seed workspace with a FIFO and
/// a hard link to a file outside, adopted by the real binary; then the
/// outside file keeps its single link, and another session runs Python and
/// `verify` passes.
#[test]
fn adopt_json_reports_refused_entries_and_copied_links() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let seeds = dir.path().join("seeds");
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, b"outside")?;
    let id = uuid::Uuid::new_v4().to_string();
    let workspace = seeds.join(&id);
    std::fs::create_dir_all(&workspace)?;
    std::fs::hard_link(&outside, workspace.join("linked.txt"))?;
    let status = std::process::Command::new("mkfifo")
        .arg(workspace.join("pipe"))
        .status()?;
    assert!(status.success(), "mkfifo: {status}");

    let report = json_stdout(sandlog(&root).arg("--json").arg("adopt").arg(&seeds))?;
    assert_eq!(report["legacy"], json!([id]));
    let neutralised = &report["neutralised"];
    let moved_to = neutralised[0]["refused"][0]["moved_to"]
        .as_str()
        .ok_or("no moved_to")?;
    assert!(
        moved_to.starts_with(&format!("quarantine/adopted-{id}.")) && moved_to.ends_with("/pipe"),
        "{moved_to}"
    );
    assert_eq!(
        neutralised,
        &json!([{
            "session_id": id,
            "refused": [{
                "path": "pipe",
                "kind": "fifo",
                "reason": "a FIFO is not file contents, and opening it blocks until a writer comes",
                "moved_to": moved_to,
            }],
            "copied_links": ["linked.txt"],
            "unrecorded": 0,
        }])
    );
    assert_eq!(std::fs::metadata(&outside)?.nlink(), 1);
    assert!(root.join(moved_to).exists());

    let session = json_stdout(sandlog(&root).args(["--json", "session", "create"]))?;
    let other = session["session_id"].as_str().ok_or("no session_id")?;
    let run = sandlog(&root)
        .args(["exec", other, "--code", "print(1)"])
        .assert()
        .success();
    assert_eq!(run.get_output().stdout, b"1\n");
    sandlog(&root).arg("verify").assert().success();
    Ok(())
}
