//! The SQLite file: opening, the schema and its migrations, durability.
//!
//! # Layout of the file
//!
//! * `PRAGMA application_id` is [`APPLICATION_ID`] (`SnLg`): a SQLite file of
//!   another application is refused, never modified.
//! * `PRAGMA user_version` is the schema version; [`MIGRATIONS`] holds one
//!   SQL script per version and `open` applies the missing ones in a
//!   transaction.
//! * `events`: one row per event; `position` is the rowid, so reads by
//!   position are B-tree walks. `UNIQUE(stream_key, version)` makes a
//!   second writer with a stale version fail even if the version check
//!   raced, and finds a stream's events. Triggers refuse `UPDATE` and
//!   `DELETE`: the log is append-only to every well-behaved client (a
//!   tamperer can drop them; `verify` is for that).
//! * `streams`: each stream's text and its `key`, assigned in the order
//!   streams are first written. Events are indexed by that key, not by the
//!   stream's text: session ids are random, so an index by text takes each
//!   append at a random page and a commit touching a hundred sessions
//!   rewrote a hundred pages of it, while sessions written together (made
//!   together, pruned together by age) have neighbouring keys and share
//!   pages. `verify` checks every row's key names the row's stream.
//! * `blob_index`, `blob_chunks`: content addressed by blake3, compressed
//!   in checked chunks (see [`sandlog_eventstore::blobs`]).
//! * `merkle_nodes`: the stored nodes of the RFC 6962 tree over the events
//!   (see [`sandlog_eventstore::merkle`]); `checkpoints`: signed checkpoints issued.
//! * `consumer_checkpoints`: the position each named subscriber has
//!   processed up to (see [`subscribe`]); it only moves forward.
//!
//! Read models of `sandlog-projections` live in the same file, in their own
//! tables, so they commit atomically with the events they fold.
//!
//! No `rusqlite` type leaves this crate: every other crate sees the shared
//! types, SQLite's failures classified by [`SqliteError`].

pub mod append;
mod backend;
pub mod blobs;
pub mod chain;
pub mod error;
mod group;
pub mod import;
pub mod map;
pub mod merkle;
pub mod read;
pub mod rows;
pub mod subscribe;
pub mod write;

pub use error::{SqlResult, SqliteError};

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use sandlog_core::{Clock, Envelope, SystemClock};
use sandlog_eventstore::error::{EventStoreError, Result};

/// `PRAGMA application_id` of a sandlog database: "SnLg".
pub const APPLICATION_ID: i64 = 0x536E_4C67;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 6;

/// How long a writer waits for another process's write lock before failing
/// with `SQLITE_BUSY`. Appends hold the lock for milliseconds, but a
/// read-model rebuild holds it throughout (one transaction, seconds for
/// millions of events), and a writer that gives up leaves
/// unrecorded something that already happened (an execution that ran, a
/// file written). A minute covers rebuilds of tens of millions of events
/// and still fails, rather than hanging, behind a stuck process.
pub const BUSY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// Prepared statements kept per connection: every statement the store runs,
/// plus room for the read models'.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// Page cache per connection, in KiB (negative `cache_size` means KiB).
/// 32 MiB keeps the hot tail of the log and the read-model indexes in
/// memory without growing with the log.
const CACHE_SIZE_KIB: i64 = 32 * 1024;

/// Size the WAL file is cut back to when a checkpoint restarts it. Without
/// a limit the file keeps its high-water mark forever (a large rebuild
/// leaves tens of MB); 16 MiB is several large append batches, so
/// ordinary appends never pay for regrowing it.
const WAL_SIZE_LIMIT_BYTES: i64 = 16 * 1024 * 1024;

/// One SQL script per schema version; `MIGRATIONS[n]` takes version `n` to
/// `n + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 0 → 1: the log and the blobs.
    r#"
    CREATE TABLE events (
        position       INTEGER PRIMARY KEY,
        stream         TEXT    NOT NULL,
        version        INTEGER NOT NULL,
        event_id       BLOB    NOT NULL UNIQUE,
        kind           TEXT    NOT NULL,
        schema         INTEGER NOT NULL,
        recorded_at    INTEGER NOT NULL,
        actor          TEXT    NOT NULL,
        correlation_id BLOB,
        causation_id   BLOB,
        payload        BLOB    NOT NULL,
        prev_hash      BLOB    NOT NULL,
        hash           BLOB    NOT NULL,
        UNIQUE (stream, version)
    );
    CREATE INDEX events_by_recorded_at ON events (recorded_at);
    CREATE INDEX events_by_kind ON events (kind, position);
    CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'sandlog: events are append-only'); END;
    CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'sandlog: events are append-only'); END;
    CREATE TABLE blobs (
        hash BLOB    PRIMARY KEY,
        size INTEGER NOT NULL,
        data BLOB    NOT NULL
    );
    "#,
    // 1 → 2: the Merkle tree's stored nodes (see `merkle`); the migration
    // then folds the events already in the log.
    r#"
    CREATE TABLE merkle_nodes (
        level INTEGER NOT NULL,
        idx   INTEGER NOT NULL,
        hash  BLOB    NOT NULL,
        PRIMARY KEY (level, idx)
    ) WITHOUT ROWID;
    CREATE TABLE checkpoints (
        id          INTEGER PRIMARY KEY,
        size        INTEGER NOT NULL,
        root        BLOB    NOT NULL,
        note        TEXT    NOT NULL,
        recorded_at INTEGER NOT NULL
    );
    "#,
    // 2 → 3: blobs in compressed, checked chunks that can be erased (see
    // `blobs`). Each old blob becomes one raw chunk, whose hash is the
    // blob's own.
    r#"
    CREATE TABLE blob_index (
        hash       BLOB    PRIMARY KEY,
        size       INTEGER NOT NULL,
        stored     INTEGER NOT NULL,
        chunks     INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        erased_at  INTEGER
    ) WITHOUT ROWID;
    CREATE TABLE blob_chunks (
        id         INTEGER PRIMARY KEY,
        hash       BLOB    NOT NULL,
        seq        INTEGER NOT NULL,
        codec      INTEGER NOT NULL,
        raw_len    INTEGER NOT NULL,
        chunk_hash BLOB    NOT NULL,
        data       BLOB    NOT NULL
    );
    CREATE UNIQUE INDEX blob_chunks_by_hash ON blob_chunks (hash, seq);
    INSERT INTO blob_index (hash, size, stored, chunks, created_at)
        SELECT hash, size, length(data), 1, 0 FROM blobs;
    INSERT INTO blob_chunks (hash, seq, codec, raw_len, chunk_hash, data)
        SELECT hash, 0, 0, length(data), hash, data FROM blobs;
    DROP TABLE blobs;
    "#,
    // 3 → 4: events found by correlation id (`LogFilter::correlation`);
    // consumers' checkpoints (see `subscribe`), which only move forward.
    r#"
    CREATE INDEX events_by_correlation ON events (correlation_id, position)
        WHERE correlation_id IS NOT NULL;
    CREATE TABLE consumer_checkpoints (
        name       TEXT    PRIMARY KEY,
        position   INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TRIGGER consumer_checkpoints_move_forward
        BEFORE UPDATE OF position ON consumer_checkpoints
        WHEN NEW.position < OLD.position
    BEGIN SELECT RAISE(ABORT, 'sandlog: a consumer checkpoint only moves forward'); END;
    "#,
    // 4 → 5: events indexed by their stream's key, not its text (see the
    // module documentation). The table is rebuilt, positions and every
    // column unchanged: SQLite cannot drop a table's UNIQUE constraint.
    // Keys are given in the order streams were first written.
    r#"
    CREATE TABLE streams (
        key    INTEGER PRIMARY KEY,
        stream TEXT    NOT NULL UNIQUE
    );
    CREATE TRIGGER streams_are_append_only_update BEFORE UPDATE ON streams
    BEGIN SELECT RAISE(ABORT, 'sandlog: streams are append-only'); END;
    CREATE TRIGGER streams_are_append_only_delete BEFORE DELETE ON streams
    BEGIN SELECT RAISE(ABORT, 'sandlog: streams are append-only'); END;
    INSERT INTO streams (stream)
        SELECT stream FROM events GROUP BY stream ORDER BY min(position);
    CREATE TABLE events_by_key (
        position       INTEGER PRIMARY KEY,
        stream         TEXT    NOT NULL,
        version        INTEGER NOT NULL,
        event_id       BLOB    NOT NULL UNIQUE,
        kind           TEXT    NOT NULL,
        schema         INTEGER NOT NULL,
        recorded_at    INTEGER NOT NULL,
        actor          TEXT    NOT NULL,
        correlation_id BLOB,
        causation_id   BLOB,
        payload        BLOB    NOT NULL,
        prev_hash      BLOB    NOT NULL,
        hash           BLOB    NOT NULL,
        stream_key     INTEGER NOT NULL,
        UNIQUE (stream_key, version)
    );
    INSERT INTO events_by_key
        SELECT events.*, streams.key FROM events JOIN streams USING (stream)
        ORDER BY events.position;
    DROP TABLE events;
    ALTER TABLE events_by_key RENAME TO events;
    CREATE INDEX events_by_recorded_at ON events (recorded_at);
    CREATE INDEX events_by_kind ON events (kind, position);
    CREATE INDEX events_by_correlation ON events (correlation_id, position)
        WHERE correlation_id IS NOT NULL;
    CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'sandlog: events are append-only'); END;
    CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'sandlog: events are append-only'); END;
    "#,
    // 5 → 6: the map of stream heads (see `map`); the migration then
    // builds it from the log, at the head.
    map::MIGRATION,
];

/// The schema version that added `merkle_nodes`.
const MERKLE_SCHEMA_VERSION: i64 = 2;

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

/// What a successful commit guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The WAL is fsynced before every append is acknowledged. An
    /// acknowledged append survives a process crash *and* power loss.
    /// Appends of several threads share an fsync (group commit: each
    /// commits at `synchronous = NORMAL` and waits for the next fsync of
    /// the WAL, made by one of them for all); every other commit is made
    /// at `synchronous = FULL`. The default.
    #[default]
    Full,
    /// `synchronous = NORMAL`: the WAL is fsynced only at checkpoints. An
    /// acknowledged append survives a process crash, but the last few
    /// commits may be lost on power loss or an OS crash (the database stays
    /// consistent and the chain valid: it just ends earlier). Opt in for
    /// bulk imports and tests.
    Normal,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Durability of commits.
    pub durability: Durability,
    /// The clock that stamps `recorded_at`.
    pub clock: Arc<dyn Clock>,
    /// How long to wait for another writer.
    pub busy_timeout: Duration,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Told when opening upgrades an existing file's schema.
    pub on_upgrade: Option<UpgradeObserver>,
    /// Open without writing anything, for a root that cannot be written
    /// (read-only media, another user's root): the file must exist with a
    /// current schema, and every write is refused with
    /// [`EventStoreError::ReadOnly`].
    pub read_only: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            durability: Durability::Full,
            clock: Arc::new(SystemClock),
            busy_timeout: BUSY_TIMEOUT_DEFAULT,
            create: true,
            on_upgrade: None,
            read_only: false,
        }
    }
}

impl OpenOptions {
    /// Sets the clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the durability.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets who is told about schema upgrades.
    pub fn on_upgrade(mut self, observer: Option<UpgradeObserver>) -> Self {
        self.on_upgrade = observer;
        self
    }
}

/// Long work an open does once after a sandlog upgrade, holding the write
/// lock throughout (other processes opening or appending wait for it, up
/// to their busy timeout); its time grows with the log's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upgrade {
    /// The file's schema goes from one version to another.
    Schema {
        /// Its schema version.
        from: i64,
        /// This build's.
        to: i64,
    },
    /// The read models kept in the file are rebuilt from the whole log
    /// (their shape changed; see `sandlog_projections`).
    ReadModels {
        /// Their version.
        from: i64,
        /// This build's.
        to: i64,
    },
}

impl Upgrade {
    /// What the upgrade does, in words for people, naming the file as
    /// `path` (the caller shows it as its medium needs: escaped for a
    /// terminal, say). Every front end announces upgrades in these words.
    pub fn starting(&self, path: &str) -> String {
        match self {
            Upgrade::Schema { from, to } => {
                format!("upgrading the log {path} from schema {from} to {to}")
            }
            Upgrade::ReadModels { from, to } => {
                format!(
                    "rebuilding the read models of {path} (version {from} to {to}) from the log"
                )
            }
        }
    }

    /// What the upgrade did, once committed, in words for people.
    pub fn done(&self) -> String {
        match self {
            Upgrade::Schema { to, .. } => format!("log upgraded to schema {to}"),
            Upgrade::ReadModels { to, .. } => format!("read models rebuilt (version {to})"),
        }
    }
}

/// What opening a store tells its [`UpgradeObserver`]. Creating a blank
/// file and opening a current one say nothing.
#[derive(Debug, Clone, Copy)]
pub enum UpgradeEvent<'a> {
    /// The upgrade starts.
    Started {
        /// The file.
        path: &'a Path,
        /// What is upgraded.
        upgrade: Upgrade,
        /// Events in the log.
        events: u64,
    },
    /// The upgrade is committed.
    Finished {
        /// The file.
        path: &'a Path,
        /// What was upgraded.
        upgrade: Upgrade,
        /// How long it took.
        elapsed: Duration,
    },
}

/// Told about upgrades, so that a command whose open takes long can say
/// why. Called on the opening thread. Cheap to clone.
#[derive(Clone)]
pub struct UpgradeObserver(Arc<dyn Fn(UpgradeEvent<'_>) + Send + Sync>);

impl UpgradeObserver {
    /// Wraps `observer`.
    pub fn new(observer: impl Fn(UpgradeEvent<'_>) + Send + Sync + 'static) -> Self {
        UpgradeObserver(Arc::new(observer))
    }

    /// Tells the observer that `upgrade` of the file at `path`, whose log
    /// holds `events`, starts now; the handle tells it when it finished.
    pub fn started<'a>(
        &'a self,
        path: &'a Path,
        upgrade: Upgrade,
        events: u64,
    ) -> UpgradeStarted<'a> {
        (self.0)(UpgradeEvent::Started {
            path,
            upgrade,
            events,
        });
        UpgradeStarted {
            observer: self,
            path,
            upgrade,
            started: std::time::Instant::now(),
        }
    }
}

/// An upgrade announced to an [`UpgradeObserver`] and not yet finished.
#[derive(Debug)]
pub struct UpgradeStarted<'a> {
    observer: &'a UpgradeObserver,
    path: &'a Path,
    upgrade: Upgrade,
    started: std::time::Instant,
}

impl UpgradeStarted<'_> {
    /// Tells the observer the upgrade is committed, and how long it took.
    pub fn finished(self) {
        (self.observer.0)(UpgradeEvent::Finished {
            path: self.path,
            upgrade: self.upgrade,
            elapsed: self.started.elapsed(),
        });
    }
}

impl std::fmt::Debug for UpgradeObserver {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("UpgradeObserver")
    }
}

/// Runs caller-owned writes inside every append transaction, after the
/// events are inserted and before the commit. If it fails, the append is
/// rolled back and fails with [`EventStoreError::Hook`]. Read models use
/// it so the log and the read models never disagree.
pub trait AppendHook: Send + Sync {
    /// Called with the transaction and the envelopes just inserted (never
    /// for the no-op of an idempotent retry).
    fn after_append(
        &self,
        transaction: &rusqlite::Transaction<'_>,
        envelopes: &[Envelope],
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// The event store on one SQLite file. `Send + Sync`: share it in an `Arc`.
/// Writes serialise on one connection (SQLite has one writer anyway); reads
/// use a second connection so they never wait behind a write transaction.
pub struct EventStore {
    pub(crate) path: PathBuf,
    pub(crate) writer: Mutex<Connection>,
    pub(crate) reader: Mutex<Connection>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) hook: Option<Arc<dyn AppendHook>>,
    pub(crate) poisoned: AtomicBool,
    /// Opened with [`OpenOptions::read_only`]: every write is refused.
    pub(crate) read_only: bool,
    pub(crate) frontier: sandlog_eventstore::merkle::FrontierCache,
    /// Nanoseconds spent growing the Merkle tree inside appends since
    /// open (see [`EventStore::merkle_time`]).
    pub(crate) merkle_nanos: std::sync::atomic::AtomicU64,
    /// Nanoseconds spent updating the map of stream heads inside appends
    /// since open (see [`EventStore::map_time`]).
    pub(crate) map_nanos: std::sync::atomic::AtomicU64,
    /// Group commit of units of work, at [`Durability::Full`] with a WAL
    /// (see `group.rs`).
    pub(crate) group: Option<group::GroupSync>,
}

impl std::fmt::Debug for EventStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A connection that can never write, for a store opened read-only. When
/// no write-ahead log file is beside the database, no process has it open
/// for writing (a writer keeps one), and without the right to create its
/// shared-memory file SQLite could not open it in WAL mode at all: it is
/// then opened `immutable`, which reads the file as it is, without locks.
fn open_read_only_connection(path: &Path) -> Result<Connection> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let immutable = !Path::new(&wal).exists();
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str(if immutable {
        "?mode=ro&immutable=1"
    } else {
        "?mode=ro"
    });
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let connection =
        Connection::open_with_flags(&uri, flags).map_err(|error| not_a_database(path, error))?;
    connection.execute_batch("PRAGMA query_only = ON;").sql()?;
    Ok(connection)
}

fn open_connection(path: &Path, options: &OpenOptions, create: bool) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let connection =
        Connection::open_with_flags(path, flags).map_err(|error| not_a_database(path, error))?;
    connection.busy_timeout(options.busy_timeout).sql()?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    // Every byte SQLite frees is overwritten with zeros, not only the
    // bytes an erasure deletes: cells move when pages split or merge and
    // rows are rewritten when updated, and each move would otherwise leave
    // a copy in unused page space or on the free list, where an erasure
    // cannot reach it. Set before anything is written (it writes nothing
    // itself).
    connection
        .execute_batch("PRAGMA secure_delete = ON;")
        .sql()?;
    Ok(connection)
}

fn not_a_database(path: &Path, error: rusqlite::Error) -> EventStoreError {
    match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            EventStoreError::NotADatabase {
                path: path.to_owned(),
                reason: error.to_string(),
            }
        }
        _ => SqliteError::from(error).into(),
    }
}

/// Configures a connection; returns whether the file is in WAL mode.
fn configure(connection: &Connection, path: &Path, options: &OpenOptions) -> Result<bool> {
    let journal_mode: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|error| not_a_database(path, error))?;
    let wal = journal_mode.eq_ignore_ascii_case("wal");
    if !wal {
        tracing::warn!(%journal_mode, "SQLite refused WAL mode; appends will be slower");
    }
    let synchronous = match options.durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    connection
        .execute_batch(&format!(
            "PRAGMA synchronous = {synchronous}; PRAGMA cache_size = -{CACHE_SIZE_KIB}; \
         PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES};"
        ))
        .sql()?;
    Ok(wal)
}

/// Why a file opened read-only cannot be used as it is (foreign, too new,
/// or needing an upgrade it cannot be given), or `None`.
fn schema_unwritable(connection: &Connection, path: &Path) -> Result<Option<String>> {
    let application_id: i64 = connection
        .query_row("PRAGMA application_id", [], |row| row.get(0))
        .map_err(|error| not_a_database(path, error))?;
    let user_version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .sql()?;
    if application_id != APPLICATION_ID {
        return Err(EventStoreError::ForeignDatabase {
            path: path.to_owned(),
            application_id,
        });
    }
    if user_version > SCHEMA_VERSION {
        return Err(EventStoreError::SchemaTooNew {
            path: path.to_owned(),
            found: user_version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok((user_version < SCHEMA_VERSION).then(|| {
        format!(
            "its schema (version {user_version}) needs an upgrade to version {SCHEMA_VERSION}, \
             which a read-only root cannot be given: open it once where it is writable"
        )
    }))
}

/// Checks the file's identity and brings its schema up to date.
fn prepare_schema(
    connection: &mut Connection,
    path: &Path,
    observer: Option<&UpgradeObserver>,
) -> Result<()> {
    let read_identity = |connection: &Connection| -> Result<(i64, i64, i64)> {
        let application_id: i64 = connection
            .query_row("PRAGMA application_id", [], |row| row.get(0))
            .map_err(|error| not_a_database(path, error))?;
        let user_version: i64 = connection
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .sql()?;
        let objects: i64 = connection
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                [],
                |row| row.get(0),
            )
            .sql()?;
        Ok((application_id, user_version, objects))
    };
    let check = |(application_id, user_version, objects): (i64, i64, i64)| -> Result<bool> {
        // Only a truly blank file is ours to create: an empty database that
        // carries another application's `user_version` is foreign (and
        // migrating it from that version would skip creating the tables).
        if application_id == 0 && objects == 0 && user_version == 0 {
            return Ok(true);
        }
        if application_id != APPLICATION_ID {
            return Err(EventStoreError::ForeignDatabase {
                path: path.to_owned(),
                application_id,
            });
        }
        if user_version > SCHEMA_VERSION {
            return Err(EventStoreError::SchemaTooNew {
                path: path.to_owned(),
                found: user_version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(user_version < SCHEMA_VERSION)
    };
    // Read-only look first: most opens find an up-to-date schema and need
    // no write lock. The three reads must see one snapshot: read apart, a
    // process could see `application_id` 0 from before another process
    // created the store and the tables from after, and call it foreign.
    let identity = {
        let snapshot = connection
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .sql()?;
        let identity = read_identity(&snapshot)?;
        snapshot.commit().sql()?;
        identity
    };
    if !check(identity)? {
        return Ok(());
    }
    let transaction = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(transaction) => transaction,
        // An existing file that needs upgrading, and a writer that kept
        // the lock for the whole busy timeout: most likely another
        // process upgrading it. Say so rather than "database is locked".
        Err(error)
            if identity.1 > 0
                && error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) =>
        {
            return Err(EventStoreError::UpgradeBusy {
                path: path.to_owned(),
                from: identity.1,
                to: SCHEMA_VERSION,
            });
        }
        Err(error) => return Err(SqliteError::from(error).into()),
    };
    // Another process may have created or migrated it while we waited.
    let identity = read_identity(&transaction)?;
    let mut announced = None;
    if check(identity)? {
        let from = identity.1;
        if let Some(observer) = observer.filter(|_| from > 0) {
            let upgrade = Upgrade::Schema {
                from,
                to: SCHEMA_VERSION,
            };
            announced = Some(observer.started(path, upgrade, rows::log_length(&transaction)?));
        }
        for (version, script) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(from).unwrap_or(0))
        {
            tracing::info!(
                from = version,
                to = version + 1,
                "migrating event store schema"
            );
            transaction.execute_batch(script).sql()?;
        }
        if from < MERKLE_SCHEMA_VERSION {
            let folded = merkle::fold_events(&transaction, 0)?;
            tracing::info!(
                events = folded,
                "built the Merkle tree over the existing log"
            );
        }
        if from < map::MAP_SCHEMA_VERSION {
            let root = map::rebuild(&transaction)?;
            tracing::info!(root = %root.to_hex(), "built the map of stream heads from the log");
        }
        transaction
            .execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
            ))
            .sql()?;
    }
    transaction.commit().sql()?;
    if let Some(announced) = announced {
        announced.finished();
    }
    Ok(())
}

impl EventStore {
    /// Opens (or creates) the store at `path`.
    ///
    /// Errors: [`EventStoreError::NotADatabase`] for a file that is not
    /// SQLite, [`EventStoreError::ForeignDatabase`] for another
    /// application's database, [`EventStoreError::SchemaTooNew`] for a file
    /// written by a newer sandlog.
    pub fn open(path: &Path, options: OpenOptions) -> Result<EventStore> {
        if !options.create && !path.exists() {
            return Err(EventStoreError::Io {
                context: format!("opening {}", path.display()),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        if options.read_only {
            return EventStore::open_read_only(path, options);
        }
        let mut writer = open_connection(path, &options, options.create)?;
        // Identity and schema before configuration: a foreign file is
        // refused before anything (even WAL mode) is written to it.
        prepare_schema(&mut writer, path, options.on_upgrade.as_ref())?;
        let wal = configure(&writer, path, &options)?;
        // The writer's temporary storage is a file: inside a transaction
        // every statement keeps a journal of the pages it changes (to undo
        // itself alone), held in memory under `temp_store = MEMORY`, so a
        // rebuild dropping old read models of a million events peaked at
        // their size (120 MiB) and memory grew with the log. In a file,
        // SQLite spills such a journal past 64 KiB; the writer sorts
        // nothing large.
        writer.execute_batch("PRAGMA temp_store = FILE;").sql()?;
        let reader = open_connection(path, &options, false)?;
        configure(&reader, path, &options)?;
        // The reader's sorts (queries without an index for their order)
        // stay in memory.
        reader
            .execute_batch("PRAGMA temp_store = MEMORY; PRAGMA query_only = ON;")
            .sql()?;
        Ok(EventStore {
            path: path.to_owned(),
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            clock: options.clock,
            hook: None,
            poisoned: AtomicBool::new(false),
            read_only: false,
            frontier: sandlog_eventstore::merkle::FrontierCache::default(),
            merkle_nanos: std::sync::atomic::AtomicU64::new(0),
            map_nanos: std::sync::atomic::AtomicU64::new(0),
            group: (wal && options.durability == Durability::Full)
                .then(|| group::GroupSync::new(path)),
        })
    }

    /// [`EventStore::open`] with [`OpenOptions::read_only`]: both
    /// connections read-only, the schema checked but never upgraded.
    fn open_read_only(path: &Path, options: OpenOptions) -> Result<EventStore> {
        let writer = open_read_only_connection(path)?;
        writer
            .execute_batch(&format!("PRAGMA cache_size = -{CACHE_SIZE_KIB};"))
            .sql()?;
        if let Some(reason) = schema_unwritable(&writer, path)? {
            return Err(EventStoreError::Io {
                context: format!("opening {} read-only", path.display()),
                source: std::io::Error::other(reason),
            });
        }
        let reader = open_read_only_connection(path)?;
        reader
            .execute_batch(&format!("PRAGMA cache_size = -{CACHE_SIZE_KIB};"))
            .sql()?;
        Ok(EventStore {
            path: path.to_owned(),
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            clock: options.clock,
            hook: None,
            poisoned: AtomicBool::new(false),
            read_only: true,
            frontier: sandlog_eventstore::merkle::FrontierCache::default(),
            merkle_nanos: std::sync::atomic::AtomicU64::new(0),
            map_nanos: std::sync::atomic::AtomicU64::new(0),
            // Nothing to commit.
            group: None,
        })
    }

    /// Whether the store was opened read-only (every write is refused).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Installs the append hook (replacing any other).
    pub fn set_hook(&mut self, hook: Arc<dyn AppendHook>) {
        self.hook = Some(hook);
    }

    /// The time appends through this handle have spent growing the Merkle
    /// tree (loading its frontier and storing the new nodes) since it was
    /// opened: what the tree adds to each append, for the benchmark that
    /// reports its overhead against the whole append.
    pub fn merkle_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(
            self.merkle_nanos.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new read-only connection to the same file, for a long read on
    /// another thread (a `verify` walk, a read-model rebuild's reader) that
    /// must not hold the shared reader, behind which every query and
    /// pre-append version read would wait. Begin a transaction on it to
    /// read one consistent snapshot.
    pub fn open_read_only_connection(&self) -> Result<Connection> {
        let connection = open_read_only_connection(&self.path)?;
        connection.busy_timeout(BUSY_TIMEOUT_DEFAULT).sql()?;
        Ok(connection)
    }

    /// The clock that stamps events.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written
        // (an open transaction rolls back on drop), so the poison flag
        // carries no information: take the connection back.
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn lock_reader(&self) -> MutexGuard<'_, Connection> {
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` with the read connection (`query_only`). Read models query
    /// their tables through this.
    pub fn with_reader<T, E>(
        &self,
        f: impl FnOnce(&Connection) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let connection = self.lock_reader();
        f(&connection)
    }

    /// Runs `f` in a write transaction (`BEGIN IMMEDIATE`) that commits if
    /// `f` succeeds. For read-model maintenance (rebuild, catch-up); never
    /// for events, which only [`EventStore::append`] writes.
    pub fn with_write_transaction<T, E>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<EventStoreError>,
    {
        self.check_writable()?;
        let mut connection = self.lock_writer();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .sql()
            .map_err(EventStoreError::from)?;
        let value = f(&transaction)?;
        self.commit(transaction)?;
        Ok(value)
    }
}
