//! The CLI a person meets: plain tables with short ids that any command
//! takes back as a prefix, `--wide` and `--format tsv`; `log --tail`,
//! `log --follow` while another process appends, relative times; a failed
//! guest's own traceback with the outcome on the last line; errors in the
//! CLI's words; `reconcile`'s summary and exit 4 on drift; `prune` by caps
//! alone; the actor of every event. Each test runs the real binary on a
//! fresh root with the real python.wasm.

#![cfg(test)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

use crate::common::{sandlog, sandlog_bare, sandlog_std};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

fn stdout_of(command: &mut Command) -> String {
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

/// `text` with every RFC 3339 time replaced by a placeholder of the same
/// width (so the layout is unchanged) and `id` by `<id>` padded likewise.
fn normalise(text: &str, ids: &[&str]) -> String {
    const PLACEHOLDER: &str = "YYYY-MM-DDTHH:MM:SS.ffffffZ";
    let shape = "dddd-dd-ddTdd:dd:dd.ddddddZ".as_bytes();
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut index = 0;
    while index < bytes.len() {
        let window = bytes.get(index..index + shape.len());
        let is_time = window.is_some_and(|window| {
            window.iter().zip(shape).all(|(byte, want)| match want {
                b'd' => byte.is_ascii_digit(),
                other => byte == other,
            })
        });
        if is_time {
            out.push_str(PLACEHOLDER);
            index += shape.len();
        } else {
            let character = text[index..].chars().next().unwrap();
            out.push(character);
            index += character.len_utf8();
        }
    }
    for (index, id) in ids.iter().enumerate() {
        let marker = format!("<id{index}>");
        out = out.replace(id, &format!("{marker:<width$}", width = id.len()));
    }
    out
}

/// `session list` is aligned columns under an upper-case header with no
/// border lines, ids cut to 8 hex digits; `--wide` shows them whole and
/// `--format tsv` gives one tab-separated row per line. Compared as
/// literal snapshots with times and ids normalised.
#[test]
fn session_list_is_plain_columns_with_short_ids() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let short = &id[..8];
    let table = stdout_of(sandlog(&root).args(["session", "list"]));
    assert_eq!(
        normalise(&table, &[short]),
        "\
SESSION   STATUS  CREATED                      UPDATED                      EXECS  FILES  SIZE  LEGACY  HELD  GROUP
<id0>     active  YYYY-MM-DDTHH:MM:SS.ffffffZ  YYYY-MM-DDTHH:MM:SS.ffffffZ  0      0      0 B   -       -     -
"
    );
    assert!(
        !table.contains(&id),
        "the full id shows only with --wide: {table}"
    );

    let wide = stdout_of(sandlog(&root).args(["--wide", "session", "list"]));
    assert_eq!(
        normalise(&wide, &[&id]),
        "\
SESSION                               STATUS  CREATED                      UPDATED                      EXECS  FILES  SIZE  LEGACY  HELD  GROUP
<id0>                                 active  YYYY-MM-DDTHH:MM:SS.ffffffZ  YYYY-MM-DDTHH:MM:SS.ffffffZ  0      0      0 B   -       -     -
"
    );

    let tsv = stdout_of(sandlog(&root).args(["--format", "tsv", "session", "list"]));
    assert_eq!(
        normalise(&tsv, &[&id]).replace(' ', ""),
        "session\tstatus\tcreated\tupdated\texecs\tfiles\tsize\tlegacy\theld\tgroup\n\
         <id0>\tactive\tYYYY-MM-DDTHH:MM:SS.ffffffZ\tYYYY-MM-DDTHH:MM:SS.ffffffZ\t0\t0\t0\t-\t-\t\n"
    );

    // `log`: the same layout, stream ids short, the actor shown.
    sandlog(&root)
        .args(["--actor", "ana", "session", "create"])
        .assert()
        .success();
    let log = stdout_of(sandlog(&root).args(["log", "--kind", "session.created"]));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(lines[0].starts_with("POS  RECORDED "), "{log}");
    assert!(lines[0].contains("  ACTOR  "), "{log}");
    assert!(
        lines[1].contains(&format!("  session/{short}  session.created  ")),
        "{log}"
    );
    assert!(lines[2].contains("  session.created  ana "), "{log}");
    assert_eq!(
        lines[1].find("session created"),
        lines[2].find("session created"),
        "{log}"
    );
    Ok(())
}

/// `stats` (a key/value table) has no header line and no borders.
#[test]
fn key_value_tables_have_no_header_or_borders() -> TestResult {
    let (_dir, root) = init();
    create(&root);
    let stats = stdout_of(sandlog(&root).arg("stats"));
    let first = stats.lines().next().unwrap();
    assert!(first.starts_with("events "), "{stats}");
    assert!(!stats.contains('─'), "{stats}");
    Ok(())
}

/// Any unique prefix works wherever an id is taken; an ambiguous one is
/// exit 2 naming the candidates; one that matches nothing is exit 3.
#[test]
fn unique_id_prefixes_are_accepted_and_ambiguous_ones_listed() -> TestResult {
    let (_dir, root) = init();
    // 17 sessions: two of them share a first hex digit.
    let ids: Vec<String> = (0..17).map(|_| create(&root)).collect();
    let first_chars: Vec<char> = ids.iter().map(|id| id.chars().next().unwrap()).collect();
    let shared = first_chars
        .iter()
        .find(|c| first_chars.iter().filter(|d| d == c).count() > 1)
        .unwrap();
    let sharing: Vec<&String> = ids.iter().filter(|id| id.starts_with(*shared)).collect();
    let ambiguous = sandlog(&root)
        .args(["session", "show", &shared.to_string()])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let message = String::from_utf8(ambiguous)?;
    for id in &sharing {
        assert!(message.contains(id.as_str()), "{message}");
    }
    assert!(message.contains("give more of the id"), "{message}");

    let id = &ids[0];
    let shown = json(
        &sandlog(&root)
            .args(["--json", "session", "show", &id[..8]])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(shown["session_id"], id.as_str());
    // Upper case and a prefix crossing a hyphen work too.
    let upper = id[..10].to_uppercase();
    sandlog(&root)
        .args(["files", "ls", &upper])
        .assert()
        .success();
    sandlog(&root)
        .args(["exec", &id[..8], "--code", "print(40 + 2)"])
        .assert()
        .success()
        .stdout("42\n");
    let missing = if id.starts_with("ffff") {
        "0000"
    } else {
        "ffff"
    };
    if !ids.iter().any(|other| other.starts_with(missing)) {
        let error = json(
            &sandlog(&root)
                .args(["--json", "session", "show", missing])
                .assert()
                .code(3)
                .get_output()
                .stderr,
        );
        assert_eq!(error["error"]["kind"], "not_found");
    }
    sandlog(&root)
        .args(["session", "show", "not-an-id!"])
        .assert()
        .code(2);
    Ok(())
}

/// `log --tail N` prints the newest N in order, with and without filters;
/// `--since 10m` is a relative time and `--since 1d` in the future-free
/// past includes everything.
#[test]
fn log_tail_and_relative_times() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    for index in 0..3 {
        sandlog(&root)
            .args(["files", "put", &id, &format!("f{index}.txt"), "-"])
            .write_stdin("x")
            .assert()
            .success();
    }
    let lines = |args: &[&str]| -> Vec<Value> {
        let out = stdout_of(sandlog(&root).arg("--json").arg("log").args(args));
        out.lines().map(|line| json(line.as_bytes())).collect()
    };
    let all = lines(&[]);
    let tail = lines(&["--tail", "2"]);
    assert_eq!(tail.len(), 2);
    assert_eq!(tail[0]["position"], all[all.len() - 2]["position"]);
    assert_eq!(tail[1]["position"], all[all.len() - 1]["position"]);
    let session_tail = lines(&[
        "--session",
        &id[..8],
        "--kind",
        "file.written",
        "--tail",
        "2",
    ]);
    assert_eq!(session_tail.len(), 2);
    let paths: Vec<&str> = session_tail
        .iter()
        .map(|event| event["payload"]["path"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(paths, ["f1.txt", "f2.txt"], "{session_tail:?}");
    assert_eq!(lines(&["--since", "10m"]).len(), all.len());
    assert_eq!(lines(&["--until", "10m"]).len(), 0);
    assert_eq!(lines(&["--since", "2000-01-01T00:00:00Z"]).len(), all.len());
    let error = sandlog(&root)
        .args(["log", "--since", "yesterday"])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8(error)?.contains("10m"));
    // Relative times are taken by `replay --at` too.
    sandlog(&root)
        .args(["--json", "replay", "--at", "1s"])
        .assert()
        .success();
    Ok(())
}

/// `log --follow` keeps printing events that another process appends.
/// Method: follow in one child process (JSON Lines on a pipe), create a
/// session and write a file from other processes, and wait (bounded) for
/// their events to arrive on the follower's stdout.
#[test]
fn log_follow_prints_events_other_processes_append() -> TestResult {
    let (_dir, root) = init();
    let mut follower = sandlog_std(&root)
        .args(["--json", "log", "--follow", "--tail", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = follower.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel::<Value>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(json(line.as_bytes())).is_err() {
                break;
            }
        }
    });
    let wait_for = |kind: &str| -> Option<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(event) = receiver.recv_timeout(Duration::from_millis(100))
                && event["kind"] == kind
            {
                return Some(event);
            }
        }
        None
    };
    let id = create(&root);
    let created = wait_for("session.created").expect("the follower printed session.created");
    assert_eq!(created["stream"], format!("session/{id}"));
    sandlog(&root)
        .args(["files", "put", &id, "later.txt", "-"])
        .write_stdin("later")
        .assert()
        .success();
    let written = wait_for("file.written").expect("the follower printed file.written");
    assert_eq!(written["payload"]["path"], "later.txt");
    assert!(follower.try_wait()?.is_none(), "--follow must keep running");
    follower.kill()?;
    follower.wait()?;
    reader.join().unwrap();
    Ok(())
}

/// `log --follow | head -1`: once the reader has gone, the follower ends
/// (exit 0) without waiting for another event to write.
#[test]
fn log_follow_ends_when_its_reader_goes() -> TestResult {
    let (_dir, root) = init();
    let mut follower = sandlog_std(&root)
        .args(["log", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut stdout = std::io::BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first)?;
    assert!(first.contains("root.initialized"), "{first}");
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = follower.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            follower.kill()?;
            panic!("log --follow kept running after its reader closed the pipe");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    Ok(())
}

/// A Python exception: the guest's own traceback on stderr, no wasmtime
/// backtrace, the outcome and exit code on the last line, exit 5.
#[test]
fn guest_failure_shows_the_traceback_and_the_outcome_last() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let output = sandlog(&root)
        .args(["exec", &id, "--code", "def f():\n    return 1 / 0\nf()\n"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let stderr = String::from_utf8(output.stderr)?;
    assert!(
        stderr.contains("Traceback (most recent call last):"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ZeroDivisionError: division by zero"),
        "{stderr}"
    );
    assert!(stderr.contains("in f"), "{stderr}");
    assert!(!stderr.contains("wasm backtrace"), "{stderr}");
    assert_eq!(
        stderr.trim_end().lines().last(),
        Some("sandlog: exec failed: outcome error, exit code 1"),
        "{stderr}"
    );
    // A limit: no exit code, the reason without frames.
    let output = sandlog(&root)
        .args(["exec", &id, "--fuel", "1000", "--code", "while True: pass"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let stderr = String::from_utf8(output.stderr)?;
    let last = stderr
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(
        last.starts_with("sandlog: exec failed: outcome out_of_fuel, no exit code"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("wasm backtrace") && !stderr.contains("0x"),
        "{stderr}"
    );
    // `sys.exit(3)`: the guest's exit code.
    let output = sandlog(&root)
        .args(["exec", &id, "--code", "import sys; sys.exit(3)"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let stderr = String::from_utf8(output.stderr)?;
    assert_eq!(
        stderr.trim_end().lines().last(),
        Some("sandlog: exec failed: outcome error, exit code 3")
    );
    Ok(())
}

/// Errors name the flag to pass, not the library's field.
#[test]
fn errors_name_cli_flags() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let put = |args: &[&str]| {
        sandlog(&root)
            .args(["files", "put", &id, "a/b.txt", "-"])
            .args(args)
            .write_stdin("x")
            .assert()
    };
    put(&[]).success();
    let again = put(&[]).code(1).get_output().stderr.clone();
    let again = String::from_utf8(again)?;
    assert!(again.contains("pass --overwrite"), "{again}");
    assert!(!again.contains("pass overwrite"), "{again}");
    put(&["--overwrite"]).success();
    let rm = sandlog(&root)
        .args(["files", "rm", &id, "a"])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let rm = String::from_utf8(rm)?;
    assert!(rm.contains("pass --recursive"), "{rm}");
    let unknown = sandlog(&root)
        .args(["session", "show", "00000000-0000-4000-8000-000000000000"])
        .assert()
        .code(3)
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8(unknown)?.contains("sandlog session list"));
    Ok(())
}

/// `reconcile` on a clean root: a one-line summary and exit 0; with an
/// orphan directory and a missing workspace: each named, the summary, exit
/// 4; `--json` keeps the document (and the exit code).
#[test]
fn reconcile_summarises_and_exits_4_on_drift() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let clean = stdout_of(sandlog(&root).arg("reconcile"));
    assert_eq!(clean.trim(), "the disk matches the log", "{clean}");
    let orphan = "0f0f0f0f-0000-4000-8000-000000000000";
    std::fs::create_dir_all(root.join("workspaces").join(orphan))?;
    std::fs::remove_dir_all(root.join("workspaces").join(&id))?;
    let dry = sandlog(&root)
        .args(["reconcile", "--dry-run", "--orphan-grace", "0s"])
        .assert()
        .code(4)
        .get_output()
        .stdout
        .clone();
    let dry = String::from_utf8(dry)?;
    assert!(dry.contains("orphan directory 0f0f0f0f"), "{dry}");
    assert!(dry.contains("would be moved to quarantine/"), "{dry}");
    assert!(!dry.contains('{'), "no raw JSON in human output: {dry}");
    let report = json(
        &sandlog(&root)
            .args(["--json", "reconcile", "--orphan-grace", "0s"])
            .assert()
            .code(4)
            .get_output()
            .stdout,
    );
    assert_eq!(report["orphans"][0], orphan);
    assert!(!report["drift"].as_array().unwrap().is_empty(), "{report}");
    let human = String::from_utf8(
        sandlog(&root)
            .args(["reconcile", "--orphan-grace", "0s"])
            .assert()
            .get_output()
            .stdout
            .clone(),
    )?;
    assert!(
        human.contains(&format!("drift in session {}", &id[..8]))
            || human.contains("the disk matches"),
        "{human}"
    );
    let help = stdout_of(sandlog_bare().args(["reconcile", "--help"]));
    assert!(
        help.contains("--orphan-grace") && help.contains("default: 60s"),
        "{help}"
    );
    Ok(())
}

/// `prune --max-sessions N` needs no `--older-than`; nothing to select is
/// a usage error naming the flags.
#[test]
fn prune_by_caps_without_older_than() -> TestResult {
    let (_dir, root) = init();
    let first = create(&root);
    std::thread::sleep(Duration::from_millis(20));
    let second = create(&root);
    let report = json(
        &sandlog(&root)
            .args(["--json", "prune", "--max-sessions", "1"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(report["deleted_sessions"], serde_json::json!([first]));
    let kept = json(
        &sandlog(&root)
            .args(["--json", "session", "list", "--status", "active"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(kept[0]["session_id"], second.as_str());
    let report = json(
        &sandlog(&root)
            .args([
                "--json",
                "prune",
                "--max-bytes",
                "1GiB",
                "--max-deletions",
                "5",
            ])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(report["deleted_sessions"], serde_json::json!([]));
    let error = sandlog(&root)
        .args(["prune", "--max-deletions", "5"])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let error = String::from_utf8(error)?;
    assert!(
        error.contains("--older-than") && error.contains("--max-sessions"),
        "{error}"
    );
    Ok(())
}

/// The OS user name the password database gives this uid (`id -un`).
fn os_user() -> String {
    let output = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// The actor of the newest event.
fn last_actor(root: &Path) -> String {
    let out = stdout_of(sandlog(root).args(["--json", "log", "--tail", "1"]));
    json(out.trim().as_bytes())["actor"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Every event records who acted: `--actor`, else `$SANDLOG_ACTOR`, else
/// `$USER`, else the uid's name; with `USER` and `LOGNAME` unset, never
/// "unknown".
#[test]
fn events_record_the_actor() -> TestResult {
    let (_dir, root) = init();
    sandlog(&root)
        .env_remove("USER")
        .env_remove("LOGNAME")
        .args(["session", "create"])
        .assert()
        .success();
    let actor = last_actor(&root);
    assert_eq!(actor, os_user());
    assert_ne!(actor, "unknown");
    assert!(!actor.is_empty());
    sandlog(&root)
        .env("USER", "ana")
        .args(["session", "create"])
        .assert()
        .success();
    assert_eq!(last_actor(&root), "ana");
    sandlog(&root)
        .env("USER", "ana")
        .env("SANDLOG_ACTOR", "ci-bot")
        .args(["session", "create"])
        .assert()
        .success();
    assert_eq!(last_actor(&root), "ci-bot");
    sandlog(&root)
        .env("SANDLOG_ACTOR", "ci-bot")
        .args(["--actor", "alice", "session", "create"])
        .assert()
        .success();
    assert_eq!(last_actor(&root), "alice");
    // Reconcile's and prune's run events carry the actor too.
    sandlog(&root)
        .args(["--actor", "janitor", "prune", "--older-than", "1d"])
        .assert()
        .success();
    assert_eq!(last_actor(&root), "janitor");
    Ok(())
}
