//! `session create --group/--context/--readonly/--max-size`, `session list
//! --group`, `session path`, `session delete --group` and `prune --group`,
//! through the real binary on a fresh root.

#![cfg(test)]

use crate::common::sandlog;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(bytes)))
}

fn init(root: &std::path::Path) {
    sandlog(root).arg("init").assert().success();
}

fn create(root: &std::path::Path, args: &[&str]) -> String {
    let output = sandlog(root)
        .args(["--json", "session", "create"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    json(&output.stdout)["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_task_session_starts_with_its_context_data_and_limit() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    init(&root);
    let claude = dir.path().join("CLAUDE.md");
    std::fs::write(&claude, "# Task 42\nwrite tests\n")?;
    let spec = dir.path().join("spec.json");
    std::fs::write(&spec, "{\"task\":42}")?;
    let data = dir.path().join("task-data");
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("input.txt"), "42\n")?;

    let id = create(
        &root,
        &[
            "--group",
            "task-42",
            "--context",
            claude.to_str().unwrap(),
            "--context",
            &format!(".task/spec.json={}", spec.display()),
            "--readonly",
            data.to_str().unwrap(),
            "--max-size",
            "1MiB",
        ],
    );
    let shown = sandlog(&root)
        .args(["--json", "session", "show", &id])
        .output()?;
    let shown = json(&shown.stdout);
    assert_eq!(shown["group"], "task-42");
    assert_eq!(shown["max_size"], 1024 * 1024);
    assert_eq!(shown["files"], 2);
    assert_eq!(shown["readonly"][0]["guest_path"], "/data/task-data");

    let path = sandlog(&root).args(["session", "path", &id]).output()?;
    let path = String::from_utf8(path.stdout)?;
    let workspace = std::path::Path::new(path.trim_end());
    assert!(workspace.ends_with(&id), "{path}");
    assert_eq!(
        std::fs::read_to_string(workspace.join(".task/spec.json"))?,
        "{\"task\":42}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("CLAUDE.md"))?,
        "# Task 42\nwrite tests\n"
    );

    // The guest reads the task data and cannot change it.
    let run = sandlog(&root)
        .args([
            "exec",
            &id,
            "--code",
            "print(open('/data/task-data/input.txt').read().strip())",
        ])
        .output()?;
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8(run.stdout)?, "42\n");

    // Past the size limit: refused, the limit named.
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![0u8; 2 * 1024 * 1024])?;
    let refused = sandlog(&root)
        .args(["--json", "files", "put", &id, "big.bin", "--from"])
        .arg(&big)
        .output()?;
    assert!(!refused.status.success());
    let error = json(&refused.stderr);
    // Streamed, so refused one chunk past the limit rather than up front.
    assert_eq!(error["error"]["kind"], "too_large", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("quota of 1048576 bytes"),
        "{error}"
    );
    Ok(())
}

#[test]
fn bad_creation_input_is_refused_by_name() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    init(&root);
    let file = dir.path().join("note.md");
    std::fs::write(&file, "note")?;
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec![
                "--context".into(),
                format!("../escape.md={}", file.display()),
            ],
            2,
            "escape",
        ),
        (
            vec!["--context".into(), dir.path().display().to_string()],
            2,
            "not a regular file",
        ),
        (
            vec![
                "--context".into(),
                dir.path().join("nope").display().to_string(),
            ],
            1,
            "nope",
        ),
        (vec!["--max-size".into(), "lots".into()], 2, "lots"),
        (
            vec![
                "--max-size".into(),
                "2B".into(),
                "--context".into(),
                file.display().to_string(),
            ],
            2,
            "max-size",
        ),
        (
            vec![
                "--readonly".into(),
                dir.path().join("missing").display().to_string(),
            ],
            2,
            "missing",
        ),
    ];
    for (args, code, said) in cases {
        let output = sandlog(&root)
            .args(["session", "create"])
            .args(&args)
            .output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    let listed = sandlog(&root)
        .args(["--json", "session", "list"])
        .output()?;
    assert_eq!(json(&listed.stdout), serde_json::json!([]));
    Ok(())
}

#[test]
fn a_group_is_listed_pruned_and_deleted_together() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    init(&root);
    let task: Vec<String> = (0..3)
        .map(|_| create(&root, &["--group", "task-7"]))
        .collect();
    let other = create(&root, &["--group", "task-8"]);
    let loose = create(&root, &[]);

    let listed = sandlog(&root)
        .args(["--json", "session", "list", "--group", "task-7"])
        .output()?;
    let listed: Vec<String> = json(&listed.stdout)
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, task);

    // Keep the group's newest two: its oldest goes, nothing else.
    let pruned = sandlog(&root)
        .args([
            "--json",
            "prune",
            "--group",
            "task-7",
            "--max-sessions",
            "2",
        ])
        .output()?;
    assert!(pruned.status.success());
    assert_eq!(
        json(&pruned.stdout)["deleted_sessions"],
        serde_json::json!([task[0]])
    );

    let deleted = sandlog(&root)
        .args(["--json", "session", "delete", "--group", "task-7"])
        .output()?;
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    let deleted = json(&deleted.stdout);
    let ids: Vec<&str> = deleted["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|report| report["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![task[1].as_str(), task[2].as_str()]);
    assert_eq!(deleted["failed"], serde_json::json!([]));

    // Each deletion has its own intent and completion.
    for id in &task[1..] {
        let log = sandlog(&root)
            .args(["--json", "log", "--session", id])
            .output()?;
        let kinds: Vec<String> = String::from_utf8(log.stdout)?
            .lines()
            .map(|line| json(line.as_bytes())["kind"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            kinds,
            [
                "session.created",
                "session.delete.requested",
                "session.deleted"
            ]
        );
    }
    let active = sandlog(&root)
        .args(["--json", "session", "list", "--status", "active"])
        .output()?;
    let active: Vec<String> = json(&active.stdout)
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(active, vec![other, loose]);

    // An unknown group is "not found".
    sandlog(&root)
        .args(["session", "delete", "--group", "task-9"])
        .assert()
        .code(3);
    Ok(())
}
