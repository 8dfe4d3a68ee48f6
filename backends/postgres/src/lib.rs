//! The log on PostgreSQL: the same contract as the SQLite store (the
//! [`Backend`](sandlog_eventstore::Backend) trait), for a log shared by many processes
//! on many hosts.
//!
//! **Same input, same log.** Positions, stream versions, `recorded_at`,
//! chain hashes, stored Merkle nodes and blob chunks are computed by the
//! same pure code as SQLite's (`sandlog-core`'s canonical encoding and
//! RFC 6962 tree; [`sandlog_eventstore::batch`]'s rules; [`sandlog_eventstore::merkle`]'s stored
//! levels; [`sandlog_eventstore::blobs`]' chunk format), so the same appends with the
//! same clock give the same hashes, roots and proofs on both backends.
//!
//! **Synchronous client.** The engine is synchronous and calls the store
//! from blocking threads; the `postgres` crate's blocking client fits that
//! without an async runtime leaking into every caller. Each store holds a
//! writer and a reader connection (writes serialise anyway: see below);
//! `verify` opens its own for its long snapshot.
//!
//! **Appends serialise on one lock per database.** Gapless positions and
//! the hash chain need every append to see the previous one's head, across
//! processes and hosts. Each append transaction (READ COMMITTED) first
//! takes [`AppendLock::Advisory`] (`pg_advisory_xact_lock`) and only then
//! reads the head, the stream versions and the stored event ids: each
//! statement after the lock sees every append committed before it. The
//! alternative, a one-row table taken `FOR UPDATE` ([`AppendLock::HeadRow`]),
//! is kept for the benchmark that compares them
//! (`cargo bench -p sandlog-tests --bench postgres`): with durable commits
//! the two measure the same, the commit's WAL flush being the cost. The
//! advisory lock is the default because it writes nothing (a row lock
//! marks the tuple, dirtying its page and logging it on every append) and
//! lives outside any table a maintenance job could lock or rewrite. The
//! primary key on `position` backs the lock up: two appends that somehow
//! computed the same position cannot both commit, and the loser is
//! retried.
//!
//! **Errors** are classified by SQLSTATE and constraint name, never by
//! message: a lost connection is [`EventStoreError::Io`] (the connection is
//! reopened on the next call; an append whose commit was cut off may or may
//! not have landed, and retrying it with the same event ids is safe),
//! serialization failures and deadlocks are retried inside the append and
//! otherwise retryable, everything else is [`EventStoreError::Backend`],
//! classified in `classify.rs`.

mod append;
mod blobs;
pub(crate) mod classify;
mod import;
mod map;
mod read;
mod schema;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement, Transaction};
use sandlog_core::{Clock, SystemClock};
use sandlog_eventstore::error::{EventStoreError, Result};

pub use append::PgWrite;
pub use schema::{MIGRATION_LOCK_KEY, MIGRATIONS, SCHEMA_VERSION};

/// How appends exclude each other (see the module documentation). Every
/// process appending to one database should use the same; if they do not,
/// the primary key on `position` still keeps the chain from forking and
/// the losing append is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AppendLock {
    /// `pg_advisory_xact_lock` on [`APPEND_LOCK_KEY`]. The default.
    #[default]
    Advisory,
    /// `SELECT … FROM append_lock FOR UPDATE`: a row lock on a one-row
    /// table.
    HeadRow,
}

/// The advisory lock key appends take ("SnLg" and 1). Advisory locks are
/// per database, so logs in different databases never wait for each other.
pub const APPEND_LOCK_KEY: i64 = 0x536E_4C67_0000_0001;

/// The first key of the two-key advisory locks a blob put takes (the
/// second is from the blob's hash), so two processes storing the same
/// bytes store them once. The two-key form is a lock space apart from the
/// one-key locks above.
const BLOB_LOCK_CLASS: i32 = 0x536E_4C67;

/// How many times an append is tried when PostgreSQL reports a
/// serialization failure, a deadlock or a position taken by a concurrent
/// append (each means another writer made progress): beyond this the error
/// is returned, still classified as retryable.
pub const APPEND_ATTEMPTS_MAX: u32 = 8;

/// Prepared statements kept per connection: every statement the store
/// runs, with room for the shapes of filtered queries; past it the cache is
/// emptied and refilled.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// How to connect.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The clock that stamps `recorded_at`.
    pub clock: Arc<dyn Clock>,
    /// How appends exclude each other.
    pub lock: AppendLock,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            clock: Arc::new(SystemClock),
            lock: AppendLock::default(),
        }
    }
}

impl PgOptions {
    /// Sets the clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the append lock.
    pub fn lock(mut self, lock: AppendLock) -> Self {
        self.lock = lock;
        self
    }
}

/// A connection and its prepared statements.
pub(crate) struct Conn {
    client: Client,
    statements: StatementCache,
}

/// Prepared statements by SQL text.
#[derive(Default)]
pub(crate) struct StatementCache(HashMap<String, Statement>);

/// An open transaction with the connection's statement cache: what the
/// store's queries run on.
pub(crate) struct Session<'a> {
    pub(crate) transaction: Transaction<'a>,
    statements: &'a mut StatementCache,
}

impl Session<'_> {
    fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(statement) = self.statements.0.get(sql) {
            return Ok(statement.clone());
        }
        if self.statements.0.len() >= STATEMENT_CACHE_CAPACITY {
            self.statements.0.clear();
        }
        let statement = self
            .transaction
            .prepare(sql)
            .pg()
            .map_err(EventStoreError::from)?;
        self.statements.0.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let statement = self.statement(sql)?;
        Ok(self.transaction.query(&statement, params).pg()?)
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let statement = self.statement(sql)?;
        Ok(self.transaction.query_opt(&statement, params).pg()?)
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let statement = self.statement(sql)?;
        Ok(self.transaction.execute(&statement, params).pg()?)
    }
}

/// The event store on a PostgreSQL database. `Send + Sync`: share it in an
/// `Arc`.
pub struct PgEventStore {
    config: postgres::Config,
    database: String,
    writer: Mutex<Option<Conn>>,
    reader: Mutex<Option<Conn>>,
    pub(crate) clock: Arc<dyn Clock>,
    lock: AppendLock,
    pub(crate) frontier: sandlog_eventstore::merkle::FrontierCache,
}

impl std::fmt::Debug for PgEventStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgEventStore")
            .field("database", &self.database)
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

/// A PostgreSQL failure on its way to the shared [`EventStoreError`]
/// (which cannot name the client): a lost connection is
/// [`EventStoreError::Io`], anything else [`EventStoreError::Backend`] as
/// [`classify::backend_error`] classifies it.
#[derive(Debug)]
pub struct PgError(postgres::Error);

impl From<postgres::Error> for PgError {
    fn from(error: postgres::Error) -> Self {
        PgError(error)
    }
}

impl From<PgError> for EventStoreError {
    fn from(PgError(error): PgError) -> Self {
        if is_connection_lost(&error) {
            EventStoreError::Io {
                context: "the PostgreSQL connection failed".into(),
                source: std::io::Error::new(std::io::ErrorKind::ConnectionAborted, error),
            }
        } else {
            EventStoreError::Backend(classify::backend_error(error))
        }
    }
}

/// A `postgres` result with its error as a [`PgError`], which `?` turns
/// into an [`EventStoreError`].
pub(crate) trait PgResult<T> {
    /// The result with its error wrapped.
    fn pg(self) -> std::result::Result<T, PgError>;
}

impl<T> PgResult<T> for std::result::Result<T, postgres::Error> {
    fn pg(self) -> std::result::Result<T, PgError> {
        self.map_err(PgError)
    }
}

/// Whether the connection is gone (closed, a connection-exception SQLSTATE
/// of class 08, a server shutting down, or an I/O error under the client).
fn is_connection_lost(error: &postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        return code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW;
    }
    std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>())
}

impl PgEventStore {
    /// Connects to the database at `url` (a `postgresql://` URL or a
    /// `key=value` connection string; Unix sockets by `host=/dir`) with
    /// the default options, and brings its schema up to date.
    pub fn connect(url: &str) -> Result<PgEventStore> {
        PgEventStore::connect_with(url, PgOptions::default())
    }

    /// [`PgEventStore::connect`] with options.
    ///
    /// Errors: [`EventStoreError::Io`] when the server cannot be reached,
    /// [`EventStoreError::NotADatabase`] when the database holds another
    /// application's `events` table, [`EventStoreError::SchemaTooNew`]
    /// when a newer sandlog migrated it.
    pub fn connect_with(url: &str, options: PgOptions) -> Result<PgEventStore> {
        let config = postgres::Config::from_str(url)
            .map_err(|error| EventStoreError::Backend(classify::backend_error(error)))?;
        let database = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("postgres")
            .to_owned();
        let mut writer = connect_config(&config)?;
        schema::migrate(&mut writer.client, &database)?;
        let reader = connect_config(&config)?;
        Ok(PgEventStore {
            config,
            database,
            writer: Mutex::new(Some(writer)),
            reader: Mutex::new(Some(reader)),
            clock: options.clock,
            lock: options.lock,
            frontier: sandlog_eventstore::merkle::FrontierCache::default(),
        })
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The clock that stamps events.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The append lock in use.
    pub fn append_lock(&self) -> AppendLock {
        self.lock
    }

    /// A new connection to the same database, for a long read that must
    /// not hold the shared reader.
    pub(crate) fn connect_again(&self) -> Result<Conn> {
        connect_config(&self.config)
    }

    /// Runs `f` in a READ COMMITTED transaction on the writer connection,
    /// committing if it succeeds.
    pub(crate) fn with_write<T>(&self, f: impl FnOnce(&mut Session<'_>) -> Result<T>) -> Result<T> {
        with_conn(&self.writer, &self.config, |conn| {
            let transaction = conn.client.transaction().pg()?;
            let mut session = Session {
                transaction,
                statements: &mut conn.statements,
            };
            let value = f(&mut session)?;
            session.transaction.commit().pg()?;
            Ok(value)
        })
    }

    /// [`PgEventStore::with_write`] for a caller's error type: `f`'s error
    /// rolls the transaction back and is returned as it is.
    pub(crate) fn with_write_fallible<T, E>(
        &self,
        f: impl FnOnce(&mut Session<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<EventStoreError>,
    {
        let outcome = with_conn(&self.writer, &self.config, |conn| {
            let transaction = conn.client.transaction().pg()?;
            let mut session = Session {
                transaction,
                statements: &mut conn.statements,
            };
            match f(&mut session) {
                Ok(value) => {
                    session.transaction.commit().pg()?;
                    Ok(Ok(value))
                }
                // Dropping the transaction rolls it back.
                Err(error) => Ok(Err(error)),
            }
        });
        outcome?
    }

    /// Runs `f` in a REPEATABLE READ, READ ONLY transaction on the reader
    /// connection: one consistent snapshot.
    ///
    /// Reads change nothing, so one that fails because the connection was
    /// lost (the server restarted, an idle connection was cut) is made
    /// once more on a new connection.
    pub(crate) fn with_read<T>(&self, f: impl Fn(&mut Session<'_>) -> Result<T>) -> Result<T> {
        match with_conn(&self.reader, &self.config, |conn| read_session(conn, &f)) {
            Err(EventStoreError::Io { .. }) => {
                with_conn(&self.reader, &self.config, |conn| read_session(conn, &f))
            }
            outcome => outcome,
        }
    }

    /// [`PgEventStore::with_read`] without the second try, for reads that
    /// hand out what they read as they go.
    pub(crate) fn with_read_once<T>(
        &self,
        f: impl FnOnce(&mut Session<'_>) -> Result<T>,
    ) -> Result<T> {
        with_conn(&self.reader, &self.config, |conn| read_session(conn, f))
    }

    /// Takes the append lock inside `session`'s transaction.
    pub(crate) fn take_append_lock(&self, session: &mut Session<'_>) -> Result<()> {
        match self.lock {
            AppendLock::Advisory => {
                session.query("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK_KEY])?;
            }
            AppendLock::HeadRow => {
                session.query("SELECT id FROM append_lock FOR UPDATE", &[])?;
            }
        }
        Ok(())
    }
}

/// Runs `f` in a snapshot transaction on `conn`.
pub(crate) fn read_session<T>(
    conn: &mut Conn,
    f: impl FnOnce(&mut Session<'_>) -> Result<T>,
) -> Result<T> {
    let transaction = conn
        .client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .pg()?;
    let mut session = Session {
        transaction,
        statements: &mut conn.statements,
    };
    let value = f(&mut session)?;
    session.transaction.commit().pg()?;
    Ok(value)
}

fn connect_config(config: &postgres::Config) -> Result<Conn> {
    let mut client = config.connect(NoTls).pg()?;
    // Every statement is planned with its parameters. A cached generic
    // plan is made once, early: on a young log whose tables the planner
    // sees as empty, it picks sequential scans and keeps them as the log
    // grows (the id lookup of every append then reads the whole table).
    // The store's statements are point lookups, cheap to plan.
    client
        .batch_execute("SET plan_cache_mode = force_custom_plan")
        .pg()?;
    Ok(Conn {
        client,
        statements: StatementCache::default(),
    })
}

/// Runs `f` on the connection in `slot`, (re)connecting first when there is
/// none or it was closed, and dropping it when `f` lost it.
fn with_conn<T>(
    slot: &Mutex<Option<Conn>>,
    config: &postgres::Config,
    f: impl FnOnce(&mut Conn) -> Result<T>,
) -> Result<T> {
    // A panic while holding the lock leaves at worst an open transaction,
    // which the client rolls back when its guard drops: take it back.
    let mut guard = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if guard.as_ref().is_none_or(|conn| conn.client.is_closed()) {
        *guard = None;
        *guard = Some(connect_config(config)?);
    }
    let Some(conn) = guard.as_mut() else {
        return Err(EventStoreError::Io {
            context: "connecting to PostgreSQL".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotConnected),
        });
    };
    let outcome = f(conn);
    if conn.client.is_closed() || matches!(outcome, Err(EventStoreError::Io { .. })) {
        *guard = None;
    }
    outcome
}

/// Converts a count or position for a BIGINT column.
pub(crate) fn to_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value)
        .map_err(|_| EventStoreError::InvalidBatch(format!("{what} {value} is out of range")))
}

impl sandlog_eventstore::Backend for PgEventStore {
    fn name(&self) -> String {
        format!("PostgreSQL database {}", self.database)
    }

    fn append(
        &self,
        stream: sandlog_core::StreamId,
        expected: sandlog_eventstore::ExpectedVersion,
        events: &[sandlog_core::NewEvent],
    ) -> Result<Vec<sandlog_core::Envelope>> {
        PgEventStore::append(self, stream, expected, events)
    }

    fn append_batch(
        &self,
        batch: &[(
            sandlog_core::StreamId,
            sandlog_eventstore::ExpectedVersion,
            Vec<sandlog_core::NewEvent>,
        )],
    ) -> Result<Vec<sandlog_core::Envelope>> {
        PgEventStore::append_batch(self, batch)
    }

    fn query_page(
        &self,
        filter: &sandlog_eventstore::LogFilter,
    ) -> Result<Vec<sandlog_core::Envelope>> {
        PgEventStore::query_page(self, filter)
    }

    fn head(&self) -> Result<sandlog_eventstore::Head> {
        PgEventStore::head(self)
    }

    fn stream_version(
        &self,
        stream: sandlog_core::StreamId,
    ) -> Result<Option<sandlog_core::StreamVersion>> {
        PgEventStore::stream_version(self, stream)
    }

    fn verify(
        &self,
        digest: Option<sandlog_eventstore::Digest>,
    ) -> Result<sandlog_eventstore::VerifyReport> {
        PgEventStore::verify(self, digest)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<sandlog_core::Hash> {
        PgEventStore::put_blob(self, bytes)
    }

    fn get_blob(&self, hash: &sandlog_core::Hash) -> Result<Option<Vec<u8>>> {
        PgEventStore::get_blob(self, hash)
    }

    fn blob_state(&self, hash: &sandlog_core::Hash) -> Result<sandlog_eventstore::BlobState> {
        PgEventStore::blob_state(self, hash)
    }

    fn read_blob(
        &self,
        hash: &sandlog_core::Hash,
        out: &mut dyn std::io::Write,
    ) -> Result<sandlog_eventstore::BlobState> {
        PgEventStore::read_blob(self, hash, out)
    }

    fn merkle_root(&self, size: u64) -> Result<sandlog_core::merkle::MerkleHash> {
        PgEventStore::merkle_root(self, size)
    }

    fn map_root(&self, size: u64) -> Result<sandlog_core::merkle::MerkleHash> {
        PgEventStore::map_root(self, size)
    }

    fn inclusion_proof(
        &self,
        position: sandlog_core::Position,
        size: u64,
    ) -> Result<Vec<sandlog_core::merkle::MerkleHash>> {
        PgEventStore::inclusion_proof(self, position, size)
    }

    fn blob_totals(&self) -> Result<sandlog_eventstore::BlobTotals> {
        PgEventStore::blob_totals(self)
    }

    fn blob_hashes(&self) -> Result<Vec<(sandlog_core::Hash, bool)>> {
        PgEventStore::blob_hashes(self)
    }

    fn write_unit(
        &self,
        f: &mut dyn FnMut(&mut dyn sandlog_eventstore::UnitOfWork) -> Result<bool>,
    ) -> Result<bool> {
        use sandlog_eventstore::backend::Unwritten;
        Unwritten::outcome(PgEventStore::write(self, |write| {
            Unwritten::decide(f(write))
        }))
    }

    fn consistency_proof(
        &self,
        old: u64,
        new: u64,
    ) -> Result<Vec<sandlog_core::merkle::MerkleHash>> {
        PgEventStore::consistency_proof(self, old, new)
    }
}
