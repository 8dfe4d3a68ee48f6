//! Correlation and causation through the real binary (issue 16, item 5):
//! `--correlation-id` on every command, `log --correlation`, the mapping
//! of task ids to UUIDs, causation between the events of one command; and
//! `log --checkpoint`, a named consumer resumed where it stopped.

#![cfg(test)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::sandlog;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `uuid5(f2aedca4-b590-5fd0-8ac0-f89f6a851145, "task-42")`, computed
/// independently of sandlog.
const TASK_42: &str = "b6cccc7c-a54d-533a-92ab-8b20dd869780";

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    (dir, root)
}

fn json_lines(output: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}")))
        .collect()
}

/// `log --json` with extra arguments.
fn log(root: &Path, arguments: &[&str]) -> Vec<Value> {
    let output = sandlog(root)
        .args(["--json", "log"])
        .args(arguments)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    json_lines(&output)
}

fn create(root: &Path, correlation: &str) -> String {
    let output = sandlog(root)
        .args([
            "--json",
            "--correlation-id",
            correlation,
            "session",
            "create",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let created: Value = serde_json::from_slice(&output).unwrap();
    created["session_id"].as_str().unwrap().to_owned()
}

#[test]
fn every_event_of_a_task_carries_its_correlation_id_and_log_finds_exactly_them() -> TestResult {
    let (_dir, root) = init();
    let task = create(&root, "task-42");
    let other = create(&root, "task-43");
    sandlog(&root)
        .args(["--correlation-id", "task-42", "exec", &task, "--code"])
        .arg("open('out.txt', 'w').write('x')")
        .assert()
        .success();
    // The environment variable is the flag's equivalent.
    sandlog(&root)
        .env("SANDLOG_CORRELATION_ID", "task-43")
        .args(["exec", &other, "--code", "print(1)"])
        .assert()
        .success();
    sandlog(&root)
        .args(["--correlation-id", "task-42", "session", "delete", &task])
        .assert()
        .success();
    // Uncorrelated work.
    sandlog(&root)
        .args(["files", "put", &other, "plain.txt", "-"])
        .write_stdin("plain")
        .assert()
        .success();

    let everything = log(&root, &[]);
    let found = log(&root, &["--correlation", "task-42"]);
    let kinds: Vec<&str> = found
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session.created",
            "session.executed",
            "file.written",
            "session.delete.requested",
            "session.deleted"
        ],
        "{found:#?}"
    );
    // Exactly the events recorded with that id, all of the task's stream.
    let expected: Vec<&Value> = everything
        .iter()
        .filter(|event| event["correlation_id"] == TASK_42)
        .collect();
    assert_eq!(found.iter().collect::<Vec<_>>(), expected);
    for event in &found {
        assert_eq!(event["stream"], format!("session/{task}"));
    }
    // The UUID itself finds the same events; the other task's do not mix.
    assert_eq!(log(&root, &["--correlation", TASK_42]), found);
    let others = log(&root, &["--correlation", "task-43"]);
    assert_eq!(others.len(), 2, "{others:#?}");
    assert!(
        others
            .iter()
            .all(|event| event["stream"] == format!("session/{other}"))
    );
    assert!(
        everything
            .iter()
            .any(|event| event["kind"] == "file.written" && event["correlation_id"].is_null())
    );

    // Causation: the execution's file names the execution, the deletion
    // its intent.
    let by_kind = |kind: &str| found.iter().find(|event| event["kind"] == kind).unwrap();
    assert_eq!(
        by_kind("file.written")["causation_id"],
        by_kind("session.executed")["event_id"]
    );
    assert_eq!(
        by_kind("session.deleted")["causation_id"],
        by_kind("session.delete.requested")["event_id"]
    );
    assert!(by_kind("session.delete.requested")["causation_id"].is_null());

    // Human output shows it.
    let human = sandlog(&root)
        .args(["log", "--correlation", "task-42"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let human = String::from_utf8(human)?;
    assert_eq!(
        human.matches(&format!("correlation {TASK_42}")).count(),
        5,
        "{human}"
    );
    Ok(())
}

#[test]
fn a_correlation_id_that_cannot_be_one_is_a_usage_error() -> TestResult {
    let (_dir, root) = init();
    for bad in ["", "task\n42", &"x".repeat(257)] {
        let stderr = sandlog(&root)
            .args(["--correlation-id", bad, "session", "create"])
            .assert()
            .code(2)
            .get_output()
            .stderr
            .clone();
        assert!(
            String::from_utf8_lossy(&stderr).contains("correlation id"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&stderr)
        );
        sandlog(&root)
            .args(["log", "--correlation", bad])
            .assert()
            .code(2);
    }
    // Nothing was recorded by the refused commands.
    assert_eq!(log(&root, &[]).len(), 1);
    Ok(())
}

#[test]
fn prune_events_carry_the_callers_correlation_and_name_their_causes() -> TestResult {
    let (_dir, root) = init();
    let session = create(&root, "setup");
    sandlog(&root)
        .args([
            "--correlation-id",
            "nightly-prune",
            "prune",
            "--older-than",
            "0s",
        ])
        .assert()
        .success();
    let run = log(&root, &["--correlation", "nightly-prune"]);
    let kinds: Vec<&str> = run.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "prune.run.started",
            "session.prune.requested",
            "session.pruned",
            "prune.run.completed",
            // The moved workspace's bytes freed behind the run, as the
            // process ended.
            "workspace.reclaimed"
        ],
        "{run:#?}"
    );
    let started = &run[0]["event_id"];
    assert_eq!(run[1]["causation_id"], *started);
    assert_eq!(run[1]["stream"], format!("session/{session}"));
    assert_eq!(run[2]["causation_id"], run[1]["event_id"]);
    assert_eq!(run[3]["causation_id"], *started);
    Ok(())
}

#[test]
fn log_checkpoint_prints_only_what_the_consumer_has_not_seen() -> TestResult {
    let (_dir, root) = init();
    create(&root, "a");
    let first = log(&root, &["--checkpoint", "exporter"]);
    assert_eq!(first.len(), 2);
    assert!(log(&root, &["--checkpoint", "exporter"]).is_empty());
    create(&root, "b");
    let next = log(&root, &["--checkpoint", "exporter"]);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0]["position"], 3);
    // Filters apply; another consumer has its own checkpoint.
    let created = log(
        &root,
        &["--checkpoint", "creations", "--kind", "session.created"],
    );
    assert_eq!(created.len(), 2);
    // Position flags and a checkpoint do not mix; a bad name is refused.
    sandlog(&root)
        .args(["log", "--checkpoint", "x", "--tail", "1"])
        .assert()
        .code(2);
    sandlog(&root)
        .args(["log", "--checkpoint", ""])
        .assert()
        .code(2);
    Ok(())
}

/// `log --follow --checkpoint NAME` killed and started again resumes at
/// or before the first event it had not printed, and prints what came
/// meanwhile.
#[test]
fn log_follow_with_a_checkpoint_resumes_after_a_kill() -> TestResult {
    let (_dir, root) = init();
    for n in 0..5 {
        create(&root, &format!("t{n}"));
    }
    let follow =
        |root: &Path| -> std::io::Result<(std::process::Child, std::sync::mpsc::Receiver<Value>)> {
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandlog"))
                .env_remove("SANDLOG_ROOT")
                .env_remove("SANDLOG_CORRELATION_ID")
                .arg("--root")
                .arg(root)
                .args(["--json", "log", "--follow", "--checkpoint", "tail"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()?;
            let stdout = child.stdout.take().unwrap();
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let Ok(value) = serde_json::from_str::<Value>(&line) else {
                        break;
                    };
                    if sender.send(value).is_err() {
                        break;
                    }
                }
            });
            Ok((child, receiver))
        };
    let position = |event: Value| event["position"].as_u64().unwrap();
    let wait = Duration::from_secs(30);
    let (mut child, lines) = follow(&root)?;
    let events = log(&root, &[]).len() as u64;
    let printed: Vec<u64> = (0..events)
        .map(|_| lines.recv_timeout(wait).map(position))
        .collect::<Result<_, _>>()?;
    assert_eq!(printed, (1..=events).collect::<Vec<_>>());
    child.kill()?;
    child.wait()?;
    create(&root, "later");
    let (mut child, lines) = follow(&root)?;
    let first = lines.recv_timeout(wait).map(position)?;
    assert!(
        first <= events + 1,
        "resumed at {first}, past the first unprinted event"
    );
    let mut last = first;
    while last < events + 1 {
        let next = lines.recv_timeout(wait).map(position)?;
        assert_eq!(next, last + 1);
        last = next;
    }
    child.kill()?;
    child.wait()?;
    Ok(())
}
