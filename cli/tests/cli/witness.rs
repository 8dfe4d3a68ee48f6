//! Witnesses through the real binary: `sandlog witness serve` processes on
//! loopback ports, `sandlog checkpoint --witness` asking them to cosign,
//! K-of-N enforced by `verify --checkpoint` and `evidence verify`, a split
//! view refused, the witness's state surviving SIGKILL, the protocol's
//! statuses over raw HTTP, and the independent Python verifier
//! (tests/python/verify_evidence.py) checking the cosignatures.

#![cfg(test)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

use crate::common::sandlog;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn json_success(command: &mut Command) -> Value {
    let output = command.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(&output)))
}

/// Runs `command`, expects exit `code`, and returns its stderr.
fn stderr_failure(command: &mut Command, code: i32) -> String {
    let output = command.assert().code(code).get_output().stderr.clone();
    String::from_utf8_lossy(&output).into_owned()
}

fn init(dir: &Path, name: &str) -> PathBuf {
    let root = dir.join(name);
    sandlog(&root).args(["--json", "init"]).assert().success();
    root
}

/// Appends events to the log (a new session: no Python needed).
fn grow(root: &Path) {
    sandlog(root)
        .args(["--json", "session", "create"])
        .assert()
        .success();
}

/// Makes a key with `keygen` (`--witness` for a witness's); returns the
/// key file and the verifier key.
fn keygen(dir: &Path, name: &str, witness: bool) -> (PathBuf, String) {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join(format!("{}.key", name.replace('/', "_")));
    let mut command = sandlog(dir.join("no-root"));
    command
        .args(["--json", "keygen", "--name", name, "-o"])
        .arg(&file);
    if witness {
        command.arg("--witness");
    }
    let made = json_success(&mut command);
    (file, made["vkey"].as_str().unwrap().to_owned())
}

/// A running `sandlog witness serve`; SIGKILLed when dropped.
struct Witness {
    child: Child,
    addr: SocketAddr,
    vkey: String,
}

impl Witness {
    fn start(key: &Path, vkey: &str, state: &Path, logs: &[&str]) -> Witness {
        let mut command = StdCommand::new(env!("CARGO_BIN_EXE_sandlog"));
        command
            .args(["witness", "serve", "--listen", "127.0.0.1:0", "--key"])
            .arg(key)
            .arg("--state")
            .arg(state)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for log in logs {
            command.args(["--log", log]);
        }
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("first line {line:?}"))
            .parse()
            .unwrap();
        Witness {
            child,
            addr,
            vkey: vkey.to_owned(),
        }
    }

    /// `--witness URL=VKEY`.
    fn flag(&self) -> String {
        format!("http://{}={}", self.addr, self.vkey)
    }

    /// SIGKILL, and wait for it to be gone.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One raw HTTP/1.1 request; returns the status, the content type, the body.
fn post(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    // A refused oversized body may close the connection mid-write.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {raw:?}"));
    let content_type = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

/// Signs a checkpoint of `root` with `key`, asking `witnesses`; the JSON.
fn checkpoint(root: &Path, key: &Path, witnesses: &[&Witness], extra: &[&str]) -> Command {
    let mut command = sandlog(root);
    command.args(["--json", "checkpoint", "--key"]).arg(key);
    for witness in witnesses {
        command.args(["--witness", &witness.flag()]);
    }
    command.args(extra);
    command
}

/// The signature lines of a note by name.
fn signers(note: &str) -> Vec<String> {
    note.rsplit_once("\n\n")
        .unwrap()
        .1
        .lines()
        .map(|line| line.split(' ').nth(1).unwrap().to_owned())
        .collect()
}

fn python_with_cryptography() {
    let has = || {
        StdCommand::new("python3")
            .args(["-c", "import cryptography"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if !has() {
        let installed = StdCommand::new("python3")
            .args(["-m", "pip", "install", "--quiet", "cryptography"])
            .status()
            .unwrap();
        assert!(
            installed.success() && has(),
            "python3 with the `cryptography` package is needed for the independent verifier, and `pip install cryptography` failed"
        );
    }
}

fn independent(args: &[&str]) -> (bool, String) {
    python_with_cryptography();
    let output = StdCommand::new("python3")
        .arg(repo().join("tests/python/verify_evidence.py"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Goal: a checkpoint cosigned by two real witness processes, K-of-N
/// enforced by both verifiers and by the independent one; a witness that
/// missed a checkpoint catches up through a 409. Method: two witnesses,
/// three checkpoints (the second with one witness only), verify with K=2
/// (ok), K=3 with a third key (refused, exit 4, naming it), an impostor
/// key under a real witness's name (does not count); export a bundle and
/// verify it with and without enough witnesses; Python checks the note.
#[test]
fn checkpoints_cosigned_by_witnesses_meet_k_of_n_on_every_verifier() {
    let dir = tempfile::tempdir().unwrap();
    let root = init(dir.path(), "root");
    grow(&root);
    let (log_key, log_vkey) = keygen(dir.path(), "sandlog.test/log", false);
    let (w1_key, w1_vkey) = keygen(dir.path(), "witness.test/one", true);
    let (w2_key, w2_vkey) = keygen(dir.path(), "witness.test/two", true);
    let (_, w3_vkey) = keygen(dir.path(), "witness.test/three", true);
    let (_, impostor_vkey) = keygen(&dir.path().join("other"), "witness.test/one", true);
    assert_ne!(impostor_vkey, w1_vkey);
    let one = Witness::start(&w1_key, &w1_vkey, &dir.path().join("w1"), &[&log_vkey]);
    let two = Witness::start(&w2_key, &w2_vkey, &dir.path().join("w2"), &[&log_vkey]);

    let first = json_success(&mut checkpoint(&root, &log_key, &[&one, &two], &[]));
    let note = first["note"].as_str().unwrap();
    assert_eq!(
        signers(note),
        ["sandlog.test/log", "witness.test/one", "witness.test/two"],
        "{note}"
    );
    assert_eq!(first["witnesses"][0]["cosigned"], true, "{first}");
    // The stored note is the cosigned one.
    let stored = json_success(sandlog(&root).args(["--json", "checkpoint"]));
    assert_eq!(stored["note"], first["note"]);

    // The second checkpoint goes to witness two only; the third to both:
    // witness one answers 409 with the size it saw and cosigns on retry.
    grow(&root);
    json_success(&mut checkpoint(&root, &log_key, &[&two], &[]));
    grow(&root);
    let third = json_success(&mut checkpoint(&root, &log_key, &[&one, &two], &[]));
    let note = third["note"].as_str().unwrap().to_owned();
    assert_eq!(signers(&note).len(), 3, "{note}");
    assert!(third["size"].as_u64() > first["size"].as_u64());
    let note_file = dir.path().join("cosigned.note");
    std::fs::write(&note_file, &note).unwrap();

    let verify = |vkeys: &[&str], k: Option<&str>| {
        let mut command = sandlog(&root);
        command
            .args(["--json", "verify", "--checkpoint"])
            .arg(&note_file)
            .args(["--vkey", &log_vkey]);
        for vkey in vkeys {
            command.args(["--witness-vkey", vkey]);
        }
        if let Some(k) = k {
            command.args(["--witnesses", k]);
        }
        command
    };
    let ok = json_success(&mut verify(&[&w1_vkey, &w2_vkey], Some("2")));
    assert_eq!(ok["witnesses"]["valid"], 2, "{ok}");
    let two_of_three = json_success(&mut verify(&[&w1_vkey, &w2_vkey, &w3_vkey], Some("2")));
    assert_eq!(two_of_three["witnesses"]["valid"], 2);
    let refused = stderr_failure(&mut verify(&[&w1_vkey, &w2_vkey, &w3_vkey], Some("3")), 4);
    assert!(
        refused.contains("2 valid cosignatures of the 3 required"),
        "{refused}"
    );
    assert!(
        refused.contains("witness.test/three") && refused.contains("no cosignature by this key"),
        "{refused}"
    );
    // An impostor key under witness one's name does not count.
    let refused = stderr_failure(&mut verify(&[&impostor_vkey], None), 4);
    assert!(
        refused.contains("0 valid cosignatures of the 1 required"),
        "{refused}"
    );
    // A log key is not a witness key (exit 2, saying which is which).
    let refused = stderr_failure(&mut verify(&[&log_vkey], None), 2);
    assert!(refused.contains("log's key"), "{refused}");
    // K past the witnesses named is the caller's mistake.
    stderr_failure(&mut verify(&[&w1_vkey], Some("2")), 2);

    // `audit` holds the checkpoint given to the same policy.
    let audit = |vkeys: &[&str], k: &str| {
        let mut command = sandlog(&root);
        command
            .args(["--json", "audit", "--checkpoint"])
            .arg(&note_file)
            .args(["--vkey", &log_vkey, "--witnesses", k]);
        for vkey in vkeys {
            command.args(["--witness-vkey", vkey]);
        }
        command
    };
    let audited = json_success(&mut audit(&[&w1_vkey, &w2_vkey], "2"));
    assert_eq!(audited["witnesses"]["valid"], 2, "{audited}");
    assert!(audited["events"].as_u64() > Some(0), "{audited}");
    let refused = stderr_failure(&mut audit(&[&w1_vkey, &w3_vkey], "2"), 4);
    assert!(
        refused.contains("1 valid cosignatures of the 2 required"),
        "{refused}"
    );

    // Bundles carry the cosigned checkpoint.
    let session = json_success(sandlog(&root).args(["--json", "session", "list"]));
    let id = session[0]["session_id"]
        .as_str()
        .or_else(|| session["sessions"][0]["session_id"].as_str())
        .unwrap_or_else(|| panic!("{session}"))
        .to_owned();
    let bundle = dir.path().join("session.bundle");
    sandlog(&root)
        .args(["--json", "evidence", "export", &id, "-o"])
        .arg(&bundle)
        .assert()
        .success();
    let nowhere = dir.path().join("no-root-here");
    let report = json_success(
        sandlog(&nowhere)
            .args(["--json", "evidence", "verify"])
            .arg(&bundle)
            .args(["--vkey", &log_vkey, "--witness-vkey", &w1_vkey])
            .args(["--witness-vkey", &w2_vkey, "--witnesses", "2"]),
    );
    assert_eq!(report["witnesses"]["valid"], 2, "{report}");
    let refused = stderr_failure(
        sandlog(&nowhere)
            .args(["evidence", "verify"])
            .arg(&bundle)
            .args(["--vkey", &log_vkey, "--witness-vkey", &w1_vkey])
            .args(["--witness-vkey", &w3_vkey]),
        4,
    );
    assert!(
        refused.contains("1 valid cosignatures of the 2 required"),
        "{refused}"
    );

    // The independent verifier agrees.
    let note_path = note_file.to_str().unwrap();
    let (passed, stdout) =
        independent(&["cosigned", note_path, &log_vkey, "2", &w1_vkey, &w2_vkey]);
    assert!(
        passed,
        "independent verifier refused the cosignatures:\n{stdout}"
    );
    assert_eq!(stdout.matches("PASS cosignature by").count(), 2, "{stdout}");
    let (passed, stdout) = independent(&[
        "cosigned",
        note_path,
        &log_vkey,
        "2",
        &w1_vkey,
        &impostor_vkey,
    ]);
    assert!(!passed, "an impostor's key counted:\n{stdout}");
    let mut altered = note.clone();
    let at = altered.rfind('\u{2014}').unwrap() + 40;
    let byte = if &altered[at..=at] == "A" { "B" } else { "A" };
    altered.replace_range(at..=at, byte);
    let altered_file = dir.path().join("altered.note");
    std::fs::write(&altered_file, &altered).unwrap();
    let (passed, _) = independent(&[
        "cosigned",
        altered_file.to_str().unwrap(),
        &log_vkey,
        "2",
        &w1_vkey,
        &w2_vkey,
    ]);
    assert!(!passed, "an altered cosignature counted");
    stderr_failure(
        sandlog(&root)
            .args(["verify", "--checkpoint"])
            .arg(&altered_file)
            .args(["--vkey", &log_vkey, "--witness-vkey", &w1_vkey])
            .args(["--witness-vkey", &w2_vkey]),
        4,
    );
}

/// Goal: a split view is refused. Method: copy a root, append different
/// events to each copy, checkpoint both with the same log key against the
/// same witness: the first is cosigned; the second, a different tree of
/// the same size, is refused (409, exit 4) and so is the copy grown past
/// it (422). The two conflicting checkpoints, both validly signed by the
/// log's key, are shown, and the witness kept the refused one.
#[test]
fn a_split_view_is_refused_by_the_witness() {
    let dir = tempfile::tempdir().unwrap();
    let honest = init(dir.path(), "honest");
    grow(&honest);
    let (log_key, log_vkey) = keygen(dir.path(), "sandlog.test/split", false);
    let (w_key, w_vkey) = keygen(dir.path(), "witness.test/split", true);
    let state = dir.path().join("witness-state");
    let witness = Witness::start(&w_key, &w_vkey, &state, &[&log_vkey]);
    json_success(&mut checkpoint(&honest, &log_key, &[&witness], &[]));

    let forked = dir.path().join("forked");
    let copied = StdCommand::new("cp")
        .arg("-a")
        .arg(&honest)
        .arg(&forked)
        .status()
        .unwrap();
    assert!(copied.success());
    grow(&honest);
    grow(&forked);
    let good = json_success(&mut checkpoint(&honest, &log_key, &[&witness], &[]));
    let refused = stderr_failure(&mut checkpoint(&forked, &log_key, &[&witness], &[]), 4);
    assert!(refused.contains("409"), "{refused}");
    assert!(refused.contains("split view"), "{refused}");
    assert!(
        refused.contains("cosigned by 0 of the 1 witnesses required"),
        "{refused}"
    );
    // The fork's checkpoint was signed (and stored) all the same: the two
    // notes are the evidence.
    let bad = json_success(sandlog(&forked).args(["--json", "checkpoint"]));
    let (good, bad) = (
        good["note"].as_str().unwrap(),
        bad["note"].as_str().unwrap(),
    );
    eprintln!("cosigned checkpoint:\n{good}\nrefused checkpoint of the same log:\n{bad}");
    let lines = |note: &str| note.lines().take(3).map(str::to_owned).collect::<Vec<_>>();
    let (good_lines, bad_lines) = (lines(good), lines(bad));
    assert_eq!(good_lines[..2], bad_lines[..2], "same origin and size");
    assert_ne!(good_lines[2], bad_lines[2], "different roots");
    for note in [good, bad] {
        let file = dir.path().join("check.note");
        std::fs::write(&file, note).unwrap();
        // Each verifies against its own copy: the log's key signed both.
        let copy = if note == good { &honest } else { &forked };
        sandlog(copy)
            .args(["verify", "--checkpoint"])
            .arg(&file)
            .args(["--vkey", &log_vkey])
            .assert()
            .success();
    }
    let kept: Vec<_> = std::fs::read_dir(state.join("conflicts"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    assert_eq!(kept, [bad.to_owned()], "the witness keeps the refused note");

    // The fork grows past the honest log: its tree does not extend the
    // root the witness cosigned, 422.
    grow(&forked);
    let refused = stderr_failure(&mut checkpoint(&forked, &log_key, &[&witness], &[]), 4);
    assert!(refused.contains("422"), "{refused}");
}

/// Goal: the witness's state survives SIGKILL. Method: cosign a checkpoint,
/// SIGKILL the witness right after, restart it on the same state: a
/// diverging root of the same size is still refused, and the honest log's
/// next checkpoint is still cosigned from where it was.
#[test]
fn a_witness_killed_after_cosigning_still_refuses_a_diverging_root() {
    let dir = tempfile::tempdir().unwrap();
    let honest = init(dir.path(), "honest");
    let (log_key, log_vkey) = keygen(dir.path(), "sandlog.test/kill", false);
    let (w_key, w_vkey) = keygen(dir.path(), "witness.test/kill", true);
    let forked = dir.path().join("forked");
    assert!(
        StdCommand::new("cp")
            .arg("-a")
            .arg(&honest)
            .arg(&forked)
            .status()
            .unwrap()
            .success()
    );
    grow(&honest);
    grow(&forked);
    let state = dir.path().join("witness-state");
    let witness = Witness::start(&w_key, &w_vkey, &state, &[&log_vkey]);
    json_success(&mut checkpoint(&honest, &log_key, &[&witness], &[]));
    witness.kill();

    let witness = Witness::start(&w_key, &w_vkey, &state, &[&log_vkey]);
    let refused = stderr_failure(&mut checkpoint(&forked, &log_key, &[&witness], &[]), 4);
    assert!(refused.contains("409"), "{refused}");
    grow(&honest);
    let next = json_success(&mut checkpoint(&honest, &log_key, &[&witness], &[]));
    assert_eq!(next["witnesses"][0]["cosigned"], true, "{next}");
}

/// Goal: the protocol's answers over raw HTTP: 404 for another path or an
/// unknown log, 403 for a note not signed by the log's key, 400 for a
/// malformed body, 413 past the body limit, 409 with the size as
/// `text/x.tlog.size`; a witness that cannot reach the others fails the
/// checkpoint with exit 1, naming it.
#[test]
fn the_witness_answers_each_refusal_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let root = init(dir.path(), "root");
    grow(&root);
    let (log_key, log_vkey) = keygen(dir.path(), "sandlog.test/http", false);
    let (stranger_key, _) = keygen(dir.path(), "sandlog.test/stranger", false);
    let (impostor_key, _) = keygen(&dir.path().join("other"), "sandlog.test/http", false);
    let (w_key, w_vkey) = keygen(dir.path(), "witness.test/http", true);
    let witness = Witness::start(&w_key, &w_vkey, &dir.path().join("state"), &[&log_vkey]);
    let sign = |key: &Path| {
        json_success(
            sandlog(&root)
                .args(["--json", "checkpoint", "--key"])
                .arg(key),
        )["note"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let request = |note: &str| format!("old 0\n\n{note}").into_bytes();

    let (status, _, _) = post(witness.addr, "GET", "/", b"");
    assert_eq!(status, 404);
    let (status, _, body) = post(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &request(&sign(&stranger_key)),
    );
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = post(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &request(&sign(&impostor_key)),
    );
    assert_eq!(status, 403, "{body}");
    let (status, _, body) = post(
        witness.addr,
        "POST",
        "/add-checkpoint",
        b"old 01\n\nnot a note",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("old"), "{body}");
    let (status, _, _) = post(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &vec![b'x'; 200 * 1024],
    );
    assert_eq!(status, 413);
    let note = sign(&log_key);
    let (status, _, body) = post(witness.addr, "POST", "/add-checkpoint", &request(&note));
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("\u{2014} witness.test/http "), "{body}");
    grow(&root);
    let (status, content_type, body) = post(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &request(&sign(&log_key)),
    );
    assert_eq!(status, 409);
    assert_eq!(content_type, "text/x.tlog.size");
    assert_eq!(body, format!("{}\n", note.lines().nth(1).unwrap()));

    // A witness nobody serves: exit 1, naming it; K=1 of 2 still passes.
    // --witness without a key cannot sign anything to cosign.
    let refused = stderr_failure(
        sandlog(&root)
            .env_remove("SANDLOG_KEY")
            .args(["checkpoint", "--witness", &witness.flag()]),
        2,
    );
    assert!(refused.contains("--key"), "{refused}");
    let (_, gone_vkey) = keygen(dir.path(), "witness.test/gone", true);
    let gone = format!("http://127.0.0.1:9={gone_vkey}");
    let failed = stderr_failure(
        sandlog(&root)
            .args(["checkpoint", "--key"])
            .arg(&log_key)
            .args(["--witness", &gone]),
        1,
    );
    assert!(
        failed.contains("cannot reach http://127.0.0.1:9"),
        "{failed}"
    );
    json_success(&mut checkpoint(
        &root,
        &log_key,
        &[&witness],
        &["--witness", &gone, "--witnesses", "1"],
    ));
}
