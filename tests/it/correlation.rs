//! Correlation and causation through the engine: every event an engine
//! with `EngineOptions::correlation_id` appends carries it (including the
//! applier's, finishing an intent on open), and where one command appends
//! several events the later ones name their cause, however the command
//! ended (finished in one go, or left pending and finished by the
//! applier).

#![cfg(test)]

use std::path::Path;
use std::sync::Arc;

use sandlog_core::{SessionId, StreamId, WorkspacePath};
use sandlog_eventstore::LogFilter;
use sandlog_runtime::{Engine, FaultInjector};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::{TestRoot, options};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[derive(Debug)]
struct FailRemoval;

impl FaultInjector for FailRemoval {
    fn before_remove(&self, _session_id: SessionId, _path: &Path) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    }
}

#[test]
fn a_delete_finished_by_the_applier_names_its_intent_and_keeps_the_correlation() -> TestResult {
    let mut root = TestRoot::new()?;
    let task = sandlog_core::correlation_id("task-7")?;
    let mut correlated = options(&root.clock);
    correlated.correlation_id = Some(task);
    correlated.fault = Some(Arc::new(FailRemoval));
    root.engine = Engine::open(root.path(), correlated)?;
    let id = root.engine.create_session(Default::default())?.session_id;
    root.engine
        .write_file(id, &WorkspacePath::parse("a.txt")?, b"a", false)?;
    // The removal fails: the intent stays pending, its failure recorded.
    assert!(root.engine.delete_session(id, "done").is_err());
    // Reopened (another run of the same task) without the fault: the
    // applier finishes the intent on open.
    let mut correlated = options(&root.clock);
    correlated.correlation_id = Some(task);
    root.engine = Engine::open(root.path(), correlated)?;
    let events = root.engine.stream_events(StreamId::Session(id))?;
    let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "session.created",
            "file.written",
            "session.delete.requested",
            "session.intent.failed",
            "session.deleted"
        ]
    );
    assert!(
        events
            .iter()
            .all(|event| event.correlation_id == Some(task))
    );
    let intent = events[2].event_id.0;
    assert_eq!(events[3].causation_id, Some(intent));
    assert_eq!(events[4].causation_id, Some(intent));
    assert_eq!(events[4].actor, "applier");
    // The log finds the task's events, and only them.
    let found = root
        .engine
        .raw_log()?
        .query(LogFilter {
            correlation: Some(task),
            ..LogFilter::default()
        })
        .count();
    assert_eq!(found, events.len());
    Ok(())
}

#[test]
fn a_fork_names_its_creation_and_each_copied_file_the_fork() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(Default::default())?.session_id;
    for name in ["a.txt", "b.txt"] {
        root.engine
            .write_file(id, &WorkspacePath::parse(name)?, name.as_bytes(), false)?;
    }
    let head = root.engine.head()?.position;
    let fork = root.engine.fork(
        id,
        sandlog_projections::replay::Cut::Position(head),
        Default::default(),
    )?;
    let events = root
        .engine
        .stream_events(StreamId::Session(fork.session_id))?;
    let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "session.created",
            "session.forked",
            "file.written",
            "file.written"
        ]
    );
    assert_eq!(events[0].causation_id, None);
    assert_eq!(events[1].causation_id, Some(events[0].event_id.0));
    assert_eq!(events[2].causation_id, Some(events[1].event_id.0));
    assert_eq!(events[3].causation_id, Some(events[1].event_id.0));
    // No correlation id was given: none is recorded.
    assert!(events.iter().all(|event| event.correlation_id.is_none()));
    Ok(())
}
