//! `files put` from an endless input: the copy streams with bounded memory,
//! stops at the workspace quota, and leaves nothing behind.

#![cfg(test)]
// wait4(2) gives the peak memory of exactly one child, which no safe std
// API reports.
#![allow(unsafe_code)]

use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::common::{sandlog, sandlog_std};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The default workspace quota (`WORKSPACE_BYTES_DEFAULT`), bytes.
const QUOTA_BYTES: u64 = 100 * 1024 * 1024;

/// The most resident memory a refused `files put` may reach, KiB. Holding
/// the input would need the whole quota (100 MiB); streaming needs one
/// chunk plus the process's own baseline.
const PUT_RSS_KIB_MAX: i64 = 64 * 1024;

/// How far past the quota the copy may read before it stops: one chunk
/// (`WRITE_CHUNK_BYTES`).
const READ_PAST_BYTES_MAX: u64 = 64 * 1024;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

fn events_in_log(root: &Path) -> rusqlite::Result<i64> {
    let connection = rusqlite::Connection::open(root.join("sandlog.db"))?;
    connection.query_row("SELECT count(*) FROM events", [], |row| row.get(0))
}

/// What a finished child did: exit code, stderr, peak resident KiB.
struct Finished {
    code: i32,
    stderr: String,
    max_rss_kib: i64,
}

/// Runs `sandlog --root ROOT ARGS` with `stdin`, and reaps it with wait4 to
/// read its own peak memory (not that of any other child of this process).
fn run_measured(
    root: &Path,
    args: &[&str],
    stdin: Stdio,
) -> Result<Finished, Box<dyn std::error::Error>> {
    let mut command = sandlog_std(root);
    let mut child = command
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .ok_or("no stderr pipe")?
        .read_to_string(&mut stderr)?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals; `pid` is our unreaped child (std's
    // `Child` is never waited on afterwards).
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "the child did not exit: {status}");
    Ok(Finished {
        code: libc::WEXITSTATUS(status),
        stderr,
        max_rss_kib: usage.ru_maxrss,
    })
}

/// Goal: `files put` of an endless input stops with a usage error: a device
/// named by `--from` (`/dev/zero`) is refused unread, and an endless
/// stream on stdin stops at the workspace quota with an error naming it;
/// holds only a bounded buffer in memory, and leaves no file, no temporary
/// file and no event. Method: run the real binary on a fresh root, reaping
/// it with wait4 for its peak RSS; compare the workspace listing and the
/// log length before and after; then another session still runs Python and
/// `verify` passes.
#[test]
fn files_put_of_an_endless_input_stops_at_the_quota_and_leaves_nothing() -> TestResult {
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
    let id = created["session_id"]
        .as_str()
        .ok_or("no session_id")?
        .to_owned();
    let workspace = root.join("workspaces").join(&id);
    let events_before = events_in_log(&root)?;

    // A device named with --from is refused before a byte is read.
    let from_file = run_measured(
        &root,
        &["--json", "files", "put", &id, "big", "--from", "/dev/zero"],
        Stdio::null(),
    )?;
    assert_eq!(from_file.code, 2, "{}", from_file.stderr);
    let error = json(from_file.stderr.as_bytes());
    assert_eq!(error["error"]["kind"], "not_a_file");
    let message = error["error"]["message"].as_str().ok_or("no message")?;
    assert!(
        message.contains("/dev/zero is a character device"),
        "{message}"
    );
    assert!(
        from_file.max_rss_kib < PUT_RSS_KIB_MAX,
        "peak RSS {} KiB",
        from_file.max_rss_kib
    );

    // An endless stream on stdin stops at the quota.
    let from_stdin = run_measured(
        &root,
        &["--json", "files", "put", &id, "sub/big", "-"],
        Stdio::from(std::fs::File::open("/dev/zero")?),
    )?;
    assert_eq!(from_stdin.code, 2, "{}", from_stdin.stderr);
    let error = json(from_stdin.stderr.as_bytes());
    assert_eq!(error["error"]["kind"], "too_large");
    let message = error["error"]["message"].as_str().ok_or("no message")?;
    assert!(
        message.starts_with(&format!(
            "sub/big: the input is larger than the {QUOTA_BYTES} bytes (100 MiB) left under session {id}'s workspace quota of {QUOTA_BYTES} bytes (100 MiB) (stopped after reading "
        )) && message.ends_with(
            " bytes); nothing was written. Raise the quota, free space in the workspace, or write a smaller file."
        ),
        "{message}"
    );
    // It stopped within one chunk of the limit, not at the end of the input.
    let read: u64 = message
        .split("stopped after reading ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .ok_or("no byte count")?
        .parse()?;
    assert!(
        read > QUOTA_BYTES && read <= QUOTA_BYTES + READ_PAST_BYTES_MAX,
        "{read}"
    );
    assert!(
        from_stdin.max_rss_kib < PUT_RSS_KIB_MAX,
        "peak RSS {} KiB",
        from_stdin.max_rss_kib
    );

    // Nothing left: no file, no temporary file, not even the parent
    // directory of the second write; no event.
    let left: Vec<String> = std::fs::read_dir(&workspace)?
        .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    assert_eq!(left, Vec::<String>::new());
    assert_eq!(events_in_log(&root)?, events_before);

    // A write that fits still works, and the root stays usable.
    sandlog(&root)
        .args(["files", "put", &id, "small", "-"])
        .write_stdin("fits")
        .assert()
        .success();
    let other = json(
        &sandlog(&root)
            .args(["--json", "session", "create"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let other = other["session_id"]
        .as_str()
        .ok_or("no session_id")?
        .to_owned();
    let run = sandlog(&root)
        .args(["exec", &other, "--code", "print(1)"])
        .assert()
        .success();
    assert_eq!(run.get_output().stdout, b"1\n");
    sandlog(&root).args(["verify"]).assert().success();
    Ok(())
}
