//! Event builders, a store with a manual clock, and a generator of valid
//! random histories: what the projections tests and benchmarks share.
//!
//! Events are built as typed [`Event`]s with fixed, recognisable hashes so a
//! test can state exact expected values. [`ProjectionStore`] is a real
//! [`EventStore`] in a temporary directory whose clock only moves when the
//! test says so. [`history`] is a proptest strategy of random steps that
//! [`plan_history`] turns into appends that respect every session's
//! lifecycle (created or adopted first, nothing after pruned or deleted).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sandlog_core::event::{
    Drift, Event, FileDeleted, FileWritten, MetadataStatus, Outcome, PruneRunCompleted,
    PruneRunStarted, ReconcileRunCompleted, RecordedLimits, SessionAdopted, SessionCreated,
    SessionDeleteRequested, SessionDeleted, SessionExecuted, SessionPruneFailed,
    SessionPruneRequested, SessionPruned, WorkspaceDriftDetected, WorkspaceOrphanPurged,
    WorkspaceOrphanQuarantined, WrittenBy,
};
use sandlog_core::{
    Envelope, EventId, Hash, ManualClock, NewEvent, PrunePolicy, SessionId, StreamId, Timestamp,
    WorkspacePath,
};
use sandlog_eventstore::{ExpectedVersion, LogFilter};
use sandlog_projections::{SessionStatus, State, StoreStats};
use sandlog_sqlite::CatchUpReport;
use sandlog_sqlite::{Durability, EventStore, OpenOptions};
use tempfile::TempDir;
use uuid::Uuid;

/// What the projections tests return: any error, with `?`.
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The instant every [`ProjectionStore`] clock starts at:
/// `2025-11-22T10:15:30.123456Z`, the seed metadata's example.
pub const T0: Timestamp = Timestamp::from_unix_micros(1_763_806_530_123_456);

/// The actor stamped on test events.
pub const TEST_ACTOR: &str = "test";

/// An hour.
pub const HOUR: Duration = Duration::from_secs(3600);

/// A day.
pub const DAY: Duration = Duration::from_secs(24 * 3600);

/// A recognisable hash: blake3 of `label`.
pub fn hash_of(label: &str) -> Hash {
    Hash::of(label.as_bytes())
}

/// A workspace path known to be valid.
///
/// Errors if `text` is not a valid workspace path (a bug in the test).
pub fn path(text: &str) -> TestResult<WorkspacePath> {
    Ok(WorkspacePath::parse(text)?)
}

/// `session.created` without labels.
pub fn created(session_id: SessionId) -> Event {
    created_with_labels(session_id, &[])
}

/// `session.created` with labels.
pub fn created_with_labels(session_id: SessionId, labels: &[(&str, &str)]) -> Event {
    Event::SessionCreated(SessionCreated::new(
        session_id,
        labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
    ))
}

/// `session.adopted` with the given metadata status and timestamps.
pub fn adopted(
    session_id: SessionId,
    metadata: MetadataStatus,
    created_at: Option<Timestamp>,
    updated_at: Option<Timestamp>,
) -> Event {
    Event::SessionAdopted(SessionAdopted {
        session_id,
        created_at,
        updated_at,
        metadata,
        source: "/legacy/workspaces".to_owned(),
        evidence: (metadata == MetadataStatus::Corrupted)
            .then(|| format!("evidence/{session_id}.metadata.json")),
        refused: Vec::new(),
        copied_links: Vec::new(),
        unrecorded: 0,
    })
}

/// `session.executed` with `outcome`; the other fields are fixed.
pub fn executed(outcome: Outcome) -> Event {
    Event::SessionExecuted(SessionExecuted {
        runtime: "python".to_owned(),
        runtime_blake3: hash_of("python.wasm"),
        code_blake3: hash_of("print('hello')"),
        code_bytes: 14,
        outcome,
        exit_code: (outcome == Outcome::Ok).then_some(0),
        fuel_consumed: Some(1_000_000),
        duration_us: 12_345,
        stdout_bytes: 6,
        stdout_blake3: hash_of("hello\n"),
        stdout_truncated: false,
        stderr_bytes: 0,
        stderr_blake3: hash_of(""),
        stderr_truncated: false,
        limits: RecordedLimits {
            fuel: Some(10_000_000),
            timeout_ms: 30_000,
            memory_bytes: 256 << 20,
            workspace_bytes: 1 << 30,
        },
        scan: None,
        evidence: None,
        warm: None,
    })
}

/// `file.written` of `size` bytes whose contents hash is `hash_of(path)`.
pub fn written(path: &WorkspacePath, size: u64, by: WrittenBy) -> Event {
    Event::FileWritten(FileWritten {
        content_kept: None,
        not_kept: None,
        path: path.clone(),
        size,
        blake3: hash_of(path.as_str()),
        by,
    })
}

/// `file.deleted` of a file or a directory.
pub fn file_deleted(path: &WorkspacePath, by: WrittenBy) -> Event {
    Event::FileDeleted(FileDeleted {
        path: path.clone(),
        by,
    })
}

/// `session.prune.requested`.
pub fn prune_requested(age_us: u64, size_bytes: u64) -> Event {
    Event::SessionPruneRequested(SessionPruneRequested {
        run_id: Uuid::nil(),
        age_us,
        threshold_us: age_us,
        size_bytes,
    })
}

/// `session.pruned`.
pub fn pruned(reclaimed_bytes: u64) -> Event {
    Event::SessionPruned(SessionPruned {
        run_id: Some(Uuid::nil()),
        reclaimed_bytes,
    })
}

/// `session.prune.failed`.
pub fn prune_failed(error: &str) -> Event {
    Event::SessionPruneFailed(SessionPruneFailed {
        run_id: Some(Uuid::nil()),
        error: error.to_owned(),
    })
}

/// `session.delete.requested`.
pub fn delete_requested() -> Event {
    Event::SessionDeleteRequested(SessionDeleteRequested {
        reason: "asked".to_owned(),
    })
}

/// `session.deleted`.
pub fn session_deleted(reclaimed_bytes: u64) -> Event {
    Event::SessionDeleted(SessionDeleted {
        reason: "asked".to_owned(),
        reclaimed_bytes,
    })
}

/// `workspace.drift.detected` (session stream): one missing directory.
pub fn drift_detected() -> Event {
    Event::WorkspaceDriftDetected(WorkspaceDriftDetected {
        drift: vec![Drift::MissingDirectory],
        split: None,
    })
}

/// `prune.run.started` (system stream).
pub fn prune_run_started(candidates: u64) -> Event {
    Event::PruneRunStarted(PruneRunStarted {
        run_id: Uuid::nil(),
        policy: PrunePolicy::older_than(DAY),
        candidates,
    })
}

/// `prune.run.completed` (system stream).
pub fn prune_run_completed(deleted: u64, duration_us: u64) -> Event {
    Event::PruneRunCompleted(PruneRunCompleted {
        run_id: Uuid::nil(),
        deleted,
        skipped: 0,
        errors: 0,
        reclaimed_bytes: 0,
        duration_us,
    })
}

/// `reconcile.run.completed` (system stream).
pub fn reconcile_run_completed(intents_finished: u64, errors: u64, duration_us: u64) -> Event {
    Event::ReconcileRunCompleted(ReconcileRunCompleted {
        run_id: Uuid::nil(),
        intents_finished,
        orphans: 0,
        drift: 0,
        errors,
        duration_us,
    })
}

/// `workspace.orphan.quarantined` (system stream).
pub fn orphan_quarantined(dir_name: &str, bytes: u64) -> Event {
    Event::WorkspaceOrphanQuarantined(WorkspaceOrphanQuarantined {
        dir_name: dir_name.to_owned(),
        bytes,
        moved_to: format!("quarantine/{dir_name}"),
    })
}

/// `workspace.orphan.purged` (system stream).
pub fn orphan_purged(dir_name: &str, bytes: u64) -> Event {
    Event::WorkspaceOrphanPurged(WorkspaceOrphanPurged {
        dir_name: dir_name.to_owned(),
        bytes,
    })
}

/// The kind of an event this build does not know (forward compatibility).
pub const UNKNOWN_KIND: &str = "session.teleported";

/// An event of [`UNKNOWN_KIND`], as a newer sandlog might write it.
pub fn unknown_event() -> NewEvent {
    NewEvent {
        event_id: EventId::now(),
        kind: UNKNOWN_KIND.to_owned(),
        schema: 3,
        actor: TEST_ACTOR.to_owned(),
        correlation_id: None,
        causation_id: None,
        payload: br#"{"to":"mars","eta_us":42}"#.to_vec(),
    }
}

/// Typed events as [`NewEvent`]s with fresh ids.
pub fn new_events(events: &[Event]) -> Vec<NewEvent> {
    events
        .iter()
        .map(|event| NewEvent::from_event(event, TEST_ACTOR))
        .collect()
}

/// A real event store in a temporary directory, stamped by a
/// [`ManualClock`] that starts at [`T0`]. `Durability::Normal`: the tests
/// never cut the power.
#[derive(Debug)]
pub struct ProjectionStore {
    /// The store.
    pub store: EventStore,
    /// Its clock; clones share the time.
    pub clock: ManualClock,
    directory: TempDir,
}

/// The file name of the log inside the temporary directory.
pub const LOG_FILE_NAME: &str = "sandlog.db";

impl ProjectionStore {
    /// A new, empty store; with `read_model`, the read models are installed
    /// (tables created, hook set).
    ///
    /// Errors if the store cannot be created.
    pub fn new(read_model: bool) -> TestResult<ProjectionStore> {
        let directory = tempfile::tempdir()?;
        let clock = ManualClock::new(T0);
        let store = open_store(&directory.path().join(LOG_FILE_NAME), &clock, read_model)?.0;
        Ok(ProjectionStore {
            store,
            clock,
            directory,
        })
    }

    /// The log's file.
    pub fn path(&self) -> PathBuf {
        self.directory.path().join(LOG_FILE_NAME)
    }

    /// Closes the store and opens it again (same file, same clock); with
    /// `read_model`, installs the read models and returns what that did.
    ///
    /// Errors if the store cannot be reopened or the install fails.
    pub fn reopen(self, read_model: bool) -> TestResult<(ProjectionStore, Option<CatchUpReport>)> {
        let ProjectionStore {
            store,
            clock,
            directory,
        } = self;
        // Close first, so the new connections see a quiet file.
        drop(store);
        let (store, report) =
            open_store(&directory.path().join(LOG_FILE_NAME), &clock, read_model)?;
        Ok((
            ProjectionStore {
                store,
                clock,
                directory,
            },
            report,
        ))
    }

    /// Opens a second, hook-less store on the same file: a process that
    /// appends without maintaining the read models.
    ///
    /// Errors if the store cannot be opened.
    pub fn open_without_read_model(&self) -> TestResult<EventStore> {
        Ok(open_store(&self.path(), &self.clock, false)?.0)
    }

    /// Opens a second store on the same file that installs and maintains
    /// the read models: another process using sandlog.
    ///
    /// Errors if the store cannot be opened or the install fails.
    pub fn open_with_read_model(&self) -> TestResult<EventStore> {
        Ok(open_store(&self.path(), &self.clock, true)?.0)
    }

    /// Appends typed events to `stream` (any version).
    ///
    /// Errors if the append fails.
    pub fn append(&self, stream: StreamId, events: &[Event]) -> TestResult<Vec<Envelope>> {
        Ok(self
            .store
            .append(stream, ExpectedVersion::Any, &new_events(events))?)
    }

    /// Appends typed events to `session_id`'s stream.
    ///
    /// Errors if the append fails.
    pub fn append_to(&self, session_id: SessionId, events: &[Event]) -> TestResult<Vec<Envelope>> {
        self.append(session_id.stream(), events)
    }

    /// Creates a session now and returns its id.
    ///
    /// Errors if the append fails.
    pub fn create_session(&self) -> TestResult<SessionId> {
        let session_id = SessionId::new_v4();
        self.append_to(session_id, &[created(session_id)])?;
        Ok(session_id)
    }

    /// Moves the clock forward.
    pub fn advance(&self, duration: Duration) {
        self.clock.advance(duration);
    }

    /// The clock's time.
    pub fn now(&self) -> Timestamp {
        sandlog_core::Clock::now(&self.clock)
    }

    /// Every envelope of the log, in order.
    ///
    /// Errors if the log cannot be read.
    pub fn envelopes(&self) -> TestResult<Vec<Envelope>> {
        Ok(self
            .store
            .query(LogFilter::default())
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// The in-memory fold of the whole log.
    ///
    /// Errors if the log cannot be read.
    pub fn fold(&self) -> TestResult<State> {
        Ok(State::fold(&self.envelopes()?))
    }
}

fn open_store(
    path: &std::path::Path,
    clock: &ManualClock,
    read_model: bool,
) -> TestResult<(EventStore, Option<CatchUpReport>)> {
    let options = OpenOptions::default()
        .clock(Arc::new(clock.clone()))
        .durability(Durability::Normal);
    let mut store = EventStore::open(path, options)?;
    let report = if read_model {
        Some(sandlog_sqlite::install(&mut store)?)
    } else {
        None
    };
    Ok((store, report))
}

/// What [`sandlog_sqlite::query::stats`] should say about `state`:
/// the same counts, computed from the in-memory fold.
pub fn stats_of(state: &State) -> StoreStats {
    let mut sessions = BTreeMap::new();
    let (mut legacy_sessions, mut workspace_bytes, mut files, mut executions) = (0, 0, 0, 0);
    for session in state.sessions.values() {
        *sessions
            .entry(session.status.as_str().to_owned())
            .or_insert(0) += 1;
        if session.legacy && session.status == SessionStatus::Active {
            legacy_sessions += 1;
        }
        if session.status.has_workspace() {
            workspace_bytes += session.bytes;
            files += session.file_count;
        }
        executions += session.exec_count;
    }
    StoreStats {
        sessions,
        legacy_sessions,
        workspace_bytes,
        files,
        executions,
        cleanup: state.stats.clone(),
    }
}

// ---------------------------------------------------------------------------
// Random valid histories.

/// Sessions a generated history touches. Few, so that sessions see many
/// events each and every lifecycle stage comes up.
pub const HISTORY_SESSIONS: usize = 4;

/// File paths a generated history writes: top-level and nested, never a
/// file and a directory of the same name.
pub const HISTORY_FILES: &[&str] = &[
    "a.txt",
    "main.py",
    "src/app.py",
    "src/lib/util.py",
    "src/lib/deep/x.py",
    "data/in.csv",
    "data/out/result.json",
];

/// Paths a generated history deletes: the files, their directories, and a
/// path that never exists.
pub const HISTORY_DELETE_TARGETS: &[&str] = &[
    "a.txt",
    "main.py",
    "src/app.py",
    "src/lib/util.py",
    "src/lib/deep/x.py",
    "data/in.csv",
    "data/out/result.json",
    "src",
    "src/lib",
    "data",
    "data/out",
    "nowhere",
];

/// One random step; [`plan_history`] turns it into a valid event.
#[derive(Debug, Clone)]
pub struct Step {
    /// Which session (index below [`HISTORY_SESSIONS`]).
    pub session: usize,
    /// What to try.
    pub action: Action,
    /// How far to move the clock before the append this step starts,
    /// microseconds (negative: backwards).
    pub clock_delta_us: i64,
    /// Whether this step closes its append batch.
    pub end_batch: bool,
    /// How the session starts, if this step starts it: 0–5 created,
    /// 6 adopted with metadata, 7 adopted with metadata but no
    /// `updated_at`, 8 adopted with metadata missing, 9 corrupted.
    pub start: u8,
}

/// What a step tries to do; mapped onto what the session's lifecycle allows.
#[derive(Debug, Clone)]
pub enum Action {
    /// Run code.
    Execute(Outcome),
    /// Write a file (index into [`HISTORY_FILES`]).
    Write {
        /// Which file.
        file: usize,
        /// Its size.
        size: u64,
        /// Who wrote it.
        by: WrittenBy,
    },
    /// Delete a path (index into [`HISTORY_DELETE_TARGETS`]).
    Delete {
        /// Which path.
        target: usize,
        /// Who deleted it.
        by: WrittenBy,
    },
    /// Ask to prune, then finish (`finish`: 0 fails, 1 prunes, 2 waits).
    Prune {
        /// How the intent ends.
        finish: u8,
    },
    /// Ask to delete, then finish (or wait).
    Delete2 {
        /// Whether the delete completes in this step.
        finish: bool,
    },
    /// Record drift on the session.
    Drift,
    /// An event kind from the future.
    Unknown,
    /// A `system` stream event (index picks the kind).
    System(u8),
}

fn outcome_strategy() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        3 => Just(Outcome::Ok),
        1 => Just(Outcome::Error),
        1 => Just(Outcome::OutOfFuel),
        1 => Just(Outcome::Timeout),
        1 => Just(Outcome::Memory),
        1 => Just(Outcome::Quota),
        1 => Just(Outcome::Trap),
        1 => Just(Outcome::LimitExceeded),
    ]
}

fn writer_strategy() -> impl Strategy<Value = WrittenBy> {
    prop_oneof![
        3 => Just(WrittenBy::Host),
        3 => Just(WrittenBy::Guest),
        1 => Just(WrittenBy::Adoption),
    ]
}

fn action_strategy() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => outcome_strategy().prop_map(Action::Execute),
        5 => (0..HISTORY_FILES.len(), 0u64..10_000, writer_strategy())
            .prop_map(|(file, size, by)| Action::Write { file, size, by }),
        2 => (0..HISTORY_DELETE_TARGETS.len(), writer_strategy())
            .prop_map(|(target, by)| Action::Delete { target, by }),
        1 => (0u8..3).prop_map(|finish| Action::Prune { finish }),
        1 => any::<bool>().prop_map(|finish| Action::Delete2 { finish }),
        1 => Just(Action::Drift),
        1 => Just(Action::Unknown),
        2 => (0u8..5).prop_map(Action::System),
    ]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let clock_delta_us = prop_oneof![
        6 => 0i64..3_600_000_000,
        2 => Just(0i64),
        1 => -3_600_000_000i64..0,
    ];
    (
        0..HISTORY_SESSIONS,
        action_strategy(),
        clock_delta_us,
        proptest::bool::weighted(0.4),
        0u8..10,
    )
        .prop_map(|(session, action, clock_delta_us, end_batch, start)| Step {
            session,
            action,
            clock_delta_us,
            end_batch,
            start,
        })
}

/// A random history of up to `steps_max` steps.
pub fn history(steps_max: usize) -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step_strategy(), 1..=steps_max.max(1))
}

/// One append of a planned history.
#[derive(Debug, Clone)]
pub struct PlannedAppend {
    /// The stream.
    pub stream: StreamId,
    /// The events, in order.
    pub events: Vec<NewEvent>,
    /// How far to move the clock before appending, microseconds.
    pub clock_delta_us: i64,
}

/// The lifecycle the planner tracks per session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    NotStarted,
    Active,
    Pruning,
    Deleting,
    Gone,
}

/// Turns random steps into appends that a correct engine could have made:
/// every session starts with `session.created` or `session.adopted`;
/// intents are finished or failed before anything else happens to the
/// session; nothing happens to a pruned or deleted session (the step turns
/// into a `system` event instead). Consecutive steps on one stream share an
/// append until a step ends the batch.
pub fn plan_history(
    steps: &[Step],
    sessions: &[SessionId; HISTORY_SESSIONS],
) -> Vec<PlannedAppend> {
    let mut stages = [Stage::NotStarted; HISTORY_SESSIONS];
    let mut appends: Vec<PlannedAppend> = Vec::new();
    let mut batch_open = false;
    for step in steps {
        let (Some(&session_id), Some(stage)) =
            (sessions.get(step.session), stages.get_mut(step.session))
        else {
            continue;
        };
        let (stream, events) = step_events(step, session_id, stage);
        let joins = batch_open
            && appends
                .last()
                .is_some_and(|last| last.stream == stream && last.events.len() < 64);
        match appends.last_mut() {
            Some(last) if joins => last.events.extend(events),
            _ => appends.push(PlannedAppend {
                stream,
                events,
                clock_delta_us: step.clock_delta_us,
            }),
        }
        batch_open = !step.end_batch;
    }
    appends
}

fn step_events(step: &Step, session_id: SessionId, stage: &mut Stage) -> (StreamId, Vec<NewEvent>) {
    let session_stream = session_id.stream();
    let typed = |events: &[Event]| (session_stream, new_events(events));
    let file = |index: usize| {
        HISTORY_FILES
            .get(index % HISTORY_FILES.len())
            .and_then(|text| WorkspacePath::parse(text).ok())
    };
    match *stage {
        Stage::NotStarted => {
            *stage = Stage::Active;
            let kind = step.start;
            let old = T0.saturating_sub(DAY * 30);
            let first = match kind {
                6 => adopted(
                    session_id,
                    MetadataStatus::Ok,
                    Some(old),
                    Some(old.saturating_add(HOUR)),
                ),
                7 => adopted(session_id, MetadataStatus::Ok, Some(old), None),
                8 => adopted(session_id, MetadataStatus::Missing, None, None),
                9 => adopted(session_id, MetadataStatus::Corrupted, None, None),
                _ => return typed(&[created_with_labels(session_id, &[("team", "qa")])]),
            };
            // An adoption inventories the files it found.
            let mut events = vec![first];
            events.extend(
                file(usize::from(kind)).map(|path| written(&path, 100, WrittenBy::Adoption)),
            );
            typed(&events)
        }
        Stage::Gone => (StreamId::System, new_events(&[system_event(step)])),
        Stage::Pruning => {
            // Only the intent's end may follow the intent.
            *stage = Stage::Active;
            match step.action {
                Action::Prune { finish: 1 } | Action::Delete2 { .. } => {
                    *stage = Stage::Gone;
                    typed(&[pruned(4096)])
                }
                _ => typed(&[prune_failed("permission denied")]),
            }
        }
        Stage::Deleting => {
            *stage = Stage::Gone;
            typed(&[session_deleted(2048)])
        }
        Stage::Active => match &step.action {
            Action::Execute(outcome) => typed(&[executed(*outcome)]),
            Action::Write {
                file: index,
                size,
                by,
            } => match file(*index) {
                Some(path) => typed(&[written(&path, *size, *by)]),
                None => typed(&[executed(Outcome::Ok)]),
            },
            Action::Delete { target, by } => match HISTORY_DELETE_TARGETS
                .get(*target % HISTORY_DELETE_TARGETS.len())
                .and_then(|text| WorkspacePath::parse(text).ok())
            {
                Some(path) => typed(&[file_deleted(&path, *by)]),
                None => typed(&[executed(Outcome::Error)]),
            },
            Action::Prune { finish } => {
                let intent = prune_requested(1_000, 10);
                match finish {
                    0 => typed(&[intent, prune_failed("busy")]),
                    1 => {
                        *stage = Stage::Gone;
                        typed(&[intent, pruned(10)])
                    }
                    _ => {
                        *stage = Stage::Pruning;
                        typed(&[intent])
                    }
                }
            }
            Action::Delete2 { finish } => {
                if *finish {
                    *stage = Stage::Gone;
                    typed(&[delete_requested(), session_deleted(20)])
                } else {
                    *stage = Stage::Deleting;
                    typed(&[delete_requested()])
                }
            }
            Action::Drift => typed(&[drift_detected()]),
            Action::Unknown => (session_stream, vec![unknown_event()]),
            Action::System(_) => (StreamId::System, new_events(&[system_event(step)])),
        },
    }
}

fn system_event(step: &Step) -> Event {
    let pick = match step.action {
        Action::System(pick) => pick,
        _ => u8::try_from(step.session).unwrap_or(0),
    };
    match pick % 5 {
        0 => prune_run_completed(1, 5_000),
        1 => reconcile_run_completed(2, 1, 7_000),
        2 => orphan_quarantined("not-a-session", 300),
        3 => orphan_purged("0b5e0b5e-0000-4000-8000-000000000000", 500),
        _ => prune_run_started(3),
    }
}
