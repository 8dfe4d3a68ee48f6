//! sandlog integration tests: one binary, one module per area.
mod projections;
/// The engine end to end with the real python.wasm.
mod engine;
/// Prune, delete, reconcile, adopt.
mod lifecycle;
/// SIGKILL at random points, with real processes.
mod crash;
/// The event log: appends, tampering, concurrent writers, opening files,
/// blobs, the append hook, queries, durability.
mod eventstore;
