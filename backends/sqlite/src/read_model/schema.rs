//! The read-model tables: their schema, the checkpoint row that says how
//! far they are folded, and resetting them for a rebuild.

use rusqlite::{Connection, OptionalExtension};
use sandlog_core::Position;
use sandlog_projections::error::Result;

use super::values::stored_u64;
use crate::store::SqlResult;

/// The shape of the read-model tables. Bump it when they change: stores
/// with another version rebuild on open.
///
/// 2: `rm_sessions_by_age` orders by `(updated_at, session_id)`, and
/// `rm_totals` holds the active totals.
/// 3: sessions get an integer `session_key` in first-written order, and
/// `rm_files` is keyed by it (see the schema).
/// 5: sessions keep their task group, size limit and read-only
/// directories (`group_name`, `max_size`, `readonly`).
/// 6: sessions keep the node (host) their workspace lives on (`node`).
/// 7: blob references name their session's key too, and are indexed by
/// it (`rm_blob_refs_by_session`).
pub const READ_MODEL_VERSION: i64 = 7;

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
    readonly      TEXT,
    node          TEXT
);
CREATE INDEX IF NOT EXISTS rm_sessions_by_group
    ON rm_sessions (group_name) WHERE group_name IS NOT NULL;
-- Prune candidates: active, not legacy, oldest first; covering, so the
-- candidate scan never touches the table. session_id comes right after
-- updated_at so the index order is exactly the candidates' order
-- (updated_at, session_id) and the scan needs no sort step.
CREATE INDEX IF NOT EXISTS rm_sessions_by_age
    ON rm_sessions (status, legacy, updated_at, session_id, bytes, version, node);
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
-- `session_key` is the session's row (NULL for an event of a session the
-- fold has no row for: still found by hash, so `gc` keeps its blob). The
-- session index is by key, not by id: keys grow in first-written order, so
-- a rebuild appends to it instead of inserting every reference at a
-- random place of an index larger than the page cache.
CREATE TABLE IF NOT EXISTS rm_blob_refs (
    hash        BLOB    NOT NULL,
    session_id  TEXT    NOT NULL,
    session_key INTEGER,
    position    INTEGER NOT NULL,
    role        TEXT    NOT NULL,
    path        TEXT
);
CREATE INDEX IF NOT EXISTS rm_blob_refs_by_hash ON rm_blob_refs (hash, position);
CREATE INDEX IF NOT EXISTS rm_blob_refs_by_session ON rm_blob_refs (session_key, position);
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
pub(super) fn checkpoint(connection: &Connection) -> Result<Option<(Position, i64)>> {
    let present: usize = connection
        .prepare_cached(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?1, ?2, ?3, ?4, ?5, ?6)",
        ).sql()?
        .query_row(TABLES, |row| row.get(0)).sql()?;
    if present != TABLES.len() {
        return Ok(None);
    }
    let row: Option<(i64, i64)> = connection
        .prepare_cached("SELECT position, model_version FROM rm_checkpoint WHERE id = 1")
        .sql()?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .sql()?;
    row.map(|(position, version)| {
        Ok((
            Position(stored_u64(position, "rm_checkpoint.position")?),
            version,
        ))
    })
    .transpose()
}

pub(crate) fn reset(connection: &Connection) -> Result<()> {
    connection.execute_batch(DROP).sql()?;
    connection.execute_batch(SCHEMA).sql()?;
    connection
        .execute(
            "INSERT INTO rm_checkpoint (id, position, model_version) VALUES (1, 0, ?1)",
            [READ_MODEL_VERSION],
        )
        .sql()?;
    connection
        .execute(
            "INSERT INTO rm_totals (id, active_sessions, active_bytes) VALUES (1, 0, 0)",
            [],
        )
        .sql()?;
    Ok(())
}
