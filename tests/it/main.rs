//! sandlog integration tests: one binary, one module per area.
/// The log's storage contract run on SQLite and on PostgreSQL, and the
/// same input giving the same log on both.
mod backend_conformance;
/// Correlation ids and causation through the engine, the applier
/// included.
mod correlation;
/// SIGKILL at random points, with real processes.
mod crash;
/// The engine end to end with the real python.wasm.
mod engine;
/// The event log: appends, tampering, concurrent writers, opening files,
/// blobs, the append hook, queries, durability.
mod eventstore;
/// Evidence: restore at every position, SIGKILL while keeping evidence,
/// erasure, holds, forks.
mod evidence;
/// Every parser of outside input without a server, fuzzed from the seed
/// corpus in `tests/fuzz/corpus/`.
mod fuzz;
/// Group commit: concurrent appends share an fsync; SIGKILL loses
/// nothing acknowledged.
mod group_commit;
/// Sessions created with a task's group, size limit, read-only data and
/// context files.
mod groups;
/// Adopting hostile seed workspaces: links out, special files, deep trees.
mod hostile_adopt;
/// Leases: prune and delete beside a running execution in another
/// process; a pending intent that keeps failing.
mod hostile_lease;
/// Hostile file names: lossless names, nothing outside the workspace.
mod hostile_names;
/// Roots that are missing, foreign, or lost their log; the root anchor.
mod hostile_root;
/// Hostile workspaces and the bounds of the host's work after a run.
mod hostile_scan;
/// Warm session kernels: persistence, limits, restarts, eviction, a
/// hostile guest against the frame protocol.
mod kernels;
/// Prune, delete, reconcile, adopt.
mod lifecycle;
/// The RFC 6962 tree stored with the events: roots, proofs, rebuild.
mod merkle;
/// `migrate`: SQLite → PostgreSQL → SQLite, verbatim and verified.
mod migrate;
/// The precompiled-module cache shared by roots.
mod module_cache;
/// Native work: real shell scripts run in workspaces, outside changes
/// synced, reconcile agreeing, the stat cache, the size limit, the lease.
mod native;
/// The PostgreSQL backend: many writer processes, SIGKILL, locks,
/// migrations, triggers, connection errors.
mod postgres_backend;
/// Projections: fold, inline read model and rebuild agree; metadata and
/// prune rules; queries; catch-up; as-of replay.
mod projections;
/// Signed checkpoints and offline evidence bundles through the engine.
mod proofs;
/// The forensic HTML report: parsed, escaped, bounded, and rendered in
/// headless Chromium.
mod report;
/// The engine on a log shared by several nodes (PostgreSQL): replicas,
/// blobs read from the shared log, a lost replica, a foreign log.
mod shared_log;
/// Catch-up subscriptions and consumer checkpoints; a follower process
/// killed and resumed while another appends.
mod subscribe;
/// Prune's moves into trash/, the background reclaim, SIGKILL at each
/// step.
mod trash;
