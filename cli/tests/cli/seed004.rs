//! The workspace manager of seed 004, audited: a task gives three agents
//! their own workspaces (a context file, read-only task data, a size
//! limit), each agent runs natively in its workspace through `sandlog
//! run`, one passes its size limit, a process outside sandlog changes a
//! workspace and `session sync` records it, and the group is deleted. The
//! log tells the whole story with the right actors under one correlation
//! id; `verify` passes and `reconcile` finds nothing. The agent is a real
//! shell script run as a real process.

#![cfg(test)]

use std::path::Path;

use crate::common::sandlog;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const TASK: &str = "task-42";

/// The stand-in agent: reads its context and the task data, writes its
/// work, removes a scratch file, and (when told to) writes more than its
/// workspace may hold.
const AGENT: &str = r#"#!/bin/sh
set -eu
test -f CLAUDE.md
mkdir -p work output
cat "$1/input.txt" > work/copied.txt
echo "done by $SANDLOG_SESSION_ID" > output/result.txt
echo scratch > work/scratch.txt
rm work/scratch.txt
if [ "${2:-}" = big ]; then
  head -c 100000 /dev/zero > output/huge.bin
fi
echo "agent finished"
"#;

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(bytes)))
}

/// `sandlog --json` as `actor` under the task's correlation id; asserts
/// the exit code and returns stdout as JSON (JSON Lines as an array).
fn task_command(root: &Path, actor: &str, args: &[&str], code: i32) -> Value {
    let output = sandlog(root)
        .args(["--json", "--actor", actor, "--correlation-id", TASK])
        .args(args)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(code),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    if args.first() == Some(&"log") {
        Value::Array(text.lines().map(|line| json(line.as_bytes())).collect())
    } else {
        json(text.trim().as_bytes())
    }
}

#[test]
fn seed_004_flow_is_recorded_end_to_end() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    sandlog(&root).arg("init").assert().success();
    let claude = dir.path().join("CLAUDE.md");
    std::fs::write(&claude, "# Task 42\nCopy the input into work/.\n")?;
    let spec = dir.path().join("task_spec.json");
    std::fs::write(&spec, "{\"task_id\":\"task-42\"}")?;
    let data = dir.path().join("task-data");
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("input.txt"), "the input\n")?;
    let agent = dir.path().join("agent.sh");
    std::fs::write(&agent, AGENT)?;

    // Something outside the task, to show the correlation filter leaves
    // it out.
    sandlog(&root)
        .args(["--actor", "someone-else", "session", "create"])
        .assert()
        .success();

    // The orchestrator creates the group.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = task_command(
            &root,
            "orchestrator",
            &[
                "session",
                "create",
                "--group",
                TASK,
                "--context",
                claude.to_str().unwrap(),
                "--context",
                &format!(".ipa/task_spec.json={}", spec.display()),
                "--readonly",
                data.to_str().unwrap(),
                "--max-size",
                "64KiB",
            ],
            0,
        );
        ids.push(created["session_id"].as_str().unwrap().to_owned());
    }

    // Each agent runs natively in its own workspace; the third writes past
    // the size limit, which is recorded, not prevented.
    for (index, id) in ids.iter().enumerate() {
        let actor = format!("agent-{index}");
        let mut args = vec!["run", id.as_str(), "--", "sh"];
        let agent = agent.to_str().unwrap();
        args.push(agent);
        let data = data.to_str().unwrap();
        args.push(data);
        if index == 2 {
            args.push("big");
        }
        let ran = task_command(&root, &actor, &args, 0);
        assert_eq!(ran["exit_code"], 0, "{ran}");
        let written = ran["files_written"].as_array().unwrap();
        assert!(
            written.iter().any(|path| path == "work/copied.txt"),
            "{ran}"
        );
        assert!(
            !written.iter().any(|path| path == "work/scratch.txt"),
            "a file created and removed within the run is no change: {ran}"
        );
        assert_eq!(
            ran["size_exceeded"].is_object(),
            index == 2,
            "size limit breach flagged only for the third agent: {ran}"
        );
    }

    // A process outside sandlog changes the first workspace; a sync
    // records it for the agent that did it.
    let path = task_command(&root, "orchestrator", &["session", "path", &ids[0]], 0);
    let workspace = Path::new(path["path"].as_str().unwrap());
    std::fs::write(workspace.join("work/extra.txt"), "written outside\n")?;
    std::fs::remove_file(workspace.join("output/result.txt"))?;
    let synced = task_command(&root, "agent-0", &["session", "sync", &ids[0]], 0);
    assert_eq!(
        synced["files_written"],
        serde_json::json!(["work/extra.txt"])
    );
    assert_eq!(
        synced["files_deleted"],
        serde_json::json!(["output/result.txt"])
    );

    // Sync and drift detection agree: nothing left to find.
    let reconciled = task_command(&root, "orchestrator", &["reconcile", "--deep"], 0);
    assert_eq!(reconciled["drift"], serde_json::json!([]), "{reconciled}");
    assert_eq!(reconciled["orphans"], serde_json::json!([]), "{reconciled}");

    // The group ends.
    let deleted = task_command(
        &root,
        "orchestrator",
        &[
            "session",
            "delete",
            "--group",
            TASK,
            "--reason",
            "task done",
        ],
        0,
    );
    assert_eq!(deleted["deleted"].as_array().unwrap().len(), 3, "{deleted}");

    // The log tells it all, under one correlation id, with the right
    // actors, and nothing else.
    let events = task_command(&root, "auditor", &["log", "--correlation", TASK], 0);
    let events = events.as_array().unwrap();
    let correlation = events[0]["correlation_id"].clone();
    assert!(correlation.is_string(), "{}", events[0]);
    let mut story: Vec<(String, String)> = Vec::new();
    for event in events {
        assert_eq!(event["correlation_id"], correlation, "{event}");
        assert_ne!(event["actor"], "someone-else", "{event}");
        story.push((
            event["actor"].as_str().unwrap().to_owned(),
            event["kind"].as_str().unwrap().to_owned(),
        ));
    }
    let of = |actor: &str, kind: &str| {
        story
            .iter()
            .filter(|(who, what)| who == actor && what == kind)
            .count()
    };
    assert_eq!(of("orchestrator", "session.created"), 3, "{story:?}");
    // Two context files per session, by the creating actor.
    assert_eq!(of("orchestrator", "file.written"), 6, "{story:?}");
    for index in 0..3 {
        let actor = format!("agent-{index}");
        assert_eq!(of(&actor, "native.started"), 1, "{story:?}");
        assert_eq!(of(&actor, "native.completed"), 1, "{story:?}");
        assert!(of(&actor, "file.written") >= 2, "{story:?}");
    }
    assert_eq!(of("agent-0", "session.synced"), 1, "{story:?}");
    assert_eq!(of("agent-0", "file.deleted"), 1, "{story:?}");
    assert_eq!(
        of("orchestrator", "session.delete.requested"),
        3,
        "{story:?}"
    );
    assert_eq!(of("orchestrator", "session.deleted"), 3, "{story:?}");
    let breach = events
        .iter()
        .filter(|event| event["kind"] == "native.completed")
        .filter(|event| event["payload"]["size_exceeded"].is_object())
        .count();
    assert_eq!(breach, 1);

    sandlog(&root).arg("verify").assert().success();
    let after = sandlog(&root)
        .args(["--json", "reconcile", "--deep"])
        .output()?;
    assert_eq!(after.status.code(), Some(0));
    let after = json(&after.stdout);
    assert_eq!(after["drift"], serde_json::json!([]));
    assert_eq!(after["orphans"], serde_json::json!([]));
    Ok(())
}
