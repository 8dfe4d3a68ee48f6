//! sandlog-runtime: the [`Engine`], command handlers that perform side
//! effects and append the events that record them, each an `impl Engine`
//! in the folder of its job.
//!
//! Owns: every side effect on workspaces and every wasm execution (run by
//! `sandlog-sandbox`, in a root whose files `sandlog-host` keeps).
//! Never does: decide what state *is* (that is the projections' fold), or
//! write to the log except through `sandlog-eventstore`'s append.
//!
//! # Layout
//!
//! * [`engine`]: `Engine::open` and what every command shares; sessions,
//!   host files, executions and their scans, the one write path
//!   (`shared`), forensic reads, documents, health and metrics.
//! * [`lifecycle`]: prune and delete (two-phase), the removal pool,
//!   adoption of seed workspaces, the applier (`reconcile`), `migrate`.
//! * [`evidence`]: what an execution keeps, history, retention (holds,
//!   erasure, gc), the HTML report, OCSF records.
//! * [`proofs`]: signed checkpoints, proofs, bundles, witnesses, verify and
//!   the full audit.
//! * [`native`]: trusted native commands and `session sync`.
//! * [`kernel`]: warm session kernels for a long-lived process.
//!
//! The modules of each folder, and `sandlog-host`'s and the sandbox, are
//! also re-exported under their flat names (`sandlog_runtime::sessions`,
//! `::layout`, `::sandbox`, ...).

/// The README's examples, compiled and run as doc-tests so they cannot
/// drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

pub mod engine;
pub mod evidence;
pub mod kernel;
pub mod lifecycle;
pub mod native;
pub mod proofs;
pub mod trash;

// The files of a root (below the engine) and the wasmtime sandbox, each a
// crate of its own; re-exported so `sandlog_runtime::layout` and the
// others keep their paths.
pub use sandlog_host::{anchor, error, fault, input, keys, layout, lease, runtimes, workspace};
pub use sandlog_sandbox as sandbox;

// Each job's files, under their old flat paths too.
pub use engine::{documents, exec, files, forensics, health, metrics, sessions, shared};
pub use evidence::{history, ocsf, report, retention};
pub use lifecycle::{adopt, applier, migrate};
pub use proofs::{audit, verify, witness};

pub use adopt::AdoptReport;
pub use applier::{ReconcileOptions, ReconcileReport};
pub use engine::{Engine, EngineOptions, SessionMatch};
pub use error::{Result, RuntimeError};
pub use exec::{
    ExecRequest, Execution, LimitOverrides, PreparedRuntime, RegisteredModules, Runtime,
};
pub use fault::FaultInjector;
pub use kernel::{KernelLimits, KernelPool, KernelStats, WarmExecution};
pub use layout::{Layout, default_cache_dir};
pub use lifecycle::{DeleteReport, PruneReport};
pub use native::{NativeOptions, NativeRun, Passthrough, SyncReport};
pub use sandlog_core as core;
pub use sandlog_eventstore as eventstore;
pub use sandlog_projections as projections;
pub use sandlog_sqlite as sqlite;
pub use sessions::{ContextFile, NewSession};
pub use verify::VerifyOutcome;
