//! The SQL read models, kept in the log's SQLite file and written inside
//! the append transaction (through the event store's [`AppendHook`]), so
//! the log and the read models never disagree.
//!
//! The read model is a *materialisation of the same fold* as the in-memory
//! [`State`]: a [`Batch`] loads the sessions an event touches from the
//! tables into a partial `State`, runs the fold ([`apply_in_context`]) on
//! it, and writes back what changed. There is one copy of the rules, so the
//! SQL tables cannot drift from the fold; a property test still checks that
//! they are equal.
//!
//! A checkpoint row holds the position of the last event folded. If the
//! log is ahead of it (events appended by a process without the hook, a
//! crash between versions, a read model added later), the next append or
//! [`catch_up`] folds the gap first. A stored read-model version other than
//! [`READ_MODEL_VERSION`] means the tables' shape changed: they are dropped
//! and rebuilt from position 0.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, params};
use sandlog_core::event::{Event, Outcome, ReadonlyDir};
use sandlog_core::{
    CoreError, Envelope, Hash, Position, SessionId, StreamId, StreamVersion, Timestamp,
    WorkspacePath,
};
use sandlog_eventstore::{AppendHook, EventStore, EventStoreError};

use crate::error::{ProjectionError, Result};
use crate::state::{
    CleanupStats, EventContext, FileEntry, SessionState, SessionStatus, State, apply_in_context,
};

/// The shape of the read-model tables. Bump it when they change: stores
/// with another version rebuild on open.
///
/// 2: `rm_sessions_by_age` orders by `(updated_at, session_id)`, and
/// `rm_totals` holds the active totals.
/// 3: sessions get an integer `session_key` in first-written order, and
/// `rm_files` is keyed by it (see the schema).
/// 5: sessions keep their task group, size limit and read-only
/// directories (`group_name`, `max_size`, `readonly`).
pub const READ_MODEL_VERSION: i64 = 5;

/// Events folded per chunk during catch-up and rebuild. Bounds the memory
/// of the partial state (it is flushed and cleared per chunk) and, for a
/// catch-up (one transaction per chunk), how long other writers wait for
/// the write lock; a rebuild is one transaction of many chunks.
pub const CATCH_UP_CHUNK_EVENTS: usize = 50_000;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS rm_checkpoint (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    position      INTEGER NOT NULL,
    model_version INTEGER NOT NULL
);
-- Sessions are keyed by an integer assigned in the order they are first
-- written (SQLite's rowid: one more than the largest), and rm_files by
-- (session_key, path). New sessions and their files therefore land at the
-- right edge of both B-trees: a flush dirties the pages it adds to, not a
-- page in every corner of the tables, as random UUID keys did (a rebuild
-- rewrote nearly all of rm_files and rm_sessions at every chunk's commit).
-- Only the session_id index still takes random inserts, and it is small.
CREATE TABLE IF NOT EXISTS rm_sessions (
    session_key   INTEGER PRIMARY KEY,
    session_id    TEXT    NOT NULL UNIQUE,
    status        TEXT    NOT NULL,
    created_at    INTEGER,
    updated_at    INTEGER,
    exec_count    INTEGER NOT NULL,
    last_outcome  TEXT,
    bytes         INTEGER NOT NULL,
    file_count    INTEGER NOT NULL,
    legacy        INTEGER NOT NULL,
    labels        TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    last_position INTEGER NOT NULL,
    held          TEXT,
    group_name    TEXT,
    max_size      INTEGER,
    readonly      TEXT
);
CREATE INDEX IF NOT EXISTS rm_sessions_by_group
    ON rm_sessions (group_name) WHERE group_name IS NOT NULL;
-- Prune candidates: active, not legacy, oldest first; covering, so the
-- candidate scan never touches the table. session_id comes right after
-- updated_at so the index order is exactly the candidates' order
-- (updated_at, session_id) and the scan needs no sort step.
CREATE INDEX IF NOT EXISTS rm_sessions_by_age
    ON rm_sessions (status, legacy, updated_at, session_id, bytes, version);
CREATE INDEX IF NOT EXISTS rm_sessions_held
    ON rm_sessions (session_id) WHERE held IS NOT NULL;
CREATE TABLE IF NOT EXISTS rm_files (
    session_key INTEGER NOT NULL,
    path        TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    blake3      BLOB    NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (session_key, path)
) WITHOUT ROWID;
-- Which events name which blobs (only blobs whose bytes the event says
-- were stored): what `gc` keeps, what `erase` removes, what a hold
-- protects. `role` is code, stdout, stderr or file (with its path).
CREATE TABLE IF NOT EXISTS rm_blob_refs (
    hash       BLOB    NOT NULL,
    session_id TEXT    NOT NULL,
    position   INTEGER NOT NULL,
    role       TEXT    NOT NULL,
    path       TEXT
);
CREATE INDEX IF NOT EXISTS rm_blob_refs_by_hash ON rm_blob_refs (hash, position);
CREATE INDEX IF NOT EXISTS rm_blob_refs_by_session ON rm_blob_refs (session_id, position);
CREATE TABLE IF NOT EXISTS rm_stats (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    json TEXT NOT NULL
);
-- Active sessions (legacy included) and their bytes: the totals the
-- retention limits of a prune policy start from. Kept by deltas at every
-- flush, so a prune does not count 100,000 rows first.
CREATE TABLE IF NOT EXISTS rm_totals (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    active_sessions INTEGER NOT NULL,
    active_bytes    INTEGER NOT NULL
);
"#;

const DROP: &str = "DROP TABLE IF EXISTS rm_checkpoint; DROP TABLE IF EXISTS rm_sessions; \
                    DROP TABLE IF EXISTS rm_files; DROP TABLE IF EXISTS rm_stats; \
                    DROP TABLE IF EXISTS rm_totals; DROP TABLE IF EXISTS rm_blob_refs;";

/// The `readonly` column: NULL for none, else a JSON array.
pub(crate) fn encode_readonly(readonly: &[ReadonlyDir]) -> Result<Option<String>> {
    if readonly.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(readonly)
        .map(Some)
        .map_err(|error| corrupt(error.to_string()))
}

/// Reads the `readonly` column back.
pub(crate) fn decode_readonly(text: Option<&str>) -> serde_json::Result<Vec<ReadonlyDir>> {
    match text {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text),
    }
}

fn corrupt(what: impl Into<String>) -> ProjectionError {
    ProjectionError::Corrupt(what.into())
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The read-model tables. If any is missing the read model is absent as a
/// whole: [`checkpoint`] says so and [`install`] rebuilds it.
const TABLES: [&str; 6] = [
    "rm_checkpoint",
    "rm_sessions",
    "rm_files",
    "rm_stats",
    "rm_totals",
    "rm_blob_refs",
];

/// Reads the checkpoint: `(position, model_version)`, or `None` when the
/// read model is absent: not created yet, or damaged (a table or the
/// checkpoint row missing).
///
/// Every table is checked, not only `rm_checkpoint`: with, say,
/// `rm_sessions` dropped and the checkpoint intact, `install` used to find
/// a current checkpoint and skip the rebuild, leaving queries failing with
/// "no such table" and every hooked append failing in the hook.
fn checkpoint(connection: &Connection) -> Result<Option<(Position, i64)>> {
    let present: usize = connection
        .prepare_cached(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .query_row(TABLES, |row| row.get(0))?;
    if present != TABLES.len() {
        return Ok(None);
    }
    let row: Option<(i64, i64)> = connection
        .prepare_cached("SELECT position, model_version FROM rm_checkpoint WHERE id = 1")?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(row.map(|(position, version)| (Position(to_u64(position)), version)))
}

fn reset(connection: &Connection) -> Result<()> {
    connection.execute_batch(DROP)?;
    connection.execute_batch(SCHEMA)?;
    connection.execute(
        "INSERT INTO rm_checkpoint (id, position, model_version) VALUES (1, 0, ?1)",
        [READ_MODEL_VERSION],
    )?;
    connection.execute(
        "INSERT INTO rm_totals (id, active_sessions, active_bytes) VALUES (1, 0, 0)",
        [],
    )?;
    Ok(())
}

/// What one session adds to `rm_totals`: one session and its bytes while
/// it is active, nothing otherwise.
fn active_share(session: Option<&SessionState>) -> (i64, i64) {
    match session {
        Some(session) if session.status == SessionStatus::Active => (1, to_i64(session.bytes)),
        _ => (0, 0),
    }
}

/// A session as loaded from `rm_sessions`, with its row's key.
pub(crate) struct KeyedSession {
    key: i64,
    session: SessionState,
}

/// Loads one session (with its files) from the tables.
pub(crate) fn load_session(
    connection: &Connection,
    session_id: SessionId,
) -> Result<Option<SessionState>> {
    Ok(load_keyed_session(connection, session_id, true)?.map(|keyed| keyed.session))
}

/// [`load_session`], with the session's key; without its files (an empty
/// map, the counts still the row's) unless `with_files`.
fn load_keyed_session(
    connection: &Connection,
    session_id: SessionId,
    with_files: bool,
) -> Result<Option<KeyedSession>> {
    let id_text = session_id.to_string();
    let row = connection
        .prepare_cached(
            "SELECT status, created_at, updated_at, exec_count, last_outcome, bytes, file_count, legacy, \
             labels, version, last_position, session_key, held, group_name, max_size, readonly \
             FROM rm_sessions WHERE session_id = ?1",
        )?
        .query_row([&id_text], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, Option<i64>>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, i64>(5)?,
                row.get::<_, i64>(6)?,
                row.get::<_, bool>(7)?,
                row.get::<_, String>(8)?,
                row.get::<_, i64>(9)?,
                row.get::<_, i64>(10)?,
                row.get::<_, i64>(11)?,
                row.get::<_, Option<String>>(12)?,
                row.get::<_, Option<String>>(13)?,
                row.get::<_, Option<i64>>(14)?,
                row.get::<_, Option<String>>(15)?,
            ))
        })
        .optional()?;
    let Some((
        status,
        created_at,
        updated_at,
        exec_count,
        last_outcome,
        bytes,
        file_count,
        legacy,
        labels,
        version,
        last_position,
        session_key,
        held,
        group,
        max_size,
        readonly,
    )) = row
    else {
        return Ok(None);
    };
    let status = SessionStatus::parse(&status)
        .ok_or_else(|| corrupt(format!("session {id_text} has status {status:?}")))?;
    let last_outcome = match last_outcome {
        None => None,
        Some(text) => Some(
            serde_json::from_value::<Outcome>(serde_json::Value::String(text.clone()))
                .map_err(|_| corrupt(format!("session {id_text} has outcome {text:?}")))?,
        ),
    };
    let labels: BTreeMap<String, String> = serde_json::from_str(&labels)
        .map_err(|error| corrupt(format!("session {id_text} labels: {error}")))?;
    let readonly = decode_readonly(readonly.as_deref())
        .map_err(|error| corrupt(format!("session {id_text} readonly: {error}")))?;
    let files = match with_files {
        true => load_files_by_key(connection, session_key)?,
        false => BTreeMap::new(),
    };
    Ok(Some(KeyedSession {
        key: session_key,
        session: SessionState {
            session_id,
            status,
            created_at: created_at.map(Timestamp::from_unix_micros),
            updated_at: updated_at.map(Timestamp::from_unix_micros),
            exec_count: to_u64(exec_count),
            last_outcome,
            bytes: to_u64(bytes),
            file_count: to_u64(file_count),
            legacy,
            labels,
            version: StreamVersion(to_u64(version)),
            last_position: Position(to_u64(last_position)),
            files,
            held,
            group,
            max_size: max_size.map(to_u64),
            readonly,
        },
    }))
}

/// Loads one session's files (none if the session has no row).
pub(crate) fn load_files(
    connection: &Connection,
    session_id: SessionId,
) -> Result<BTreeMap<WorkspacePath, FileEntry>> {
    let key: Option<i64> = connection
        .prepare_cached("SELECT session_key FROM rm_sessions WHERE session_id = ?1")?
        .query_row([session_id.to_string()], |row| row.get(0))
        .optional()?;
    match key {
        Some(key) => load_files_by_key(connection, key),
        None => Ok(BTreeMap::new()),
    }
}

/// One file of a session, or `None` (unknown session or file).
pub(crate) fn load_file(
    connection: &Connection,
    session_id: SessionId,
    path: &WorkspacePath,
) -> Result<Option<FileEntry>> {
    let row = connection
        .prepare_cached(
            "SELECT f.size, f.blake3, f.updated_at FROM rm_files f \
             JOIN rm_sessions s ON s.session_key = f.session_key \
             WHERE s.session_id = ?1 AND f.path = ?2",
        )?
        .query_row(
            rusqlite::params![session_id.to_string(), path.as_str()],
            file_row,
        )
        .optional()?;
    row.map(|row| decode_file_row(row, path)).transpose()
}

/// The columns `size, blake3, updated_at` of a file row.
type FileRow = (i64, Vec<u8>, i64);

fn file_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
}

fn decode_file_row(
    (size, hash_bytes, updated_at): FileRow,
    path: &WorkspacePath,
) -> Result<FileEntry> {
    let blake3 = Hash::from_slice(&hash_bytes)
        .ok_or_else(|| corrupt(format!("hash of {:?}", path.as_str())))?;
    Ok(FileEntry {
        size: to_u64(size),
        blake3,
        updated_at: Timestamp::from_unix_micros(updated_at),
    })
}

/// One file of the session whose row has `session_key`.
fn load_file_by_key(
    connection: &Connection,
    session_key: i64,
    path: &WorkspacePath,
) -> Result<Option<FileEntry>> {
    let row = connection
        .prepare_cached(
            "SELECT size, blake3, updated_at FROM rm_files WHERE session_key = ?1 AND path = ?2",
        )?
        .query_row(params![session_key, path.as_str()], file_row)
        .optional()?;
    row.map(|row| decode_file_row(row, path)).transpose()
}

/// The files of the session whose row has `session_key`.
fn load_files_by_key(
    connection: &Connection,
    session_key: i64,
) -> Result<BTreeMap<WorkspacePath, FileEntry>> {
    let mut statement = connection.prepare_cached(
        "SELECT path, size, blake3, updated_at FROM rm_files WHERE session_key = ?1",
    )?;
    let mut rows = statement.query([session_key])?;
    let mut files = BTreeMap::new();
    while let Some(row) = rows.next()? {
        let path_text: String = row.get(0)?;
        let path = WorkspacePath::parse(&path_text)
            .map_err(|error| corrupt(format!("file path {path_text:?}: {error}")))?;
        let hash_bytes: Vec<u8> = row.get(2)?;
        let blake3 = Hash::from_slice(&hash_bytes)
            .ok_or_else(|| corrupt(format!("hash of {path_text:?}")))?;
        files.insert(
            path,
            FileEntry {
                size: to_u64(row.get(1)?),
                blake3,
                updated_at: Timestamp::from_unix_micros(row.get(3)?),
            },
        );
    }
    Ok(files)
}

/// `(active sessions, their bytes)` from `rm_totals`.
pub(crate) fn load_active_totals(connection: &Connection) -> Result<(u64, u64)> {
    let (sessions, bytes): (i64, i64) = connection
        .prepare_cached("SELECT active_sessions, active_bytes FROM rm_totals WHERE id = 1")?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok((to_u64(sessions), to_u64(bytes)))
}

pub(crate) fn load_stats(connection: &Connection) -> Result<CleanupStats> {
    let json: Option<String> = connection
        .prepare_cached("SELECT json FROM rm_stats WHERE id = 1")?
        .query_row([], |row| row.get(0))
        .optional()?;
    match json {
        None => Ok(CleanupStats::default()),
        Some(json) => {
            serde_json::from_str(&json).map_err(|error| corrupt(format!("stats: {error}")))
        }
    }
}

/// What a [`Batch`] knows of a session's row from before the batch.
#[derive(Debug, Clone)]
struct Loaded {
    /// The row's `session_key`; `None` until the flush inserts the row.
    key: Option<i64>,
    /// Its share of `rm_totals` as loaded.
    share: (i64, i64),
    /// Which of the session's files the partial state holds.
    files: KnownFiles,
}

/// Which files of a session a [`Batch`]'s partial state holds. A session
/// is loaded without its files, and an event loads just the rows it
/// touches (a write its path; a delete, prune or deletion all of them),
/// so folding a write into a session costs the same whatever it holds.
#[derive(Debug, Clone)]
enum KnownFiles {
    /// Every file: the map is the session's whole workspace.
    All,
    /// These paths, present in the map or known to be absent (deleted in
    /// this batch, or never written); any other path is unknown.
    Paths(BTreeSet<WorkspacePath>),
}

/// A partial state being folded, and what must be written back.
struct Batch<'c> {
    connection: &'c Connection,
    state: State,
    /// Sessions looked up in the tables: their row's key (`None`: no row
    /// yet) and their share of `rm_totals` as loaded (zero without a row).
    loaded: HashMap<SessionId, Loaded>,
    dirty_sessions: BTreeSet<SessionId>,
    dirty_files: BTreeSet<(SessionId, WorkspacePath)>,
    stats_dirty: bool,
    /// Blob references folded since the last flush.
    refs: Vec<BlobRef>,
}

/// One row of `rm_blob_refs`.
struct BlobRef {
    hash: sandlog_core::Hash,
    session_id: SessionId,
    position: Position,
    role: &'static str,
    path: Option<WorkspacePath>,
}

/// The blobs an event names whose bytes it says were stored.
fn blob_refs(event: &Event, session_id: SessionId, position: Position, refs: &mut Vec<BlobRef>) {
    let mut push = |hash, role, path| {
        refs.push(BlobRef {
            hash,
            session_id,
            position,
            role,
            path,
        });
    };
    match event {
        Event::SessionExecuted(executed) => {
            push(executed.code_blake3, "code", None);
            if executed
                .evidence
                .is_some_and(|evidence| evidence.output_kept)
            {
                push(executed.stdout_blake3, "stdout", None);
                push(executed.stderr_blake3, "stderr", None);
            }
        }
        Event::FileWritten(written) if written.content_stored() => {
            push(written.blake3, "file", Some(written.path.clone()));
        }
        _ => {}
    }
}

impl<'c> Batch<'c> {
    fn new(connection: &'c Connection, position: Position) -> Result<Self> {
        let stats = load_stats(connection)?;
        Ok(Batch {
            connection,
            state: State {
                sessions: BTreeMap::new(),
                stats,
                position,
            },
            loaded: HashMap::new(),
            dirty_sessions: BTreeSet::new(),
            dirty_files: BTreeSet::new(),
            stats_dirty: false,
            refs: Vec::new(),
        })
    }

    /// Loads `session_id` into the partial state unless it is there already.
    /// `first_in_stream`: the event is its stream's first (version 1), so no
    /// row can exist (rows come only from the stream's own events, and the
    /// checkpoint says every earlier event is folded): the lookup, a miss
    /// for every new session, is skipped.
    fn ensure_loaded(&mut self, session_id: SessionId, first_in_stream: bool) -> Result<()> {
        if let Entry::Vacant(entry) = self.loaded.entry(session_id) {
            let keyed = match first_in_stream {
                true => None,
                false => load_keyed_session(self.connection, session_id, false)?,
            };
            entry.insert(Loaded {
                key: keyed.as_ref().map(|keyed| keyed.key),
                share: active_share(keyed.as_ref().map(|keyed| &keyed.session)),
                // Without a row there are no file rows: the (empty) map is
                // the whole workspace.
                files: match keyed {
                    Some(_) => KnownFiles::Paths(BTreeSet::new()),
                    None => KnownFiles::All,
                },
            });
            if let Some(keyed) = keyed {
                self.state.sessions.insert(session_id, keyed.session);
            }
        }
        Ok(())
    }

    /// Loads the file rows of `session_id` that folding `event` reads
    /// (see [`KnownFiles`]), keeping what the batch already folded.
    fn load_files_for(&mut self, session_id: SessionId, event: &Event) -> Result<()> {
        let Some(loaded) = self.loaded.get_mut(&session_id) else {
            return Ok(());
        };
        let (Some(key), KnownFiles::Paths(known)) = (loaded.key, &mut loaded.files) else {
            return Ok(());
        };
        let Some(session) = self.state.sessions.get_mut(&session_id) else {
            return Ok(());
        };
        match event {
            Event::FileWritten(written) => {
                if known.insert(written.path.clone())
                    && let Some(entry) = load_file_by_key(self.connection, key, &written.path)?
                {
                    session.files.insert(written.path.clone(), entry);
                }
            }
            Event::FileDeleted(_) | Event::SessionPruned(_) | Event::SessionDeleted(_) => {
                for (path, entry) in load_files_by_key(self.connection, key)? {
                    if !known.contains(&path) {
                        session.files.insert(path, entry);
                    }
                }
                loaded.files = KnownFiles::All;
            }
            _ => {}
        }
        Ok(())
    }

    fn apply(&mut self, envelope: &Envelope) -> Result<()> {
        let decoded = envelope.event();
        self.apply_decoded(&EventContext::from(envelope), as_refs(&decoded))
    }

    /// Folds one event, given the envelope fields the fold reads and the
    /// payload's decoding (unknown kinds and undecodable payloads are
    /// skipped, as in [`crate::state::apply`]).
    fn apply_decoded(
        &mut self,
        envelope: &EventContext,
        decoded: std::result::Result<Option<&Event>, &CoreError>,
    ) -> Result<()> {
        self.state.position = self.state.position.max(envelope.position);
        let event = match decoded {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()),
            Err(error) => {
                tracing::warn!(%error, position = %envelope.position, "skipping undecodable event");
                return Ok(());
            }
        };
        if let Some(session_id) = envelope.session() {
            self.ensure_loaded(session_id, envelope.version == StreamVersion(1))?;
            self.load_files_for(session_id, event)?;
            // The file rows this event may change: exactly the ones whose
            // presence or contents the fold can alter. Only a session that
            // already has a row can have file rows; a new one's files are
            // all written with it (most sessions of a rebuild's chunk).
            let has_row = self
                .loaded
                .get(&session_id)
                .is_some_and(|loaded| loaded.key.is_some());
            if let Some(session) = self.state.sessions.get(&session_id).filter(|_| has_row) {
                match event {
                    Event::FileWritten(written) => {
                        self.dirty_files.insert((session_id, written.path.clone()));
                    }
                    Event::FileDeleted(deleted) => {
                        for path in session
                            .files
                            .keys()
                            .filter(|path| path.starts_with(&deleted.path))
                        {
                            self.dirty_files.insert((session_id, path.clone()));
                        }
                    }
                    Event::SessionPruned(_) | Event::SessionDeleted(_) => {
                        for path in session.files.keys() {
                            self.dirty_files.insert((session_id, path.clone()));
                        }
                    }
                    _ => {}
                }
            }
            self.dirty_sessions.insert(session_id);
            blob_refs(event, session_id, envelope.position, &mut self.refs);
        }
        let stats_before = self.state.stats.clone();
        apply_in_context(&mut self.state, envelope, event);
        if self.state.stats != stats_before {
            self.stats_dirty = true;
        }
        Ok(())
    }

    /// Writes back what changed and the checkpoint; clears the partial
    /// state so memory stays bounded.
    fn flush(&mut self) -> Result<()> {
        let connection = self.connection;
        // Sessions whose row this flush inserts: all their files are new.
        let mut new_sessions = Vec::new();
        {
            let mut insert_session = connection.prepare_cached(
                "INSERT INTO rm_sessions (session_id, status, created_at, updated_at, exec_count, last_outcome, \
                 bytes, file_count, legacy, labels, version, last_position, held, group_name, max_size, \
                 readonly) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )?;
            let mut update_session = connection.prepare_cached(
                "UPDATE rm_sessions SET status = ?2, created_at = ?3, updated_at = ?4, exec_count = ?5, \
                 last_outcome = ?6, bytes = ?7, file_count = ?8, legacy = ?9, labels = ?10, version = ?11, \
                 last_position = ?12, held = ?13, group_name = ?14, max_size = ?15, readonly = ?16 \
                 WHERE session_key = ?1",
            )?;
            for session_id in &self.dirty_sessions {
                let Some(session) = self.state.sessions.get(session_id) else {
                    continue;
                };
                let labels = serde_json::to_string(&session.labels)
                    .map_err(|error| corrupt(error.to_string()))?;
                let readonly = encode_readonly(&session.readonly)?;
                let loaded = self.loaded.get_mut(session_id).ok_or_else(|| {
                    corrupt(format!("session {session_id} changed without being loaded"))
                })?;
                let values = (
                    session.status.as_str(),
                    session.created_at.map(Timestamp::unix_micros),
                    session.updated_at.map(Timestamp::unix_micros),
                    to_i64(session.exec_count),
                    session.last_outcome.map(Outcome::as_str),
                    to_i64(session.bytes),
                    to_i64(session.file_count),
                    session.legacy,
                    labels,
                    to_i64(session.version.0),
                    to_i64(session.last_position.0),
                    session.held.as_deref(),
                    session.group.as_deref(),
                    session.max_size.map(to_i64),
                    readonly,
                );
                match loaded.key {
                    Some(key) => {
                        update_session.execute(params![
                            key, values.0, values.1, values.2, values.3, values.4, values.5,
                            values.6, values.7, values.8, values.9, values.10, values.11,
                            values.12, values.13, values.14,
                        ])?;
                    }
                    None => {
                        new_sessions.push(*session_id);
                        insert_session.execute(params![
                            session_id.to_string(),
                            values.0,
                            values.1,
                            values.2,
                            values.3,
                            values.4,
                            values.5,
                            values.6,
                            values.7,
                            values.8,
                            values.9,
                            values.10,
                            values.11,
                            values.12,
                            values.13,
                            values.14,
                        ])?;
                        loaded.key = Some(connection.last_insert_rowid());
                    }
                }
            }
        }
        {
            let mut upsert_file = connection.prepare_cached(
                "INSERT INTO rm_files (session_key, path, size, blake3, updated_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (session_key, path) DO UPDATE SET size = excluded.size, blake3 = excluded.blake3, \
                 updated_at = excluded.updated_at",
            )?;
            let mut delete_file = connection
                .prepare_cached("DELETE FROM rm_files WHERE session_key = ?1 AND path = ?2")?;
            for session_id in &new_sessions {
                let (Some(session), Some(key)) = (
                    self.state.sessions.get(session_id),
                    self.loaded.get(session_id).and_then(|loaded| loaded.key),
                ) else {
                    continue;
                };
                for (path, file) in &session.files {
                    upsert_file.execute(params![
                        key,
                        path.as_str(),
                        to_i64(file.size),
                        file.blake3.0.as_slice(),
                        file.updated_at.unix_micros(),
                    ])?;
                }
            }
            for (session_id, path) in &self.dirty_files {
                let entry = self
                    .state
                    .sessions
                    .get(session_id)
                    .and_then(|session| session.files.get(path));
                // A file row exists only under a session row, which the
                // loop above wrote for every session with a changed file.
                let Some(key) = self.loaded.get(session_id).and_then(|loaded| loaded.key) else {
                    continue;
                };
                match entry {
                    Some(file) => upsert_file.execute(params![
                        key,
                        path.as_str(),
                        to_i64(file.size),
                        file.blake3.0.as_slice(),
                        file.updated_at.unix_micros(),
                    ])?,
                    None => delete_file.execute(params![key, path.as_str()])?,
                };
            }
        }
        let (mut sessions_delta, mut bytes_delta) = (0i64, 0i64);
        for session_id in &self.dirty_sessions {
            let (sessions_before, bytes_before) = self
                .loaded
                .get(session_id)
                .map_or((0, 0), |loaded| loaded.share);
            let (sessions_after, bytes_after) = active_share(self.state.sessions.get(session_id));
            sessions_delta += sessions_after - sessions_before;
            bytes_delta += bytes_after - bytes_before;
        }
        if (sessions_delta, bytes_delta) != (0, 0) {
            connection
                .prepare_cached(
                    "UPDATE rm_totals SET active_sessions = active_sessions + ?1, \
                     active_bytes = active_bytes + ?2 WHERE id = 1",
                )?
                .execute([sessions_delta, bytes_delta])?;
        }
        if self.stats_dirty {
            let json = serde_json::to_string(&self.state.stats)
                .map_err(|error| corrupt(error.to_string()))?;
            connection
                .prepare_cached("INSERT INTO rm_stats (id, json) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET json = excluded.json")?
                .execute([json])?;
        }
        if !self.refs.is_empty() {
            let mut insert_ref = connection.prepare_cached(
                "INSERT INTO rm_blob_refs (hash, session_id, position, role, path) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for blob in self.refs.drain(..) {
                insert_ref.execute(params![
                    blob.hash.0.as_slice(),
                    blob.session_id.to_string(),
                    to_i64(blob.position.0),
                    blob.role,
                    blob.path.as_ref().map(WorkspacePath::as_str),
                ])?;
            }
        }
        connection
            .prepare_cached("UPDATE rm_checkpoint SET position = ?1 WHERE id = 1")?
            .execute([to_i64(self.state.position.0)])?;
        self.state.sessions.clear();
        self.loaded.clear();
        self.dirty_sessions.clear();
        self.dirty_files.clear();
        self.stats_dirty = false;
        Ok(())
    }
}

/// The columns of `events` that catch-up reads: what the fold needs and no
/// more. The event id, actor and hashes are the chain's business; building
/// whole envelopes (four allocations and a payload copy per row) was a
/// tenth of a rebuild's time.
const FOLD_COLUMNS: &str = "position, stream, version, kind, schema, recorded_at, payload";

/// Reads a row selected with [`FOLD_COLUMNS`]: the fields the fold reads,
/// and the payload decoded in place from the row's bytes. A row of the
/// wrong shape is [`EventStoreError::Corrupt`], as when the store reads it.
fn fold_row(
    row: &Row<'_>,
) -> Result<(EventContext, std::result::Result<Option<Event>, CoreError>)> {
    let malformed = |position: Position, reason: &str| {
        ProjectionError::Store(EventStoreError::Corrupt {
            position,
            reason: reason.to_owned(),
        })
    };
    let integer = |index: usize, position: Position, name: &str| -> Result<i64> {
        match row.get_ref(index)? {
            ValueRef::Integer(value) => Ok(value),
            _ => Err(malformed(position, &format!("{name} is not an integer"))),
        }
    };
    let unsigned = |index: usize, position: Position, name: &str| -> Result<u64> {
        u64::try_from(integer(index, position, name)?)
            .map_err(|_| malformed(position, &format!("{name} is negative")))
    };
    let position = Position(unsigned(0, Position::ZERO, "position")?);
    let stream = match row.get_ref(1)? {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| StreamId::parse(text).ok())
            .ok_or_else(|| malformed(position, "stream is not a stream id"))?,
        _ => return Err(malformed(position, "stream is not text")),
    };
    let kind = match row.get_ref(3)? {
        ValueRef::Text(bytes) => {
            std::str::from_utf8(bytes).map_err(|_| malformed(position, "kind is not UTF-8"))?
        }
        _ => return Err(malformed(position, "kind is not text")),
    };
    let schema = u32::try_from(unsigned(4, position, "schema")?)
        .map_err(|_| malformed(position, "schema is out of range"))?;
    let payload = match row.get_ref(6)? {
        ValueRef::Blob(bytes) => bytes,
        _ => return Err(malformed(position, "payload is not a blob")),
    };
    let context = EventContext {
        position,
        stream,
        version: StreamVersion(unsigned(2, position, "version")?),
        recorded_at: Timestamp::from_unix_micros(integer(5, position, "recorded_at")?),
    };
    Ok((context, Event::decode(kind, schema, payload)))
}

/// The statement selecting, with [`FOLD_COLUMNS`], the events after
/// position `?1` in position order, at most `?2` of them.
fn fold_rows_after(connection: &Connection) -> rusqlite::Result<rusqlite::CachedStatement<'_>> {
    connection.prepare_cached(&format!(
        "SELECT {FOLD_COLUMNS} FROM events WHERE position > ?1 ORDER BY position LIMIT ?2"
    ))
}

/// Folds the events after the checkpoint, up to `CATCH_UP_CHUNK_EVENTS`;
/// returns how many were folded.
fn catch_up_chunk(connection: &Connection) -> Result<usize> {
    let Some((position, _)) = checkpoint(connection)? else {
        return Ok(0);
    };
    let mut batch = Batch::new(connection, position)?;
    let mut statement = fold_rows_after(connection)?;
    let mut rows = statement.query(params![
        to_i64(position.0),
        to_i64(CATCH_UP_CHUNK_EVENTS as u64)
    ])?;
    let mut folded = 0;
    while let Some(row) = rows.next()? {
        let (context, decoded) = fold_row(row)?;
        batch.apply_decoded(&context, as_refs(&decoded))?;
        folded += 1;
    }
    drop(rows);
    if folded > 0 {
        batch.flush()?;
    }
    Ok(folded)
}

/// Folds every event after the checkpoint in the caller's transaction,
/// chunk by chunk; returns how many were folded.
fn catch_up_in(connection: &Connection) -> Result<u64> {
    let mut total = 0u64;
    loop {
        match catch_up_chunk(connection)? {
            0 => return Ok(total),
            folded => total += folded as u64,
        }
    }
}

/// The hook that keeps the read models in step with every append.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadModelHook;

impl AppendHook for ReadModelHook {
    fn after_append(
        &self,
        transaction: &rusqlite::Transaction<'_>,
        envelopes: &[Envelope],
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(first) = envelopes.first() else {
            return Ok(());
        };
        let Some((position, _)) = checkpoint(transaction)? else {
            return Ok(());
        };
        if Position(position.0.saturating_add(1)) == first.position {
            let mut batch = Batch::new(transaction, position)?;
            for envelope in envelopes {
                batch.apply(envelope)?;
            }
            batch.flush()?;
        } else {
            // Behind (or, impossibly, ahead): fold from the checkpoint,
            // which includes the events just inserted in this transaction.
            tracing::info!(checkpoint = %position, first = %first.position, "read model behind the log; catching up");
            catch_up_in(transaction)?;
        }
        Ok(())
    }
}

/// What opening the read models did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CatchUpReport {
    /// Events folded to catch up.
    pub events: u64,
    /// Whether the tables were (re)built from position 0.
    pub rebuilt: bool,
}

/// Whether a checkpoint (see [`checkpoint`]) is of read models of the
/// current shape.
fn is_current(found: Option<(Position, i64)>) -> bool {
    matches!(found, Some((_, version)) if version == READ_MODEL_VERSION)
}

/// Creates the read-model tables if needed (rebuilding them if their
/// version changed), catches them up with the log, and installs the hook
/// that keeps them in step with every later append.
pub fn install(store: &mut EventStore) -> Result<CatchUpReport> {
    let mut report = CatchUpReport::default();
    let found = store.with_reader(checkpoint)?;
    if !is_current(found) {
        if let Some((_, version)) = found {
            tracing::info!(
                found = version,
                wanted = READ_MODEL_VERSION,
                "read model version changed; rebuilding"
            );
        }
        // Checked again under the write lock: another process opening the
        // same store may have rebuilt it meanwhile.
        if let Some(events) =
            rebuild_unless(store, |connection| Ok(is_current(checkpoint(connection)?)))?
        {
            report.rebuilt = true;
            report.events = events;
        }
    }
    report.events += catch_up(store)?;
    store.set_hook(Arc::new(ReadModelHook));
    Ok(report)
}

/// Folds every event after the checkpoint, one chunk per transaction.
/// Resumable: a crash loses at most the chunk in flight, which the next
/// call folds again. Every commit leaves the read models equal to the fold
/// of the log up to their checkpoint.
///
/// Long catch-ups run on two threads: a reader with its own connection
/// selects and decodes the events, this thread folds them and writes the
/// read models. Each chunk's transaction first checks that the checkpoint
/// is still where the reader started; if another process folded events
/// meanwhile (its append hook catches up too), the reader is dropped and
/// the rest is folded here, as are events appended after the reader
/// stopped.
pub fn catch_up(store: &EventStore) -> Result<u64> {
    let Some((start, _)) = store.with_reader(checkpoint)? else {
        return Ok(0);
    };
    let head = store.head()?.position;
    let mut total = 0u64;
    if head.0.saturating_sub(start.0) >= PIPELINED_CATCH_UP_EVENTS_MIN {
        total += pipelined_catch_up(store, start)?;
    }
    loop {
        let folded = store.with_write_transaction(|transaction| catch_up_chunk(transaction))?;
        if folded == 0 {
            return Ok(total);
        }
        total += folded as u64;
    }
}

/// Below this many events behind, catch-up folds on one thread: a second
/// thread and connection cost more than they save.
const PIPELINED_CATCH_UP_EVENTS_MIN: u64 = 10_000;

/// Decoded events per hand-off from the catch-up reader to the folding
/// thread: enough work per hand-off that hand-offs cost next to nothing.
const DECODED_BATCH_EVENTS: usize = 1024;

/// Hand-offs in flight: a whole chunk. While the folding thread writes and
/// commits one chunk, the reader decodes the next instead of stalling; with
/// fewer in flight the reader stalls early in each chunk and the two threads
/// take turns instead of overlapping.
/// Costs about 15 MiB of decoded events, bounded by the chunk size.
const DECODED_BATCHES_IN_FLIGHT: usize = CATCH_UP_CHUNK_EVENTS / DECODED_BATCH_EVENTS;

/// One event as the fold needs it: its context and its decoded payload.
type DecodedEvent = (EventContext, std::result::Result<Option<Event>, CoreError>);

/// A decoding result by reference, as [`Batch::apply_decoded`] takes it.
fn as_refs(
    decoded: &std::result::Result<Option<Event>, CoreError>,
) -> std::result::Result<Option<&Event>, &CoreError> {
    decoded.as_ref().map(Option::as_ref)
}

/// Consecutive events in log order, or the error that stopped the reader.
type DecodedBatch = Result<Vec<DecodedEvent>>;

/// The reading half of a pipelined catch-up: every event after `start`,
/// decoded and sent in batches, each read in its own snapshot. Positions
/// never change once written, so batches read in different snapshots join
/// up exactly. Stops at the first short batch (the head, then), at the
/// first error (sent), or when the folding side hangs up.
fn read_decoded(
    connection: &Connection,
    start: Position,
    batches: &SyncSender<DecodedBatch>,
    folded: &Receiver<Vec<DecodedEvent>>,
) {
    let result = (|| -> Result<()> {
        let mut after = start;
        loop {
            // Freeing folded events here, not on the folding thread (the
            // busier of the two), is a tenth of its work.
            while let Ok(done) = folded.try_recv() {
                drop(done);
            }
            // One short read transaction per batch, ended before the
            // (blocking) send: a reader that held its snapshot while waiting
            // would keep every checkpoint from resetting the WAL, which then
            // grew with the rebuild.
            let batch = {
                let transaction = connection.unchecked_transaction()?;
                let mut statement = fold_rows_after(&transaction)?;
                let mut rows = statement.query(params![
                    to_i64(after.0),
                    to_i64(DECODED_BATCH_EVENTS as u64)
                ])?;
                let mut batch = Vec::with_capacity(DECODED_BATCH_EVENTS);
                while let Some(row) = rows.next()? {
                    batch.push(fold_row(row)?);
                }
                batch
            };
            let Some((last, _)) = batch.last() else {
                return Ok(());
            };
            after = last.position;
            let complete = batch.len() == DECODED_BATCH_EVENTS;
            if batches.send(Ok(batch)).is_err() || !complete {
                // The folding side hung up, or this was the head.
                return Ok(());
            }
        }
    })();
    if let Err(error) = result {
        let _ = batches.send(Err(error));
    }
}

/// The batches of decoded events a pipelined catch-up receives, and the
/// way back for folded ones (freed by the reader).
struct DecodedEvents {
    batches: Receiver<DecodedBatch>,
    folded: mpsc::Sender<Vec<DecodedEvent>>,
}

impl DecodedEvents {
    /// The next batch; `None` once the reader is done.
    fn next_batch(&mut self) -> Option<Result<Vec<DecodedEvent>>> {
        self.batches.recv().ok()
    }

    /// Hands a folded batch back to the reader to free.
    fn done(&self, batch: Vec<DecodedEvent>) {
        // A reader that has finished frees nothing more: drop it here.
        let _ = self.folded.send(batch);
    }
}

/// Runs `fold` with the events after `start` arriving, decoded, from a
/// reader thread on its own read-only connection. The reader stops at the
/// head, or when `fold` returns and drops its end of the channel.
fn with_decoded_events<T>(
    store: &EventStore,
    start: Position,
    fold: impl FnOnce(&mut DecodedEvents) -> Result<T>,
) -> Result<T> {
    let connection = store.open_read_only_connection()?;
    let (sender, receiver) = mpsc::sync_channel(DECODED_BATCHES_IN_FLIGHT);
    let (folded_sender, folded_receiver) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || read_decoded(&connection, start, &sender, &folded_receiver));
        let mut events = DecodedEvents {
            batches: receiver,
            folded: folded_sender,
        };
        fold(&mut events)
    })
}

/// Folds, in `transaction`, what the reader sends after `start`: every
/// event to the head, or whole batches until at least `limit` events.
/// Flushes the partial state every [`CATCH_UP_CHUNK_EVENTS`] (a chunk may
/// run past it by less than one batch), so memory does not grow with the
/// number folded. Returns the events folded and the last one's position.
fn fold_decoded(
    transaction: &Connection,
    events: &mut DecodedEvents,
    start: Position,
    limit: Option<u64>,
) -> Result<(u64, Position)> {
    let mut position = start;
    let mut total = 0u64;
    loop {
        let mut batch = Batch::new(transaction, position)?;
        let mut folded = 0u64;
        while folded < CATCH_UP_CHUNK_EVENTS as u64 {
            let Some(decoded_batch) = events.next_batch() else {
                break;
            };
            let decoded_batch = decoded_batch?;
            for (context, decoded) in &decoded_batch {
                batch.apply_decoded(context, as_refs(decoded))?;
            }
            folded += decoded_batch.len() as u64;
            events.done(decoded_batch);
        }
        if folded == 0 {
            return Ok((total, position));
        }
        batch.flush()?;
        position = batch.state.position;
        total += folded;
        if limit.is_some_and(|limit| total >= limit) {
            return Ok((total, position));
        }
    }
}

/// Folds what the reader sends, one chunk per transaction, while the
/// checkpoint stays where the folded events left it. Returns the events
/// folded; the caller folds whatever is left.
fn pipelined_catch_up(store: &EventStore, start: Position) -> Result<u64> {
    with_decoded_events(store, start, |events| {
        let mut expected = start;
        let mut total = 0u64;
        loop {
            let folded = store.with_write_transaction(|transaction| -> Result<u64> {
                match checkpoint(transaction)? {
                    Some((position, _)) if position == expected => {}
                    // Someone else folded (or rebuilt) meanwhile.
                    _ => return Ok(0),
                }
                let (folded, position) = fold_decoded(
                    transaction,
                    events,
                    expected,
                    Some(CATCH_UP_CHUNK_EVENTS as u64),
                )?;
                expected = position;
                Ok(folded)
            })?;
            if folded == 0 {
                return Ok(total);
            }
            total += folded;
        }
    })
}

/// Drops the read models and folds the whole log again from position 0,
/// streamed (memory does not grow with the log), in one transaction.
/// Returns the number of events folded.
///
/// One transaction, so nobody ever sees a half-built read model: queries
/// meanwhile (in this process or another) read the old tables, a crash or
/// an error leaves them as they were, and the new ones appear whole at the
/// commit. Appends wait for the write lock meanwhile, as long as the
/// rebuild takes; without the single transaction, an append landing
/// between two chunks would find its read model behind and fold the whole
/// rest of the log in its own transaction anyway.
pub fn rebuild(store: &EventStore) -> Result<u64> {
    Ok(rebuild_unless(store, |_| Ok(false))?.unwrap_or(0))
}

/// [`rebuild`], unless `done` says, under the write lock, that the read
/// models need none (another process rebuilt them first): `None` then.
fn rebuild_unless(
    store: &EventStore,
    done: impl FnOnce(&Connection) -> Result<bool>,
) -> Result<Option<u64>> {
    store.with_write_transaction(|transaction| {
        if done(transaction)? {
            return Ok(None);
        }
        // The page cache belongs to the connection, not the transaction:
        // set for the refold, and given back afterwards, failed or not.
        let usual: i64 = transaction.query_row("PRAGMA cache_size", [], |row| row.get(0))?;
        transaction.execute_batch(&format!("PRAGMA cache_size = -{REBUILD_CACHE_KIB}"))?;
        let refolded = refold(store, transaction);
        let restored = transaction.execute_batch(&format!("PRAGMA cache_size = {usual}"));
        let refolded = refolded?;
        restored?;
        Ok(Some(refolded))
    })
}

/// Page cache of the writing connection while the read models are rebuilt
/// from position 0, in KiB. Their writes append at the right edge of the
/// tables (see the schema), so a large cache buys a rebuild nothing
/// measurable (the `projections` bench prints the rebuild rate), while
/// filling the store's usual 32 MiB made the rebuild's peak memory
/// grow with the size of the read model it replaced, up to that cap.
const REBUILD_CACHE_KIB: i64 = 8 * 1024;

/// Drops the read models and folds the whole log into new ones, in
/// `transaction` (which holds the write lock: the head cannot move).
fn refold(store: &EventStore, transaction: &Connection) -> Result<u64> {
    reset(transaction)?;
    if store.head()?.position.0 < PIPELINED_CATCH_UP_EVENTS_MIN {
        return catch_up_in(transaction);
    }
    let (folded, _) = with_decoded_events(store, Position::ZERO, |events| {
        fold_decoded(transaction, events, Position::ZERO, None)
    })?;
    Ok(folded)
}

/// The checkpoint: the position of the last event the read models folded.
pub fn checkpoint_position(store: &EventStore) -> Result<Position> {
    let current = store.with_reader(checkpoint)?;
    Ok(current.map_or(Position::ZERO, |(position, _)| position))
}
