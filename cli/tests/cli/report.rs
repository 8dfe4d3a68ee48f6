//! `sandlog report` through the real binary: it writes the HTML file and
//! prints its path, refuses to replace a file without --force, exits 3 for
//! an unknown session and 4 (after writing the report) for a tampered log.

#![cfg(test)]

use assert_cmd::Command;
use serde_json::Value;

use crate::common::sandlog;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json_success(command: &mut Command) -> Value {
    let output = command.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(&output)))
}

/// Goal: the command a person runs. Method: a real root, a Python run,
/// then `report` with and without --json, --force, a wrong id, and a
/// tampered log.
#[test]
fn report_writes_one_html_file_and_prints_its_path() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    sandlog(&root).arg("init").assert().success();
    let created = json_success(sandlog(&root).args(["--json", "session", "create"]));
    let id = created["session_id"].as_str().ok_or("no id")?.to_owned();
    sandlog(&root)
        .args(["exec", &id, "--code"])
        .arg("print('cli-report-marker'); open('/app/from-cli.txt','w').write('x')")
        .assert()
        .success();

    let file = dir.path().join("out.html");
    let done = json_success(
        sandlog(&root)
            .args(["--json", "report", &id, "-o"])
            .arg(&file),
    );
    assert_eq!(done["path"].as_str(), file.to_str());
    assert_eq!(done["session_id"].as_str(), Some(id.as_str()));
    assert_eq!(done["executions"], 1);
    assert_eq!(done["verify_ok"], true);
    let html = std::fs::read_to_string(&file)?;
    assert_eq!(done["bytes"].as_u64(), Some(html.len() as u64));
    assert!(html.starts_with("<!DOCTYPE html>"));
    for expected in [id.as_str(), "cli-report-marker", "from-cli.txt"] {
        assert!(html.contains(expected), "the report lacks {expected:?}");
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file)?.permissions());
    assert_eq!(mode & 0o777, 0o644);

    // An existing file is kept unless --force.
    std::fs::write(&file, "keep me")?;
    let refused = sandlog(&root)
        .args(["report", &id, "-o"])
        .arg(&file)
        .assert()
        .code(1)
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8_lossy(&refused).contains("--force"));
    assert_eq!(std::fs::read_to_string(&file)?, "keep me");
    let human = sandlog(&root)
        .args(["report", &id, "--force", "-o"])
        .arg(&file)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8_lossy(&human).contains("log verification ok"));
    assert!(std::fs::read_to_string(&file)?.contains("cli-report-marker"));
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())?
        .map(|entry| entry.map(|entry| entry.file_name()))
        .collect::<Result<_, _>>()?;
    assert_eq!(names.len(), 2, "{names:?}");

    // An unknown session: not found, nothing written.
    let missing = dir.path().join("missing.html");
    sandlog(&root)
        .args(["report", "00000000-0000-4000-8000-000000000000", "-o"])
        .arg(&missing)
        .assert()
        .code(3);
    assert!(!missing.exists());
    sandlog(&root)
        .args(["report", "not-a-uuid", "-o"])
        .arg(&missing)
        .assert()
        .code(2);

    // A tampered log: the report is written and says so; exit 4.
    let connection = rusqlite::Connection::open(root.join("sandlog.db"))?;
    connection.execute_batch(
        "DROP TRIGGER IF EXISTS events_are_append_only_update;
         UPDATE events SET actor = 'mallory' WHERE position = 2;",
    )?;
    drop(connection);
    let tampered = dir.path().join("tampered.html");
    sandlog(&root)
        .args(["report", &id, "-o"])
        .arg(&tampered)
        .assert()
        .code(4);
    let html = std::fs::read_to_string(&tampered)?;
    assert!(html.contains("<span class=\"bad\">failed</span>"));
    Ok(())
}
