//! The `sandlog` binary as every CLI test runs it: on a test's root, with
//! the real guest runtimes and the shared precompiled-module cache of
//! [`crate::engine`], and none of the caller's environment that would
//! change what it does (a `SANDLOG_*` root, store, node, actor, key,
//! token or correlation id). The CLI tests (`cli/tests`) wrap it with the
//! binary cargo built for them.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use crate::engine::{cache_dir, runtimes_dir};

/// The variables a user's shell may set that would point `sandlog` at
/// another root, store or identity than the test's.
pub const SCRUBBED_ENV: &[&str] = &[
    "SANDLOG_ROOT",
    "SANDLOG_STORE",
    "SANDLOG_NODE",
    "SANDLOG_ACTOR",
    "SANDLOG_KEY",
    "SANDLOG_TOKEN",
    "SANDLOG_CORRELATION_ID",
];

/// `binary` without a root: the runtimes, the module cache, no colour, and
/// the caller's `SANDLOG_*` settings removed.
pub fn bare_command(binary: &Path) -> Command {
    let mut command = Command::new(binary);
    for name in SCRUBBED_ENV {
        command.env_remove(name);
    }
    command
        .env("SANDLOG_RUNTIMES_DIR", runtimes_dir())
        .env("SANDLOG_CACHE_DIR", cache_dir())
        .env("NO_COLOR", "1");
    command
}

/// [`bare_command`] on `root` (`--root ROOT`).
pub fn command(binary: &Path, root: impl AsRef<OsStr>) -> Command {
    let mut command = bare_command(binary);
    command.arg("--root").arg(root);
    command
}

/// The uid and gid of `nobody`, whom tests run as when they run as root.
pub const NOBODY: u32 = 65534;

/// Whether this process runs as root, for whom a file's mode hides
/// nothing.
pub fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// `binary` on `root` as a user that may not read or write what this
/// process made: [`NOBODY`] when the tests run as root, else this user
/// (whose own mode bits then apply). A clean environment: `home` as its
/// home and module cache directory, the real runtimes, no colour.
pub fn unprivileged_command(binary: &Path, root: &Path, home: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("SANDLOG_RUNTIMES_DIR", runtimes_dir())
        .env("SANDLOG_CACHE_DIR", home.join("cache"))
        .env("NO_COLOR", "1")
        .arg("--root")
        .arg(root);
    if running_as_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    command
}
