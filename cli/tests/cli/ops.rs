//! Operations: `sandlog doctor` on real roots, and `sandlog serve`'s
//! `/healthz`, `/readyz` and `/metrics` over real TCP, readiness turning
//! false when the log's directory stops taking new files and true again
//! when it takes them. (The metrics' values, parsed by Prometheus's own
//! parser, and OCSF records against the published schema are checked by
//! `server/tests/python/test_ops.py`, `make mcp-test`.)

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
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

fn init() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    crate::common::sandlog(&root)
        .args(["--json", "init"])
        .assert()
        .success();
    (dir, root)
}

/// `doctor --json` and its exit code.
fn doctor(root: &Path, extra: &[&str], runtimes: Option<&Path>) -> (Value, i32) {
    let mut command = crate::common::sandlog(root);
    if let Some(runtimes) = runtimes {
        // Only that directory: the per-user one is empty (runtimes the
        // machine's user installed must not be found).
        command
            .env("SANDLOG_RUNTIMES_DIR", runtimes)
            .env("XDG_DATA_HOME", runtimes.join("no-user-data"));
    }
    let output = command
        .args(["--json", "doctor"])
        .args(extra)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "doctor printed no JSON ({error}): {} / {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (report, output.status.code().unwrap())
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

fn failed(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|check| check["ok"] == false)
        .map(|check| check["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn doctor_passes_on_a_fresh_root_and_names_the_fix_for_each_failure() {
    let (dir, root) = init();
    let (report, code) = doctor(&root, &[], None);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["ok"], true, "{report}");
    for name in [
        "root_opens",
        "log_writable",
        "workspaces_writable",
        "log_readable",
        "runtimes",
        "disk_space",
    ] {
        let check = check(&report, name);
        assert_eq!(check["ok"], true, "{check}");
        assert!(check["fix"].is_null(), "{check}");
    }

    // More free space asked for than any disk has.
    let (report, code) = doctor(&root, &["--min-free", "1000000TiB"], None);
    assert_eq!(code, 1, "{report}");
    assert_eq!(failed(&report), ["disk_space"], "{report}");
    let disk = check(&report, "disk_space");
    assert!(
        disk["fix"].as_str().unwrap().contains("--min-free"),
        "{disk}"
    );

    // Runtimes missing.
    let empty = dir.path().join("no-runtimes");
    std::fs::create_dir(&empty).unwrap();
    let (report, code) = doctor(&root, &[], Some(&empty));
    assert_eq!(code, 1, "{report}");
    assert_eq!(failed(&report), ["runtimes"], "{report}");
    let runtimes = check(&report, "runtimes");
    assert!(
        runtimes["detail"].as_str().unwrap().contains("python.wasm"),
        "{runtimes}"
    );
    assert!(
        runtimes["fix"]
            .as_str()
            .unwrap()
            .contains("SANDLOG_RUNTIMES_DIR"),
        "{runtimes}"
    );

    // No root at all: one failed check, with the command that makes one.
    let (report, code) = doctor(&dir.path().join("nowhere"), &[], None);
    assert_eq!(code, 1, "{report}");
    assert_eq!(failed(&report), ["root_opens"], "{report}");
    assert!(
        check(&report, "root_opens")["fix"]
            .as_str()
            .unwrap()
            .contains("init"),
        "{report}"
    );

    // The human form: one line a check, the fix under a failure.
    let output = crate::common::sandlog(&root)
        .args(["doctor", "--min-free", "1000000TiB"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("FAIL  disk_space"), "{text}");
    assert!(text.contains("fix: free space"), "{text}");
    assert!(text.contains("ok    log_writable"), "{text}");

    // A bad size is a usage error.
    crate::common::sandlog(&root)
        .args(["doctor", "--min-free", "lots"])
        .assert()
        .code(2);
}

/// A directory this process cannot create files in, undone when dropped:
/// the immutable attribute for root (whom mode bits do not stop), mode
/// 0555 for anyone else.
struct ReadOnlyDir(PathBuf);

impl ReadOnlyDir {
    fn new(path: &Path) -> ReadOnlyDir {
        if sandlog_tests::cli::running_as_root() {
            let status = std::process::Command::new("chattr")
                .arg("+i")
                .arg(path)
                .status()
                .expect("chattr (e2fsprogs) makes the directory immutable for root");
            assert!(status.success(), "chattr +i {}", path.display());
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        // Whichever way, the directory must now refuse a new file, or the
        // test proves nothing.
        assert!(
            std::fs::File::create(path.join("probe")).is_err(),
            "{} still takes new files",
            path.display()
        );
        ReadOnlyDir(path.to_owned())
    }
}

impl Drop for ReadOnlyDir {
    fn drop(&mut self) {
        if sandlog_tests::cli::running_as_root() {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
        }
    }
}

/// A running `sandlog serve`; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(root: &Path) -> Server {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandlog"))
            .env_remove("SANDLOG_ROOT")
            .env_remove("SANDLOG_TOKEN")
            .env(
                "SANDLOG_RUNTIMES_DIR",
                std::env::var_os("SANDLOG_RUNTIMES_DIR").unwrap_or_else(|| {
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../.runtimes")
                        .into_os_string()
                }),
            )
            .arg("--root")
            .arg(root)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
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
        Server { child, addr }
    }

    /// GET `path`: the status, the content type and the body.
    fn get(&self, path: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let content_type = head
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(": ")?;
                key.eq_ignore_ascii_case("content-type")
                    .then(|| value.to_owned())
            })
            .unwrap_or_default();
        (status, content_type, body.to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn readyz_turns_false_when_the_log_directory_is_read_only() {
    let (_dir, root) = init();
    let server = Server::start(&root);

    let (status, _, body) = server.get("/healthz");
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["ok"], true);

    let (status, _, body) = server.get("/readyz");
    assert_eq!(status, 200, "{body}");
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(check(&ready, "log_writable")["ok"], true, "{ready}");

    {
        let _read_only = ReadOnlyDir::new(&root);
        let (status, _, body) = server.get("/readyz");
        assert_eq!(status, 503, "{body}");
        let ready: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(ready["ready"], false, "{ready}");
        assert_eq!(failed(&ready), ["log_writable"], "{ready}");
        let log = check(&ready, "log_writable");
        assert!(log["fix"].as_str().unwrap().contains("writable"), "{log}");
        // The process is still alive, and says so.
        assert_eq!(server.get("/healthz").0, 200);
        // `doctor` finds the same.
        let (report, code) = doctor(&root, &[], None);
        assert_eq!(code, 1, "{report}");
        assert_eq!(failed(&report), ["log_writable"], "{report}");
    }

    let (status, _, body) = server.get("/readyz");
    assert_eq!(
        status, 200,
        "ready again once the directory is writable: {body}"
    );

    // The probes are counted like any request, by route and status.
    let (status, content_type, metrics) = server.get("/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(
        metrics.contains(
            r#"sandlog_http_requests_total{route="/readyz",method="GET",status="503"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"sandlog_http_requests_total{route="/readyz",method="GET",status="200"} 2"#
        ),
        "{metrics}"
    );
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
}
