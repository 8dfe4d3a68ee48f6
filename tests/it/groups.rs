//! Sessions created with what a task gives its agents: a group, a size
//! limit, read-only task data and context files (issue: native agents and
//! task groups). Real roots, real python.wasm.

#![cfg(test)]

use std::collections::BTreeMap;
use std::time::Duration;

use sandlog_core::event::Event;
use sandlog_core::{Outcome, PrunePolicy, SessionId, StreamId, WorkspacePath};
use sandlog_projections::SessionStatus;
use sandlog_runtime::sandbox::ReadonlyMount;
use sandlog_runtime::{ContextFile, ExecRequest, NewSession, RuntimeError};
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

fn context(text: &str, bytes: &[u8]) -> ContextFile {
    ContextFile {
        path: path(text),
        bytes: bytes.to_vec(),
    }
}

fn workspace_entries(root: &TestRoot) -> usize {
    std::fs::read_dir(root.path().join("workspaces"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

fn log_length(root: &TestRoot) -> u64 {
    root.engine.head().map(|head| head.position.0).unwrap_or(0)
}

#[test]
fn context_files_are_written_and_recorded_with_the_creation() -> TestResult {
    let root = TestRoot::new()?;
    let session = root.engine.create_session_with(NewSession {
        group: Some("task-42".into()),
        context: vec![
            context("CLAUDE.md", b"# Task\nbe careful\n"),
            context(".task/spec.json", b"{\"task\":42}"),
        ],
        ..NewSession::default()
    })?;
    let id = session.session_id;
    assert_eq!(session.group.as_deref(), Some("task-42"));
    assert_eq!(session.file_count, 2);
    assert_eq!(
        root.engine.read_file(id, &path(".task/spec.json"))?,
        b"{\"task\":42}"
    );
    let on_disk = std::fs::read(
        root.path()
            .join("workspaces")
            .join(id.to_string())
            .join("CLAUDE.md"),
    )?;
    assert_eq!(on_disk, b"# Task\nbe careful\n");

    // One append: the creation, then each file caused by it, by the host
    // and the creating actor.
    let events = root.engine.stream_events(StreamId::Session(id))?;
    assert_eq!(events.len(), 3);
    let creation = &events[0];
    assert_eq!(creation.kind, "session.created");
    for written in &events[1..] {
        assert_eq!(written.kind, "file.written");
        assert_eq!(written.causation_id, Some(creation.event_id.0));
        assert_eq!(written.actor, creation.actor);
        assert_eq!(
            written.position.0,
            creation.position.0 + written.version.0 - 1
        );
        match written.event()? {
            Some(Event::FileWritten(file)) => {
                assert_eq!(file.by, sandlog_core::WrittenBy::Host);
                assert_eq!(file.content_kept, Some(true));
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(root.engine.verify(None, &|_| {})?.ok);
    Ok(())
}

#[test]
fn refused_creations_leave_nothing() -> TestResult {
    let root = TestRoot::new()?;
    let before = (workspace_entries(&root), log_length(&root));
    let data = tempfile::tempdir()?;
    let refusals: Vec<(&str, NewSession)> = vec![
        (
            "context past the size limit",
            NewSession {
                max_size: Some(10),
                context: vec![context("a.txt", b"0123456789ab")],
                ..NewSession::default()
            },
        ),
        (
            "two context files at one path",
            NewSession {
                context: vec![context("a.txt", b"1"), context("a.txt", b"2")],
                ..NewSession::default()
            },
        ),
        (
            "a context file inside another",
            NewSession {
                context: vec![context("a", b"1"), context("a/b", b"2")],
                ..NewSession::default()
            },
        ),
        (
            "an empty group",
            NewSession {
                group: Some(String::new()),
                ..NewSession::default()
            },
        ),
        (
            "a group with a newline",
            NewSession {
                group: Some("a\nb".into()),
                ..NewSession::default()
            },
        ),
        (
            "a size limit of 0",
            NewSession {
                max_size: Some(0),
                ..NewSession::default()
            },
        ),
        (
            "a missing read-only directory",
            NewSession {
                readonly: vec![ReadonlyMount {
                    host_path: data.path().join("missing"),
                    guest_path: "/data/missing".into(),
                }],
                ..NewSession::default()
            },
        ),
        (
            "a read-only directory over the workspace",
            NewSession {
                readonly: vec![ReadonlyMount {
                    host_path: data.path().to_path_buf(),
                    guest_path: "/app/data".into(),
                }],
                ..NewSession::default()
            },
        ),
    ];
    for (what, new) in refusals {
        let error = root.engine.create_session_with(new).expect_err(what);
        assert!(
            matches!(
                error.kind(),
                "quota" | "invalid_payload" | "invalid_input" | "invalid_request"
            ),
            "{what}: {} ({error})",
            error.kind()
        );
        assert_eq!(
            (workspace_entries(&root), log_length(&root)),
            before,
            "{what} left something behind"
        );
    }
    Ok(())
}

#[test]
fn the_size_limit_holds_host_writes_and_executions() -> TestResult {
    let root = TestRoot::new()?;
    let small = root.engine.create_session_with(NewSession {
        max_size: Some(64 * 1024),
        ..NewSession::default()
    })?;
    let id = small.session_id;
    root.engine
        .write_file(id, &path("fits.bin"), &vec![1u8; 60 * 1024], false)?;
    let refused = root
        .engine
        .write_file(id, &path("too-much.bin"), &vec![2u8; 8 * 1024], false)
        .expect_err("past the limit");
    assert!(
        matches!(refused, RuntimeError::QuotaExceeded { quota, .. } if quota == 64 * 1024),
        "{refused}"
    );

    let run = root.engine.execute(
        id,
        &ExecRequest::python("open('/app/big.bin', 'wb').write(b'x' * 100_000)"),
    )?;
    assert_eq!(run.outcome, Outcome::Quota, "{run:?}");

    // The root's default applies to sessions created without a limit.
    root.engine.configure("session.max_size", Some("16KiB"))?;
    let defaulted = root.engine.create_session(BTreeMap::new())?;
    assert_eq!(defaulted.max_size, None);
    let refused = root
        .engine
        .write_file(
            defaulted.session_id,
            &path("x.bin"),
            &vec![0u8; 20 * 1024],
            false,
        )
        .expect_err("past the root's default");
    assert!(
        matches!(refused, RuntimeError::QuotaExceeded { quota, .. } if quota == 16 * 1024),
        "{refused}"
    );
    assert!(
        root.engine
            .configure("session.max_size", Some("a lot"))
            .is_err()
    );
    Ok(())
}

#[test]
fn read_only_directories_are_seen_but_not_changed() -> TestResult {
    let root = TestRoot::new()?;
    let data = tempfile::tempdir()?;
    std::fs::write(data.path().join("input.csv"), b"a,b\n1,2\n")?;
    let session = root.engine.create_session_with(NewSession {
        readonly: vec![ReadonlyMount {
            host_path: data.path().to_path_buf(),
            guest_path: "/data/task".into(),
        }],
        ..NewSession::default()
    })?;
    assert_eq!(session.readonly.len(), 1);
    assert_eq!(session.readonly[0].guest_path, "/data/task");

    let run = root.engine.execute(
        session.session_id,
        &ExecRequest::python(
            "print(open('/data/task/input.csv').read().splitlines()[1])\n\
             try:\n    open('/data/task/input.csv', 'w').write('changed')\n    print('wrote')\n\
             except OSError as error:\n    print('refused')\n",
        ),
    )?;
    assert_eq!(run.outcome, Outcome::Ok, "{run:?}");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "1,2\nrefused\n");
    assert_eq!(std::fs::read(data.path().join("input.csv"))?, b"a,b\n1,2\n");

    // Kept in the session's metadata across a reopen (read model) and a
    // rebuild (fold).
    let mut root = root;
    root.reopen()?;
    assert_eq!(
        root.engine.session(session.session_id)?.readonly,
        session.readonly
    );
    assert!(root.engine.verify(None, &|_| {})?.ok);
    Ok(())
}

#[test]
fn groups_scope_listing_and_prune() -> TestResult {
    let root = TestRoot::new()?;
    let mut task_a = Vec::new();
    for _ in 0..3 {
        task_a.push(
            root.engine
                .create_session_with(NewSession {
                    group: Some("a".into()),
                    ..NewSession::default()
                })?
                .session_id,
        );
        root.clock.advance(Duration::from_secs(60));
    }
    let mut task_b = Vec::new();
    for _ in 0..2 {
        task_b.push(
            root.engine
                .create_session_with(NewSession {
                    group: Some("b".into()),
                    ..NewSession::default()
                })?
                .session_id,
        );
        root.clock.advance(Duration::from_secs(60));
    }
    let loose = root.engine.create_session(BTreeMap::new())?.session_id;
    let ids = |sessions: Vec<sandlog_sqlite::query::SessionSummary>| -> Vec<SessionId> {
        sessions
            .into_iter()
            .map(|session| session.session_id)
            .collect()
    };
    assert_eq!(ids(root.engine.sessions_in(None, Some("a"))?), task_a);
    assert_eq!(ids(root.engine.sessions_in(None, Some("b"))?), task_b);
    assert!(root.engine.sessions_in(None, Some("c"))?.is_empty());
    assert_eq!(root.engine.sessions_in(None, None)?.len(), 6);

    // Keep group a's newest session: its two oldest go, nothing else.
    let report = root.engine.prune(
        &PrunePolicy {
            older_than: Duration::MAX,
            max_sessions: Some(1),
            group: Some("a".into()),
            ..PrunePolicy::default()
        },
        false,
        &|_, _| {},
    )?;
    assert_eq!(report.deleted_sessions, task_a[..2].to_vec());
    assert_eq!(
        ids(root.engine.sessions_in(Some(SessionStatus::Active), None)?),
        vec![task_a[2], task_b[0], task_b[1], loose]
    );

    // A fork stays in its origin's group.
    let fork = root.engine.fork(
        task_b[0],
        sandlog_projections::Cut::Position(sandlog_core::Position(log_length(&root))),
        BTreeMap::new(),
    )?;
    assert_eq!(
        root.engine.session(fork.session_id)?.group.as_deref(),
        Some("b")
    );
    assert!(root.engine.verify(None, &|_| {})?.ok);
    Ok(())
}
