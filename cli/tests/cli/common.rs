//! What every CLI test module shares: the `sandlog` binary cargo built for
//! these tests, set up by `sandlog_tests::cli` (the runtimes, the shared
//! module cache, the caller's `SANDLOG_*` settings removed).

use std::ffi::OsStr;
use std::path::Path;

use assert_cmd::Command;

/// The binary under test.
pub fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandlog"))
}

/// The binary on `root`, for assertions.
pub fn sandlog(root: impl AsRef<OsStr>) -> Command {
    Command::from_std(sandlog_std(root))
}

/// The binary on `root`, as a plain process (to spawn, signal or wait on).
pub fn sandlog_std(root: impl AsRef<OsStr>) -> std::process::Command {
    sandlog_tests::cli::command(binary(), root)
}

/// The binary without `--root` (help, version, commands that take none).
pub fn sandlog_bare() -> Command {
    Command::from_std(sandlog_tests::cli::bare_command(binary()))
}
