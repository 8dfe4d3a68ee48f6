//! The CLI's output, point by point: `files ls --tree` as a tree; sizes in
//! binary units; a dry-run prune's "would"; an unknown `log --kind`; the
//! log's WHAT column cut to the width; `--format tsv`'s raw numbers;
//! `session list` live by default; `--json` errors as `--help` describes
//! them; the demo's closing commands; a guest traceback of the user's code
//! only. Each test runs the real binary on a fresh root.

#![cfg(test)]

use std::path::{Path, PathBuf};

use crate::common::sandlog;
use serde_json::Value;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

fn stdout_of(command: &mut assert_cmd::Command) -> String {
    String::from_utf8(command.assert().success().get_output().stdout.clone()).unwrap()
}

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    (dir, root)
}

fn create(root: &Path) -> String {
    let created = json(
        &sandlog(root)
            .args(["--json", "session", "create"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    created["session_id"].as_str().unwrap().to_owned()
}

fn put(root: &Path, id: &str, path: &str, bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("input");
    std::fs::write(&file, bytes).unwrap();
    sandlog(root)
        .args(["files", "put", id, path, "--from"])
        .arg(&file)
        .assert()
        .success();
}

#[test]
fn files_ls_tree_prints_a_tree() {
    let (_dir, root) = init();
    let id = create(&root);
    put(&root, &id, "notes/a.txt", b"alpha");
    put(&root, &id, "notes/deep/b.txt", &[0; 2048]);
    put(&root, &id, "top.txt", b"x");
    let tree = stdout_of(sandlog(&root).args(["files", "ls", &id, "--tree"]));
    assert_eq!(
        tree,
        ".\n\
         ├── notes/\n\
         │   ├── a.txt  5 B\n\
         │   └── deep/\n\
         │       └── b.txt  2 KiB\n\
         └── top.txt  1 B\n"
    );
    // --json keeps the nested document.
    let document = json(
        &sandlog(&root)
            .args(["--json", "files", "ls", &id, "--tree"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(document["notes"]["deep"]["b.txt"]["size"], 2048);
}

#[test]
fn sizes_are_in_binary_units() {
    let (_dir, root) = init();
    let id = create(&root);
    put(&root, &id, "big.bin", &vec![1; 65_536]);
    let listed = stdout_of(sandlog(&root).args(["files", "ls", &id]));
    assert!(listed.contains("64 KiB"), "{listed}");
    let settings = stdout_of(sandlog(&root).args(["config", "list"]));
    assert!(settings.contains("32 MiB"), "{settings}");
    let stats = stdout_of(sandlog(&root).args(["stats"]));
    for text in [&listed, &settings, &stats] {
        assert!(
            !text.contains(" KB") && !text.contains(" MB") && !text.contains(" GB"),
            "a decimal unit: {text}"
        );
    }
}

#[test]
fn a_dry_run_prune_says_what_it_would_do() {
    let (_dir, root) = init();
    let id = create(&root);
    let text = stdout_of(sandlog(&root).args(["prune", "--older-than", "0s", "--dry-run"]));
    assert!(text.contains("would delete"), "{text}");
    assert!(
        text.contains("1 session would be deleted, 0 skipped"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("(dry run)"), "{text}");
    let dry = json(
        &sandlog(&root)
            .args(["--json", "prune", "--older-than", "0s", "--dry-run"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(dry["would_delete"][0], id.as_str(), "{dry}");
    let real = json(
        &sandlog(&root)
            .args(["--json", "prune", "--older-than", "0s"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(real["would_delete"], serde_json::json!([]), "{real}");
    assert_eq!(real["deleted_sessions"][0], id.as_str(), "{real}");
    assert!(
        real["summary"]
            .as_str()
            .unwrap()
            .starts_with("1 session deleted"),
        "{real}"
    );
    let log = stdout_of(sandlog(&root).args(["--wide", "log", "--kind", "prune.run.started"]));
    assert!(log.contains("(1 candidate)"), "{log}");
}

#[test]
fn an_unknown_log_kind_is_a_usage_error_naming_the_kinds() {
    let (_dir, root) = init();
    let refused = sandlog(&root)
        .args(["log", "--kind", "session.craeted"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("\"session.craeted\""), "{stderr}");
    assert!(
        stderr.contains("session.created"),
        "the kinds are listed: {stderr}"
    );
    assert!(refused.stdout.is_empty());
    let refused = sandlog(&root)
        .args(["--json", "log", "--kind", "nothing.*"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert_eq!(json(&refused.stderr)["error"]["kind"], "unknown_kind");
    // Known kinds and prefixes still work.
    sandlog(&root)
        .args([
            "log",
            "--kind",
            "session.created",
            "--kind",
            "session.prune.*",
        ])
        .assert()
        .success();
}

#[test]
fn the_log_fits_the_width_and_wide_shows_all() {
    let (_dir, root) = init();
    let id = create(&root);
    let long = format!("{}/file.txt", "a-long-directory-name".repeat(8));
    put(&root, &id, &long, b"x");
    let fitted = sandlog(&root)
        .env("COLUMNS", "120")
        .args(["log"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let fitted = String::from_utf8(fitted).unwrap();
    for line in fitted.lines() {
        assert!(line.chars().count() <= 120, "wider than 120: {line:?}");
    }
    assert!(fitted.contains('…'), "{fitted}");
    assert!(!fitted.contains(&long), "{fitted}");
    let wide = stdout_of(sandlog(&root).env("COLUMNS", "120").args(["--wide", "log"]));
    assert!(wide.contains(&long), "{wide}");
}

#[test]
fn tsv_prints_raw_numbers() {
    let (_dir, root) = init();
    let id = create(&root);
    put(&root, &id, "big.bin", &vec![1; 65_536]);
    let files = stdout_of(sandlog(&root).args(["--format", "tsv", "files", "ls", &id]));
    let row = files.lines().nth(1).unwrap();
    assert_eq!(row.split('\t').nth(1), Some("65536"), "{files}");
    let sessions = stdout_of(sandlog(&root).args(["--format", "tsv", "session", "list"]));
    let header: Vec<&str> = sessions.lines().next().unwrap().split('\t').collect();
    let size = header.iter().position(|name| *name == "size").unwrap();
    let row: Vec<&str> = sessions.lines().nth(1).unwrap().split('\t').collect();
    assert_eq!(row[size], "65536", "{sessions}");
    let prune = stdout_of(sandlog(&root).args([
        "--format",
        "tsv",
        "prune",
        "--older-than",
        "0s",
        "--dry-run",
    ]));
    let row: Vec<&str> = prune.lines().nth(1).unwrap().split('\t').collect();
    assert!(
        row[1].parse::<u64>().is_ok(),
        "idle in microseconds: {prune}"
    );
    assert_eq!(row[3], "65536", "{prune}");
}

#[test]
fn session_list_shows_live_sessions_unless_all() {
    let (_dir, root) = init();
    let live = create(&root);
    let gone = create(&root);
    sandlog(&root)
        .args(["session", "delete", &gone])
        .assert()
        .success();
    let listed = json(
        &sandlog(&root)
            .args(["--json", "session", "list"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [live.as_str()]);
    let all = json(
        &sandlog(&root)
            .args(["--json", "session", "list", "--all"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    let text = stdout_of(sandlog(&root).args(["session", "list", "-a"]));
    assert!(text.contains("deleted"), "{text}");
    let deleted = json(
        &sandlog(&root)
            .args(["--json", "session", "list", "--status", "deleted"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(deleted[0]["session_id"], gone.as_str());
}

#[test]
fn json_errors_are_as_help_describes_them() {
    let (_dir, root) = init();
    let help = stdout_of(sandlog(&root).args(["--help"]));
    assert!(
        help.contains(r#"{"error":{"kind","class","message"}}"#),
        "{help}"
    );
    assert!(!help.contains(r#"{"error":{"kind","message"}}"#), "{help}");
    let failed = sandlog(&root)
        .args(["--json", "session", "show", "00000000"])
        .assert()
        .code(3)
        .get_output()
        .clone();
    let error = json(&failed.stderr);
    let mut keys: Vec<&String> = error["error"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["class", "kind", "message"], "{error}");
}

#[test]
fn the_demos_closing_commands_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("demo root");
    let demo = stdout_of(sandlog(&root).arg("demo"));
    let tried: Vec<&str> = demo
        .lines()
        .skip_while(|line| !line.ends_with("Try:"))
        .skip(1)
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(tried.len(), 3, "{demo}");
    for command in tried {
        assert!(
            command.ends_with("session list")
                || command.ends_with("log --limit 20")
                || command.ends_with("verify"),
            "{command}"
        );
        let ran = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .env(
                "SANDLOG_RUNTIMES_DIR",
                std::env::var_os("SANDLOG_RUNTIMES_DIR").unwrap_or_default(),
            )
            .output()
            .unwrap();
        assert!(ran.status.success(), "{command}: {ran:?}");
        assert!(!ran.stdout.is_empty(), "{command}");
    }
}

#[test]
fn a_guest_traceback_shows_the_users_code_only() {
    let (_dir, root) = init();
    let id = create(&root);
    let failed = sandlog(&root)
        .args(["exec", &id, "--code", "def f():\n    return 1 / 0\nf()\n"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    let frames: Vec<&str> = stderr
        .lines()
        .filter(|line| line.trim_start().starts_with("File "))
        .collect();
    assert_eq!(
        frames,
        [
            "  File \"<string>\", line 3, in <module>",
            "  File \"<string>\", line 2, in f"
        ],
        "{stderr}"
    );
    // A syntax error has no frame of the user's: no traceback, as `-c`.
    let failed = sandlog(&root)
        .args(["exec", &id, "--code", "1 +"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("SyntaxError"), "{stderr}");
    assert!(!stderr.contains("Traceback"), "{stderr}");
}
