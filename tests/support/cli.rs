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
