//! `sandlog run` and `sandlog session sync` (issue #16): the real binary on
//! temporary roots running real shell scripts, and outside processes
//! changing workspaces; `reconcile --deep` must agree with every sync.

#![cfg(test)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

use crate::common::sandlog;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

fn json_success(command: &mut Command) -> Value {
    json(&command.assert().success().get_output().stdout)
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

fn workspace(root: &Path, id: &str) -> PathBuf {
    root.join("workspaces").join(id)
}

/// The session's events, as `log --json` prints them.
fn log(root: &Path, id: &str) -> Vec<Value> {
    let output = sandlog(root)
        .args(["--json", "log", "--session", id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(output)
        .unwrap()
        .lines()
        .map(|line| json(line.as_bytes()))
        .collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| event["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_no_drift(root: &Path) {
    let report = json_success(sandlog(root).args(["--json", "reconcile", "--deep"]));
    assert_eq!(report["drift"], serde_json::json!([]), "{report}");
}

#[test]
fn run_records_a_script_with_its_actor_and_passes_its_output_through() {
    let (_dir, root) = init();
    let id = create(&root);
    std::fs::write(workspace(&root, &id).join("old.txt"), b"old").unwrap();
    json_success(sandlog(&root).args(["--json", "session", "sync", &id]));

    // An 8-digit prefix names the session, as for every command.
    let output = sandlog(&root)
        .args(["--actor", "agent-1", "run", &id[..8], "--"])
        .args([
            "sh",
            "-c",
            "echo hello; echo warn >&2; printf n > new.txt; rm old.txt; test \"$SANDLOG_SESSION_ID\" = \"$1\"",
            "agent",
            &id,
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    assert_eq!(output.stdout, b"hello\n");
    assert_eq!(output.stderr, b"warn\n");

    let events = log(&root, &id);
    let kinds = kinds(&events);
    let tail: Vec<&str> = kinds
        .iter()
        .rev()
        .take(4)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "native.started",
            "native.completed",
            "file.written",
            "file.deleted"
        ]
    );
    for event in events.iter().rev().take(4) {
        assert_eq!(event["actor"], "agent-1", "{event}");
    }
    let timeline = String::from_utf8(
        sandlog(&root)
            .args(["session", "timeline", &id])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    assert!(
        timeline.contains("native command started: sh -c"),
        "{timeline}"
    );
    assert!(
        timeline.contains("native command completed: exit 0"),
        "{timeline}"
    );
    assert!(timeline.contains("native work wrote new.txt"), "{timeline}");

    // --json: the output goes to stderr, the record to stdout.
    let output = sandlog(&root)
        .args([
            "--json",
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "echo out; printf x > x.txt",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let record = json(&output.stdout);
    assert_eq!(record["exit_code"], 0);
    assert_eq!(record["files_written"], serde_json::json!(["x.txt"]));
    assert_eq!(record["files_deleted"], serde_json::json!([]));
    assert!(record["duration_ms"].is_u64());
    assert_eq!(output.stderr, b"out\n");

    // Our stdin is the command's.
    sandlog(&root)
        .args(["run", &id, "--", "sh", "-c", "cat > got.txt"])
        .write_stdin("typed input")
        .assert()
        .success();
    assert_eq!(
        std::fs::read(workspace(&root, &id).join("got.txt")).unwrap(),
        b"typed input"
    );
    assert_no_drift(&root);
}

#[test]
fn run_exits_5_on_failure_and_timeout_and_3_when_not_found() {
    let (_dir, root) = init();
    let id = create(&root);
    let stderr = sandlog(&root)
        .args(["run", &id, "--", "sh", "-c", "exit 3"])
        .assert()
        .code(5)
        .get_output()
        .stderr
        .clone();
    assert!(
        String::from_utf8_lossy(&stderr).contains("exited with 3"),
        "{}",
        String::from_utf8_lossy(&stderr)
    );

    let output = sandlog(&root)
        .args([
            "--json",
            "run",
            &id,
            "--timeout",
            "300ms",
            "--",
            "sleep",
            "30",
        ])
        .assert()
        .code(5)
        .get_output()
        .stdout
        .clone();
    let record = json(&output);
    assert_eq!(record["timed_out"], true);
    assert_eq!(record["signal"], 9);
    assert_eq!(record["exit_code"], Value::Null);

    let output = sandlog(&root)
        .args(["--json", "run", &id, "--", "sandlog-no-such-command-here"])
        .assert()
        .code(3)
        .get_output()
        .stderr
        .clone();
    let error = json(&output);
    assert_eq!(error["error"]["kind"], "not_found", "{error}");
    let kinds = kinds(&log(&root, &id));
    assert_eq!(kinds.last().map(String::as_str), Some("native.completed"));
    assert_eq!(
        kinds
            .iter()
            .filter(|kind| *kind == "native.started")
            .count(),
        3
    );

    // No command at all is a usage error.
    sandlog(&root).args(["run", &id]).assert().code(2);
}

#[test]
fn sync_records_outside_changes_once_and_reconcile_agrees() {
    let (_dir, root) = init();
    let id = create(&root);
    let dir = workspace(&root, &id);
    std::fs::write(dir.join("a.txt"), b"a").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/b.txt"), b"b").unwrap();
    let report =
        json_success(sandlog(&root).args(["--json", "--actor", "agent-2", "session", "sync", &id]));
    assert_eq!(
        report["files_written"],
        serde_json::json!(["a.txt", "sub/b.txt"])
    );
    assert_eq!(report["files_deleted"], serde_json::json!([]));
    assert_eq!(report["size_exceeded"], Value::Null);
    assert_eq!(report["recorded"], true);
    assert_no_drift(&root);

    std::fs::remove_file(dir.join("a.txt")).unwrap();
    std::fs::write(dir.join("sub/b.txt"), b"B!").unwrap();
    let report = json_success(sandlog(&root).args(["--json", "session", "sync", &id]));
    assert_eq!(report["files_written"], serde_json::json!(["sub/b.txt"]));
    assert_eq!(report["files_deleted"], serde_json::json!(["a.txt"]));
    assert_no_drift(&root);
    let events = log(&root, &id);
    let synced: Vec<&Value> = events
        .iter()
        .filter(|event| event["kind"] == "session.synced")
        .collect();
    assert_eq!(synced.len(), 2);
    assert_eq!(synced[0]["actor"], "agent-2");

    // Nothing changed: nothing appended, and the human output says so.
    let before = events.len();
    let text = sandlog(&root)
        .args(["session", "sync", &id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(
        String::from_utf8_lossy(&text).contains("nothing changed"),
        "{}",
        String::from_utf8_lossy(&text)
    );
    assert_eq!(log(&root, &id).len(), before);
}

#[test]
fn run_and_sync_warn_when_the_size_limit_is_passed() {
    let (_dir, root) = init();
    sandlog(&root)
        .args(["config", "set", "session.max_size", "1KiB"])
        .assert()
        .success();
    let id = create(&root);
    let output = sandlog(&root)
        .args([
            "--json",
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "head -c 2000 /dev/zero > big",
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let record = json(&output.stdout);
    assert_eq!(
        record["size_exceeded"],
        serde_json::json!({"bytes": 2000, "max_size": 1024})
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("past the session's size limit"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(workspace(&root, &id).join("more"), vec![b'm'; 100]).unwrap();
    let output = sandlog(&root)
        .args(["--json", "session", "sync", &id])
        .assert()
        .success()
        .get_output()
        .clone();
    let report = json(&output.stdout);
    assert_eq!(
        report["size_exceeded"],
        serde_json::json!({"bytes": 2100, "max_size": 1024})
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("size limit"));
    assert_no_drift(&root);
}

#[test]
fn ctrl_c_stops_the_command_and_its_end_is_recorded() {
    let (_dir, root) = init();
    let id = create(&root);
    let started = workspace(&root, &id).join("started");
    // The binary assert_cmd runs for `sandlog()`, spawned so the test can
    // signal it while the command runs.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("sandlog"))
        .env_remove("SANDLOG_ROOT")
        .env("NO_COLOR", "1")
        .arg("--root")
        .arg(&root)
        .args(["run", &id, "--", "sh", "-c", "touch started; exec sleep 60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SIGINT to sandlog alone, as a terminal's Ctrl-C would send it if
    // the command were not in its own process group.
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sandlog did not end after SIGINT"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(5));
    let events = log(&root, &id);
    let last = events
        .iter()
        .rev()
        .find(|event| event["kind"] == "native.completed")
        .expect("the end is recorded");
    assert_eq!(last["payload"]["signal"], 2, "{last}");
    assert_eq!(last["payload"]["exit_code"], Value::Null, "{last}");
}

/// `sandlog` as an unprivileged user: as itself when the tests do not run
/// as root, else as `nobody` (65534), for whom mode 000 means unreadable
/// (root reads everything). The directory is handed to that user.
fn unprivileged(dir: &Path, root: &Path) -> impl Fn() -> Command {
    use sandlog_tests::cli::{NOBODY, running_as_root, unprivileged_command};
    if running_as_root() {
        let status = std::process::Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "chown: {status}");
    }
    let (dir, root) = (dir.to_path_buf(), root.to_path_buf());
    move || {
        Command::from_std(unprivileged_command(
            Path::new(env!("CARGO_BIN_EXE_sandlog")),
            &root,
            &dir,
        ))
    }
}

/// Goal: files a native command or an outside process left that the scan
/// may not read (mode 000) never make the record fail: every readable
/// change is recorded, each unreadable file as written with
/// `content_kept: false`, reason `unreadable` (an unreadable directory's
/// contents neither written nor deleted), with a warning naming them;
/// exit status as for any run. Method: a real unprivileged process (the
/// tests drop to `nobody` when they run as root) runs a script that
/// writes a readable file, an unreadable one and an unreadable directory;
/// then an outside process leaves another unreadable file and `session
/// sync` records it the same way.
#[test]
fn run_and_sync_record_unreadable_files_without_failing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let sandlog = unprivileged(dir.path(), &root);
    json_success(sandlog().args(["--json", "init"]));
    let id = json_success(sandlog().args(["--json", "session", "create"]))["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let output = sandlog()
        .args(["--json", "run", &id, "--", "sh", "-c"])
        .arg(
            "echo readable > ok.txt; echo secret > secret.txt; chmod 000 secret.txt; \
             mkdir hid; echo x > hid/x; chmod 000 hid",
        )
        .assert()
        .success()
        .get_output()
        .clone();
    let run = json(&output.stdout);
    assert_eq!(run["exit_code"], 0, "{run}");
    assert_eq!(
        run["files_written"],
        serde_json::json!(["ok.txt", "secret.txt"]),
        "{run}"
    );
    assert_eq!(
        run["unreadable"],
        serde_json::json!(["hid", "secret.txt"]),
        "{run}"
    );
    let warning = String::from_utf8_lossy(&output.stderr);
    assert!(
        warning.contains("could not be read") && warning.contains("secret.txt"),
        "{warning}"
    );
    let written = |events: &[Value], path: &str| -> Value {
        events
            .iter()
            .rev()
            .find(|event| event["kind"] == "file.written" && event["payload"]["path"] == path)
            .map(|event| event["payload"].clone())
            .unwrap_or_else(|| panic!("no file.written for {path}"))
    };
    let events: Vec<Value> = String::from_utf8(
        sandlog()
            .args(["--json", "log", "--session", &id])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap()
    .lines()
    .map(|line| json(line.as_bytes()))
    .collect();
    assert_eq!(written(&events, "ok.txt")["content_kept"], true);
    let secret = written(&events, "secret.txt");
    assert_eq!(secret["content_kept"], false, "{secret}");
    assert_eq!(secret["not_kept"], "unreadable", "{secret}");
    assert_eq!(secret["size"], 7, "{secret}");

    // An outside process leaves another file the scan may not read.
    let other = workspace(&root, &id).join("other.txt");
    std::fs::write(&other, b"from outside").unwrap();
    let chmod = std::process::Command::new("chmod")
        .arg("000")
        .arg(&other)
        .status()
        .unwrap();
    assert!(chmod.success());
    let sync = sandlog()
        .args(["--json", "session", "sync", &id])
        .assert()
        .success()
        .get_output()
        .clone();
    let report = json(&sync.stdout);
    assert_eq!(report["recorded"], true, "{report}");
    assert_eq!(report["files_written"], serde_json::json!(["other.txt"]));
    assert_eq!(report["files_deleted"], serde_json::json!([]), "{report}");
    assert_eq!(
        report["unreadable"],
        serde_json::json!(["hid", "other.txt", "secret.txt"]),
        "{report}"
    );
    // Nothing new can be said about them: the next sync records nothing.
    let again = json_success(sandlog().args(["--json", "session", "sync", &id]));
    assert_eq!(again["recorded"], false, "{again}");
    sandlog().arg("verify").assert().success();
    // Let the temporary directory be removed when the tests are not root.
    let _ = std::process::Command::new("chmod")
        .args(["-R", "u+rwX"])
        .arg(workspace(&root, &id))
        .status();
}
