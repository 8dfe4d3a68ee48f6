//! `--store` and `$SANDLOG_STORE`: two roots as nodes of one PostgreSQL log
//! (the tests' real server, see `sandlog_tests::pg`), through the real
//! binary.

#![cfg(test)]

use serde_json::Value;

use crate::common::sandlog;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn json(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", String::from_utf8_lossy(output)))
}

/// `init --store` makes a node's root; a session created and run on one
/// node is listed, logged and verified on the other; `$SANDLOG_STORE`
/// works as the flag does; a root opened without its store is refused.
#[test]
fn two_roots_share_one_log_through_the_cli() -> TestResult {
    let db = sandlog_tests::pg::database()?;
    let dir = tempfile::tempdir()?;
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for root in [&a, &b] {
        let out = sandlog(root)
            .args(["--json", "--store", &db.url, "init"])
            .output()?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let created = sandlog(&a)
        .args(["--json", "--store", &db.url, "session", "create"])
        .output()?;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let id = json(&created.stdout)["session_id"]
        .as_str()
        .ok_or("no session_id")?
        .to_owned();
    let run = sandlog(&a)
        .args(["--store", &db.url, "exec", &id, "--code", "print(40 + 2)"])
        .output()?;
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), "42\n");

    // The other node, by environment variable.
    let listed = sandlog(&b)
        .env("SANDLOG_STORE", &db.url)
        .args(["--json", "session", "list"])
        .output()?;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed = json(&listed.stdout);
    let ids: Vec<&str> = listed
        .as_array()
        .ok_or("no sessions")?
        .iter()
        .filter_map(|session| session["session_id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let log = sandlog(&b)
        .env("SANDLOG_STORE", &db.url)
        .args(["--json", "log", "--session", &id])
        .output()?;
    assert!(log.status.success());
    let kinds: Vec<String> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|line| {
            json(line.as_bytes())["kind"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["session.created", "session.executed"]);
    for root in [&a, &b] {
        let verified = sandlog(root)
            .args(["--json", "--store", &db.url, "verify"])
            .output()?;
        assert!(
            verified.status.success(),
            "{}",
            String::from_utf8_lossy(&verified.stderr)
        );
        assert_eq!(json(&verified.stdout)["ok"], true);
    }

    // Without its store, a node's root has no log of its own: refused.
    let alone = sandlog(&b).args(["--json", "session", "list"]).output()?;
    assert!(!alone.status.success());
    Ok(())
}
