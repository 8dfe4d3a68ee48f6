//! sandlog-runtime: the `Engine` (command handlers that perform side effects
//! and append their events), the wasmtime/WASI sandbox, and the filesystem
//! applier.
//!
//! Owns: every side effect on workspaces and every wasm execution.
//! Never does: decide what state *is* (that is the projections' fold) or
//! write to the log except through `sandlog-eventstore`'s append.

pub mod sandbox;
