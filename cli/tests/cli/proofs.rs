//! The verifiable log through the real binary: keygen, checkpoint, prove,
//! verify --checkpoint, evidence export / verify, tree rebuild; and an
//! independent verifier (tests/python/verify_evidence.py, written from the
//! RFCs and C2SP specs with Python's `cryptography`) accepting what the CLI
//! produced.

#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use assert_cmd::Command;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sandlog(root: &Path) -> Command {
    crate::common::sandlog(root)
}

fn json_success(command: &mut Command) -> Value {
    let output = command.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(&output)))
}

/// Runs `command`, expects exit `code`, and returns its stderr as text.
fn stderr_failure(command: &mut Command, code: i32) -> String {
    let output = command.assert().code(code).get_output().stderr.clone();
    String::from_utf8_lossy(&output).into_owned()
}

/// A python3 that can import `cryptography`, installing it from the
/// package registry if it is missing; fails (never skips) with the reason.
fn python_with_cryptography() -> Result<(), Box<dyn std::error::Error>> {
    let has = |()| {
        StdCommand::new("python3")
            .args(["-c", "import cryptography"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if has(()) {
        return Ok(());
    }
    let installed = StdCommand::new("python3")
        .args(["-m", "pip", "install", "--quiet", "cryptography"])
        .status()?;
    if !installed.success() || !has(()) {
        return Err("python3 with the `cryptography` package is needed for the independent verifier, and `pip install cryptography` failed".into());
    }
    Ok(())
}

fn independent(
    args: &[&std::ffi::OsStr],
) -> Result<std::process::Output, Box<dyn std::error::Error>> {
    python_with_cryptography()?;
    Ok(StdCommand::new("python3")
        .arg(repo().join("tests/python/verify_evidence.py"))
        .args(args)
        .output()?)
}

/// Goal: the whole auditor's path from the command line, checked by sandlog
/// and by an independent implementation. Method: a root with a Python run;
/// keygen, checkpoint, more work, a second checkpoint; prove, verify
/// --checkpoint, export a bundle, verify it (sandlog and Python), then
/// alter one byte and see both refuse it.
#[test]
fn checkpoints_proofs_and_bundles_verify_here_and_independently() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    sandlog(&root).args(["--json", "init"]).assert().success();
    let created = json_success(sandlog(&root).args(["--json", "session", "create"]));
    let id = created["session_id"].as_str().unwrap().to_owned();
    sandlog(&root)
        .args([
            "exec",
            &id,
            "--code",
            "open('/app/a.txt','w').write('evidence'); print('ok')",
        ])
        .assert()
        .success();

    let key = dir.path().join("log.key");
    let keygen = json_success(
        sandlog(&root)
            .args(["--json", "keygen", "--name", "sandlog.test/ci", "-o"])
            .arg(&key),
    );
    let vkey = keygen["vkey"].as_str().unwrap().to_owned();
    assert!(vkey.starts_with("sandlog.test/ci+"), "{vkey}");
    // keygen never writes over a key.
    sandlog(&root)
        .args(["keygen", "--name", "sandlog.test/ci", "-o"])
        .arg(&key)
        .assert()
        .failure();

    let first = json_success(
        sandlog(&root)
            .args(["--json", "checkpoint", "--key"])
            .arg(&key),
    );
    let first_note = dir.path().join("first.note");
    std::fs::write(&first_note, first["note"].as_str().unwrap())?;
    sandlog(&root)
        .args(["exec", &id, "--code", "print(2)"])
        .assert()
        .success();
    let second = json_success(
        sandlog(&root)
            .args(["--json", "checkpoint", "--key"])
            .arg(&key),
    );
    let second_note = dir.path().join("second.note");
    std::fs::write(&second_note, second["note"].as_str().unwrap())?;
    let (old, new) = (
        first["size"].as_u64().unwrap(),
        second["size"].as_u64().unwrap(),
    );
    assert!(old < new);

    let inclusion = json_success(sandlog(&root).args(["prove", "inclusion", "1"]));
    assert_eq!(inclusion["size"].as_u64(), Some(new));
    assert_eq!(inclusion["leaf_index"].as_u64(), Some(0));
    let consistency = json_success(sandlog(&root).args(["prove", "consistency", &old.to_string()]));
    let proof_file = dir.path().join("consistency.json");
    std::fs::write(&proof_file, serde_json::to_vec(&consistency)?)?;

    let verified = json_success(
        sandlog(&root)
            .args(["--json", "verify", "--checkpoint"])
            .arg(&first_note)
            .args(["--vkey", &vkey]),
    );
    assert_eq!(verified["ok"], true);
    assert_eq!(verified["checkpoint_size"].as_u64(), Some(old));

    let bundle = dir.path().join("session.bundle");
    let exported = json_success(
        sandlog(&root)
            .args(["--json", "evidence", "export", &id, "-o"])
            .arg(&bundle),
    );
    let events = exported["events"].as_u64().unwrap();
    assert!(
        events >= 3,
        "created, two executions, the file written: {exported}"
    );
    // Verifying needs no root at all.
    let nowhere = dir.path().join("no-root-here");
    let report = json_success(
        sandlog(&nowhere)
            .args(["--json", "evidence", "verify"])
            .arg(&bundle)
            .args(["--vkey", &vkey]),
    );
    assert_eq!(report["ok"], true);
    assert_eq!(report["events"].as_u64(), Some(events));
    assert_eq!(report["state"]["exec_count"].as_u64(), Some(2));
    assert!(!nowhere.exists(), "evidence verify created a root");

    let python = independent(&["bundle".as_ref(), bundle.as_os_str(), vkey.as_ref()])?;
    let stdout = String::from_utf8_lossy(&python.stdout);
    assert!(
        python.status.success(),
        "independent verifier refused the bundle:\n{stdout}"
    );
    assert_eq!(
        stdout.matches("PASS event").count() as u64,
        events,
        "{stdout}"
    );
    let python = independent(&[
        "consistency".as_ref(),
        first_note.as_os_str(),
        second_note.as_os_str(),
        proof_file.as_os_str(),
        vkey.as_ref(),
    ])?;
    assert!(
        python.status.success(),
        "independent verifier refused the consistency proof:\n{}",
        String::from_utf8_lossy(&python.stdout)
    );

    // One altered byte: both verifiers refuse, sandlog with exit 4.
    let mut bytes = std::fs::read(&bundle)?;
    let at = bytes.windows(9).position(|w| w == b"inclusion").unwrap() + 13;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    let altered = dir.path().join("altered.bundle");
    std::fs::write(&altered, &bytes)?;
    let refused = stderr_failure(
        sandlog(&nowhere)
            .args(["evidence", "verify"])
            .arg(&altered)
            .args(["--vkey", &vkey]),
        4,
    );
    assert!(
        refused.contains("not proven by the checkpoint"),
        "{refused}"
    );
    let python = independent(&["bundle".as_ref(), altered.as_os_str(), vkey.as_ref()])?;
    assert!(!python.status.success());

    // A blob no event names, smuggled in beside the evidence: refused.
    let mut document: Value = serde_json::from_slice(&std::fs::read(&bundle)?)?;
    let smuggled = sandlog_runtime::core::Hash::of(b"smuggled").to_hex();
    document["blobs"][&smuggled] = Value::String("c211Z2dsZWQ=".into());
    let with_extra = dir.path().join("extra-blob.bundle");
    std::fs::write(&with_extra, serde_json::to_vec(&document)?)?;
    let refused = stderr_failure(
        sandlog(&nowhere)
            .args(["evidence", "verify"])
            .arg(&with_extra)
            .args(["--vkey", &vkey]),
        4,
    );
    assert!(
        refused.contains(&smuggled) && refused.contains("named by none"),
        "{refused}"
    );

    // A verifier key that does not parse is the caller's mistake (exit 2,
    // naming the key), not a forged bundle (exit 4).
    let mistyped = format!("{}x", vkey.trim_end());
    let refused = stderr_failure(
        sandlog(&nowhere)
            .args(["evidence", "verify"])
            .arg(&bundle)
            .args(["--vkey", &mistyped]),
        2,
    );
    assert!(refused.contains("not a valid verifier key"), "{refused}");

    // The bundle proves the session complete: sandlog and Python agree.
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(report["head"]["version"].as_u64(), Some(events), "{report}");
    assert!(
        stdout.contains("PASS the last event is the session's head"),
        "{stdout}"
    );

    // Its last event cut off: refused by both, sandlog with exit 4 naming
    // the versions missing.
    let mut cut: Value = serde_json::from_slice(&std::fs::read(&bundle)?)?;
    cut["events"].as_array_mut().unwrap().pop();
    let cut_file = dir.path().join("cut.bundle");
    std::fs::write(&cut_file, serde_json::to_vec(&cut)?)?;
    let refused = stderr_failure(
        sandlog(&nowhere)
            .args(["evidence", "verify"])
            .arg(&cut_file)
            .args(["--vkey", &vkey]),
        4,
    );
    assert!(
        refused.contains(&format!("its last events are missing: version {events}")),
        "{refused}"
    );
    let python = independent(&["bundle".as_ref(), cut_file.as_os_str(), vkey.as_ref()])?;
    assert!(
        !python.status.success(),
        "{}",
        String::from_utf8_lossy(&python.stdout)
    );

    // A session's head and an unknown session's absence, at the second
    // checkpoint's size, checked independently against the signed map.
    for (session, present) in [
        (id.clone(), true),
        (uuid::Uuid::new_v4().to_string(), false),
    ] {
        let proof = json_success(sandlog(&root).args([
            "prove",
            "session",
            &session,
            "--size",
            &new.to_string(),
        ]));
        assert_eq!(proof["present"], present, "{proof}");
        assert_eq!(proof["size"].as_u64(), Some(new));
        let proof_file = dir.path().join("session.json");
        std::fs::write(&proof_file, serde_json::to_vec(&proof)?)?;
        let python = independent(&[
            "session".as_ref(),
            proof_file.as_os_str(),
            second_note.as_os_str(),
            vkey.as_ref(),
        ])?;
        assert!(
            python.status.success(),
            "independent verifier refused the session proof:\n{}",
            String::from_utf8_lossy(&python.stdout)
        );
        // Claiming the opposite with the same proof fails.
        let mut flipped = proof.clone();
        flipped["present"] = Value::Bool(!present);
        if !present {
            flipped["version"] = 1.into();
            flipped["position"] = 1.into();
            flipped["hash"] = "00".repeat(32).into();
        }
        std::fs::write(&proof_file, serde_json::to_vec(&flipped)?)?;
        let python = independent(&[
            "session".as_ref(),
            proof_file.as_os_str(),
            second_note.as_os_str(),
            vkey.as_ref(),
        ])?;
        assert!(!python.status.success(), "{flipped}");
    }
    let refused = stderr_failure(sandlog(&root).args(["prove", "session", "not-a-uuid"]), 2);
    assert!(refused.contains("not a session id"), "{refused}");

    // The full audit: every stored checkpoint and the one given.
    let audit = json_success(
        sandlog(&root)
            .args(["--json", "audit", "--checkpoint"])
            .arg(&first_note)
            .args(["--vkey", &vkey]),
    );
    assert_eq!(audit["ok"], true, "{audit}");
    assert_eq!(audit["checkpoints"].as_u64(), Some(3), "{audit}");
    assert_eq!(audit["events"].as_u64(), Some(new), "{audit}");

    let rebuilt = json_success(sandlog(&root).args(["--json", "tree", "rebuild"]));
    assert_eq!(rebuilt["events"].as_u64(), Some(new));
    json_success(sandlog(&root).args(["--json", "tree", "verify"]));
    Ok(())
}
