//! sandlog-eventstore: the append-only, blake3 hash-chained event log's
//! shared rules and the seam every storage backend implements.
//!
//! Owns: what every backend must do and how (appends in one transaction
//! per batch, optimistic concurrency per stream, gapless global positions,
//! idempotent by event id; reads by filter in pages; chain verification
//! and digests; content-addressed blobs in checked chunks; the Merkle
//! tree's stored levels and proofs), as traits ([`Backend`],
//! [`UnitOfWork`], [`Portable`]) and the pure functions both backends call,
//! so the same input gives the same hashes, roots and proofs everywhere.
//!
//! Never does: name a database client. Each backend is a crate of its own
//! that implements the seam and owns its SQL (`sandlog-sqlite`, the
//! embedded default with the read models; `sandlog-postgres`, a log shared
//! by many hosts), and classifies its client's failures into
//! [`EventStoreError::Backend`]. Nor does it interpret payloads, update or
//! delete an event, or touch workspaces.
//!
//! # Layout
//!
//! * [`types`]: [`ExpectedVersion`] and [`Head`]; [`error`]: the crate's
//!   errors, each with a class, and [`BackendError`], a backend's failure
//!   as the backend classified it.
//! * [`batch`]: the limits of a batch, the expected-version rule, retries,
//!   and chaining events after the head.
//! * [`read`]: [`LogFilter`] and the page size; [`chain`]: [`Digest`] and
//!   [`VerifyReport`]; [`blobs`]: the blob types, the chunk codec and the
//!   chunk-writing loop; [`merkle`]: the RFC 6962 tree's shared rules
//!   (stored levels, the frontier cache, proof size checks).
//! * [`backend`]: the [`Backend`] and [`UnitOfWork`] traits every backend
//!   implements.
//! * [`import`]: [`copy_log`], a verbatim, checked copy of a whole log
//!   between stores implementing [`Portable`] (any backend, either way).

pub mod backend;
pub mod batch;
pub mod blobs;
pub mod chain;
pub mod error;
pub mod import;
pub mod merkle;
pub mod read;
pub mod types;

pub use backend::{Backend, UnitOfWork};
pub use blobs::{BlobPut, BlobState, BlobTotals, ErasedBlob};
pub use chain::{Digest, VerifyReport};
pub use error::{BackendError, ChainProblem, EventStoreError, Result};
pub use import::{ImportReport, Portable, copy_log};
pub use merkle::{MerkleReport, StoredCheckpoint};
pub use read::{LogFilter, PAGE_EVENTS};
pub use types::{ExpectedVersion, Head};
