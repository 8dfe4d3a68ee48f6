//! `session delete --wait` against a session whose lease another process
//! holds, and `stats` / `reconcile` listing failed intents (none here);
//! several processes writing one session at once: each execution recorded
//! once and credited with exactly its own files, host writes never
//! credited to a guest, a bounded wait ending in `busy`.

#![cfg(test)]

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::common::sandlog;

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

/// The binary as a plain process (several run at once), set up as
/// `common::sandlog` sets it up.
fn spawn_sandlog(root: &Path, args: &[&str]) -> std::io::Result<Child> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join(".runtimes"));
    let cache = std::env::var_os("SANDLOG_TEST_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/sandlog-test-cache"));
    Command::new(env!("CARGO_BIN_EXE_sandlog"))
        .env_remove("SANDLOG_ROOT")
        .env_remove("SANDLOG_STORE")
        .env("SANDLOG_RUNTIMES_DIR", runtimes)
        .env("SANDLOG_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

fn new_session(root: &Path) -> String {
    sandlog(root).args(["--json", "init"]).assert().success();
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

fn paths_of(files: &Value) -> Vec<String> {
    files
        .as_array()
        .unwrap()
        .iter()
        .map(|file| {
            file["path"]
                .as_str()
                .unwrap_or_else(|| file.as_str().unwrap())
                .to_owned()
        })
        .collect()
}

fn events_of_kind(root: &Path, id: &str, kind: &str) -> Vec<Value> {
    let output = sandlog(root)
        .args(["--json", "log", "--session", id, "--kind", kind])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    // One array, or JSON Lines.
    if let Ok(Value::Array(events)) = serde_json::from_slice::<Value>(&output) {
        return events;
    }
    String::from_utf8(output)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Goal: executions of one session from several processes are each
/// recorded exactly once, with their own code and output, and credited
/// with exactly the file they wrote (before, every run's scan credited the
/// files the others wrote, and a run could end in `version_conflict` after
/// its code ran, unrecorded). Method: 16 `sandlog exec` processes started
/// together on one session, each writing its own file; then every
/// execution record is read back with `exec show`, and `verify` and
/// `reconcile --deep` must find nothing wrong.
#[test]
fn sixteen_processes_exec_in_one_session_each_credited_exactly() -> TestResult {
    const RUNS: usize = 16;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let id = new_session(&root);
    let children: Vec<Child> = (0..RUNS)
        .map(|run| {
            let code = format!("open('f{run}.txt', 'w').write('{run}' * 3)\nprint('run {run}')");
            spawn_sandlog(&root, &["--json", "exec", &id, "--code", &code])
        })
        .collect::<Result<_, _>>()?;
    for (run, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        assert!(
            output.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let document = json(&output.stdout);
        assert_eq!(document["stdout"], format!("run {run}\n"));
        assert_eq!(
            paths_of(&document["files_written"]),
            [format!("f{run}.txt")]
        );
    }

    let executed = events_of_kind(&root, &id, "session.executed");
    assert_eq!(executed.len(), RUNS, "one session.executed per run");
    assert_eq!(events_of_kind(&root, &id, "file.written").len(), RUNS);
    let mut seen = BTreeSet::new();
    for number in 1..=RUNS {
        let record = json(
            &sandlog(&root)
                .args(["--json", "exec", "show", &id, &number.to_string()])
                .assert()
                .success()
                .get_output()
                .stdout,
        );
        let code = record["code"]["text"].as_str().unwrap();
        let run = (0..RUNS)
            .find(|run| code.contains(&format!("'f{run}.txt'")))
            .unwrap_or_else(|| panic!("execution {number} has code {code:?}"));
        assert_eq!(record["stdout"]["text"], format!("run {run}\n"));
        assert_eq!(
            paths_of(&record["files_written"]),
            [format!("f{run}.txt")],
            "execution {number} is credited with exactly its own file"
        );
        assert!(seen.insert(run), "run {run} recorded twice");
    }
    assert_eq!(seen.len(), RUNS);
    sandlog(&root).args(["verify"]).assert().success();
    sandlog(&root)
        .args(["reconcile", "--deep"])
        .assert()
        .success();
    Ok(())
}

/// Goal: a host write that lands while a guest runs is recorded as the
/// host's and never credited to the guest. Method: a guest that spins for
/// a second and writes nothing; while it runs, another process writes a
/// file with `files put`. The execution records no file; the put is one
/// `file.written` by `host`, recorded after the execution.
#[test]
fn a_host_write_during_an_execution_is_the_hosts() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let id = new_session(&root);
    let spin = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass\nprint('done')";
    let guest = spawn_sandlog(&root, &["--json", "exec", &id, "--code", spin])?;
    // Long enough for the guest to hold the session; the put then waits
    // its turn whichever started first.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let source = dir.path().join("host.txt");
    std::fs::write(&source, "from the host")?;
    let put = spawn_sandlog(
        &root,
        &[
            "--json",
            "files",
            "put",
            &id,
            "host.txt",
            "--from",
            source.to_str().unwrap(),
        ],
    )?;
    let guest = guest.wait_with_output()?;
    let put = put.wait_with_output()?;
    assert!(
        guest.status.success(),
        "{}",
        String::from_utf8_lossy(&guest.stderr)
    );
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let execution = json(&guest.stdout);
    assert!(
        paths_of(&execution["files_written"]).is_empty(),
        "{execution}"
    );
    let written = events_of_kind(&root, &id, "file.written");
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0]["payload"]["by"], "host", "{:?}", written[0]);
    let executed = events_of_kind(&root, &id, "session.executed");
    assert_eq!(executed.len(), 1);
    assert!(written[0]["causation_id"].is_null(), "{:?}", written[0]);
    sandlog(&root)
        .args(["reconcile", "--deep"])
        .assert()
        .success();
    Ok(())
}

/// Goal: a writer waits for the session's current writer a bounded time,
/// then fails `busy` (exit 1) having changed nothing; the guest never
/// started. Method: this process holds the session's writer lock (an
/// exclusive lock on its workspace directory, as a running execution
/// does) while `exec --wait 300ms` and `run --wait 0s` try; then it lets
/// go and the same exec runs.
#[test]
fn a_writer_waits_bounded_then_fails_busy() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let id = new_session(&root);
    let workspace = std::fs::File::open(root.join("workspaces").join(&id))?;
    workspace.lock()?;
    let failure = sandlog(&root)
        .args([
            "--json",
            "exec",
            &id,
            "--wait",
            "300ms",
            "--code",
            "open('x', 'w')",
        ])
        .assert()
        .code(1);
    let error = json(&failure.get_output().stderr);
    assert_eq!(error["error"]["kind"], "busy", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("--wait"), "{message}");
    let native = sandlog(&root)
        .args(["--json", "run", &id, "--wait", "0s", "--", "true"])
        .assert()
        .code(1);
    assert_eq!(json(&native.get_output().stderr)["error"]["kind"], "busy");
    assert!(events_of_kind(&root, &id, "session.executed").is_empty());
    assert!(events_of_kind(&root, &id, "native.started").is_empty());
    assert!(!root.join("workspaces").join(&id).join("x").exists());
    sandlog(&root)
        .args(["exec", &id, "--wait", "soon", "--code", "print(1)"])
        .assert()
        .code(2);

    drop(workspace);
    sandlog(&root)
        .args(["exec", &id, "--wait", "0s", "--code", "print(1)"])
        .assert()
        .success()
        .stdout("1\n");
    Ok(())
}
