//! The CLI's integration tests, one test binary: each module drives the
//! real `sandlog` binary on temporary roots; `common` is their one set-up.
//! (`docs.rs`, the check that docs/ matches the binary, is its own binary
//! so its documented command, `cargo test -p sandlog-cli --test docs`,
//! stays what it says.) Run one module with
//! `cargo test -p sandlog-cli --test cli MODULE::`.

mod common;

mod commands;
mod correlation;
mod evidence;
mod first_run;
mod groups;
mod hostile_adopt;
mod hostile_cli;
mod hostile_lease;
mod hostile_put;
mod native;
mod ops;
mod points;
mod proofs;
mod report;
mod runtimes;
mod seed004;
mod serve;
mod shared_store;
mod terminal;
mod ux;
mod witness;
