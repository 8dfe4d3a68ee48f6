//! The one error enum of `sandlog-eventstore`.

use std::path::PathBuf;

use sandlog_core::{ErrorClass, EventId, Hash, Position, StreamId, StreamVersion};

use crate::types::ExpectedVersion;

/// What a chain check found wrong at a position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainProblem {
    /// The row for this position is missing (deleted, or positions were
    /// renumbered): the next stored row had another position.
    #[error("event is missing (the next stored row is at position {found})")]
    Missing {
        /// The position of the row found instead.
        found: Position,
    },
    /// The row's `prev_hash` is not the previous row's `hash`.
    #[error("prev_hash does not match the previous event's hash")]
    PrevHashMismatch,
    /// The row's stored hash is not the hash of its fields: some field was
    /// changed after it was written.
    #[error("stored hash does not match the event's contents (the row was changed)")]
    HashMismatch,
    /// A column has the wrong type or size.
    #[error("malformed row: {0}")]
    Malformed(String),
    /// The log's event at a stored digest's position has another hash: the
    /// log was rewritten behind the digest.
    #[error(
        "hash at this position is {actual}, but the digest says {expected}: the log was rewritten"
    )]
    DigestMismatch {
        /// The digest's hash.
        expected: Hash,
        /// The log's hash at that position.
        actual: Hash,
    },
    /// The log ends before a stored digest's position: it was truncated.
    #[error("the log ends at position {head}, before the digest's position: the log was truncated")]
    Truncated {
        /// The log's last position.
        head: Position,
    },
}

/// A failure of a backend's database, classified by the backend that saw
/// it: the shared crates never name a database client's types, and each
/// backend decides, from its client's own codes, the class, the stable kind
/// and whether the same call may succeed again. Its text is the client's
/// own.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct BackendError {
    /// The backend's name in messages (`database` for SQLite,
    /// `PostgreSQL`).
    pub backend: &'static str,
    /// The class of the failure.
    pub class: ErrorClass,
    /// The stable kind (`disk_full`, `busy`, `database_corrupt`,
    /// `database`).
    pub kind: &'static str,
    /// Whether the same call may succeed if simply made again (another
    /// connection held a lock, a lost race).
    pub retryable: bool,
    /// The client's error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Errors of the event store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventStoreError {
    /// The stream is not at the expected version: somebody else appended
    /// first. Re-read the stream, re-decide, and append again — or give up
    /// (a prune intent that conflicts means the session was used: keep it).
    #[error("version conflict on {stream}: expected {expected}, stream is at {}", actual.map_or("no stream".to_owned(), |v| v.to_string()))]
    VersionConflict {
        /// The stream.
        stream: StreamId,
        /// What the caller expected.
        expected: ExpectedVersion,
        /// Where the stream is (`None`: it does not exist).
        actual: Option<StreamVersion>,
    },
    /// An event id in the batch is already stored as a different event, or
    /// only part of a batch is stored. A caller bug: event ids must be
    /// fresh for new events and reused only for a retry of the same batch.
    #[error("event id {event_id} is already stored at position {position} as a different event")]
    EventIdReused {
        /// The id.
        event_id: EventId,
        /// Where it is stored.
        position: Position,
    },
    /// The batch is not valid (empty kind, over-long payload, duplicate ids
    /// in the batch, too many events). Nothing was written.
    #[error("invalid append: {0}")]
    InvalidBatch(String),
    /// The file is not a SQLite database (or is damaged beyond opening).
    #[error("{path} is not a sandlog database: {reason}")]
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// SQLite's message.
        reason: String,
    },
    /// The file is a SQLite database of some other application.
    #[error(
        "{path} is a SQLite database of another application (application_id {application_id:#x}); refusing to touch it"
    )]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
        /// Its application id.
        application_id: i64,
    },
    /// The file was written by a newer sandlog. Upgrade sandlog.
    #[error(
        "{path} has schema version {found}, newer than this sandlog supports ({supported}); upgrade sandlog"
    )]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest this build supports.
        supported: i64,
    },
    /// The file needs upgrading to this build's schema, but another
    /// process held the write lock for the whole busy timeout, most likely
    /// upgrading it (which takes long on a large log). Retryable.
    #[error(
        "{path} needs upgrading from schema {from} to {to}, but another process held it \
         for the whole busy timeout, most likely upgrading it (about half a minute per \
         million events); retry when that process has finished"
    )]
    UpgradeBusy {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        from: i64,
        /// This build's.
        to: i64,
    },
    /// The chain is broken at `position`: the first bad event. The log was
    /// tampered with or damaged; treat everything from there as untrusted.
    #[error("integrity failure at position {position}: {problem}")]
    ChainBroken {
        /// The first bad position.
        position: Position,
        /// What is wrong there.
        problem: ChainProblem,
    },
    /// A stored row could not be read back as an envelope.
    #[error("stored event at position {position} is unreadable: {reason}")]
    Corrupt {
        /// Its position.
        position: Position,
        /// What is wrong.
        reason: String,
    },
    /// A stored integer that no sandlog writes (a negative count, size,
    /// position or version): the database was damaged or edited.
    #[error(
        "the stored {column} holds {value}, which sandlog never writes: the database is damaged"
    )]
    StoredValue {
        /// The table and column.
        column: &'static str,
        /// What it holds.
        value: i64,
    },
    /// A blob's bytes do not hash to its address: it was damaged.
    #[error("blob {hash} is corrupt: its contents hash to {actual}")]
    BlobCorrupt {
        /// Its address.
        hash: Hash,
        /// What its bytes hash to.
        actual: Hash,
    },
    /// Bytes stored as a blob did not hash to the address the caller
    /// expected (the file changed while it was being stored): nothing was
    /// stored.
    #[error(
        "the bytes hash to {actual}, not the expected {expected}: they changed while being stored"
    )]
    BlobHashMismatch {
        /// The address expected.
        expected: Hash,
        /// What the bytes hashed to.
        actual: Hash,
    },
    /// A blob's bytes were erased (by `erase` or a retention policy); its
    /// address and the events naming it remain.
    #[error("the content {hash} was erased at {erased_at}")]
    BlobErased {
        /// Its address.
        hash: Hash,
        /// When.
        erased_at: sandlog_core::Timestamp,
    },
    /// A blob is larger than the limit.
    #[error("blob of {size} bytes is larger than the limit of {max} bytes")]
    BlobTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A previous commit failed with an I/O error, so what is durable is
    /// unknown; the store refuses writes. Reopen the store (recovery runs
    /// on open) after fixing the disk.
    #[error("the store refuses writes after an earlier I/O error during commit; reopen it")]
    Poisoned,
    /// The caller's append hook failed; the append was rolled back.
    #[error("append hook failed: {0}")]
    Hook(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The backend's database failed (disk full, locked past the busy
    /// timeout, an I/O error, a constraint), classified by the backend
    /// that saw it (see [`BackendError`]). A lost connection is
    /// [`EventStoreError::Io`] instead.
    #[error("{backend} error: {0}", backend = .0.backend)]
    Backend(#[source] BackendError),
    /// A filesystem error around the database file.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The stored Merkle tree does not match the events (a node changed,
    /// missing or extra): rebuild it from the events, which `verify`
    /// checks on their own.
    #[error("the Merkle tree is damaged: {reason}")]
    MerkleDamaged {
        /// What differs.
        reason: String,
    },
    /// A consumer name or checkpoint given to a subscription was refused
    /// (see the SQLite backend's subscriptions). Nothing was stored.
    #[error("consumer {name:?}: {reason}")]
    InvalidConsumer {
        /// The name (cut to a readable length).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A consumer's stored checkpoint is not a position of this log.
    #[error("the checkpoint of consumer {name:?} is damaged: {reason}")]
    CheckpointCorrupt {
        /// The consumer.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A proof asked for sizes or positions the log does not have.
    #[error("{0}")]
    Merkle(sandlog_core::merkle::MerkleError),
    /// No map of stream heads is kept at this tree size: the map is
    /// stored at the sizes appends committed at (and at the head when the
    /// log was upgraded to hold it).
    #[error(
        "no map of stream heads is stored at tree size {size}: the map is kept at the sizes \
         appends committed at (a checkpoint's size is one); ask for a checkpoint's size or the head"
    )]
    NoMapAt {
        /// The size asked for.
        size: u64,
    },
    /// The store was opened read-only (its directory cannot be written:
    /// read-only media, or another user's root) and the call must write.
    /// Nothing was written.
    #[error(
        "{} is open read-only (its directory cannot be written: read-only media or \
         another user's root), and this command must write: run it where the root is \
         writable (verify, log, files cat, report and evidence export work read-only)",
        path.display()
    )]
    ReadOnly {
        /// The database file.
        path: std::path::PathBuf,
    },
    /// An import (see [`crate::import`]) was aimed at a store that already
    /// holds a log or blobs. Nothing was written.
    #[error(
        "{target} is not empty (it holds {events} events and {blobs} blobs): \
         an import copies a log into an empty store only; give a new database"
    )]
    ImportTargetNotEmpty {
        /// The destination (a file path or a PostgreSQL database name).
        target: String,
        /// Events it holds.
        events: u64,
        /// Blobs it holds.
        blobs: u64,
    },
    /// A node's replica holds events the shared log does not: the shared
    /// log was restored from an older backup or replaced, or the replica
    /// was made from another log. Nothing was written.
    #[error(
        "this node's copy of the log ends at position {replica} but the shared log {log} ends at \
         {shared}: the shared log lost events or is another log; restore it, or move this \
         node's root aside and let it copy the shared log afresh"
    )]
    ReplicaAhead {
        /// The replica's head.
        replica: Position,
        /// The shared log (a database name).
        log: String,
        /// The shared log's head.
        shared: Position,
    },
}

impl EventStoreError {
    /// A stable, machine-readable name for the CLI's `{"error":{"kind"}}`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::VersionConflict { .. } => "version_conflict",
            Self::EventIdReused { .. } => "event_id_reused",
            Self::InvalidBatch(_) => "invalid_append",
            Self::NotADatabase { .. } => "not_a_database",
            Self::ForeignDatabase { .. } => "foreign_database",
            Self::SchemaTooNew { .. } => "schema_too_new",
            Self::UpgradeBusy { .. } => "busy",
            Self::ChainBroken { .. } => "integrity",
            Self::Corrupt { .. } => "corrupt",
            Self::StoredValue { .. } => "integrity",
            Self::BlobCorrupt { .. } => "integrity",
            Self::BlobTooLarge { .. } => "too_large",
            Self::BlobHashMismatch { .. } => "changed",
            Self::BlobErased { .. } => "erased",
            Self::Poisoned => "poisoned",
            Self::Hook(_) => "hook",
            Self::Backend(error) => error.kind,
            Self::Io { .. } => "io",
            Self::MerkleDamaged { .. } => "integrity",
            Self::Merkle(_) => "invalid",
            Self::NoMapAt { .. } => "invalid",
            Self::InvalidConsumer { .. } => "invalid_consumer",
            Self::CheckpointCorrupt { .. } => "integrity",
            Self::ImportTargetNotEmpty { .. } => "not_empty",
            Self::ReadOnly { .. } => "read_only",
            Self::ReplicaAhead { .. } => "integrity",
        }
    }

    /// The class of the failure.
    pub fn class(&self) -> ErrorClass {
        match self {
            // The bytes changed while being stored: read them again.
            Self::VersionConflict { .. } | Self::BlobHashMismatch { .. } => ErrorClass::Conflict,
            Self::UpgradeBusy { .. } => ErrorClass::Conflict,
            Self::EventIdReused { .. }
            | Self::InvalidBatch(_)
            | Self::Merkle(_)
            | Self::NoMapAt { .. } => ErrorClass::BadInput,
            // A root's database file that is damaged or not a database is
            // stored data that cannot be read.
            Self::NotADatabase { .. } => ErrorClass::Integrity,
            Self::ForeignDatabase { .. } | Self::SchemaTooNew { .. } => ErrorClass::Io,
            Self::ChainBroken { .. }
            | Self::Corrupt { .. }
            | Self::StoredValue { .. }
            | Self::BlobCorrupt { .. }
            | Self::MerkleDamaged { .. }
            | Self::CheckpointCorrupt { .. }
            | Self::ReplicaAhead { .. } => ErrorClass::Integrity,
            Self::InvalidConsumer { .. } => ErrorClass::BadInput,
            Self::BlobTooLarge { .. } => ErrorClass::Limit,
            Self::BlobErased { .. } | Self::ImportTargetNotEmpty { .. } | Self::ReadOnly { .. } => {
                ErrorClass::Refused
            }
            Self::Backend(error) => error.class,
            Self::Poisoned | Self::Hook(_) | Self::Io { .. } => ErrorClass::Io,
        }
    }

    /// Whether the same call may succeed if simply made again later:
    /// another connection held the database past the busy timeout (a long
    /// rebuild, a writer in another process). A [`Self::VersionConflict`]
    /// is not: the caller must re-read and re-decide first.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Backend(error) => error.retryable,
            Self::UpgradeBusy { .. } => true,
            _ => false,
        }
    }

    /// Whether this is an integrity failure (CLI exit code 4).
    pub fn is_integrity(&self) -> bool {
        self.class() == ErrorClass::Integrity
    }
}

/// A stored count, size, position or version as the unsigned number it
/// is: a negative one is [`EventStoreError::StoredValue`] naming its
/// column, never read as zero.
pub fn stored_u64(value: i64, column: &'static str) -> Result<u64> {
    u64::try_from(value).map_err(|_| EventStoreError::StoredValue { column, value })
}

/// Result alias.
pub type Result<T, E = EventStoreError> = std::result::Result<T, E>;
