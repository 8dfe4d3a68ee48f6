//! Queries over the SQL read models: sessions, metadata in the seed's
//! shape, files (glob, tree), prune candidates, statistics.

use std::collections::BTreeMap;

use rusqlite::{Connection, Row, params};
use sandlog_core::event::{Outcome, ReadonlyDir};
use sandlog_core::{Hash, PrunePolicy, SessionId, StreamVersion, Timestamp, WorkspacePath};
use sandlog_eventstore::EventStore;
use serde::Serialize;

use crate::error::{ProjectionError, Result};
use crate::prune::{
    ActiveSession, HELD_SKIP_REASON, LEGACY_SKIP_REASON, PruneCandidate, PrunePlanner,
    SkippedSession,
};
use crate::read_model::{load_active_totals, load_files, load_session, load_stats};
use crate::state::{CleanupStats, FileEntry, SessionState, SessionStatus};

/// A session without its file list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// Id.
    pub session_id: SessionId,
    /// Status.
    pub status: SessionStatus,
    /// Created (none for legacy).
    pub created_at: Option<Timestamp>,
    /// Last activity (none for legacy).
    pub updated_at: Option<Timestamp>,
    /// Executions run.
    pub exec_count: u64,
    /// The last execution's outcome.
    pub last_outcome: Option<Outcome>,
    /// Sum of file sizes.
    pub bytes: u64,
    /// Number of files.
    pub file_count: u64,
    /// Adopted without valid metadata.
    pub legacy: bool,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Stream version.
    #[serde(skip)]
    pub version: StreamVersion,
    /// The reason of a legal hold in force (never pruned, deleted or
    /// erased while held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// The task group given at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The size limit given at creation, bytes (else the root's default
    /// applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u64>,
    /// Host directories its executions see read-only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub readonly: Vec<ReadonlyDir>,
    /// The node whose disk holds its workspace (none: every node's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl From<&SessionState> for SessionSummary {
    fn from(session: &SessionState) -> Self {
        SessionSummary {
            session_id: session.session_id,
            status: session.status,
            created_at: session.created_at,
            updated_at: session.updated_at,
            exec_count: session.exec_count,
            last_outcome: session.last_outcome,
            bytes: session.bytes,
            file_count: session.file_count,
            legacy: session.legacy,
            labels: session.labels.clone(),
            version: session.version,
            held: session.held.clone(),
            group: session.group.clone(),
            max_size: session.max_size,
            readonly: session.readonly.clone(),
            node: session.node.clone(),
        }
    }
}

/// The seed systems' `.metadata.json` shape (M1), for tooling that reads
/// it: `{session_id, created_at, updated_at, version: 1}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeedMetadata {
    /// Id.
    pub session_id: SessionId,
    /// Created (null for legacy).
    pub created_at: Option<Timestamp>,
    /// Last activity (null for legacy).
    pub updated_at: Option<Timestamp>,
    /// Always 1.
    pub version: u32,
}

/// The seed metadata schema version.
pub const SEED_METADATA_VERSION: u32 = 1;

impl SessionSummary {
    /// The seed-format metadata.
    pub fn seed_metadata(&self) -> SeedMetadata {
        SeedMetadata {
            session_id: self.session_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
            version: SEED_METADATA_VERSION,
        }
    }
}

/// One file, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileView {
    /// Path.
    pub path: WorkspacePath,
    /// Size, bytes.
    pub size: u64,
    /// blake3.
    pub blake3: Hash,
    /// Last written.
    pub updated_at: Timestamp,
}

/// A nested view of files: directories map names to nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TreeNode {
    /// A file.
    File {
        /// Size, bytes.
        size: u64,
        /// blake3.
        blake3: Hash,
    },
    /// A directory.
    Dir(BTreeMap<String, TreeNode>),
}

/// Builds the nested tree of `files`.
pub fn file_tree(files: &[FileView]) -> BTreeMap<String, TreeNode> {
    let mut root = BTreeMap::new();
    for file in files {
        let components: Vec<&str> = file.path.components().collect();
        insert_into_tree(&mut root, &components, file);
    }
    root
}

fn insert_into_tree(level: &mut BTreeMap<String, TreeNode>, components: &[&str], file: &FileView) {
    match components {
        [] => {}
        [name] => {
            level.entry((*name).to_owned()).or_insert(TreeNode::File {
                size: file.size,
                blake3: file.blake3,
            });
        }
        [parent, rest @ ..] => {
            let node = level
                .entry((*parent).to_owned())
                .or_insert_with(|| TreeNode::Dir(BTreeMap::new()));
            // A file and a directory of the same name cannot both exist on
            // disk; if the log says so, the directory wins the view.
            if let TreeNode::File { .. } = node {
                *node = TreeNode::Dir(BTreeMap::new());
            }
            if let TreeNode::Dir(children) = node {
                insert_into_tree(children, rest, file);
            }
        }
    }
}

const SUMMARY_COLUMNS: &str = "session_id, status, created_at, updated_at, exec_count, last_outcome, bytes, file_count, legacy, labels, version, held, group_name, max_size, readonly, node";

fn summary_from_row(row: &Row<'_>) -> Result<SessionSummary> {
    let corrupt = |what: String| ProjectionError::Corrupt(what);
    let id_text: String = row.get(0)?;
    let session_id =
        SessionId::parse(&id_text).map_err(|_| corrupt(format!("session id {id_text:?}")))?;
    let status_text: String = row.get(1)?;
    let status = SessionStatus::parse(&status_text)
        .ok_or_else(|| corrupt(format!("status {status_text:?}")))?;
    let last_outcome = match row.get::<_, Option<String>>(5)? {
        None => None,
        Some(text) => Some(
            serde_json::from_value(serde_json::Value::String(text.clone()))
                .map_err(|_| corrupt(format!("outcome {text:?}")))?,
        ),
    };
    let labels_text: String = row.get(9)?;
    Ok(SessionSummary {
        session_id,
        status,
        created_at: row
            .get::<_, Option<i64>>(2)?
            .map(Timestamp::from_unix_micros),
        updated_at: row
            .get::<_, Option<i64>>(3)?
            .map(Timestamp::from_unix_micros),
        exec_count: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
        last_outcome,
        bytes: u64::try_from(row.get::<_, i64>(6)?).unwrap_or(0),
        file_count: u64::try_from(row.get::<_, i64>(7)?).unwrap_or(0),
        legacy: row.get(8)?,
        labels: serde_json::from_str(&labels_text)
            .map_err(|error| corrupt(format!("labels: {error}")))?,
        version: StreamVersion(u64::try_from(row.get::<_, i64>(10)?).unwrap_or(0)),
        held: row.get(11)?,
        group: row.get(12)?,
        max_size: row
            .get::<_, Option<i64>>(13)?
            .map(|size| u64::try_from(size).map_err(|_| corrupt(format!("max_size {size}"))))
            .transpose()?,
        readonly: crate::read_model::decode_readonly(row.get::<_, Option<String>>(14)?.as_deref())
            .map_err(|error| corrupt(format!("readonly: {error}")))?,
        node: row.get(15)?,
    })
}

/// One session, or `None`.
pub fn session(store: &EventStore, session_id: SessionId) -> Result<Option<SessionSummary>> {
    store.with_reader(|connection| session_in(connection, session_id))
}

fn session_in(connection: &Connection, session_id: SessionId) -> Result<Option<SessionSummary>> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {SUMMARY_COLUMNS} FROM rm_sessions WHERE session_id = ?1"
    ))?;
    let mut rows = statement.query([session_id.to_string()])?;
    match rows.next()? {
        Some(row) => Ok(Some(summary_from_row(row)?)),
        None => Ok(None),
    }
}

/// One session with its files, or `None`.
pub fn session_with_files(
    store: &EventStore,
    session_id: SessionId,
) -> Result<Option<SessionState>> {
    store.with_reader(|connection| load_session(connection, session_id))
}

/// One file of a session as the log says it is, or `None`: a lookup by
/// the read model's key, whatever the number of files the session has.
pub fn session_file(
    store: &EventStore,
    session_id: SessionId,
    path: &WorkspacePath,
) -> Result<Option<FileEntry>> {
    store.with_reader(|connection| crate::read_model::load_file(connection, session_id, path))
}

/// Sessions, optionally of one status, oldest created first (legacy, which
/// have no creation time, first).
pub fn sessions(store: &EventStore, status: Option<SessionStatus>) -> Result<Vec<SessionSummary>> {
    sessions_where(store, status, None)
}

/// Sessions, optionally of one status and of one task group, oldest
/// first.
pub fn sessions_where(
    store: &EventStore,
    status: Option<SessionStatus>,
    group: Option<&str>,
) -> Result<Vec<SessionSummary>> {
    store.with_reader(|connection| {
        // Only the conditions given, so SQLite can use the status and
        // group indexes.
        let condition = match (status, group) {
            (None, None) => "",
            (Some(_), None) => "WHERE status = ?1",
            (None, Some(_)) => "WHERE group_name = ?2",
            (Some(_), Some(_)) => "WHERE status = ?1 AND group_name = ?2",
        };
        let sql = format!(
            "SELECT {SUMMARY_COLUMNS} FROM rm_sessions {condition} ORDER BY created_at, session_id"
        );
        let mut statement = connection.prepare_cached(&sql)?;
        let status = status.map(SessionStatus::as_str);
        let mut rows = match (status, group) {
            (None, None) => statement.query([])?,
            (Some(status), None) => statement.query(params![status])?,
            (None, Some(group)) => statement.query(params![rusqlite::types::Null, group])?,
            (Some(status), Some(group)) => statement.query(params![status, group])?,
        };
        let mut sessions = Vec::new();
        while let Some(row) = rows.next()? {
            sessions.push(summary_from_row(row)?);
        }
        Ok(sessions)
    })
}

/// A session's files, optionally matching a glob `pattern` (`*` does not
/// cross `/`; `**` does), sorted by path.
pub fn files(
    store: &EventStore,
    session_id: SessionId,
    pattern: Option<&str>,
) -> Result<Vec<FileView>> {
    let matcher = match pattern {
        None => None,
        Some(pattern) => Some(
            globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|error| ProjectionError::InvalidPattern {
                    pattern: pattern.to_owned(),
                    reason: error.to_string(),
                })?
                .compile_matcher(),
        ),
    };
    let files = store.with_reader(|connection| load_files(connection, session_id))?;
    Ok(files
        .into_iter()
        .filter(|(path, _)| {
            matcher
                .as_ref()
                .is_none_or(|matcher| matcher.is_match(path.as_str()))
        })
        .map(
            |(
                path,
                FileEntry {
                    size,
                    blake3,
                    updated_at,
                },
            )| FileView {
                path,
                size,
                blake3,
                updated_at,
            },
        )
        .collect())
}

/// What a prune run would do: candidates oldest first, and the sessions it
/// skips on purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrunePlan {
    /// Would be deleted, oldest first.
    pub candidates: Vec<PruneCandidate>,
    /// Left alone, with reasons (legacy sessions).
    pub skipped: Vec<SkippedSession>,
}

/// A session id column, parsed from the row's bytes in place (no `String`
/// per row: a prune may read 100,000).
pub(crate) fn session_id_column(row: &Row<'_>, index: usize) -> Result<SessionId> {
    let rusqlite::types::ValueRef::Text(bytes) = row.get_ref(index)? else {
        return Err(ProjectionError::Corrupt(format!(
            "session id in column {index} is not text"
        )));
    };
    SessionId::parse_ascii(bytes).ok_or_else(|| {
        ProjectionError::Corrupt(format!("session id {:?}", String::from_utf8_lossy(bytes)))
    })
}

/// Prune candidates for `policy` at `now` (P1, P6). Walks the covering
/// index oldest first and stops as soon as the planner is done.
pub fn prune_candidates(
    store: &EventStore,
    policy: &PrunePolicy,
    now: Timestamp,
) -> Result<PrunePlan> {
    store.with_reader(|connection| {
        // The totals are kept by the read model (counting 100,000 rows took
        // most of a retention query's time).
        let group = policy.group.as_deref();
        let node = policy.node.as_deref();
        let (active_sessions, active_bytes) = if PrunePlanner::needs_totals(policy) {
            match (group, node) {
                (None, None) => load_active_totals(connection)?,
                // A node's totals are not kept: counted over the age index.
                (None, Some(node)) => connection
                    .prepare_cached(
                        "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM rm_sessions \
                         WHERE status = 'active' AND (node IS NULL OR node = ?1)",
                    )?
                    .query_row([node], |row| {
                        Ok((
                            u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                            u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                        ))
                    })?,
                // A group's totals are not kept; a group is a task's few
                // sessions, counted through the group index.
                (Some(group), _) => connection
                    .prepare_cached(
                        "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM rm_sessions \
                         WHERE group_name = ?1 AND status = 'active' \
                         AND (?2 IS NULL OR node IS NULL OR node = ?2)",
                    )?
                    .query_row(params![group, node], |row| {
                        Ok((
                            u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                            u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                        ))
                    })?,
            }
        } else {
            (0, 0)
        };
        let mut planner = PrunePlanner::new(policy.clone(), now, active_sessions, active_bytes);
        let mut skipped = Vec::new();
        // Held sessions are few; the partial index lists them.
        let held: std::collections::BTreeSet<SessionId> = {
            let mut statement = connection.prepare_cached(
                "SELECT session_id FROM rm_sessions WHERE held IS NOT NULL AND status = 'active'",
            )?;
            let mut rows = statement.query([])?;
            let mut held = std::collections::BTreeSet::new();
            while let Some(row) = rows.next()? {
                held.insert(session_id_column(row, 0)?);
            }
            held
        };
        {
            let mut statement = connection.prepare_cached(match group {
                None => {
                    "SELECT session_id, updated_at, bytes, version, NULL FROM rm_sessions \
                     WHERE status = 'active' AND legacy = 0 AND updated_at IS NOT NULL \
                     AND (?1 IS NULL OR node IS NULL OR node = ?1) ORDER BY updated_at, session_id"
                }
                Some(_) => {
                    "SELECT session_id, updated_at, bytes, version, group_name FROM rm_sessions \
                     WHERE group_name = ?2 AND status = 'active' AND legacy = 0 AND updated_at IS NOT NULL \
                     AND (?1 IS NULL OR node IS NULL OR node = ?1) ORDER BY updated_at, session_id"
                }
            })?;
            let mut rows = match group {
                None => statement.query(params![node])?,
                Some(group) => statement.query(params![node, group])?,
            };
            while let Some(row) = rows.next()? {
                let session_id = session_id_column(row, 0)?;
                let session = ActiveSession {
                    session_id,
                    updated_at: Timestamp::from_unix_micros(row.get(1)?),
                    bytes: u64::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
                    version: StreamVersion(u64::try_from(row.get::<_, i64>(3)?).unwrap_or(0)),
                };
                if held.contains(&session_id) {
                    skipped.push(SkippedSession { session_id, reason: HELD_SKIP_REASON.to_owned() });
                    continue;
                }
                if !planner.offer(session) {
                    break;
                }
            }
        }
        // Legacy sessions belong to no group: a group's run skips none.
        if group.is_some() {
            return Ok(PrunePlan { candidates: planner.finish(), skipped });
        }
        let mut statement = connection
            .prepare_cached("SELECT session_id FROM rm_sessions WHERE status = 'active' AND legacy = 1 ORDER BY session_id")?;
        let mut rows = statement.query(params![])?;
        while let Some(row) = rows.next()? {
            let session_id = session_id_column(row, 0)?;
            skipped.push(SkippedSession { session_id, reason: LEGACY_SKIP_REASON.to_owned() });
        }
        Ok(PrunePlan { candidates: planner.finish(), skipped })
    })
}

/// Counts and sizes for `sandlog stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Sessions by status.
    pub sessions: BTreeMap<String, u64>,
    /// Legacy sessions (active).
    pub legacy_sessions: u64,
    /// Bytes in sessions that have a workspace.
    pub workspace_bytes: u64,
    /// Files in sessions that have a workspace.
    pub files: u64,
    /// Executions run, all sessions.
    pub executions: u64,
    /// Cleanup statistics (C3).
    pub cleanup: CleanupStats,
}

/// Counts and sizes.
pub fn stats(store: &EventStore) -> Result<StoreStats> {
    store.with_reader(|connection| {
        let mut sessions = BTreeMap::new();
        let mut statement = connection.prepare_cached("SELECT status, count(*) FROM rm_sessions GROUP BY status")?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            sessions.insert(row.get::<_, String>(0)?, u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0));
        }
        drop(rows);
        let (legacy, bytes, files, executions): (i64, i64, i64, i64) = connection
            .prepare_cached(
                "SELECT coalesce(sum(legacy AND status = 'active'), 0), \
                 coalesce(sum(CASE WHEN status IN ('active','pruning','deleting') THEN bytes END), 0), \
                 coalesce(sum(CASE WHEN status IN ('active','pruning','deleting') THEN file_count END), 0), \
                 coalesce(sum(exec_count), 0) FROM rm_sessions",
            )?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?;
        Ok(StoreStats {
            sessions,
            legacy_sessions: u64::try_from(legacy).unwrap_or(0),
            workspace_bytes: u64::try_from(bytes).unwrap_or(0),
            files: u64::try_from(files).unwrap_or(0),
            executions: u64::try_from(executions).unwrap_or(0),
            cleanup: load_stats(connection)?,
        })
    })
}

/// Every session with its files, from the read models (for comparing with
/// a fold; memory grows with the number of sessions).
pub fn all_sessions_with_files(store: &EventStore) -> Result<BTreeMap<SessionId, SessionState>> {
    let ids: Vec<SessionId> = sessions(store, None)?
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    let mut all = BTreeMap::new();
    for id in ids {
        if let Some(session) = session_with_files(store, id)? {
            all.insert(id, session);
        }
    }
    Ok(all)
}
