//! Hostile input to the `sandlog` binary: roots that are missing or lost
//! their log, names with control characters, non-UTF-8 arguments, closed
//! pipes, symlinks in the export directory. Real binary, real roots, real
//! python.wasm.

#![cfg(test)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use assert_cmd::Command;
use serde_json::Value;

use crate::common::{sandlog, sandlog_std};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const EVIL_NAME: &str = "evil\n2026-01-01 forged line\x1b[31m";

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    (dir, root)
}

fn create(root: &Path) -> String {
    let output = sandlog(root)
        .args(["--json", "session", "create"])
        .assert()
        .success();
    let created: Value = serde_json::from_slice(&output.get_output().stdout).unwrap();
    created["session_id"].as_str().unwrap().to_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The root still works: a new session runs `print(1)` and verify is ok.
fn assert_usable(root: &Path) {
    let id = create(root);
    sandlog(root)
        .args(["exec", &id, "--code", "print(1)"])
        .assert()
        .success()
        .stdout("1\n");
    sandlog(root).arg("verify").assert().success();
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A missing root directory, or a directory holding no root, is "not
/// found" (exit 3) for every command but init and adopt, with a message
/// naming `sandlog init`; nothing is created. Method: run read-only and
/// writing commands on a missing path and on an empty directory, then list
/// the directory.
#[test]
fn commands_on_a_missing_or_foreign_root_exit_3_and_create_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("does-not-exist");
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign)?;
    std::fs::write(foreign.join("notes.txt"), "mine")?;
    let commands: [&[&str]; 6] = [
        &["log"],
        &["verify"],
        &["stats"],
        &["session", "list"],
        &["session", "create"],
        &["digest"],
    ];
    for root in [&missing, &foreign] {
        for args in commands {
            let output = sandlog(root).args(args).assert().code(3);
            let text = stderr(output.get_output());
            assert!(
                text.contains("no sandlog root at") && text.contains("sandlog init"),
                "{args:?}: {text}"
            );
            let output = sandlog(root).arg("--json").args(args).assert().code(3);
            let error: Value = serde_json::from_slice(&output.get_output().stderr)?;
            assert_eq!(error["error"]["kind"], "root_missing", "{args:?}");
        }
    }
    assert!(!missing.exists(), "a missing root was created");
    assert_eq!(entries(&foreign), ["notes.txt"]);
    Ok(())
}

/// A root whose database was deleted, emptied or replaced by another
/// root's is an integrity failure (exit 4) naming the anchor and
/// `--reset-log`, and no database is recreated; `init` alone does not
/// paper over it; `init --reset-log` does, keeping the old anchor.
#[test]
fn a_lost_database_is_an_integrity_failure_until_reset_log() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    let database = root.join("sandlog.db");
    let backup = dir.path().join("backup.db");
    std::fs::copy(&database, &backup)?;
    let remove_database = || {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(root.join(format!("sandlog.db{suffix}")));
        }
    };

    remove_database();
    for args in [&["verify"][..], &["session", "list"], &["init"]] {
        let output = sandlog(&root).args(args).assert().code(4);
        let text = stderr(output.get_output());
        assert!(
            text.contains("sandlog.db is missing")
                && text.contains("sandlog.anchor")
                && text.contains("--reset-log"),
            "{args:?}: {text}"
        );
        assert!(!database.exists(), "{args:?} recreated the database");
    }
    let output = sandlog(&root).args(["--json", "verify"]).assert().code(4);
    let json: Value = serde_json::from_slice(&output.get_output().stderr)?;
    assert_eq!(json["error"]["kind"], "integrity");

    std::fs::write(&database, b"")?;
    let output = sandlog(&root).arg("stats").assert().code(4);
    assert!(stderr(output.get_output()).contains("sandlog.db is empty"));
    assert_eq!(std::fs::metadata(&database)?.len(), 0);

    let (_other_dir, other) = init();
    create(&other);
    remove_database();
    std::fs::copy(other.join("sandlog.db"), &database)?;
    let output = sandlog(&root).arg("verify").assert().code(4);
    assert!(stderr(output.get_output()).contains("another log"));

    // Restoring the backup is the other way back.
    remove_database();
    std::fs::copy(&backup, &database)?;
    sandlog(&root)
        .args(["session", "show", &id])
        .assert()
        .success();

    remove_database();
    sandlog(&root)
        .args(["init", "--reset-log"])
        .assert()
        .success();
    let kept: Vec<String> = entries(&root)
        .into_iter()
        .filter(|name| name.starts_with("sandlog.anchor.replaced-"))
        .collect();
    assert_eq!(kept.len(), 1, "{:?}", entries(&root));
    sandlog(&root)
        .args(["session", "show", &id])
        .assert()
        .code(3);
    assert_usable(&root);
    Ok(())
}

/// A guest-chosen file name with a newline and an escape sequence cannot
/// forge lines or colours in human output (`files ls`, `session timeline`,
/// `log`); `--json` keeps the exact name.
#[test]
fn guest_names_with_control_characters_are_escaped_for_humans_exact_in_json() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args([
            "exec",
            &id,
            "--code",
            r#"open("evil\n2026-01-01 forged line\x1b[31m", "w").write("x")"#,
        ])
        .assert()
        .success();
    for args in [
        vec!["files", "ls", id.as_str()],
        vec!["session", "timeline", id.as_str()],
        vec!["log"],
    ] {
        let output = sandlog(&root).args(&args).assert().success();
        let stdout = output.get_output().stdout.clone();
        assert!(!stdout.contains(&0x1b), "{args:?}: raw ESC in output");
        let text = String::from_utf8(stdout)?;
        assert!(
            !text
                .lines()
                .any(|line| line.trim_start().starts_with("2026-01-01 forged")),
            "{args:?}: forged line:\n{text}"
        );
        assert!(
            text.contains(r"evil\n2026-01-01 forged line\x1b[31m"),
            "{args:?}: {text}"
        );
    }
    let output = sandlog(&root)
        .args(["--json", "files", "ls", &id])
        .assert()
        .success();
    let files: Value = serde_json::from_slice(&output.get_output().stdout)?;
    assert_eq!(files[0]["path"], EVIL_NAME);
    assert_usable(&root);
    Ok(())
}

/// Arguments that are not UTF-8 never panic: a session id or a workspace
/// path is a usage error (exit 2) naming the problem, a root path is just a
/// root that does not exist (exit 3).
#[test]
fn non_utf8_arguments_are_errors_not_panics() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let bad = OsStr::from_bytes(b"\xff");
    let checks: Vec<(Command, i32)> = vec![
        (
            {
                let mut command = sandlog(bad);
                command.args(["session", "list"]);
                command
            },
            3,
        ),
        (
            {
                let mut command = sandlog(&root);
                command.args(["--json", "session", "show"]).arg(bad);
                command
            },
            2,
        ),
        (
            {
                let mut command = sandlog(&root);
                command.args(["files", "cat", &id]).arg(bad);
                command
            },
            2,
        ),
    ];
    for (mut command, code) in checks {
        let output = command.assert().code(code);
        let text = stderr(output.get_output());
        assert!(!text.contains("panicked"), "{text}");
        assert!(!text.trim().is_empty(), "no message");
    }
    assert_usable(&root);
    Ok(())
}

/// The documented exit codes: unknown session 3, missing root 3, a path
/// leaving the workspace 2, a bad flag value 2.
#[test]
fn exit_codes_follow_the_contract() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args(["session", "show", "6f1c1d3e-8b9a-4c2d-9e8f-0a1b2c3d4e5f"])
        .assert()
        .code(3);
    sandlog(&root)
        .args(["files", "ls", "6f1c1d3e-8b9a-4c2d-9e8f-0a1b2c3d4e5f"])
        .assert()
        .code(3);
    sandlog(dir.path().join("nope")).arg("log").assert().code(3);
    let output = sandlog(&root)
        .args(["--json", "files", "cat", &id, "../x"])
        .assert()
        .code(2);
    let error: Value = serde_json::from_slice(&output.get_output().stderr)?;
    assert_eq!(error["error"]["kind"], "invalid_path");
    sandlog(&root)
        .args(["exec", &id, "--timeout", "banana", "--code", "print(1)"])
        .assert()
        .code(2);
    assert_usable(&root);
    Ok(())
}

/// Output into a pipe whose reader is gone ends the command quietly: no
/// panic, nothing on stderr. Method: the child's stdout is a pipe whose
/// read end is closed before the child starts, so its first write fails.
#[test]
fn a_closed_pipe_ends_the_command_quietly() -> TestResult {
    let (_dir, root) = init();
    create(&root);
    for args in [
        vec!["completions", "bash"],
        vec!["man"],
        vec!["log"],
        vec!["--json", "log"],
        vec!["session", "list"],
    ] {
        let (reader, writer) = std::io::pipe()?;
        drop(reader);
        let output = sandlog_std(&root)
            .args(&args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()?;
        assert_eq!(stderr(&output), "", "{args:?}");
        assert_eq!(output.status.code(), Some(0), "{args:?}");
    }
    assert_usable(&root);
    Ok(())
}

/// `export-metadata` never writes through a symlink in the target
/// directory and never overwrites without `--force`; with it, the symlink
/// itself is replaced by a file and its target is untouched.
#[test]
fn export_metadata_never_follows_symlinks_or_overwrites_without_force() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    let export = dir.path().join("export");
    std::fs::create_dir(&export)?;
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious")?;
    let link = export.join(format!("{id}.json"));
    std::os::unix::fs::symlink(&victim, &link)?;

    let output = sandlog(&root)
        .arg("export-metadata")
        .arg(&export)
        .assert()
        .code(1);
    assert!(stderr(output.get_output()).contains("--force"));
    assert_eq!(std::fs::read_to_string(&victim)?, "precious");
    assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());

    sandlog(&root)
        .args(["export-metadata", "--force"])
        .arg(&export)
        .assert()
        .success();
    assert_eq!(std::fs::read_to_string(&victim)?, "precious");
    assert!(std::fs::symlink_metadata(&link)?.file_type().is_file());
    let metadata: Value = serde_json::from_str(&std::fs::read_to_string(&link)?)?;
    assert!(metadata.is_object());
    assert_eq!(entries(&export), [format!("{id}.json")]);

    // A plain existing file is not overwritten without --force either.
    std::fs::write(&link, "keep")?;
    sandlog(&root)
        .arg("export-metadata")
        .arg(&export)
        .assert()
        .code(1);
    assert_eq!(std::fs::read_to_string(&link)?, "keep");
    assert_usable(&root);
    Ok(())
}

/// Paths the engine refuses map to the contract's codes: a missing file is
/// not found (3, `not_found`); a name that reaches outside the workspace
/// through a planted symlink, or a directory where a file is needed, is
/// bad input (2, `path_escapes` / `is_directory`); code over its limit is
/// bad input (2). Method: plant a symlink to an outside file and a
/// directory in the workspace, then check codes, kinds, and that the
/// outside file's contents never reach stdout.
#[test]
fn refused_paths_and_oversized_code_follow_the_exit_code_contract() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "outside secret")?;
    let workspace = root.join("workspaces").join(&id);
    std::os::unix::fs::symlink(&secret, workspace.join("link"))?;
    std::fs::create_dir(workspace.join("sub"))?;

    let kind =
        |args: &[&str], code: i32| -> Result<(String, Vec<u8>), Box<dyn std::error::Error>> {
            let output = sandlog(&root).arg("--json").args(args).assert().code(code);
            let error: Value = serde_json::from_slice(&output.get_output().stderr)?;
            Ok((
                error["error"]["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                output.get_output().stdout.clone(),
            ))
        };
    assert_eq!(kind(&["files", "cat", &id, "nothere"], 3)?.0, "not_found");
    let (escapes, stdout) = kind(&["files", "cat", &id, "link"], 2)?;
    assert_eq!(escapes, "path_escapes");
    assert!(!String::from_utf8_lossy(&stdout).contains("outside secret"));
    assert_eq!(kind(&["files", "cat", &id, "sub"], 2)?.0, "is_directory");
    assert_eq!(kind(&["files", "rm", &id, "sub"], 2)?.0, "is_directory");

    let code = dir.path().join("big.py");
    std::fs::write(&code, vec![b'#'; 1024 * 1024 + 1])?;
    let output = sandlog(&root)
        .args(["exec", &id, "--file"])
        .arg(&code)
        .assert()
        .code(2);
    assert!(stderr(output.get_output()).contains("CODE_BYTES_MAX"));
    assert_eq!(std::fs::read_to_string(&secret)?, "outside secret");
    assert_usable(&root);
    Ok(())
}

/// A root whose path is not UTF-8 is a legal Linux path and works like any
/// other; only a missing one is "not found". Human and JSON output show the
/// byte as `\xff` (JSON strings hold only Unicode) instead of panicking.
#[test]
fn a_root_at_a_non_utf8_path_works() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join(OsStr::from_bytes(b"root\xff"));
    let output = sandlog(&root).arg("init").assert().success();
    let text = String::from_utf8(output.get_output().stdout.clone())?;
    assert!(text.contains("root\\xff"), "{text}");
    let output = sandlog(&root).args(["--json", "init"]).assert().success();
    let initialised: Value = serde_json::from_slice(&output.get_output().stdout)?;
    let shown = initialised["root"].as_str().ok_or("no root")?;
    assert!(shown.ends_with("root\\xff"), "{shown}");
    let id = create(&root);
    sandlog(&root)
        .args(["exec", &id, "--code", "print(1)"])
        .assert()
        .success()
        .stdout("1\n");
    sandlog(&root).arg("verify").assert().success();
    sandlog(dir.path().join(OsStr::from_bytes(b"gone\xff")))
        .arg("log")
        .assert()
        .code(3);
    Ok(())
}

/// A reader that takes one byte and goes away, with more than a pipe
/// buffer (64 KiB) still to come, ends the command quietly: exit 0,
/// nothing on stderr. Method: a session with a thousand guest-written
/// files makes `log` large; a large file makes `files cat` large; the
/// guest's own output makes `exec` large.
#[test]
fn a_reader_leaving_mid_stream_ends_the_command_quietly() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args([
            "exec",
            &id,
            "--code",
            "for i in range(1000):\n    open('file-%04d-with-a-long-name.txt' % i, 'w').write('x')\n\
             open('big.txt', 'w').write('y' * 300000)",
        ])
        .assert()
        .success();
    for args in [
        vec!["log"],
        vec!["--json", "log"],
        vec!["session", "timeline", id.as_str()],
        vec!["files", "ls", id.as_str()],
        vec!["files", "cat", id.as_str(), "big.txt"],
        vec!["exec", id.as_str(), "--code", "print('z' * 300000)"],
        vec!["completions", "bash"],
        vec!["man"],
    ] {
        let mut child = sandlog_std(&root)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        let mut first = [0u8; 1];
        std::io::Read::read_exact(&mut stdout, &mut first)?;
        drop(stdout);
        let output = child.wait_with_output()?;
        assert_eq!(stderr(&output), "", "{args:?}");
        assert_eq!(output.status.code(), Some(0), "{args:?}");
    }
    assert_usable(&root);
    Ok(())
}

/// A closed stderr does not turn an error into a panic: the exit code is
/// still the error's own. Method: the child's stderr is a pipe whose read
/// end is closed before it starts (a panic would exit 101).
#[test]
fn an_error_into_a_closed_stderr_keeps_its_exit_code() -> TestResult {
    let (_dir, root) = init();
    for (args, code) in [
        (vec!["session", "show", "not-an-id"], 2),
        (vec!["--json", "session", "show", "not-an-id"], 2),
        (
            vec!["session", "show", "6f1c1d3e-8b9a-4c2d-9e8f-0a1b2c3d4e5f"],
            3,
        ),
        (vec!["exec", "--no-such-flag"], 2),
    ] {
        let (reader, writer) = std::io::pipe()?;
        drop(reader);
        let status = sandlog_std(&root)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(writer))
            .status()?;
        assert_eq!(status.code(), Some(code), "{args:?}");
    }
    assert_usable(&root);
    Ok(())
}

/// A dangling symlink planted as `<uuid>.json` is not a way to create a
/// file elsewhere: without `--force` the export refuses (exit 1, naming
/// `--force`) and the link's target is never created; with it, the link
/// itself becomes the metadata file.
#[test]
fn export_metadata_never_creates_a_dangling_symlinks_target() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    let export = dir.path().join("export");
    std::fs::create_dir(&export)?;
    let target = dir.path().join("planted.txt");
    let link = export.join(format!("{id}.json"));
    std::os::unix::fs::symlink(&target, &link)?;

    let output = sandlog(&root)
        .arg("export-metadata")
        .arg(&export)
        .assert()
        .code(1);
    assert!(stderr(output.get_output()).contains("pass --force"));
    assert!(!target.exists());
    sandlog(&root)
        .args(["export-metadata", "--force"])
        .arg(&export)
        .assert()
        .success();
    assert!(!target.exists());
    assert!(std::fs::symlink_metadata(&link)?.file_type().is_file());
    let metadata: Value = serde_json::from_str(&std::fs::read_to_string(&link)?)?;
    assert_eq!(metadata["session_id"], id.as_str());
    assert_eq!(entries(&export), [format!("{id}.json")]);
    assert_usable(&root);
    Ok(())
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

fn error_of(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stderr)
        .unwrap_or_else(|error| panic!("stderr is not JSON ({error}): {}", stderr(output)))
}

/// Goal: no input the CLI is given can hang it or exhaust its memory: a
/// FIFO (no writer ever comes), `/dev/zero` and a directory given as a
/// code file, an upload, a key, a checkpoint, a bundle or a context file
/// are refused at once (exit 2) naming what the path is; code on stdin
/// from `/dev/zero` stops at the named limit. Each command runs under a
/// deadline that would catch a hang.
#[test]
fn fifos_and_devices_given_as_input_are_refused_unread() -> TestResult {
    let (dir, root) = init();
    let id = create(&root);
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let fifo_text = fifo.to_str().unwrap().to_owned();
    let cases: Vec<Vec<&str>> = vec![
        vec!["exec", &id, "--file", &fifo_text],
        vec!["exec", &id, "--file", "/dev/zero"],
        vec!["exec", &id, "--file", "/tmp"],
        vec!["files", "put", &id, "in.bin", "--from", &fifo_text],
        vec!["files", "put", &id, "in.bin", "--from", "/dev/zero"],
        vec!["checkpoint", "--key", &fifo_text],
        vec!["checkpoint", "--key", "/dev/zero"],
        vec!["verify", "--checkpoint", &fifo_text, "--vkey", &fifo_text],
        vec!["evidence", "verify", &fifo_text, "--vkey", &fifo_text],
        vec!["evidence", "verify", "/dev/zero", "--vkey", "/dev/zero"],
        vec!["session", "create", "--context", &fifo_text],
    ];
    for case in &cases {
        let started = std::time::Instant::now();
        let output = sandlog(&root)
            .arg("--json")
            .args(case)
            .timeout(std::time::Duration::from_secs(30))
            .output()?;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{case:?}: {}",
            stderr(&output)
        );
        let error = error_of(&output);
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("FIFO")
                || message.contains("character device")
                || message.contains("directory"),
            "{case:?}: {message}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(25),
            "{case:?} took too long"
        );
    }
    let zero = std::fs::File::open("/dev/zero")?;
    let output = sandlog_std(&root)
        .args(["--json", "exec", &id, "-"])
        .stdin(zero)
        .output()?;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("CODE_BYTES_MAX"),
        "{}",
        stderr(&output)
    );
    // Nothing was recorded by any of them.
    let log = sandlog(&root)
        .args(["--json", "log", "--session", &id])
        .output()?;
    assert!(!String::from_utf8_lossy(&log.stdout).contains("session.executed"));
    assert_usable(&root);
    Ok(())
}

/// Goal: a signing key that others may read is refused, as ssh refuses
/// one, with the command that fixes it. Method: `keygen` writes a key
/// (mode 0600) that signs; made 0644 it is refused (exit 2, `chmod 600`
/// in the message); made 0600 again it signs.
#[test]
fn a_signing_key_readable_by_others_is_refused() -> TestResult {
    use std::os::unix::fs::PermissionsExt;
    let (dir, root) = init();
    let key = dir.path().join("log.key");
    sandlog(&root)
        .args(["keygen", "--name", "sandlog.test/log", "-o"])
        .arg(&key)
        .assert()
        .success();
    sandlog(&root)
        .args(["checkpoint", "--key"])
        .arg(&key)
        .assert()
        .success();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644))?;
    let output = sandlog(&root)
        .args(["--json", "checkpoint", "--key"])
        .arg(&key)
        .output()?;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let error = error_of(&output);
    assert_eq!(error["error"]["kind"], "key_exposed");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("chmod 600"),
        "{error}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    sandlog(&root)
        .args(["checkpoint", "--key"])
        .arg(&key)
        .assert()
        .success();
    Ok(())
}

/// Goal: a damaged database is an integrity failure naming the file
/// (exit 4), not an I/O error (exit 1). Method: two roots; one has its
/// SQLite header overwritten ("not a database"), the other every page
/// after the first few zeroed ("malformed"); read commands fail with
/// exit 4 naming `sandlog.db`.
#[test]
fn a_corrupted_database_is_an_integrity_failure() -> TestResult {
    for damage in ["header", "pages"] {
        let (_dir, root) = init();
        for _ in 0..20 {
            create(&root);
        }
        let database = root.join("sandlog.db");
        // Fold the WAL in, so the damage is to the file every read uses.
        {
            let connection = rusqlite::Connection::open(&database)?;
            connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        let mut bytes = std::fs::read(&database)?;
        match damage {
            "header" => bytes[..100].fill(0x5a),
            _ => {
                let page = 4096;
                for byte in bytes.iter_mut().skip(2 * page) {
                    *byte = 0x5a;
                }
            }
        }
        std::fs::write(&database, &bytes)?;
        let output = sandlog(&root)
            .args(["--json", "log", "--limit", "100"])
            .output()?;
        assert_eq!(
            output.status.code(),
            Some(4),
            "{damage}: {}",
            stderr(&output)
        );
        let error = error_of(&output);
        assert_eq!(error["error"]["class"], "integrity", "{damage}: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("sandlog.db"),
            "{damage}: {error}"
        );
    }
    Ok(())
}

/// Goal: `reconcile --deep` keeps to the hashing bounds an execution's
/// scan has, so a 1 TiB sparse file left in a workspace cannot make it
/// read for ever. Method: a sparse 1 TiB file beside a file an execution
/// wrote; `reconcile --deep` (under a deadline that reading the file
/// would blow) reports it as drift with the all-zero "not hashed" hash,
/// and still checks the small file (no drift for it).
#[test]
fn deep_reconcile_does_not_read_a_huge_sparse_file() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args(["exec", &id, "--code", "open('small.txt', 'w').write('ok')"])
        .assert()
        .success();
    let sparse = root.join("workspaces").join(&id).join("huge.bin");
    std::fs::File::create(&sparse)?.set_len(1 << 40)?;
    let output = sandlog(&root)
        .args(["--json", "reconcile", "--deep"])
        .timeout(std::time::Duration::from_secs(120))
        .output()?;
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout)?;
    let drift = report["drift"].to_string();
    assert!(drift.contains("huge.bin"), "{report}");
    assert!(drift.contains(&"0".repeat(64)), "{report}");
    assert!(!drift.contains("small.txt"), "{report}");
    std::fs::remove_file(&sparse)?;
    Ok(())
}

/// Goal: a guest that opens a FIFO in its workspace (waiting in the host
/// for a writer or a reader that never comes, where no epoch check
/// reaches it) is still ended by `--timeout`, and the run is recorded with
/// outcome `timeout`; the session runs on. Method: a real FIFO placed in
/// the workspace from outside, a guest opening it for reading and one for
/// writing under a 1 s timeout; each `exec` runs under a 60 s deadline
/// that would catch a hang (before the fix the first never returned).
#[test]
fn a_guest_opening_a_fifo_is_ended_by_its_timeout_and_recorded() -> TestResult {
    let (_dir, root) = init();
    let id = create(&root);
    let fifo = root.join("workspaces").join(&id).join("pipe");
    mkfifo(&fifo);
    let guests = [
        "print(open('/app/pipe').read())",
        "open('/app/pipe', 'w').write('x' * 100000)",
    ];
    for code in guests {
        let output = sandlog(&root)
            .args(["--json", "exec", &id, "--timeout", "1s", "--code", code])
            .timeout(std::time::Duration::from_secs(60))
            .output()?;
        assert_eq!(output.status.code(), Some(5), "{code}: {}", stderr(&output));
        let record: Value = serde_json::from_slice(&output.stdout)?;
        assert_eq!(record["outcome"], "timeout", "{code}: {record}");
    }
    let log = sandlog(&root)
        .args([
            "--json",
            "log",
            "--session",
            &id,
            "--kind",
            "session.executed",
        ])
        .output()?;
    let executed = String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|line| line.contains("\"timeout\""))
        .count();
    assert_eq!(executed, 2, "{}", String::from_utf8_lossy(&log.stdout));
    std::fs::remove_file(&fifo)?;
    assert_usable(&root);
    Ok(())
}

/// Goal: a root this process cannot write (read-only media, another
/// user's root) can still be inspected: `verify`, `log`, `files cat`,
/// `report` and `evidence export` work, reading it read-only; a command
/// that must write (`exec`, `session create`) is refused with exit 1 and
/// a message saying the root is read-only, before anything runs; nothing
/// in the root changes. Method: a real root made by this user, then the
/// commands run by a real unprivileged process that may not write it
/// (`nobody` when the tests run as root, else the root made read-only).
#[test]
fn a_root_that_cannot_be_written_can_still_be_inspected() -> TestResult {
    use std::os::unix::fs::PermissionsExt;
    let (dir, root) = init();
    let id = create(&root);
    sandlog(&root)
        .args(["exec", &id, "--code", "open('a.txt', 'w').write('kept')"])
        .assert()
        .success();
    let key = dir.path().join("log.key");
    sandlog(&root)
        .args(["keygen", "--name", "sandlog.test/log", "-o"])
        .arg(&key)
        .assert()
        .success();
    sandlog(&root)
        .args(["checkpoint", "--key"])
        .arg(&key)
        .assert()
        .success();
    let as_root = sandlog_tests::cli::running_as_root();
    // Where the unprivileged process may write its outputs.
    let out = tempfile::tempdir()?;
    std::fs::set_permissions(out.path(), std::fs::Permissions::from_mode(0o777))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    if !as_root {
        let status = std::process::Command::new("chmod")
            .args(["-R", "a-w"])
            .arg(&root)
            .status()?;
        assert!(status.success());
    }
    let before = tree_listing(&root);
    let reader = |args: &[&str]| {
        sandlog_tests::cli::unprivileged_command(
            std::path::Path::new(env!("CARGO_BIN_EXE_sandlog")),
            &root,
            out.path(),
        )
        .args(args)
        .output()
    };
    let report = out.path().join("report.html");
    let bundle = out.path().join("session.bundle");
    let report_text = report.to_string_lossy().into_owned();
    let bundle_text = bundle.to_string_lossy().into_owned();
    let inspections: [&[&str]; 6] = [
        &["verify"],
        &["log", "--session", &id],
        &["files", "cat", &id, "a.txt"],
        &["report", &id, "-o", &report_text],
        &["evidence", "export", &id, "-o", &bundle_text],
        &["session", "list"],
    ];
    for args in inspections {
        let output = reader(args)?;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        if args[0] == "files" {
            assert_eq!(output.stdout, b"kept");
        }
    }
    assert!(std::fs::metadata(&report)?.len() > 0);
    assert!(std::fs::metadata(&bundle)?.len() > 0);
    let writes: [&[&str]; 2] = [
        &["exec", &id, "--code", "open('b.txt', 'w').write('x')"],
        &["session", "create"],
    ];
    for args in writes {
        let output = reader(args)?;
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        let message = stderr(&output);
        assert!(message.contains("is open read-only"), "{args:?}: {message}");
    }
    assert_eq!(tree_listing(&root), before, "the root changed");
    if !as_root {
        let status = std::process::Command::new("chmod")
            .args(["-R", "u+w"])
            .arg(&root)
            .status()?;
        assert!(status.success());
    }
    sandlog(&root).arg("verify").assert().success();
    Ok(())
}

/// Every path under `dir` with its size and modification time.
fn tree_listing(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            let metadata = entry.metadata().unwrap();
            if metadata.is_dir() {
                pending.push(entry.path());
            }
            found.push((entry.path(), metadata.len(), metadata.modified().unwrap()));
        }
    }
    found.sort();
    found
}
