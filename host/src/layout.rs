//! Where things are in a root: the database file, the workspaces, the
//! caches, the runtimes, and the environment variables that move them.
//! Below the engine and the anchor, which both name these places.

use std::path::{Path, PathBuf};

use sandlog_core::SessionId;

/// The database file under the root.
pub const DATABASE_FILE: &str = "sandlog.db";
/// Session workspaces under the root.
pub const WORKSPACES_DIR: &str = "workspaces";
/// Precompiled modules under the root, used only when the per-user cache
/// ([`default_cache_dir`]) is unknown or unusable.
pub const CACHE_DIR: &str = "cache";
/// Workspaces a prune moved out of `workspaces/`, whose bytes are not
/// freed yet (see [`crate::trash`]). Under the root, so on the file system
/// of `workspaces/` (a rename moves a workspace there).
pub const TRASH_DIR: &str = "trash";
/// Orphan directories moved out of `workspaces/`.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Evidence kept from adoption (corrupted metadata files).
pub const EVIDENCE_DIR: &str = "evidence";
/// Guest runtimes, when not given elsewhere.
pub const RUNTIMES_DIR: &str = "runtimes";
/// The root's node name (one line), written on first open: the name
/// stays with the root when it moves to another host.
pub const NODE_FILE: &str = "node";
/// The environment variable naming this process's node.
pub const NODE_ENV: &str = "SANDLOG_NODE";

/// The environment variable naming the directory with `python.wasm` and
/// `quickjs.wasm`.
pub const RUNTIMES_DIR_ENV: &str = "SANDLOG_RUNTIMES_DIR";

/// The environment variable naming the precompiled-module cache, instead
/// of the per-user default (see [`default_cache_dir`]).
pub const CACHE_DIR_ENV: &str = "SANDLOG_CACHE_DIR";

/// The precompiled-module cache every root of this user shares unless told
/// otherwise: `$XDG_CACHE_HOME/sandlog`, else `$HOME/.cache/sandlog` (as
/// the XDG base directory specification says, a relative or empty value is
/// ignored). `None` if neither variable gives an absolute path.
///
/// One cache per user, not per root: a module is compiled once per
/// machine, wasmtime version and CPU, and a new root's first execution
/// loads it in milliseconds. [`CACHE_DIR_ENV`] and
/// [`EngineOptions::cache_dir`] override it.
pub fn default_cache_dir() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .map(|cache| cache.join("sandlog"))
        .or_else(|| absolute("HOME").map(|home| home.join(".cache").join("sandlog")))
}

/// The paths of a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The root.
    pub root: PathBuf,
    /// `sandlog.db`.
    pub database: PathBuf,
    /// `workspaces/`.
    pub workspaces: PathBuf,
    /// `cache/`: precompiled modules, only when the per-user cache is
    /// unknown or unusable.
    pub cache: PathBuf,
    /// `quarantine/`.
    pub quarantine: PathBuf,
    /// `trash/`.
    pub trash: PathBuf,
    /// `evidence/`.
    pub evidence: PathBuf,
}

impl Layout {
    /// The layout under `root`.
    pub fn new(root: &Path) -> Layout {
        Layout {
            root: root.to_owned(),
            database: root.join(DATABASE_FILE),
            workspaces: root.join(WORKSPACES_DIR),
            cache: root.join(CACHE_DIR),
            quarantine: root.join(QUARANTINE_DIR),
            trash: root.join(TRASH_DIR),
            evidence: root.join(EVIDENCE_DIR),
        }
    }

    /// A session's workspace directory.
    pub fn workspace(&self, session_id: SessionId) -> PathBuf {
        self.workspaces.join(session_id.to_string())
    }
}
