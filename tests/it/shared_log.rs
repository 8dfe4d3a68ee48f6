//! The engine on a log shared by several nodes (a real PostgreSQL server,
//! see `support::pg`): each node's root holds its workspaces and a replica
//! of the log; every write commits in the shared log first and is copied
//! verbatim into the writer's replica; other nodes copy it on their next
//! write, open or `sync`. Replicas and the shared log hold the same events
//! (same hashes, same Merkle root), blobs are read from the shared log,
//! and a shared log that stops being the one a root copied is refused.
#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;

use sandlog_core::{ManualClock, Outcome, Position, Timestamp, WorkspacePath};
use sandlog_eventstore::{Backend, LogFilter};
use sandlog_postgres::PgEventStore;
use sandlog_projections::replay::Cut;
use sandlog_runtime::history::ExecSelector;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest, RuntimeError};
use sandlog_sqlite::{EventStore, OpenOptions};
use sandlog_tests::engine::{FixtureError, TEST_EPOCH_MICROS, options};
use sandlog_tests::pg;

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap()
}

/// Options for a node of the shared log at `url`, creating its root.
fn node_options(clock: &ManualClock, url: &str) -> EngineOptions {
    EngineOptions {
        store: Some(url.to_owned()),
        create: true,
        ..options(clock)
    }
}

/// Every event of `store`, in order.
fn all_events(store: &dyn Backend) -> Result<Vec<sandlog_core::Envelope>, FixtureError> {
    let mut events = Vec::new();
    loop {
        let page = store.query_page(&LogFilter {
            from: Some(Position(events.len() as u64 + 1)),
            limit: Some(1000),
            ..LogFilter::default()
        })?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

/// The replica file of a node's root, opened beside its engine.
fn replica(root: &Path) -> Result<EventStore, FixtureError> {
    Ok(EventStore::open(
        &root.join("sandlog.db"),
        OpenOptions {
            create: false,
            ..OpenOptions::default()
        },
    )?)
}

/// Two nodes on one shared log: sessions, Python runs and host writes on
/// each; both replicas and the shared log hold the same events and Merkle
/// root; each node reads the other's sessions, files' history and
/// execution output (blobs come from the shared log); both verify.
#[test]
fn two_nodes_write_one_log_and_read_each_other() -> Result<(), FixtureError> {
    let db = pg::database()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    // A node's root may not exist yet: opening with `create` makes it.
    let a = Engine::open(&dir_a.path().join("node-a"), node_options(&clock, &db.url))?;
    let b = Engine::open(dir_b.path(), node_options(&clock, &db.url))?;
    assert!(a.is_shared() && b.is_shared());

    let on_a = a.create_session(BTreeMap::new())?.session_id;
    let run = a.execute(
        on_a,
        &ExecRequest::python("open('out.txt','w').write('from a'); print('hello from a')"),
    )?;
    assert_eq!(
        run.outcome,
        Outcome::Ok,
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    a.write_file(on_a, &path("notes/a.txt"), b"written on a", false)?;
    let on_b = b.create_session(BTreeMap::new())?.session_id;
    b.write_file(on_b, &path("b.txt"), b"written on b", false)?;
    a.sync()?;

    // One log: the same events, byte for byte, everywhere.
    let shared = PgEventStore::connect(&db.url)?;
    let events = all_events(&shared)?;
    assert!(events.len() >= 6, "{} events", events.len());
    assert_eq!(all_events(&replica(&dir_a.path().join("node-a"))?)?, events);
    assert_eq!(all_events(&replica(dir_b.path())?)?, events);
    let size = events.len() as u64;
    assert_eq!(
        replica(&dir_a.path().join("node-a"))?.merkle_root(size)?,
        shared.merkle_root(size)?
    );
    assert_eq!(
        replica(dir_b.path())?.merkle_root(size)?,
        shared.merkle_root(size)?
    );

    // Each node sees the other's sessions and reads their history; the
    // bytes come from the shared log.
    let seen_on_b: Vec<_> = b
        .sessions(None)?
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert!(seen_on_b.contains(&on_a) && seen_on_b.contains(&on_b));
    let record = b.execution_record(on_a, ExecSelector::Number(1), None)?;
    assert_eq!(record.stdout.text.as_deref(), Some("hello from a\n"));
    let head = Cut::Position(b.head()?.position);
    let past = b.session_as_of(on_a, head)?;
    assert!(
        past.writes.contains_key(&path("notes/a.txt")),
        "{:?}",
        past.writes.keys()
    );
    let mut bytes = Vec::new();
    b.read_file_at(on_a, &path("out.txt"), head, &mut bytes)?;
    assert_eq!(bytes, b"from a");

    // Erasure and gc on one node act on the shared log's blobs: the other
    // node sees the bytes gone, the record of them kept.
    let erased = b.erase(on_b, None, "test: erased on b")?;
    assert!(erased.erased >= 1, "{erased:?}");
    a.sync()?;
    let gone = a.read_file_at(
        on_b,
        &path("b.txt"),
        Cut::Position(a.head()?.position),
        &mut Vec::new(),
    );
    assert!(
        gone.is_err(),
        "erased bytes still readable from a: {gone:?}"
    );
    let orphan = shared.put_blob(b"no event names this")?;
    assert_eq!(a.gc(None)?.blobs_removed, 1);
    assert_eq!(
        shared.blob_state(&orphan)?,
        sandlog_eventstore::BlobState::Missing
    );
    let size = a.head()?.position.0;

    for engine in [&a, &b] {
        let verified = engine.verify(None, &|_| {})?;
        assert!(verified.ok, "{verified:?}");
        assert_eq!(verified.position, size);
    }
    Ok(())
}

/// A node whose replica is lost copies the shared log again on open, and
/// its read models come back; a root opened against another (new) shared
/// log is refused by its anchor, and a shared log altered under a replica
/// fails verification by position.
#[test]
fn a_lost_replica_is_copied_again_and_a_foreign_or_altered_log_is_refused()
-> Result<(), FixtureError> {
    let db = pg::database()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let dir = tempfile::tempdir()?;
    let session = {
        let engine = Engine::open(dir.path(), node_options(&clock, &db.url))?;
        let session = engine.create_session(BTreeMap::new())?.session_id;
        engine.write_file(session, &path("kept.txt"), b"kept", false)?;
        session
    };
    std::fs::remove_file(dir.path().join("sandlog.db"))?;
    let engine = Engine::open(dir.path(), node_options(&clock, &db.url))?;
    assert_eq!(engine.session(session)?.file_count, 1);
    assert_eq!(engine.read_file(session, &path("kept.txt"))?, b"kept");
    assert!(engine.verify(None, &|_| {})?.ok);
    drop(engine);

    // The replica is never a log of its own, and a root with its own log
    // is not a node.
    match Engine::open(dir.path(), options(&clock)) {
        Err(error @ RuntimeError::BadLocation { .. }) => {
            assert!(error.to_string().contains("--store"), "{error}");
        }
        other => panic!("a node's root opened alone: {other:?}"),
    }
    let alone = tempfile::tempdir()?;
    Engine::open(
        alone.path(),
        EngineOptions {
            create: true,
            ..options(&clock)
        },
    )?;
    match Engine::open(alone.path(), node_options(&clock, &db.url)) {
        Err(error @ RuntimeError::BadLocation { .. }) => {
            assert!(error.to_string().contains("migrate"), "{error}");
        }
        other => panic!("a root with its own log opened as a node: {other:?}"),
    }

    // Another database is another log: the anchor names this one.
    let other = pg::database()?;
    match Engine::open(dir.path(), node_options(&clock, &other.url)) {
        Err(error @ RuntimeError::LogMissing { .. }) => {
            assert!(error.to_string().contains("the shared log"), "{error}");
            assert!(error.is_integrity());
        }
        other => panic!("expected the log to be missing, got {other:?}"),
    }
    // Nothing was appended to it: the root's genesis is not forged there.
    assert_eq!(
        PgEventStore::connect(&other.url)?.head()?.position,
        Position::ZERO
    );

    // An event altered in the shared log after this node copied it.
    let engine = Engine::open(dir.path(), node_options(&clock, &db.url))?;
    // The tamperer owns the database: the append-only trigger goes first.
    db.client()?.batch_execute(
        "ALTER TABLE events DISABLE TRIGGER USER; \
         UPDATE events SET payload = convert_to('{}', 'UTF8') WHERE position = 2",
    )?;
    match engine.verify(None, &|_| {}) {
        Err(error) => assert!(error.is_integrity(), "{error}"),
        Ok(outcome) => panic!("verify passed over an altered shared log: {outcome:?}"),
    }
    Ok(())
}

/// What one worker printed: its acknowledged actions and whether it ended.
#[derive(Debug, Default)]
struct Acks {
    created: Vec<String>,
    wrote: Vec<String>,
    executed: Vec<String>,
    pruned: Vec<String>,
    done: bool,
}

fn read_acks(lines: &[String]) -> Acks {
    let mut acks = Acks::default();
    for line in lines {
        match line.split_once(' ') {
            Some(("created", id)) => acks.created.push(id.to_owned()),
            Some(("wrote", id)) => acks.wrote.push(id.to_owned()),
            Some(("executed", id)) => acks.executed.push(id.to_owned()),
            Some(("pruned", id)) => acks.pruned.push(id.to_owned()),
            _ if line == "done" => acks.done = true,
            _ => {}
        }
    }
    acks
}

/// Eight worker processes, four on each of two nodes, create sessions,
/// write, run Python and prune at once on one shared log, and one of them
/// is SIGKILLed mid-run: the shared log has gapless positions, one event
/// per id and a chain that verifies; every action a worker saw
/// acknowledged (the killed one's too) is in it; both nodes' replicas
/// copy it exactly and verify.
#[test]
fn eight_processes_on_two_nodes_share_one_log() -> Result<(), FixtureError> {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    const WORKERS_PER_NODE: usize = 4;
    const ROUNDS: &str = "6";
    let db = pg::database()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let nodes = [("a", tempfile::tempdir()?), ("b", tempfile::tempdir()?)];
    // Each node's root exists before its workers start, as after `init`.
    for (node, dir) in &nodes {
        Engine::open(dir.path(), named_node(&clock, &db.url, node))?;
    }

    let mut workers = Vec::new();
    for (node, dir) in &nodes {
        for _ in 0..WORKERS_PER_NODE {
            let mut child = Command::new(env!("CARGO_BIN_EXE_node-child"))
                .arg(&db.url)
                .arg(dir.path())
                .arg(node)
                .arg(ROUNDS)
                .env(
                    "SANDLOG_RUNTIMES_DIR",
                    sandlog_tests::engine::runtimes_dir(),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines.next().transpose()?;
            assert_eq!(ready.as_deref(), Some("ready"), "worker of node {node}");
            workers.push((*node, child, lines));
        }
    }
    for (_, child, _) in &mut workers {
        writeln!(child.stdin.as_mut().ok_or("no stdin")?)?;
    }

    // The first worker is killed after its third acknowledgement; the
    // others run to the end.
    let mut all = Vec::new();
    for (index, (node, mut child, lines)) in workers.into_iter().enumerate() {
        let mut seen = Vec::new();
        for line in lines {
            seen.push(line?);
            if index == 0 && seen.len() == 3 {
                child.kill()?;
                break;
            }
        }
        let output = child.wait_with_output()?;
        let acks = read_acks(&seen);
        if index != 0 && !output.status.success() {
            // Where a replica parted from the shared log, for the failure
            // message below.
            let shared = PgEventStore::connect(&db.url)?;
            let pg_events = all_events(&shared)?;
            for (_, dir) in &nodes {
                let local = all_events(&replica(dir.path())?)?;
                for (l, p) in local.iter().zip(&pg_events) {
                    if l != p {
                        eprintln!("replica differs at {}:\n{l:?}\nshared: {p:?}", l.position);
                        break;
                    }
                }
            }
        }
        if index == 0 {
            assert!(!acks.done);
        } else {
            assert!(
                output.status.success() && acks.done,
                "worker {index} of node {node}: {}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        all.push(acks);
    }

    let shared = PgEventStore::connect(&db.url)?;
    let events = all_events(&shared)?;
    sandlog_tests::check_log_shape(&events)?;
    assert!(shared.verify(None)?.events == events.len() as u64);
    let kinds_of = |session: &str| -> Vec<String> {
        events
            .iter()
            .filter(|envelope| match envelope.stream {
                sandlog_core::StreamId::Session(id) => id.to_string() == session,
                sandlog_core::StreamId::System => false,
            })
            .map(|envelope| envelope.kind.clone())
            .collect()
    };
    for acks in &all {
        for (ids, kind) in [
            (&acks.created, "session.created"),
            (&acks.wrote, "file.written"),
            (&acks.executed, "session.executed"),
            (&acks.pruned, "session.pruned"),
        ] {
            for id in ids {
                assert!(
                    kinds_of(id).iter().any(|k| k == kind),
                    "{kind} of {id} was acknowledged but is not in the log: {:?}",
                    kinds_of(id)
                );
            }
        }
    }
    let created: usize = all.iter().map(|acks| acks.created.len()).sum();
    // Seven workers ran every round; the killed one created one at least.
    assert!(created > 7 * 6, "{created} sessions created");

    for (node, dir) in &nodes {
        let engine = Engine::open(dir.path(), named_node(&clock, &db.url, node))?;
        let verified = engine.verify(None, &|_| {})?;
        assert!(verified.ok, "{verified:?}");
        // The replica is the shared log as it is now (the other node's
        // reconcile may have appended since `events` was read).
        let now = all_events(&shared)?;
        assert!(
            all_events(&replica(dir.path())?)? == now,
            "node {node}'s replica differs"
        );
        // Each node's reconcile finds its own disk as the log says, and
        // takes the other's sessions for none of its business.
        let reconciled = engine.reconcile(
            &sandlog_runtime::applier::ReconcileOptions {
                orphan_grace: std::time::Duration::ZERO,
                ..Default::default()
            },
            &|_, _| {},
        )?;
        // The one exception: the workspace the killed worker made for a
        // session it never recorded, an orphan the log does not know.
        let unexpected: Vec<_> = reconciled
            .actions
            .iter()
            .filter(|action| {
                !matches!(action, sandlog_runtime::applier::plan::Action::Orphan { known: false, dir_name }
                    if !events.iter().any(|event| event.stream == dir_name.stream()))
            })
            .collect();
        assert!(unexpected.is_empty(), "node {node}: {unexpected:?}");
    }

    // Node b prunes everything it may: only b's sessions go; a's active
    // sessions keep their directories.
    let b = Engine::open(nodes[1].1.path(), named_node(&clock, &db.url, "b"))?;
    let all_policy = sandlog_core::PrunePolicy::older_than(std::time::Duration::ZERO);
    let report = b.prune(&all_policy, false, &|_, _| {})?;
    assert!(!report.deleted_sessions.is_empty());
    for session_id in &report.deleted_sessions {
        assert_eq!(b.session(*session_id)?.node.as_deref(), Some("b"));
    }
    let mut a_active = 0;
    for session in b.sessions(Some(sandlog_projections::SessionStatus::Active))? {
        assert_eq!(session.node.as_deref(), Some("a"), "{session:?}");
        assert!(
            nodes[0]
                .1
                .path()
                .join("workspaces")
                .join(session.session_id.to_string())
                .is_dir()
        );
        a_active += 1;
    }
    assert!(a_active > 0);
    Ok(())
}

/// Options for node `node` of the shared log at `url`.
fn named_node(clock: &ManualClock, url: &str, node: &str) -> EngineOptions {
    EngineOptions {
        node: Some(node.to_owned()),
        ..node_options(clock, url)
    }
}

/// Sessions record their node; each node prunes, runs in, writes to,
/// deletes and reconciles only its own sessions' workspaces, and reads
/// every node's; a session that records no node is every node's; the
/// root keeps its node's name; bad names are refused by rule.
#[test]
fn each_node_touches_only_its_own_sessions() -> Result<(), FixtureError> {
    use sandlog_runtime::applier::ReconcileOptions;

    let db = pg::database()?;
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let a = Engine::open(dir_a.path(), named_node(&clock, &db.url, "node-a"))?;
    let b = Engine::open(dir_b.path(), named_node(&clock, &db.url, "node-b"))?;
    assert_eq!((a.node(), b.node()), ("node-a", "node-b"));
    let on_a = a.create_session(BTreeMap::new())?.session_id;
    a.write_file(on_a, &path("a.txt"), b"a", false)?;
    let on_b = b.create_session(BTreeMap::new())?.session_id;
    assert_eq!(b.session(on_a)?.node.as_deref(), Some("node-a"));
    assert_eq!(a.session(on_b)?.node.as_deref(), Some("node-b"));

    // Writes and runs on another node's session are refused by name.
    let refused = |result: Result<(), RuntimeError>| match result {
        Err(error @ RuntimeError::ForeignSession { .. }) => {
            let text = error.to_string();
            assert!(text.contains("node-a") && text.contains("node-b"), "{text}");
        }
        other => panic!("expected ForeignSession, got {other:?}"),
    };
    refused(
        b.execute(on_a, &ExecRequest::python("print(1)"))
            .map(|_| ()),
    );
    refused(b.write_file(on_a, &path("x.txt"), b"x", false).map(|_| ()));
    refused(b.delete_file(on_a, &path("a.txt"), false).map(|_| ()));
    refused(b.delete_session(on_a, "test").map(|_| ()));
    // Reads are any node's.
    assert_eq!(b.list_files(on_a, None)?.len(), 1);

    // Prune on b: its own session only, though a's is as old.
    clock.advance(std::time::Duration::from_secs(3600));
    let policy = sandlog_core::PrunePolicy::older_than(std::time::Duration::from_secs(60));
    let report = b.prune(&policy, false, &|_, _| {})?;
    assert_eq!(report.deleted_sessions, [on_b]);
    assert_eq!(
        a.session(on_a)?.status,
        sandlog_projections::SessionStatus::Active
    );
    assert!(
        dir_a
            .path()
            .join("workspaces")
            .join(on_a.to_string())
            .is_dir()
    );

    // Reconcile on b: a's session is not b's drift, and a directory named
    // like it on b's disk is left alone.
    let stray = dir_b.path().join("workspaces").join(on_a.to_string());
    std::fs::create_dir(&stray)?;
    let options = ReconcileOptions {
        orphan_grace: std::time::Duration::ZERO,
        ..ReconcileOptions::default()
    };
    let reconciled = b.reconcile(&options, &|_, _| {})?;
    assert!(reconciled.actions.is_empty(), "{:?}", reconciled.actions);
    assert!(reconciled.ignored.contains(&on_a.to_string()));
    assert!(stray.is_dir());
    assert!(a.reconcile(&options, &|_, _| {})?.actions.is_empty());

    // The root keeps its node's name; a bad one is refused by rule.
    assert_eq!(
        std::fs::read_to_string(dir_b.path().join("node"))?,
        "node-b\n"
    );
    drop(b);
    let again = Engine::open(dir_b.path(), node_options(&clock, &db.url))?;
    assert_eq!(again.node(), "node-b");
    drop(again);
    match Engine::open(dir_b.path(), named_node(&clock, &db.url, "no/slash")) {
        Err(error) => assert!(error.to_string().contains("node name"), "{error}"),
        Ok(_) => panic!("a node name with a slash was taken"),
    }
    Ok(())
}

/// A root that keeps its own log has one disk: a session recorded by
/// another node name is still its own (a root copied between hosts keeps
/// working).
#[test]
fn a_root_with_its_own_log_has_no_foreign_sessions() -> Result<(), FixtureError> {
    let clock = ManualClock::new(Timestamp::from_unix_micros(TEST_EPOCH_MICROS));
    let dir = tempfile::tempdir()?;
    let first = Engine::open(
        dir.path(),
        EngineOptions {
            node: Some("old-host".into()),
            create: true,
            ..options(&clock)
        },
    )?;
    let session = first.create_session(BTreeMap::new())?.session_id;
    drop(first);
    let moved = Engine::open(
        dir.path(),
        EngineOptions {
            node: Some("new-host".into()),
            ..options(&clock)
        },
    )?;
    assert_eq!(moved.session(session)?.node.as_deref(), Some("old-host"));
    let run = moved.execute(session, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.outcome, Outcome::Ok);
    Ok(())
}
