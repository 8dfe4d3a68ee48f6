//! sandlog-host: a root on the host's disk, below the engine: where things
//! are ([`layout`]), the [`anchor`] that says the root has a log,
//! workspaces reached by capability ([`workspace`]), session [`lease`]s,
//! the stat cache of `session sync` ([`statcache`]), user-named files read
//! within bounds ([`input`], [`keys`]), where the guest [`runtimes`] are,
//! the fault-injection hook ([`fault`]), and the runtime's one [`error`].
//!
//! Owns: the files of a root other than its log and the wasm it runs.
//! Never does: append to the log or run a guest (that is
//! `sandlog-runtime`'s engine and `sandlog-sandbox`).

pub mod anchor;
pub mod error;
pub mod fault;
pub mod input;
pub mod keys;
pub mod layout;
pub mod lease;
pub mod runtimes;
pub mod statcache;
pub mod workspace;

pub use error::{Result, RuntimeError};
pub use layout::{Layout, default_cache_dir};
