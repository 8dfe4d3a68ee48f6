//! sandlog-eventstore: the append-only, blake3 hash-chained event log.
//!
//! Owns: the `events` and blob tables of the SQLite file, appends (one
//! transaction per batch, optimistic concurrency per stream, gapless global
//! positions, idempotent by event id), reads (by stream, by position, by
//! filter, streamed in pages), chain verification and digests, and
//! content-addressed blobs, and subscriptions with consumers' checkpoints.
//!
//! Never does: interpret payloads (it stores and hashes bytes; projections
//! decode them), update or delete an event, or touch workspaces.
//!
//! # Layout
//!
//! Files import downwards only: [`types`] and [`error`] at the bottom,
//! [`rows`] on them, [`merkle`]'s storage below [`sqlite`], and each
//! concern's `impl EventStore` above [`sqlite`].
//!
//! * [`types`]: [`ExpectedVersion`] and [`Head`], shared by the modules
//!   below and above [`sqlite`].
//! * [`rows`]: decoding an `events` row ([`rows::envelope_from_row`]) and
//!   the small reads of the head and of a stream's version.
//! * [`sqlite`]: opening the file, schema and migrations, durability, the
//!   [`AppendHook`] that lets read models commit with the events.
//! * [`append`]: [`EventStore::append`], [`EventStore::append_batch`]
//!   (several streams in one transaction).
//! * [`read`]: [`EventStore::query`], [`LogFilter`], paging.
//! * [`chain`]: [`EventStore::verify`], [`Digest`].
//! * [`write`](mod@write): [`EventStore::write`], the unit of work: appends to any
//!   streams and the blobs their events name, in one transaction.
//! * [`subscribe`]: [`EventStore::subscribe`], catch-up subscriptions
//!   (at least once, in position order, then following other processes'
//!   appends) and consumers' stored checkpoints.
//! * [`blobs`]: content-addressed, compressed, chunked, erasable blobs.
//! * [`merkle`]: the RFC 6962 tree stored with the events (`merkle/mod.rs`:
//!   storage, the frontier cache, folding events; `merkle/store.rs`: the
//!   [`EventStore`] methods for roots and inclusion and consistency proofs).
//! * [`backend`]: the [`Backend`] trait both backends implement.
//! * [`import`]: [`copy_log`], a verbatim, checked copy of a whole log
//!   between stores (SQLite and PostgreSQL, either way).
//! * `postgres` (feature `postgres`): `postgres::PgEventStore`, the same
//!   log on a PostgreSQL database shared by many processes and hosts.

pub mod append;
pub mod backend;
pub mod blobs;
pub mod chain;
pub mod error;
pub mod import;
pub mod merkle;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod read;
pub mod rows;
pub mod sqlite;
pub mod subscribe;
pub mod types;
pub mod write;

pub use backend::{Backend, UnitOfWork};
pub use blobs::{BlobPut, BlobState, BlobTotals, ErasedBlob};
pub use chain::{Digest, VerifyReport};
pub use error::{ChainProblem, EventStoreError, Result, is_busy, is_disk_full};
pub use import::{ImportReport, Portable, copy_log};
pub use merkle::{MerkleReport, StoredCheckpoint};
pub use read::{EnvelopeIter, LogFilter, PAGE_EVENTS};
pub use sqlite::{APPLICATION_ID, AppendHook, Durability, EventStore, OpenOptions, SCHEMA_VERSION};
pub use subscribe::{
    CONSUMER_NAME_BYTES_MAX, SUBSCRIBE_POLL, SubscribeFrom, Subscription, check_consumer_name,
};
pub use types::{ExpectedVersion, Head};
pub use write::Write;
