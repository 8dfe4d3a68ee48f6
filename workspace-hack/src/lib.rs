//! No code: this crate's `Cargo.toml` gives the workspace's separately
//! built packages one feature set for their shared dependencies, so each
//! build reuses the others' artifacts instead of compiling them again.
