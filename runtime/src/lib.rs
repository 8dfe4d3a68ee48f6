//! sandlog-runtime: the [`Engine`] (command handlers that perform side
//! effects and append the events that record them), the wasmtime/WASI
//! [`sandbox`], the filesystem [`applier`], and adoption of seed-format
//! workspaces.
//!
//! Owns: every side effect on workspaces and every wasm execution.
//! Never does: decide what state *is* (that is the projections' fold), or
//! write to the log except through `sandlog-eventstore`'s append.
//!
//! # Layout
//!
//! * [`layout`]: where things are in a root, and the variables that move
//!   them.
//! * [`engine`]: `Engine::open` and what every command shares (session
//!   locks and leases, appends to a session).
//! * [`exec`]: runtimes, execution requests and `Engine::execute`.
//! * [`files`]: host file operations (list, read, write, delete).
//! * [`workspace`]: capability-based access to one workspace (S5).
//! * [`sessions`]: creating sessions with a group, a size limit,
//!   read-only directories and context files; the size limit.
//! * [`health`]: the readiness checks of a root (`/readyz`, `doctor`).
//! * [`forensics`]: the log, its head, states as of a point, statistics,
//!   blobs and the Merkle tree, for front ends.
//! * [`lifecycle`]: prune, delete, finishing intents (two-phase).
//! * [`metrics`]: the engine's metrics in the Prometheus text format.
//! * [`fault`]: the fault-injection hook of destructive steps (tests).
//! * [`lease`]: per-session OS locks between users and destroyers.
//! * [`applier`]: `reconcile` = pure `plan` + execute.
//! * [`adopt`]: importing seed workspaces.
//! * [`ocsf`]: events as OCSF records for SIEMs.
//! * [`proofs`]: signed checkpoints, Merkle proofs, evidence bundles.
//! * [`keys`]: signer and verifier key files.
//! * [`report`]: one session as a self-contained HTML report.
//! * [`kernel`]: warm session kernels for a long-lived process.
//! * [`sandbox`]: wasmtime, limits, the module cache.

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
pub use engine::{Engine, EngineOptions};
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
pub use sessions::{ContextFile, NewSession};
pub use verify::VerifyOutcome;
