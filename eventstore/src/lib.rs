//! sandlog-eventstore: the append-only, blake3 hash-chained event log.
//!
//! Owns: the log's tables on each backend, appends (one transaction per
//! batch, optimistic concurrency per stream, gapless global positions,
//! idempotent by event id), reads (by stream, by position, by filter,
//! streamed in pages), chain verification and digests, content-addressed
//! blobs, the Merkle tree and its proofs, and subscriptions with consumers'
//! checkpoints.
//!
//! Never does: interpret payloads (it stores and hashes bytes; projections
//! decode them), update or delete an event, or touch workspaces.
//!
//! # Layout
//!
//! The modules at the top are the rules every backend shares, and import
//! nothing of a backend; each backend lives in its own module below them,
//! and only [`sqlite`] uses the SQLite client (only `postgres` the
//! PostgreSQL one).
//!
//! * [`types`]: [`ExpectedVersion`] and [`Head`]; [`error`]: the crate's
//!   errors, each with a class.
//! * [`batch`]: the limits of a batch, the expected-version rule, retries,
//!   and chaining events after the head.
//! * [`read`]: [`LogFilter`] and the page size; [`chain`]: [`Digest`] and
//!   [`VerifyReport`]; [`blobs`]: the blob types and the chunk codec;
//!   [`merkle`]: the RFC 6962 tree's shared rules (stored levels, the
//!   frontier cache, proof size checks).
//! * [`backend`]: the [`Backend`] and [`UnitOfWork`] traits both backends
//!   implement.
//! * [`import`]: [`copy_log`], a verbatim, checked copy of a whole log
//!   between stores (SQLite and PostgreSQL, either way).
//! * [`sqlite`]: [`EventStore`], the log in one SQLite file: opening,
//!   schema and migrations, durability, the [`AppendHook`] that lets read
//!   models commit with the events; appends, reads, verify, the unit of
//!   work ([`EventStore::write`]), blobs, the stored tree and its proofs,
//!   catch-up subscriptions, and replication from a shared log.
//! * `postgres` (feature `postgres`): `postgres::PgEventStore`, the same
//!   log on a PostgreSQL database shared by many processes and hosts.

pub mod backend;
pub mod batch;
pub mod blobs;
pub mod chain;
pub mod error;
pub mod import;
pub mod merkle;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod read;
pub mod sqlite;
pub mod types;

pub use backend::{Backend, UnitOfWork};
pub use blobs::{BlobPut, BlobState, BlobTotals, ErasedBlob};
pub use chain::{Digest, VerifyReport};
pub use error::{ChainProblem, EventStoreError, Result};
pub use import::{ImportReport, Portable, copy_log};
pub use merkle::{MerkleReport, StoredCheckpoint};
pub use read::{LogFilter, PAGE_EVENTS};
pub use sqlite::map::StreamHeadProof;
pub use sqlite::read::EnvelopeIter;
pub use sqlite::subscribe::{
    CONSUMER_NAME_BYTES_MAX, SUBSCRIBE_POLL, SubscribeFrom, Subscription, check_consumer_name,
};
pub use sqlite::write::Write;
pub use sqlite::{
    APPLICATION_ID, AppendHook, Durability, EventStore, OpenOptions, SCHEMA_VERSION, SqliteError,
    Upgrade, UpgradeEvent, UpgradeObserver, UpgradeStarted,
};
pub use types::{ExpectedVersion, Head};
