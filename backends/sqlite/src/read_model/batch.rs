//! A [`Batch`]: a partial [`State`] of the sessions a run of events
//! touches, folded with the one copy of the rules and written back.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use rusqlite::{Connection, params};
use sandlog_core::event::Event;
use sandlog_core::{CoreError, Envelope, Position, SessionId, StreamVersion, WorkspacePath};
use sandlog_projections::error::Result;
use sandlog_projections::state::{
    EventContext, SessionState, SessionStatus, State, apply_in_context,
};

use super::rows::{load_file_by_key, load_files_by_key, load_keyed_session, load_stats};
use super::session_row::{INSERT_SESSION, SessionValues, UPDATE_SESSION};
use super::values::{corrupt, to_i64};
use crate::store::SqlResult;

/// What one session adds to `rm_totals`: one session and its bytes while
/// it is active, nothing otherwise.
fn active_share(session: Option<&SessionState>) -> (i64, i64) {
    match session {
        Some(session) if session.status == SessionStatus::Active => (1, to_i64(session.bytes)),
        _ => (0, 0),
    }
}

/// What a [`Batch`] knows of a session's row from before the batch.
#[derive(Debug, Clone)]
struct Loaded {
    /// The row's `session_key`; `None` until the flush inserts the row.
    pub(super) key: Option<i64>,
    /// Its share of `rm_totals` as loaded.
    pub(super) share: (i64, i64),
    /// Which of the session's files the partial state holds.
    pub(super) files: KnownFiles,
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
pub(super) struct Batch<'c> {
    connection: &'c Connection,
    pub(super) state: State,
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
    pub(super) hash: sandlog_core::Hash,
    pub(super) session_id: SessionId,
    pub(super) position: Position,
    pub(super) role: &'static str,
    pub(super) path: Option<WorkspacePath>,
}

/// The blobs an event names whose bytes it says were stored, as rows.
fn blob_refs(event: &Event, session_id: SessionId, position: Position, refs: &mut Vec<BlobRef>) {
    for (role, hash, path) in sandlog_projections::evidence::named_blobs(event) {
        refs.push(BlobRef {
            hash,
            session_id,
            position,
            role,
            path,
        });
    }
}

impl<'c> Batch<'c> {
    pub(super) fn new(connection: &'c Connection, position: Position) -> Result<Self> {
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

    pub(super) fn apply(&mut self, envelope: &Envelope) -> Result<()> {
        let decoded = envelope.event();
        self.apply_decoded(&EventContext::from(envelope), as_refs(&decoded))
    }

    /// Folds one event, given the envelope fields the fold reads and the
    /// payload's decoding (unknown kinds and undecodable payloads are
    /// skipped, as in [`sandlog_projections::state::apply`]).
    pub(super) fn apply_decoded(
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
    pub(super) fn flush(&mut self) -> Result<()> {
        let connection = self.connection;
        // Sessions whose row this flush inserts: all their files are new.
        let mut new_sessions = Vec::new();
        {
            let mut insert_session = connection.prepare_cached(&INSERT_SESSION).sql()?;
            let mut update_session = connection.prepare_cached(&UPDATE_SESSION).sql()?;
            for session_id in &self.dirty_sessions {
                let Some(session) = self.state.sessions.get(session_id) else {
                    continue;
                };
                let values = SessionValues::of(session)?;
                let loaded = self.loaded.get_mut(session_id).ok_or_else(|| {
                    corrupt(format!("session {session_id} changed without being loaded"))
                })?;
                match loaded.key {
                    Some(key) => {
                        update_session.execute(values.params(&key)).sql()?;
                    }
                    None => {
                        new_sessions.push(*session_id);
                        insert_session
                            .execute(values.params(&session_id.to_string()))
                            .sql()?;
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
            ).sql()?;
            let mut delete_file = connection
                .prepare_cached("DELETE FROM rm_files WHERE session_key = ?1 AND path = ?2")
                .sql()?;
            for session_id in &new_sessions {
                let (Some(session), Some(key)) = (
                    self.state.sessions.get(session_id),
                    self.loaded.get(session_id).and_then(|loaded| loaded.key),
                ) else {
                    continue;
                };
                for (path, file) in &session.files {
                    upsert_file
                        .execute(params![
                            key,
                            path.as_str(),
                            to_i64(file.size),
                            file.blake3.0.as_slice(),
                            file.updated_at.unix_micros(),
                        ])
                        .sql()?;
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
                    Some(file) => upsert_file
                        .execute(params![
                            key,
                            path.as_str(),
                            to_i64(file.size),
                            file.blake3.0.as_slice(),
                            file.updated_at.unix_micros(),
                        ])
                        .sql()?,
                    None => delete_file.execute(params![key, path.as_str()]).sql()?,
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
                )
                .sql()?
                .execute([sessions_delta, bytes_delta])
                .sql()?;
        }
        if self.stats_dirty {
            let json = serde_json::to_string(&self.state.stats)
                .map_err(|error| corrupt(error.to_string()))?;
            connection
                .prepare_cached("INSERT INTO rm_stats (id, json) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET json = excluded.json").sql()?
                .execute([json]).sql()?;
        }
        if !self.refs.is_empty() {
            let mut insert_ref = connection.prepare_cached(
                "INSERT INTO rm_blob_refs (hash, session_id, session_key, position, role, path) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            ).sql()?;
            for blob in self.refs.drain(..) {
                // Every referring session was loaded by its event, and a
                // row written above if the fold knows it.
                let key = self
                    .loaded
                    .get(&blob.session_id)
                    .and_then(|loaded| loaded.key);
                insert_ref
                    .execute(params![
                        blob.hash.0.as_slice(),
                        blob.session_id.to_string(),
                        key,
                        to_i64(blob.position.0),
                        blob.role,
                        blob.path.as_ref().map(WorkspacePath::as_str),
                    ])
                    .sql()?;
            }
        }
        connection
            .prepare_cached("UPDATE rm_checkpoint SET position = ?1 WHERE id = 1")
            .sql()?
            .execute([to_i64(self.state.position.0)])
            .sql()?;
        self.state.sessions.clear();
        self.loaded.clear();
        self.dirty_sessions.clear();
        self.dirty_files.clear();
        self.stats_dirty = false;
        Ok(())
    }
}

/// A decoding result by reference, as [`Batch::apply_decoded`] takes it.
pub(super) fn as_refs(
    decoded: &std::result::Result<Option<Event>, CoreError>,
) -> std::result::Result<Option<&Event>, &CoreError> {
    decoded.as_ref().map(Option::as_ref)
}
