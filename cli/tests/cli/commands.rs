//! The `sandlog` binary against docs/cli.md: every command in human and `--json`
//! form, every documented exit code, and bad input. Runs the real binary on
//! temporary roots with the real python.wasm.

#![cfg(test)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

use crate::common::{sandlog, sandlog_bare};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

/// Runs `command`, which must succeed, and returns its stdout as text.
fn text_success(command: &mut Command) -> String {
    String::from_utf8(command.assert().success().get_output().stdout.clone())
        .unwrap_or_else(|error| panic!("stdout is not UTF-8: {error}"))
}

/// Runs `command`, which must succeed, and parses its stdout as JSON.
fn json_success(command: &mut Command) -> Value {
    json(&command.assert().success().get_output().stdout)
}

/// Runs `command`, which must exit with `code`, and parses its stderr (the
/// JSON error document) as JSON.
fn json_failure(command: &mut Command, code: i32) -> Value {
    json(&command.assert().code(code).get_output().stderr)
}

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    (dir, root)
}

fn create(root: &Path) -> String {
    let created =
        json_success(sandlog(root).args(["--json", "session", "create", "--label", "team=qa"]));
    created["session_id"].as_str().unwrap().to_owned()
}

/// `init` creates the root and says where (JSON and human).
#[test]
fn init_creates_the_root() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("r");
    let out = json_success(sandlog(&root).args(["--json", "init"]));
    assert!(out["root"].as_str().unwrap().ends_with("/r"));
    assert!(root.join("sandlog.db").is_file());
    sandlog(&root)
        .arg("init")
        .assert()
        .success()
        .stdout_has("initialised");
    Ok(())
}

/// Substring checks on captured output.
trait Contains {
    fn stdout_has(self, needle: &str) -> Self;
    fn stderr_has(self, needle: &str) -> Self;
}

impl Contains for assert_cmd::assert::Assert {
    fn stdout_has(self, needle: &str) -> Self {
        let text = String::from_utf8_lossy(&self.get_output().stdout).into_owned();
        assert!(text.contains(needle), "stdout lacks {needle:?}:\n{text}");
        self
    }

    fn stderr_has(self, needle: &str) -> Self {
        let text = String::from_utf8_lossy(&self.get_output().stderr).into_owned();
        assert!(text.contains(needle), "stderr lacks {needle:?}:\n{text}");
        self
    }
}

/// Sessions: create, list (with status filter), show (seed metadata shape
/// plus projection fields), timeline, delete — JSON and human.
#[test]
fn session_commands_work_in_json_and_human_form() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let show = json_success(sandlog(&root).args(["--json", "session", "show", &id]));
    for key in [
        "session_id",
        "created_at",
        "updated_at",
        "version",
        "status",
        "exec_count",
        "bytes",
        "files",
        "legacy",
    ] {
        assert!(show.get(key).is_some(), "missing {key} in {show}");
    }
    assert_eq!(show["version"], 1);
    assert_eq!(show["status"], "active");
    assert_eq!(show["created_at"], show["updated_at"]);
    let list =
        json_success(sandlog(&root).args(["--json", "session", "list", "--status", "active"]));
    assert_eq!(list.as_array().unwrap().len(), 1);
    let human = text_success(sandlog(&root).args(["session", "list"]));
    assert!(human.contains(&id[..8]));
    let wide = text_success(sandlog(&root).args(["--wide", "session", "list"]));
    assert!(wide.contains(&id));
    let timeline = json_success(sandlog(&root).args(["--json", "session", "timeline", &id]));
    assert_eq!(timeline[0]["kind"], "session.created");
    sandlog(&root)
        .args(["session", "timeline", &id])
        .assert()
        .success()
        .stdout_has("session created (team=qa)");
    let deleted = json_success(sandlog(&root).args(["--json", "session", "delete", &id]));
    assert_eq!(deleted["session_id"], id.as_str());
    assert_eq!(
        json_success(sandlog(&root).args(["--json", "session", "show", &id]))["status"],
        "deleted"
    );
    Ok(())
}

/// `exec` passes the guest's output through, reports JSON, reads code from
/// stdin with `-`, and exits 5 when the guest fails.
#[test]
fn exec_passes_output_through_and_exits_5_on_guest_failure() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args([
            "exec",
            &id,
            "--code",
            "print('hi'); open('a.txt','w').write('x')",
        ])
        .assert()
        .success()
        .stdout("hi\n");
    let out = json_success(sandlog(&root).args([
        "--json",
        "exec",
        &id,
        "--code",
        "import os; os.remove('a.txt'); print(2)",
    ]));
    assert_eq!(out["outcome"], "ok");
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["stdout"], "2\n");
    assert_eq!(out["files_deleted"][0], "a.txt");
    for key in ["stderr", "fuel_consumed", "duration_ms", "files_written"] {
        assert!(out.get(key).is_some(), "missing {key}");
    }
    sandlog(&root)
        .args(["exec", &id, "-"])
        .write_stdin("print(6 * 7)")
        .assert()
        .success()
        .stdout("42\n");
    sandlog(&root)
        .args(["exec", &id, "--code", "import sys; sys.exit(3)"])
        .assert()
        .code(5);
    let timeout = sandlog(&root)
        .args([
            "--json",
            "exec",
            &id,
            "--timeout",
            "300ms",
            "--code",
            "while True: pass",
        ])
        .assert()
        .code(5)
        .get_output()
        .stdout
        .clone();
    assert!(matches!(
        json(&timeout)["outcome"].as_str(),
        Some("timeout") | Some("out_of_fuel")
    ));
    Ok(())
}

/// Files: put (from a file and stdin, overwrite), ls (glob, tree), cat, rm.
#[test]
fn files_commands_work() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    let source = dir.path().join("in.txt");
    std::fs::write(&source, "hello")?;
    let put = json_success(
        sandlog(&root)
            .args(["--json", "files", "put", &id, "docs/a.txt", "--from"])
            .arg(&source),
    );
    assert_eq!(put["size"], 5);
    assert_eq!(put["path"], "docs/a.txt");
    sandlog(&root)
        .args(["files", "put", &id, "docs/a.txt", "-"])
        .write_stdin("again")
        .assert()
        .code(1);
    sandlog(&root)
        .args(["files", "put", &id, "docs/a.txt", "-", "--overwrite"])
        .write_stdin("again")
        .assert()
        .success();
    sandlog(&root)
        .args(["files", "put", &id, "top.py", "-"])
        .write_stdin("print(1)")
        .assert()
        .success();
    sandlog(&root)
        .args(["files", "cat", &id, "docs/a.txt"])
        .assert()
        .success()
        .stdout("again");
    let ls = json_success(sandlog(&root).args(["--json", "files", "ls", &id, "*.py"]));
    assert_eq!(ls.as_array().unwrap().len(), 1);
    assert_eq!(ls[0]["path"], "top.py");
    let tree = json_success(sandlog(&root).args(["--json", "files", "ls", &id, "--tree"]));
    assert_eq!(tree["docs"]["a.txt"]["size"], 5);
    sandlog(&root)
        .args(["files", "rm", &id, "docs"])
        .assert()
        .code(2);
    let rm =
        json_success(sandlog(&root).args(["--json", "files", "rm", &id, "docs", "--recursive"]));
    assert_eq!(rm["deleted"][0], "docs/a.txt");
    Ok(())
}

/// Exit codes: unknown session 3; malformed id or duration 2; a path that
/// escapes 1 naming the reason; a missing root 1; usage errors as JSON.
#[test]
fn documented_exit_codes_for_bad_input() -> TestResult {
    let (dir, root) = init();
    let unknown = "550e8400-e29b-41d4-a716-446655440000";
    let out = json_failure(
        sandlog(&root).args(["--json", "session", "show", unknown]),
        3,
    );
    assert_eq!(out["error"]["kind"], "not_found");
    sandlog(&root)
        .args(["session", "show", "not-a-uuid"])
        .assert()
        .code(2);
    sandlog(&root)
        .args(["prune", "--older-than", "5 parsecs"])
        .assert()
        .code(2);
    let id = create(&root);
    let error = json_failure(
        sandlog(&root).args(["--json", "files", "cat", &id, "../../etc/passwd"]),
        2,
    );
    assert_eq!(error["error"]["kind"], "invalid_path");
    assert!(
        error["error"]["message"].as_str().unwrap().contains(".."),
        "{error}"
    );
    sandlog(&root)
        .args(["files", "cat", &id, "/etc/passwd"])
        .assert()
        .code(2)
        .stderr_has("absolute");
    let missing = dir.path().join("nope");
    let out = json_failure(sandlog(&missing).args(["--json", "session", "list"]), 3);
    assert_eq!(out["error"]["kind"], "root_missing");
    let out = json_failure(sandlog(&root).args(["--json", "session", "frobnicate"]), 2);
    assert_eq!(out["error"]["kind"], "usage");
    Ok(())
}

/// `verify` exits 4 on a tampered database and names the first bad
/// position; `digest` then `verify --digest` proves the log extends it.
#[test]
fn verify_detects_tampering_and_checks_digests() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args(["files", "put", &id, "a.txt", "-"])
        .write_stdin("x")
        .assert()
        .success();
    let digest = json_success(sandlog(&root).args(["--json", "digest"]));
    let pinned = format!(
        "{}:{}",
        digest["position"],
        digest["hash"].as_str().unwrap()
    );
    let ok = json_success(sandlog(&root).args(["--json", "verify", "--digest", &pinned]));
    assert_eq!(ok["ok"], true);
    assert_eq!(ok["events"], 3, "genesis, session.created, file.written");
    sandlog(&root)
        .args(["verify", "--digest", "2:zz"])
        .assert()
        .code(2);
    {
        let connection = rusqlite::Connection::open(root.join("sandlog.db"))?;
        connection.execute_batch("DROP TRIGGER events_are_append_only_update;")?;
        connection.execute("UPDATE events SET actor = 'mallory' WHERE position = 1", [])?;
    }
    let bad = json(
        &sandlog(&root)
            .args(["--json", "verify"])
            .assert()
            .code(4)
            .get_output()
            .stdout,
    );
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["first_bad_position"], 1);
    sandlog(&root)
        .arg("verify")
        .assert()
        .code(4)
        .stderr_has("position 1");
    Ok(())
}

/// `log` prints JSON Lines and filters; `replay` shows the past; `prune`,
/// `reconcile`, `stats`, `adopt`, `export-metadata` report in JSON.
#[test]
fn forensics_and_lifecycle_commands_report_json() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args(["files", "put", &id, "a.txt", "-"])
        .write_stdin("x")
        .assert()
        .success();
    let lines = text_success(sandlog(&root).args(["--json", "log", "--session", &id]));
    let events: Vec<Value> = lines.lines().map(|line| json(line.as_bytes())).collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["kind"], "file.written");
    let kinds =
        text_success(sandlog(&root).args(["--json", "log", "--kind", "file.*", "--limit", "1"]));
    assert_eq!(kinds.lines().count(), 1);
    let then =
        json_success(sandlog(&root).args(["--json", "replay", "--at", "2", "--session", &id]));
    assert_eq!(then["files"], 0);
    let now = json_success(sandlog(&root).args(["--json", "replay", "--at", "3"]));
    assert_eq!(now["sessions"][0]["files"], 1);

    let dry =
        json_success(sandlog(&root).args(["--json", "prune", "--older-than", "0", "--dry-run"]));
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted_sessions"][0], id.as_str());
    for key in ["skipped_sessions", "reclaimed_bytes", "errors"] {
        assert!(dry.get(key).is_some());
    }
    let seeds = dir.path().join("seeds");
    let legacy = "6f1c1d3e-8b9a-4c2d-9e8f-0a1b2c3d4e5f";
    std::fs::create_dir_all(seeds.join(legacy))?;
    std::fs::write(seeds.join(legacy).join("x.txt"), "old")?;
    let adopted = json_success(sandlog(&root).args(["--json", "adopt"]).arg(&seeds));
    assert_eq!(adopted["legacy"][0], legacy);
    let pruned = json_success(sandlog(&root).args(["--json", "prune", "--older-than", "0"]));
    assert_eq!(pruned["deleted_sessions"][0], id.as_str());
    assert_eq!(pruned["skipped_sessions"][0], legacy);
    let reconcile = json_success(sandlog(&root).args(["--json", "reconcile"]));
    for key in ["actions", "orphans", "intents_finished", "drift"] {
        assert!(reconcile.get(key).is_some(), "missing {key}");
    }
    let stats = json_success(sandlog(&root).args(["--json", "stats"]));
    assert_eq!(stats["cleanup"]["prune_runs"], 1);
    let export = dir.path().join("export");
    let written = json_success(
        sandlog(&root)
            .args(["--json", "export-metadata"])
            .arg(&export),
    );
    assert_eq!(written["written"], 0, "the only active session is legacy");
    Ok(())
}

/// Output hygiene: with NO_COLOR and a pipe, no escape codes anywhere;
/// help is complete; completions and the man page generate.
#[test]
fn no_escape_codes_off_terminal_and_help_is_complete() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    for args in [
        vec!["session", "list"],
        vec!["session", "show", id.as_str()],
        vec!["log"],
        vec!["stats"],
        vec!["verify"],
    ] {
        let output = sandlog(&root)
            .args(&args)
            .assert()
            .success()
            .get_output()
            .clone();
        assert!(!output.stdout.contains(&0x1b), "escape code in {args:?}");
        assert!(
            !output.stderr.contains(&0x1b),
            "escape code in {args:?} stderr"
        );
    }
    let help = text_success(sandlog_bare().arg("--help"));
    for command in [
        "init",
        "session",
        "exec",
        "files",
        "prune",
        "reconcile",
        "log",
        "replay",
        "verify",
        "digest",
        "adopt",
        "export-metadata",
        "stats",
    ] {
        assert!(help.contains(command), "--help does not mention {command}");
    }
    let prune_help = text_success(sandlog_bare().args(["prune", "--help"]));
    for flag in [
        "--older-than",
        "--dry-run",
        "--max-deletions",
        "--max-sessions",
        "--max-bytes",
    ] {
        assert!(prune_help.contains(flag));
    }
    sandlog_bare()
        .args(["completions", "bash"])
        .assert()
        .success()
        .stdout_has("sandlog");
    sandlog_bare()
        .arg("man")
        .assert()
        .success()
        .stdout_has(".TH");
    Ok(())
}

/// `migrate` to a new SQLite file (the way back from PostgreSQL, without a
/// server): the copy has the root's head and Merkle root, a root whose
/// `sandlog.db` is the copy verifies; a non-empty destination, a missing
/// source and a PostgreSQL server that is not there are refused; a
/// tampered source exits 4 naming the position. The PostgreSQL round trip
/// is in tests/it/migrate.rs, on a real server.
#[test]
fn migrate_copies_the_log_and_refuses_what_it_must() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args(["files", "put", &id, "a.txt", "-"])
        .write_stdin("x".repeat(100_000))
        .assert()
        .success();
    let digest = json_success(sandlog(&root).args(["--json", "digest"]));
    let copy = dir.path().join("copy.db");
    let out = json_success(
        sandlog(&root)
            .args(["--json", "migrate", "--to"])
            .arg(&copy),
    );
    assert_eq!(out["events"], digest["position"]);
    assert_eq!(out["head"], digest["hash"]);
    assert_eq!(out["root"].as_str().map(str::len), Some(64));
    assert_eq!(out["blobs"], 1);

    // Human form: one line.
    let again = dir.path().join("again.db");
    let line = text_success(
        sandlog(&root)
            .args(["migrate", "--from"])
            .arg(&copy)
            .arg("--to")
            .arg(&again),
    );
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains(digest["hash"].as_str().unwrap()), "{line}");

    // A root adopts the copy: same genesis, so the anchor accepts it.
    let adopted = dir.path().join("adopted");
    assert!(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(&root)
            .arg(&adopted)
            .status()?
            .success()
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(adopted.join(format!("sandlog.db{suffix}")));
    }
    std::fs::copy(&copy, adopted.join("sandlog.db"))?;
    let verified = json_success(sandlog(&adopted).args(["--json", "verify"]));
    assert_eq!(verified["ok"], true);
    let adopted_digest = json_success(sandlog(&adopted).args(["--json", "digest"]));
    assert_eq!(adopted_digest, digest);

    // Refusals.
    let not_empty = json_failure(
        sandlog(&root)
            .args(["--json", "migrate", "--to"])
            .arg(&copy),
        1,
    );
    assert_eq!(not_empty["error"]["kind"], "not_empty");
    let missing = json_failure(
        sandlog(&root)
            .args(["--json", "migrate", "--from"])
            .arg(dir.path().join("nothing.db"))
            .arg("--to")
            .arg(dir.path().join("x.db")),
        2,
    );
    assert_eq!(missing["error"]["kind"], "invalid_location");
    let no_server = dir.path().join("no-server");
    std::fs::create_dir(&no_server)?;
    let unreachable = json_failure(
        sandlog(&root)
            .args(["--json", "migrate", "--to"])
            .arg(format!("host={} dbname=nowhere", no_server.display())),
        1,
    );
    assert_eq!(unreachable["error"]["kind"], "io");

    {
        let connection = rusqlite::Connection::open(&copy)?;
        connection.execute_batch("DROP TRIGGER events_are_append_only_update;")?;
        connection.execute("UPDATE events SET actor = 'mallory' WHERE position = 2", [])?;
    }
    sandlog(&root)
        .args(["migrate", "--from"])
        .arg(&copy)
        .arg("--to")
        .arg(dir.path().join("third.db"))
        .assert()
        .code(4)
        .stderr_has("position 2");
    Ok(())
}

/// Goal: the CLI prunes in batches as large as its descriptors allow even
/// when started under the usual soft limit of 1,024 open files: it raises
/// its soft limit (within the hard one) before a prune holds a lease file
/// per session of its batches. Method: 600 old sessions; `sandlog prune`
/// started by a shell that lowered the soft limit to 1,024. A run's first
/// two batches' intents are appended back to back, so the first run of
/// consecutive `session.prune.requested` positions is two batches long
/// (or every session): 600 at batches of 512, 256 at the 128 that 1,024
/// descriptors give.
#[test]
fn prune_raises_the_descriptor_limit_for_its_batches() -> TestResult {
    use sandlog_runtime::lifecycle::{PRUNE_DESCRIPTORS_WANTED, prune_batch_sessions_for};
    const SESSIONS: usize = 600;
    let (_dir, root) = init();
    {
        let engine = sandlog_runtime::Engine::open(
            &root,
            sandlog_runtime::EngineOptions {
                durability: sandlog_runtime::sqlite::Durability::Normal,
                ..sandlog_runtime::EngineOptions::default()
            },
        )?;
        for _ in 0..SESSIONS {
            engine.create_session(Default::default())?;
        }
    }
    let hard = text_success(Command::new("sh").args(["-c", "ulimit -Hn"]));
    let hard = match hard.trim() {
        "unlimited" => None,
        number => Some(number.parse::<u64>()?),
    };
    let raised = hard.map_or(PRUNE_DESCRIPTORS_WANTED, |hard| {
        hard.min(PRUNE_DESCRIPTORS_WANTED)
    });
    let batch = prune_batch_sessions_for(Some(raised.max(1024)));
    let pruned = json_success(
        Command::new("sh")
            .args(["-c", "ulimit -Sn 1024 && exec \"$@\"", "sh"])
            .arg(assert_cmd::cargo::cargo_bin("sandlog"))
            .env_remove("SANDLOG_STORE")
            .env("NO_COLOR", "1")
            .arg("--root")
            .arg(&root)
            .args(["--json", "prune", "--older-than", "0"]),
    );
    assert_eq!(
        pruned["deleted_sessions"].as_array().map(Vec::len),
        Some(SESSIONS)
    );
    let intents =
        text_success(sandlog(&root).args(["--json", "log", "--kind", "session.prune.requested"]));
    let positions: Vec<u64> = intents
        .lines()
        .map(|line| json(line.as_bytes())["position"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(positions.len(), SESSIONS);
    let first_run = 1 + positions
        .windows(2)
        .take_while(|pair| pair[1] == pair[0] + 1)
        .count();
    assert!(
        batch > 128,
        "the hard limit ({hard:?}) leaves nothing to raise"
    );
    assert_eq!(first_run, SESSIONS.min(2 * batch), "batch {batch}");
    Ok(())
}
