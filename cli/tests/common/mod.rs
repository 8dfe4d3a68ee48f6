//! What several CLI test binaries share: the `sandlog` binary set up for a
//! root with the guest runtimes and the shared module cache.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The binary with a root, the runtimes and the shared module cache.
pub fn sandlog(root: &Path) -> Command {
    let mut command = Command::cargo_bin("sandlog").unwrap();
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    let cache = std::env::var_os("SANDLOG_TEST_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/sandlog-test-cache"));
    command
        .env_remove("SANDLOG_ROOT")
        .env_remove("SANDLOG_CORRELATION_ID")
        .env_remove("SANDLOG_STORE")
        .env_remove("SANDLOG_NODE")
        .env("SANDLOG_RUNTIMES_DIR", runtimes)
        .env("SANDLOG_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .arg("--root")
        .arg(root);
    command
}
