//! sandlog-sqlite: the SQLite backend, the embedded default. It implements
//! the event store's seam ([`Backend`](sandlog_eventstore::Backend),
//! [`UnitOfWork`](sandlog_eventstore::UnitOfWork),
//! [`Portable`](sandlog_eventstore::Portable)) on one SQLite file and owns
//! all of its SQL: the log's tables and migrations, and the read models
//! folded inside the append transaction with the queries over them.
//!
//! * [`store`]: [`EventStore`], the log in one file: opening, schema and
//!   migrations, durability, the [`AppendHook`] that lets the read models
//!   commit with the events; appends, reads, verify, the unit of work
//!   ([`EventStore::write`]), blobs, the stored tree and its proofs, the
//!   map of stream heads, catch-up subscriptions, replication from a shared
//!   log.
//! * [`read_model`]: the read models ([`install`], [`catch_up`],
//!   [`rebuild`]), a materialisation of `sandlog-projections`' fold.
//! * [`query`] and [`evidence`]: what users ask of the read models; the
//!   result types are `sandlog-projections`' and re-exported here.
//!
//! Every `rusqlite` type stays in this crate; its failures reach other
//! crates as [`EventStoreError::Backend`](sandlog_eventstore::EventStoreError::Backend)
//! and [`ProjectionError::Backend`](sandlog_projections::ProjectionError::Backend),
//! classified here ([`SqliteError`]).

pub mod evidence;
pub mod query;
pub mod read_model;
pub mod store;

pub use read_model::{
    CatchUpReport, READ_MODEL_VERSION, catch_up, checkpoint_position, install, install_observed,
    rebuild,
};
pub use store::map::StreamHeadProof;
pub use store::read::EnvelopeIter;
pub use store::subscribe::{
    CONSUMER_NAME_BYTES_MAX, SUBSCRIBE_POLL, SubscribeFrom, Subscription, check_consumer_name,
};
pub use store::write::Write;
pub use store::{
    APPLICATION_ID, AppendHook, Durability, EventStore, OpenOptions, SCHEMA_VERSION, SqlResult,
    SqliteError, Upgrade, UpgradeEvent, UpgradeObserver, UpgradeStarted,
};
