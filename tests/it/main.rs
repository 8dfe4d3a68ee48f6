//! sandlog integration tests: one binary, one module per area.
/// SIGKILL at random points, with real processes.
mod crash;
/// The engine end to end with the real python.wasm.
mod engine;
/// The event log: appends, tampering, concurrent writers, opening files,
/// blobs, the append hook, queries, durability.
mod eventstore;
/// Roots that are missing, foreign, or lost their log; the root anchor.
mod hostile_root;
/// Prune, delete, reconcile, adopt.
mod lifecycle;
/// Projections: fold, inline read model and rebuild agree; metadata and
/// prune rules; queries; catch-up; as-of replay.
mod projections;
