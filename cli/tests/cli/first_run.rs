//! A new user's first commands: `init` compiles the guest runtimes into the
//! cache every root shares, saying so on a terminal; a later root finds
//! them compiled; an `exec` that has to compile says so once on a
//! terminal, and nothing of it shows when stderr is piped or with `-q`.
//!
//! The terminal is a real pseudo-terminal from util-linux `script`. Each
//! test has its own cache directory, so a compile really happens (of
//! quickjs.wasm alone: the runtimes directory given holds only it, which
//! keeps the compiles short).

#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A runtimes directory holding only the real quickjs.wasm, and a cache
/// directory, both fresh.
struct FirstRun {
    dir: tempfile::TempDir,
}

impl FirstRun {
    fn new() -> Result<FirstRun, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join(".runtimes"));
        let quickjs = runtimes.join("quickjs.wasm");
        assert!(
            quickjs.is_file(),
            "{} is missing: run `make runtimes`",
            quickjs.display()
        );
        std::fs::create_dir(dir.path().join("runtimes"))?;
        std::fs::copy(&quickjs, dir.path().join("runtimes/quickjs.wasm"))?;
        Ok(FirstRun { dir })
    }

    fn root(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The environment of every command: this test's runtimes and cache.
    fn env(&self, command: &mut Command) {
        command
            .env_remove("SANDLOG_ROOT")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .env("SANDLOG_RUNTIMES_DIR", self.dir.path().join("runtimes"))
            // An empty per-user directory: runtimes the machine's user
            // installed must not be found.
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env("SANDLOG_CACHE_DIR", self.cache());
    }

    /// `sandlog ARGS` with stdout and stderr piped.
    fn piped(&self, args: &[&str]) -> Result<Output, Box<dyn std::error::Error>> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sandlog"));
        self.env(&mut command);
        Ok(command.args(args).stdin(Stdio::null()).output()?)
    }

    /// `sandlog ARGS` on a pseudo-terminal; returns everything it wrote
    /// (stdout and stderr share the terminal) and its exit code.
    fn on_terminal(&self, args: &[&str]) -> Result<(String, i32), Box<dyn std::error::Error>> {
        let line = std::iter::once(env!("CARGO_BIN_EXE_sandlog"))
            .chain(args.iter().copied())
            .map(shell_quote)
            .collect::<Vec<_>>()
            .join(" ");
        let mut command = Command::new("script");
        self.env(&mut command);
        let output = command
            .env("SHELL", "/bin/sh")
            .args(["--quiet", "--return", "--command", &line, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .map_err(|error| {
                format!("running util-linux `script` (needed for a terminal): {error}")
            })?;
        let text = String::from_utf8(output.stdout)?.replace("\r\n", "\n");
        Ok((text, output.status.code().unwrap_or(-1)))
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every precompiled artifact under `dir`.
fn artifacts(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(artifacts(&path)?);
        } else if path
            .extension()
            .is_some_and(|extension| extension == "cwasm")
        {
            found.push(path);
        }
    }
    Ok(found)
}

/// Overwrites bytes in the middle of the one artifact in `cache`.
fn damage_artifact(cache: &Path) -> TestResult {
    let found = artifacts(cache)?;
    assert_eq!(found.len(), 1, "{found:?}");
    let mut bytes = std::fs::read(&found[0])?;
    let middle = bytes.len() / 2;
    for byte in bytes.iter_mut().skip(middle).take(64) {
        *byte ^= 0xff;
    }
    std::fs::write(&found[0], bytes)?;
    Ok(())
}

/// Goal: a person sees why the first run takes seconds, once, on a
/// terminal, and nothing of it reaches a pipe; a second root compiles
/// nothing. Method: `init` on a pseudo-terminal in root A with an empty
/// cache (note, then `javascript: compiled`, python reported missing);
/// `--json init` in root B piped (`cached`, nothing on stderr); `exec` in
/// B piped (no note); damage the artifact, `exec` in B on the terminal
/// (the note once: the damage was noticed and the module recompiled);
/// damage it again, `-q exec` on the terminal (no note).
#[test]
fn a_compile_is_announced_on_a_terminal_and_never_piped() -> TestResult {
    let run = FirstRun::new()?;
    let root_a = run.root("a");
    let root_b = run.root("b");
    let a = root_a.to_str().ok_or("temp path not UTF-8")?;
    let b = root_b.to_str().ok_or("temp path not UTF-8")?;

    let (shown, code) = run.on_terminal(&["--root", a, "init"])?;
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        shown.matches("compiling quickjs.wasm").count(),
        1,
        "{shown}"
    );
    assert!(shown.contains("for this machine"), "{shown}");
    assert!(shown.contains("usually"), "{shown}");
    assert!(shown.contains("quickjs.wasm ready after"), "{shown}");
    assert!(shown.contains("javascript: compiled"), "{shown}");
    assert!(shown.contains("python: not ready"), "{shown}");
    assert!(shown.contains("initialised"), "{shown}");
    assert_eq!(artifacts(&run.cache())?.len(), 1);

    let output = run.piped(&["--json", "--root", b, "init"])?;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stderr), "");
    let init: Value = serde_json::from_slice(&output.stdout)?;
    let status = |name: &str| {
        init["runtimes"]
            .as_array()
            .and_then(|runtimes| runtimes.iter().find(|runtime| runtime["runtime"] == name))
            .map(|runtime| runtime["status"].clone())
    };
    assert_eq!(status("javascript"), Some("cached".into()), "{init}");
    assert_eq!(status("python"), Some("missing".into()), "{init}");
    assert_eq!(init["cache_dir"], run.cache().to_str().ok_or("not UTF-8")?);

    let created = run.piped(&["--json", "--root", b, "session", "create"])?;
    let created: Value = serde_json::from_slice(&created.stdout)?;
    let id = created["session_id"].as_str().ok_or("no session id")?;
    let exec = [
        "--root",
        b,
        "exec",
        id,
        "--runtime",
        "javascript",
        "--code",
        "console.log(6 * 7)",
    ];
    let output = run.piped(&exec)?;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "42\n");
    assert_eq!(text(&output.stderr), "");

    damage_artifact(&run.cache())?;
    let (shown, code) = run.on_terminal(&exec)?;
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        shown.matches("compiling quickjs.wasm").count(),
        1,
        "{shown}"
    );
    assert!(shown.contains("42\n"), "{shown}");
    let output = run.piped(&exec)?;
    assert_eq!(text(&output.stdout), "42\n");
    assert_eq!(text(&output.stderr), "");

    damage_artifact(&run.cache())?;
    let quiet: Vec<&str> = std::iter::once("-q").chain(exec).collect();
    let (shown, code) = run.on_terminal(&quiet)?;
    assert_eq!(code, 0, "{shown}");
    assert!(!shown.contains("compiling"), "{shown}");
    assert_eq!(shown.trim(), "42");
    Ok(())
}
