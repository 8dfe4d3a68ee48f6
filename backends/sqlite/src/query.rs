//! Queries over the SQL read models: sessions, files, prune candidates,
//! statistics. Their result types are `sandlog-projections`', re-exported
//! here so a caller names one module.

use std::collections::BTreeMap;

use rusqlite::{Connection, Row, params};
use sandlog_core::{PrunePolicy, SessionId, StreamVersion, Timestamp, WorkspacePath};
use sandlog_projections::error::{ProjectionError, Result};
use sandlog_projections::prune::{
    ActiveSession, HELD_SKIP_REASON, LEGACY_SKIP_REASON, PrunePlanner, SkippedSession,
};
pub use sandlog_projections::query::*;
use sandlog_projections::state::{FileEntry, SessionState, SessionStatus};

use super::read_model::{
    SELECT_SESSIONS, load_active_totals, load_files, load_session, load_stats, session_from_row,
};
use crate::EventStore;
use crate::read_model::stored_u64;
use crate::store::SqlResult;

/// A session's summary from a row of [`SELECT_SESSIONS`]: the one
/// decoding of a session's row, without its files.
fn summary_from_row(row: &Row<'_>) -> Result<SessionSummary> {
    let (_, session) = session_from_row(row)?;
    Ok(SessionSummary::from(&session))
}

/// One session, or `None`.
pub fn session(store: &EventStore, session_id: SessionId) -> Result<Option<SessionSummary>> {
    store.with_reader(|connection| session_in(connection, session_id))
}

fn session_in(connection: &Connection, session_id: SessionId) -> Result<Option<SessionSummary>> {
    let mut statement = connection
        .prepare_cached(&format!("{} WHERE session_id = ?1", *SELECT_SESSIONS))
        .sql()?;
    let mut rows = statement.query([session_id.to_string()]).sql()?;
    match rows.next().sql()? {
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
    store.with_reader(|connection| super::read_model::load_file(connection, session_id, path))
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
            "{} {condition} ORDER BY created_at, session_id",
            *SELECT_SESSIONS
        );
        let mut statement = connection.prepare_cached(&sql).sql()?;
        let status = status.map(SessionStatus::as_str);
        let mut rows = match (status, group) {
            (None, None) => statement.query([]).sql()?,
            (Some(status), None) => statement.query(params![status]).sql()?,
            (None, Some(group)) => statement
                .query(params![rusqlite::types::Null, group])
                .sql()?,
            (Some(status), Some(group)) => statement.query(params![status, group]).sql()?,
        };
        let mut sessions = Vec::new();
        while let Some(row) = rows.next().sql()? {
            sessions.push(summary_from_row(row)?);
        }
        Ok(sessions)
    })
}

/// Sessions (of any status) whose id starts with `prefix`: how many, and
/// the ids of the first `shown`, oldest created first. `prefix` must be
/// lower-case hex digits and hyphens, as ids are stored; the lookup is a
/// range on the `session_id` index (every id starting with `prefix` sorts
/// at or after it and before `prefix` + `g`, the character after `f`), so
/// it costs the matches, not the sessions.
pub fn sessions_by_prefix(
    store: &EventStore,
    prefix: &str,
    shown: usize,
) -> Result<(u64, Vec<SessionId>)> {
    let end = format!("{prefix}g");
    store.with_reader(|connection| {
        let count: i64 = connection
            .prepare_cached(
                "SELECT count(*) FROM rm_sessions WHERE session_id >= ?1 AND session_id < ?2",
            )
            .sql()?
            .query_row(params![prefix, end], |row| row.get(0))
            .sql()?;
        let count = u64::try_from(count)
            .map_err(|_| ProjectionError::Corrupt(format!("session count {count}")))?;
        let mut statement = connection
            .prepare_cached(
                "SELECT session_id FROM rm_sessions WHERE session_id >= ?1 AND session_id < ?2 \
             ORDER BY created_at, session_id LIMIT ?3",
            )
            .sql()?;
        let limit = i64::try_from(shown).unwrap_or(i64::MAX);
        let mut rows = statement.query(params![prefix, end, limit]).sql()?;
        let mut first = Vec::new();
        while let Some(row) = rows.next().sql()? {
            let text: String = row.get(0).sql()?;
            first.push(
                SessionId::parse(&text)
                    .map_err(|_| ProjectionError::Corrupt(format!("session id {text:?}")))?,
            );
        }
        Ok((count, first))
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

/// A session id column, parsed from the row's bytes in place (no `String`
/// per row: a prune may read 100,000).
pub(crate) fn session_id_column(row: &Row<'_>, index: usize) -> Result<SessionId> {
    let rusqlite::types::ValueRef::Text(bytes) = row.get_ref(index).sql()? else {
        return Err(ProjectionError::Corrupt(format!(
            "session id in column {index} is not text"
        )));
    };
    SessionId::parse_ascii(bytes).ok_or_else(|| {
        ProjectionError::Corrupt(format!("session id {:?}", String::from_utf8_lossy(bytes)))
    })
}

/// The held sessions that are active. Held sessions are few and the
/// partial index `rm_sessions_held` lists them; `+status` keeps SQLite
/// from walking every active session through `rm_sessions_by_age`
/// instead (its choice without statistics), which made every prune plan
/// read the whole table.
const HELD_ACTIVE_SESSIONS: &str =
    "SELECT session_id FROM rm_sessions WHERE held IS NOT NULL AND +status = 'active'";

/// Active sessions a prune may take, oldest first (`?1`: the node, or
/// NULL for all), from the covering index `rm_sessions_by_age` in its own
/// order: no table lookups, no sort.
const CANDIDATES: &str = "SELECT session_id, updated_at, bytes, version, NULL FROM rm_sessions \
     WHERE status = 'active' AND legacy = 0 AND updated_at IS NOT NULL \
     AND (?1 IS NULL OR node IS NULL OR node = ?1) ORDER BY updated_at, session_id";

/// [`CANDIDATES`] of one task group (`?2`), found through the group index
/// (a group is a task's few sessions) and sorted; `+status` and `+legacy`
/// keep SQLite from walking every active session through
/// `rm_sessions_by_age` instead.
const GROUP_CANDIDATES: &str = "SELECT session_id, updated_at, bytes, version, group_name FROM rm_sessions \
     WHERE group_name = ?2 AND +status = 'active' AND +legacy = 0 AND updated_at IS NOT NULL \
     AND (?1 IS NULL OR node IS NULL OR node = ?1) ORDER BY updated_at, session_id";

/// Active legacy sessions, which a prune skips and names.
const LEGACY_ACTIVE_SESSIONS: &str =
    "SELECT session_id FROM rm_sessions WHERE status = 'active' AND legacy = 1 ORDER BY session_id";

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
                    )
                    .sql()?
                    .query_row([node], |row| Ok((row.get(0)?, row.get(1)?)))
                    .sql()
                    .map_err(ProjectionError::from)
                    .and_then(active_share)?,
                // A group's totals are not kept; a group is a task's few
                // sessions, counted through the group index.
                (Some(group), _) => connection
                    .prepare_cached(
                        "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM rm_sessions \
                         WHERE group_name = ?1 AND status = 'active' \
                         AND (?2 IS NULL OR node IS NULL OR node = ?2)",
                    )
                    .sql()?
                    .query_row(params![group, node], |row| Ok((row.get(0)?, row.get(1)?)))
                    .sql()
                    .map_err(ProjectionError::from)
                    .and_then(active_share)?,
            }
        } else {
            (0, 0)
        };
        let mut planner = PrunePlanner::new(policy.clone(), now, active_sessions, active_bytes);
        let mut skipped = Vec::new();
        let held: std::collections::BTreeSet<SessionId> = {
            let mut statement = connection.prepare_cached(HELD_ACTIVE_SESSIONS).sql()?;
            let mut rows = statement.query([]).sql()?;
            let mut held = std::collections::BTreeSet::new();
            while let Some(row) = rows.next().sql()? {
                held.insert(session_id_column(row, 0)?);
            }
            held
        };
        {
            let mut statement = connection
                .prepare_cached(match group {
                    None => CANDIDATES,
                    Some(_) => GROUP_CANDIDATES,
                })
                .sql()?;
            let mut rows = match group {
                None => statement.query(params![node]).sql()?,
                Some(group) => statement.query(params![node, group]).sql()?,
            };
            while let Some(row) = rows.next().sql()? {
                let session_id = session_id_column(row, 0)?;
                let session = ActiveSession {
                    session_id,
                    updated_at: Timestamp::from_unix_micros(row.get(1).sql()?),
                    bytes: stored_u64(row.get(2).sql()?, "rm_sessions.bytes")?,
                    version: StreamVersion(stored_u64(row.get(3).sql()?, "rm_sessions.version")?),
                };
                if held.contains(&session_id) {
                    skipped.push(SkippedSession {
                        session_id,
                        reason: HELD_SKIP_REASON.to_owned(),
                    });
                    continue;
                }
                if !planner.offer(session) {
                    break;
                }
            }
        }
        // Legacy sessions belong to no group: a group's run skips none.
        if group.is_some() {
            return Ok(PrunePlan {
                candidates: planner.finish(),
                skipped,
            });
        }
        let mut statement = connection.prepare_cached(LEGACY_ACTIVE_SESSIONS).sql()?;
        let mut rows = statement.query(params![]).sql()?;
        while let Some(row) = rows.next().sql()? {
            let session_id = session_id_column(row, 0)?;
            skipped.push(SkippedSession {
                session_id,
                reason: LEGACY_SKIP_REASON.to_owned(),
            });
        }
        Ok(PrunePlan {
            candidates: planner.finish(),
            skipped,
        })
    })
}

/// `(sessions, their bytes)` as counted by SQL, checked.
fn active_share((sessions, bytes): (i64, i64)) -> Result<(u64, u64)> {
    Ok((
        stored_u64(sessions, "count of active rm_sessions")?,
        stored_u64(bytes, "sum of active rm_sessions.bytes")?,
    ))
}

/// Counts and sizes.
pub fn stats(store: &EventStore) -> Result<StoreStats> {
    store.with_reader(|connection| {
        let mut sessions = BTreeMap::new();
        let mut statement = connection.prepare_cached("SELECT status, count(*) FROM rm_sessions GROUP BY status").sql()?;
        let mut rows = statement.query([]).sql()?;
        while let Some(row) = rows.next().sql()? {
            let count = stored_u64(row.get(1).sql()?, "count of rm_sessions")?;
            sessions.insert(row.get::<_, String>(0).sql()?, count);
        }
        drop(rows);
        let (legacy, bytes, files, executions): (i64, i64, i64, i64) = connection
            .prepare_cached(
                "SELECT coalesce(sum(legacy AND status = 'active'), 0), \
                 coalesce(sum(CASE WHEN status IN ('active','pruning','deleting') THEN bytes END), 0), \
                 coalesce(sum(CASE WHEN status IN ('active','pruning','deleting') THEN file_count END), 0), \
                 coalesce(sum(exec_count), 0) FROM rm_sessions",
            ).sql()?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))).sql()?;
        Ok(StoreStats {
            sessions,
            legacy_sessions: stored_u64(legacy, "sum of rm_sessions.legacy")?,
            workspace_bytes: stored_u64(bytes, "sum of rm_sessions.bytes")?,
            files: stored_u64(files, "sum of rm_sessions.file_count")?,
            executions: stored_u64(executions, "sum of rm_sessions.exec_count")?,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// How SQLite runs `sql` against fresh read-model tables in a file
    /// (an in-memory database is planned differently): the detail of
    /// every step of its plan.
    fn plan(sql: &str) -> Result<Vec<String>, Box<dyn std::error::Error>> {
        let directory = tempfile::tempdir()?;
        let connection = rusqlite::Connection::open(directory.path().join("plan.db"))?;
        crate::read_model::reset_tables(&connection)?;
        let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
        let unbound = vec![rusqlite::types::Null; statement.parameter_count()];
        let steps = statement
            .query_map(rusqlite::params_from_iter(unbound), |row| {
                row.get::<_, String>(3)
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(steps)
    }

    /// Goal: planning a prune reads the held sessions, the candidates and
    /// the legacy sessions through their indexes, never every row of
    /// `rm_sessions`. Method: the query plan of each statement on the real
    /// schema. (The held sessions were once read by walking every active
    /// session, which alone took longer than the whole plan may.)
    #[test]
    fn prune_planning_reads_only_through_its_indexes() -> Result<(), Box<dyn std::error::Error>> {
        let held = plan(HELD_ACTIVE_SESSIONS)?;
        assert_eq!(
            held,
            ["SCAN rm_sessions USING INDEX rm_sessions_held"],
            "{held:?}"
        );
        let candidates = plan(CANDIDATES)?;
        assert_eq!(candidates.len(), 1, "{candidates:?}");
        assert!(
            candidates[0].starts_with("SEARCH rm_sessions USING COVERING INDEX rm_sessions_by_age"),
            "{candidates:?}"
        );
        let group = plan(GROUP_CANDIDATES)?;
        assert!(
            group[0].starts_with("SEARCH rm_sessions USING INDEX rm_sessions_by_group"),
            "{group:?}"
        );
        let legacy = plan(LEGACY_ACTIVE_SESSIONS)?;
        assert!(
            legacy[0].starts_with("SEARCH rm_sessions USING COVERING INDEX rm_sessions_by_age"),
            "{legacy:?}"
        );
        Ok(())
    }
}
