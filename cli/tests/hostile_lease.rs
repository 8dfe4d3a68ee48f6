//! `session delete --wait` against a session whose lease another process
//! holds, and `stats` / `reconcile` listing failed intents (none here).

#![cfg(test)]

use std::fs::OpenOptions;

use serde_json::Value;

mod common;
use common::sandlog;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

/// Goal: `session delete` on a session in use fails `busy` after its wait
/// and changes nothing; `--wait` is validated. Method: this test process
/// holds the session's lease file with a shared OS lock (as an execution
/// does) while the CLI deletes with `--wait 200ms` (exit 1, kind `busy`,
/// still active) and with a malformed wait (exit 2); after the lock is
/// dropped, `--wait 0s` deletes it. `stats` and `reconcile` report no
/// failed intents, another session still runs `print(1)`, `verify` is ok.
#[test]
fn session_delete_fails_busy_while_another_process_holds_the_lease() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    let created = json(
        &sandlog(&root)
            .args(["--json", "session", "create"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let id = created["session_id"].as_str().unwrap().to_owned();
    let lease_dir = root.join("leases");
    std::fs::create_dir_all(&lease_dir)?;
    let lease = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lease_dir.join(format!("{id}.lock")))?;
    lease.lock_shared()?;

    let failure = sandlog(&root)
        .args(["--json", "session", "delete", &id, "--wait", "200ms"])
        .assert()
        .code(1);
    let error = json(&failure.get_output().stderr);
    assert_eq!(error["error"]["kind"], "busy");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&id) && message.contains("--wait"),
        "{message}"
    );
    let usage = sandlog(&root)
        .args(["--json", "session", "delete", &id, "--wait", "soon"])
        .assert()
        .code(2);
    assert!(!usage.get_output().stderr.is_empty());
    let shown = json(
        &sandlog(&root)
            .args(["--json", "session", "show", &id])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(shown["status"], "active");

    drop(lease);
    let deleted = json(
        &sandlog(&root)
            .args(["--json", "session", "delete", &id, "--wait", "0s"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(deleted["session_id"], id.as_str());
    assert!(!lease_dir.join(format!("{id}.lock")).exists());

    for command in [&["--json", "stats"][..], &["--json", "reconcile"][..]] {
        let out = json(
            &sandlog(&root)
                .args(command)
                .assert()
                .success()
                .get_output()
                .stdout,
        );
        assert_eq!(out["failed_intents"], Value::Array(Vec::new()), "{out}");
    }
    let other = json(
        &sandlog(&root)
            .args(["--json", "session", "create"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let other = other["session_id"].as_str().unwrap();
    sandlog(&root)
        .args(["exec", other, "--code", "print(1)"])
        .assert()
        .success()
        .stdout("1\n");
    sandlog(&root).args(["verify"]).assert().success();
    Ok(())
}
