//! Queries over the SQL read models: sessions, files, prune candidates,
//! statistics.

use std::collections::BTreeMap;

use rusqlite::{Connection, Row, params};
use sandlog_core::{PrunePolicy, SessionId, StreamVersion, Timestamp, WorkspacePath};
use sandlog_eventstore::EventStore;

use super::read_model::{load_active_totals, load_files, load_session, load_stats};
use crate::error::{ProjectionError, Result};
use crate::prune::{
    ActiveSession, HELD_SKIP_REASON, LEGACY_SKIP_REASON, PrunePlanner, SkippedSession,
};
use crate::query::{FileView, PrunePlan, SessionSummary, StoreStats};
use crate::state::{FileEntry, SessionState, SessionStatus};

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
        readonly: super::read_model::decode_readonly(row.get::<_, Option<String>>(14)?.as_deref())
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
            )?
            .query_row(params![prefix, end], |row| row.get(0))?;
        let count = u64::try_from(count)
            .map_err(|_| ProjectionError::Corrupt(format!("session count {count}")))?;
        let mut statement = connection.prepare_cached(
            "SELECT session_id FROM rm_sessions WHERE session_id >= ?1 AND session_id < ?2 \
             ORDER BY created_at, session_id LIMIT ?3",
        )?;
        let limit = i64::try_from(shown).unwrap_or(i64::MAX);
        let mut rows = statement.query(params![prefix, end, limit])?;
        let mut first = Vec::new();
        while let Some(row) = rows.next()? {
            let text: String = row.get(0)?;
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
    let rusqlite::types::ValueRef::Text(bytes) = row.get_ref(index)? else {
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
        let held: std::collections::BTreeSet<SessionId> = {
            let mut statement = connection.prepare_cached(HELD_ACTIVE_SESSIONS)?;
            let mut rows = statement.query([])?;
            let mut held = std::collections::BTreeSet::new();
            while let Some(row) = rows.next()? {
                held.insert(session_id_column(row, 0)?);
            }
            held
        };
        {
            let mut statement = connection.prepare_cached(match group {
                None => CANDIDATES,
                Some(_) => GROUP_CANDIDATES,
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
        let mut statement = connection.prepare_cached(LEGACY_ACTIVE_SESSIONS)?;
        let mut rows = statement.query(params![])?;
        while let Some(row) = rows.next()? {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// How SQLite runs `sql` against fresh read-model tables in a file
    /// (an in-memory database is planned differently): the detail of
    /// every step of its plan.
    fn plan(sql: &str) -> Result<Vec<String>, Box<dyn std::error::Error>> {
        let directory = tempfile::tempdir()?;
        let connection = rusqlite::Connection::open(directory.path().join("plan.db"))?;
        crate::sqlite::read_model::reset_tables(&connection)?;
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
