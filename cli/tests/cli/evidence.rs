//! The evidence commands of the `sandlog` binary (issue #12): `exec show`,
//! `files cat --at`, `files restore`, `blob cat`, `session fork`, legal
//! holds, `erase`, `gc`, `config`, `exec --evidence` and the timeline's
//! excerpts. The real binary on temporary roots running the real
//! python.wasm; each python execution costs a fraction of a second, so the
//! scenarios share their sessions.

#![cfg(test)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

use crate::common::sandlog;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

/// Runs `command`, which must succeed, and returns its stdout.
fn stdout_success(command: &mut Command) -> Vec<u8> {
    command.assert().success().get_output().stdout.clone()
}

/// Runs `command`, which must succeed, and returns its stdout as text.
fn text_success(command: &mut Command) -> String {
    String::from_utf8(stdout_success(command))
        .unwrap_or_else(|error| panic!("stdout is not UTF-8: {error}"))
}

/// Runs `command`, which must succeed, and parses its stdout as JSON.
fn json_success(command: &mut Command) -> Value {
    json(&stdout_success(command))
}

/// Runs `command`, which must exit with `code`, and returns its stderr.
fn stderr_failure(command: &mut Command, code: i32) -> String {
    String::from_utf8_lossy(&command.assert().code(code).get_output().stderr).into_owned()
}

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    (dir, root)
}

fn create(root: &Path) -> String {
    let created = json_success(sandlog(root).args(["--json", "session", "create"]));
    created["session_id"].as_str().unwrap().to_owned()
}

/// Runs python `code` in `id`, which must succeed; returns `exec --json`.
fn exec(root: &Path, id: &str, code: &str, extra: &[&str]) -> Value {
    json_success(
        sandlog(root)
            .args(["--json", "exec", id, "--code", code])
            .args(extra),
    )
}

/// Every regular file under `dir`, by its path relative to `dir`.
fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            } else {
                let relative = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

const FIRST: &str = "import os\nos.makedirs('sub', exist_ok=True)\nopen('a.txt','w').write('version one\\n')\nopen('sub/b.bin','wb').write(bytes(range(256)) * 40)\nprint('first-out marker')";
const SECOND: &str = "open('a.txt','w').write('version two\\n')\nimport sys\nprint('second-out')\nprint('oops', file=sys.stderr)";

/// Executions keep their code, output and files; `exec show` shows them;
/// `files cat --at` and `files restore` give the workspace as it was before
/// a file was overwritten; `blob cat`, `session fork` and the timeline read
/// the same evidence.
#[test]
fn executions_are_kept_and_read_back() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    exec(&root, &id, FIRST, &[]);
    let second = exec(&root, &id, SECOND, &[]);
    let second_position = second["position"].as_u64().expect("exec --json position");

    // exec show --json: the record with its content and files.
    let record = json_success(sandlog(&root).args(["--json", "exec", "show", &id, "1"]));
    assert_eq!(record["number"], 1);
    assert_eq!(record["outcome"], "ok");
    assert_eq!(record["exit_code"], 0);
    assert_eq!(record["code"]["state"], "kept");
    assert_eq!(record["code"]["text"], FIRST);
    assert_eq!(record["stdout"]["text"], "first-out marker\n");
    assert_eq!(record["evidence"]["kept_files"], 2);
    let written: Vec<&str> = record["files_written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap())
        .collect();
    assert_eq!(written, ["a.txt", "sub/b.bin"]);
    assert!(
        record["files_written"]
            .as_array()
            .unwrap()
            .iter()
            .all(|file| file["content_kept"] == true)
    );
    // By position, the same execution.
    let first_position = record["position"].as_u64().unwrap();
    let by_position = json_success(sandlog(&root).args([
        "--json",
        "exec",
        "show",
        &id,
        &format!("@{first_position}"),
    ]));
    assert_eq!(by_position["number"], 1);

    // Human: header, code, output and files with what was kept.
    let shown = text_success(sandlog(&root).args(["exec", "show", &id, "2"]));
    for needle in [
        "execution 2 of session",
        "outcome   ok, exit code 0",
        "limits    fuel",
        "print('second-out')",
        "second-out",
        "oops",
        "wrote   a.txt",
        ": kept",
    ] {
        assert!(
            shown.contains(needle),
            "exec show lacks {needle:?}:\n{shown}"
        );
    }
    // No such execution: not found.
    let missing = stderr_failure(sandlog(&root).args(["exec", "show", &id, "9"]), 3);
    assert!(missing.contains("has no execution 9"), "{missing}");

    // files cat: now, and as of just before the second execution.
    let before = (second_position - 1).to_string();
    assert_eq!(
        stdout_success(sandlog(&root).args(["files", "cat", &id, "a.txt"])),
        b"version two\n"
    );
    assert_eq!(
        stdout_success(sandlog(&root).args(["files", "cat", &id, "a.txt", "--at", &before])),
        b"version one\n"
    );

    // files restore: the workspace as it was, byte for byte.
    let restored = dir.path().join("restored");
    let report = json_success(sandlog(&root).args([
        "--json",
        "files",
        "restore",
        &id,
        "--at",
        &before,
        "--to",
        restored.to_str().unwrap(),
    ]));
    assert_eq!(report["files"], 2);
    assert_eq!(report["bytes"], 12 + 256 * 40);
    assert_eq!(report["missing"], serde_json::json!([]));
    assert_eq!(report["position"], second_position - 1);
    let files = tree(&restored);
    assert_eq!(files.len(), 2, "{:?}", files.keys());
    assert_eq!(files["a.txt"], b"version one\n");
    let expected: Vec<u8> = (0..40).flat_map(|_| 0u8..=255).collect();
    assert_eq!(files["sub/b.bin"], expected);
    // Into a directory that holds anything: refused, nothing overwritten.
    let refused = stderr_failure(
        sandlog(&root).args([
            "files",
            "restore",
            &id,
            "--at",
            &before,
            "--to",
            restored.to_str().unwrap(),
        ]),
        2,
    );
    assert!(refused.contains("not empty"), "{refused}");

    // blob cat: the code by its blake3; a malformed hash is bad input.
    let code_hash = record["code"]["blake3"].as_str().unwrap();
    assert_eq!(
        stdout_success(sandlog(&root).args(["blob", "cat", code_hash])),
        FIRST.as_bytes()
    );
    stderr_failure(sandlog(&root).args(["blob", "cat", "nothex"]), 2);
    // A well-formed hash no blob has is not found (exit 3), said plainly.
    let unknown = "00".repeat(32);
    let message = stderr_failure(sandlog(&root).args(["blob", "cat", &unknown]), 3);
    assert!(message.contains("no blob"), "{message}");

    // session fork: a new session with the workspace as it was.
    let fork = json_success(sandlog(&root).args([
        "--json", "session", "fork", &id, "--at", &before, "--label", "case=7",
    ]));
    assert_eq!(fork["forked_from"], id.as_str());
    assert_eq!(fork["at"], second_position - 1);
    assert_eq!(fork["files"], 2);
    let fork_id = fork["session_id"].as_str().unwrap();
    assert_ne!(fork_id, id);
    assert_eq!(
        stdout_success(sandlog(&root).args(["files", "cat", fork_id, "a.txt"])),
        b"version one\n"
    );

    // The timeline shows an excerpt of each execution's code and output.
    let timeline = text_success(sandlog(&root).args(["session", "timeline", &id]));
    assert!(timeline.contains("first-out marker"), "{timeline}");
    assert!(timeline.contains("second-out"), "{timeline}");
    assert!(timeline.contains("import os"), "{timeline}");
    let events = json_success(sandlog(&root).args(["--json", "session", "timeline", &id]));
    let executions: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event.get("execution"))
        .collect();
    assert_eq!(executions.len(), 2);
    assert_eq!(executions[0]["stdout"]["text"], "first-out marker\n");
    assert_eq!(executions[1]["stderr"]["text"], "oops\n");

    // Blob totals in stats.
    let stats = json_success(sandlog(&root).args(["--json", "stats"]));
    assert!(stats["blobs"]["kept"].as_u64().unwrap() >= 6, "{stats}");
    assert_eq!(stats["blobs"]["erased"], 0);
    Ok(())
}

/// A held session is skipped by prune and refused by delete and erase,
/// each naming `session release`; once released, `erase` removes the
/// bytes, reading them says they were erased, `verify` still passes, and
/// `gc` reports what it did.
#[test]
fn holds_erasure_and_gc() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    exec(
        &root,
        &id,
        "open('secret.txt','w').write('personal data 4711\\n')",
        &[],
    );

    let held =
        json_success(sandlog(&root).args(["--json", "session", "hold", &id, "--reason", "case 7"]));
    assert_eq!(held, serde_json::json!({"session_id": id, "held": true}));
    let shown = json_success(sandlog(&root).args(["--json", "session", "show", &id]));
    assert_eq!(shown["held"], true);
    assert_eq!(shown["hold_reason"], "case 7");
    let list = text_success(sandlog(&root).args(["session", "list"]));
    assert!(list.contains("HELD"), "{list}");

    let pruned = json_success(sandlog(&root).args(["--json", "prune", "--older-than", "0s"]));
    assert_eq!(pruned["deleted_sessions"], serde_json::json!([]));
    let reason = pruned["skipped_reasons"][&id].as_str().unwrap_or_default();
    assert!(reason.contains("held"), "{pruned}");
    let refused = stderr_failure(sandlog(&root).args(["session", "delete", &id]), 1);
    assert!(
        refused.contains(&format!("sandlog session release {id}")),
        "{refused}"
    );
    let refused = stderr_failure(
        sandlog(&root).args(["--json", "erase", &id, "--reason", "gdpr"]),
        1,
    );
    assert_eq!(json(refused.as_bytes())["error"]["kind"], "held");

    let released = json_success(sandlog(&root).args(["--json", "session", "release", &id]));
    assert_eq!(released["held"], false);
    let erased = json_success(sandlog(&root).args([
        "--json",
        "erase",
        &id,
        "--path",
        "secret.txt",
        "--reason",
        "gdpr art. 17",
    ]));
    assert_eq!(erased["erased"], 1);
    assert_eq!(erased["bytes"], 19);
    assert_eq!(erased["kept_for_hold"], 0);
    assert_eq!(erased["wal_cleared"], true);

    let head = json_success(sandlog(&root).args(["--json", "digest"]));
    let at = head["position"].as_u64().unwrap().to_string();
    let message = stderr_failure(
        sandlog(&root).args(["files", "cat", &id, "secret.txt", "--at", &at]),
        1,
    );
    assert!(message.contains("erased"), "{message}");
    assert!(message.contains("gdpr art. 17"), "{message}");
    // The code is untouched by a path-limited erasure.
    let record = json_success(sandlog(&root).args(["--json", "exec", "show", &id, "1"]));
    assert_eq!(record["code"]["state"], "kept");
    assert_eq!(
        record["files_written"][0]["blake3"].as_str().map(str::len),
        Some(64)
    );
    let verified = json_success(sandlog(&root).args(["--json", "verify"]));
    assert_eq!(verified["ok"], true);

    let gc = json_success(sandlog(&root).args(["--json", "gc"]));
    for field in [
        "blobs_removed",
        "bytes_freed",
        "blobs_erased",
        "bytes_erased",
    ] {
        assert!(gc[field].is_u64(), "gc lacks {field}: {gc}");
    }
    // Retention: everything is older than 0s, so the rest is erased.
    let gc = json_success(sandlog(&root).args(["--json", "gc", "--evidence-older-than", "0s"]));
    assert!(gc["blobs_erased"].as_u64().unwrap() >= 1, "{gc}");
    let record = json_success(sandlog(&root).args(["--json", "exec", "show", &id, "1"]));
    assert_eq!(record["code"]["state"], "erased");
    let stats = json_success(sandlog(&root).args(["--json", "stats"]));
    assert!(stats["blobs"]["erased"].as_u64().unwrap() >= 2, "{stats}");
    Ok(())
}

/// `config` sets the root's evidence budget; `exec --evidence 0` turns it
/// off for one execution; `exec show` and `files restore` say what was not
/// kept.
#[test]
fn evidence_budget_settings() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);

    let got = json_success(sandlog(&root).args(["--json", "config", "get", "evidence.budget"]));
    assert_eq!(got["value"], Value::Null);
    sandlog(&root)
        .args(["config", "set", "evidence.budget", "10MiB"])
        .assert()
        .success();
    assert_eq!(
        text_success(sandlog(&root).args(["config", "get", "evidence.budget"])).trim(),
        "10MiB"
    );
    let listed = json_success(sandlog(&root).args(["--json", "config", "list"]));
    assert_eq!(listed[0]["key"], "evidence.budget");
    assert_eq!(listed[0]["value"], "10MiB");
    stderr_failure(
        sandlog(&root).args(["config", "set", "evidence.budget", "lots"]),
        2,
    );
    let unknown = stderr_failure(sandlog(&root).args(["config", "get", "no.such"]), 2);
    assert!(unknown.contains("evidence.budget"), "{unknown}");

    exec(
        &root,
        &id,
        "open('off.txt','w').write('not kept')\nprint('unseen')",
        &["--evidence", "0"],
    );
    let record = json_success(sandlog(&root).args(["--json", "exec", "show", &id, "1"]));
    assert_eq!(record["evidence"]["budget_bytes"], 0);
    assert_eq!(record["code"]["state"], "kept");
    assert_eq!(record["stdout"]["state"], "not_kept");
    assert_eq!(record["files_written"][0]["content_kept"], false);
    assert_eq!(record["files_written"][0]["not_kept"], "off");
    let shown = text_success(sandlog(&root).args(["exec", "show", &id, "1"]));
    assert!(shown.contains("stdout (7 B"), "{shown}");
    assert!(
        shown.contains("not kept: only its hash is recorded"),
        "{shown}"
    );
    assert!(
        shown.contains("off.txt") && shown.contains("not kept: evidence was off"),
        "{shown}"
    );
    let message = stderr_failure(
        sandlog(&root).args(["files", "cat", &id, "off.txt", "--at", "1h"]),
        3,
    );
    assert!(message.contains("did not exist yet"), "{message}");
    let head = json_success(sandlog(&root).args(["--json", "digest"]));
    let at = head["position"].as_u64().unwrap().to_string();
    let message = stderr_failure(
        sandlog(&root).args(["files", "cat", &id, "off.txt", "--at", &at]),
        1,
    );
    assert!(message.contains("not kept"), "{message}");
    // A position past the head is the present, and says so.
    let restored = dir.path().join("restored");
    let report = json_success(sandlog(&root).args([
        "--json",
        "files",
        "restore",
        &id,
        "--at",
        "999999",
        "--to",
        restored.to_str().unwrap(),
    ]));
    assert_eq!(report["position"], head["position"]);
    assert_eq!(report["files"], 0);
    assert_eq!(
        report["missing"],
        serde_json::json!([{"path": "off.txt", "reason": "off"}])
    );

    // The root setting at 0 turns evidence off too; unset restores the
    // default.
    sandlog(&root)
        .args(["config", "set", "evidence.budget", "0"])
        .assert()
        .success();
    exec(&root, &id, "print('also unseen')", &[]);
    let record = json_success(sandlog(&root).args(["--json", "exec", "show", &id, "2"]));
    assert_eq!(record["stdout"]["state"], "not_kept");
    sandlog(&root)
        .args(["config", "unset", "evidence.budget"])
        .assert()
        .success();
    let got = json_success(sandlog(&root).args(["--json", "config", "get", "evidence.budget"]));
    assert_eq!(got["value"], Value::Null);
    Ok(())
}

/// Goal: `verify` checks the blob references against the log, and `gc`
/// never trusts a reference table that lost rows (before, deleting the
/// rows passed `verify`, and `gc` then destroyed every kept blob while
/// `verify` still reported none missing). Method: an execution keeps its
/// code, output and a file; the `rm_blob_refs` rows are deleted behind
/// sandlog's back; `verify` fails (exit 4) naming the blob references,
/// `gc` refuses (exit 4) and removes nothing, and the file's kept bytes
/// still read back as of the execution.
#[test]
fn verify_and_gc_check_the_blob_references_against_the_log() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    exec(&root, &id, "open('kept.txt', 'w').write('evidence')", &[]);
    let listed = json_success(sandlog(&root).args(["--json", "files", "ls", &id]));
    let blake3 = listed[0]["blake3"].as_str().unwrap().to_owned();
    sandlog(&root).args(["verify"]).assert().success();
    {
        let connection = rusqlite::Connection::open(root.join("sandlog.db"))?;
        let deleted = connection.execute("DELETE FROM rm_blob_refs", [])?;
        assert!(deleted >= 2, "code and file were referenced: {deleted}");
    }
    let verify = stderr_failure(sandlog(&root).args(["verify"]), 4);
    let verified = json(
        &sandlog(&root)
            .args(["--json", "verify"])
            .assert()
            .code(4)
            .get_output()
            .stdout,
    );
    assert!(
        verified["read_model_mismatches"]
            .to_string()
            .contains("blob references"),
        "{verified} / {verify}"
    );
    let gc = stderr_failure(sandlog(&root).args(["gc"]), 4);
    assert!(gc.contains("blob references"), "{gc}");
    let kept = stdout_success(sandlog(&root).args(["blob", "cat", &blake3]));
    assert_eq!(kept, b"evidence");
    Ok(())
}
